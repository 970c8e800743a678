//! The TUI's view of the outside world: a live session, or a finished
//! results folder to browse.

use super::Backend;
use super::state::{PickerEntry, Reported, ResultRow, RunSeries};
use crate::events::{Command, QueueItem, RunId, RunStatus};
use crate::report::{ReportOptions, aggregate};
use crate::session::Session;
use crate::store::EarlierRuns;
use crate::store::Ended;
use anyhow::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The rows and the effects of the folders with a finished run, from one
/// report.
fn reported(dirs: &[PathBuf]) -> Result<Reported> {
    let ready: Vec<PathBuf> = dirs
        .iter()
        .filter(|d| d.join("runs.parquet").is_file())
        .cloned()
        .collect();
    if ready.is_empty() {
        return Ok(Reported::default());
    }
    let report = aggregate(&ready, &ReportOptions::default())?;
    Ok(Reported {
        rows: result_rows(&report),
        effects: report.effects,
    })
}

/// Rows for the Results and Ladder screens, from a report.
fn result_rows(report: &crate::report::Report) -> Vec<ResultRow> {
    report
        .rows
        .iter()
        .filter(|r| r.n > 0)
        .map(|r| {
            let c = r.time();
            ResultRow {
                matrix: r.matrix.clone(),
                index: r.index,
                variant: r.variant.clone(),
                tricks: r
                    .tricks
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(String::from)
                    .collect(),
                delta_vs: r.delta_vs.clone(),
                n: r.n,
                noisy: r.noisy,
                data_bound: r
                    .loader_share
                    .filter(|&x| x > crate::report::DATA_BOUND_SHARE),
                clock: r.headline.name(),
                delta_time: r.delta_time,
                delta_acc: r.delta_acc,
                acc_mean: r.acc_tta_mean,
                // NaN below two runs: the table shows "–", not a zero-width CI.
                acc_ci95: r.acc_tta_ci95,
                p_target: r.p_target,
                ttt_mean: r.ttt_mean,
                time_mean: c.mean,
                time_ci95: c.ci95,
                speedup_prev: r.speedup_prev,
                speedup_first: r.speedup_first,
                finished: r.last_finished.clone(),
            }
        })
        .collect()
}

fn export_all(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for d in dirs.iter().filter(|d| d.join("runs.parquet").is_file()) {
        out.extend(crate::export::writeup::write(d)?);
    }
    Ok(out)
}

/// How a session takes matrices from the picker: as it took those it
/// started with (`--tiny`, `--data`, `--insist`: the session's own
/// [`crate::session::Rules`]), on its devices.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub session: crate::session::Rules,
    pub devices: Vec<String>,
}

impl Rules {
    /// The same rules with the tiny form on or off (the picker's `t`).
    pub fn tiny(&self, tiny: bool) -> Rules {
        let mut r = self.clone();
        r.session.tiny = tiny;
        r
    }
}

/// The matrix at `path` as this session would queue it, or the one-line
/// reason it would not: the session's own admission (`session::admit`),
/// unpriced (a probe for each listed file would slow the runs training).
fn admit(path: &Path, rules: &Rules) -> Result<crate::matrix::Matrix> {
    let m = rules.session.take(crate::matrix::load(path)?)?;
    let unpriced = crate::session::Pricing::Unpriced;
    let queued = crate::session::Entry::Queued;
    crate::session::admit(
        std::slice::from_ref(&m),
        &rules.devices,
        &rules.session,
        unpriced,
        queued,
    )?;
    Ok(m)
}

/// What the session's first device took for each matrix before, read once
/// in the background when the session opens (`None` until then).
pub type Prices = std::sync::Arc<std::sync::OnceLock<HashMap<(String, String), EarlierRuns>>>;

/// A matrix's time probed from the picker (the first device's step and
/// evaluation, as `matrix show --estimate` probes them), by (file, tiny).
#[derive(Clone, Debug)]
pub enum Probed {
    Running,
    Done(crate::matrix::Estimate),
    Failed(String),
}

/// The picker's probes so far, and whether one started or ended (or the
/// earlier sessions' prices arrived) since the picker last read them.
#[derive(Default)]
pub struct Probes {
    pub by_file: std::sync::Mutex<HashMap<(String, bool), Probed>>,
    pub ended: std::sync::atomic::AtomicBool,
    /// The earlier sessions' prices have been given to the picker.
    pub priced: std::sync::atomic::AtomicBool,
}

