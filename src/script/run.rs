//! One run of a script variant (docs/scripts.md): its folder made, its
//! sources copied and patched where its tricks patch them, its command
//! started in a process group of its own, followed through the event
//! protocol (and the `parse` regexes over what it prints), paused, cancelled
//! or timed out with the whole group, and its end read into a summary.
//!
//! A run's files lie under `FOLDER/scripts/KEY-rN/`: `events.jsonl` (the
//! protocol), `stdout.log` and `stderr.log` (what the command printed),
//! `out/` (`{out}`, the script's own) and, with patches, `src/` (the patched
//! copy the command runs in). The user's folder is never written to.

use super::declare::DATA_PLACEHOLDER;
use super::protocol::{self, Line, Tail};
use crate::config::{Clock, RunId};
use crate::events::{Clocks, EpochRow, Event, LogLevel, RunSummary, StepRow};
use crate::record::{Patch, ScriptData, ScriptRecord};
use crate::train::{Control, Flow, Outcome};
use crate::util::machine;
use anyhow::{Context, Result, anyhow, bail};
use regex::Regex;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One run of a script variant, as the worker hands it over.
pub struct ScriptRun<'a> {
    pub spec: &'a crate::config::RunSpec,
    /// `record.variant.script()` is what the run executes.
    pub record: std::sync::Arc<crate::record::RunRecord>,
    /// The worker's devices: `["cpu"]`, `["cuda:0"]`, or one a process of a
    /// run spread over several (`world_size`).
    pub devices: &'a [String],
    /// The results folder; this run's files go under [`run_dir`].
    pub folder: PathBuf,
}

/// How often the runner reads the script's files and asks the control.
const POLL: Duration = Duration::from_millis(50);
/// How long a script has to end after SIGTERM (a cancel, a timeout) before
/// its process group is killed.
const GRACE: Duration = Duration::from_secs(5);
/// Malformed lines named one by one before the rest are only counted.
const MAX_WARNINGS: usize = 10;
/// How long a run's start waits for the script's first line, which may
/// carry its planned length, before it is announced without one.
const START_WAIT: Duration = Duration::from_secs(10);
/// The most of a script's last stderr line a failure quotes.
const LAST_LINE_CHARS: usize = 300;

/// The folder of run `id`'s files under the results folder `folder`.
pub fn run_dir(folder: &Path, id: &RunId) -> PathBuf {
    folder
        .join("scripts")
        .join(format!("{}-r{}", id.key(), id.repeat))
}

/// Runs `r` to its end: its events go to `emit` as the engine's do (the
/// worker sends `RunFinished` or `RunFailed` after), a pause stops its
/// processes, a cancel or its timeout ends them.
pub fn run(r: &ScriptRun, ctl: &dyn Control, emit: &mut dyn FnMut(Event)) -> Result<Outcome> {
    let script = r.record.variant.script().with_context(|| {
        format!(
            "run {}: its variant `{}` runs no script",
            r.spec.id, r.record.variant.name
        )
    })?;
    anyhow::ensure!(
        !r.devices.is_empty(),
        "run {}: no device to run on",
        r.spec.id
    );
    let p = prepare(r, script)?;
    let gpu = cuda_indices(r.devices).first().copied();
    let before = machine::probe(gpu);
    let watch = gpu.map(machine::GpuWatch::nvidia_smi);
    let mut group = Group::start(&p)?;
    let mut f = Follow::new(r, &p);
    // Sent with the script's first line, which may say its planned length
    // (the Live tab's progress and ETA), or after START_WAIT without one.
    f.pending = Some(Event::RunStarted {
        run: r.spec.id.clone(),
        seed: r.spec.seed,
        record: r.record.clone(),
        total_steps: 0,
        total_epochs: 0.0,
        target_acc: r.spec.target_acc,
        device: r.devices.join("+"),
        reference: r.spec.reference.clone(),
    });
    let Some((status, cpu_s)) = follow(&mut group, &mut f, ctl, script.timeout_s, emit)? else {
        return Ok(Outcome::Cancelled);
    };
    let after = machine::probe(gpu);
    let mut state = machine::between(&before, &after, watch.and_then(machine::GpuWatch::finish));
    // The script's CPU is the run's own, not other processes' load.
    machine::discount_own(&mut state, cpu_s, before.since().1);
    exited_well(&p, status)?;
    let summary = f.summary(r, state, emit)?;
    Ok(Outcome::Finished(summary))
}

/// What a run starts, decided before it starts.
struct Prepared {
    /// The run's folder.
    dir: PathBuf,
    /// Where the command runs: the script's folder, or the patched copy.
    cwd: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    /// The program as messages name it.
    shown: String,
    /// On top of tricklab's own environment, in order (a later one wins).
    env: Vec<(String, String)>,
    /// Removed from tricklab's environment.
    unset: Vec<&'static str>,
    parse: Vec<Regex>,
}

/// The run's folder made afresh, its sources copied and patched where it
/// has patches, and its command and environment filled in.
fn prepare(r: &ScriptRun, s: &ScriptRecord) -> Result<Prepared> {
    anyhow::ensure!(
        !s.argv.is_empty(),
        "run {}: its [script] command is empty",
        r.spec.id
    );
    // A regex that does not compile fails the run before anything starts.
    let parse = s
        .parse
        .iter()
        .map(|re| {
            Regex::new(re).map_err(|e| {
                // The parser's message draws a caret under the pattern over
                // several lines: its last names the fault.
                let e = e.to_string();
                let why = e.lines().last().unwrap_or_default();
                anyhow!(
                    "[script] parse: `{re}` is not a regular expression ({}); fix it in the matrix",
                    why.trim().trim_start_matches("error: ")
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    anyhow::ensure!(
        s.dir.is_dir(),
        "the script's folder {} is gone: restore it, or read the matrix again where it now lies",
        s.dir.display()
    );
    // Absolute: the command runs in another folder (the patched copy).
    let dir = std::path::absolute(run_dir(&r.folder, &r.spec.id))?;
    // A leftover of an earlier try of the same run would mix its lines in.
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot clear {} for the run", dir.display()))?;
    }
    let out = dir.join("out");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot make {}", out.display()))?;
    let module = module_dir(&r.folder)?;
    write_module(&module)?;
    let cwd = if s.patches.is_empty() {
        s.dir.clone()
    } else {
        let src = dir.join("src");
        let results = r.folder.canonicalize();
        let results = results.with_context(|| format!("cannot read {}", r.folder.display()))?;
        copy_tree(&s.dir, &src, &results)
            .with_context(|| format!("cannot copy {} to {}", s.dir.display(), src.display()))?;
        for p in &s.patches {
            patch(&src, p)?;
        }
        src
    };
    let mut vars = vec![
        ("seed", r.spec.seed.to_string()),
        ("out", out.display().to_string()),
        ("device", r.devices[0].clone()),
        ("world_size", s.world_size.to_string()),
    ];
    if let Some(d) = &s.data {
        let at = exported(&r.folder, d)?;
        vars.push((DATA_PLACEHOLDER, at.display().to_string()));
    }
    let argv: Vec<String> = s.argv.iter().map(|a| fill(a, &vars)).collect();
    let (program, args) = command(&argv, s.world_size, &cwd, &s.dir);
    Ok(Prepared {
        shown: program.display().to_string(),
        env: environment(r, s, &dir, &module, &vars),
        unset: if s.world_size > 1 {
            Vec::new()
        } else {
            // A lone process is rank 0 whatever tricklab was started under,
            // so the module writes its events.
            vec!["RANK", "LOCAL_RANK", "WORLD_SIZE"]
        },
        dir,
        cwd,
        program,
        args,
        parse,
    })
}

/// Copies the folder `from` to `to`, leaving out `.git` and `skip` (the
/// results folder, where it lies inside): links are copied as links, and
/// what is neither a file, a folder nor a link (a socket, a pipe) is left.
fn copy_tree(from: &Path, to: &Path, skip: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let path = e.path();
        if e.file_name() == ".git" || path.canonicalize().is_ok_and(|p| p == skip) {
            continue;
        }
        let dest = to.join(e.file_name());
        let ty = e.file_type()?;
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&path)?, &dest)?;
        } else if ty.is_dir() {
            copy_tree(&path, &dest, skip)?;
        } else if ty.is_file() {
            std::fs::copy(&path, &dest)?;
        }
    }
    Ok(())
}

