//! The run queue: ordered runs with their status, persisted atomically as
//! `queue.json`, with the user's operations (requeue, move, remove),
//! adaptive seeding (more repeats for a variant until its CI is narrow
//! enough) and `until_decided` (a round of seeds across every variant at a
//! time until each difference the matrix asks about is decided, or its
//! interval is as narrow as asked).

use crate::config::RunSpec;
use crate::events::{QueueItem, RunId, RunStatus, RunSummary};
use crate::matrix::{Matrix, Sample};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use crate::store::saved_queue::{BUDGET_SPENT, Entry, load_saved};

/// What the queue reads of a finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Final accuracy with the run's TTA level.
    pub acc: f64,
    pub clocks: crate::events::Clocks,
    /// Why its seconds are not to be trusted (the run row's `noisy`), if so.
    pub noise: Option<String>,
}

impl Measured {
    pub fn of(s: &RunSummary) -> Measured {
        Measured {
            acc: s.acc_tta,
            clocks: s.clocks.clone(),
            noise: s.noise.clone(),
        }
    }
}

/// Per-matrix state the queue needs beyond its entries.
struct MatrixState {
    matrix: Matrix,
    /// What it decided, made once: the questions `until_decided` asks.
    record: crate::matrix::Record,
    deadline: Option<Instant>,
    /// Final accuracies per variant index, for adaptive seeding.
    accs: HashMap<usize, Vec<f64>>,
    /// Runs `until_decided` counts, per variant: finished, a noisy first
    /// try of a seed left out.
    counted: BTreeMap<usize, Vec<Sample>>,
}

impl MatrixState {
    fn new(matrix: Matrix) -> MatrixState {
        MatrixState {
            deadline: matrix.budget.map(|b| Instant::now() + b),
            record: matrix.record(),
            matrix,
            accs: HashMap::new(),
            counted: BTreeMap::new(),
        }
    }

    /// Counts a finished run for `until_decided`.
    fn count(&mut self, index: usize, seed: u64, m: &Measured) {
        self.counted.entry(index).or_default().push(Sample {
            seed,
            secs: m.clocks.on(self.record.clock),
            acc: m.acc,
        });
    }
}

#[derive(Default)]
pub struct Queue {
    entries: Vec<Entry>,
    matrices: HashMap<String, MatrixState>,
    /// Where each matrix's queue.json goes.
    files: HashMap<String, PathBuf>,
    /// What the queue decided on its own (a round added, a question left
    /// open), for the session's log: see [`Queue::take_notes`].
    notes: Vec<(crate::events::LogLevel, String)>,
}

