//! `tricklab report` and `tricklab compare`.

use crate::report::{Clock, ReportOptions, aggregate, compare};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Results folders (results/<matrix>/<timestamp>).
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "md")]
    pub format: Format,
    /// Also write the charts (PNG and SVG) into this folder.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Clock for the time columns and speedups (default: each recipe's own
    /// convention, DAWNBench-style for Page's, airbench-style for airbench's).
    #[arg(long, value_enum)]
    pub clock: Option<Clock>,
    /// Target accuracy (default: the one the runs were made with).
    #[arg(long)]
    pub target: Option<f64>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Md,
    Csv,
    Json,
}

pub fn cmd_report(args: ReportArgs) -> Result<i32> {
    let r = aggregate(
        &args.results,
        &ReportOptions {
            target: args.target,
            clock: args.clock,
        },
    )?;
    // Before the table is printed: a folder that cannot be made is the only output.
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the plots folder {}: {e}; pass a writable folder to --plots",
                dir.display()
            )
        })?;
    }
    match args.format {
        Format::Md => print!("{}", r.to_markdown()),
        Format::Csv => print!("{}", r.to_csv()),
        Format::Json => println!("{}", r.to_json()?),
    }
    if let Some(dir) = args.plots {
        for p in crate::charts::write_all(&r, &args.results, &dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    pub base: PathBuf,
    pub candidate: PathBuf,
    /// Clock to compare (default: each recipe's own convention).
    #[arg(long, value_enum)]
    pub clock: Option<Clock>,
    /// Allowed slowdown as a fraction (0.05 = 5%; negative demands a speedup).
    #[arg(long, default_value_t = 0.05, allow_hyphen_values = true)]
    pub max_slowdown: f64,
    /// Allowed accuracy drop as a fraction (0.002 = 0.2 points).
    #[arg(long, default_value_t = 0.002)]
    pub max_acc_drop: f64,
}

/// Exit 0: no regression; 1: regression; 2: the comparison could not be made.
pub fn cmd_compare(args: CompareArgs) -> Result<i32> {
    let opts = ReportOptions {
        target: None,
        clock: args.clock,
    };
    let (base, cand) = match (
        aggregate(std::slice::from_ref(&args.base), &opts),
        aggregate(std::slice::from_ref(&args.candidate), &opts),
    ) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {}", crate::util::one_line(&e));
            return Ok(2);
        }
    };
    let rows = compare(&base, &cand, args.max_slowdown, args.max_acc_drop);
    if rows.is_empty() {
        eprintln!(
            "error: no variant name is shared by {} and {}",
            args.base.display(),
            args.candidate.display()
        );
        return Ok(2);
    }
    println!(
        "{:<32} {:>10} {:>10} {:>8} {:>9} {:>9}  verdict",
        "variant", "base s", "cand s", "Δtime", "base acc", "cand acc"
    );
    for r in &rows {
        println!(
            "{:<32} {:>10.2} {:>10.2} {:>7.1}% {:>8.2}% {:>8.2}%  {}",
            r.variant,
            r.base_time,
            r.cand_time,
            100.0 * (r.cand_time / r.base_time - 1.0),
            100.0 * r.base_acc,
            100.0 * r.cand_acc,
            r.regression
                .as_deref()
                .map(|w| format!("REGRESSION: {w}"))
                .unwrap_or_else(|| "ok".into())
        );
    }
    let bad = rows.iter().filter(|r| r.regression.is_some()).count();
    if bad > 0 {
        eprintln!("{bad} of {} variants regressed", rows.len());
        return Ok(1);
    }
    Ok(0)
}
