//! The worker threads: one OS thread per device owns all tch state and runs
//! the shared queue. Events go out through a coalescing queue that never
//! blocks the worker; commands come in as shared flags and queue operations.

use crate::config::RunSpec;
use crate::events::{Command, Event, LogLevel, RunStatus};
use crate::matrix::Job;
use crate::script::ScriptRun;
use crate::session::queue::Queue;
use crate::train::{Control, Flow, Outcome, Trainer};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Makes the trainer for a device, on the worker thread that will own it.
pub type Factory = Arc<dyn Fn(&str) -> anyhow::Result<Box<dyn Trainer>> + Send + Sync>;

/// Events from workers to the consumer. Pushing never blocks: while the
/// consumer lags, consecutive step chunks of the same run merge into one, so
/// the backlog stays small and no event other than a step chunk is dropped.
#[derive(Default)]
pub struct EventQueue {
    q: Mutex<VecDeque<Event>>,
    notify: tokio::sync::Notify,
    closed: AtomicBool,
}

impl EventQueue {
    pub fn push(&self, ev: Event) {
        let mut q = self.q.lock().expect("event queue");
        if let Event::Steps {
            run,
            rows,
            images_per_s,
            loader_share,
        } = ev
        {
            if let Some(Event::Steps {
                run: r,
                rows: prev,
                images_per_s: ips,
                loader_share: share,
            }) = q.back_mut()
                && *r == run
            {
                prev.extend(rows);
                *ips = images_per_s;
                *share = loader_share;
            } else {
                q.push_back(Event::Steps {
                    run,
                    rows,
                    images_per_s,
                    loader_share,
                });
            }
        } else {
            q.push_back(ev);
        }
        drop(q);
        self.notify.notify_one();
    }

    pub fn try_pop(&self) -> Option<Event> {
        self.q.lock().expect("event queue").pop_front()
    }

