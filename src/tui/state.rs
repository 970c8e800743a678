//! Everything the TUI shows, derived from events only. Rendering reads it;
//! `update` writes it.

use crate::config::Reference;
use crate::events::{EpochRow, LogLevel, QueueItem, RunId, RunStatus};
use crate::report::effects::{Analysis, Effects, Estimate};
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Queue,
    Live,
    Results,
    Ladder,
    Tricks,
    Log,
    Effects,
}

impl Tab {
    /// In key order (`1` is the first): a new screen goes last, so that
    /// the digits learnt for the others keep their screens.
    pub const ALL: [Tab; 7] = [
        Tab::Queue,
        Tab::Live,
        Tab::Results,
        Tab::Ladder,
        Tab::Tricks,
        Tab::Log,
        Tab::Effects,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Queue => "Queue",
            Tab::Live => "Live",
            Tab::Results => "Results",
            Tab::Ladder => "Ladder",
            Tab::Tricks => "Tricks",
            Tab::Log => "Log",
            Tab::Effects => "Effects",
        }
    }
}

/// The curves of one run, decimated so a long run never grows without bound.
#[derive(Clone, Debug, Default)]
pub struct RunSeries {
    pub loss: Vec<(f64, f64)>,
    pub lr: Vec<(f64, f64)>,
    /// One curve per BN layer: mean |gamma| against epoch.
    pub bn_scale: Vec<Vec<(f64, f64)>>,
    pub acc: Vec<(f64, f64)>,
    pub epochs: Vec<EpochRow>,
    pub images_per_s: f64,
    /// Of the last chunk's wall time, the share the steps spent in the loader.
    pub loader_share: f64,
    /// The streaming loader's own images a second, over the last epoch.
    pub loader_images_per_s: Option<f64>,
    /// Where a streamed run's loader decodes and what it reads (`cpu
    /// decode from a store (10% JPEG, the rest raw; at most 400 px)`).
    pub loader_from: Option<String>,
    pub peak_mem_bytes: Option<u64>,
    pub step: u64,
    pub total_steps: u64,
    pub total_epochs: f64,
    pub target_acc: f64,
    pub started: Option<Instant>,
    /// Time the run stood paused, and since when it stands paused now: kept
    /// out of its step rate, so that a paused run's ETA stands still.
    pub paused_total: std::time::Duration,
    pub paused_since: Option<Instant>,
    pub finished: bool,
    pub final_acc: Option<f64>,
    pub device: String,
    /// The variant this run is read against (from the matrix).
    pub reference: Option<Reference>,
    /// The recipe's own clock, which the Log reports the run's time on.
    pub clock: Option<crate::config::Clock>,
}

/// Most points kept per curve; beyond it every other point is dropped.
pub const MAX_POINTS: usize = 2000;

pub fn push_decimated(v: &mut Vec<(f64, f64)>, p: (f64, f64)) {
    v.push(p);
    if v.len() > MAX_POINTS {
        let kept: Vec<(f64, f64)> = v.iter().step_by(2).copied().collect();
        *v = kept;
    }
}

impl RunSeries {
    /// Seconds left for this run, from its own step rate.
    pub fn eta_s(&self) -> Option<f64> {
        self.started?;
        if self.finished || self.step == 0 || self.total_steps == 0 {
            return None;
        }
        let rate = self.step as f64 / self.active_s(Instant::now())?.max(1e-3);
        Some((self.total_steps.saturating_sub(self.step)) as f64 / rate)
    }

    /// Adds logged steps to the curves (a loss that is not a positive
    /// number has no place on the log axis).
    pub fn push_steps(&mut self, rows: &[crate::events::StepRow]) {
        for r in rows {
            self.step = r.step;
            if r.loss.is_finite() && r.loss > 0.0 {
                push_decimated(&mut self.loss, (r.epoch, r.loss));
            }
            push_decimated(&mut self.lr, (r.epoch, r.lr));
            if self.bn_scale.len() < r.bn_scale.len() {
                self.bn_scale.resize(r.bn_scale.len(), Vec::new());
            }
            for (layer, v) in r.bn_scale.iter().enumerate() {
                push_decimated(&mut self.bn_scale[layer], (r.epoch, *v as f64));
            }
        }
    }

