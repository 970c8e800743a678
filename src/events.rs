//! The event stream between the worker (which owns the device) and its
//! consumers (results store, TUI, headless progress bars). Consumers never
//! know how training works; they only see these values.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use crate::config::RunId;

/// One training step as read back from the device (in chunks, never per step).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub step: u64,
    /// Fractional epoch at the end of this step.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub epoch: f64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub loss: f64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub lr: f64,
    /// Mean |gamma| per BN layer, in network order.
    #[serde(deserialize_with = "crate::util::nans_if_null")]
    pub bn_scale: Vec<f32>,
    /// Mean beta per BN layer, in network order.
    #[serde(deserialize_with = "crate::util::nans_if_null")]
    pub bn_bias: Vec<f32>,
    /// Seconds the step spent getting its batch: the CPU loader building
    /// it, or the wait for the streaming loader (host time, no device sync).
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub loader_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRow {
    /// 1-based epoch number (a fractional last epoch counts as one).
    pub epoch: usize,
    pub steps: u64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub train_loss: f64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub train_acc: f64,
    /// Eval accuracy of the model that is evaluated (the EMA copy when there is one), no TTA.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub test_acc: f64,
    /// Same with the run's TTA level, when TTA is on.
    pub test_acc_tta: Option<f64>,
    /// Training seconds of this epoch (device-synchronised at the epoch boundary).
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub train_s: f64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub eval_s: f64,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub images_per_s: f64,
    pub peak_mem_bytes: Option<u64>,
    /// Of `train_s`, the seconds that went to the loader (see `Clocks::loader_s`).
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub loader_s: f64,
    /// The streaming loader's own rate over the epoch: images it delivered a
    /// second (None for in-memory data).
    #[serde(default)]
    pub loader_images_per_s: Option<f64>,
    /// A data-parallel run's step by DDP's own clock so far (rank 0's
    /// Logger: its backward, gradient all-reduce and the part hidden).
    #[serde(default)]
    pub ddp: Option<crate::config::DdpTimes>,
}

/// The clocks of TRICKS.md section 5, kept apart so that every convention can be reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Clocks {
    /// Loading, preprocessing, whitening, building the net and the training
    /// epochs; evaluation excluded (Page's new_dawn.py).
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub dawn_s: f64,
    /// Preprocessing on the device + whitening init + training epochs + the
    /// final (TTA) eval; loading to the device and building the net excluded.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub airbench_s: f64,
    /// Training loop of each epoch only.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub hlb_s: f64,
    /// All evaluation passes.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub eval_s: f64,
    /// Data preparation: move to the device, normalise, pad.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub prep_s: f64,
    /// Of `prep_s`, the normalising and padding on the device (airbench's
    /// timer covers it, not the upload before it).
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub preprocess_s: f64,
    /// Whitening eigenbasis computation (0 when whitening is off).
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub whiten_s: f64,
    /// Building and initialising the net, the whitening fit left out: in
    /// DAWNBench's clock, as Page's new_dawn.py builds its net after its
    /// timer starts (airbench and hlb build theirs before theirs).
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub build_s: f64,
    /// Of `hlb_s`, the seconds the CPU loader spent building batches, or the
    /// steps waited for the streaming loader's (0 when the data is resident):
    /// what a loader running beside the device, as in Page's B0, would hide.
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub loader_s: f64,
    /// Everything, from the start of the run to the summary, pauses excluded.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub wall_s: f64,
    /// Seconds the run stood paused (`p` in the TUI): kept out of every
    /// clock above and recorded here.
    #[serde(default)]
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub paused_s: f64,
}

impl Clocks {
    /// The run's seconds on clock `c`.
    pub fn on(&self, c: crate::config::Clock) -> f64 {
        use crate::config::Clock;
        match c {
            Clock::Dawn => self.dawn_s,
            Clock::Airbench => self.airbench_s,
            Clock::Hlb => self.hlb_s,
            Clock::Wall => self.wall_s,
        }
    }
}

