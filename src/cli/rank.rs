//! `tricklab rank`: one rank of a run spread over several processes
//! (`dist::rank`), as its launcher starts it.

use crate::dist::rank::{RankOptions, run_from_env};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// The run, as the queue holds it (a RunSpec in JSON).
    #[arg(long)]
    pub spec: String,
    /// This rank's device; `local`: cuda:LOCAL_RANK where CUDA is, else the CPU.
    #[arg(long, default_value = "local")]
    pub device: String,
    /// libtorch threads of a CPU rank (default: the cores shared among the
    /// ranks on this machine).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Skip the gang's discarded warm-up run.
    #[arg(long)]
    pub no_warm_up: bool,
    /// Rank 0 saves the trained weights here (safetensors), to set a gang's
    /// net beside a one-process run's.
    #[arg(long)]
    pub save_weights: Option<PathBuf>,
}

pub fn cmd_rank(args: RankArgs) -> Result<i32> {
    run_from_env(&RankOptions {
        spec: args.spec,
        device: args.device,
        threads: args.threads,
        no_warm_up: args.no_warm_up,
        save_weights: args.save_weights,
    })
}
