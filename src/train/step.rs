//! Stage 4 of a run: one training step's forward and backward, and the step
//! metrics kept on the device until their read-back.

use super::pipeline::cutmix_batch;
use super::prepare::Layout;
use crate::dist::group::GradSync;
use crate::events::StepRow;
use crate::model::Net;
use crate::native::{Rng, autocast};
use crate::optim;
use crate::plan::{CutMix, LossPlan, RunPlan};
use anyhow::{Result, bail};
use std::cell::RefCell;
use tch::{Device, Kind, Tensor};

/// The training loss of one micro-batch: label-smoothed cross-entropy (the
/// batch mean), on CutMix's soft targets when the batch was mixed.
pub(crate) fn batch_loss(
    loss: &LossPlan,
    logits: &Tensor,
    y: &Tensor,
    soft: Option<&Tensor>,
) -> Tensor {
    match soft {
        Some(soft) => optim::soft_target_ce(logits, &optim::smooth_targets(soft, loss.smoothing)),
        None => optim::label_smoothed_ce(logits, y, loss.smoothing),
    }
}

/// How a step's batch is mixed: not at all, by CutMix within the batch (a
/// feed that builds batches one at a time), or already, over the whole set
/// for the epoch (hlb's `get_batches`), with these soft targets.
#[derive(Clone, Copy)]
pub enum Mix<'a> {
    None,
    Batch(&'a CutMix),
    Given(&'a Tensor),
}

/// What a training step acts on: the net, the run's draws, its layout.
pub(super) struct Trainee<'a> {
    pub plan: &'a RunPlan,
    pub net: &'a Net,
    pub rng: &'a Rng,
    pub layout: Layout,
    pub classes: i64,
    /// The loss's multiplier: the plan's sum over the batch, at this
    /// epoch's batch when it changes by phase.
    pub loss_scale: f64,
    /// Called between each micro-batch's forward (and loss) and its
    /// backward: the stage clock's mark.
    pub forward_done: Option<&'a dyn Fn()>,
    /// A gang's DDP Reducer, armed before the step's last backward (the
    /// earlier micro-batches accumulate locally, as under DDP's `no_sync`).
    pub sync: Option<&'a GradSync>,
    /// A backward that failed (a collective lost inside it), for `check`.
    pub failed: RefCell<Option<String>>,
}

impl Trainee<'_> {
    /// Forward and backward over the step's micro-batches: the gradients of
    /// the loss summed over the batch. Returns the step's mean loss and its
    /// correct predictions, both left on the device.
    pub fn forward_backward(&self, x: &Tensor, y: &Tensor, mix: Mix<'_>) -> (Tensor, Tensor) {
        let (plan, accum) = (self.plan, self.plan.step.accum);
        let dev = x.device();
        let mut loss_sum = Tensor::zeros([], (Kind::Float, dev));
        let mut correct = Tensor::zeros([], (Kind::Int64, dev));
        let given: Vec<Option<Tensor>> = match mix {
            Mix::Given(soft) => soft.chunk(accum, 0).into_iter().map(Some).collect(),
            _ => (0..accum).map(|_| None).collect(),
        };
        let micro = x
            .chunk(accum, 0)
            .into_iter()
            .zip(y.chunk(accum, 0))
            .zip(given);
        let last = accum - 1;
        for (k, ((xm, ym), given)) in micro.enumerate() {
            // With CutMix the mixed batch is the only forward pass (one BN update per step).
            let (input, soft) = match (mix, given) {
                (Mix::Batch(c), _) => {
                    let (xc, soft) = cutmix_batch(self.rng, &xm, &ym, c.size, self.classes);
                    (xc, Some(soft))
                }
                (_, given) => (xm.shallow_clone(), given),
            };
            let logits = autocast(dev, self.layout.amp, || self.net.forward_t(&input, true));
            // The loss in float32 at least (a float64 replay keeps float64).
            let logits = match logits.kind() {
                Kind::Double => logits,
                _ => logits.to_kind(Kind::Float),
            };
            let loss = batch_loss(&plan.loss, &logits, &ym, soft.as_ref());
            if let Some(done) = self.forward_done {
                done();
            }
            if let (Some(ddp), true) = (self.sync, k as i64 == last) {
                ddp.arm();
            }
            // Summed over the batch (the micro-batch mean x the batch / accum).
            if let Err(e) = (&loss * (self.loss_scale / accum as f64)).f_backward() {
                self.failed.borrow_mut().get_or_insert(e.to_string());
            }
            let _ = correct.g_add_(&logits.argmax(-1, false).eq_tensor(&ym).sum(Kind::Int64));
            loss_sum += loss.detach() / accum as f64;
        }
        (loss_sum, correct)
    }
}

