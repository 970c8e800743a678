//! The run queue: ordered runs with their status, persisted atomically as
//! `queue.json`, with the user's operations (requeue, move, remove) and
//! adaptive seeding (more repeats for a variant until its CI is narrow enough).

use crate::config::RunSpec;
use crate::events::{QueueItem, RunId, RunStatus};
use crate::matrix::Matrix;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    pub spec: RunSpec,
    pub status: RunStatus,
    pub reason: Option<String>,
}

/// Per-matrix state the queue needs beyond its entries.
struct MatrixState {
    matrix: Matrix,
    deadline: Option<Instant>,
    /// Final accuracies per variant index, for adaptive seeding.
    accs: HashMap<usize, Vec<f64>>,
}

#[derive(Default)]
pub struct Queue {
    entries: Vec<Entry>,
    matrices: HashMap<String, MatrixState>,
    /// Where each matrix's queue.json goes.
    files: HashMap<String, PathBuf>,
}

use crate::util::stats::ci95_half_width;

/// A results folder's saved queue (`DIR/queue.json`): its runs as planned,
/// with the status each had when it was last written.
pub fn load_saved(dir: &std::path::Path) -> Result<Vec<Entry>> {
    let path = dir.join("queue.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is damaged ({e})", path.display()))
}

impl Queue {
    /// Adds a matrix's runs; `done` holds (variant, repeat) already finished
    /// in an earlier session, which are shown as skipped.
    pub fn add_matrix(
        &mut self,
        m: Matrix,
        done: &std::collections::HashSet<(String, usize)>,
        file: Option<PathBuf>,
    ) {
        for spec in m.runs() {
            let skip = done.contains(&(spec.id.variant.clone(), spec.id.repeat));
            self.entries.push(Entry {
                spec,
                status: if skip {
                    RunStatus::Skipped
                } else {
                    RunStatus::Queued
                },
                reason: None,
            });
        }
        if let Some(f) = file {
            self.files.insert(m.name.clone(), f);
        }
        let deadline = m.budget.map(|b| Instant::now() + b);
        self.matrices.insert(
            m.name.clone(),
            MatrixState {
                matrix: m,
                deadline,
                accs: HashMap::new(),
            },
        );
    }

