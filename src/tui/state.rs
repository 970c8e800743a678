//! Everything the TUI shows, derived from events only. Rendering reads it;
//! `update` writes it.

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
        }
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
