//! Muon (airbench94_muon): momentum, then a Newton–Schulz orthogonalised step.

use tch::{Device, Kind, Tensor};

use super::{Group, Optimizer, State, grad_of, zero_grads};

/// Quintic Newton–Schulz coefficients tuned to push every singular value
/// into roughly [0.7, 1.2] in a few steps (not exactly to 1).
const NS_COEFFS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);

/// Approximate orthogonalisation U·Vᵀ of a 2-D `g` (any kind; returned in
/// `g`'s kind). Runs in bf16 on CUDA and f32 elsewhere, as the reference does.
pub fn newton_schulz5(g: &Tensor, steps: i64) -> Tensor {
    let size = g.size();
    assert_eq!(
        size.len(),
        2,
        "newton_schulz5 takes a matrix, got shape {size:?}"
    );
    let (a, b, c) = NS_COEFFS;
    let work = match g.device() {
        Device::Cuda(_) => Kind::BFloat16,
        _ => Kind::Float,
    };
    let mut x = g.to_kind(work);
    x = &x / (x.norm() + 1e-7);
    let transposed = size[0] > size[1];
    if transposed {
        x = x.tr();
    }
    for _ in 0..steps {
        let gram = x.matmul(&x.tr());
        let poly = &gram * b + gram.matmul(&gram) * c;
        x = &x * a + poly.matmul(&x);
    }
    if transposed {
        x = x.tr();
    }
    x.to_kind(g.kind())
}

/// Muon for conv filters: buf = μ·buf + g; g' = g + μ·buf (Nesterov) or buf;
/// w ← w·√C_out/‖w‖; w −= lr·NS(g' as C_out × rest). No weight decay: the
/// renormalisation fixes the weight norm instead.
pub struct Muon {
    groups: Vec<Group>,
    bufs: State,
    momentum: f64,
    nesterov: bool,
    ns_steps: i64,
}

impl Muon {
    pub fn new(groups: Vec<Group>, momentum: f64, nesterov: bool, ns_steps: i64) -> Muon {
        let bufs = State::zeros_like(&groups);
        Muon {
            groups,
            bufs,
            momentum,
            nesterov,
            ns_steps,
        }
    }
}

impl Optimizer for Muon {
    fn step(&mut self, lr: f64) {
        tch::no_grad(|| {
            for (gi, group) in self.groups.iter().enumerate() {
                let lr = lr * group.lr_mult;
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let buf = self.bufs.get_mut(gi, pi);
                    let _ = buf.g_mul_scalar_(self.momentum).g_add_(&g);
                    let g = if self.nesterov {
                        g + &*buf * self.momentum
                    } else {
                        buf.shallow_clone()
                    };
                    let shape = w.size();
                    let rows = shape[0];
                    let mut wm = w.shallow_clone();
                    let scale = (wm.norm() + 1e-12).reciprocal() * (rows as f64).sqrt();
                    let _ = wm.g_mul_(&scale.to_kind(wm.kind()));
                    let update = newton_schulz5(&g.reshape([rows, -1]), self.ns_steps)
                        .view(shape.as_slice());
                    let _ = wm.g_sub_(&(update * lr));
                }
            }
        });
    }

    /// Newton-Schulz normalises its input first: the update is scale-free.
    fn set_loss_scale(&mut self, _scale: f64) {}

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}