    /// Waits for the next event; `None` once closed and drained.
    pub async fn pop(&self) -> Option<Event> {
        loop {
            if let Some(e) = self.try_pop() {
                return Some(e);
            }
            if self.closed.load(Ordering::SeqCst) {
                return None;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), self.notify.notified()).await;
        }
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub fn len(&self) -> usize {
        self.q.lock().expect("event queue").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// State shared by the workers and the command side.
pub struct Shared {
    pub queue: Mutex<Queue>,
    paused: Mutex<bool>,
    wake: Condvar,
    cancel: AtomicBool,
    stop_after_current: AtomicBool,
    shutdown: AtomicBool,
    busy: AtomicUsize,
    /// Interactive sessions keep idle workers waiting for more matrices.
    keep_alive: bool,
    pub events: Arc<EventQueue>,
    /// Asked before a run is handed to a worker: can its results be stored?
    gate: Mutex<Option<Gate>>,
    /// Why the session stopped handing out runs (a results store that cannot store).
    halted: Mutex<Option<String>>,
    /// Runs that ended in a worker, and those whose end the store has recorded:
    /// the next run waits for the store, so a failed write stops it.
    ended: AtomicUsize,
    recorded: AtomicUsize,
    /// Time probes in progress (the picker's): no run starts beside one,
    /// so neither prices nor times the other's load.
    probing: AtomicUsize,
    /// Why every run's seconds are noisy whatever the machine did
    /// (`--cpu-threads` above the cores), set once when the session starts.
    thread_noise: std::sync::OnceLock<String>,
}

/// A check before each run; `Err` holds a one-line reason with the fix.
pub type Gate = Box<dyn Fn(&RunSpec) -> Result<(), String> + Send + Sync>;

impl Shared {
    pub fn new(queue: Queue, events: Arc<EventQueue>, keep_alive: bool) -> Arc<Shared> {
        Arc::new(Shared {
            queue: Mutex::new(queue),
            paused: Mutex::new(false),
            wake: Condvar::new(),
            cancel: AtomicBool::new(false),
            stop_after_current: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            keep_alive,
            events,
            gate: Mutex::new(None),
            halted: Mutex::new(None),
            ended: AtomicUsize::new(0),
            recorded: AtomicUsize::new(0),
            probing: AtomicUsize::new(0),
            thread_noise: std::sync::OnceLock::new(),
        })
    }

    /// Flags every run of the session noisy for `why` (added to what its
    /// own machine watch found).
    pub fn set_thread_noise(&self, why: String) {
        let _ = self.thread_noise.set(why);
    }

    /// The results store has recorded a run's end (called by the event pump).
    pub fn run_recorded(&self) {
        self.recorded.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits (a bounded time: a consumer may lag) until every ended run is
    /// recorded, then says whether the next run may start.
    fn may_start(&self, spec: &RunSpec) -> Result<(), String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.recorded.load(Ordering::SeqCst) < self.ended.load(Ordering::SeqCst)
            && std::time::Instant::now() < deadline
            && !self.shutdown.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(reason) = self.halted() {
            return Err(reason);
        }
        match &*self.gate.lock().expect("gate") {
            Some(gate) => gate(spec),
            None => Ok(()),
        }
    }

    pub fn set_gate(&self, gate: Gate) {
        *self.gate.lock().expect("gate") = Some(gate);
    }

    /// Stops handing out runs (the one in progress finishes) and says why once.
    pub fn halt(&self, reason: String) {
        let mut h = self.halted.lock().expect("halted");
        if h.is_none() {
            self.events.push(Event::Log {
                level: LogLevel::Error,
                message: format!("stopping: {reason}"),
            });
            *h = Some(reason);
        }
        drop(h);
        self.stop_after_current.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }

    pub fn halted(&self) -> Option<String> {
        self.halted.lock().expect("halted").clone()
    }

    /// The queue's next run. A budget spent skips its matrix's queued runs:
    /// said in the log, and kept in its queue.json at once, which `results`
    /// and the report read.
    fn next_run(&self) -> Option<RunSpec> {
        let (next, notes) = {
            let mut q = self.queue.lock().expect("queue");
            (q.next_run(), q.take_notes())
        };
        if !notes.is_empty() {
            for (level, message) in notes {
                self.events.push(Event::Log { level, message });
            }
            self.snapshot();
        }
        next
    }

    fn snapshot(&self) {
        let q = self.queue.lock().expect("queue");
        if let Err(e) = q.save() {
            self.events.push(Event::Log {
                level: LogLevel::Warn,
                message: format!("queue.json: {}", crate::util::one_line(&e)),
            });
        }
        self.events.push(Event::Queue(q.snapshot()));
    }

    /// Applies a command from a consumer. Never blocks on a running step.
    pub fn command(&self, cmd: Command) {
        match cmd {
            Command::Requeue(id) => {
                self.queue.lock().expect("queue").requeue(&id);
            }
            Command::Move { run, up } => {
                self.queue.lock().expect("queue").move_run(&run, up);
            }
            Command::Remove(id) => {
                self.queue.lock().expect("queue").remove(&id);
            }
            Command::Pause | Command::Resume => {
                let p = cmd == Command::Pause;
                *self.paused.lock().expect("pause") = p;
                self.events.push(Event::WorkerPaused(p));
            }
            Command::CancelCurrent => self.cancel.store(true, Ordering::SeqCst),
            Command::StopAfterCurrent => self.stop_after_current.store(true, Ordering::SeqCst),
            Command::Shutdown => {
                self.shutdown.store(true, Ordering::SeqCst);
                self.cancel.store(true, Ordering::SeqCst);
            }
        }
        self.wake.notify_all();
        self.snapshot();
    }

    /// True once nothing is queued or running (an interactive session's idle state).
    pub fn idle(&self) -> bool {
        let q = self.queue.lock().expect("queue");
        !q.has_queued() && !q.running()
    }

    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst) || self.stop_after_current.load(Ordering::SeqCst)
    }

    /// Blocks while paused; returns false if the worker must stop.
    fn wait_unpaused(&self) -> bool {
        let mut p = self.paused.lock().expect("pause");
        while *p && !self.shutdown.load(Ordering::SeqCst) {
            p = self
                .wake
                .wait_timeout(p, Duration::from_millis(200))
                .expect("pause")
                .0;
        }
        !self.shutdown.load(Ordering::SeqCst)
    }

