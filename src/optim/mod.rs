//! Optimisers, schedules and parameter averaging.
//!
//! Convention (TRICKS interaction 7): every optimiser takes the **mean-loss**
//! learning rate and a coupled weight decay `wd` such that the per-step decay
//! of a weight is lr·wd (AdamW applies it decoupled with the same product).
//! `convert` turns each reference's own units into this one.

mod adaptive;
mod averaging;
mod clip;
mod convert;
mod ema;
mod loss;
mod muon;
mod schedule;
mod sgd;
mod tta;

#[cfg(test)]
pub(crate) mod tests;

pub use adaptive::{AdamW, Lamb, Lars};
pub use averaging::{Averaging, AvgAction, AvgStart};
pub use clip::clip_grad_norm;
pub use convert::{bias_group_mults, from_airbench, from_hlb, from_page};
pub use ema::{Ema, float_state, is_update_step, lookahead_decay, page_ema_decay};
pub use loss::{label_smoothed_ce, smooth_targets, soft_target_ce};
pub use muon::{
    Muon, MuonOptions, NS_AIRBENCH, NS_SPEEDRUN, NsDtype, NsVariant, Renorm, newton_schulz,
    newton_schulz5, orthogonalise,
};
pub use schedule::{CYCLIC_START, DAWN_TAIL_LR, LrPhase, Piecewise, Schedule, Shape, base_shape};
pub use sgd::{SgdPage, SgdTorch};
pub use tta::{
    equal_views, least_confident, selective_tta, tta_from_plain, tta_logits, tta_passes,
};

use tch::Tensor;

/// Parameters sharing one lr/wd multiplier pair.
pub struct Group {
    pub params: Vec<Tensor>,
    pub lr_mult: f64,
    pub wd_mult: f64,
}

impl Group {
    pub fn new(params: Vec<Tensor>) -> Group {
        Group {
            params,
            lr_mult: 1.0,
            wd_mult: 1.0,
        }
    }

    pub fn with_mults(params: Vec<Tensor>, lr_mult: f64, wd_mult: f64) -> Group {
        Group {
            params,
            lr_mult,
            wd_mult,
        }
    }
}

pub trait Optimizer {
    /// One in-place update at mean-loss learning rate `lr` (times each group's
    /// `lr_mult`). Never reads a value back to the host.
    fn step(&mut self, lr: f64);
    /// The gradients arrive multiplied by `scale` (the loss summed over the
    /// batch, as Page, airbench and hlb do, which keeps fp16 gradients above
    /// fp16's smallest normal): steps stay those of the mean loss, with the
    /// scale folded into the units (Page's lr/bs and wd·bs) rather than divided
    /// out of the gradients, where it would underflow again.
    fn set_loss_scale(&mut self, scale: f64);
    /// Drops the gradients (`set_to_none`, as the references do) or zeroes
    /// them; `step` skips parameters without one, as PyTorch's optimisers do.
    fn zero_grad(&mut self, set_to_none: bool);
}

/// The gradient to use, or `None` for frozen or untouched parameters.
fn grad_of(w: &Tensor) -> Option<Tensor> {
    if !w.requires_grad() {
        return None;
    }
    let g = w.grad();
    g.defined().then_some(g)
}

/// PyTorch's `zero_grad`: the gradients dropped (`set_to_none`, no kernel)
/// or filled with zeros.
fn zero_grads(groups: &[Group], set_to_none: bool) {
    for g in groups {
        if set_to_none {
            crate::native::grads_to_none(&g.params);
        } else {
            // In place, as torch.optim's zero_grad(set_to_none=False): a
            // gradient without a history is only zero-filled, not detached
            // (tch's zero_grad detaches, which DDP's bucket views refuse).
            tch::no_grad(|| {
                for p in &g.params {
                    let mut grad = p.grad();
                    if grad.defined() {
                        let _ = grad.zero_();
                    }
                }
            });
        }
    }
}

/// One zero-initialised state tensor per parameter, same kind and device.
struct State(Vec<Vec<Tensor>>);

impl State {
    /// Multiplies every state tensor by `by` in place: a history kept in the
    /// summed loss's units follows the loss scale when the batch changes
    /// (fast.ai's phases), so it stays what PyTorch's mean-loss optimiser
    /// keeps.
    fn rescale(&mut self, by: f64) {
        if by == 1.0 {
            return;
        }
        tch::no_grad(|| {
            for t in self.0.iter_mut().flatten() {
                let _ = t.g_mul_scalar_(by);
            }
        });
    }
}

impl State {
    fn zeros_like(groups: &[Group]) -> State {
        State(
            groups
                .iter()
                .map(|g| g.params.iter().map(|p| p.zeros_like().detach()).collect())
                .collect(),
        )
    }

    fn get(&self, g: usize, p: usize) -> &Tensor {
        &self.0[g][p]
    }

    fn get_mut(&mut self, g: usize, p: usize) -> &mut Tensor {
        &mut self.0[g][p]
    }
}