impl RunSummary {
    /// "acc 94.01%", with " (TTA)" only where the run used TTA (`tta`):
    /// the accuracy of a run without it is plain accuracy.
    pub fn acc_words(&self, tta: bool) -> String {
        format!(
            "acc {:.2}%{}",
            100.0 * self.acc_tta,
            if tta { " (TTA)" } else { "" }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Final accuracy without TTA.
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub acc: f64,
    /// Final accuracy with the run's TTA level (equal to `acc` when TTA is off).
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub acc_tta: f64,
    pub clocks: Clocks,
    /// DAWNBench-style seconds until the first eval reaching the target, if it did.
    pub time_to_target_s: Option<f64>,
    /// Epoch at which the target was first reached.
    pub epoch_to_target: Option<usize>,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub epochs: f64,
    pub steps: u64,
    pub peak_mem_bytes: Option<u64>,
    #[serde(deserialize_with = "crate::util::nan_if_null")]
    pub final_train_loss: f64,
    pub device: String,
    /// The machine over the run: cores, load, other processes' share, GPU state.
    #[serde(default)]
    pub machine: Option<Box<crate::util::machine::MachineState>>,
    /// Epoch-to-epoch spread of throughput (coefficient of variation).
    #[serde(default)]
    pub throughput_cv: Option<f64>,
    /// Why the run's seconds are not to be trusted (a busy machine, a
    /// throttled GPU, a ragged throughput), or `None`.
    #[serde(default)]
    pub noise: Option<String>,
    /// Every rank of a run spread over several (empty for one process).
    #[serde(default)]
    pub ranks: Vec<RankEnd>,
    /// The `cuda_graphs` trick: `on`, `off` (not asked), or `off: <why>`.
    #[serde(default)]
    pub graphs: Option<String>,
    /// Where the training steps' seconds went.
    #[serde(default)]
    pub stages: Option<Box<StageSeconds>>,
    /// The clock the run's seconds were read on, where it is not its
    /// variant's: a script that sent no seconds is timed by the wall clock.
    #[serde(default)]
    pub clock: Option<crate::config::Clock>,
}

/// A run's seconds by stage of its training steps (train/stages.rs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageSeconds {
    /// Getting each batch: the epoch's augmentation and the loader.
    pub data_s: f64,
    /// The forward and the loss; `None` when one graph replays forward and
    /// backward together.
    pub forward_s: Option<f64>,
    /// The backward, the gradient all-reduce and clipping; `None` likewise.
    pub backward_s: Option<f64>,
    /// Forward and backward together (always known).
    pub forward_backward_s: f64,
    /// The optimisers and the parameter averaging.
    pub optimiser_s: f64,
    /// Every evaluation pass (the eval_s clock).
    pub eval_s: f64,
    /// `cuda events`, `host clock`, or `untimed: <why>`.
    pub timed_by: String,
}

impl RunSummary {
    /// Ranks the run was spread over.
    pub fn world_size(&self) -> usize {
        self.ranks.len().max(1)
    }
}

/// One rank of a multi-rank run, as it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankEnd {
    pub rank: usize,
    pub host: String,
    pub device: String,
    /// Seconds in tricklab's own all-reduces beside DDP's (a step's loss
    /// and accuracy sums; the gradients' are in `ddp`). Gloo: the
    /// transfers, which the host waits for; NCCL: the host's side only.
    pub allreduce_s: f64,
    pub throughput_cv: Option<f64>,
    pub machine: crate::util::machine::MachineState,
    /// This rank's CPU seconds and wall seconds over the run.
    #[serde(default)]
    pub cpu_s: f64,
    #[serde(default)]
    pub wall_s: f64,
    /// A step's backward and gradient all-reduce by DDP's own clock, and
    /// how much of the all-reduce the backward hid (its sampled steps).
    #[serde(default)]
    pub ddp: Option<crate::config::DdpTimes>,
}