/// What a probe said, as the picker's line ends.
fn probed_cost(p: Option<&Probed>, first: &str, estimate_cmd: &str) -> String {
    match p {
        Some(Probed::Done(e)) => {
            let busy = e.inflation().map_or(String::new(), |x| {
                format!(
                    "; the machine was busy: idle, ×{x:.1} less at least, {} or less",
                    crate::matrix::human(e.idle_total_s())
                )
            });
            format!(
                ", about {} (probed: {:.2} s a step at batch {} on {}{busy})",
                crate::matrix::human(e.total_s),
                e.step_s,
                e.batch,
                e.device
            )
        }
        Some(Probed::Running) => {
            format!(", no earlier runs on {first}: probing a step to price it…")
        }
        Some(Probed::Failed(why)) => {
            format!(", no earlier runs on {first}, and its probe failed: {why}")
        }
        None => format!(
            ", no earlier runs on {first}: priced by a probe once no run is training (a probe beside a run would slow both), or now by `{estimate_cmd}`"
        ),
    }
}

/// What the picker says about a file before it is queued: runs, recipe,
/// devices and, from earlier sessions' runs of the same matrix on the same
/// data and the first device, about how long they take.
pub fn picker_entry(
    path: &Path,
    rules: &Rules,
    prices: Option<&HashMap<(String, String), EarlierRuns>>,
    probed: Option<&Probed>,
) -> PickerEntry {
    let (shown, tiny, devices) = (
        path.display().to_string(),
        rules.session.tiny,
        &rules.devices,
    );
    match admit(path, rules) {
        Ok(m) => {
            let runs = m.runs().len();
            let first = devices.first().map_or("cpu", String::as_str);
            let priced = prices.map(|p| p.get(&(m.name.clone(), m.data.clone())));
            let cost = match priced {
                None => ", pricing from earlier sessions…".to_string(),
                Some(Some(e)) => format!(
                    ", about {} ({} s a run over {} earlier runs on {first})",
                    crate::matrix::human(e.mean_s * runs as f64),
                    e.mean_s.round(),
                    e.n
                ),
                Some(None) => probed_cost(
                    probed,
                    first,
                    &format!(
                        "tricklab matrix show {shown}{} --estimate {first}",
                        if tiny { " --tiny" } else { "" }
                    ),
                ),
            };
            // A CPU emulates half precision: such variants run many times
            // slower than their fp32 neighbours (issue 52's walk: gpu-smoke's
            // fp16 variant at 9 img/s, 14 min against 39 s in fp32).
            let half = m
                .plans
                .iter()
                .filter(|(_, p)| p.precision.half.is_some() || p.precision.amp.is_some())
                .count();
            let emulated = if half > 0 && devices.iter().all(|d| d.starts_with("cpu")) {
                format!(
                    "; {half} of its {} variants run in half precision, which a CPU emulates slowly (gpu-smoke's fp16 variant: 14 min against 39 s in fp32 on a 2-core CPU)",
                    m.plans.len()
                )
            } else {
                String::new()
            };
            PickerEntry {
                about: format!(
                    "{runs} runs of {} on {}{}{cost}{emulated}",
                    m.recipe,
                    devices.join(","),
                    if tiny { " (--tiny)" } else { "" }
                ),
                path: shown,
                refused: false,
                unpriced: matches!(priced, Some(None)),
            }
        }
        Err(e) => {
            let why = crate::util::one_line(&e);
            PickerEntry {
                about: format!(
                    "refused: {}{}",
                    why.strip_prefix(&format!("{shown}: ")).unwrap_or(&why),
                    // Only where its --tiny form, which t switches to here,
                    // would be queued: not after a parse error.
                    if !tiny && admit(path, &rules.tiny(true)).is_ok() {
                        " (t here: rehearse its --tiny form)"
                    } else {
                        ""
                    }
                ),
                path: shown,
                refused: true,
                unpriced: false,
            }
        }
    }
}

pub struct SessionBackend {
    session: Option<Session>,
    prices: Prices,
    rules: Rules,
    probes: std::sync::Arc<Probes>,
}

