//! The keeper between tricklab and a script's command (`tricklab keep --
//! PROGRAM ARGS`, hidden): what makes a kill -9 of tricklab take every
//! process of a script run with it.
//!
//! The kernel's parent-death signal reaches only a process's own child.
//! A command that starts processes of its own (torchrun's ranks, each in a
//! session of its own; a script's subprocesses) would outlive tricklab.
//! The keeper is tricklab's child: it makes itself the subreaper of what the
//! command starts (an orphan becomes its child, not init's), starts the
//! command, and when tricklab dies (its parent-death signal, SIGHUP) kills
//! every process below it. When the command exits it kills what the command
//! left, and exits as the command did.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The hidden subcommand's name.
pub const KEEP: &str = "keep";

/// The signal the keeper gets when tricklab dies (set by the runner).
pub const PARENT_DIED: libc::c_int = libc::SIGHUP;

/// The tricklab binary that keeps script runs, where this process is one
/// (set by `cli::main`; a library's tests start commands directly).
static KEEPER: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Script runs are kept by `exe keep -- …` from now on.
pub fn use_keeper(exe: std::path::PathBuf) {
    let _ = KEEPER.set(exe);
}

/// The binary that keeps script runs, if any.
pub fn keeper() -> Option<&'static std::path::Path> {
    KEEPER.get().map(std::path::PathBuf::as_path)
}

/// The last signal caught, for the loop to act on.
static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn catch(sig: libc::c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// Runs `argv` (program and arguments) under the keeper; returns the exit
/// code (a command killed by a signal is re-raised, so the runner sees it).
pub fn keep(argv: &[OsString]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("tricklab keep: give the command after --");
        return 2;
    };
    let parent = std::os::unix::process::parent_id();
    // SAFETY: process attributes and signal dispositions of this process,
    // set before it starts anything.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        libc::signal(libc::SIGTERM, catch as *const () as libc::sighandler_t);
        libc::signal(PARENT_DIED, catch as *const () as libc::sighandler_t);
    }
    // tricklab died before this process could hear of it.
    if parent == 1 {
        return 1;
    }
    let mut c = std::process::Command::new(program);
    c.args(args);
    // SAFETY: prctl only, between fork and exec: the command dies with its
    // keeper however the keeper ends.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = match c.spawn() {
        Ok(c) => c.id() as libc::pid_t,
        Err(e) => {
            eprintln!(
                "cannot start `{}`: {e}; check [script] command in the matrix",
                program.to_string_lossy()
            );
            return 127;
        }
    };
    let status = follow(child, parent);
    // What the command left running is the run's and ends with it.
    kill_below(libc::SIGKILL);
    reap_all();
    match status {
        Some(s) => exit_as(s),
        None => 1,
    }
}

/// Waits for the command, reaping orphans as they end; a SIGTERM (a
/// cancel, a timeout) goes on to every process below, tricklab's death
/// kills them. `None`: tricklab died first.
fn follow(child: libc::pid_t, parent: u32) -> Option<std::process::ExitStatus> {
    loop {
        match CAUGHT.swap(0, Ordering::SeqCst) {
            libc::SIGTERM => kill_below(libc::SIGTERM),
            PARENT_DIED => return None,
            _ => {}
        }
        if std::os::unix::process::parent_id() != parent {
            return None;
        }
        let mut status = 0;
        // SAFETY: reaping this process's own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == child {
            return Some(std::process::ExitStatus::from_raw(status));
        }
        if pid <= 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sends `sig` to every process below this one.
fn kill_below(sig: libc::c_int) {
    // SAFETY: signals to this process's own descendants.
    for p in descendants(std::process::id() as libc::pid_t) {
        unsafe { libc::kill(p, sig) };
    }
}

/// Reaps every child left (killed just before), for a bounded time.
fn reap_all() {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let mut status = 0;
        // SAFETY: reaping this process's own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == -1 {
            return;
        }
        if pid == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Ends this process as the command ended: its exit code, or its signal.
fn exit_as(s: std::process::ExitStatus) -> i32 {
    if let Some(code) = s.code() {
        return code;
    }
    let sig = s.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: the default disposition back, then the signal to itself.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    128 + sig
}

/// Every process below `pid` now (from /proc), nearest first.
pub fn descendants(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let parent_of = |p: &str| -> Option<libc::pid_t> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<(libc::pid_t, libc::pid_t)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    Some((name.parse().ok()?, parent_of(&name)?))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}