/// Applies `p` to the copy `src`: its text must occur as often as when the
/// matrix was read.
fn patch(src: &Path, p: &Patch) -> Result<()> {
    let path = src.join(&p.file);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} for trick `{}`'s patch: check its file in the matrix",
            path.display(),
            p.trick
        )
    })?;
    let found = if p.find.is_empty() {
        0
    } else {
        text.matches(&p.find).count()
    };
    if found != p.count {
        bail!(
            "{}: trick `{}`'s patch finds its text {found}×, not {}× as when the matrix was read: the file changed since; read the matrix again or fix the patch",
            p.file,
            p.trick,
            p.count
        );
    }
    // A link in the copy points at the user's file: the patched text goes
    // to a file of the copy's own instead.
    if path
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        std::fs::remove_file(&path)
            .with_context(|| format!("cannot replace the link {}", path.display()))?;
    }
    let inside = path
        .parent()
        .and_then(|d| d.canonicalize().ok())
        .is_some_and(|d| d.starts_with(src.canonicalize().unwrap_or_default()));
    anyhow::ensure!(
        inside,
        "{}: trick `{}`'s patch reaches outside the script's folder through a link; patch the file it links to",
        p.file,
        p.trick
    );
    std::fs::write(&path, text.replace(&p.find, &p.replace))
        .with_context(|| format!("cannot write the patched {}", path.display()))
}

