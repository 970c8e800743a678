//! `tricklab train`: one run, headless, an epoch table and a summary.

use crate::config::{Override, RunSpec};
use crate::dist::gang::Msg;
use crate::dist::rank::{RankOptions, train_rank};
use crate::events::{Event, LogLevel, RunId};
use crate::train::{NeverStop, Outcome, TchTrainer, Trainer};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Base recipe (see `tricklab recipes`).
    #[arg(long, default_value = "tiny-page-resnet9")]
    pub recipe: String,
    /// Turn a trick on or off: NAME, NAME=on, NAME=off.
    #[arg(long = "trick", value_parser = Override::parse_trick)]
    pub tricks: Vec<Override>,
    /// Set a hyperparameter or trick parameter: KEY=VALUE (e.g. epochs=10, celu.alpha=0.3).
    #[arg(long = "set", value_parser = Override::parse_set)]
    pub sets: Vec<Override>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Data set: embedded, synthetic[:N], an imported name, a folder or an archive.
    #[arg(long, default_value = "embedded")]
    pub data: String,
    /// auto (the first CUDA device, else the CPU), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Target accuracy for time-to-target (0-1).
    #[arg(long, default_value_t = 0.94)]
    pub target: f64,
    /// Skip the discarded warm-up: the run then pays the process's one-time
    /// costs in its clocks (a cold start, as a first run without it would).
    #[arg(long)]
    pub no_warm_up: bool,
    /// Save the trained weights here (safetensors).
    #[arg(long)]
    pub save_weights: Option<std::path::PathBuf>,
}

