//! `tricklab run`: a session of matrices, consumed by the TUI or, with
//! `--headless`, by progress bars.

use crate::session::{Rules, Session, SessionOptions, tch_factory};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Matrix files (ablations/*.toml).
    pub matrices: Vec<PathBuf>,
    /// Progress bars instead of the TUI.
    #[arg(long)]
    pub headless: bool,
    /// Results root; each matrix gets results/<matrix>/<timestamp>/.
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
    /// Continue a results folder: finished runs are skipped.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Override the number of repeats (seeds 0..N) of every matrix.
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Run every matrix on this data set instead of its own (an imported name,
    /// a folder or an archive; `tricklab data list`).
    #[arg(long)]
    pub data: Option<String>,
    /// Run only shard i of N (1-based) of each matrix's runs, into its own
    /// folder; `tricklab merge` joins the shards.
    #[arg(long, value_parser = parse_shard_arg)]
    pub shard: Option<(usize, usize)>,
    /// Rehearse at CPU scale: each matrix on its recipe's `tiny-` form and the
    /// embedded data, into results/<matrix>-tiny/.
    #[arg(long)]
    pub tiny: bool,
    /// A setting for every variant of every matrix, added to its base `set`
    /// (a variant's own setting of the key still wins): `--set epochs=2`,
    /// a script's parameter or `trick.param` alike. Repeatable; recorded.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set_arg)]
    pub sets: Vec<(String, String)>,
    /// A trick's state or a setting for every variant of every matrix,
    /// applied after each variant's own changes, so it wins over them:
    /// `--force fp16=off` rehearses a GPU leave-one-out in fp32 on a CPU
    /// (its `- fp16` variant then trains as `all`). Repeatable; recorded.
    #[arg(long = "force", value_name = "KEY=VALUE", value_parser = parse_set_arg)]
    pub forced: Vec<(String, String)>,
    /// Run even what the scale guard refuses: a full-size recipe on the
    /// embedded subset, or a matrix estimated at hours on a CPU.
    #[arg(long)]
    pub insist: bool,
}

pub(super) fn parse_set_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((k.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(format!("`{s}`: write KEY=VALUE, e.g. --set epochs=2")),
    }
}

fn parse_shard_arg(s: &str) -> Result<(usize, usize), String> {
    crate::matrix::parse_shard(s)
}

pub fn cmd_run(args: RunArgs) -> Result<i32> {
    if args.matrices.is_empty() && args.resume.is_none() {
        anyhow::bail!(
            "name a matrix file (e.g. ablations/demo-ladder.toml) or --resume a results folder"
        );
    }
    if let Some(dir) = &args.resume {
        let conflicting: Vec<&str> = [
            (args.repeats.is_some(), "--repeats"),
            (args.data.is_some(), "--data"),
            (args.tiny, "--tiny"),
            (!args.sets.is_empty(), "--set"),
            (!args.forced.is_empty(), "--force"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        if !conflicting.is_empty() {
            anyhow::bail!(
                "--resume {} continues the folder with the runs and options it was made with; {} would change them: drop {}, or start a new session",
                dir.display(),
                conflicting.join(" and "),
                if conflicting.len() == 1 { "it" } else { "them" }
            );
        }
    }
    if args.shard.is_some() && args.resume.is_some() {
        anyhow::bail!(
            "--shard with --resume: a resumed folder keeps the shard it was made with; drop --shard"
        );
    }
    let rules = Rules {
        repeats: args.repeats,
        tiny: args.tiny,
        data: args.data.clone(),
        sets: args.sets.clone(),
        forced: args.forced.clone(),
        shard: args.shard,
        insist: args.insist,
    };
    let matrices = rules.load(&args.matrices)?;
    let opts = SessionOptions {
        results_root: args.results.clone(),
        devices: crate::util::device::resolve_devices(&args.devices)?,
        resume: args.resume.clone(),
        keep_alive: !args.headless,
        min_free_bytes: crate::util::min_free_bytes(),
        cpu_threads: args.cpu_threads,
    };
    if !args.headless {
        return crate::tui::run_session(matrices, opts, rules, None);
    }
    let (session, estimates) = Session::open(matrices, opts, &rules, tch_factory())?;
    for note in estimates {
        eprintln!("{note}");
    }
    crate::headless::run_headless(session)
}
