//! SGD in Page's lr-in-buffer form and in PyTorch's form.

use tch::Tensor;

use super::{Group, Optimizer, State, zero_grads};

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
}

impl Optimizer for SgdPage {
    fn step(&mut self, lr: f64) {
        let mu = self.momentum;
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                // Page's units: lr/scale and wd·scale leave lr·wd unchanged.
                let lr = lr * group.lr_mult / self.scale;
                let wd = self.wd * group.wd_mult * self.scale;
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = super::grad_of(w) else { continue };
                    let dw = if wd != 0.0 {
                        (g + w * wd) * (-lr)
                    } else {
                        g * (-lr)
                    };
                    let v = &mut self.bufs.get_mut(gi, pi);
                    let _ = v.g_mul_scalar_(mu).g_add_(&dw);
                    let mut w = w.shallow_clone();
                    let _ = w.g_add_(&(dw + &**v * mu));
                }
            }
        });
    }

    fn set_loss_scale(&mut self, scale: f64) {
        self.scale = scale;
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}

/// PyTorch's SGD: buf = μ·buf + (g + wd·w) (buf = g on the first step);
/// step = g + μ·buf (Nesterov) or buf; w −= lr·step.
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
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                // Page's units: lr/scale and wd·scale leave lr·wd unchanged.
                let lr = lr * group.lr_mult / self.scale;
                let wd = self.wd * group.wd_mult * self.scale;
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = super::grad_of(w) else { continue };
                    let d = if wd != 0.0 { g + w * wd } else { g };
                    let step = if mu == 0.0 {
                        d
                    } else {
                        let buf = self.bufs.get_mut(gi, pi);
                        if first {
                            buf.copy_(&d);
                        } else {
                            let _ = buf.g_mul_scalar_(mu).g_add_(&d);
                        }
                        if self.nesterov {
                            d + &*buf * mu
                        } else {
                            buf.shallow_clone()
                        }
                    };
                    let mut w = w.shallow_clone();
                    let _ = w.g_add_(&(step * (-lr)));
                }
            }
        });
        self.started = true;
    }

    fn set_loss_scale(&mut self, scale: f64) {
        self.scale = scale;
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}

/// Used by the tests and by callers that need to read a buffer back.
impl SgdPage {
    pub fn momentum_buffer(&self, group: usize, index: usize) -> &Tensor {
        self.bufs.get(group, index)
    }
}
