//! Everything the TUI shows, derived from events only. Rendering reads it;
//! `update` writes it.

use crate::config::Reference;
use crate::events::{EpochRow, LogLevel, QueueItem, RunId, RunStatus};
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
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::Queue,
        Tab::Live,
        Tab::Results,
        Tab::Ladder,
        Tab::Tricks,
        Tab::Log,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Queue => "Queue",
            Tab::Live => "Live",
            Tab::Results => "Results",
            Tab::Ladder => "Ladder",
            Tab::Tricks => "Tricks",
            Tab::Log => "Log",
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
    pub peak_mem_bytes: Option<u64>,
    pub step: u64,
    pub total_steps: u64,
    pub total_epochs: f64,
    pub target_acc: f64,
    pub started: Option<Instant>,
    pub finished: bool,
    pub final_acc: Option<f64>,
    pub device: String,
    /// The variant this run is read against (from the matrix).
    pub reference: Option<Reference>,
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
        let started = self.started?;
        if self.finished || self.step == 0 || self.total_steps == 0 {
            return None;
        }
        let rate = self.step as f64 / started.elapsed().as_secs_f64().max(1e-3);
        Some((self.total_steps.saturating_sub(self.step)) as f64 / rate)
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
    pub index: usize,
    pub variant: String,
    pub n: usize,
    pub acc_mean: f64,
    pub acc_ci95: f64,
    pub p_target: f64,
    /// Mean seconds to the target over the runs that reached it.
    pub ttt_mean: Option<f64>,
    /// Mean train time (DAWNBench-style clock) of the variant.
    pub time_mean: f64,
    pub time_ci95: f64,
    /// Previous rung's mean time / this rung's.
    pub speedup_prev: Option<f64>,
    pub speedup_first: Option<f64>,
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
    /// Matrix files to pick from, and the selected one.
    Picker {
        files: Vec<String>,
        selected: usize,
    },
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
    pub sort: SortKey,
    pub results_selected: usize,
    pub tricks_selected: usize,
    pub log: Vec<LogLine>,
    pub paused: bool,
    pub drained: bool,
    /// A one-line message in the footer (export paths, errors).
    pub status: String,
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
            overlays: true,
        }
    }

    /// The finished runs the Live screen compares `run` with.
    pub fn live_compare(&self, run: &RunId) -> LiveCompare<'_> {
        let finished = |f: &dyn Fn(&RunId) -> bool| -> Vec<&RunSeries> {
            self.runs
                .iter()
                .filter(|(id, r)| r.finished && id.matrix == run.matrix && f(id))
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

    pub fn running(&self) -> bool {
        self.queue.iter().any(|q| q.status == RunStatus::Running)
    }

    /// Runs still to do and an estimate of the seconds they need.
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
            .and_then(|r| r.eta_s());
        let per_run = if self.finished_wall.is_empty() {
            None
        } else {
            Some(self.finished_wall.iter().sum::<f64>() / self.finished_wall.len() as f64)
        };
        let eta = match (per_run, current) {
            (Some(p), c) => Some(p * left as f64 + c.unwrap_or(0.0)),
            (None, Some(c)) if left == 0 => Some(c),
            _ => None,
        };
        (left, eta)
    }

    pub fn sorted_results(&self) -> Vec<ResultRow> {
        let mut rows = self.results.clone();
        match self.sort {
            SortKey::Rung => rows.sort_by_key(|r| r.index),
            SortKey::Accuracy => rows.sort_by(|a, b| b.acc_mean.total_cmp(&a.acc_mean)),
            SortKey::Time => rows.sort_by(|a, b| a.time_mean.total_cmp(&b.time_mean)),
            SortKey::TimeToTarget => rows.sort_by(|a, b| {
                a.ttt_mean
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.ttt_mean.unwrap_or(f64::INFINITY))
            }),
        }
        rows
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
