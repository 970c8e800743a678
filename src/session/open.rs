//! How a matrix enters a session, the same for `run`, `nightly`, the TUI's
//! start and its picker: taken as the user asked (`Rules`: repeats, the
//! tiny form, the data, a shard), then admitted ([`admit`]) or refused
//! before any folder exists if it cannot run (the preflight: devices, data,
//! batch sizes; the gang check: world sizes against the devices) or would
//! run at the wrong scale (the scale guard: a full-size recipe on the
//! embedded subset, hours on a CPU), then started or queued.

use super::worker::Factory;
use super::{Session, SessionOptions};
use crate::matrix::Matrix;
use anyhow::Result;
use std::path::PathBuf;

/// How a session takes matrices: those it starts with, and (in the TUI)
/// those queued later from the picker, alike.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// Replaces each matrix's seeds with 0..N (`--repeats`).
    pub repeats: Option<usize>,
    /// Each recipe's `tiny-` form at CPU scale (`--tiny`).
    pub tiny: bool,
    /// Every matrix on this data set (`--data`).
    pub data: Option<String>,
    /// Added to every matrix's base `set` (`--set KEY=VALUE`).
    pub sets: Vec<(String, String)>,
    /// Applied to every variant after its own changes (`--force KEY=VALUE`).
    pub forced: Vec<(String, String)>,
    /// Only shard i of N (1-based) of each matrix's runs (`--shard`).
    pub shard: Option<(usize, usize)>,
    /// Queue what the scale guard refuses (`--insist`).
    pub insist: bool,
}

impl Rules {
    /// The matrix files as this session takes them.
    pub fn load(&self, paths: &[PathBuf]) -> Result<Vec<Matrix>> {
        crate::matrix::load_all(paths, self.repeats)?
            .into_iter()
            .map(|m| self.take(m))
            .collect()
    }

    /// A loaded matrix as this session takes it: its tiny form, the
    /// `--set`s and `--force`s, on the data, its shard, in that order (the tiny form names its own data,
    /// which `--data` then replaces).
    pub fn take(&self, m: Matrix) -> Result<Matrix> {
        let m = if self.tiny { m.tiny()? } else { m };
        let m = m.with_sets(&self.sets)?.with_forced(&self.forced)?;
        let mut m = crate::matrix::on_data(vec![m], self.data.as_deref())?.remove(0);
        if let Some((i, n)) = self.shard {
            m = m.with_shard(i, n)?;
        }
        Ok(m)
    }
}

/// How the scale guard prices a full-size matrix on a CPU.
#[derive(Clone, Copy, Debug)]
pub enum Pricing<'a> {
    /// A probe of its first run's step (`run`, `nightly`, the TUI's start).
    Probe,
    /// An estimate already made: the picker's probe of the file.
    Estimated(&'a crate::matrix::Estimate),
    /// None yet: the picker lists files while runs may train, and a probe
    /// beside a run would slow both; a full-size recipe is refused flat
    /// unless --insist.
    Unpriced,
}

/// Where a matrix enters a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// With the session: its devices are checked too, once. A resumed
    /// folder's matrix was priced when it was made.
    Start { resumed: bool },
    /// Queued while it runs (the TUI's picker), on the devices it started on.
    Queued,
}

/// The one admission into a session, in one order: the preflight, the gang
/// check, then the scale guard priced by `pricing`. `run`, `nightly`, the
/// TUI's start and its picker all pass here, so a matrix one refuses, the
/// others refuse with the same line. Returns the lines to show: the
/// preflight's warnings and the guard's estimates.
pub fn admit(
    matrices: &[Matrix],
    devices: &[String],
    rules: &Rules,
    pricing: Pricing<'_>,
    entry: Entry,
) -> Result<Vec<String>> {
    let mut notes = match entry {
        Entry::Start { .. } => check_devices(devices)?,
        Entry::Queued => Vec::new(),
    };
    notes.extend(preflight(matrices)?);
    gangs(matrices, devices)?;
    if entry != (Entry::Start { resumed: true }) {
        notes.extend(
            scale_guard(matrices, devices, rules.insist, pricing)?
                .into_iter()
                .map(|l| format!("estimate: {l}")),
        );
    }
    Ok(notes)
}