    /// Adds an epoch's row; its accuracy (with TTA where there is one) to
    /// the curve, unless the epoch had no evaluation.
    pub fn push_epoch(&mut self, row: EpochRow) {
        let acc = row.test_acc_tta.unwrap_or(row.test_acc);
        if acc.is_finite() {
            self.acc.push((row.epoch as f64, acc));
        }
        self.images_per_s = row.images_per_s;
        self.loader_share = row.loader_s / row.train_s.max(1e-9);
        self.loader_images_per_s = row.loader_images_per_s.or(self.loader_images_per_s);
        self.peak_mem_bytes = row.peak_mem_bytes.or(self.peak_mem_bytes);
        self.epochs.push(row);
    }

    /// Seconds the run has been training by `now`: since its start, less
    /// the time it stood paused.
    pub fn active_s(&self, now: Instant) -> Option<f64> {
        let paused = self.paused_total
            + self.paused_since.map_or(std::time::Duration::ZERO, |p| {
                now.saturating_duration_since(p)
            });
        let spent = now.saturating_duration_since(self.started?);
        Some(spent.saturating_sub(paused).as_secs_f64())
    }

    /// The run stops or starts standing paused at `now`.
    pub fn set_paused(&mut self, paused: bool, now: Instant) {
        match (paused, self.paused_since) {
            (true, None) if !self.finished => self.paused_since = Some(now),
            (false, Some(since)) => {
                self.paused_total += now.saturating_duration_since(since);
                self.paused_since = None;
            }
            _ => {}
        }
    }

    /// Training seconds until the first evaluation at or above the target.
    pub fn time_to_target(&self) -> Option<f64> {
        let mut t = 0.0;
        for e in &self.epochs {
            t += e.train_s;
            if e.test_acc_tta.unwrap_or(e.test_acc) >= self.target_acc {
                return Some(t);
            }
        }
        None
    }

    /// Where this run's accuracy is heading, read off the reference runs:
    /// their mean final accuracy plus this run's lead over their mean at the
    /// same evaluation. Returns (projected, reference's final); a finished
    /// run's projection is its result.
    pub fn projected_final(&self, reference: &[&RunSeries]) -> Option<(f64, f64)> {
        let finals: Vec<f64> = reference
            .iter()
            .filter_map(|r| r.acc.last().map(|p| p.1))
            .collect();
        let ref_final = mean(&finals)?;
        let &(_, now) = self.acc.last()?;
        if self.finished {
            return Some((now, ref_final));
        }
        let k = self.acc.len() - 1;
        let ref_now = mean(
            &reference
                .iter()
                .filter_map(|r| r.acc.get(k).map(|p| p.1))
                .collect::<Vec<_>>(),
        )?;
        Some(((ref_final + now - ref_now).clamp(0.0, 1.0), ref_final))
    }

