//! The training engine, in stages: prepare (data and layout) → build (net,
//! optimisers, averager) → step → eval. The worker drives it through
//! [`Trainer`] with a run whose plan is already decided; it reports through
//! an event callback and never knows who listens.

mod build;
mod engine;
mod eval;
#[cfg(test)]
mod golden_tests;
mod graph;
#[cfg(test)]
mod graph_tests;
mod pipeline;
mod planted;
mod prepare;
mod probe;
mod replay;
mod stages;
mod step;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod trajectory_tests;
#[cfg(test)]
mod trick_effect_tests;
mod warm;

pub use engine::TchTrainer;
pub use pipeline::{jitter_with, normalise};
pub use planted::{PLANTED_ENV, Planted, new_trainer};
pub use probe::Probe;
pub use replay::Injection;
pub use warm::warm_up_run;

use crate::events::{Event, RunSummary};
use crate::plan::PlannedRun;

/// What the engine asks between steps: keep going or stop. An implementation
/// may block inside `poll` while the user has paused the queue.
pub trait Control {
    fn poll(&self) -> Flow;
    /// Whether `poll` is about to block for a pause (the engine then waits
    /// with the device idle and keeps the wait out of every clock).
    fn pausing(&self) -> bool {
        false
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Cancel,
}

/// A control that never stops: for one-off runs (`tricklab train`) and tests.
pub struct NeverStop;

impl Control for NeverStop {
    fn poll(&self) -> Flow {
        Flow::Continue
    }
}

#[derive(Clone, Debug, PartialEq)]
// Returned once per run and unpacked at once: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Finished(RunSummary),
    Cancelled,
}

/// Runs one planned run to its end on a device the implementation owns.
/// Created on the worker thread, so it need not be `Send`.
pub trait Trainer {
    /// Human-readable device name (`cpu`, `NVIDIA H100 80GB HBM3 (cuda:0)`).
    fn device_name(&self) -> String;
    fn run(
        &mut self,
        run: &PlannedRun,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> anyhow::Result<Outcome>;

    /// An untimed, discarded run before the first timed one, so that one-time
    /// costs (kernel selection, allocation, data loading) land in no run's
    /// clocks. Returns what it did, for the log; `None` when there is nothing to warm.
    fn warm_up(&mut self, _run: &PlannedRun, _ctl: &dyn Control) -> Option<String> {
        None
    }

    /// Prices a run of `run`'s net on this device before a matrix starts
    /// (`matrix show --estimate`, the scale guard, the picker's probe).
    fn probe(&mut self, _run: &PlannedRun) -> anyhow::Result<Probe> {
        anyhow::bail!("{} cannot probe a run's cost", self.device_name())
    }
}