impl Session {
    /// Opens a session on `matrices` as `rules` took them: [`admit`]ted
    /// (a probe prices them), then the folders, queue and workers. Returns
    /// the session and the lines to show.
    pub fn open(
        matrices: Vec<Matrix>,
        opts: SessionOptions,
        rules: &Rules,
        factory: Factory,
    ) -> Result<(Session, Vec<String>)> {
        let mut notes = admit(
            &matrices,
            &opts.devices,
            rules,
            Pricing::Probe,
            Entry::Start {
                resumed: opts.resume.is_some(),
            },
        )?;
        let cores = crate::util::machine::cpu_cores();
        notes.extend(crate::util::device::cpu_threads_warning(
            opts.cpu_threads,
            cores,
        ));
        let mut s = Session::start(matrices, opts, factory)?;
        s.rules = rules.clone();
        Ok((s, notes))
    }
}

/// Resident memory a CPU worker or rank holds: libtorch, the net, its data
/// and optimiser state (about 530 MB measured per rank of a tiny run on
/// this project's 2-core CI machine, issue 52); a full-size recipe holds more.
const CPU_WORKER_BYTES: u64 = 530 << 20;

/// Memory the kernel can give new processes without swapping
/// (`MemAvailable` in /proc/meminfo); `None` where unread.
fn memory_available() -> Option<u64> {
    crate::util::machine::proc_bytes("/proc/meminfo", "MemAvailable")
}

/// CPU workers against the machine: more than its memory holds is refused
/// with both numbers; more than its cores is a warning (they share them,
/// so each runs slower and the seconds measure the sharing).
fn cpu_room(devices: &[String], cores: usize, available: Option<u64>) -> Result<Option<String>> {
    let n = devices.iter().filter(|d| d.starts_with("cpu")).count();
    let need = n as u64 * CPU_WORKER_BYTES;
    if let Some(free) = available
        && n > 1
        && need > free
    {
        anyhow::bail!(
            "--devices: {n} CPU workers need about {} MiB ({} MiB each) but this machine has {} MiB available: pass fewer (at most cpu:{})",
            need >> 20,
            CPU_WORKER_BYTES >> 20,
            free >> 20,
            (free / CPU_WORKER_BYTES).max(1)
        );
    }
    Ok((n > cores).then(|| {
        format!(
            "warn: --devices: {n} CPU workers on {cores} cores share them, so every run is slower and its seconds measure the sharing; pass cpu:{cores} or fewer for times to compare"
        )
    }))
}

/// The workers' devices and the machine's room for them, checked when a
/// session starts. Returns its warnings.
fn check_devices(devices: &[String]) -> Result<Vec<String>> {
    for d in devices {
        crate::util::device::parse_device(d).map_err(|e| anyhow::anyhow!("--devices: {e}"))?;
    }
    Ok(cpu_room(
        devices,
        crate::util::machine::cpu_cores(),
        memory_available(),
    )?
    .into_iter()
    .collect())
}

/// What the real engine would fail every run on, checked before a session
/// creates any results folder: each matrix's device and data, and its
/// batch sizes against its data. Returns its warnings.
fn preflight(matrices: &[Matrix]) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for m in matrices {
        let origin = m.origin();
        if let Some(d) = &m.device {
            crate::util::device::parse_device(d).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        }
        if let Some(s) = &m.script {
            notes.extend(
                crate::script::preflight(&s.runs).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?,
            );
            continue;
        }
        crate::data::locate(&m.data).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        let mut data = crate::matrix::DataCounts::new(&m.data);
        data.precheck = true;
        for (v, (_, plan)) in m.variants.iter().zip(&m.plans) {
            let n = data
                .train_images(plan)
                .map_err(|e| anyhow::anyhow!("{origin}: {e:#}"))?;
            if plan.batch_size > n {
                anyhow::bail!(
                    "{origin}: variant `{}` has batch_size {} but data set `{}` gives it {n} training images: lower batch_size (at most {n}) or use more data",
                    v.name,
                    plan.batch_size,
                    m.data
                );
            }
        }
        notes.extend(data.notes.iter().map(|n| format!("{origin}: {n}")));
    }
    Ok(notes)
}