impl Trainee<'_> {
    /// This rank's part of a gang's step when its batch had no readable
    /// image: a forward of the stand-in `x` (zero images, a rank's share)
    /// and a backward of zero times its loss, so the Reducer's all-reduce
    /// meets the other ranks' with zero gradients from here, as DDP's `Join`
    /// shadows a rank that has run out of data
    /// (torch.distributed.algorithms.join; the sum is still divided by the
    /// world size, Join's `divide_by_initial_world_size`). In training mode,
    /// so BN keeps every activation finite (evaluation mode's early running
    /// statistics can overflow a deep net, and zero times infinity is no
    /// zero); the BN running statistics it moved are put back. Returns a
    /// zero loss and no correct predictions.
    pub fn shadow(&self, x: &Tensor, y: &Tensor) -> (Tensor, Tensor) {
        let dev = x.device();
        let running: Vec<(Tensor, Tensor)> = self
            .net
            .bn_running_stats()
            .into_iter()
            .map(|t| {
                let kept = t.copy();
                (t, kept)
            })
            .collect();
        let logits = autocast(dev, self.layout.amp, || self.net.forward_t(x, true));
        let logits = match logits.kind() {
            Kind::Double => logits,
            _ => logits.to_kind(Kind::Float),
        };
        let loss = batch_loss(&self.plan.loss, &logits, y, None);
        if let Some(ddp) = self.sync {
            ddp.arm();
        }
        if let Err(e) = (&loss * 0.0).f_backward() {
            self.failed.borrow_mut().get_or_insert(e.to_string());
        }
        // After the backward, which checks that its inputs kept their versions.
        for (mut t, kept) in running {
            t.copy_(&kept);
        }
        (
            Tensor::zeros([], (Kind::Float, dev)),
            Tensor::zeros([], (Kind::Int64, dev)),
        )
    }
}

impl Trainee<'_> {
    /// The step's failure, if its backward or the Reducer's arming failed.
    pub fn check(&self) -> Result<()> {
        if let Some(ddp) = self.sync {
            ddp.check()?;
        }
        match self.failed.borrow_mut().take() {
            Some(e) => bail!("the backward failed: {}", e.lines().next().unwrap_or("")),
            None => Ok(()),
        }
    }
}

/// The step metrics still on the device: each step's loss with its place
/// and lr, read back to the host in one sync per chunk.
pub(super) struct StepMetrics {
    /// (step, epoch, lr, loader seconds, loss on the device).
    pending: Vec<(u64, f64, f64, f64, Tensor)>,
    /// The epoch's summed loss and correct predictions, on the device.
    pub loss_sum: Tensor,
    pub correct: Tensor,
    /// Images stepped since the last read-back, since when, and the
    /// seconds of it the steps spent in the loader.
    chunk: (std::time::Instant, usize, f64),
}

impl StepMetrics {
    pub fn new(dev: Device) -> StepMetrics {
        StepMetrics {
            pending: Vec::new(),
            loss_sum: Tensor::zeros([], (Kind::Float, dev)),
            correct: Tensor::zeros([], (Kind::Int64, dev)),
            chunk: (std::time::Instant::now(), 0, 0.0),
        }
    }

    /// Keeps step `step`'s (1-based) loss and correct count over `images`,
    /// at fractional epoch `epoch` and learning rate `lr`, with the seconds
    /// it spent getting its batch; no host sync.
    pub fn push(
        &mut self,
        (step, epoch, lr): (u64, f64, f64),
        images: usize,
        loader_s: f64,
        out: (Tensor, Tensor),
    ) {
        let (loss, correct) = out;
        let _ = self.loss_sum.g_add_(&loss);
        let _ = self.correct.g_add_(&correct);
        self.pending.push((step, epoch, lr, loader_s, loss));
        self.chunk.1 += images;
        self.chunk.2 += loader_s;
    }

    /// The pending rows (one host sync), the images a second since the
    /// last read-back, and the share of that time spent in the loader.
    pub fn drain(&mut self, bn: &[(Tensor, Tensor)]) -> Result<(Vec<StepRow>, f64, f64)> {
        let rows = self.read_back(bn)?;
        let secs = self.chunk.0.elapsed().as_secs_f64().max(1e-9);
        let (per_s, share) = (self.chunk.1 as f64 / secs, (self.chunk.2 / secs).min(1.0));
        self.chunk = (std::time::Instant::now(), 0, 0.0);
        Ok((rows, per_s, share))
    }

    /// Starts a new epoch's sums.
    pub fn reset_epoch(&mut self) {
        let _ = self.loss_sum.zero_();
        let _ = self.correct.zero_();
        self.chunk = (std::time::Instant::now(), 0, 0.0);
    }

    /// One host sync for the pending steps: losses, and the BN scale/bias
    /// means at the last of them. A non-finite loss fails the run.
    fn read_back(&mut self, bn: &[(Tensor, Tensor)]) -> Result<Vec<StepRow>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let losses: Vec<Tensor> = self.pending.iter().map(|p| p.4.shallow_clone()).collect();
        let values = Vec::<f64>::try_from(
            &Tensor::stack(&losses, 0)
                .to_kind(Kind::Double)
                .to_device(Device::Cpu),
        )?;
        let (scale, bias) = if bn.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let s: Vec<Tensor> = bn.iter().map(|(w, _)| w.abs().mean(Kind::Float)).collect();
            let b: Vec<Tensor> = bn.iter().map(|(_, b)| b.mean(Kind::Float)).collect();
            (
                Vec::<f32>::try_from(&Tensor::stack(&s, 0).to_device(Device::Cpu))?,
                Vec::<f32>::try_from(&Tensor::stack(&b, 0).to_device(Device::Cpu))?,
            )
        };
        let n = self.pending.len();
        let mut rows = Vec::with_capacity(n);
        for (i, ((step, epoch, lr, loader_s, _), loss)) in
            self.pending.drain(..).zip(values).enumerate()
        {
            if !loss.is_finite() {
                bail!(
                    "loss became {loss} at step {step}: lower lr (or turn off the trick you just added) and run again"
                );
            }
            let last = i + 1 == n;
            rows.push(StepRow {
                step,
                epoch,
                loss,
                lr,
                bn_scale: if last { scale.clone() } else { Vec::new() },
                bn_bias: if last { bias.clone() } else { Vec::new() },
                loader_s,
            });
        }
        Ok(rows)
    }
}
