//! The `cuda_graphs` trick (issue 48): a step's forward, loss and backward
//! captured once as a CUDA graph and replayed every step after, as the
//! records' `torch.compile(mode="max-autotune")` replays theirs. The
//! optimisers, the averaging and the metrics still run eagerly after each
//! replay (they read host schedules: lr, Muon's renormalisation steps).
//!
//! What a replay needs, and how it is kept:
//! - inputs: the batch (and hlb's soft targets) are copied into static
//!   buffers the graph reads, before each replay;
//! - gradients: the graph zero-fills the existing ones first, then the
//!   backward accumulates into them, so their addresses never change and
//!   the optimisers read them where the graph wrote them. The eager step
//!   zero-fills after the optimiser or drops them (`zero_grad_none`): the
//!   same numbers (0 + g = g), so a graph-path step keeps the gradients and
//!   the engine skips its own zeroing;
//! - phases: a new input shape, a parameter that stops training (the
//!   whitening bias), or a new loss multiplier (a batch change) is a new
//!   key; each gets its own graph, warmed by one eager step on the side
//!   stream first, and all of them allocate from one pool;
//! - outputs: the step's loss and correct count live in the graph's pool
//!   and the next replay overwrites them, so each replay's are copied out.
//!
//! On a CPU the same path runs uncaptured (`Mode::Rehearse`): the static
//! buffers, the gradient handling and the phases, each step executed
//! directly. Its test checks that it equals the eager step bit for bit.

use crate::native::cuda::{self, CudaGraph, GraphPool, SideStream};
use anyhow::Result;
use tch::{Device, Tensor};

/// Graphs a run may hold before the rest of it runs eagerly: shapes that
/// change every few steps would capture without end.
const MAX_PHASES: usize = 8;

enum Mode {
    /// The eager step (the trick off, or a reason it cannot capture).
    Eager,
    /// Captured and replayed on CUDA device `index`.
    Capture { index: usize, pool: GraphPool },
    /// The CPU form: the graph path, uncaptured.
    Rehearse,
}

/// What makes a step need its own graph.
#[derive(Clone, Debug, PartialEq)]
struct Key {
    shapes: Vec<Vec<i64>>,
    trains: Vec<bool>,
    /// The loss multiplier's bits (the graph bakes it in).
    tag: u64,
}

struct Phase {
    key: Key,
    /// The static inputs the graph reads.
    inputs: Vec<Tensor>,
    /// None until its second step (the first warms up eagerly).
    graph: Option<CudaGraph>,
    /// The graph's outputs, overwritten by each replay.
    out: Option<(Tensor, Tensor)>,
}

/// A run's step graphs, and what `runs.parquet` says of them.
pub(super) struct StepGraphs {
    mode: Mode,
    status: String,
    /// Every trainable parameter of the net, whose gradients the graph keeps.
    params: Vec<Tensor>,
    phases: Vec<Phase>,
}

impl StepGraphs {
    /// The mode a run gets: `asked` is the `cuda_graphs` trick.
    pub fn new(asked: bool, device: Device, params: Vec<Tensor>) -> StepGraphs {
        let (mode, status) = match (asked, device) {
            (false, _) => (Mode::Eager, "off".to_string()),
            (true, Device::Cuda(_)) if !cuda::built() => (
                Mode::Eager,
                "off: this build has no CUDA graphs (no CUDA headers when it was built)".into(),
            ),
            (true, Device::Cuda(index)) => match GraphPool::new() {
                Ok(pool) => (Mode::Capture { index, pool }, "on".into()),
                Err(e) => (Mode::Eager, format!("off: {e}")),
            },
            (true, _) => (
                Mode::Rehearse,
                "off: not a CUDA device (the graph path ran uncaptured)".into(),
            ),
        };
        StepGraphs {
            mode,
            status,
            params,
            phases: Vec::new(),
        }
    }

    /// The eager step for the whole run, saying why, where the trick was
    /// asked (nothing changes where it was not).
    pub fn eager_because(mut self, why: &str) -> StepGraphs {
        if !matches!(self.mode, Mode::Eager) {
            self.mode = Mode::Eager;
            self.status = format!("off: {why}");
        }
        self
    }

