//! `tricklab recipes` and `tricklab recipe show`.

use crate::config::Override;
use crate::config::SETTINGS;
use crate::recipe::{recipes, resolve};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct RecipesArgs {}

pub fn cmd_recipes(_args: RecipesArgs) -> Result<i32> {
    for r in recipes() {
        println!("{:<22} {}", r.name, r.help);
    }
    println!(
        "\n`tricklab recipe show NAME` prints one resolved; settable with --set: {}",
        SETTINGS
            .iter()
            .map(|s| s.key)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct RecipeShowArgs {
    /// Always `show`.
    #[arg(value_parser = ["show"])]
    pub action: String,
    /// Recipe name (see `tricklab recipes`).
    pub name: String,
    /// Turn a trick on or off: NAME, NAME=on, NAME=off.
    #[arg(long = "trick", value_parser = Override::parse_trick)]
    pub tricks: Vec<Override>,
    /// Set a hyperparameter or trick parameter: KEY=VALUE.
    #[arg(long = "set", value_parser = Override::parse_set)]
    pub sets: Vec<Override>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_recipe_show(args: RecipeShowArgs) -> Result<i32> {
    let overrides: Vec<Override> = args.tricks.into_iter().chain(args.sets).collect();
    let c = resolve(&args.name, &overrides)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(0);
    }
    println!("recipe        {}", c.recipe);
    println!("arch          {:?} x{}", c.arch, c.width_mult);
    println!("epochs        {}", c.epochs);
    println!("batch_size    {}", c.batch_size);
    // Where a value is written at another batch, what this batch takes.
    let written_at = |n: usize| match n {
        0 => String::new(),
        n if n == c.batch_size => format!(", written at batch {n}"),
        n => format!(", written at batch {n}: × {}/{n} here", c.batch_size),
    };
    println!(
        "lr            {} (peak, mean-loss{}), schedule {:?}, peak at {:.3} of the run, final {}",
        c.lr,
        written_at(c.lr_batch),
        c.schedule,
        c.peak_epoch,
        c.final_lr_frac
    );
    println!(
        "optimizer     {:?}, momentum {}, weight_decay {} (per-step decay lr·wd{})",
        c.optimizer,
        c.momentum,
        c.weight_decay,
        written_at(c.wd_batch)
    );
    if c.train_per_class > 0 || c.test_per_class > 0 {
        println!(
            "data subset   {} train / {} test per class",
            c.train_per_class, c.test_per_class
        );
    }
    println!("tricks on:");
    for (k, t) in c.tricks.iter().filter(|(_, t)| t.on) {
        let params: Vec<String> = t
            .params
            .iter()
            .map(|(p, v)| {
                format!(
                    "{p}={}",
                    match v {
                        crate::config::Value::Num(x) => x.to_string(),
                        crate::config::Value::Text(s) => s.clone(),
                    }
                )
            })
            .collect();
        println!("  {k:<20} {}", params.join(" "));
    }
    Ok(0)
}