    pub fn progress(&self) -> f64 {
        if self.finished {
            1.0
        } else if self.total_steps == 0 {
            0.0
        } else {
            (self.step as f64 / self.total_steps as f64).min(1.0)
        }
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The point-wise mean of curves drawn on the same x grid (seeds of one
/// variant log the same steps), over the length they all have.
pub fn mean_curve(curves: &[&[(f64, f64)]]) -> Vec<(f64, f64)> {
    let Some(n) = curves.iter().map(|c| c.len()).min() else {
        return Vec::new();
    };
    (0..n)
        .map(|i| {
            let y = curves.iter().map(|c| c[i].1).sum::<f64>() / curves.len() as f64;
            (curves[0][i].0, y)
        })
        .collect()
}

/// What the Live screen draws, dimmed, behind the current run.
pub struct LiveCompare<'a> {
    /// The other finished seeds of the same variant.
    pub seeds: Vec<&'a RunSeries>,
    /// The reference variant: its role, its name and its finished runs.
    pub reference: Option<(String, String, Vec<&'a RunSeries>)>,
}

/// One row of the Results screen (filled from the report by the backend).
#[derive(Clone, Debug, PartialEq)]
pub struct ResultRow {
    /// One table per matrix: rows of different matrices never mix.
    pub matrix: String,
    pub index: usize,
    pub variant: String,
    /// The trick keys it trained with: the Tricks tab reads what one
    /// trick bought where it is the only difference from `delta_vs`.
    pub tricks: Vec<String>,
    /// The variant its deltas are against (a ladder's previous rung).
    pub delta_vs: Option<String>,
    pub n: usize,
    /// Of the `n`, runs flagged noisy (a busy machine, a throttled GPU).
    pub noisy: usize,
    /// The share of its training loop spent getting batches, where over
    /// the 5% that makes a variant data-bound (its time measures the loader).
    pub data_bound: Option<f64>,
    /// The clock of `time_mean` (the recipe's own convention).
    pub clock: &'static str,
    /// Δ seconds and Δ accuracy against the rung it is read against.
    pub delta_time: Option<crate::report::delta::Delta>,
    pub delta_acc: Option<crate::report::delta::Delta>,
    pub acc_mean: f64,
    pub acc_ci95: f64,
    pub p_target: f64,
    /// Mean seconds to the target over the runs that reached it.
    pub ttt_mean: Option<f64>,
    /// Mean full-run time of the variant on `clock`.
    pub time_mean: f64,
    pub time_ci95: f64,
    /// Previous rung's mean time / this rung's.
    pub speedup_prev: Option<f64>,
    pub speedup_first: Option<f64>,
    /// The UTC day its last run finished, where recorded.
    pub finished: Option<String>,
}

/// What one trick bought in one matrix: the rung where it alone was added
/// to (or taken from) the variant the rung is read against.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured<'a> {
    pub matrix: &'a str,
    pub variant: &'a str,
    /// Added (a ladder or add-one rung) or removed (leave-one-out).
    pub added: bool,
    pub row: &'a ResultRow,
}

impl ResultRow {
    /// Where this row differs from `reference` by exactly `key`.
    fn isolates(&self, reference: &ResultRow, key: &str) -> Option<bool> {
        let has = |r: &ResultRow| r.tricks.iter().any(|t| t == key);
        fn others<'r>(r: &'r ResultRow, key: &str) -> Vec<&'r String> {
            let mut v: Vec<&String> = r.tricks.iter().filter(|t| *t != key).collect();
            v.sort();
            v
        }
        (has(self) != has(reference) && others(self, key) == others(reference, key))
            .then(|| has(self))
    }
}

impl AppState {
    /// Every finished rung that isolates trick `key`, in results order.
    pub fn measured(&self, key: &str) -> Vec<Measured<'_>> {
        self.results
            .iter()
            .filter_map(|r| {
                let vs = r.delta_vs.as_deref()?;
                let reference = self
                    .results
                    .iter()
                    .find(|x| x.matrix == r.matrix && x.variant == vs)?;
                let added = r.isolates(reference, key)?;
                Some(Measured {
                    matrix: &r.matrix,
                    variant: &r.variant,
                    added,
                    row: r,
                })
            })
            .collect()
    }
}

/// What one pass of the report gives the screens, read again when a run
/// ends: the Results, Ladder and Tricks rows, and the Effects of the
/// designed matrices (one aggregation for both, never one a frame).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reported {
    pub rows: Vec<ResultRow>,
    pub effects: Vec<Effects>,
}