    /// `on`, or `off: <reason>` (`off` alone when not asked).
    pub fn status(&self) -> &str {
        &self.status
    }

    /// Whether the gradients stay in place across steps (the graph path):
    /// then the engine must not zero or drop them after the optimiser.
    pub fn keeps_grads(&self) -> bool {
        !matches!(self.mode, Mode::Eager)
    }

    /// One step's forward and backward: `body` on the step's inputs (the
    /// batch, its labels, soft targets if any), through the graph when the
    /// run has one. `tag` is what else the body bakes in (the loss scale);
    /// `drawn` says why this step's body cannot be captured, if it cannot
    /// (the rest of the run then steps eagerly).
    pub fn step(
        &mut self,
        inputs: &[&Tensor],
        tag: f64,
        drawn: Option<&str>,
        body: impl Fn(&[Tensor]) -> (Tensor, Tensor),
    ) -> Result<(Tensor, Tensor)> {
        if matches!(self.mode, Mode::Eager) {
            return Ok(body(&shallow(inputs)));
        }
        if let Some(why) = drawn {
            return Ok(self.give_up(why.to_string(), inputs, &body));
        }
        let key = Key {
            shapes: inputs.iter().map(|t| t.size()).collect(),
            trains: self.params.iter().map(Tensor::requires_grad).collect(),
            tag: tag.to_bits(),
        };
        let at = self.phases.iter().position(|p| p.key == key);
        if at.is_none() && self.phases.len() >= MAX_PHASES {
            return Ok(self.give_up(
                format!("more than {MAX_PHASES} input shapes or phases"),
                inputs,
                &body,
            ));
        }
        let i = at.unwrap_or_else(|| {
            self.phases.push(Phase {
                key,
                inputs: inputs.iter().map(|t| t.copy()).collect(),
                graph: None,
                out: None,
            });
            self.phases.len() - 1
        });
        let phase = &mut self.phases[i];
        if at.is_some() {
            for (s, t) in phase.inputs.iter_mut().zip(inputs) {
                s.copy_(t);
            }
        }
        let params = &self.params;
        let run = |inputs: &[Tensor]| {
            zero_existing_grads(params);
            body(inputs)
        };
        let (index, pool) = match &self.mode {
            Mode::Rehearse => return Ok(run(&phase.inputs)),
            Mode::Capture { index, pool } => (*index, pool),
            Mode::Eager => unreachable!("handled above"),
        };
        if let Some(g) = &phase.graph {
            g.replay()?;
            let (loss, correct) = phase.out.as_ref().expect("a captured phase has outputs");
            return Ok((loss.copy(), correct.copy()));
        }
        if at.is_none() {
            // Warm-up on the side stream (cuDNN's and cuBLAS's lazy state,
            // the allocator's blocks), as PyTorch does before a capture.
            let _side = SideStream::enter(index)?;
            return Ok(run(&phase.inputs));
        }
        let captured = {
            let _side = SideStream::enter(index)?;
            CudaGraph::capture(pool, || run(&phase.inputs))
        };
        match captured {
            Ok((g, out)) => {
                g.replay()?;
                let copied = (out.0.copy(), out.1.copy());
                phase.graph = Some(g);
                phase.out = Some(out);
                Ok(copied)
            }
            Err(e) => Ok(self.give_up(e.to_string(), inputs, &body)),
        }
    }

    /// The rest of the run eagerly, this step included, saying why.
    fn give_up(
        &mut self,
        why: String,
        inputs: &[&Tensor],
        body: &dyn Fn(&[Tensor]) -> (Tensor, Tensor),
    ) -> (Tensor, Tensor) {
        self.mode = Mode::Eager;
        self.status = format!("off: {why}");
        self.phases.clear();
        // The graph path left the last step's gradients in place.
        zero_existing_grads(&self.params);
        body(&shallow(inputs))
    }
}

fn shallow(ts: &[&Tensor]) -> Vec<Tensor> {
    ts.iter().map(|t| t.shallow_clone()).collect()
}

/// Zero-fills every gradient that exists, in place (its address kept).
fn zero_existing_grads(params: &[Tensor]) {
    tch::no_grad(|| {
        for p in params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    });
}
