//! A session: matrices queued (`queue`) on workers that own the devices
//! (`worker`, a gang for a run over several), and the one pump their events
//! leave by: each event is recorded by its matrix's results store, then
//! handed to the consumer (TUI or headless), so both persist identically.

mod open;
pub mod queue;
pub mod worker;

use open::gangs;
pub use open::{Entry, Pricing, Rules, admit};

use crate::events::{Command, Event, LogLevel};
use crate::matrix::Matrix;
use crate::store::ResultsWriter;
use anyhow::{Context, Result};
use queue::Queue;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use worker::{EventQueue, Factory, Shared};

pub struct SessionOptions {
    pub results_root: PathBuf,
    pub devices: Vec<String>,
    /// A results folder to continue: its matrix is re-expanded and finished runs are skipped.
    pub resume: Option<PathBuf>,
    /// Keep idle workers alive for matrices added later (the TUI); headless runs end when the queue is done.
    pub keep_alive: bool,
    /// Free space each results folder must have before a run starts.
    pub min_free_bytes: u64,
    /// Threads per CPU worker; `None` shares the cores among them.
    pub cpu_threads: Option<usize>,
}

/// The one way an event leaves the workers: its results store records it,
/// then the consumer gets it. Cloned into the TUI's forwarding task.
#[derive(Clone)]
pub struct Pump {
    events: Arc<EventQueue>,
    stores: Arc<Mutex<HashMap<String, ResultsWriter>>>,
    shared: Arc<Shared>,
}

impl Pump {
    /// The next event, after the store has recorded it. `None` once every worker has exited.
    pub async fn next(&self) -> Option<Event> {
        let ev = self.events.pop().await?;
        Some(self.store(ev))
    }

    pub fn try_next(&self) -> Option<Event> {
        let ev = self.events.try_pop()?;
        Some(self.store(ev))
    }