/// Hours a CPU session may be estimated at before it is refused as a
/// matrix sized for a GPU (`TRICKLAB_MAX_CPU_HOURS` overrides it).
fn max_cpu_hours() -> f64 {
    std::env::var("TRICKLAB_MAX_CPU_HOURS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2.0)
}

/// A full-size recipe on the embedded 4,000-image subset because the matrix
/// names no data: refused unless `insist`.
fn guard_data(m: &Matrix, insist: bool) -> Result<()> {
    if m.recipe.starts_with("tiny-") || m.data_named || insist {
        return Ok(());
    }
    let origin = m.origin();
    anyhow::bail!(
        "{origin}: its recipe `{}` is full-size but the matrix names no data, so it would train on the embedded 4,000-image subset: pass --data (e.g. `--data cifar10` after `tricklab data fetch cifar10`), rehearse it with --tiny, or pass --insist",
        m.recipe
    )
}

/// Refuses, before anything starts, what would train at the wrong scale: a
/// full-size recipe on the embedded 4,000-image subset because the matrix
/// names no data, or a matrix sized for a GPU on a CPU, estimated by a
/// probe of the first run's net (`matrix::estimate`) or as `pricing` says.
/// `insist` runs them anyway. Returns the estimate lines.
fn scale_guard(
    matrices: &[Matrix],
    devices: &[String],
    insist: bool,
    pricing: Pricing<'_>,
) -> Result<Vec<String>> {
    let cpu_only = devices.iter().all(|d| d.starts_with("cpu"));
    let mut notes = Vec::new();
    for m in matrices {
        let origin = m.origin();
        // A script's scale is its own: it is priced by its earlier runs.
        if m.recipe.starts_with("tiny-") || m.script.is_some() {
            continue;
        }
        guard_data(m, insist)?;
        if !cpu_only {
            continue;
        }
        if m.runs().is_empty() {
            continue;
        }
        let probed;
        let e = match pricing {
            Pricing::Estimated(e) => e,
            Pricing::Unpriced if insist => continue,
            Pricing::Unpriced => anyhow::bail!(
                "{origin}: {} runs of the full-size recipe `{}` on the CPU would take hours each: rehearse its --tiny form, or `tricklab run {origin} --headless --insist`",
                m.runs().len(),
                m.recipe
            ),
            Pricing::Probe => {
                probed = crate::matrix::estimate(m, "cpu")
                    .map_err(|e| anyhow::anyhow!("{origin}: {e:#}"))?;
                &probed
            }
        };
        let line = e.line(&origin);
        // A probe on a busy machine is judged at the idle machine's price,
        // and its line says how busy it was (Estimate::line).
        if e.idle_total_s() > max_cpu_hours() * 3600.0 && !insist {
            anyhow::bail!(
                "{line}: a matrix sized for a GPU; rehearse it with --tiny (each recipe's tiny form, seconds a run), run it where a GPU is (--devices cuda), or pass --insist to run it here"
            );
        }
        notes.push(line);
    }
    Ok(notes)
}

/// The session's devices in gangs as large as the largest world size any
/// queued run asks for (`cuda:0-7` and world_size 4: two gangs, two runs at
/// a time). A run asking for more devices than the session has is refused
/// here, before any folder is made.
pub(super) fn gangs(matrices: &[Matrix], devices: &[String]) -> Result<Vec<Vec<String>>> {
    let mut size = 1;
    for m in matrices {
        for spec in m.runs() {
            let world = m.world_size(spec.id.index);
            if world > devices.len() {
                anyhow::bail!(
                    "{}: run `{}` asks for world_size {world} but the session has {} device(s) ({}): pass --devices with at least {world} (e.g. --devices cpu:{world} or cuda:0-{}), or lower world_size",
                    m.origin(),
                    spec.id,
                    devices.len(),
                    devices.join(","),
                    world - 1
                );
            }
            size = size.max(world);
        }
    }
    Ok(devices.chunks_exact(size).map(<[String]>::to_vec).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_workers_are_checked_against_the_cores_and_the_memory() {
        let cpus = |n: usize| vec!["cpu".to_string(); n];
        let gib = 1u64 << 30;
        assert_eq!(super::cpu_room(&cpus(2), 2, Some(24 * gib)).unwrap(), None);
        let w = super::cpu_room(&cpus(8), 2, Some(24 * gib))
            .unwrap()
            .unwrap();
        assert!(
            w.contains("8 CPU workers on 2 cores") && w.contains("cpu:2"),
            "{w}"
        );
        let e = super::cpu_room(&cpus(64), 2, Some(24 * gib))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("64 CPU workers need about 33920 MiB (530 MiB each)")
                && e.contains("24576 MiB available")
                && e.contains("at most cpu:46"),
            "{e}"
        );
        // GPUs are not counted; an unread /proc/meminfo refuses nothing.
        let mut gpus = vec!["cuda:0".to_string(); 8];
        gpus.push("cpu".into());
        assert_eq!(super::cpu_room(&gpus, 2, Some(gib)).unwrap(), None);
        assert!(super::cpu_room(&cpus(64), 2, None).unwrap().is_some());
        assert!(super::memory_available().is_some_and(|b| b > 0));
    }
}
