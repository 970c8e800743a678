//! `tricklab nightly MATRIX --baseline DIR`: the unattended ladder. Runs the
//! matrix headless, compares the new folder with the baseline, appends the
//! night to a history and exits with compare's code, or 1 for a failed run
//! and 3 for a night the machine stopped (a results disk that filled).

use crate::report::compared::{CompareOptions, compare_folders};
use crate::report::{Clock, history};
use crate::session::{Rules, Session, SessionOptions, tch_factory};
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
    /// cuda:0,cuda:2, cuda:0-7, cpu, or cpu:N (N CPU workers sharing the
    /// cores). Runs with world_size N take gangs of N devices.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub devices: Vec<String>,
    /// Threads per CPU worker (default: the cores shared among the CPU
    /// workers), 1 to 4 × the cores. CPU numbers depend on it: oneDNN
    /// splits its sums by thread.
    #[arg(long, value_parser = crate::util::device::parse_cpu_threads)]
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
    /// Exit 1 (a failed check) when a variant is inconclusive.
    #[arg(long)]
    pub fail_inconclusive: bool,
    /// Judge raw times, not times net of the night's drift on the control.
    #[arg(long)]
    pub absolute: bool,
    /// Leave runs flagged noisy out of the comparison and the history, on
    /// both sides (as `report --drop-noisy`); without it they count and are
    /// warned about.
    #[arg(long)]
    pub drop_noisy: bool,
    /// Run the matrix on this data set instead of its own (as `run --data`).
    #[arg(long)]
    pub data: Option<String>,
    /// Run even what the scale guard refuses (as `run --insist`).
    #[arg(long)]
    pub insist: bool,
}

#[allow(
    clippy::too_many_lines,
    reason = "the night in order: check, train, compare, record, report"
)]
pub fn cmd_nightly(args: NightlyArgs) -> Result<i32> {
    let mut compare = CompareOptions {
        base: args.baseline.clone(),
        candidate: PathBuf::new(),
        clock: args.clock,
        max_slowdown: args.max_slowdown,
        max_acc_drop: args.max_acc_drop,
        allow_different: false,
        fail_inconclusive: args.fail_inconclusive,
        absolute: args.absolute,
        drop_noisy: args.drop_noisy,
    };
    // Everything that can be wrong before a night of training, checked first.
    crate::report::Thresholds {
        max_slowdown: args.max_slowdown,
        max_acc_drop: args.max_acc_drop,
    }
    .validate()
    .map_err(anyhow::Error::msg)?;
    // The baseline must be a folder whose table reads and that has finished
    // runs, and the history one that can be appended to: not found out after
    // a night of training.
    crate::store::read_manifest(&args.baseline)
        .and_then(|_| crate::store::folder_runs(&args.baseline))
        .and_then(|runs| {
            let done = |r: &&crate::store::RunRow| r.status == crate::store::Ended::Done;
            if !runs.iter().any(|r| done(&r)) {
                anyhow::bail!(
                    "{} has no finished run to compare with",
                    args.baseline.display()
                )
            }
            if args.drop_noisy && runs.iter().filter(done).all(|r| r.noisy == Some(true)) {
                anyhow::bail!(
                    "every finished run of {} is flagged noisy, so --drop-noisy leaves nothing to compare with; drop the flag or pass a quieter baseline",
                    args.baseline.display()
                )
            }
            Ok(())
        })
        .map_err(|e| anyhow::anyhow!("--baseline: {}", crate::util::one_line(&e)))?;
    std::fs::create_dir_all(&args.history).map_err(|e| {
        anyhow::anyhow!(
            "cannot create the history folder {}: {e}; pass a writable --history",
            args.history.display()
        )
    })?;
    crate::util::check_storage(&args.history, 1 << 20)
        .and_then(|_| match args.history.join("history.csv").is_file() {
            true => history::load(&args.history).map(|_| ()),
            false => Ok(()),
        })
        .map_err(|e| anyhow::anyhow!("--history: {}", crate::util::one_line(&e)))?;

    let rules = Rules {
        repeats: args.repeats,
        data: args.data.clone(),
        insist: args.insist,
        ..Default::default()
    };
    let matrices = rules.load(std::slice::from_ref(&args.matrix))?;
    let opts = SessionOptions {
        results_root: args.results.clone(),
        devices: crate::util::device::resolve_devices(&args.devices)?,
        resume: None,
        keep_alive: false,
        min_free_bytes: crate::util::min_free_bytes(),
        cpu_threads: args.cpu_threads,
    };
    let (session, estimates) = Session::open(matrices, opts, &rules, tch_factory())?;
    for note in estimates {
        eprintln!("{note}");
    }
    let tonight = session.results_dirs()[0].clone();
    let ran = crate::headless::run_headless(session)?;
    let stopped = |phase: &str| -> Option<i32> {
        crate::util::signals::stopping().then(|| {
            eprintln!(
                "{}: {phase}; tonight's folder {} keeps every finished run (`tricklab compare {} {}` judges it later)",
                crate::util::signals::name(),
                tonight.display(),
                args.baseline.display(),
                tonight.display()
            );
            crate::util::signals::exit_code()
        })
    };
    if let Some(code) = stopped("tonight is neither compared nor added to the history") {
        return Ok(code);
    }
    compare.candidate = tonight.clone();
    println!("\n# tonight against {}\n", args.baseline.display());
    let compared = compare_folders(&compare)?;
    let code = super::report::print(&compared, &compare, crate::util::TextOrJson::Text);
    let (rows, report) = (compared.rows, compared.report);
    if let Some(code) = stopped("compared, but not added to the history") {
        return Ok(code);
    }
    if let Some(report) = report {
        let nights = history::nights_of(&tonight, &report, &rows)?;
        let file = history::append(&args.history, &nights)?;
        if let Some(code) =
            stopped("compared and added to the history, whose chart was not redrawn")
        {
            return Ok(code);
        }
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
    // A failure of the night (3) outranks its verdict; a failed run (1) is one.
    Ok(code.max(ran))
}
