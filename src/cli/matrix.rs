//! `tricklab matrix show FILE...` and `tricklab matrix list`.

use crate::matrix::{load, matrix_files, until_words};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MatrixArgs {
    #[command(subcommand)]
    pub command: MatrixCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum MatrixCommand {
    /// Print the expanded variants and runs of matrix files without running them.
    Show {
        files: Vec<PathBuf>,
        /// As `run --tiny` would run them: the recipes' `tiny-` forms on the embedded data.
        #[arg(long)]
        tiny: bool,
        /// Price each matrix on DEVICE before it runs: its training steps and
        /// evaluations priced by a probe of its first run's net, with a range.
        #[arg(long, value_name = "DEVICE", num_args = 0..=1, default_missing_value = "cpu")]
        estimate: Option<String>,
        /// As `run --repeats N` would run them: seeds 0..N for every matrix.
        #[arg(long, value_name = "N")]
        repeats: Option<usize>,
        /// As `run --set KEY=VALUE` would run them. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = super::run::parse_set_arg)]
        sets: Vec<(String, String)>,
        /// As `run --force KEY=VALUE` would run them. Repeatable.
        #[arg(long = "force", value_name = "KEY=VALUE", value_parser = super::run::parse_set_arg)]
        forced: Vec<(String, String)>,
        /// From the measured spread of a results folder (a session, or
        /// results/<matrix> for its newest), the seeds each difference the
        /// matrix asks about needs to be resolved at 80% power, α = 0.05
        /// (noncentral t): paired by seed where the folder's seeds match,
        /// else two-sample; the replicates of the whole design for a
        /// factorial or fractional matrix.
        #[arg(long, value_name = "FOLDER")]
        power: Option<PathBuf>,
        /// The time difference to resolve, in seconds [default: 5% of the
        /// reference's mean time (of the design's mean for an effect)].
        #[arg(long, value_name = "SECONDS", requires = "power")]
        delta_time: Option<f64>,
        /// The accuracy difference to resolve, in points.
        #[arg(long, value_name = "POINTS", requires = "power", default_value_t = 0.5)]
        delta_acc: f64,
        #[arg(long, value_enum, default_value = "text")]
        format: crate::util::TextOrJson,
    },
    /// List the matrix files in a folder with their descriptions.
    List {
        #[arg(default_value = "ablations")]
        dir: PathBuf,
    },
}

#[allow(clippy::too_many_lines, reason = "one arm per matrix subcommand")]
pub fn cmd_matrix(args: MatrixArgs) -> Result<i32> {
    match args.command {
        MatrixCommand::Show { power: Some(_), .. } => {
            anyhow::bail!(
                "matrix show --power reads a results folder: run it through `tricklab matrix show`"
            )
        }
        MatrixCommand::Show {
            files,
            tiny,
            estimate,
            repeats,
            sets,
            forced,
            format,
            ..
        } => {
            // Loaded as `run` loads them, --repeats, --tiny, --set and --force included.
            let rules = crate::session::Rules {
                repeats,
                tiny,
                sets,
                forced,
                ..Default::default()
            };
            let load = |f: &PathBuf| -> Result<crate::matrix::Matrix> {
                Ok(rules
                    .load(std::slice::from_ref(f))?
                    .pop()
                    .expect("one file, one matrix"))
            };
            let priced = |m: &crate::matrix::Matrix| -> Result<Option<crate::matrix::Estimate>> {
                estimate
                    .as_deref()
                    .map(|d| crate::matrix::estimate(m, d))
                    .transpose()
            };
            if files.is_empty() {
                anyhow::bail!(
                    "name at least one matrix file, e.g. `tricklab matrix show ablations/demo-ladder.toml`"
                );
            }
            if format == crate::util::TextOrJson::Json {
                let mut out = Vec::new();
                for f in &files {
                    let m = load(f)?;
                    let mut j = crate::matrix::to_json(f, &m)?;
                    if let Some(e) = priced(&m)? {
                        j["estimate"] = serde_json::to_value(e)?;
                    }
                    out.push(j);
                }
                crate::util::print_json(serde_json::json!({ "matrices": out }));
                return Ok(0);
            }
            for f in files {
                let m = load(&f)?;
                let runs = match &m.script {
                    Some(s) => format!("script in {}", s.declared.dir.display()),
                    None => format!("recipe {}, data {}", m.recipe, m.data),
                };
                println!(
                    "{} ({:?}, {runs}, target {:.1}%)",
                    m.name,
                    m.kind,
                    100.0 * m.target
                );
                if !m.description.is_empty() {
                    println!("  {}", m.description);
                }
                match (m.adaptive, m.until_decided) {
                    (Some(a), _) => println!(
                        "  seeds: adaptive from {:?}, until the 95% CI of accuracy < {} (max {} runs per variant)",
                        m.seeds, a.ci_width, a.max
                    ),
                    (None, Some(u)) => println!("  seeds: {:?}, then {}", m.seeds, until_words(&u)),
                    (None, None) => println!("  seeds: {:?}", m.seeds),
                }
                if let Some(b) = m.budget {
                    println!("  budget: {:.0} s", b.as_secs_f64());
                }
                for line in m.design.iter().flat_map(crate::matrix::Design::describe) {
                    println!("  {line}");
                }
                if m.script.is_some() {
                    print_script_variants(&m);
                }
                for (i, (v, (cfg, _))) in m.variants.iter().zip(&m.plans).enumerate() {
                    let ov: Vec<String> = v.overrides.iter().map(ToString::to_string).collect();
                    println!(
                        "  {i:>2} {:<28} epochs {:<5} tricks on: {}",
                        v.name,
                        cfg.epochs,
                        cfg.tricks_on().join(",")
                    );
                    if !ov.is_empty() {
                        println!("     overrides: {}", ov.join(" "));
                    }
                }
                match m.until_decided {
                    Some(u) => println!(
                        "  {} runs to start, at most {}",
                        m.runs().len(),
                        u.max * m.variants.len()
                    ),
                    None => println!("  {} runs", m.runs().len()),
                }
                if let Some(e) = priced(&m)? {
                    println!("  estimate: {}", e.line(&m.name));
                }
                for w in &m.warnings {
                    println!("warn: {w}");
                }
            }
            Ok(0)
        }
        MatrixCommand::List { dir } => {
            if !dir.is_dir() {
                anyhow::bail!(
                    "{}: no such folder; matrices live in ablations/ (the default)",
                    dir.display()
                );
            }
            let files = matrix_files(&dir);
            if files.is_empty() {
                anyhow::bail!("no .toml matrix files in {}", dir.display());
            }
            for f in files {
                match load(&f) {
                    Ok(m) => println!(
                        "{:<40} {:<4} variants  {}",
                        f.display(),
                        m.variants.len(),
                        m.description
                    ),
                    Err(e) => println!("{:<40} ERROR {}", f.display(), crate::util::one_line(&e)),
                }
            }
            Ok(0)
        }
    }
}

/// Each script variant as it will run: its tricks, its whole command, the
/// environment the matrix adds and the patches made to a copy of its folder.
fn print_script_variants(m: &crate::matrix::Matrix) {
    // The same for every variant: said once, above them.
    if let Some(d) = m.variant_record(0).script().and_then(|s| s.data.as_ref()) {
        let per = |n: Option<usize>| n.map_or_else(|| "all".to_string(), |n| n.to_string());
        println!(
            "  {{data}}: `{}` exported as raw bytes ({} training, {} test images a class) to RESULTS/scripts/data/ before the first run",
            d.name,
            per(d.train_per_class),
            per(d.test_per_class)
        );
    }
    for i in 0..m.variants.len() {
        let v = m.variant_record(i);
        let Some(s) = v.script() else { continue };
        println!("  {i:>2} {:<28} tricks on: {}", v.name, v.tricks.join(","));
        let command = crate::script::declare::command_line(&s.argv);
        if s.world_size > 1 {
            println!(
                "     $ torchrun --standalone --nproc-per-node {} {command}",
                s.world_size
            );
        } else {
            println!("     $ {command}");
        }
        if !s.env.is_empty() {
            let env: Vec<String> = s.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("     env: {}", env.join(" "));
        }
        for p in &s.patches {
            println!(
                "     patch ({}): {}: {:?} -> {:?}{}",
                p.trick,
                p.file,
                p.find,
                p.replace,
                if p.count > 1 {
                    format!(" ({} times)", p.count)
                } else {
                    String::new()
                }
            );
        }
    }
}