use crate::stats::ci95_half_width;

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
        self.matrices.insert(m.name.clone(), MatrixState::new(m));
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
        self.matrices.insert(m.name.clone(), MatrixState::new(m));
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

    /// The next queued run (marked running), skipping matrices past their
    /// budget: their queued runs are marked skipped for it, and a note says
    /// how many were left, or the session would end looking complete.
    pub fn next_run(&mut self) -> Option<RunSpec> {
        let now = Instant::now();
        let mut stopped: BTreeMap<String, usize> = BTreeMap::new();
        let mut next = None;
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
                e.reason = Some(BUDGET_SPENT.into());
                *stopped.entry(e.spec.id.matrix.clone()).or_default() += 1;
                continue;
            }
            e.status = RunStatus::Running;
            next = Some(e.spec.clone());
            break;
        }
        for (matrix, left) in stopped {
            self.note_budget_stop(&matrix, left);
        }
        next
    }

    /// The log's line for a matrix whose budget stopped it with `left` runs
    /// still queued.
    fn note_budget_stop(&mut self, matrix: &str, left: usize) {
        let planned = self
            .entries
            .iter()
            .filter(|e| e.spec.id.matrix == matrix)
            .count();
        let budget = self
            .matrices
            .get(matrix)
            .and_then(|m| m.matrix.budget)
            .map_or_else(String::new, |b| {
                format!(
                    " of {}",
                    crate::store::saved_queue::budget_words(b.as_secs_f64())
                )
            });
        let file = self.files.get(matrix).and_then(|f| f.parent());
        let resume = file.map_or_else(String::new, |d| {
            format!("; `tricklab run --resume {}` runs them", d.display())
        });
        self.notes.push((
            crate::events::LogLevel::Warn,
            format!(
                "{matrix}: its budget{budget} is spent: {left} of its {planned} runs were not run{resume}"
            ),
        ));
    }

    /// What runs for `spec`, decided when its matrix was parsed: the
    /// worker hands the trainer this, never a plan of its own.
    pub fn job(&self, spec: &RunSpec) -> Result<crate::matrix::Job> {
        match self.matrices.get(&spec.id.matrix) {
            Some(st) => st.matrix.job(spec),
            None => anyhow::bail!("run {} has no matrix in this session's queue", spec.id),
        }
    }

    /// The results folder of `matrix` (where its queue is saved): a
    /// script run keeps its output there.
    pub fn folder(&self, matrix: &str) -> Option<PathBuf> {
        self.files
            .get(matrix)
            .and_then(|f| f.parent())
            .map(Path::to_path_buf)
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

    /// Records how a run ended. With adaptive seeding it may add a repeat;
    /// with `until_decided` it re-runs a noisy run once, and when the round
    /// is over it looks at the questions and adds the next round while one
    /// is open.
    pub fn finish(
        &mut self,
        id: &RunId,
        status: RunStatus,
        reason: Option<String>,
        measured: Option<Measured>,
    ) {
        let seed = self.find(id).map(|e| {
            e.status = status;
            e.reason = reason;
            e.spec.seed
        });
        if let (Some(m), Some(seed)) = (measured, seed) {
            self.record(id, seed, &m);
            self.adaptive_repeat(id);
        }
        self.next_round(&id.matrix);
    }

    /// Runs of a resumed matrix that finished in an earlier session, as
    /// (variant index, repeat, seed, what it measured): counted as the runs
    /// of this one are (a noisy run that was re-run left out), then the
    /// round they complete is looked at.
    pub fn recall(&mut self, matrix: &str, earlier: Vec<(usize, usize, u64, Measured)>) {
        for (index, repeat, seed, m) in earlier {
            let rerun = self.entries.iter().any(|e| {
                e.spec.id.matrix == matrix
                    && e.spec.id.index == index
                    && e.spec.seed == seed
                    && e.spec.id.repeat > repeat
            });
            let Some(ms) = self.matrices.get_mut(matrix) else {
                return;
            };
            ms.accs.entry(index).or_default().push(m.acc);
            if !(rerun && m.noise.is_some()) {
                ms.count(index, seed, &m);
            }
        }
        self.next_round(matrix);
    }

    /// What the queue decided on its own since the last call, for the log.
    pub fn take_notes(&mut self) -> Vec<(crate::events::LogLevel, String)> {
        std::mem::take(&mut self.notes)
    }

    /// Counts a finished run. Under `until_decided` a noisy run is left out
    /// and its seed run again, once: a re-run counts whatever its flag, so
    /// that a machine busy all along still decides.
    fn record(&mut self, id: &RunId, seed: u64, m: &Measured) {
        let Some(ms) = self.matrices.get_mut(&id.matrix) else {
            return;
        };
        ms.accs.entry(id.index).or_default().push(m.acc);
        let (Some(noise), Some(_)) = (&m.noise, ms.matrix.until_decided) else {
            ms.count(id.index, seed, m);
            return;
        };
        let tried = self.entries.iter().any(|e| {
            e.spec.id.matrix == id.matrix
                && e.spec.id.index == id.index
                && e.spec.seed == seed
                && e.spec.id.repeat != id.repeat
        });
        if tried {
            if let Some(ms) = self.matrices.get_mut(&id.matrix) {
                ms.count(id.index, seed, m);
            }
            return;
        }
        let repeat = self.next_repeat(&id.matrix, id.index);
        let spec = self.matrices[&id.matrix]
            .matrix
            .spec(id.index, repeat, seed);
        if let Some(e) = self.find(id) {
            e.reason = Some(format!(
                "noisy ({noise}): not counted, seed {seed} re-run as repeat {repeat}"
            ));
        }
        self.entries.push(Entry {
            spec,
            status: RunStatus::Queued,
            reason: None,
        });
    }

    /// The first repeat number variant `index` of `matrix` has not used.
    fn next_repeat(&self, matrix: &str, index: usize) -> usize {
        self.entries
            .iter()
            .filter(|e| e.spec.id.matrix == matrix && e.spec.id.index == index)
            .map(|e| e.spec.id.repeat + 1)
            .max()
            .unwrap_or(0)
    }

    /// Adaptive seeding: another repeat of the variant while its accuracy's
    /// 95% CI is wider than asked, from `min` up to `max` runs.
    fn adaptive_repeat(&mut self, id: &RunId) {
        let Some(ms) = self.matrices.get(&id.matrix) else {
            return;
        };
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

    /// `until_decided`: once no run of the matrix is queued or running, the
    /// round is over; its look decides each question (`matrix::decide_all`,
    /// `stats::decide` with α split over the planned looks), and
    /// while one is open and rounds are left, every variant gets the next
    /// seed, in variant order (interleaved, as repeats are).
    fn next_round(&mut self, matrix: &str) {
        let Some(ms) = self.matrices.get(matrix) else {
            return;
        };
        let Some(u) = ms.matrix.until_decided else {
            return;
        };
        let mine: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.spec.id.matrix == matrix)
            .collect();
        if mine
            .iter()
            .any(|e| matches!(e.status, RunStatus::Queued | RunStatus::Running))
        {
            return;
        }
        let seeds: BTreeSet<u64> = mine.iter().map(|e| e.spec.seed).collect();
        let rounds = seeds.len();
        use crate::events::LogLevel;
        let Some(look) = u.look_at(rounds) else {
            // Fewer seeds than the first look needs (`repeats` below `min`,
            // or a width rule's pilot): rounds up to it, nothing judged yet.
            let seed = self.add_round(matrix, rounds, &seeds);
            self.notes.push((
                LogLevel::Info,
                format!(
                    "{matrix}: {rounds} of the {} seeds a variant before the first look: adding seed {seed}",
                    u.min
                ),
            ));
            return;
        };
        let ms = &self.matrices[matrix];
        // The verdicts (α split over the looks) and the widths (a precision
        // stop: no α, see `matrix::precision_all`): a round more while
        // either leaves something open.
        let decisions = crate::matrix::decide_all(&ms.record, &u, &ms.counted, look);
        let precisions = crate::matrix::precision_all(&ms.record, &u, &ms.counted);
        let open = crate::matrix::still_open(&decisions, &precisions);
        let note = match (open.is_empty(), rounds >= u.max) {
            (true, _) => (
                LogLevel::Info,
                format!(
                    "{matrix}: {} after {rounds} seeds a variant (look {look} of {})",
                    u.goal(),
                    u.looks()
                ),
            ),
            (false, true) => (
                LogLevel::Warn,
                format!(
                    "{matrix}: {} stayed open at the budget of {} seeds a variant: {}",
                    open.len(),
                    u.max,
                    open.join(", ")
                ),
            ),
            (false, false) => {
                let n = open.len();
                let seed = self.add_round(matrix, rounds, &seeds);
                (
                    LogLevel::Info,
                    format!(
                        "{matrix}: {n} open after {rounds} seeds a variant (look {look} of {}): adding seed {seed}",
                        u.looks()
                    ),
                )
            }
        };
        self.notes.push(note);
    }

    /// Queues the next round of `matrix`: the first seed of its sequence
    /// not in `seeds`, for every variant in variant order (interleaved, as
    /// repeats are). Returns that seed.
    fn add_round(&mut self, matrix: &str, rounds: usize, seeds: &BTreeSet<u64>) -> u64 {
        let m = &self.matrices[matrix].matrix;
        let seed = (rounds..)
            .map(|r| m.seed_for(r))
            .find(|s| !seeds.contains(s))
            .expect("a seed not yet used");
        let specs: Vec<RunSpec> = (0..m.variants.len())
            .map(|i| m.spec(i, self.next_repeat(matrix, i), seed))
            .collect();
        self.entries.extend(specs.into_iter().map(|spec| Entry {
            spec,
            status: RunStatus::Queued,
            reason: None,
        }));
        seed
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
            crate::store::saved_queue::save(path, &mine)?;
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
    fn a_spent_budget_skips_the_rest_and_says_how_many() {
        let mut q = Queue::default();
        q.add_matrix(matrix("repeats=2\nbudget='90s'"), &Default::default(), None);
        let first = q.next_run().unwrap();
        q.finish(&first.id, RunStatus::Done, None, None);
        assert!(q.take_notes().is_empty());
        // The budget runs out between two runs.
        q.matrices.get_mut("q").unwrap().deadline = Some(Instant::now());
        assert!(q.next_run().is_none());
        let skipped: Vec<&Entry> = q
            .entries()
            .iter()
            .filter(|e| e.reason.as_deref() == Some(BUDGET_SPENT))
            .collect();
        assert_eq!(skipped.len(), 5);
        assert!(skipped.iter().all(|e| e.status == RunStatus::Skipped));
        let notes = q.take_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(
            notes[0].1,
            "q: its budget of 90s is spent: 5 of its 6 runs were not run"
        );
        assert_eq!(
            crate::store::saved_queue::budget_stop(q.entries()),
            Some((1, 6))
        );
        // Said once: nothing is left to skip.
        assert!(q.next_run().is_none());
        assert!(q.take_notes().is_empty());
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
            q.finish(
                &s.id,
                RunStatus::Done,
                None,
                Some(measured(acc, 10.0, None)),
            );
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

    /// A run's outcome with `secs` on every clock.
    fn measured(acc: f64, secs: f64, noise: Option<&str>) -> Measured {
        Measured {
            acc,
            clocks: crate::events::Clocks {
                dawn_s: secs,
                airbench_s: secs,
                hlb_s: secs,
                wall_s: secs,
                ..Default::default()
            },
            noise: noise.map(str::to_string),
        }
    }

    /// Runs the queue dry, each run's outcome from `outcome`.
    fn drain(q: &mut Queue, outcome: impl Fn(&RunSpec) -> Measured) {
        while let Some(s) = q.next_run() {
            q.finish(&s.id, RunStatus::Done, None, Some(outcome(&s)));
        }
    }

    /// Seed noise shared by every variant (the same seed, the same data
    /// order and init), so that the paired differences show the variant.
    fn seed_noise(seed: u64) -> f64 {
        crate::util::splitmix::SplitMix64(seed).unit_f64() - 0.5
    }

    const UNTIL: &str = "until_decided = { time = 0.05, acc = 0.005, max = 6 }";

    #[test]
    fn until_decided_stops_once_every_difference_is_decided() {
        let mut q = Queue::default();
        q.add_matrix(matrix(UNTIL), &Default::default(), None);
        // Starts with min = 2 seeds a variant.
        assert_eq!(q.entries().len(), 6);
        // + celu: 5 s slower and 2 points better, clearly (NonZero); + flip:
        // within ±0.01 s and ±0.001 points of the base (WithinMargin: ±5% of
        // 40 s is ±2 s, and ±0.5 points). Every question is decided at the
        // first look, after 2 seeds a variant, though 6 were allowed.
        let tiny = |seed: u64| if seed.is_multiple_of(2) { 1.0 } else { -1.0 };
        drain(&mut q, |s| {
            let (n, k) = (seed_noise(s.seed), tiny(s.seed));
            let (dt, da) = match s.id.index {
                0 => (0.0, 0.0),
                1 => (5.0 + 0.01 * k, 0.02 + 0.0001 * k),
                _ => (0.01 * k, 0.00001 * k),
            };
            measured(0.5 + 0.05 * n + da, 40.0 + 4.0 * n + dt, None)
        });
        assert_eq!(q.entries().len(), 6, "no round added");
        let notes = q.take_notes();
        assert!(
            notes
                .last()
                .unwrap()
                .1
                .contains("every asked difference is decided after 2 seeds"),
            "{notes:?}"
        );
    }

    #[test]
    fn until_decided_runs_an_open_question_to_max_and_reruns_a_noisy_seed_once() {
        let mut q = Queue::default();
        q.add_matrix(matrix(UNTIL), &Default::default(), None);
        // + flip is 1 s slower give or take 2 s (alternating): ±5% of 40 s
        // is ±2 s, and its interval neither excludes 0 nor fits inside the
        // margin at any look, so rounds are added up to max = 6.
        let outcome = |s: &RunSpec| {
            let n = seed_noise(s.seed);
            let k = if s.seed.is_multiple_of(2) { 1.0 } else { -1.0 };
            let dt = match s.id.index {
                0 => 0.0,
                1 => 5.0 + 0.01 * k,
                _ => 1.0 + 2.0 * k,
            };
            // + celu's runs with seed 3 are noisy: the first is re-run, once,
            // and the re-run counts though it is noisy too.
            let noise = (s.id.index == 1 && s.seed == 3).then_some("busy");
            measured(0.5 + 0.05 * n, 40.0 + 4.0 * n + dt, noise)
        };
        drain(&mut q, outcome);
        let seeds = |i: usize| -> Vec<u64> {
            q.entries()
                .iter()
                .filter(|e| e.spec.id.index == i)
                .map(|e| e.spec.seed)
                .collect()
        };
        // Six rounds, every variant on the same seeds, in order.
        assert_eq!(seeds(0), [0, 1, 2, 3, 4, 5]);
        assert_eq!(seeds(2), [0, 1, 2, 3, 4, 5]);
        // The noisy run stays, not counted, and seed 3 ran again once.
        assert_eq!(seeds(1), [0, 1, 2, 3, 3, 4, 5]);
        let noisy = q
            .entries()
            .iter()
            .find(|e| e.spec.id.index == 1 && e.spec.id.repeat == 3)
            .unwrap();
        assert!(
            noisy
                .reason
                .as_deref()
                .unwrap()
                .contains("not counted, seed 3 re-run as repeat 4")
        );
        let counted = &q.matrices["q"].counted[&1];
        assert_eq!(counted.len(), 6);
        // Rounds 3 to 6 were added for the open question, which the last
        // note names.
        let notes = q.take_notes();
        assert_eq!(
            notes.iter().filter(|n| n.1.contains("adding seed")).count(),
            4
        );
        let last = &notes.last().unwrap().1;
        assert!(
            last.contains("1 stayed open at the budget of 6 seeds")
                && last.contains("time of + flip vs base"),
            "{last}"
        );
        // A resumed session counts the earlier runs and goes on from there.
        let mut r = Queue::default();
        let m = matrix(UNTIL);
        let saved: Vec<Entry> = q.entries().iter().take(6).cloned().collect();
        let done = saved
            .iter()
            .map(|e| (e.spec.id.variant.clone(), e.spec.id.repeat))
            .collect();
        r.resume_matrix(m, saved.clone(), &done, None);
        let earlier = saved
            .iter()
            .map(|e| {
                (
                    e.spec.id.index,
                    e.spec.id.repeat,
                    e.spec.seed,
                    outcome(&e.spec),
                )
            })
            .collect();
        r.recall("q", earlier);
        assert_eq!(r.entries().len(), 9, "the third round is queued at once");
        assert!(
            r.entries()[6..]
                .iter()
                .all(|e| e.spec.seed == 2 && e.status == RunStatus::Queued)
        );
    }

    /// A width rule alone: a round is added while any pair's 95% interval
    /// of accuracy is wider than 1 point end to end. + celu's differences
    /// alternate by ±0.1 points (narrow from 3 seeds), + flip's by ±0.4
    /// points (narrow from 6: 2·t(0.975; 5)·0.438/√6 = 0.92 points), so the
    /// run stops after 6 rounds of the 8 allowed, whatever the estimates.
    #[test]
    fn until_decided_with_a_width_adds_rounds_until_every_interval_is_narrow() {
        let mut q = Queue::default();
        q.add_matrix(
            matrix("until_decided = { width_acc = 0.01, min = 2, max = 8 }"),
            &Default::default(),
            None,
        );
        assert_eq!(q.entries().len(), 6, "starts with min = 2 seeds a variant");
        drain(&mut q, |s| {
            let n = seed_noise(s.seed);
            let k = if s.seed.is_multiple_of(2) { 1.0 } else { -1.0 };
            let da = match s.id.index {
                0 => 0.0,
                1 => 0.02 + 0.001 * k,
                _ => 0.004 * k,
            };
            measured(0.5 + 0.05 * n + da, 40.0 + 4.0 * n, None)
        });
        assert_eq!(q.entries().len(), 18, "six rounds of three variants");
        let notes = q.take_notes();
        let adding: Vec<&String> = notes
            .iter()
            .map(|n| &n.1)
            .filter(|n| n.contains("adding seed"))
            .collect();
        assert_eq!(adding.len(), 4, "{notes:?}");
        assert!(
            notes
                .last()
                .unwrap()
                .1
                .contains("every asked interval is as narrow as asked after 6 seeds a variant"),
            "{notes:?}"
        );
        // Without a pilot of its own, the width rule starts at 5 seeds.
        let m = matrix("until_decided = { width_acc = 0.01, max = 8 }");
        assert_eq!(m.until_decided.unwrap().min, 5);
        assert_eq!(m.seeds, [0, 1, 2, 3, 4]);
        // With fewer repeats than that, rounds are added up to the first
        // look, which then finds every interval narrow (50 points asked).
        let mut q = Queue::default();
        q.add_matrix(
            matrix("repeats = 2\nuntil_decided = { width_acc = 0.5, max = 8 }"),
            &Default::default(),
            None,
        );
        assert_eq!(q.entries().len(), 6);
        drain(&mut q, |s| {
            let k = if s.seed.is_multiple_of(2) { 1.0 } else { -1.0 };
            measured(0.5 + 0.01 * k * s.id.index as f64, 40.0, None)
        });
        assert_eq!(q.entries().len(), 15, "five rounds of three variants");
        let notes: Vec<String> = q.take_notes().into_iter().map(|n| n.1).collect();
        assert!(
            notes[0].contains("2 of the 5 seeds a variant before the first look: adding seed 2"),
            "{notes:?}"
        );
        assert!(
            notes
                .last()
                .unwrap()
                .contains("as narrow as asked after 5 seeds"),
            "{notes:?}"
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
