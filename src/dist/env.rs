//! The launch contract, both ways: the variables a launcher sets for each
//! rank (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//! MASTER_ADDR, MASTER_PORT) and how a rank reads its place back from them,
//! or from srun's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the first
//! host of SLURM_JOB_NODELIST (srun sets no MASTER_*). tricklab's own gang
//! writes with [`Launch::env`] exactly what [`Launch::from_env`] reads, so
//! a rank cannot tell it from torchrun.

use anyhow::{Context, Result, bail};

/// Who this process is in a gang, from the launcher's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world: usize,
    /// This rank's index on its own machine: its GPU is `cuda:LOCAL_RANK`.
    pub local_rank: usize,
    /// Ranks on this machine.
    pub local_world: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// `torchrun` (the standard variables) or `srun`.
    pub launcher: &'static str,
    /// Where torchrun's agent already serves the store at MASTER_ADDR:
    /// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, its c10d
    /// rendezvous): every rank is its client, under this key prefix
    /// (`/worker/attempt_N`, as torch's env:// rendezvous reads it).
    pub agent_store: Option<String>,
}

/// MASTER_PORT under srun when none is set: torchrun's default.
pub const DEFAULT_PORT: u16 = 29500;

impl Launch {
    /// The gang this process belongs to, from `env` (a variable lookup):
    /// torchrun's variables first, then srun's; `None` when neither is set.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
        let num = |k: &str| -> Result<Option<usize>> {
            env(k)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .with_context(|| format!("{k}={v} is not a whole number"))
                })
                .transpose()
        };
        let port = || -> Result<u16> {
            match env("MASTER_PORT") {
                Some(p) => p
                    .trim()
                    .parse()
                    .with_context(|| format!("MASTER_PORT={p} is not a port number")),
                None => Ok(DEFAULT_PORT),
            }
        };
        let launch = if let (Some(rank), Some(world)) = (num("RANK")?, num("WORLD_SIZE")?) {
            let Some(addr) = env("MASTER_ADDR") else {
                bail!(
                    "RANK and WORLD_SIZE are set but MASTER_ADDR is not: set it to rank 0's host (torchrun sets all three)"
                );
            };
            Launch {
                rank,
                world,
                local_rank: num("LOCAL_RANK")?.unwrap_or(rank),
                local_world: num("LOCAL_WORLD_SIZE")?.unwrap_or(world),
                master_addr: addr,
                master_port: port()?,
                launcher: "torchrun",
                agent_store: (env("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True")).then(
                    || {
                        let attempt = env("TORCHELASTIC_RESTART_COUNT");
                        format!("/worker/attempt_{}", attempt.as_deref().unwrap_or("0"))
                    },
                ),
            }
        } else if let (Some(rank), Some(world)) = (num("SLURM_PROCID")?, num("SLURM_NTASKS")?) {
            let addr = match env("MASTER_ADDR") {
                Some(a) => a,
                None => {
                    let list = env("SLURM_JOB_NODELIST")
                        .or_else(|| env("SLURM_NODELIST"))
                        .context("srun set SLURM_PROCID but no SLURM_JOB_NODELIST: set MASTER_ADDR to rank 0's host")?;
                    first_host(&list)?
                }
            };
            Launch {
                rank,
                world,
                local_rank: num("SLURM_LOCALID")?.unwrap_or(0),
                // "2" or "2(x3)": the tasks on each node of the step.
                local_world: env("SLURM_STEP_TASKS_PER_NODE")
                    .and_then(|v| {
                        let d: String = v.chars().take_while(char::is_ascii_digit).collect();
                        d.parse().ok()
                    })
                    .unwrap_or(world),
                master_addr: addr,
                master_port: port()?,
                launcher: "srun",
                agent_store: None,
            }
        } else {
            return Ok(None);
        };
        if launch.world == 0 || launch.rank >= launch.world {
            bail!(
                "rank {} is not within the world size {}: check RANK/WORLD_SIZE (or SLURM_PROCID/SLURM_NTASKS)",
                launch.rank,
                launch.world
            );
        }
        Ok(Some(launch))
    }

    /// Rank `rank` of a gang of `world` on this machine, meeting on the
    /// loopback at `port`: what tricklab's own launcher starts.
    pub fn on_this_machine(rank: usize, world: usize, port: u16) -> Launch {
        Launch {
            rank,
            world,
            local_rank: rank,
            local_world: world,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            launcher: "torchrun",
            agent_store: None,
        }
    }

    /// The variables a launcher sets for this rank, torchrun's names: what
    /// [`Launch::from_env`] reads back.
    pub fn env(&self) -> [(&'static str, String); 6] {
        [
            ("RANK", self.rank.to_string()),
            ("WORLD_SIZE", self.world.to_string()),
            ("LOCAL_RANK", self.local_rank.to_string()),
            ("LOCAL_WORLD_SIZE", self.local_world.to_string()),
            ("MASTER_ADDR", self.master_addr.clone()),
            ("MASTER_PORT", self.master_port.to_string()),
        ]
    }

    /// A loopback rendezvous: Gloo then binds the loopback too, which is
    /// all one box needs and works where the host name does not resolve.
    pub fn is_loopback(&self) -> bool {
        self.master_addr == "localhost" || self.master_addr.starts_with("127.")
    }
}

/// The first host of a Slurm node list, as `scontrol show hostnames` expands
/// it (`node[03-04,07]` → `node03`).
pub fn first_host(nodelist: &str) -> Result<String> {
    let out = std::process::Command::new("scontrol")
        .args(["show", "hostnames", nodelist])
        .output()
        .with_context(|| {
            format!("cannot run scontrol to expand the node list `{nodelist}`: set MASTER_ADDR to rank 0's host")
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next().map(str::trim).filter(|h| !h.is_empty()) {
        Some(h) if out.status.success() => Ok(h.to_string()),
        _ => bail!(
            "scontrol could not expand the node list `{nodelist}`: set MASTER_ADDR to rank 0's host"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }
    #[test]
    fn torchrun_variables_then_sruns() {
        let t = Launch::from_env(&env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.2"),
            ("MASTER_PORT", "29501"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (t.rank, t.world, t.local_rank, t.master_port, t.launcher),
            (3, 8, 1, 29501, "torchrun")
        );
        assert!(!t.is_loopback());
        let s = Launch::from_env(&env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.rank, s.world, s.local_rank, s.master_port, s.launcher),
            (1, 2, 1, DEFAULT_PORT, "srun")
        );
        assert!(s.is_loopback());
        assert_eq!(Launch::from_env(&env(&[])).unwrap(), None);
        // torchrun's c10d rendezvous: its agent serves the store.
        let agent = Launch::from_env(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(agent.agent_store.as_deref(), Some("/worker/attempt_1"));
        assert_eq!(t.agent_store, None);
        let bad = Launch::from_env(&env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
        ]));
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("not within the world size 2")
        );
        let no_addr = Launch::from_env(&env(&[("RANK", "0"), ("WORLD_SIZE", "2")]));
        assert!(no_addr.unwrap_err().to_string().contains("MASTER_ADDR"));
    }

    #[test]
    fn what_a_launcher_writes_a_rank_reads_back() {
        for rank in 0..3 {
            let launch = Launch::on_this_machine(rank, 3, 29_611);
            let vars = launch.env();
            let lookup = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            assert_eq!(Launch::from_env(&lookup).unwrap(), Some(launch));
        }
        let s = Launch::from_env(&env(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
            ("MASTER_ADDR", "n1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((s.local_world, s.launcher), (2, "srun"));
    }
}