impl SessionBackend {
    pub fn new(session: Session, rules: Rules) -> SessionBackend {
        let prices = Prices::default();
        let (root, first) = (
            session.results_root().to_path_buf(),
            rules
                .devices
                .first()
                .cloned()
                .unwrap_or_else(|| "cpu".into()),
        );
        let fill = prices.clone();
        // Off the UI thread: reading every earlier runs table can take a while.
        std::thread::spawn(move || {
            let label = crate::util::device::device_label(&first);
            let _ = fill.set(crate::store::earlier_runs(&root, &label));
        });
        SessionBackend {
            session: Some(session),
            prices,
            rules,
            probes: Default::default(),
        }
    }

    /// Stops the workers (cancelling a run in flight) and returns the results folders.
    pub fn finish(&mut self) -> Vec<PathBuf> {
        let Some(s) = self.session.take() else {
            return Vec::new();
        };
        s.send(Command::CancelCurrent);
        s.send(Command::Shutdown);
        let dirs = s.results_dirs();
        s.join();
        dirs
    }

    fn s(&mut self) -> &mut Session {
        self.session
            .as_mut()
            .expect("session is open while the UI runs")
    }
}

impl Backend for SessionBackend {
    fn send(&mut self, cmd: Command) {
        self.s().send(cmd);
    }

    fn enqueue(&mut self, matrix: &str, tiny: bool) -> Result<String> {
        let rules = self.rules.tiny(tiny);
        let m = rules
            .session
            .take(crate::matrix::load(Path::new(matrix))?)?;
        let name = m.name.clone();
        // Priced by the picker's probe of the file where one ended, so that
        // the scale guard says what `run` would.
        let key = (matrix.to_string(), tiny);
        let probed = self
            .probes
            .by_file
            .lock()
            .expect("probes")
            .get(&key)
            .cloned();
        let pricing = match &probed {
            Some(Probed::Done(e)) => crate::session::Pricing::Estimated(e),
            _ => crate::session::Pricing::Unpriced,
        };
        let n = self.s().enqueue_matrix(m, pricing)?;
        let after = if self.s().probing() {
            ", starting when the picker's time probe ends"
        } else {
            ""
        };
        Ok(format!(
            "queued {n} runs of {name} on {}{after} (D on the Queue screen removes them all)",
            self.rules.devices.join(",")
        ))
    }

    fn matrix_files(&self, tiny: bool) -> Vec<PickerEntry> {
        let rules = self.rules.tiny(tiny);
        let probed = self.probes.by_file.lock().expect("probes").clone();
        crate::matrix::matrix_files(Path::new("ablations"))
            .into_iter()
            .map(|p| {
                let key = (p.display().to_string(), tiny);
                picker_entry(&p, &rules, self.prices.get(), probed.get(&key))
            })
            .collect()
    }