/// One line of the Effects screen: the report's effects flattened in the
/// order they are drawn, so that ↑↓ move through them and the view draws a
/// window of them. One row is one line whatever the width (a line that does
/// not fit is cut, never wrapped), so the keys can count them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EffectRow<'a> {
    /// A designed matrix's heading: its name, runs, clock and folder.
    Matrix(&'a Effects),
    /// A line of what `matrix show` says of its design.
    Design(&'a str),
    /// A response (time or accuracy), its unit and how its intervals were made.
    Response(&'a Analysis),
    /// The column heads over a response's effects, or over its Shapley values.
    Header { shapley: bool },
    /// A main effect or an interaction, or a factor's Shapley value; `of`
    /// is its response, whose unit and largest estimate the line needs.
    Term { of: &'a Analysis, x: &'a Estimate },
    /// Under a response whose estimates a ladder credits too: what the
    /// ladder Δ column is (which rungs) and what its `!` means.
    Ladder(&'a Analysis),
    /// Why part of a response could not be estimated.
    Note(&'a str),
}

/// One designed matrix's lines on the Effects screen.
fn matrix_rows(e: &Effects) -> Vec<EffectRow<'_>> {
    let mut out = vec![EffectRow::Matrix(e)];
    out.extend(e.design.iter().map(|d| EffectRow::Design(d)));
    for a in &e.analyses {
        out.push(EffectRow::Response(a));
        for (shapley, xs) in [(false, &a.effects), (true, &a.shapley)] {
            if !xs.is_empty() {
                out.push(EffectRow::Header { shapley });
                out.extend(xs.iter().map(|x| EffectRow::Term { of: a, x }));
            }
        }
        if a.effects
            .iter()
            .chain(&a.shapley)
            .any(|x| x.ladder.is_some())
        {
            out.push(EffectRow::Ladder(a));
        }
        out.extend(a.notes.iter().map(|n| EffectRow::Note(n)));
    }
    out
}

/// A response's unit and the factor from its stored values to that unit:
/// seconds as they are, accuracy (a fraction) in points.
pub fn response_unit(a: &Analysis) -> (&'static str, f64) {
    if a.response == "accuracy" {
        ("points", 100.0)
    } else {
        ("s", 1.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Rung,
    Accuracy,
    Time,
    TimeToTarget,
}

impl SortKey {
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Rung => SortKey::Accuracy,
            SortKey::Accuracy => SortKey::Time,
            SortKey::Time => SortKey::TimeToTarget,
            SortKey::TimeToTarget => SortKey::Rung,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SortKey::Rung => "rung",
            SortKey::Accuracy => "accuracy",
            SortKey::Time => "time",
            SortKey::TimeToTarget => "time-to-target",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Overlay {
    None,
    Help,
    ConfirmQuit,
    /// Matrix files to pick from, and the selected one (each file as it
    /// would be queued: in its `--tiny` form when `AppState::picker_tiny`).
    Picker {
        files: Vec<PickerEntry>,
        selected: usize,
    },
}

/// A matrix file in the picker, and what queueing it would do, said before
/// it is queued: how many runs of which recipe on which devices, or why it
/// would be refused.
#[derive(Clone, Debug, PartialEq)]
pub struct PickerEntry {
    pub path: String,
    pub about: String,
    /// Enter would be refused (the reason is `about`).
    pub refused: bool,
    /// No earlier runs price it: the picker's probe may.
    pub unpriced: bool,
}

#[derive(Clone, Debug)]
pub struct LogLine {
    pub level: LogLevel,
    pub text: String,
}

pub struct AppState {
    pub tab: Tab,
    pub overlay: Overlay,
    pub queue: Vec<QueueItem>,
    pub queue_selected: usize,
    pub runs: BTreeMap<RunId, RunSeries>,
    pub current: Option<RunId>,
    pub results: Vec<ResultRow>,
    /// The effects of each designed matrix among the results (filled with
    /// `results`, from the same report).
    pub effects: Vec<Effects>,
    /// The Effects screen's selected line (of `effect_rows`).
    pub effects_selected: usize,
    pub sort: SortKey,
    pub results_selected: usize,
    pub tricks_selected: usize,
    pub log: Vec<LogLine>,
    pub paused: bool,
    pub drained: bool,
    /// A one-line message in the footer (export paths, errors).
    pub status: String,
    /// The footer message as first seen, and when: it expires after a few
    /// seconds so that the queue's ETA shows again.
    pub status_seen: Option<(String, Instant)>,
    pub no_color: bool,
    /// Browse-only: a finished results folder with no worker behind it.
    pub browse_only: bool,
    pub results_dir: Option<String>,
    pub quit: bool,
    /// Quitting was confirmed while a run was in progress: what the session is
    /// doing until its worker stops (shown on every screen).
    pub quitting: Option<String>,
    /// Set by every change; the loop renders only when it is set.
    pub dirty: bool,
    /// Mean wall seconds of the finished runs, for the queue ETA.
    pub finished_wall: Vec<f64>,
    /// Draw the reference variant and the other seeds behind the live run.
    pub overlays: bool,
    /// The picker queues matrices in their `--tiny` form (`t` in the
    /// picker; starts as the session's `--tiny`).
    pub picker_tiny: bool,
    /// The overlay the help screen was opened over (the picker's `?`),
    /// shown again when the help closes.
    pub under_help: Option<Box<Overlay>>,
}

impl AppState {
    /// Runs in progress, one per busy worker: (device, run, fraction done).
    pub fn busy_workers(&self) -> Vec<(&str, &RunId, f64)> {
        self.runs
            .iter()
            .filter(|(_, r)| r.started.is_some() && !r.finished)
            .map(|(id, r)| {
                let done = r.step as f64 / r.total_steps.max(1) as f64;
                (r.device.as_str(), id, done)
            })
            .collect()
    }

    pub fn new(no_color: bool) -> AppState {
        AppState {
            tab: Tab::Queue,
            overlay: Overlay::None,
            queue: Vec::new(),
            queue_selected: 0,
            runs: BTreeMap::new(),
            current: None,
            results: Vec::new(),
            effects: Vec::new(),
            effects_selected: 0,
            sort: SortKey::Rung,
            results_selected: 0,
            tricks_selected: 0,
            log: Vec::new(),
            paused: false,
            quitting: None,
            drained: false,
            status: String::new(),
            no_color,
            browse_only: false,
            results_dir: None,
            quit: false,
            dirty: true,
            finished_wall: Vec::new(),
            status_seen: None,
            overlays: true,
            picker_tiny: false,
            under_help: None,
        }
    }

    /// The finished runs the Live screen compares `run` with.
    pub fn live_compare(&self, run: &RunId) -> LiveCompare<'_> {
        let finished = |f: &dyn Fn(&RunId) -> bool| -> Vec<&RunSeries> {
            self.runs
                .iter()
                // Only runs that finished: a cancelled or failed one is no reference.
                .filter(|(id, r)| r.final_acc.is_some() && id.matrix == run.matrix && f(id))
                .map(|(_, r)| r)
                .collect()
        };
        let seeds = finished(&|id| id.index == run.index && id != run);
        let reference = self
            .runs
            .get(run)
            .and_then(|r| r.reference.as_ref())
            .and_then(|rf| {
                let runs = finished(&|id| id.index == rf.index);
                let name = self
                    .runs
                    .keys()
                    .chain(self.queue.iter().map(|q| &q.run))
                    .find(|id| id.matrix == run.matrix && id.index == rf.index)?
                    .variant
                    .clone();
                Some((rf.role.clone(), name, runs))
            });
        LiveCompare { seeds, reference }
    }

    /// Runs have ended and none is queued or running: the queue is done.
    pub fn queue_idle(&self) -> bool {
        !self.queue.is_empty()
            && self
                .queue
                .iter()
                .all(|q| !matches!(q.status, RunStatus::Queued | RunStatus::Running))
            && self
                .queue
                .iter()
                .any(|q| matches!(q.status, RunStatus::Done | RunStatus::Failed))
    }

    pub fn running(&self) -> bool {
        self.queue.iter().any(|q| q.status == RunStatus::Running)
    }

    /// Runs still to do and an estimate of the seconds they need: the
    /// finished runs' mean a run, or before any has finished, the run in
    /// progress's own projected length (from its first step on).
    pub fn queue_eta(&self) -> (usize, Option<f64>) {
        let left = self
            .queue
            .iter()
            .filter(|q| matches!(q.status, RunStatus::Queued))
            .count();
        let current = self
            .current
            .as_ref()
            .and_then(|c| self.runs.get(c))
            .and_then(|r| Some((r.eta_s()?, r.active_s(Instant::now())?)));
        let per_run = if self.finished_wall.is_empty() {
            current.map(|(rest, spent)| rest + spent)
        } else {
            Some(self.finished_wall.iter().sum::<f64>() / self.finished_wall.len() as f64)
        };
        let rest = current.map(|c| c.0);
        let eta = match (per_run, rest) {
            (Some(p), r) => Some(p * left as f64 + r.unwrap_or(0.0)),
            (None, r) if left == 0 => r,
            _ => None,
        };
        (left, eta)
    }

    /// Clears a footer message shown for `STATUS_S` seconds; true if it did.
    pub fn expire_status(&mut self, now: Instant) -> bool {
        const STATUS_S: f64 = 6.0;
        if self.status.is_empty() {
            self.status_seen = None;
            return false;
        }
        match &self.status_seen {
            Some((text, at)) if *text == self.status => {
                if now.duration_since(*at).as_secs_f64() >= STATUS_S {
                    self.status.clear();
                    self.status_seen = None;
                    self.dirty = true;
                    return true;
                }
                false
            }
            _ => {
                self.status_seen = Some((self.status.clone(), now));
                false
            }
        }
    }

    /// Takes a new pass of the report; the Effects selection stays on its
    /// line, or the last one if there are fewer now.
    pub fn set_reported(&mut self, r: Reported) {
        self.results = r.rows;
        self.effects = r.effects;
        self.effects_selected = self
            .effects_selected
            .min(self.effect_rows().len().saturating_sub(1));
        self.dirty = true;
    }

    /// Every line of the Effects screen, matrix after matrix.
    pub fn effect_rows(&self) -> Vec<EffectRow<'_>> {
        self.effects.iter().flat_map(matrix_rows).collect()
    }

    /// The rows by matrix (in the order they came), then rung.
    pub fn clone_results_by_rung(&self) -> Vec<ResultRow> {
        sort_rows(&self.results, SortKey::Rung)
    }

    /// The banner over a screen whose runs are over a quarter noisy: the
    /// Results and Ladder screens count the variants' runs, Effects the
    /// designed folders'. The report's words, shortened to fit two lines.
    pub fn noise_banner(&self, tab: Tab) -> Option<String> {
        let (noisy, runs) = match tab {
            Tab::Results | Tab::Ladder => self
                .results
                .iter()
                .fold((0, 0), |(k, n), r| (k + r.noisy, n + r.n)),
            Tab::Effects => self
                .effects
                .iter()
                .fold((0, 0), |(k, n), e| (k + e.noisy, n + e.runs)),
            _ => return None,
        };
        crate::report::noise_banner(noisy, runs)?;
        Some(format!(
            "! {noisy} of {runs} runs are noisy: their seconds measure the machine as much as the tricks. `report --drop-noisy` leaves them out; rerun on an idle machine to quote them."
        ))
    }

    /// The rows sorted within each matrix (matrices in the order they came).
    pub fn sorted_results(&self) -> Vec<ResultRow> {
        sort_rows(&self.results, self.sort)
    }

    pub fn log(&mut self, level: LogLevel, text: impl Into<String>) {
        self.log.push(LogLine {
            level,
            text: text.into(),
        });
        if self.log.len() > 1000 {
            self.log.remove(0);
        }
        self.dirty = true;
    }
}

/// `12.3 s`, `4m05s`, `1h02m`.
pub fn fmt_secs(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// `rows` sorted by `key` within each matrix, the matrices in the order they came.
fn sort_rows(results: &[ResultRow], key: SortKey) -> Vec<ResultRow> {
    let mut order: Vec<String> = Vec::new();
    for r in results {
        if !order.contains(&r.matrix) {
            order.push(r.matrix.clone());
        }
    }
    let mut rows = results.to_vec();
    let m = |r: &ResultRow| order.iter().position(|x| *x == r.matrix);
    match key {
        SortKey::Rung => rows.sort_by_key(|r| (m(r), r.index)),
        SortKey::Accuracy => {
            rows.sort_by(|a, b| m(a).cmp(&m(b)).then(b.acc_mean.total_cmp(&a.acc_mean)))
        }
        SortKey::Time => {
            rows.sort_by(|a, b| m(a).cmp(&m(b)).then(a.time_mean.total_cmp(&b.time_mean)))
        }
        SortKey::TimeToTarget => rows.sort_by(|a, b| {
            m(a).cmp(&m(b)).then(
                a.ttt_mean
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.ttt_mean.unwrap_or(f64::INFINITY)),
            )
        }),
    }
    rows
}