impl RankEnd {
    /// Each rank's machine with the CPU of the gang's other ranks on its host
    /// counted as the run's own: ranks sharing a box are not each other's noise.
    pub fn own_gang(ranks: &mut [RankEnd]) {
        let peers: Vec<f64> = ranks
            .iter()
            .map(|r| {
                ranks
                    .iter()
                    .filter(|o| o.rank != r.rank && o.host == r.host)
                    .map(|o| o.cpu_s)
                    .sum()
            })
            .collect();
        for (r, cpu_s) in ranks.iter_mut().zip(peers) {
            crate::util::machine::discount_own(&mut r.machine, cpu_s, r.wall_s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RankEnd;
    use crate::util::machine::MachineState;

    #[test]
    fn a_ranks_peers_on_its_host_are_not_other_processes() {
        // Two ranks on host a, each busy 1 core of 4 for 10 s, each seeing the
        // other as 25% "others" plus 10% of a stranger; one rank on host b.
        let rank = |rank, host: &str, other| RankEnd {
            rank,
            host: host.into(),
            device: "cpu".into(),
            allreduce_s: 0.0,
            throughput_cv: None,
            machine: MachineState {
                cpu_cores: 4,
                other_cpu: Some(other),
                ..MachineState::default()
            },
            cpu_s: 10.0,
            wall_s: 10.0,
            ddp: None,
        };
        let mut ranks = [rank(0, "a", 0.35), rank(1, "a", 0.35), rank(2, "b", 0.1)];
        RankEnd::own_gang(&mut ranks);
        let left: Vec<f64> = ranks.iter().map(|r| r.machine.other_cpu.unwrap()).collect();
        assert!(
            (left[0] - 0.1).abs() < 1e-12 && (left[1] - 0.1).abs() < 1e-12,
            "{left:?}"
        );
        assert!(
            (left[2] - 0.1).abs() < 1e-12,
            "host b has no peers: {left:?}"
        );
    }
}

/// What happened to a run in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
    /// Finished in an earlier session; skipped on resume.
    Skipped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// The plain-text prefix, as in `error: ...` messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Worker → consumers (and rank 0 of a gang → its worker, as JSON lines).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Event {
    RunStarted {
        run: RunId,
        seed: u64,
        /// What was decided for it: its variant's record, its data and loader.
        record: Arc<crate::record::RunRecord>,
        total_steps: u64,
        total_epochs: f64,
        target_acc: f64,
        device: String,
        /// The variant the TUI draws behind this run.
        reference: Option<crate::config::Reference>,
    },
    /// Steps read back from the device since the previous chunk.
    Steps {
        run: RunId,
        rows: Vec<StepRow>,
        images_per_s: f64,
        /// Of the chunk's wall time, the share its steps spent in the loader.
        #[serde(default)]
        loader_share: f64,
    },
    Epoch {
        run: RunId,
        row: EpochRow,
    },
    RunFinished {
        run: RunId,
        summary: RunSummary,
    },
    RunFailed {
        run: RunId,
        reason: String,
    },
    RunCancelled {
        run: RunId,
    },
    WorkerPaused(bool),
    Log {
        level: LogLevel,
        message: String,
    },
    /// The queue changed (runs added, reordered, started, finished): a full snapshot.
    Queue(Vec<QueueItem>),
    /// The queue is empty and the worker is idle (or shutting down).
    Drained,
}

/// One row of a queue snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueItem {
    pub run: RunId,
    pub seed: u64,
    pub status: RunStatus,
    /// Why it failed, when it did.
    pub reason: Option<String>,
}

impl Event {
    pub fn run(&self) -> Option<&RunId> {
        match self {
            Event::RunStarted { run, .. }
            | Event::Steps { run, .. }
            | Event::Epoch { run, .. }
            | Event::RunFinished { run, .. }
            | Event::RunFailed { run, .. }
            | Event::RunCancelled { run } => Some(run),
            _ => None,
        }
    }
}

/// Consumers → worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Put a failed or cancelled run back in the queue.
    Requeue(RunId),
    /// Move a queued run one place earlier (`up`) or later.
    Move {
        run: RunId,
        up: bool,
    },
    /// Drop a queued run.
    Remove(RunId),
    Pause,
    Resume,
    /// Cancel the run in progress (it is recorded as cancelled, not failed).
    CancelCurrent,
    /// Finish the run in progress, then stop taking runs.
    StopAfterCurrent,
    Shutdown,
}
