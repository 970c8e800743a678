//! One rank of a run spread over several processes. Its launcher
//! (tricklab's own gang, srun or torchrun) only sets the environment; this
//! process finds its place in it (`dist::env`), joins the others through
//! c10d (`dist::group`), and trains its share. Rank 0 reports the run on
//! stdout (`gang::Msg`); every rank's errors go to stderr as one line naming it.

use super::env::Launch;
use super::gang::Msg;
use super::group::{Collective, Part};
use crate::config::RunSpec;
use crate::train::{NeverStop, Outcome, TchTrainer};
use anyhow::{Context, Result, bail};
use sha2::Digest;
use std::path::PathBuf;

/// What `tricklab rank` is asked besides the environment.
#[derive(Debug, Default)]
pub struct RankOptions {
    /// The run, as the queue holds it (a RunSpec in JSON).
    pub spec: String,
    /// This rank's device; `local`: cuda:LOCAL_RANK where CUDA is, else the CPU.
    pub device: String,
    /// libtorch threads of a CPU rank (default: the cores shared among the
    /// ranks on this machine).
    pub threads: Option<usize>,
    /// Skip the gang's discarded warm-up run.
    pub no_warm_up: bool,
    /// Rank 0 saves the trained weights here (safetensors).
    pub save_weights: Option<PathBuf>,
}

pub fn run_from_env(args: &RankOptions) -> Result<i32> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(launch) = Launch::from_env(&env)? else {
        bail!(
            "`tricklab rank` is started by a launcher: `tricklab run` for a run with world_size > 1, srun, or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"
        );
    };
    let spec: RunSpec =
        serde_json::from_str(&args.spec).context("--spec is not a run (RunSpec JSON)")?;
    let rank0 = launch.rank == 0;
    // Rank 0 speaks the gang's protocol on its stdout; its worker reads it.
    let mut said = Ok(());
    let finished = train_rank(&spec, &launch, args, &mut |m| {
        if rank0 && said.is_ok() {
            said = super::gang::say(&m);
        }
    });
    said?;
    if let Some(s) = finished? {
        super::gang::say(&Msg::Finished(s))?;
    }
    Ok(0)
}

/// One rank of `spec`'s run in the gang `launch` describes, however it was
/// started (tricklab's own gang, torchrun or srun): its plan, its device
/// and threads, the rendezvous, the warm-up, the run. Rank 0 hears the
/// run's messages through `say` and gets its summary back; every error is
/// one line naming the rank.
pub fn train_rank(
    spec: &RunSpec,
    launch: &Launch,
    args: &RankOptions,
    say: &mut dyn FnMut(Msg),
) -> Result<Option<crate::events::RunSummary>> {
    let who = format!("rank {} of {}", launch.rank, launch.world);
    match train(spec, launch, args, say) {
        Ok(s) => Ok(s),
        // One line that names the rank, whatever failed.
        Err(e) => {
            let line = crate::util::one_line(&e);
            if names_a_rank(&line, launch.world) {
                bail!("{line}")
            }
            bail!("{who}: {line}")
        }
    }
}

/// Whether `line` starts by naming a rank of this gang (`rank 1 of 2 …`):
/// this rank's own, or the peer it failed on.
fn names_a_rank(line: &str, world: usize) -> bool {
    let Some(rest) = line.strip_prefix("rank ") else {
        return false;
    };
    let mut words = rest.splitn(4, ' ');
    let (r, of, n) = (words.next(), words.next(), words.next());
    r.is_some_and(|r| r.parse::<usize>().is_ok())
        && of == Some("of")
        && n.is_some_and(|n| n.trim_end_matches([':', ',']).parse::<usize>() == Ok(world))
}