    /// Waits until there is queued work, or returns false when the session is over.
    fn wait_for_work(&self) -> bool {
        loop {
            if self.stopping() {
                return false;
            }
            {
                let q = self.queue.lock().expect("queue");
                // Taken under the queue's lock, as a probe's hold is.
                if q.has_queued() && self.probing.load(Ordering::SeqCst) == 0 {
                    return true;
                }
                if !self.keep_alive && !q.running() && self.busy.load(Ordering::SeqCst) == 0 {
                    return false;
                }
            }
            let g = self.paused.lock().expect("pause");
            let _ = self.wake.wait_timeout(g, Duration::from_millis(200));
        }
    }

    /// Holds the workers off the queue while a time probe runs, if nothing
    /// is queued or running now (checked under the queue's lock, where the
    /// workers check the hold): `None` while runs train.
    pub fn hold_for_probe(self: &Arc<Self>) -> Option<ProbeHold> {
        let q = self.queue.lock().expect("queue");
        if q.has_queued() || q.running() || self.busy.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.probing.fetch_add(1, Ordering::SeqCst);
        Some(ProbeHold(Arc::clone(self)))
    }

    /// A time probe holds the workers (runs queued now start after it).
    pub fn probing(&self) -> bool {
        self.probing.load(Ordering::SeqCst) > 0
    }

    /// Wakes idle workers after runs were added.
    pub fn notify(&self) {
        self.wake.notify_all();
    }
}

/// A time probe's hold on the workers, released when dropped.
pub struct ProbeHold(Arc<Shared>);

impl Drop for ProbeHold {
    fn drop(&mut self) {
        self.0.probing.fetch_sub(1, Ordering::SeqCst);
        self.0.wake.notify_all();
    }
}

struct WorkerControl<'a>(&'a Shared);

impl Control for WorkerControl<'_> {
    fn poll(&self) -> Flow {
        if !self.0.wait_unpaused() || self.0.cancel.load(Ordering::SeqCst) {
            return Flow::Cancel;
        }
        Flow::Continue
    }

    fn pausing(&self) -> bool {
        *self.0.paused.lock().expect("pause")
    }
}

/// Starts one worker per gang of devices (one device each for runs of
/// world size 1). When the last one exits, the event queue gets `Drained`
/// and is closed.
pub fn spawn(gangs: &[Vec<String>], shared: Arc<Shared>, factory: Factory) -> Vec<JoinHandle<()>> {
    let alive = Arc::new(AtomicUsize::new(gangs.len()));
    gangs
        .iter()
        .map(|gang| {
            let (gang, shared, factory, alive) =
                (gang.clone(), shared.clone(), factory.clone(), alive.clone());
            std::thread::Builder::new()
                .name(format!("worker-{}", gang.join(",")))
                .spawn(move || {
                    worker_loop(&gang, &shared, &factory);
                    if alive.fetch_sub(1, Ordering::SeqCst) == 1 {
                        shared.snapshot();
                        shared.events.push(Event::Drained);
                        shared.events.close();
                    }
                })
                .expect("spawning a worker thread")
        })
        .collect()
}