#[allow(
    clippy::too_many_lines,
    reason = "one run and its epoch table, in the order printed"
)]
pub fn cmd_train(args: TrainArgs) -> Result<i32> {
    if !(0.0..=1.0).contains(&args.target) {
        anyhow::bail!(
            "--target {} must be an accuracy between 0 and 1 (e.g. 0.94)",
            args.target
        );
    }
    // A FIFO or device given for the weights is refused before the run, not
    // after it, when the minutes are spent.
    if let Some(p) = &args.save_weights {
        crate::util::output_target(p)?;
    }
    // Under torchrun or srun (their variables set), this process is one
    // rank of one run over the ranks the launcher made.
    let env = |k: &str| std::env::var(k).ok();
    let launch = crate::dist::env::Launch::from_env(&env)?;
    let mut spec = RunSpec {
        id: RunId {
            matrix: "train".into(),
            index: 0,
            variant: args.recipe.clone(),
            repeat: 0,
        },
        seed: args.seed,
        recipe: args.recipe.clone(),
        overrides: args.tricks.into_iter().chain(args.sets).collect(),
        data: args.data.clone(),
        target_acc: args.target,
        reference: None,
        device: None,
    };
    if let Some(note) = crate::recipe::unscaled_epoch_settings(&spec.recipe, &spec.overrides)? {
        eprintln!("warning: {note}");
    }
    if let Some(l) = &launch {
        // The launcher's world size is the run's.
        let world =
            Override::parse_set(&format!("world_size={}", l.world)).map_err(anyhow::Error::msg)?;
        spec.overrides.push(world);
    }
    let rank0 = launch.as_ref().is_none_or(|l| l.rank == 0);
    let gang = launch
        .as_ref()
        .map(|l| format!(", world size {} ({})", l.world, l.launcher))
        .unwrap_or_default();
    let mut print = |ev: Event| match ev {
        Event::RunStarted {
            total_steps,
            total_epochs,
            device,
            record,
            ..
        } => {
            println!(
                "{} on {device}{gang}: {total_epochs} epochs, {total_steps} steps, data {}{}",
                spec.recipe,
                record.data.name,
                // A streamed run: where its loader decodes, from what.
                record
                    .loader
                    .as_ref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            );
            println!(
                "{:>5} {:>7} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9}",
                "epoch",
                "steps",
                "train loss",
                "train acc",
                "test acc",
                "tta acc",
                "train s",
                "eval s",
                "img/s"
            );
        }
        Event::Epoch { row, .. } => println!(
            "{:>5} {:>7} {:>10.4} {:>8.2}% {:>9} {:>9} {:>8.2} {:>7.2} {:>9.0}",
            row.epoch,
            row.steps,
            row.train_loss,
            100.0 * row.train_acc,
            // NaN: an epoch the recipe does not evaluate (`eval_every`).
            if row.test_acc.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}%", 100.0 * row.test_acc)
            },
            row.test_acc_tta
                .map(|a| format!("{:.2}%", 100.0 * a))
                .unwrap_or_else(|| "-".into()),
            row.train_s,
            row.eval_s,
            row.images_per_s
        ),
        Event::Log { level, message } if level != LogLevel::Info => {
            eprintln!("{}: {message}", level.as_str());
        }
        _ => {}
    };
    let outcome = match &launch {
        Some(l) => {
            let opts = RankOptions {
                spec: String::new(),
                // `auto` under a launcher: this rank's own GPU (LOCAL_RANK).
                device: if args.device == "auto" {
                    "local".into()
                } else {
                    args.device.clone()
                },
                threads: None,
                no_warm_up: args.no_warm_up,
                save_weights: args.save_weights.clone(),
            };
            let summary = train_rank(&spec, l, &opts, &mut |m| match m {
                Msg::Event(ev) => print(ev),
                Msg::Log(line) => println!("{line}"),
                Msg::Unreadable(line) => eprintln!("warning: {line}"),
                Msg::Hosts(hosts) => println!("{}", crate::dist::group::placement(&hosts)),
                Msg::Finished(_) => {}
            })?;
            match summary {
                Some(s) => Outcome::Finished(s),
                // Ranks other than 0 say nothing: rank 0 reports the run.
                None if !rank0 => return Ok(0),
                None => Outcome::Cancelled,
            }
        }
        None => {
            let device = crate::util::device::resolve_devices(std::slice::from_ref(&args.device))?
                .swap_remove(0);
            let mut trainer = TchTrainer::new(&device)?;
            let planned = crate::recipe::plan_run(&spec)?;
            // The same untimed warm-up a session's worker does, so the clocks compare.
            if !args.no_warm_up
                && let Some(msg) = trainer.warm_up(&planned, &NeverStop)
            {
                println!("{msg}");
            }
            trainer.save_weights = args.save_weights.clone();
            trainer.run(&planned, &NeverStop, &mut print)?
        }
    };
    match outcome {
        Outcome::Finished(s) => {
            let c = &s.clocks;
            println!(
                "accuracy {:.2}% (with TTA {:.2}%)",
                100.0 * s.acc,
                100.0 * s.acc_tta
            );
            println!(
                "clocks: DAWNBench-style {:.2} s | airbench-style {:.2} s | hlb-style {:.2} s | eval {:.2} s | data prep {:.2} s | whitening {:.2} s | wall {:.2} s",
                c.dawn_s, c.airbench_s, c.hlb_s, c.eval_s, c.prep_s, c.whiten_s, c.wall_s
            );
            if c.loader_s > 0.0 {
                println!(
                    "loader: {:.2} s of the {:.2} s of training ({:.1}%) went to building batches or waiting for them",
                    c.loader_s,
                    c.hlb_s,
                    100.0 * c.loader_s / c.hlb_s.max(1e-9)
                );
            }
            if let Some(t) = s.ranks.first().and_then(|r| r.ddp) {
                println!(
                    "DDP (rank 0, a sampled step): backward {:.1} ms, gradient all-reduce {:.1} ms, {:.1} ms of it under the backward, {:.1} ms exposed",
                    1e3 * t.backward_s,
                    1e3 * t.allreduce_s,
                    1e3 * t.hidden_s,
                    1e3 * t.exposed_s()
                );
            }
            match s.time_to_target_s {
                Some(t) => println!(
                    "time to {:.1}%: {t:.2} s (epoch {})",
                    100.0 * args.target,
                    s.epoch_to_target.unwrap_or(0)
                ),
                None => println!("target {:.1}% not reached", 100.0 * args.target),
            }
            if let Some(p) = &args.save_weights {
                println!("{}", weights_line(p)?);
            }
            Ok(0)
        }
        Outcome::Cancelled => Ok(1),
    }
}

/// Where the run's weights went: the file itself when `path` is a link.
fn weights_line(path: &std::path::Path) -> Result<String> {
    use anyhow::Context;
    let file = std::fs::canonicalize(path).with_context(|| {
        format!(
            "{}: the weights saved there are gone (removed meanwhile?)",
            path.display()
        )
    })?;
    let bytes = std::fs::metadata(&file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    Ok(format!("weights: {} ({bytes} bytes)", file.display()))
}