/// `s` with each `{name}` of `vars` filled in, `{{` and `}}` read as
/// braces, and any other `{...}` left as written.
fn fill(s: &str, vars: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if rest.starts_with("{{") || rest.starts_with("}}") {
            out.push_str(&rest[..1]);
            rest = &rest[2..];
            continue;
        }
        let named = rest
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
            .and_then(|(name, after)| Some((vars.iter().find(|(k, _)| *k == name)?, after)));
        match named {
            Some(((_, v), after)) => {
                out.push_str(v);
                rest = after;
            }
            None => {
                out.push_str(&rest[..1]);
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The program and its arguments: `argv` itself, or for `world` processes
/// `torchrun --standalone --nproc-per-node N` before it (torchrun starts
/// Python itself, so an interpreter `argv` names is dropped; any other
/// program goes with `--no-python`). A relative program path is read in
/// the folder the command runs in, or else in the script's own folder
/// (an interpreter in a `.venv` there).
fn command(argv: &[String], world: usize, cwd: &Path, dir: &Path) -> (PathBuf, Vec<String>) {
    let first = Path::new(&argv[0]);
    let program = if argv[0].contains('/') && first.is_relative() {
        [cwd, dir]
            .iter()
            .map(|d| d.join(first))
            .find(|p| p.exists())
            .unwrap_or_else(|| cwd.join(first))
    } else {
        first.to_path_buf()
    };
    if world <= 1 {
        return (program, argv[1..].to_vec());
    }
    let torchrun = program
        .parent()
        .filter(|_| argv[0].contains('/'))
        .map(|d| d.join("torchrun"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("torchrun"));
    let python = first
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("python"));
    let mut args: Vec<String> = ["--standalone", "--nproc-per-node", &world.to_string()]
        .map(String::from)
        .into();
    if python {
        args.extend_from_slice(&argv[1..]);
    } else {
        args.push("--no-python".into());
        args.push(program.display().to_string());
        args.extend_from_slice(&argv[1..]);
    }
    (torchrun, args)
}

/// The CUDA indices of `devices` (`cuda` is 0); empty for the CPU.
fn cuda_indices(devices: &[String]) -> Vec<usize> {
    devices
        .iter()
        .filter_map(|d| match d.as_str() {
            "cuda" => Some(0),
            d => d.strip_prefix("cuda:")?.parse().ok(),
        })
        .collect()
}

/// What the command gets on top of tricklab's environment, in order.
fn environment(
    r: &ScriptRun,
    s: &ScriptRecord,
    dir: &Path,
    module: &Path,
    vars: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = s
        .env
        .iter()
        .map(|(k, v)| (k.clone(), fill(v, vars)))
        .collect();
    // Python buffers what it prints to a file until it exits: the `parse`
    // regexes (and stdout.log) see each line as it is printed instead.
    if !s.env.contains_key("PYTHONUNBUFFERED") && std::env::var_os("PYTHONUNBUFFERED").is_none() {
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    }
    let events = dir.join("events.jsonl").display().to_string();
    env.push(("TRICKLAB_EVENTS".into(), events));
    env.push(("TRICKLAB_SEED".into(), r.spec.seed.to_string()));
    env.push(("TRICKLAB_RUN".into(), r.spec.id.to_string()));
    let cuda = cuda_indices(r.devices);
    let visible: Vec<String> = cuda.iter().map(ToString::to_string).collect();
    env.push(("CUDA_VISIBLE_DEVICES".into(), visible.join(",")));
    // On the CPU the run gets its worker's share of the cores (what the
    // engine's libtorch pool has: `--cpu-threads`, or the cores over the
    // CPU workers), split over its processes, unless the matrix says.
    if cuda.is_empty() && !s.env.contains_key("OMP_NUM_THREADS") {
        let share = usize::try_from(tch::get_num_threads()).unwrap_or(1);
        let n = (share / s.world_size.max(1)).max(1);
        env.push(("OMP_NUM_THREADS".into(), n.to_string()));
    }
    // The `tricklab` module, as this binary speaks the protocol, is on
    // the script's path without a pip install (an installed one comes after).
    let path = std::env::var("PYTHONPATH").ok().filter(|p| !p.is_empty());
    let ours = module.display().to_string();
    env.push((
        "PYTHONPATH".into(),
        path.map_or_else(|| ours.clone(), |p| format!("{ours}:{p}")),
    ));
    env
}

/// The Python module the script imports (`python/tricklab`), as built in:
/// the protocol, and the adapter that runs the published records
/// (`python3 -m tricklab.peers`).
const MODULE: [(&str, &str); 2] = [
    (
        "__init__.py",
        include_str!("../../python/tricklab/__init__.py"),
    ),
    ("peers.py", include_str!("../../python/tricklab/peers.py")),
];

/// Where the module lies for a results folder's runs: one folder for them
/// all, absolute, with no variant's name in it. PYTHONPATH splits at `:`,
/// which a variant's name (`compile: graphs only`) may hold.
fn module_dir(folder: &Path) -> Result<PathBuf> {
    let d = std::path::absolute(folder.join("scripts/python"))?;
    anyhow::ensure!(
        !d.to_string_lossy().contains(':'),
        "{}: a script's module cannot be on PYTHONPATH from a path that holds `:` (PYTHONPATH splits there); pass a --results path without one",
        folder.display()
    );
    Ok(d)
}

/// Writes the module where PYTHONPATH points (`module_dir`): each run
/// writes it whole, atomically, so concurrent workers agree.
fn write_module(dir: &Path) -> Result<()> {
    let pkg = dir.join("tricklab");
    std::fs::create_dir_all(&pkg).with_context(|| format!("cannot make {}", pkg.display()))?;
    for (file, text) in MODULE {
        crate::util::write_atomic(&pkg.join(file), text.as_bytes())?;
    }
    Ok(())
}

/// `[script.data]` as raw bytes (`tricklab data export`'s layout), exported
/// once for the folder's runs: FOLDER/scripts/data/NAME-TRAINxTEST. Workers
/// that export at once each write their own copy and the first rename wins.
fn exported(folder: &Path, d: &ScriptData) -> Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let per = |n: Option<usize>| n.map_or_else(|| "all".to_string(), |n| n.to_string());
    let name: String = d
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let root = std::path::absolute(folder.join("scripts").join("data"))?;
    let dest = root.join(format!(
        "{name}-{}x{}",
        per(d.train_per_class),
        per(d.test_per_class)
    ));
    if dest.join("meta.json").is_file() {
        return Ok(dest);
    }
    let set = crate::data::load(&d.name)
        .with_context(|| {
            format!(
                "[script.data] `{}`: check the name (`tricklab data list`)",
                d.name
            )
        })?
        .subset(d.train_per_class, d.test_per_class);
    anyhow::ensure!(
        !set.train.is_empty() && !set.test.is_empty(),
        "[script.data] `{}` leaves {} training and {} test images: give per-class counts it has",
        d.name,
        set.train.len(),
        set.test.len()
    );
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = root.join(format!(".{name}-{}-{n}", std::process::id()));
    crate::data::export_raw(&set, &tmp, "as tricklab trains on it")?;
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        anyhow::ensure!(
            dest.join("meta.json").is_file(),
            "cannot move the exported data to {}: {e}",
            dest.display()
        );
    }
    Ok(dest)
}

/// The command's processes: the leader tricklab started (the group's id is
/// its pid) and whatever it starts. Dropped before it is reaped (an error,
/// a panic), it kills them all.
struct Group {
    pid: libc::pid_t,
    reaped: bool,
}

impl Group {
    fn start(p: &Prepared) -> Result<Group> {
        let log = |name: &str| {
            let path = p.dir.join(name);
            std::fs::File::create(&path).with_context(|| format!("cannot make {}", path.display()))
        };
        // Under the keeper where this is the tricklab binary: every process
        // the command starts then dies with tricklab (script/keeper.rs).
        let keeper = super::keeper::keeper();
        let mut c = match keeper {
            Some(k) => {
                let mut c = Command::new(k);
                c.args([super::keeper::KEEP, "--"]).arg(&p.program);
                c
            }
            None => Command::new(&p.program),
        };
        let death = if keeper.is_some() {
            super::keeper::PARENT_DIED
        } else {
            libc::SIGKILL
        };
        c.args(&p.args)
            .current_dir(&p.cwd)
            .stdin(Stdio::null())
            .stdout(log("stdout.log")?)
            .stderr(log("stderr.log")?)
            .envs(p.env.iter().map(|(k, v)| (k, v)));
        for k in &p.unset {
            c.env_remove(k);
        }
        // SAFETY: prctl and setpgid only, between fork and exec. The script
        // dies with the worker thread that started it, even on kill -9; in
        // a group of its own, a pause, a cancel or a timeout reaches every
        // process it started, and a terminal's Ctrl-C reaches tricklab alone.
        unsafe {
            c.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, death);
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let child = c.spawn().map_err(|e| {
            anyhow!(
                "cannot start `{}`: {e}; check [script] command in the matrix",
                p.shown
            )
        })?;
        // The child is reaped here by its pid (with its CPU time), not by
        // `Child`, whose drop neither waits nor kills.
        Ok(Group {
            pid: child.id() as libc::pid_t,
            reaped: false,
        })
    }

    /// Whether the leader has exited, leaving it unreaped so that its pid
    /// (the group's id) cannot be reused while the group is signalled.
    fn exited(&self) -> bool {
        // SAFETY: waitid fills the zeroed siginfo it is given.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        let rc = unsafe { libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags) };
        // An error (no such child) reads as exited: `reap` then says why.
        rc != 0 || unsafe { info.si_pid() } != 0
    }

    /// Sends `sig` to the group and to `also` (processes of the command
    /// that left it: torchrun starts each rank in a session of its own).
    fn signal(&self, sig: libc::c_int, also: &[libc::pid_t]) {
        // SAFETY: plain signals to processes this run started.
        unsafe {
            libc::killpg(self.pid, sig);
            for &p in also {
                libc::kill(p, sig);
            }
        }
    }

    /// Kills what is left of the group and reaps the leader: its exit and
    /// the CPU seconds it and the children it reaped used.
    fn reap(&mut self) -> Result<(ExitStatus, f64)> {
        self.signal(libc::SIGKILL, &super::keeper::descendants(self.pid));
        let mut status = 0;
        // SAFETY: wait4 fills the zeroed rusage it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = loop {
            let rc = unsafe { libc::wait4(self.pid, &mut status, 0, &mut ru) };
            if rc == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
            break rc;
        };
        self.reaped = true;
        if rc != self.pid {
            bail!(
                "lost the script's process {}: {}",
                self.pid,
                std::io::Error::last_os_error()
            );
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        Ok((
            ExitStatus::from_raw(status),
            t(ru.ru_utime) + t(ru.ru_stime),
        ))
    }

    /// Asks every process to end (SIGTERM), gives them [`GRACE`], then
    /// kills what is left.
    fn stop(&mut self) -> Result<(ExitStatus, f64)> {
        let tree = super::keeper::descendants(self.pid);
        self.signal(libc::SIGTERM, &tree);
        // A paused (stopped) process handles its SIGTERM once continued.
        self.signal(libc::SIGCONT, &tree);
        let until = Instant::now() + GRACE;
        while !self.exited() && Instant::now() < until {
            std::thread::sleep(POLL);
        }
        self.signal(libc::SIGKILL, &tree);
        self.reap()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.reap();
        }
    }
}