    fn price(&mut self, entry: &PickerEntry, tiny: bool) {
        let key = (entry.path.clone(), tiny);
        // Refused files need no price; earlier runs price the others first.
        if !entry.unpriced {
            return;
        }
        if self
            .probes
            .by_file
            .lock()
            .expect("probes")
            .contains_key(&key)
        {
            return;
        }
        // Only while no run trains, and no run starts until it ends: a
        // probe beside a run would price and time their shared cores.
        let Some(hold) = self.s().hold_for_probe() else {
            return;
        };
        let (probes, rules) = (std::sync::Arc::clone(&self.probes), self.rules.tiny(tiny));
        let first = rules
            .devices
            .first()
            .cloned()
            .unwrap_or_else(|| "cpu".into());
        probes
            .by_file
            .lock()
            .expect("probes")
            .insert(key.clone(), Probed::Running);
        // The picker says "probing…" now.
        probes
            .ended
            .store(true, std::sync::atomic::Ordering::SeqCst);
        std::thread::spawn(move || {
            // A probe that panics is a failed probe, not a picker stuck at "probing…".
            let r = std::panic::catch_unwind(|| {
                admit(Path::new(&key.0), &rules).and_then(|m| crate::matrix::estimate(&m, &first))
            });
            drop(hold);
            let p = match r {
                Ok(Ok(e)) => Probed::Done(e),
                Ok(Err(e)) => Probed::Failed(crate::util::one_line(&e)),
                Err(_) => Probed::Failed("the probe panicked".into()),
            };
            probes.by_file.lock().expect("probes").insert(key, p);
            probes
                .ended
                .store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }

    fn picker_stale(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        // Earlier sessions' prices arrive once, after the picker may have
        // said "pricing…"; a probe may end at any time.
        let priced = self.prices.get().is_some() && !self.probes.priced.swap(true, SeqCst);
        self.probes.ended.swap(false, SeqCst) || priced
    }

    fn results(&mut self) -> Result<Reported> {
        reported(&self.s().results_dirs())
    }

    fn export(&mut self) -> Result<Vec<PathBuf>> {
        export_all(&self.s().results_dirs())
    }
}

/// Finished results folders, browsed together: their rows in one table,
/// and a ladder among them credits a design's factors on the Effects screen.
pub struct BrowseBackend {
    dirs: Vec<PathBuf>,
    /// Each folder's runs, in the order of `dirs`.
    runs: Vec<Vec<crate::store::RunRow>>,
}

impl BrowseBackend {
    pub fn open(dirs: Vec<PathBuf>) -> Result<BrowseBackend> {
        let mut runs = Vec::new();
        for d in &dirs {
            crate::store::read_manifest(d)?;
            runs.push(crate::store::folder_runs(d)?);
        }
        Ok(BrowseBackend { dirs, runs })
    }

    pub fn queue_items(&self) -> Vec<QueueItem> {
        self.runs
            .iter()
            .flatten()
            .map(|r| QueueItem {
                run: RunId {
                    matrix: r.matrix.clone(),
                    index: r.index as usize,
                    variant: r.variant.clone(),
                    repeat: r.repeat as usize,
                },
                seed: r.seed,
                status: match r.status {
                    Ended::Done => RunStatus::Done,
                    Ended::Failed => RunStatus::Failed,
                    Ended::Cancelled => RunStatus::Cancelled,
                },
                reason: r.reason.clone(),
            })
            .collect()
    }
}

impl BrowseBackend {
    /// Each finished run's stored curves, as the Live screen draws a run,
    /// with the reference its matrix names (from the folder's manifest);
    /// and the warnings for curves that could not be read.
    pub fn stored_series(&self) -> (Vec<(RunId, RunSeries)>, Vec<String>) {
        let mut warnings = Vec::new();
        let mut series = Vec::new();
        for (dir, runs) in self.dirs.iter().zip(&self.runs) {
            // The references the folder's session recorded.
            let record = crate::store::read_manifest(dir)
                .ok()
                .and_then(|m| crate::store::record_of(dir, &m).ok())
                .map(crate::store::Upgraded::record);
            for r in runs.iter().filter(|r| r.status == Ended::Done) {
                match crate::store::read_curves(dir, r) {
                    Ok((steps, epochs)) => {
                        let reference = record
                            .as_ref()
                            .and_then(|m| m.variant(r.index as usize)?.reference.clone());
                        series.push((r.id(), stored_run(r, &steps, epochs, reference)));
                    }
                    Err(e) => warnings.push(crate::util::one_line(&e)),
                }
            }
        }
        (series, warnings)
    }
}

/// A finished run drawn from its stored row and curves, as the events
/// drew it while it ran.
fn stored_run(
    row: &crate::store::RunRow,
    steps: &[crate::events::StepRow],
    epochs: Vec<crate::events::EpochRow>,
    reference: Option<crate::config::Reference>,
) -> RunSeries {
    let mut s = RunSeries {
        finished: true,
        final_acc: row.acc_tta.or(row.acc),
        target_acc: row.target_acc,
        device: row.device.clone(),
        reference,
        total_epochs: row
            .epochs
            .or(steps.last().map(|r| r.epoch))
            .unwrap_or(epochs.len() as f64),
        ..RunSeries::default()
    };
    s.push_steps(steps);
    for e in epochs {
        s.push_epoch(e);
    }
    s.step = row.steps.unwrap_or(s.step).max(s.step);
    s.total_steps = s.step;
    s.peak_mem_bytes = row.peak_mem_bytes.or(s.peak_mem_bytes);
    s
}

impl Backend for BrowseBackend {
    fn send(&mut self, _cmd: Command) {}

    fn enqueue(&mut self, _matrix: &str, _tiny: bool) -> Result<String> {
        anyhow::bail!("browsing a finished results folder: run `tricklab tui MATRIX` to queue runs")
    }

    fn matrix_files(&self, _tiny: bool) -> Vec<PickerEntry> {
        Vec::new()
    }

    fn results(&mut self) -> Result<Reported> {
        reported(&self.dirs)
    }

    fn export(&mut self) -> Result<Vec<PathBuf>> {
        export_all(&self.dirs)
    }
}
