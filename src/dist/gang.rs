//! A run of world size N is a gang of N rank processes (`tricklab rank`),
//! one device each, started the way torchrun starts them: the launcher only
//! sets the environment (`dist::env::Launch::env`: torchrun's variables)
//! and watches the processes; inside a Slurm allocation, srun
//! starts them instead and sets its own variables. The ranks rendezvous and
//! reduce through c10d (dist::group).
//!
//! Rank 0 alone reports: its events come back as JSON lines on its stdout,
//! and the worker forwards them, so the queue, the store and the TUI see one
//! run whatever its world size. A rank that dies fails the run with its
//! name; the others are killed, never left behind.

use super::env::Launch;
use crate::events::{Event, RunSummary};
use crate::plan::PlannedRun;
use crate::train::{Control, Flow, Outcome, Trainer};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// What rank 0 says on its stdout, one JSON object a line after [`TAG`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    Event(Event),
    /// A line for the log (the warm-up's).
    Log(String),
    /// A protocol line the worker could not read: said, never dropped
    /// in silence (made by the reader, not sent by a rank).
    Unreadable(String),
    /// Each rank's host, by rank, as rank 0 learnt them at the rendezvous.
    Hosts(Vec<String>),
    Finished(RunSummary),
}

/// Marks rank 0's protocol lines (a library may print lines of its own).
pub const TAG: &str = "tricklab-rank0 ";

/// Rank 0 writes `m` to its stdout, flushed (its worker is reading).
pub fn say(m: &Msg) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{}", serde_json::to_string(m)?)?;
    out.flush()?;
    Ok(())
}

/// The seconds a rank waits for the others at the rendezvous and at each
/// collective before it fails (TRICKLAB_DIST_TIMEOUT, default 300: an
/// evaluation on rank 0 must fit in it).
pub fn timeout() -> Duration {
    let s = std::env::var("TRICKLAB_DIST_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(300.0);
    Duration::from_secs_f64(s)
}

/// A worker's devices: runs of world size 1 train in this process on the
/// first; a run of world size N ≤ the gang's devices is launched on the
/// first N as rank processes.
pub struct Gang {
    inner: Box<dyn Trainer>,
    devices: Vec<String>,
}

impl Gang {
    pub fn new(inner: Box<dyn Trainer>, devices: Vec<String>) -> Gang {
        Gang { inner, devices }
    }
}

impl Trainer for Gang {
    fn device_name(&self) -> String {
        match self.devices.len() {
            1 => self.inner.device_name(),
            _ => local_label(&self.devices),
        }
    }

    fn run(
        &mut self,
        run: &PlannedRun,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let world = run.plan.world_size;
        if world <= 1 {
            return self.inner.run(run, ctl, emit);
        }
        if world > self.devices.len() {
            bail!(
                "world_size {world} needs {world} devices but this worker holds {} ({}): start the session with at least {world} devices (e.g. --devices cpu:{world} or cuda:0-{})",
                self.devices.len(),
                self.devices.join(","),
                world - 1
            );
        }
        let devices = &self.devices[..world];
        match Launched::start(run, devices)?.follow(ctl, emit) {
            // The free port was taken between its choice and rank 0's bind
            // (another program, or another gang's choice): once more on
            // another, rather than a failure blamed on MASTER_PORT.
            Err(e) if !use_srun(world) && e.to_string().contains("is in use (MASTER_PORT)") => {
                emit(Event::Log {
                    level: crate::events::LogLevel::Warn,
                    message: format!(
                        "{}: the rendezvous port was taken before rank 0 bound it; starting the ranks again on another",
                        run.spec.id
                    ),
                });
                Launched::start(run, devices)?.follow(ctl, emit)
            }
            r => r,
        }
    }

    fn warm_up(&mut self, run: &PlannedRun, ctl: &dyn Control) -> Option<String> {
        // The worker warms once, before its first run. A gang's ranks warm
        // up together in their own processes, but this process's trainer is
        // still warmed (with a one-process form of the run) for the runs of
        // world size 1 that may follow.
        let mut one = run.clone();
        one.plan.world_size = 1;
        self.inner.warm_up(&one, ctl)
    }
}

/// srun starts the ranks when the session itself runs inside a Slurm
/// allocation with enough tasks (TRICKLAB_LAUNCHER=local|srun decides).
fn use_srun(world: usize) -> bool {
    match std::env::var("TRICKLAB_LAUNCHER").as_deref() {
        Ok("srun") => true,
        Ok("local") => false,
        _ => {
            std::env::var("SLURM_JOB_ID").is_ok()
                && std::env::var("SLURM_NTASKS")
                    .ok()
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| n >= world)
        }
    }
}

