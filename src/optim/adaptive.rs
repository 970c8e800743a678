//! Layer-wise adaptive and Adam-family optimisers: LARS, LAMB, AdamW.

use tch::Tensor;

use super::{Group, Optimizer, State, grad_of, zero_grads};

/// 1 where both norms are positive, else the ratio is replaced by 1
/// (a zero-initialised tensor or a zero gradient gets a plain step).
fn safe_ratio(num: &Tensor, den: &Tensor, ratio: Tensor) -> Tensor {
    let ok = num.gt(0.0).logical_and(&den.gt(0.0));
    ratio.where_self(&ok, &ratio.ones_like())
}

/// LARS (You et al. 2017) with heavy-ball momentum and coupled wd:
/// trust = η‖w‖/(‖g‖ + wd‖w‖); v = μ·v + lr·trust·(g + wd·w); w −= v.
/// With `adapt_1d = false`, 1-D tensors (BN biases, whitening bias) use trust 1.
pub struct Lars {
    groups: Vec<Group>,
    bufs: State,
    momentum: f64,
    wd: f64,
    trust_coef: f64,
    adapt_1d: bool,
    scale: f64,
}

impl Lars {
    pub fn new(
        groups: Vec<Group>,
        momentum: f64,
        wd: f64,
        trust_coef: f64,
        adapt_1d: bool,
    ) -> Lars {
        let bufs = State::zeros_like(&groups);
        Lars {
            groups,
            bufs,
            momentum,
            wd,
            trust_coef,
            adapt_1d,
            scale: 1.0,
        }
    }
}

impl Lars {
    fn set_scale(&mut self, scale: f64) {
        self.scale = scale;
    }
}

impl Optimizer for Lars {
    fn step(&mut self, lr: f64) {
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                // With g and wd both ×scale the trust ratio is ÷scale and the
                // adapted step unchanged; the plain (1-D) step takes lr/scale.
                let lr = lr * group.lr_mult;
                let wd = self.wd * group.wd_mult * self.scale;
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let d = if wd != 0.0 {
                        &g + w * wd
                    } else {
                        g.shallow_clone()
                    };
                    let scaled = if w.dim() > 1 || self.adapt_1d {
                        let (wn, gn) = (w.norm(), g.norm());
                        let ratio = &wn * self.trust_coef / (&gn + &wn * wd);
                        d * safe_ratio(&wn, &gn, ratio) * lr
                    } else {
                        d * (lr / self.scale)
                    };
                    let v = self.bufs.get_mut(gi, pi);
                    let _ = v.g_mul_scalar_(self.momentum).g_add_(&scaled);
                    let _ = w.shallow_clone().g_sub_(v);
                }
            }
        });
    }

    fn set_loss_scale(&mut self, scale: f64) {
        self.set_scale(scale);
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}

/// Shared Adam moments with bias correction.
struct Moments {
    m: State,
    v: State,
    t: i32,
    beta1: f64,
    beta2: f64,
    eps: f64,
    /// The loss scale `eps` is already multiplied by.
    scale: f64,
}

impl Moments {
    /// A new loss scale: eps follows it (m̂/(√v̂+eps) unchanged), and so do
    /// the moments' histories, m by the ratio and v by its square.
    fn set_scale(&mut self, scale: f64) {
        let r = scale / self.scale;
        self.eps *= r;
        self.m.rescale(r);
        self.v.rescale(r * r);
        self.scale = scale;
    }

    fn new(groups: &[Group], beta1: f64, beta2: f64, eps: f64) -> Moments {
        Moments {
            m: State::zeros_like(groups),
            v: State::zeros_like(groups),
            t: 0,
            beta1,
            beta2,
            eps,
            scale: 1.0,
        }
    }

    /// Updates the moments with `g` and returns m̂/(√v̂ + eps).
    fn direction(&mut self, gi: usize, pi: usize, g: &Tensor) -> Tensor {
        let (b1, b2) = (self.beta1, self.beta2);
        let m = self.m.get_mut(gi, pi);
        let _ = m.lerp_(g, 1.0 - b1);
        let m_hat = &*m / (1.0 - b1.powi(self.t));
        let v = self.v.get_mut(gi, pi);
        let _ = v.g_mul_scalar_(b2).g_add_(&(g * g * (1.0 - b2)));
        let v_hat = &*v / (1.0 - b2.powi(self.t));
        m_hat / (v_hat.sqrt() + self.eps)
    }
}

/// LAMB (You et al. 2019): u = m̂/(√v̂+eps) + wd·w; w −= lr·(‖w‖/‖u‖)·u.
pub struct Lamb {
    groups: Vec<Group>,
    moments: Moments,
    wd: f64,
}

impl Lamb {
    /// m and v grow by scale and scale²: eps·scale keeps m̂/(√v̂+eps).
    fn set_scale(&mut self, scale: f64) {
        self.moments.set_scale(scale);
    }

    pub fn new(groups: Vec<Group>, betas: (f64, f64), eps: f64, wd: f64) -> Lamb {
        let moments = Moments::new(&groups, betas.0, betas.1, eps);
        Lamb {
            groups,
            moments,
            wd,
        }
    }
}

impl Optimizer for Lamb {
    fn step(&mut self, lr: f64) {
        self.moments.t += 1;
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                let (lr, wd) = (lr * group.lr_mult, self.wd * group.wd_mult);
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let mut u = self.moments.direction(gi, pi, &g);
                    if wd != 0.0 {
                        u += w * wd;
                    }
                    let (wn, un) = (w.norm(), u.norm());
                    let trust = safe_ratio(&wn, &un, &wn / &un);
                    let _ = w.shallow_clone().g_sub_(&(u * trust * lr));
                }
            }
        });
    }

    fn set_loss_scale(&mut self, scale: f64) {
        self.set_scale(scale);
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}

/// AdamW (Loshchilov & Hutter): w ← w·(1 − lr·wd), then the Adam step
/// w −= lr·m̂/(√v̂+eps). The decay per step is lr·wd, as everywhere here.
pub struct AdamW {
    groups: Vec<Group>,
    moments: Moments,
    wd: f64,
}

impl AdamW {
    fn set_scale(&mut self, scale: f64) {
        self.moments.set_scale(scale);
    }

    pub fn new(groups: Vec<Group>, betas: (f64, f64), eps: f64, wd: f64) -> AdamW {
        let moments = Moments::new(&groups, betas.0, betas.1, eps);
        AdamW {
            groups,
            moments,
            wd,
        }
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, lr: f64) {
        self.moments.t += 1;
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                let (lr, wd) = (lr * group.lr_mult, self.wd * group.wd_mult);
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let mut wm = w.shallow_clone();
                    if wd != 0.0 {
                        let _ = wm.g_mul_scalar_(1.0 - lr * wd);
                    }
                    let dir = self.moments.direction(gi, pi, &g);
                    let _ = wm.g_sub_(&(dir * lr));
                }
            }
        });
    }

    fn set_loss_scale(&mut self, scale: f64) {
        self.set_scale(scale);
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}