/// Follows the running command until it exits (its exit and CPU seconds)
/// or is cancelled (`None`); a timeout or a diverged loss ends it with an
/// error.
fn follow(
    g: &mut Group,
    f: &mut Follow,
    ctl: &dyn Control,
    timeout_s: Option<f64>,
    emit: &mut dyn FnMut(Event),
) -> Result<Option<(ExitStatus, f64)>> {
    loop {
        if g.exited() {
            f.ended_s = Some(f.wall());
            let end = g.reap()?;
            // Its last lines, written before it exited.
            f.read(emit)?;
            f.start(emit);
            return Ok(Some(end));
        }
        f.read(emit)?;
        if let Some(limit) = timeout_s.filter(|&t| f.wall() > t) {
            let took = f.wall();
            g.stop()?;
            f.start(emit);
            bail!(
                "timed out after {} (timeout = {} in [script]); its last output is in {}",
                human(took),
                human(limit),
                f.dir.join("stderr.log").display()
            );
        }
        let flow = if ctl.pausing() {
            let tree = super::keeper::descendants(g.pid);
            g.signal(libc::SIGSTOP, &tree);
            let t = Instant::now();
            let flow = ctl.poll();
            f.paused += t.elapsed();
            g.signal(libc::SIGCONT, &tree);
            flow
        } else {
            ctl.poll()
        };
        if flow == Flow::Cancel {
            g.stop()?;
            f.start(emit);
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Seconds as a person reads a duration.
fn human(s: f64) -> String {
    match s {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// Fails a run whose command did not exit with 0, with the last line it
/// wrote to stderr.
fn exited_well(p: &Prepared, status: ExitStatus) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(s)) => match signal_name(s) {
            Some(name) => format!("was killed by signal {s} ({name})"),
            None => format!("was killed by signal {s}"),
        },
        _ => "ended".into(),
    };
    let stderr = p.dir.join("stderr.log");
    let last = last_line(&stderr).unwrap_or_else(|| "it wrote nothing to stderr".into());
    bail!(
        "`{}` {how}: {last}; the full output is in {}",
        p.shown,
        stderr.display()
    )
}

fn signal_name(s: i32) -> Option<&'static str> {
    Some(match s {
        libc::SIGKILL => "SIGKILL: out of memory, or killed",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        _ => return None,
    })
}

/// The last non-empty line of the file at `path` (read from its last 64
/// KiB), as a terminal would have shown it (a progress bar's `\r` redraws
/// leave their last), cut to [`LAST_LINE_CHARS`] for a one-line message.
fn last_line(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text
        .lines()
        .filter_map(|l| l.rsplit('\r').map(str::trim).find(|l| !l.is_empty()))
        .next_back()?;
    Some(match line.char_indices().nth(LAST_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    })
}

/// A file of printed lines read as it grows, a complete line at a time.
struct Printed {
    path: PathBuf,
    offset: u64,
    partial: String,
    line_no: usize,
}

impl Printed {
    fn read(&mut self) -> std::io::Result<Vec<(usize, String)>> {
        let mut f = std::fs::File::open(&self.path)?;
        f.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let mut lines = Vec::new();
        while let Some(end) = self.partial.find('\n') {
            let text: String = self.partial.drain(..=end).collect();
            self.line_no += 1;
            lines.push((self.line_no, text.trim_end().to_string()));
        }
        Ok(lines)
    }
}

/// What the runner has read of a run so far.
struct Follow<'a> {
    run: RunId,
    events: Tail,
    stdout: Printed,
    /// The run's folder.
    dir: PathBuf,
    parse: &'a [Regex],
    started: Instant,
    paused: Duration,
    /// Process wall seconds, pauses out, once it has exited.
    ended_s: Option<f64>,
    /// Wall seconds from the start to the first line the run reported.
    first_line_s: Option<f64>,
    warnings: usize,
    last_step: u64,
    last_loss: f64,
    /// Steps an epoch, once an epoch line has said.
    steps_per_epoch: Option<f64>,
    /// Training images so far and the wall seconds they were read at.
    images: Option<(u64, f64)>,
    /// The same when step rows were last sent.
    sent_images: Option<(u64, f64)>,
    /// Step rows read and not yet sent.
    rows: Vec<StepRow>,
    /// The last epoch line: its step, seconds and images then.
    epoch_end: (u64, f64, Option<u64>),
    epochs: usize,
    epoch_rates: Vec<f64>,
    to_target: Option<(f64, usize)>,
    final_line: Option<(f64, Option<f64>)>,
    target_acc: f64,
    /// The run's `RunStarted`, until it is sent.
    pending: Option<Event>,
}