/// A free TCP port for the rendezvous (the kernel's choice, released just
/// before rank 0 binds it, as torchrun's standalone mode does).
fn free_port() -> Result<u16> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").context("no free port for the rendezvous")?;
    Ok(l.local_addr()?.port())
}

/// The rank processes of one run (or the one srun that started them).
struct Launched {
    children: Vec<Child>,
    devices: Vec<String>,
    world: usize,
    srun: bool,
    /// Each rank's host, once rank 0 has said them.
    hosts: Vec<String>,
    msgs: mpsc::Receiver<Msg>,
    /// Each child's last lines on stderr (srun's: every rank's).
    stderr: Vec<Arc<Mutex<Vec<String>>>>,
    /// Rank 0's lines that did not read, each said in the log.
    unreadable: usize,
}

impl Launched {
    #[allow(
        clippy::too_many_lines,
        reason = "the launch in order: the environment, each rank's command, its pipes"
    )]
    fn start(run: &PlannedRun, devices: &[String]) -> Result<Launched> {
        let world = devices.len();
        let exe = std::env::current_exe().context("cannot find this binary to start the ranks")?;
        let spec = serde_json::to_string(&run.spec)?;
        let srun = use_srun(world);
        // Gangs on this machine each take a free port: an exported
        // MASTER_PORT (set for torchrun or a job script) would be every
        // concurrent gang's at once. srun's ranks on other nodes need the
        // job's port.
        let port: u16 = match std::env::var("MASTER_PORT") {
            Ok(p) if srun => p.trim().parse().with_context(|| {
                format!("MASTER_PORT={p} is not a port number: unset it, or set a free port")
            })?,
            _ => free_port()?,
        };
        // A CPU rank gets this worker's share of the cores: the session's
        // `--cpu-threads`, or the cores split among its CPU devices.
        let threads = tch::get_num_threads().max(1).to_string();
        let commands: Vec<(String, Command)> = if srun {
            let mut c = Command::new("srun");
            c.args([
                "--ntasks",
                &world.to_string(),
                // No --label: srun labels each chunk it forwards, which
                // splits rank 0's long lines; the ranks name themselves.
                "--kill-on-bad-exit=1",
            ]);
            // srun (Slurm ≥ 22.05) does not take the job's --cpus-per-task.
            if let Ok(cpus) = std::env::var("SLURM_CPUS_PER_TASK") {
                c.args(["--cpus-per-task", &cpus]);
            }
            c.arg(&exe)
                .args(["rank", "--spec", &spec, "--device", "local"])
                .args(["--threads", &threads])
                .env("MASTER_PORT", port.to_string());
            vec![("srun".into(), c)]
        } else {
            devices
                .iter()
                .enumerate()
                .map(|(rank, dev)| {
                    let mut c = Command::new(&exe);
                    c.args(["rank", "--spec", &spec, "--device", dev]);
                    if dev.starts_with("cpu") {
                        c.args(["--threads", &threads]);
                    }
                    c.envs(Launch::on_this_machine(rank, world, port).env());
                    (format!("rank {rank}"), c)
                })
                .collect()
        };
        let (tx, msgs) = mpsc::channel();
        let mut children = Vec::new();
        let mut stderr = Vec::new();
        for (i, (name, mut c)) in commands.into_iter().enumerate() {
            c.stdin(Stdio::null())
                .stdout(if i == 0 {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stderr(Stdio::piped());
            // SAFETY: prctl and setpgid only, between fork and exec. A rank
            // dies with the worker that started it, even on kill -9. In a
            // process group of its own, a terminal's Ctrl-C reaches the
            // session alone, which lets the gang finish its run (first),
            // cancels it (second) or exits (third), as at world size 1.
            unsafe {
                c.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    libc::setpgid(0, 0);
                    Ok(())
                });
            }
            let mut child = c.spawn().with_context(|| {
                if srun {
                    "cannot start srun for the ranks: run inside a Slurm allocation, or TRICKLAB_LAUNCHER=local".to_string()
                } else {
                    format!("cannot start {name} ({})", exe.display())
                }
            })?;
            if let Some(out) = child.stdout.take() {
                read_messages(out, tx.clone());
            }
            let tail = child.stderr.take().map(tail_lines).unwrap_or_default();
            children.push(child);
            stderr.push(tail);
        }
        Ok(Launched {
            children,
            devices: devices.to_vec(),
            world,
            srun,
            hosts: Vec::new(),
            unreadable: 0,
            msgs,
            stderr,
        })
    }

    /// Forwards rank 0's events until every rank has exited; the first rank
    /// to fail fails the run and the others are killed.
    fn follow(mut self, ctl: &dyn Control, emit: &mut dyn FnMut(Event)) -> Result<Outcome> {
        let mut summary = None;
        let mut exits: Vec<Option<ExitStatus>> = vec![None; self.children.len()];
        loop {
            while let Ok(m) = self.msgs.try_recv() {
                self.take(m, emit, &mut summary);
            }
            let mut failed = Vec::new();
            for (i, c) in self.children.iter_mut().enumerate() {
                if exits[i].is_none()
                    && let Some(st) = c.try_wait()?
                {
                    exits[i] = Some(st);
                    if !st.success() {
                        failed.push(i);
                    }
                }
            }
            if !failed.is_empty() {
                let why = self.failure(&failed, &exits);
                self.kill_all();
                bail!("{why}");
            }
            if exits.iter().all(Option::is_some) {
                // The reader may still hold rank 0's last line.
                let deadline = Instant::now() + Duration::from_secs(5);
                while summary.is_none() && Instant::now() < deadline {
                    match self.msgs.recv_timeout(Duration::from_millis(50)) {
                        Ok(m) => self.take(m, emit, &mut summary),
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                    }
                }
                return match summary {
                    Some(mut s) => {
                        s.device = self.label(&s.device);
                        Ok(Outcome::Finished(s))
                    }
                    None => {
                        let said = self.stderr[0].lock().expect("stderr tail").last().cloned();
                        let lost = match self.unreadable {
                            0 => String::new(),
                            n => format!(" ({n} of its lines did not read; the log names them)"),
                        };
                        bail!(
                            "rank 0 of {} exited without a summary{lost}{}",
                            self.world,
                            said.map(|l| format!(": its last line: {}", l.trim()))
                                .unwrap_or_default()
                        )
                    }
                };
            }
            // A pause takes effect between runs: the gang is not stopped mid-step.
            if !ctl.pausing() && ctl.poll() == Flow::Cancel {
                self.kill_all();
                return Ok(Outcome::Cancelled);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The run's device in events and its row: the gang's (`cpu ×2`,
    /// `cuda:0+cuda:1`, `cuda:0 ×8 (srun)`, `cuda:0 ×16 (srun on n1, n2)`);
    /// `rank_devices` has each rank's.
    fn label(&self, rank0: &str) -> String {
        let mut hosts = self.hosts.clone();
        hosts.sort_unstable();
        hosts.dedup();
        if self.srun {
            match hosts.len() {
                0 | 1 => format!("{rank0} ×{} (srun)", self.world),
                2..=4 => format!("{rank0} ×{} (srun on {})", self.world, hosts.join(", ")),
                n => format!("{rank0} ×{} (srun on {n} hosts)", self.world),
            }
        } else {
            local_label(&self.devices)
        }
    }

    /// One message of rank 0: an event forwarded (with the gang's device),
    /// a log line, or the summary kept for the end.
    fn take(&mut self, m: Msg, emit: &mut dyn FnMut(Event), summary: &mut Option<RunSummary>) {
        match m {
            Msg::Event(mut ev) => {
                if let Event::RunStarted { device, .. } = &mut ev {
                    *device = self.label(device);
                }
                emit(ev);
            }
            Msg::Log(message) => emit(Event::Log {
                level: crate::events::LogLevel::Info,
                message,
            }),
            Msg::Unreadable(message) => {
                self.unreadable += 1;
                emit(Event::Log {
                    level: crate::events::LogLevel::Warn,
                    message,
                });
            }
            Msg::Hosts(hosts) => {
                emit(Event::Log {
                    level: crate::events::LogLevel::Info,
                    message: crate::dist::group::placement(&hosts),
                });
                self.hosts = hosts;
            }
            Msg::Finished(s) => *summary = Some(s),
        }
    }

    /// A rank still running but stopped (SIGSTOP, a debugger): the others
    /// timed out waiting for it, and it is the one to name.
    fn stopped(&self, exits: &[Option<ExitStatus>]) -> Option<String> {
        let i = (0..self.children.len()).find(|&i| {
            exits[i].is_none()
                && crate::util::machine::process_state(self.children[i].id()) == Some('T')
        })?;
        Some(format!(
            "rank {i} of {} ({}, pid {}) stopped answering: its process is stopped (SIGSTOP or a debugger), and the other ranks timed out waiting for it after {} s; the run failed; requeue it",
            self.world,
            self.devices[i],
            self.children[i].id(),
            timeout().as_secs()
        ))
    }

    /// One line naming the rank that failed first: a rank killed by a
    /// signal before one that exited on its own (which is usually a peer
    /// reporting the loss), and that one's own last error line.
    fn failure(&self, failed: &[usize], exits: &[Option<ExitStatus>]) -> String {
        // A rank's last error line, without the "error: rank r of n: " it
        // starts with (the message names the rank already).
        let last = |i: usize| -> Option<String> {
            let t = self.stderr[i].lock().expect("stderr tail");
            let l = t
                .iter()
                .rev()
                .find(|l| l.contains("error"))
                .or_else(|| t.last())?;
            let own = format!("rank {i} of {}: ", self.world);
            Some(
                l.split_once(&own)
                    .map_or(l.as_str(), |(_, rest)| rest)
                    .trim()
                    .to_string(),
            )
        };
        if self.srun {
            // srun names the task: "srun: error: host: task 1: Killed".
            let lines = self.stderr[0].lock().expect("stderr tail").clone();
            let task = lines
                .iter()
                .filter(|l| l.starts_with("srun: "))
                .find_map(|l| {
                    let at = l.find("task ")?;
                    let rest = &l[at + 5..];
                    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let what = rest.split_once(": ").map(|x| x.1.trim().to_string());
                    Some((n.parse::<usize>().ok()?, what.unwrap_or_default()))
                });
            // A rank's own line: "error: rank 1 of 2: …".
            let own = |r: usize| {
                let me = format!("rank {r} of {}", self.world);
                lines.iter().rev().find(|l| l.contains(&me)).cloned()
            };
            return match task {
                Some((r, what)) => format!(
                    "rank {r} of {} (srun task {r}) failed: {}: the run failed; requeue it",
                    self.world,
                    own(r).unwrap_or(what)
                ),
                None => format!(
                    "srun exited {}: {}",
                    exits[0].map(describe).unwrap_or_default(),
                    last(0).unwrap_or_default()
                ),
            };
        }
        if let Some(why) = self.stopped(exits) {
            return why;
        }
        let peer_loss = |i: usize| {
            last(i).is_some_and(|l| {
                l.contains("closed by peer")
                    || l.contains("Connection reset")
                    || l.contains("Broken pipe")
            })
        };
        let culprit = failed
            .iter()
            .copied()
            .find(|&i| exits[i].is_some_and(|s| s.signal().is_some()))
            .or_else(|| failed.iter().copied().find(|&i| !peer_loss(i)))
            .unwrap_or(failed[0]);
        let st = exits[culprit].map(describe).unwrap_or_default();
        let pid = self.children[culprit].id();
        let dev = &self.devices[culprit];
        match last(culprit) {
            Some(l) if exits[culprit].is_some_and(|s| s.signal().is_none()) => {
                format!(
                    "rank {culprit} of {} ({dev}, pid {pid}) {st}: {l}",
                    self.world
                )
            }
            _ => format!(
                "rank {culprit} of {} ({dev}, pid {pid}) {st}: the run failed; requeue it",
                self.world
            ),
        }
    }

    /// SIGKILL to every rank still running, and reaped: none is left behind.
    fn kill_all(&mut self) {
        for c in &mut self.children {
            if self.srun {
                // srun forwards a SIGTERM to its tasks and cancels the step.
                // SAFETY: a plain kill(2) of our own child.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Rank 0's protocol lines, parsed on a thread of their own.
fn read_messages(out: std::process::ChildStdout, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Some(at) = line.find(TAG) else { continue };
            let m = serde_json::from_str::<Msg>(&line[at + TAG.len()..]).unwrap_or_else(|e| {
                let shown: String = line[at + TAG.len()..].chars().take(120).collect();
                Msg::Unreadable(format!(
                    "rank 0 sent a line this worker cannot read ({e}), skipped: {shown}; a tricklab binary of another version on a rank? `tricklab --version` on each"
                ))
            });
            let _ = tx.send(m);
        }
    });
}

/// The last 40 non-empty lines a rank wrote on stderr, kept as it writes.
fn tail_lines(err: std::process::ChildStderr) -> Arc<Mutex<Vec<String>>> {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let keep = tail.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let mut t = keep.lock().expect("stderr tail");
            if !line.trim().is_empty() {
                t.push(line);
            }
            let n = t.len();
            if n > 40 {
                t.drain(..n - 40);
            }
        }
    });
    tail
}

/// Devices of one box as a gang: `cpu ×2`, `cuda:0+cuda:1`.
fn local_label(devices: &[String]) -> String {
    if devices.iter().all(|d| *d == devices[0]) {
        format!("{} ×{}", devices[0], devices.len())
    } else {
        devices.join("+")
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (_, Some(9)) => "was killed by signal 9 (SIGKILL)".into(),
        (_, Some(sig)) => format!("was killed by signal {sig}"),
        (Some(c), None) => format!("exited with status {c}"),
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch without an evaluation (NaN test accuracy), a diverged
    /// loss and BN scale: JSON carries them as null, and they read back
    /// as NaN instead of losing the line; a line that does not read is said.
    #[test]
    fn non_finite_numbers_cross_the_rank_channel_and_a_bad_line_is_said() {
        let row = crate::events::EpochRow {
            epoch: 1,
            steps: 4,
            train_loss: f64::NAN,
            train_acc: 0.5,
            test_acc: f64::NAN,
            test_acc_tta: None,
            train_s: 1.0,
            eval_s: 0.0,
            images_per_s: f64::INFINITY,
            peak_mem_bytes: None,
            loader_s: 0.0,
            loader_images_per_s: None,
            ddp: None,
        };
        let run = crate::events::RunId {
            matrix: "m".into(),
            index: 0,
            variant: "v".into(),
            repeat: 0,
        };
        let msgs = [
            Msg::Event(Event::Epoch {
                run: run.clone(),
                row,
            }),
            Msg::Event(Event::Steps {
                run,
                rows: vec![crate::events::StepRow {
                    step: 1,
                    epoch: 0.1,
                    loss: f64::NAN,
                    lr: 0.1,
                    bn_scale: vec![f32::NAN, 1.0],
                    bn_bias: vec![0.0],
                    loader_s: 0.0,
                }],
                images_per_s: 1.0,
                loader_share: 0.0,
            }),
        ];
        let mut text: Vec<u8> = msgs
            .iter()
            .flat_map(|m| format!("{TAG}{}\n", serde_json::to_string(m).unwrap()).into_bytes())
            .collect();
        text.extend_from_slice(format!("{TAG}{{\"Event\": 3}}\n").as_bytes());
        let mut child = std::process::Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(&text).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        read_messages(child.stdout.take().unwrap(), tx);
        let got: Vec<Msg> = rx.iter().take(3).collect();
        let _ = child.wait();
        let Msg::Event(Event::Epoch { row, .. }) = &got[0] else {
            panic!("{:?}", got[0])
        };
        assert!(row.test_acc.is_nan() && row.train_loss.is_nan() && row.images_per_s.is_nan());
        assert_eq!(row.train_acc, 0.5);
        let Msg::Event(Event::Steps { rows, .. }) = &got[1] else {
            panic!("{:?}", got[1])
        };
        assert!(rows[0].loss.is_nan() && rows[0].bn_scale[0].is_nan());
        assert_eq!(rows[0].bn_scale[1], 1.0);
        let Msg::Unreadable(said) = &got[2] else {
            panic!("{:?}", got[2])
        };
        assert!(
            said.starts_with("rank 0 sent a line this worker cannot read"),
            "{said}"
        );
    }

    /// Records the world sizes it was asked to warm up for.
    struct Warms(std::rc::Rc<std::cell::RefCell<Vec<usize>>>);

    impl Trainer for Warms {
        fn device_name(&self) -> String {
            "cpu".into()
        }
        fn run(
            &mut self,
            _: &PlannedRun,
            _: &dyn Control,
            _: &mut dyn FnMut(Event),
        ) -> Result<Outcome> {
            Ok(Outcome::Cancelled)
        }
        fn warm_up(&mut self, run: &PlannedRun, _: &dyn Control) -> Option<String> {
            self.0.borrow_mut().push(run.plan.world_size);
            Some("warm".into())
        }
    }

    /// A worker whose first run is a gang's still warms its own trainer (as
    /// one process), so the runs of world size 1 after it start warm.
    #[test]
    fn a_gang_first_still_warms_the_workers_own_trainer() {
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut g = Gang::new(Box::new(Warms(seen.clone())), vec!["cpu".into(); 2]);
        let spec = crate::config::RunSpec {
            id: crate::config::RunId {
                matrix: "m".into(),
                index: 0,
                variant: "v".into(),
                repeat: 0,
            },
            seed: 0,
            recipe: "tiny-page-resnet9".into(),
            overrides: vec![crate::config::Override::parse_set("world_size=2").unwrap()],
            data: "synthetic:64".into(),
            target_acc: 0.5,
            device: None,
            reference: None,
        };
        let run = crate::recipe::plan_run(&spec).unwrap();
        assert_eq!(run.plan.world_size, 2);
        assert_eq!(
            g.warm_up(&run, &crate::train::NeverStop).as_deref(),
            Some("warm")
        );
        assert_eq!(*seen.borrow(), vec![1]);
        assert_eq!(g.device_name(), "cpu ×2");
        assert_eq!(
            local_label(&["cuda:0".into(), "cuda:1".into()]),
            "cuda:0+cuda:1"
        );
    }
}
