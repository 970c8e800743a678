//! `tricklab nightly MATRIX --baseline DIR`: the unattended ladder. Runs the
//! matrix headless, compares the new folder with the baseline, appends the
//! night to a history and exits with compare's code (1 also when the night
//! itself could not finish: a failed run or a results disk that stopped it).

use super::report::{CompareArgs, compare_folders};
use crate::report::{Clock, history};
use crate::session::{Session, SessionOptions, tch_factory};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct NightlyArgs {
    /// The matrix file to run (ablations/*.toml).
    pub matrix: PathBuf,
    /// The results folder tonight is judged against.
    #[arg(long)]
    pub baseline: PathBuf,
    /// Where the history of nights is kept (history.csv and its chart).
    #[arg(long, default_value = "results/history")]
    pub history: PathBuf,
    /// Results root for tonight's folder.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Devices, one worker each: auto (every CUDA device, else the CPU), all,
    /// cuda:0,cuda:2, cpu, or cpu:N (N CPU workers sharing the cores).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub devices: Vec<String>,
    /// Threads per CPU worker (default: the cores shared among the CPU
    /// workers). CPU numbers depend on it: oneDNN splits its sums by thread.
    #[arg(long)]
    pub cpu_threads: Option<usize>,
    /// Override the matrix's repeats.
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Clock to compare (default: each recipe's own convention).
    #[arg(long, value_enum)]
    pub clock: Option<Clock>,
    /// Allowed slowdown as a fraction (--max-slowdown=-0.05 demands a speedup).
    #[arg(long, default_value_t = 0.05, allow_hyphen_values = true)]
    pub max_slowdown: f64,
    /// Allowed accuracy drop as a fraction.
    #[arg(long, default_value_t = 0.002)]
    pub max_acc_drop: f64,
    /// Exit 2 when a variant is inconclusive.
    #[arg(long)]
    pub fail_inconclusive: bool,
}

pub fn cmd_nightly(args: NightlyArgs) -> Result<i32> {
    let mut compare = CompareArgs {
        base: args.baseline.clone(),
        candidate: PathBuf::new(),
        clock: args.clock,
        max_slowdown: args.max_slowdown,
        max_acc_drop: args.max_acc_drop,
        allow_different: false,
        fail_inconclusive: args.fail_inconclusive,
    };
    // Everything that can be wrong before a night of training, checked first.
    crate::report::Thresholds {
        max_slowdown: args.max_slowdown,
        max_acc_drop: args.max_acc_drop,
    }
    .validate()
    .map_err(anyhow::Error::msg)?;
    crate::store::read_manifest(&args.baseline)
        .map_err(|e| anyhow::anyhow!("--baseline: {}", crate::util::one_line(&e)))?;
    std::fs::create_dir_all(&args.history).map_err(|e| {
        anyhow::anyhow!(
            "cannot create the history folder {}: {e}; pass a writable --history",
            args.history.display()
        )
    })?;

    let matrices = crate::matrix::load_all(std::slice::from_ref(&args.matrix), args.repeats)?;
    let opts = SessionOptions {
        results_root: args.results.clone(),
        devices: crate::util::device::resolve_devices(&args.devices)?,
        resume: None,
        keep_alive: false,
        min_free_bytes: crate::util::min_free_bytes(),
        cpu_threads: args.cpu_threads,
    };
    crate::session::preflight(&matrices, &opts.devices)?;
    let session = Session::start(matrices, opts, tch_factory())?;
    let tonight = session.results_dirs()[0].clone();
    let ran = crate::headless::run_headless(session)?;
    if ran == 130 {
        eprintln!(
            "interrupted: tonight's folder {} is not compared",
            tonight.display()
        );
        return Ok(130);
    }
    compare.candidate = tonight.clone();
    println!("\n# tonight against {}\n", args.baseline.display());
    let (code, rows, report) = compare_folders(&compare)?;
    if let Some(report) = report {
        let nights = history::nights_of(&tonight, &report, &rows)?;
        let file = history::append(&args.history, &nights)?;
        let all = history::load(&args.history)?;
        crate::charts::write_history(&all, &args.history, &Default::default())?;
        println!(
            "history: {} ({} nights); `tricklab report --history {}`",
            file.display(),
            {
                let mut n: Vec<&str> = all.iter().map(|n| n.night.as_str()).collect();
                n.dedup();
                n.len()
            },
            args.history.display()
        );
    }
    Ok(if code == 0 && ran != 0 { 1 } else { code })
}