impl<'a> Follow<'a> {
    fn new(r: &ScriptRun, p: &'a Prepared) -> Follow<'a> {
        Follow {
            run: r.spec.id.clone(),
            events: Tail::new(&p.dir.join("events.jsonl")),
            stdout: Printed {
                path: p.dir.join("stdout.log"),
                offset: 0,
                partial: String::new(),
                line_no: 0,
            },
            dir: p.dir.clone(),
            parse: &p.parse,
            started: Instant::now(),
            paused: Duration::ZERO,
            ended_s: None,
            first_line_s: None,
            warnings: 0,
            last_step: 0,
            last_loss: f64::NAN,
            steps_per_epoch: None,
            images: None,
            sent_images: None,
            rows: Vec::new(),
            epoch_end: (0, 0.0, None),
            epochs: 0,
            epoch_rates: Vec::new(),
            to_target: None,
            final_line: None,
            target_acc: r.spec.target_acc,
            pending: None,
        }
    }

    /// Wall seconds since the start, pauses out (until it exited).
    fn wall(&self) -> f64 {
        self.ended_s.unwrap_or_else(|| {
            self.started
                .elapsed()
                .saturating_sub(self.paused)
                .as_secs_f64()
        })
    }

    /// Reads what the run wrote since the last call, sending its events.
    fn read(&mut self, emit: &mut dyn FnMut(Event)) -> Result<()> {
        let got = self
            .events
            .read()
            .with_context(|| format!("cannot read {}", self.events_path()))?;
        if let Some((_, Line::Version { steps, epochs, .. })) = got.lines.first()
            && let Some(Event::RunStarted {
                total_steps,
                total_epochs,
                ..
            }) = &mut self.pending
        {
            *total_steps = steps.unwrap_or(0);
            *total_epochs = epochs.unwrap_or(0.0);
            // The planned length places each step on the epoch axis before
            // the first epoch line says it (the Live tab's curves).
            if let (Some(n), Some(e)) = (*steps, *epochs)
                && n > 0
                && e > 0.0
            {
                self.steps_per_epoch = Some(n as f64 / e);
            }
        }
        if !got.lines.is_empty() || self.wall() > START_WAIT.as_secs_f64() {
            self.start(emit);
        }
        for w in got.warnings {
            self.warn(w, emit);
        }
        for (_, line) in got.lines {
            self.take(line, emit)?;
        }
        if !self.parse.is_empty() {
            let printed = self
                .stdout
                .read()
                .with_context(|| format!("cannot read {}", self.stdout.path.display()))?;
            for (no, text) in printed {
                let at = format!("{}:{no}", self.stdout.path.display());
                match self.printed(&text) {
                    Ok(lines) => {
                        if !lines.is_empty() {
                            self.start(emit);
                        }
                        for line in lines {
                            self.take(line, emit)?;
                        }
                    }
                    Err(why) => self.warn(format!("{at}: {why}; the line is skipped"), emit),
                }
            }
        }
        self.send_rows(emit);
        Ok(())
    }

    fn events_path(&self) -> String {
        self.dir.join("events.jsonl").display().to_string()
    }

    /// A malformed line named, up to [`MAX_WARNINGS`] of them.
    fn warn(&mut self, message: String, emit: &mut dyn FnMut(Event)) {
        self.warnings += 1;
        let message = match self.warnings {
            n if n < MAX_WARNINGS => message,
            MAX_WARNINGS => format!(
                "{message} (the further malformed lines of run {} are only counted)",
                self.run
            ),
            _ => return,
        };
        emit(Event::Log {
            level: LogLevel::Warn,
            message,
        });
    }

    /// The protocol lines a printed line gives through the `parse` regexes.
    fn printed(&self, text: &str) -> Result<Vec<Line>, String> {
        let mut lines = Vec::new();
        for re in self.parse {
            let Some(c) = re.captures(text) else {
                continue;
            };
            let get = |k: &str| -> Result<Option<f64>, String> {
                let Some(m) = c.name(k) else {
                    return Ok(None);
                };
                let s = m.as_str().trim().trim_end_matches('%');
                s.parse::<f64>()
                    .map(Some)
                    .map_err(|_| format!("`{k}` = `{}` is not a number (regex `{re}`)", m.as_str()))
            };
            captured(&get, (self.epochs as u64, self.last_step), &mut lines)?;
        }
        Ok(lines)
    }

    /// Announces the run, once.
    fn start(&mut self, emit: &mut dyn FnMut(Event)) {
        if let Some(e) = self.pending.take() {
            emit(e);
        }
    }

    /// One protocol line: step rows wait for [`send_rows`](Self::send_rows),
    /// an epoch goes at once (after the rows before it).
    fn take(&mut self, line: Line, emit: &mut dyn FnMut(Event)) -> Result<()> {
        if self.first_line_s.is_none() {
            self.first_line_s = Some(self.wall());
        }
        match line {
            Line::Version { version: v, .. } if v != protocol::VERSION => self.warn(
                format!(
                    "{}: the script speaks protocol version {v}; this tricklab reads version {} (docs/scripts.md)",
                    self.events_path(),
                    protocol::VERSION
                ),
                emit,
            ),
            Line::Version { .. } => {}
            Line::Step {
                step,
                loss,
                lr,
                bn_scale,
                images,
            } => {
                if !loss.is_finite() {
                    bail!(
                        "loss became {loss} at step {step}: lower lr (or turn off the trick you just added) and run again"
                    );
                }
                self.last_step = step;
                self.last_loss = loss;
                if let Some(n) = images {
                    self.images = Some((n, self.wall()));
                }
                self.rows.push(StepRow {
                    step,
                    epoch: self.steps_per_epoch.map_or(0.0, |n| step as f64 / n),
                    loss,
                    lr,
                    bn_scale: bn_scale.map(|x| vec![x as f32]).unwrap_or_default(),
                    bn_bias: Vec::new(),
                    loader_s: 0.0,
                });
            }
            Line::Epoch {
                epoch,
                acc,
                seconds,
            } => self.epoch(epoch, acc, seconds, emit),
            Line::Final { acc, seconds } => self.final_line = Some((acc, seconds)),
        }
        Ok(())
    }

    /// Sends the step rows read so far, with the images a second since the
    /// last rows that counted images.
    fn send_rows(&mut self, emit: &mut dyn FnMut(Event)) {
        if self.rows.is_empty() {
            return;
        }
        let images_per_s = match (self.images, self.sent_images) {
            (Some((n, t)), Some((n0, t0))) if n > n0 && t > t0 => (n - n0) as f64 / (t - t0),
            _ => 0.0,
        };
        self.sent_images = self.images;
        emit(Event::Steps {
            run: self.run.clone(),
            rows: std::mem::take(&mut self.rows),
            images_per_s,
            loader_share: 0.0,
        });
    }
}

impl Follow<'_> {
    /// An epoch line: the rows before it sent, then its row.
    fn epoch(&mut self, epoch: u64, acc: f64, seconds: Option<f64>, emit: &mut dyn FnMut(Event)) {
        self.send_rows(emit);
        let (step0, secs0, images0) = self.epoch_end;
        if epoch > 0 && self.last_step > 0 {
            self.steps_per_epoch = Some(self.last_step as f64 / epoch as f64);
        }
        let train_s = seconds.map_or(0.0, |s| (s - secs0).max(0.0));
        let images = self.images.map(|i| i.0);
        let images_per_s = match images {
            Some(n) if train_s > 0.0 => n.saturating_sub(images0.unwrap_or(0)) as f64 / train_s,
            _ => 0.0,
        };
        if images_per_s > 0.0 {
            self.epoch_rates.push(images_per_s);
        }
        self.epochs += 1;
        if self.to_target.is_none()
            && acc >= self.target_acc
            && let Some(s) = seconds
        {
            self.to_target = Some((s, epoch as usize));
        }
        self.epoch_end = (self.last_step, seconds.unwrap_or(secs0), images.or(images0));
        emit(Event::Epoch {
            run: self.run.clone(),
            row: EpochRow {
                epoch: epoch as usize,
                steps: self.last_step.saturating_sub(step0),
                // The last loss the script logged: the protocol has no
                // epoch mean, and an epoch without steps keeps the last.
                train_loss: self.last_loss,
                train_acc: 0.0,
                test_acc: acc,
                test_acc_tta: None,
                train_s,
                eval_s: 0.0,
                images_per_s,
                peak_mem_bytes: None,
                loader_s: 0.0,
                loader_images_per_s: None,
                ddp: None,
            },
        });
    }

    /// The run's summary from its final line, or why it has none.
    fn summary(
        &self,
        r: &ScriptRun,
        state: machine::MachineState,
        emit: &mut dyn FnMut(Event),
    ) -> Result<RunSummary> {
        let Some((acc, seconds)) = self.final_line else {
            bail!(
                "the script exited without a final result: send `{{\"final\": {{\"acc\": …}}}}` to $TRICKLAB_EVENTS (tricklab.final(acc=…)), or a `final_acc` capture in [script] parse (docs/scripts.md)"
            );
        };
        let clock = r.record.clock();
        let wall_s = self.wall();
        // Without the script's own seconds, its time is the process's.
        let on_wall = seconds.is_none() && clock != Clock::Wall;
        if on_wall {
            emit(Event::Log {
                level: LogLevel::Warn,
                message: format!(
                    "run {}: the script reported no seconds; its time is the process's wall time (send `seconds` in its final line, docs/scripts.md)",
                    self.run
                ),
            });
        }
        let secs = seconds.unwrap_or(wall_s);
        // The clocks the script does not measure are NaN, not 0; the stages
        // outside its training are not told apart, so they count 0, save
        // prep_s: the process's start-up (interpreter, imports, compiling)
        // until its first line, as the runner read it (within POLL).
        let mut clocks = Clocks {
            dawn_s: f64::NAN,
            airbench_s: f64::NAN,
            hlb_s: f64::NAN,
            eval_s: 0.0,
            prep_s: self.first_line_s.unwrap_or(wall_s),
            preprocess_s: 0.0,
            whiten_s: 0.0,
            build_s: 0.0,
            loader_s: 0.0,
            wall_s,
            paused_s: self.paused.as_secs_f64(),
        };
        match clock {
            Clock::Dawn => clocks.dawn_s = secs,
            Clock::Airbench => clocks.airbench_s = secs,
            Clock::Hlb => clocks.hlb_s = secs,
            Clock::Wall => {}
        }
        let throughput_cv = machine::throughput_cv(&self.epoch_rates);
        let noise = machine::noise_reason(&state, throughput_cv);
        Ok(RunSummary {
            acc,
            acc_tta: acc,
            clocks,
            time_to_target_s: self.to_target.map(|t| t.0),
            epoch_to_target: self.to_target.map(|t| t.1),
            epochs: self.epochs as f64,
            steps: self.last_step,
            peak_mem_bytes: None,
            final_train_loss: self.last_loss,
            device: r.devices.join("+"),
            machine: Some(Box::new(state)),
            throughput_cv,
            noise,
            ranks: Vec::new(),
            graphs: None,
            stages: None,
            clock: on_wall.then_some(Clock::Wall),
        })
    }
}