fn train(
    spec: &RunSpec,
    launch: &Launch,
    args: &RankOptions,
    say: &mut dyn FnMut(Msg),
) -> Result<Option<crate::events::RunSummary>> {
    // The rank plans the run again from its spec, on purpose: a rank may be
    // started by srun or torchrun with no session behind it, and its plan
    // enters the fingerprint every rank compares at the rendezvous, which is
    // what catches a rank running another binary.
    let planned = crate::recipe::plan_run(spec)?;
    let device = match args.device.as_str() {
        "local" if tch::Cuda::is_available() => format!("cuda:{}", launch.local_rank),
        "local" => "cpu".to_string(),
        d => d.to_string(),
    };
    if device.starts_with("cpu") {
        let local = launch.local_world.max(1);
        let threads = args
            .threads
            .unwrap_or((crate::util::machine::cpu_cores() / local).max(1));
        tch::set_num_threads(threads.clamp(1, 1024) as i32);
    }
    let mut trainer = TchTrainer::new(&device)?;
    // The data as this rank holds it enters the fingerprint too: two nodes
    // with different imports under one name would otherwise train apart.
    let data = trainer.data_identity(&planned)?;
    let nccl = device.starts_with("cuda");
    let dist = Collective::join(
        launch,
        nccl,
        &fingerprint(spec, &planned.plan, &data, args, nccl)?,
        super::gang::timeout(),
    )?;
    let rank0 = launch.rank == 0;
    if rank0 {
        say(Msg::Hosts(dist.hosts.clone()));
    }
    // A collective that failed because a peer on this host is stopped
    // names that peer, as a session's gang does, not this healthy rank; a
    // peer on another host that never timed out is named through the store.
    let blame = |e: anyhow::Error| match dist.stopped_peer().or_else(|| dist.silent_peers(&e)) {
        Some(line) => anyhow::anyhow!(line),
        None => e,
    };
    if !args.no_warm_up {
        let line = trainer.warm_up_rank(&planned, &dist).map_err(blame)?;
        if rank0 {
            say(Msg::Log(format!("{line} ({} ranks)", launch.world)));
        }
    }
    trainer.save_weights = args.save_weights.clone().filter(|_| rank0);
    let outcome = trainer
        .run_rank(&planned, &dist, &NeverStop, &mut |ev| {
            if rank0 {
                say(Msg::Event(ev));
            }
        })
        .map_err(blame)?;
    Ok(match (rank0, outcome) {
        (true, Outcome::Finished(s)) => Some(s),
        _ => None,
    })
}

/// What every rank must share, part by part: the binary (its bytes), the
/// run (its spec and the plan this binary decided for it), the data (its
/// content hash as this rank holds it), and the per-rank options that
/// change what the ranks do together (the warm-up's collectives, the
/// backend). A mismatch stops every rank with one line naming the part.
fn fingerprint(
    spec: &RunSpec,
    plan: &crate::plan::RunPlan,
    data: &crate::record::DataId,
    args: &RankOptions,
    nccl: bool,
) -> Result<Vec<Part>> {
    let exe = std::env::current_exe()?;
    let mut h = sha2::Sha256::new();
    let mut f = std::fs::File::open(&exe)
        .with_context(|| format!("cannot read {} to fingerprint it", exe.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let binary = hex::encode(h.finalize());
    let mut h = sha2::Sha256::new();
    h.update(serde_json::to_vec(spec)?);
    h.update(format!("{plan:?}").as_bytes());
    let run = hex::encode(h.finalize());
    let part = |what: String, value: String, fix: &'static str| Part { what, value, fix };
    Ok(vec![
        part(
            "binary".into(),
            binary,
            "start every rank from the same build",
        ),
        part(
            "run".into(),
            run,
            "start every rank with the same run (recipe, settings, seed and data)",
        ),
        part(
            format!("data set `{}`", data.name),
            data.hash.clone(),
            "give every node the same copy of it (copy rank 0's import or folder over the other): under one name, the ranks hold other images",
        ),
        part(
            "warm-up".into(),
            if args.no_warm_up { "off" } else { "on" }.into(),
            "pass --no-warm-up to every rank or to none",
        ),
        part(
            "backend".into(),
            if nccl { "NCCL" } else { "Gloo" }.into(),
            "give every rank a device of one kind (all CUDA or all CPU)",
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank's line that names a rank of its gang (its own, or the peer it
    /// failed on) is not named again; any other line is.
    #[test]
    fn a_line_naming_a_rank_of_the_gang_is_kept_as_it_is() {
        assert!(names_a_rank("rank 1 of 2 (pid 7) stopped answering", 2));
        assert!(names_a_rank("rank 0 of 2: barrier failed", 2));
        assert!(!names_a_rank("rank 1 of 20 stopped", 2));
        assert!(!names_a_rank("batch_size 24 is larger", 2));
        assert!(!names_a_rank("rank one of 2", 2));
    }
}