    /// Continues a matrix from its folder's saved queue (`saved`, its
    /// queue.json): the runs and options it was made with, not the matrix
    /// file's defaults. The results table decides what is done: a run marked
    /// done without a row (killed during the store write) runs again, and so
    /// do runs that were running, failed or cancelled.
    pub fn resume_matrix(
        &mut self,
        m: Matrix,
        saved: Vec<Entry>,
        done: &std::collections::HashSet<(String, usize)>,
        file: Option<PathBuf>,
    ) {
        for mut e in saved {
            let finished = done.contains(&(e.spec.id.variant.clone(), e.spec.id.repeat));
            e.status = if finished {
                RunStatus::Skipped
            } else {
                RunStatus::Queued
            };
            e.reason = None;
            self.entries.push(e);
        }
        if let Some(f) = file {
            self.files.insert(m.name.clone(), f);
        }
        let deadline = m.budget.map(|b| Instant::now() + b);
        self.matrices.insert(
            m.name.clone(),
            MatrixState {
                matrix: m,
                deadline,
                accs: HashMap::new(),
            },
        );
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn snapshot(&self) -> Vec<QueueItem> {
        self.entries
            .iter()
            .map(|e| QueueItem {
                run: e.spec.id.clone(),
                seed: e.spec.seed,
                status: e.status,
                reason: e.reason.clone(),
            })
            .collect()
    }

    /// The next queued run (marked running), skipping matrices past their budget.
    pub fn next_run(&mut self) -> Option<RunSpec> {
        let now = Instant::now();
        for e in self
            .entries
            .iter_mut()
            .filter(|e| e.status == RunStatus::Queued)
        {
            let over = self
                .matrices
                .get(&e.spec.id.matrix)
                .and_then(|m| m.deadline)
                .is_some_and(|d| now >= d);
            if over {
                e.status = RunStatus::Skipped;
                e.reason = Some("matrix time budget spent".into());
                continue;
            }
            e.status = RunStatus::Running;
            return Some(e.spec.clone());
        }
        None
    }

    /// Puts a run handed out by `next_run` back, unstarted.
    pub fn unclaim(&mut self, id: &RunId) {
        if let Some(e) = self.find(id).filter(|e| e.status == RunStatus::Running) {
            e.status = RunStatus::Queued;
        }
    }

    pub fn has_queued(&self) -> bool {
        self.entries.iter().any(|e| e.status == RunStatus::Queued)
    }

    pub fn running(&self) -> bool {
        self.entries.iter().any(|e| e.status == RunStatus::Running)
    }

    fn find(&mut self, id: &RunId) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| &e.spec.id == id)
    }

    /// Records how a run ended; with adaptive seeding it may add a repeat.
    pub fn finish(
        &mut self,
        id: &RunId,
        status: RunStatus,
        reason: Option<String>,
        acc: Option<f64>,
    ) {
        if let Some(e) = self.find(id) {
            e.status = status;
            e.reason = reason;
        }
        let Some(acc) = acc else { return };
        let Some(ms) = self.matrices.get_mut(&id.matrix) else {
            return;
        };
        let accs = ms.accs.entry(id.index).or_default();
        accs.push(acc);
        let Some(a) = ms.matrix.adaptive else { return };
        let n_runs = self
            .entries
            .iter()
            .filter(|e| e.spec.id.matrix == id.matrix && e.spec.id.index == id.index)
            .count();
        let pending = self.entries.iter().any(|e| {
            e.spec.id.matrix == id.matrix
                && e.spec.id.index == id.index
                && matches!(e.status, RunStatus::Queued | RunStatus::Running)
        });
        let accs = &ms.accs[&id.index];
        if !pending
            && accs.len() >= a.min
            && n_runs < a.max
            && 2.0 * ci95_half_width(accs) > a.ci_width
        {
            let spec = ms.matrix.spec(id.index, n_runs, ms.matrix.seed_for(n_runs));
            self.entries.push(Entry {
                spec,
                status: RunStatus::Queued,
                reason: None,
            });
        }
    }

    pub fn requeue(&mut self, id: &RunId) -> bool {
        match self.find(id) {
            Some(e) if matches!(e.status, RunStatus::Failed | RunStatus::Cancelled) => {
                e.status = RunStatus::Queued;
                e.reason = None;
                true
            }
            _ => false,
        }
    }

    /// Moves a queued run one place among the queued runs.
    pub fn move_run(&mut self, id: &RunId, up: bool) -> bool {
        let Some(i) = self
            .entries
            .iter()
            .position(|e| &e.spec.id == id && e.status == RunStatus::Queued)
        else {
            return false;
        };
        let queued: Vec<usize> = (0..self.entries.len())
            .filter(|&j| self.entries[j].status == RunStatus::Queued)
            .collect();
        let k = queued.iter().position(|&j| j == i).expect("i is queued");
        let other = if up {
            k.checked_sub(1)
        } else {
            (k + 1 < queued.len()).then_some(k + 1)
        };
        match other {
            Some(o) => {
                self.entries.swap(i, queued[o]);
                true
            }
            None => false,
        }
    }

    pub fn remove(&mut self, id: &RunId) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|e| !(&e.spec.id == id && e.status == RunStatus::Queued));
        before != self.entries.len()
    }

    /// Writes each matrix's entries to its queue.json, atomically.
    pub fn save(&self) -> Result<()> {
        for (name, path) in &self.files {
            let mine: Vec<&Entry> = self
                .entries
                .iter()
                .filter(|e| &e.spec.id.matrix == name)
                .collect();
            // Into the results folder as it is: never recreate one deleted meanwhile.
            let text = serde_json::to_string_pretty(&mine)?;
            crate::util::write_atomic_into(path, |f| {
                std::io::Write::write_all(f, text.as_bytes()).map_err(Into::into)
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(extra: &str) -> Matrix {
        crate::matrix::parse(
            &format!("name='q'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu','flip']\n{extra}"),
            "q.toml",
        )
        .unwrap()
    }

    #[test]
    fn round_robin_skip_requeue_move_remove() {
        let mut q = Queue::default();
        let done = [("base".to_string(), 0usize)].into_iter().collect();
        q.add_matrix(matrix("repeats=2"), &done, None);
        assert_eq!(q.entries()[0].status, RunStatus::Skipped);
        let first = q.next_run().unwrap();
        assert_eq!((first.id.variant.as_str(), first.id.repeat), ("+ celu", 0));
        q.finish(&first.id, RunStatus::Failed, Some("boom".into()), None);
        assert!(q.requeue(&first.id));
        assert!(!q.requeue(&first.id));
        let last = q.entries().last().unwrap().spec.id.clone();
        assert!(q.move_run(&last, true));
        let pos = q.entries().iter().position(|e| e.spec.id == last).unwrap();
        assert_eq!(pos, q.entries().len() - 2);
        assert!(q.remove(&last));
        assert_eq!(q.entries().len(), 5);
    }

    #[test]
    fn adaptive_adds_seeds_until_the_ci_is_narrow() {
        let mut q = Queue::default();
        q.add_matrix(
            matrix("adaptive = { ci_width = 0.02, min = 2, max = 5 }"),
            &Default::default(),
            None,
        );
        assert_eq!(q.entries().len(), 6);
        // Variant 0 (base): noisy accuracies keep adding repeats up to max.
        let noisy = [0.5, 0.7, 0.4, 0.8, 0.3, 0.9];
        let mut k = 0;
        while let Some(s) = q.next_run() {
            let acc = if s.id.index == 0 {
                noisy[k % 6]
            } else {
                0.6 + 0.001 * s.id.repeat as f64
            };
            if s.id.index == 0 {
                k += 1;
            }
            q.finish(&s.id, RunStatus::Done, None, Some(acc));
        }
        let count = |i: usize| q.entries().iter().filter(|e| e.spec.id.index == i).count();
        assert_eq!(count(0), 5, "noisy variant runs to max");
        assert_eq!(count(1), 2, "tight variant stops at min");
        assert!(
            q.entries()
                .iter()
                .filter(|e| e.spec.id.index == 0)
                .map(|e| e.spec.seed)
                .collect::<std::collections::HashSet<_>>()
                .len()
                == 5
        );
    }

    #[test]
    fn ci_matches_hand_values() {
        let w = ci95_half_width(&[1.0, 2.0, 3.0]);
        // t(0.975, 2) = 0.95 / √(2 · 0.975 · 0.025), exactly.
        let t2 = 0.95 / (2.0f64 * 0.975 * 0.025).sqrt();
        assert!((w - t2 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert!(ci95_half_width(&[1.0]).is_infinite());
    }
}