/// The lines one regex's named captures give (through `get`): a step where
/// it reads a `loss`, an epoch where an `acc`, the result where a
/// `final_acc`. A step or epoch not captured follows the last one read.
fn captured(
    get: &dyn Fn(&str) -> Result<Option<f64>, String>,
    (epochs, last_step): (u64, u64),
    lines: &mut Vec<Line>,
) -> Result<(), String> {
    if let Some(loss) = get("loss")? {
        lines.push(Line::Step {
            step: get("step")?.map_or(last_step + 1, |s| s as u64),
            loss,
            lr: get("lr")?.unwrap_or(f64::NAN),
            bn_scale: None,
            images: None,
        });
    }
    if let Some(acc) = get("acc")? {
        lines.push(Line::Epoch {
            epoch: get("epoch")?.map_or(epochs + 1, |e| e as u64),
            acc: fraction(acc)?,
            seconds: get("seconds")?,
        });
    }
    if let Some(acc) = get("final_acc")? {
        lines.push(Line::Final {
            acc: fraction(acc)?,
            seconds: get("final_seconds")?,
        });
    }
    Ok(())
}

/// A printed accuracy as a fraction: printed tables give percentages.
fn fraction(acc: f64) -> Result<f64, String> {
    let a = if acc > 1.0 { acc / 100.0 } else { acc };
    if (0.0..=1.0).contains(&a) {
        Ok(a)
    } else {
        Err(format!(
            "accuracy {acc} is neither a fraction nor a percentage"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunSpec;
    use crate::record::{DataId, Provenance, RunRecord, Runs, VariantRecord};
    use crate::train::NeverStop;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// What each test script starts with: `send(...)` appends one protocol
    /// line, as a script without the module would.
    const PRELUDE: &str = r#"
import json, os, subprocess, sys, time
def send(**line):
    with open(os.environ["TRICKLAB_EVENTS"], "a") as f:
        f.write(json.dumps(line) + "\n")
"#;

    fn spec() -> RunSpec {
        RunSpec {
            id: RunId {
                matrix: "m".into(),
                index: 0,
                variant: "v".into(),
                repeat: 1,
            },
            seed: 7,
            recipe: String::new(),
            overrides: Vec::new(),
            data: String::new(),
            target_acc: 0.5,
            device: None,
            reference: None,
        }
    }

    fn record(script: ScriptRecord) -> Arc<RunRecord> {
        Arc::new(RunRecord {
            variant: VariantRecord {
                index: 0,
                name: "v".into(),
                overrides: Vec::new(),
                tricks: Vec::new(),
                clock: Clock::Hlb,
                reference: None,
                runs: Runs::Script(Box::new(script)),
            },
            data: DataId::default(),
            loader: None,
        })
    }

    /// A script folder holding `train.py` (after [`PRELUDE`]), run with the
    /// project's Python, its results in a folder beside it.
    struct Case {
        _tmp: tempfile::TempDir,
        script: ScriptRecord,
        folder: PathBuf,
    }

    impl Case {
        fn new(code: &str) -> Case {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("src");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("train.py"), format!("{PRELUDE}{code}")).unwrap();
            let python = std::env::var("TRICKLAB_PYTHON").unwrap_or_else(|_| "python3".into());
            Case {
                folder: tmp.path().join("results"),
                script: ScriptRecord {
                    argv: vec![python, "train.py".into()],
                    dir,
                    env: Default::default(),
                    patches: Vec::new(),
                    world_size: 1,
                    timeout_s: None,
                    parse: Vec::new(),
                    provenance: Provenance::default(),
                    data: None,
                },
                _tmp: tmp,
            }
        }

        fn run_with(&self, ctl: &dyn Control) -> (Result<Outcome>, Vec<Event>) {
            self.run_as(&spec(), ctl)
        }

        /// The script as the run `spec` (a variant of another name).
        fn run_as(&self, spec: &RunSpec, ctl: &dyn Control) -> (Result<Outcome>, Vec<Event>) {
            let devices = ["cpu".to_string()];
            std::fs::create_dir_all(&self.folder).unwrap();
            let r = ScriptRun {
                spec,
                record: record(self.script.clone()),
                devices: &devices,
                folder: self.folder.clone(),
            };
            let mut events = Vec::new();
            let out = run(&r, ctl, &mut |e| events.push(e));
            (out, events)
        }

        fn run(&self) -> (Result<Outcome>, Vec<Event>) {
            self.run_with(&NeverStop)
        }

        fn finished(&self) -> (RunSummary, Vec<Event>) {
            match self.run() {
                (Ok(Outcome::Finished(s)), events) => (s, events),
                (other, _) => panic!("{other:?}"),
            }
        }

        fn failed(&self) -> String {
            let (out, _) = self.run();
            format!("{:#}", out.expect_err("the run fails"))
        }

        fn dir(&self) -> PathBuf {
            run_dir(&self.folder, &spec().id)
        }
    }

    fn warnings(events: &[Event]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Log {
                    level: LogLevel::Warn,
                    message,
                } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A variant named with a `:` (the records' `compile: graphs only`)
    /// still finds the module: PYTHONPATH, which splits at `:`, never holds
    /// the variant's name.
    #[test]
    fn a_variant_named_with_a_colon_imports_the_module() {
        let c = Case::new(
            r#"
import tricklab
send(final=dict(acc=0.5, seconds=1.0))
"#,
        );
        let mut spec = spec();
        spec.id.variant = "compile: graphs only".into();
        match c.run_as(&spec, &NeverStop).0 {
            Ok(Outcome::Finished(s)) => assert!((s.acc - 0.5).abs() < 1e-9, "{}", s.acc),
            other => panic!("{other:?}"),
        }
        assert!(c.folder.join("scripts/python/tricklab/peers.py").is_file());
    }

    #[test]
    fn data_is_exported_once_for_the_folder_and_the_adapter_ships_with_the_module() {
        // The script reads the export `{data}` names (train count from its
        // meta.json, the labels file's length), and finds `tricklab.peers`
        // (its device rule) on the path the run was given.
        let mut c = Case::new(
            r#"
data = sys.argv[1]
meta = json.load(open(os.path.join(data, "meta.json")))
labels = os.path.getsize(os.path.join(data, "train_labels.u8"))
import importlib.util
found = importlib.util.find_spec("tricklab.peers") is not None
send(tricklab=1)
send(final={"acc": meta["train"] / 1000 + 0.001 * found, "seconds": labels / 100})
"#,
        );
        c.script.argv.push("{data}".into());
        c.script.data = Some(ScriptData {
            name: "embedded".into(),
            train_per_class: Some(30),
            test_per_class: Some(5),
        });
        let (s, _) = c.finished();
        assert!((s.acc - 0.301).abs() < 1e-12, "{}", s.acc);
        assert_eq!(s.clocks.hlb_s, 3.0);
        let export = c.folder.join("scripts/data/embedded-30x5");
        let meta = std::fs::read_to_string(export.join("meta.json")).unwrap();
        assert!(
            meta.contains("\"train\": 300") || meta.contains("\"train\":300"),
            "{meta}"
        );
        // A second run reads the same export, not a new one.
        let stamp = std::fs::metadata(export.join("meta.json"))
            .unwrap()
            .modified()
            .unwrap();
        c.finished();
        let again = std::fs::metadata(export.join("meta.json"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(stamp, again);
        let left: Vec<_> = std::fs::read_dir(c.folder.join("scripts/data"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1, "no temporary copy left");
        // A data set tricklab cannot read is named before the script starts.
        c.script.data = Some(ScriptData {
            name: "no-such-set".into(),
            train_per_class: None,
            test_per_class: None,
        });
        assert!(c.failed().contains("[script.data] `no-such-set`"));
    }

    /// Whether process `pid` is gone (or a zombie waiting for init), within 2 s.
    fn gone(pid: libc::pid_t) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
            // SAFETY: signal 0 only asks whether the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 || zombie {
                return true;
            }
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A script that starts `sleep 60` (its pid in `{out}/child.pid`) and
    /// sleeps itself.
    fn sleeper() -> Case {
        let mut c = Case::new(
            r#"
child = subprocess.Popen(["sleep", "60"])
with open(os.path.join(sys.argv[1], "child.pid"), "w") as f:
    f.write(str(child.pid))
send(step=1, loss=2.0, lr=0.1)
time.sleep(60)
"#,
        );
        c.script.argv.push("{out}".into());
        c
    }

    fn child_pid(c: &Case) -> libc::pid_t {
        std::fs::read_to_string(c.dir().join("out/child.pid"))
            .expect("the script wrote its child's pid")
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn steps_epochs_and_the_final_line_arrive_and_the_output_is_kept() {
        let c = Case::new(
            r#"
print("hello from the script")
print("a warning of its own", file=sys.stderr)
send(tricklab=1, steps=4, epochs=2)
for s in range(1, 5):
    send(step=s, loss=2.0 / s, lr=0.1, bn_scale=0.9, images=64 * s)
    if s % 2 == 0:
        send(epoch=s // 2, acc=0.2 * s, seconds=0.5 * s / 2)
send(final={"acc": 0.9, "seconds": 1.25})
"#,
        );
        let (s, events) = c.finished();
        // Before its first epoch line, a step is placed by the planned length.
        let first = events.iter().find_map(|e| match e {
            Event::Steps { rows, .. } => rows.first(),
            _ => None,
        });
        assert_eq!(first.map(|r| r.epoch), Some(0.5), "{events:?}");
        // Announced with the script's first line, and the length it planned.
        assert!(matches!(
            events[0],
            Event::RunStarted { ref device, total_steps: 4, total_epochs: 2.0, .. } if device == "cpu"
        ));
        let rows: Vec<&StepRow> = events
            .iter()
            .filter_map(|e| match e {
                Event::Steps { rows, .. } => Some(rows),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(rows.len(), 4, "{events:?}");
        assert_eq!((rows[2].step, rows[2].epoch), (3, 1.5), "2 steps an epoch");
        assert_eq!(rows[0].bn_scale, vec![0.9]);
        let epochs: Vec<&EpochRow> = events
            .iter()
            .filter_map(|e| match e {
                Event::Epoch { row, .. } => Some(row),
                _ => None,
            })
            .collect();
        assert_eq!(epochs.len(), 2);
        assert_eq!((epochs[1].test_acc, epochs[1].train_s), (0.8, 0.5));
        assert_eq!(epochs[1].images_per_s, 128.0 / 0.5);
        assert_eq!((s.acc, s.acc_tta, s.clocks.hlb_s), (0.9, 0.9, 1.25));
        assert!(s.clocks.dawn_s.is_nan() && s.clocks.airbench_s.is_nan());
        assert_eq!(
            (s.time_to_target_s, s.epoch_to_target),
            (Some(1.0), Some(2))
        );
        assert_eq!((s.steps, s.epochs, s.final_train_loss), (4, 2.0, 0.5));
        assert!(s.clocks.wall_s > 0.0 && s.clocks.prep_s <= s.clocks.wall_s);
        assert_eq!(s.clock, None);
        assert!(s.machine.is_some());
        let read = |f: &str| std::fs::read_to_string(c.dir().join(f)).unwrap();
        assert_eq!(read("stdout.log"), "hello from the script\n");
        assert_eq!(read("stderr.log"), "a warning of its own\n");
    }

    #[test]
    fn arguments_environment_and_patches_reach_a_copy_of_the_script() {
        let mut c = Case::new(
            r#"
LR = 0.1
seen = {"argv": sys.argv[1:], "foo": os.environ.get("FOO"),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "seed": os.environ.get("TRICKLAB_SEED"),
        "run": os.environ.get("TRICKLAB_RUN"), "lr": LR, "cwd": os.getcwd()}
with open(os.path.join(sys.argv[2], "seen.json"), "w") as f:
    json.dump(seen, f)
send(final={"acc": 0.5, "seconds": 1.0})
"#,
        );
        let dir = c.script.dir.clone();
        // The results inside the script's folder, and its git metadata:
        // neither is copied.
        c.folder = dir.join("results");
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git/HEAD"), "ref: x").unwrap();
        c.script
            .argv
            .extend(["--out", "{out}", "--seed={seed}", "{{x}}", "{other}"].map(String::from));
        c.script
            .env
            .insert("FOO".into(), "bar-{device}-{world_size}".into());
        c.script.patches.push(Patch {
            file: "train.py".into(),
            find: "LR = 0.1".into(),
            replace: "LR = 0.2".into(),
            count: 1,
            trick: "bigger_lr".into(),
        });
        c.finished();
        let run = c.dir();
        let seen: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("out/seen.json")).unwrap())
                .unwrap();
        let out = run.join("out").display().to_string();
        assert_eq!(
            seen["argv"],
            serde_json::json!(["--out", out, "--seed=7", "{x}", "{other}"])
        );
        assert_eq!(seen["foo"], "bar-cpu-1");
        assert_eq!((&seen["cuda"], &seen["seed"]), (&"".into(), &"7".into()));
        assert_eq!(seen["run"], spec().id.to_string());
        assert_eq!(seen["lr"], 0.2, "the patch is applied");
        let copy = run.join("src").canonicalize().unwrap();
        assert_eq!(seen["cwd"], copy.display().to_string());
        let original = std::fs::read_to_string(dir.join("train.py")).unwrap();
        assert!(
            original.contains("LR = 0.1"),
            "the user's file is untouched"
        );
        assert!(!copy.join(".git").exists() && !copy.join("results").exists());

        c.script.patches[0].count = 2;
        let e = c.failed();
        assert!(
            e.contains("train.py") && e.contains("`bigger_lr`") && e.contains("1×, not 2×"),
            "{e}"
        );
    }

    #[test]
    fn placeholders_fill_and_braces_stay_as_written() {
        let vars = [("seed", "7".to_string()), ("out", "/o".to_string())];
        assert_eq!(
            fill("{out}/{seed}-{{seed}}-{x}-}-{-{seed", &vars),
            "/o/7-{seed}-{x}-}-{-{seed"
        );
    }

    #[test]
    fn a_run_over_several_processes_starts_under_torchrun() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join(".venv/bin")).unwrap();
        std::fs::write(dir.join(".venv/bin/torchrun"), "").unwrap();
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (program, args) = command(&argv(&[".venv/bin/python", "train.py", "--x"]), 2, dir, dir);
        assert_eq!(program, dir.join(".venv/bin/torchrun"), "beside its Python");
        assert_eq!(
            args,
            argv(&["--standalone", "--nproc-per-node", "2", "train.py", "--x"])
        );
        let (program, args) = command(&argv(&["python3", "train.py"]), 4, dir, dir);
        assert_eq!(
            (program, &args[2..]),
            (PathBuf::from("torchrun"), &argv(&["4", "train.py"])[..])
        );
        let (_, args) = command(&argv(&["./run.sh", "a"]), 2, dir, dir);
        let sh = dir.join("./run.sh").display().to_string();
        assert_eq!(args[3..], argv(&["--no-python", &sh, "a"]));
        let (program, args) = command(&argv(&["python3", "train.py"]), 1, dir, dir);
        assert_eq!(
            (program, args),
            (PathBuf::from("python3"), argv(&["train.py"]))
        );
    }

    #[test]
    fn the_device_reaches_the_environment() {
        let spec = spec();
        let c = Case::new("");
        let env = |devices: &[&str]| {
            let devices: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
            let r = ScriptRun {
                spec: &spec,
                record: record(c.script.clone()),
                devices: &devices,
                folder: c.folder.clone(),
            };
            let env = environment(&r, &c.script, Path::new("/r"), Path::new("/m"), &[]);
            let get = |k: &str| {
                env.iter()
                    .rev()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
            };
            (
                get("CUDA_VISIBLE_DEVICES"),
                get("OMP_NUM_THREADS"),
                get("TRICKLAB_EVENTS"),
            )
        };
        assert_eq!(env(&["cuda:1", "cuda:3"]).0.as_deref(), Some("1,3"));
        assert_eq!(env(&["cuda"]).0.as_deref(), Some("0"));
        // On the CPU: the worker's share of the cores, as its libtorch pool has it.
        let share = tch::get_num_threads().max(1).to_string();
        assert_eq!(
            env(&["cpu"]),
            (
                Some(String::new()),
                Some(share),
                Some("/r/events.jsonl".into())
            )
        );
        assert_eq!(env(&["cuda:0"]).1, None);
    }

    #[test]
    fn a_failing_script_names_its_status_and_last_stderr_line() {
        let c = Case::new(
            r#"
print("loading", file=sys.stderr)
print("ValueError: bad batch size", file=sys.stderr)
print("", file=sys.stderr)
sys.exit(3)
"#,
        );
        let e = c.failed();
        assert!(
            e.contains("exited with status 3: ValueError: bad batch size"),
            "{e}"
        );
        assert!(
            e.contains(&c.dir().join("stderr.log").display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_script_without_a_final_line_fails_saying_what_to_send() {
        let c = Case::new("send(step=1, loss=2.0, lr=0.1)\n");
        let e = c.failed();
        assert!(
            e.contains("without a final result") && e.contains("final_acc"),
            "{e}"
        );
    }

    #[test]
    fn a_malformed_line_is_a_warning_and_the_run_finishes() {
        let c = Case::new(
            r#"
send(tricklab=1)
with open(os.environ["TRICKLAB_EVENTS"], "a") as f:
    f.write("not json\n")
send(final={"acc": 0.7, "seconds": 2.0})
"#,
        );
        let (s, events) = c.finished();
        assert_eq!(s.acc, 0.7);
        let w = warnings(&events);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("events.jsonl:2: not a JSON object"), "{w:?}");
    }

    #[test]
    fn a_timeout_ends_the_whole_process_group() {
        let mut c = sleeper();
        c.script.timeout_s = Some(1.0);
        let t = Instant::now();
        let e = c.failed();
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        assert!(
            e.contains("timed out after 1 s (timeout = 1 s in [script])")
                && e.contains("stderr.log"),
            "{e}"
        );
        assert!(gone(child_pid(&c)), "the script's child outlived the run");
    }

    /// Cancels once `after` has passed; pauses once first where `pause`.
    struct Stopper {
        start: Instant,
        after: Duration,
        pause: AtomicBool,
    }

    impl Control for Stopper {
        fn poll(&self) -> Flow {
            if self.pause.swap(false, Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(300));
            }
            if self.start.elapsed() > self.after {
                Flow::Cancel
            } else {
                Flow::Continue
            }
        }

        fn pausing(&self) -> bool {
            self.pause.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_cancel_ends_the_run_and_every_process_it_started() {
        let c = sleeper();
        let ctl = Stopper {
            start: Instant::now(),
            after: Duration::from_millis(500),
            pause: AtomicBool::new(false),
        };
        let (out, _) = c.run_with(&ctl);
        assert_eq!(out.unwrap(), Outcome::Cancelled);
        assert!(gone(child_pid(&c)), "the script's child outlived the run");
    }

    #[test]
    fn a_pause_stays_out_of_the_wall_clock() {
        let c = Case::new("time.sleep(0.2)\nsend(final={'acc': 0.5, 'seconds': 0.1})\n");
        let ctl = Stopper {
            start: Instant::now(),
            after: Duration::from_secs(60),
            pause: AtomicBool::new(true),
        };
        let (Ok(Outcome::Finished(s)), _) = c.run_with(&ctl) else {
            panic!("the run finishes")
        };
        assert!(s.clocks.paused_s >= 0.3, "{:?}", s.clocks);
        assert!(s.clocks.wall_s > 0.0, "{:?}", s.clocks);
    }

    #[test]
    fn a_script_without_seconds_is_timed_by_the_wall_clock() {
        let c = Case::new("send(final={'acc': 0.6})\n");
        let (s, events) = c.finished();
        assert_eq!(s.clock, Some(Clock::Wall));
        assert_eq!(s.clocks.hlb_s, s.clocks.wall_s);
        let w = warnings(&events);
        assert!(
            w.len() == 1 && w[0].contains("reported no seconds"),
            "{w:?}"
        );
    }

    #[test]
    fn parse_regexes_read_a_scripts_printed_lines() {
        let mut c = Case::new(
            r#"
for e in range(1, 3):
    print(f"step {10 * e} loss {2.0 / e:.3f}")
    print(f"epoch {e} acc {40.0 + 10 * e:.2f}%")
print("final: acc 93.10% in 1.50 s")
"#,
        );
        c.script.parse = [
            r"^step (?P<step>\d+) loss (?P<loss>\S+)$",
            r"^epoch (?P<epoch>\d+) acc (?P<acc>[\d.]+)%$",
            r"^final: acc (?P<final_acc>[\d.]+)% in (?P<final_seconds>[\d.]+) s$",
        ]
        .map(String::from)
        .into();
        let (s, events) = c.finished();
        assert!((s.acc - 0.931).abs() < 1e-12, "{}", s.acc);
        assert_eq!((s.clocks.hlb_s, s.steps, s.epochs), (1.5, 20, 2.0));
        let accs: Vec<f64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Epoch { row, .. } => Some(row.test_acc),
                _ => None,
            })
            .collect();
        assert_eq!(accs, vec![0.5, 0.6]);

        c.script.parse.push("(unclosed".into());
        std::fs::remove_dir_all(c.dir()).unwrap();
        let e = c.failed();
        assert!(
            e.contains("`(unclosed` is not a regular expression (unclosed group)"),
            "{e}"
        );
        assert!(!c.dir().exists(), "nothing starts");
    }

    #[test]
    fn a_nan_loss_fails_the_run_at_once() {
        let c = Case::new(
            r#"
send(step=1, loss=2.0, lr=0.1)
send(step=2, loss=float("nan"), lr=0.1)
time.sleep(60)
"#,
        );
        let t = Instant::now();
        let e = c.failed();
        assert!(e.contains("loss became NaN at step 2"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }
}