    /// Records `ev` and returns what the consumers are told: the event, or
    /// for a finished run whose row could not be written, its failure.
    fn store(&self, ev: Event) -> Event {
        let Some(run) = ev.run().cloned() else {
            return ev;
        };
        let ends = matches!(
            ev,
            Event::RunFinished { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
        );
        let ev = self.record(ev, &run);
        if ends {
            self.shared.run_recorded();
        }
        ev
    }

    fn record(&self, ev: Event, run: &crate::config::RunId) -> Event {
        let mut stores = self.stores.lock().expect("results stores");
        let Some(w) = stores.get_mut(&run.matrix) else {
            return ev;
        };
        let Err(e) = w.on_event(&ev) else {
            return ev;
        };
        // A store that failed once will fail the next run too: stop after
        // the one in progress rather than train runs that cannot be kept.
        let why = crate::util::one_line(&e);
        self.shared.halt(format!(
            "results store {} failed on {run} ({why}): free space or fix permissions, then `tricklab run --resume {}`",
            w.dir().display(),
            w.dir().display()
        ));
        if !matches!(ev, Event::RunFinished { .. }) {
            return ev;
        }
        // Trained but not kept: not "done" anywhere, so `results` counts it
        // missing and `--resume` runs it again.
        let reason = format!(
            "finished, but its row could not be written ({why}); `tricklab run --resume {}` runs it again",
            w.dir().display()
        );
        drop(stores);
        let mut q = self.shared.queue.lock().expect("queue");
        q.finish(
            run,
            crate::events::RunStatus::Failed,
            Some(reason.clone()),
            None,
        );
        // Best effort: the disk that refused the row may refuse this too.
        let _ = q.save();
        self.shared.events.push(Event::Queue(q.snapshot()));
        Event::RunFailed {
            run: run.clone(),
            reason,
        }
    }
}

pub struct Session {
    shared: Arc<Shared>,
    pump: Pump,
    order: Vec<String>,
    workers: Vec<std::thread::JoinHandle<()>>,
    results_root: PathBuf,
    /// The devices and rules it admits a matrix queued later by.
    devices: Vec<String>,
    rules: Rules,
}

/// The trainer factory of the real engine (or of the planted trainer,
/// where the hidden `TRICKLAB_PLANTED` setting asks for it: train/planted.rs).
pub fn tch_factory() -> Factory {
    Arc::new(|dev: &str| crate::train::new_trainer(dev))
}

/// A resumed folder's saved runs; `None` (with a warning) when its queue.json
/// is missing or unreadable and the matrix file has to be expanded again.
fn saved_queue(
    dir: &std::path::Path,
    events: &EventQueue,
) -> Option<Vec<crate::session::queue::Entry>> {
    match crate::store::saved_queue::load_saved(dir) {
        Ok(entries) if !entries.is_empty() => Some(entries),
        Ok(_) => None,
        Err(e) => {
            events.push(Event::Log {
                level: LogLevel::Warn,
                message: format!(
                    "{}; resuming from the matrix file's own runs instead",
                    crate::util::one_line(&e)
                ),
            });
            None
        }
    }
}

/// A saved queue obeyed on resume must be runs of the folder's own matrix:
/// one naming another matrix, a variant the matrix lacks or a variant that
/// changes differently is refused, not trained.
/// A resumed folder's finished runs as the queue counts them: (variant
/// index, repeat, seed, what it measured), a run recorded twice as its last row.
fn earlier_runs(
    rows: &[crate::store::RunRow],
) -> Vec<(usize, usize, u64, crate::session::queue::Measured)> {
    let mut last: std::collections::BTreeMap<(String, i64), &crate::store::RunRow> =
        Default::default();
    for r in rows
        .iter()
        .filter(|r| r.status == crate::store::Ended::Done)
    {
        last.insert((r.variant.clone(), r.repeat as i64), r);
    }
    last.into_values()
        .map(|r| {
            let secs = |x: Option<f64>| x.unwrap_or(f64::NAN);
            let noise = match (r.noisy, &r.noise) {
                (Some(true), n) => Some(n.clone().unwrap_or_else(|| "flagged noisy".into())),
                _ => None,
            };
            let m = crate::session::queue::Measured {
                acc: r.acc_tta.unwrap_or(f64::NAN),
                clocks: crate::events::Clocks {
                    dawn_s: secs(r.dawn_s),
                    airbench_s: secs(r.airbench_s),
                    hlb_s: secs(r.hlb_s),
                    wall_s: secs(r.wall_s),
                    ..Default::default()
                },
                noise,
            };
            (r.index as usize, r.repeat as usize, r.seed, m)
        })
        .collect()
}

fn reconcile(
    m: &Matrix,
    saved: &[crate::session::queue::Entry],
    dir: &std::path::Path,
) -> Result<()> {
    let q = dir.join("queue.json");
    let fix = "restore it, or delete it to resume from the manifest's matrix";
    for e in saved {
        let s = &e.spec;
        if s.id.matrix != m.name {
            anyhow::bail!(
                "{}: holds runs of matrix `{}`, but the folder ran `{}`: {fix}",
                q.display(),
                s.id.matrix,
                m.name
            );
        }
        let Some(v) = m.variants.iter().find(|v| v.name == s.id.variant) else {
            anyhow::bail!(
                "{}: variant `{}` is not in the folder's matrix `{}`: {fix}",
                q.display(),
                s.id.variant,
                m.name
            );
        };
        if v.overrides != s.overrides || s.recipe != m.recipe || s.data != m.data {
            anyhow::bail!(
                "{}: run `{}` differs from the variant the folder's matrix defines (recipe, data or changes): {fix}",
                q.display(),
                s.id
            );
        }
    }
    Ok(())
}

impl Session {
    #[allow(
        clippy::too_many_lines,
        reason = "a session's start in order: folders, queue, storage gate, workers, pump"
    )]
    fn start(matrices: Vec<Matrix>, opts: SessionOptions, factory: Factory) -> Result<Session> {
        let devices = if opts.devices.is_empty() {
            vec!["cpu".to_string()]
        } else {
            opts.devices.clone()
        };
        // Before any manifest records the thread count.
        crate::util::device::share_cpu_threads(&devices, opts.cpu_threads);
        let events = Arc::new(EventQueue::default());
        let mut queue = Queue::default();
        let mut stores = HashMap::new();
        let mut order = Vec::new();
        let mut all = matrices;
        let mut resumed = None;
        if let Some(dir) = &opts.resume {
            let w = ResultsWriter::open(dir)?;
            let text = w
                .matrix_text()
                .context("the manifest has no matrix_file to resume from")?
                .to_string();
            let m = crate::matrix::parse(&text, &dir.join("manifest.json").display().to_string())?;
            resumed = Some(m.name.clone());
            all.insert(0, m);
            stores.insert(all[0].name.clone(), w);
        }
        // Before any new folder is made; a resumed matrix's runs count too.
        let gangs = gangs(&all, &devices)?;
        let idle = devices.len() - gangs.iter().map(Vec::len).sum::<usize>();
        if idle > 0 {
            events.push(Event::Log {
                level: LogLevel::Warn,
                message: format!(
                    "{idle} of the {} devices stay idle: runs take gangs of {} (the largest world_size queued)",
                    devices.len(),
                    gangs.first().map_or(0, Vec::len)
                ),
            });
        }
        for m in all {
            if stores.contains_key(&m.name) && resumed.as_deref() != Some(m.name.as_str()) {
                anyhow::bail!(
                    "two matrices are named `{}`; give each file a distinct `name`",
                    m.name
                );
            }
            if !stores.contains_key(&m.name) {
                let label = m.shard.map(|(i, n)| format!("shard-{i}-of-{n}"));
                let mut w = ResultsWriter::create_labelled(
                    &opts.results_root,
                    &m.name,
                    &m.text,
                    label.as_deref(),
                )?;
                w.record_matrix(&m.record())?;
                stores.insert(m.name.clone(), w);
            }
            for w in &m.warnings {
                events.push(Event::Log {
                    level: LogLevel::Warn,
                    message: w.clone(),
                });
            }
            let store = &stores[&m.name];
            let done = store.finished();
            order.push(m.name.clone());
            let qfile = store.dir().join("queue.json");
            let saved = (resumed.as_deref() == Some(m.name.as_str()))
                .then(|| saved_queue(store.dir(), &events))
                .flatten();
            if let Some(entries) = &saved {
                reconcile(&m, entries, store.dir())?;
            }
            match saved {
                Some(entries) => {
                    let (name, earlier) = (m.name.clone(), earlier_runs(store.runs()));
                    queue.resume_matrix(m, entries, &done, Some(qfile));
                    queue.recall(&name, earlier);
                }
                None => queue.add_matrix(m, &done, Some(qfile)),
            }
        }
        let need = opts.min_free_bytes;
        // As the gate before each run checks: a folder deleted since it was
        // made is said so, not taken for a disk that refuses writes.
        for w in stores.values() {
            w.check_folder()?;
            crate::util::check_storage(w.dir(), need)?;
        }
        let shared = Shared::new(queue, events.clone(), opts.keep_alive);
        let cores = crate::util::machine::cpu_cores();
        if let Some(why) = crate::util::machine::thread_noise(opts.cpu_threads, cores) {
            shared.set_thread_noise(why);
        }
        let stores = Arc::new(Mutex::new(stores));
        let gate_stores = stores.clone();
        shared.set_gate(Box::new(move |spec| {
            let stores = gate_stores.lock().expect("results stores");
            match stores.get(&spec.id.matrix) {
                // A folder deleted under the session is said so, not taken
                // for a disk that refuses writes.
                Some(w) => w
                    .check_folder()
                    .and_then(|()| crate::util::check_storage(w.dir(), need))
                    .map_err(|e| crate::util::one_line(&e)),
                None => Ok(()),
            }
        }));
        let workers = crate::session::worker::spawn(&gangs, shared.clone(), factory);
        Ok(Session {
            shared: shared.clone(),
            pump: Pump {
                events,
                stores,
                shared,
            },
            order,
            workers,
            results_root: opts.results_root,
            devices,
            rules: Rules::default(),
        })
    }

    /// The session's event pump, for a consumer on its own task (the TUI).
    pub fn pump(&self) -> Pump {
        self.pump.clone()
    }

    /// The next event, after the store has recorded it. `None` once every worker has exited.
    pub async fn recv(&mut self) -> Option<Event> {
        self.pump.next().await
    }

    pub fn try_recv(&mut self) -> Option<Event> {
        self.pump.try_next()
    }

    pub fn send(&self, cmd: Command) {
        self.shared.command(cmd);
    }

    /// Holds the workers off the queue for a time probe, if no run is
    /// queued or training (see [`worker::Shared::hold_for_probe`]).
    pub fn hold_for_probe(&self) -> Option<worker::ProbeHold> {
        self.shared.hold_for_probe()
    }

    /// A time probe holds the workers now.
    pub fn probing(&self) -> bool {
        self.shared.probing()
    }

    /// Results folders of this session, in matrix order.
    /// Where this session's results folders go (`results/` by default).
    pub fn results_root(&self) -> &std::path::Path {
        &self.results_root
    }

    pub fn results_dirs(&self) -> Vec<PathBuf> {
        let stores = self.pump.stores.lock().expect("results stores");
        self.order
            .iter()
            .filter_map(|n| stores.get(n))
            .map(|w| w.dir().to_path_buf())
            .collect()
    }

    /// Queues another matrix while the session runs, [`admit`]ted as the
    /// session's own were (priced by `pricing`); returns the number of
    /// runs added.
    pub fn enqueue_matrix(&mut self, m: Matrix, pricing: Pricing<'_>) -> Result<usize> {
        admit(
            std::slice::from_ref(&m),
            &self.devices,
            &self.rules,
            pricing,
            open::Entry::Queued,
        )?;
        if self
            .pump
            .stores
            .lock()
            .expect("results stores")
            .contains_key(&m.name)
        {
            anyhow::bail!("matrix `{}` is already in this session", m.name);
        }
        let mut w = ResultsWriter::create(&self.results_root, &m.name, &m.text)?;
        w.record_matrix(&m.record())?;
        let n = m.runs().len();
        for w in &m.warnings {
            self.pump.events.push(Event::Log {
                level: LogLevel::Warn,
                message: w.clone(),
            });
        }
        let qfile = w.dir().join("queue.json");
        self.order.push(m.name.clone());
        self.pump
            .stores
            .lock()
            .expect("results stores")
            .insert(m.name.clone(), w);
        self.shared
            .queue
            .lock()
            .expect("queue")
            .add_matrix(m, &Default::default(), Some(qfile));
        self.shared.notify();
        self.pump.events.push(Event::Queue(
            self.shared.queue.lock().expect("queue").snapshot(),
        ));
        Ok(n)
    }

    /// Waits for the workers to exit and records what is still in flight.
    pub fn join(mut self) {
        for w in std::mem::take(&mut self.workers) {
            let _ = w.join();
        }
        while self.try_recv().is_some() {}
    }

    pub fn idle(&self) -> bool {
        self.shared.idle()
    }

    /// Why the session stopped early, if a results store could not store.
    pub fn halted(&self) -> Option<String> {
        self.shared.halted()
    }
}

#[cfg(test)]
mod tests;