fn worker_loop(gang: &[String], shared: &Shared, factory: &Factory) {
    let dev = &gang[0];
    let mut trainer: Box<dyn Trainer> = match factory(dev) {
        Ok(t) => Box::new(crate::dist::gang::Gang::new(t, gang.to_vec())),
        Err(e) => {
            shared.events.push(Event::Log {
                level: LogLevel::Error,
                message: format!("worker {dev}: {}", crate::util::one_line(&e)),
            });
            return;
        }
    };
    shared.snapshot();
    let mut warm = false;
    loop {
        if !shared.wait_unpaused() || !shared.wait_for_work() {
            return;
        }
        let Some(spec) = shared.next_run() else {
            continue;
        };
        if let Err(reason) = shared.may_start(&spec) {
            shared.queue.lock().expect("queue").unclaim(&spec.id);
            shared.halt(reason);
            shared.snapshot();
            continue;
        }
        shared.busy.fetch_add(1, Ordering::SeqCst);
        shared.cancel.store(false, Ordering::SeqCst);
        shared.snapshot();
        // The run's plan or command, decided once when its matrix was
        // parsed: the trainer and the script runner only read it.
        let (job, folder) = {
            let q = shared.queue.lock().expect("queue");
            (q.job(&spec), q.folder(&spec.id.matrix))
        };
        if let (false, Ok(Job::Engine(planned))) = (warm, &job) {
            // Otherwise the first run of every session, a ladder's first rung,
            // carries the one-time costs and every speedup is inflated.
            warm = true;
            // A warm-up that panics must not take the worker down: the run
            // itself then reports the failure, under catch_unwind like every run.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                trainer.warm_up(planned, &WorkerControl(shared))
            }));
            let log = match r {
                Ok(Some(msg)) => Some((LogLevel::Info, msg)),
                Ok(None) => None,
                Err(p) => Some((
                    LogLevel::Warn,
                    format!(
                        "warm-up on {dev} failed ({}); its run will say why",
                        panic_text(p.as_ref())
                    ),
                )),
            };
            if let Some((level, message)) = log {
                shared.events.push(Event::Log { level, message });
            }
        }
        match job {
            Ok(Job::Script { spec: s, record }) => {
                // A gang as large as the session's largest world size: a
                // run of fewer processes takes the first of its devices.
                let world = record.variant.script().map_or(1, |s| s.world_size);
                let run = ScriptRun {
                    spec: &s,
                    record,
                    devices: &gang[..world.clamp(1, gang.len())],
                    // A queue kept nowhere (a test's) keeps its runs' output
                    // in the temporary folder.
                    folder: folder.unwrap_or_else(|| std::env::temp_dir().join("tricklab-scripts")),
                };
                run_one(&spec, shared, |ctl, emit| {
                    crate::script::run(&run, ctl, emit)
                });
            }
            other => run_one(&spec, shared, |ctl, emit| {
                let planned = match other? {
                    Job::Engine(p) => p,
                    Job::Script { .. } => unreachable!("a script job is run above"),
                };
                trainer.run(&planned, ctl, emit)
            }),
        }
        shared.ended.fetch_add(1, Ordering::SeqCst);
        shared.busy.fetch_sub(1, Ordering::SeqCst);
        shared.snapshot();
        shared.wake.notify_all();
    }
}

/// Runs `spec` by `go` (the engine's trainer or a script) under the
/// queue's control, and records how it ended.
fn run_one(
    spec: &RunSpec,
    shared: &Shared,
    go: impl FnOnce(&dyn Control, &mut dyn FnMut(Event)) -> anyhow::Result<Outcome>,
) {
    let events = shared.events.clone();
    let ctl = WorkerControl(shared);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        go(&ctl, &mut |e| events.push(e))
    }));
    let id = spec.id.clone();
    let (status, reason, measured, ev) = match result {
        Ok(Ok(Outcome::Finished(mut summary))) => {
            if let Some(why) = shared.thread_noise.get() {
                summary.noise = Some(match summary.noise.take() {
                    Some(own) => format!("{own}; {why}"),
                    None => why.clone(),
                });
            }
            let measured = crate::session::queue::Measured::of(&summary);
            (
                RunStatus::Done,
                None,
                Some(measured),
                Event::RunFinished {
                    run: id.clone(),
                    summary,
                },
            )
        }
        Ok(Ok(Outcome::Cancelled)) => (
            RunStatus::Cancelled,
            None,
            None,
            Event::RunCancelled { run: id.clone() },
        ),
        Ok(Err(e)) => {
            let r = crate::util::one_line(&e);
            (
                RunStatus::Failed,
                Some(r.clone()),
                None,
                Event::RunFailed {
                    run: id.clone(),
                    reason: r,
                },
            )
        }
        Err(p) => {
            let r = format!("internal error: {}", panic_text(p.as_ref()));
            (
                RunStatus::Failed,
                Some(r.clone()),
                None,
                Event::RunFailed {
                    run: id.clone(),
                    reason: r,
                },
            )
        }
    };
    events.push(ev);
    let notes = {
        let mut q = shared.queue.lock().expect("queue");
        q.finish(&id, status, reason, measured);
        q.take_notes()
    };
    for (level, message) in notes {
        events.push(Event::Log { level, message });
    }
}

/// The first line of a panic's message.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into());
    msg.lines().next().unwrap_or("").to_string()
}
