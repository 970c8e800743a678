//! `tricklab matrix show FILE...` and `tricklab matrix list`.

use super::load;
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

/// Matrix files in a folder, sorted.
pub fn matrix_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Each variant as decided: its overrides, the tricks on, its clock and the
/// resolved plan's values (`matrix show --format json`, and a results
/// folder's `manifest.json`, which reports read instead of today's recipes).
pub fn resolved_variants(m: &super::Matrix) -> Result<Vec<serde_json::Value>> {
    m.variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (cfg, plan) = crate::recipe::resolve_plan(&m.recipe, &v.overrides)?;
            Ok(serde_json::json!({
                "index": i,
                "name": v.name,
                "overrides": v.overrides.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "tricks": cfg.tricks_on(),
                "clock": plan.clock,
                "resolved": plan.resolved(),
            }))
        })
        .collect()
}

/// One matrix as `matrix show --format json` prints it: its header, every
/// variant with the values it resolves to, and its runs.
fn matrix_json(file: &std::path::Path, m: &super::Matrix) -> Result<serde_json::Value> {
    let variants = resolved_variants(m)?;
    Ok(serde_json::json!({
        "file": file,
        "name": m.name,
        "kind": m.kind.as_str(),
        "recipe": m.recipe,
        "data": m.data,
        "target": m.target,
        "description": m.description,
        "seeds": m.seeds,
        "adaptive": m.adaptive.map(|a| serde_json::json!({"ci_width": a.ci_width, "max": a.max})),
        "until_decided": m.until_decided.map(|u| serde_json::json!({
            "time": u.time, "acc": u.acc, "width_time": u.width_time, "width_acc": u.width_acc,
            "min": u.min, "max": u.max, "alpha": u.alpha, "looks": u.looks(),
        })),
        "budget_s": m.budget.map(|b| b.as_secs_f64()),
        "variants": variants,
        "runs": m.runs().len(),
        "design": m.design.as_ref().map(|d| serde_json::json!({
            "factors": d.factors,
            "configs": d.configs,
            "description": d.describe(),
        })),
        "warnings": m.warnings,
    }))
}

/// `until_decided` in words, as `matrix show` prints it.
pub fn until_words(u: &super::UntilDecided) -> String {
    let mut margins = Vec::new();
    if let Some(t) = u.time {
        margins.push(format!("time ±{:.1}% of the reference's mean", 100.0 * t));
    }
    if let Some(a) = u.acc {
        margins.push(format!("accuracy ±{:.2} points", 100.0 * a));
    }
    let mut widths = Vec::new();
    // Up to three decimals, without trailing zeros: 2%, 0.01%, 0.5 points.
    let short = |x: f64| {
        let t = format!("{x:.3}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if let Some(t) = u.width_time {
        widths.push(format!("{}% of the mean time", short(100.0 * t)));
    }
    if let Some(a) = u.width_acc {
        widths.push(format!("{} points of accuracy", short(100.0 * a)));
    }
    let mut goals = Vec::new();
    if !margins.is_empty() {
        goals.push(format!(
            "every asked Δ is decided (its interval excludes 0, or lies within {})",
            margins.join(" / ")
        ));
    }
    if !widths.is_empty() {
        goals.push(format!(
            "every asked Δ's 95% CI (a full factorial's Shapley values' too) is at most {} wide, end to end (a precision stop: no α spent)",
            widths.join(" / ")
        ));
    }
    let looks = if margins.is_empty() {
        format!("looks after rounds {} to {}", u.min, u.max)
    } else {
        format!(
            "α = {} split over {} looks (rounds {} to {}, Bonferroni over looks)",
            u.alpha,
            u.looks(),
            u.min,
            u.max
        )
    };
    format!(
        "a round of seeds at a time until {}, at most {} rounds; {looks}",
        goals.join(" and "),
        u.max,
    )
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
            format,
            ..
        } => {
            let priced = |m: &super::Matrix| -> Result<Option<super::Estimate>> {
                estimate
                    .as_deref()
                    .map(|d| super::estimate(m, d))
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
                    let m = if tiny { load(f)?.tiny()? } else { load(f)? };
                    let mut j = matrix_json(f, &m)?;
                    if let Some(e) = priced(&m)? {
                        j["estimate"] = serde_json::to_value(e)?;
                    }
                    out.push(j);
                }
                crate::util::print_json(serde_json::json!({ "matrices": out }));
                return Ok(0);
            }
            for f in files {
                let m = if tiny { load(&f)?.tiny()? } else { load(&f)? };
                println!(
                    "{} ({:?}, recipe {}, data {}, target {:.1}%)",
                    m.name,
                    m.kind,
                    m.recipe,
                    m.data,
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
                for line in m.design.iter().flat_map(super::Design::describe) {
                    println!("  {line}");
                }
                for (i, v) in m.variants.iter().enumerate() {
                    let cfg = crate::recipe::resolve(&m.recipe, &v.overrides)?;
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
