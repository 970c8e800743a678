//! SGD in Page's lr-in-buffer form and in PyTorch's form, each as one
//! multi-tensor call per group, device and type (the native shim reaches
//! ATen's `_fused_sgd_` and `_foreach_*` kernels, which tch does not bind)
//! rather than a chain of small kernels per parameter.

use std::collections::BTreeMap;
use tch::Tensor;

use super::{Group, Optimizer, State, grad_of, zero_grads};
use crate::native::{self, TensorLists};

/// The (parameter, gradient, buffer) triples of a group's parameters that
/// have a gradient, split by device and type: one multi-tensor call each.
fn batches(group: &Group, bufs: &[Tensor]) -> Vec<[Vec<Tensor>; 3]> {
    let mut by: BTreeMap<String, [Vec<Tensor>; 3]> = BTreeMap::new();
    for (w, buf) in group.params.iter().zip(bufs) {
        let Some(g) = grad_of(w) else { continue };
        let key = format!("{:?}/{:?}", w.device(), w.kind());
        let b = by.entry(key).or_default();
        b[0].push(w.shallow_clone());
        b[1].push(g);
        b[2].push(buf.shallow_clone());
    }
    by.into_values().collect()
}

/// Page's Nesterov SGD (CF:tb `nesterov_update`): the momentum buffer stores
/// lr-scaled steps, dw = −lr·(g + wd·w); v = μ·v + dw; w += dw + μ·v.
pub struct SgdPage {
    groups: Vec<Group>,
    bufs: State,
    momentum: f64,
    wd: f64,
    scale: f64,
}

impl SgdPage {
    pub fn new(groups: Vec<Group>, momentum: f64, wd: f64) -> SgdPage {
        let bufs = State::zeros_like(&groups);
        SgdPage {
            groups,
            bufs,
            momentum,
            wd,
            scale: 1.0,
        }
    }

    /// Used by the tests to read a buffer back.
    pub fn momentum_buffer(&self, group: usize, index: usize) -> &Tensor {
        self.bufs.get(group, index)
    }
}

impl Optimizer for SgdPage {
    fn step(&mut self, lr: f64) {
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                // Page's units: lr/scale and wd·scale leave lr·wd unchanged.
                let lr = lr * group.lr_mult / self.scale;
                let wd = self.wd * group.wd_mult * self.scale;
                for [params, grads, bufs] in batches(group, &self.bufs.0[gi]) {
                    let lists = TensorLists {
                        params: &params,
                        grads: &grads,
                        bufs: &bufs,
                    };
                    native::page_sgd(&lists, wd, self.momentum, lr);
                }
            }
        });
    }

    /// Page's buffer holds lr-scaled steps in the mean loss's units
    /// (lr/scale · summed gradient): nothing to rescale.
    fn set_loss_scale(&mut self, scale: f64) {
        self.scale = scale;
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}

/// PyTorch's SGD: buf = μ·buf + (g + wd·w) (buf = g + wd·w on the first
/// step); step = g + wd·w + μ·buf (Nesterov) or buf; w −= lr·step. One fused
/// kernel per group, device and type, as `torch.optim.SGD(fused=True)`.
pub struct SgdTorch {
    groups: Vec<Group>,
    bufs: State,
    started: bool,
    momentum: f64,
    wd: f64,
    nesterov: bool,
    scale: f64,
}

impl SgdTorch {
    pub fn new(groups: Vec<Group>, momentum: f64, wd: f64, nesterov: bool) -> SgdTorch {
        let bufs = State::zeros_like(&groups);
        SgdTorch {
            groups,
            bufs,
            started: false,
            momentum,
            wd,
            nesterov,
            scale: 1.0,
        }
    }
}

impl Optimizer for SgdTorch {
    fn step(&mut self, lr: f64) {
        let (mu, first) = (self.momentum, !self.started);
        let nesterov = self.nesterov && mu > 0.0;
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                // Page's units: lr/scale and wd·scale leave lr·wd unchanged.
                let lr = lr * group.lr_mult / self.scale;
                let wd = self.wd * group.wd_mult * self.scale;
                for [params, grads, bufs] in batches(group, &self.bufs.0[gi]) {
                    let lists = TensorLists {
                        params: &params,
                        grads: &grads,
                        bufs: &bufs,
                    };
                    native::fused_sgd(&lists, wd, mu, lr, nesterov, first);
                }
            }
        });
        self.started = true;
    }

    /// The buffer holds summed-loss gradients (g + wd·w, both ×scale): a
    /// new scale rescales it, so its history stays in the mean loss's units.
    fn set_loss_scale(&mut self, scale: f64) {
        self.bufs.rescale(scale / self.scale);
        self.scale = scale;
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}
