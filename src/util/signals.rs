//! SIGINT and SIGTERM, counted by a handler of our own for the whole life of
//! the process, so every phase of a command (training, reports, charts, the
//! nightly history) sees them and says truthfully what it did and did not do.
//! The first asks a command to stop after the run in progress; a second (or
//! the grace period running out) cancels that run.

use std::sync::atomic::{AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static TERMINATES: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic adds: async-signal-safe.
    if sig == libc::SIGINT {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    } else {
        TERMINATES.fetch_add(1, Ordering::SeqCst);
    }
}

/// Routes SIGINT and SIGTERM to the counters (idempotent).
pub fn install() {
    // SAFETY: a plain sigaction with a handler that only touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Signals received so far.
pub fn received() -> usize {
    INTERRUPTS.load(Ordering::SeqCst) + TERMINATES.load(Ordering::SeqCst)
}

/// Whether any stop signal arrived.
pub fn stopping() -> bool {
    received() > 0
}

/// The shell's exit code for the signal that stopped the command: 143 for
/// SIGTERM, 130 for SIGINT.
pub fn exit_code() -> i32 {
    if TERMINATES.load(Ordering::SeqCst) > 0 {
        143
    } else {
        130
    }
}

/// How a message names what arrived.
pub fn name() -> &'static str {
    if TERMINATES.load(Ordering::SeqCst) > 0 {
        "terminated"
    } else {
        "interrupted"
    }
}
