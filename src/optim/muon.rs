//! Muon (airbench94_muon): momentum, then a Newton–Schulz orthogonalised
//! step; with hiverge's speedrun options: one batched Newton–Schulz over all
//! filters, renormalisation every few steps to a scheduled magnitude, and
//! momentum buffers in fp16.

use tch::{Device, Kind, Tensor};

use super::{Group, Optimizer, State, grad_of, zero_grads};

/// Quintic Newton–Schulz coefficients tuned to push every singular value
/// into roughly [0.7, 1.2] in a few steps (not exactly to 1).
pub const NS_AIRBENCH: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
/// hiverge's retuned coefficients (TRICKS.md 2.4).
pub const NS_SPEEDRUN: (f64, f64, f64) = (3.4576, -4.7391, 2.0843);

/// The type Newton–Schulz iterates in: bf16 on CUDA, as the references do;
/// f32 elsewhere (a CPU has no fast bf16 matmul).
fn ns_kind(device: Device) -> Kind {
    match device {
        Device::Cuda(_) => Kind::BFloat16,
        _ => Kind::Float,
    }
}

/// Approximate orthogonalisation U·Vᵀ of a 2-D `g` (any kind; returned in
/// `g`'s kind) with airbench's coefficients.
pub fn newton_schulz5(g: &Tensor, steps: i64) -> Tensor {
    newton_schulz(g, steps, NS_AIRBENCH)
}

/// [`newton_schulz5`] with the given quintic coefficients (a, b, c).
pub fn newton_schulz(g: &Tensor, steps: i64, (a, b, c): (f64, f64, f64)) -> Tensor {
    let size = g.size();
    assert_eq!(
        size.len(),
        2,
        "newton_schulz takes a matrix, got shape {size:?}"
    );
    let mut x = g.to_kind(ns_kind(g.device()));
    x = &x / (x.norm() + 1e-7);
    // X(XᵀX)ᵏ = (XXᵀ)ᵏX: iterate on the smaller Gram matrix.
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

/// Newton–Schulz on a batch of matrices (B, R, C) at once, each normalised
/// by its own norm. Zero padding stays zero (XXᵀ keeps the block
/// structure), so a matrix padded into the batch gets its own result.
pub fn newton_schulz_batched(g: &Tensor, steps: i64, (a, b, c): (f64, f64, f64)) -> Tensor {
    let size = g.size();
    assert_eq!(size.len(), 3, "a batch of matrices, got shape {size:?}");
    let mut x = g.to_kind(ns_kind(g.device()));
    let norms = x
        .flatten(1, 2)
        .norm_scalaropt_dim(2, [1], false)
        .view([-1, 1, 1]);
    x = &x / (norms + 1e-7);
    let transposed = size[1] > size[2];
    if transposed {
        x = x.transpose(1, 2);
    }
    for _ in 0..steps {
        let gram = x.bmm(&x.transpose(1, 2));
        let poly = &gram * b + gram.bmm(&gram) * c;
        x = &x * a + poly.bmm(&x);
    }
    if transposed {
        x = x.transpose(1, 2);
    }
    x.to_kind(g.kind())
}

/// How Muon steps; [`MuonOptions::airbench`] is airbench94_muon's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MuonOptions {
    pub momentum: f64,
    pub nesterov: bool,
    pub ns_steps: i64,
    pub ns_coeffs: (f64, f64, f64),
    /// Every filter zero-padded into one (n, C_out, C_in·k·k) tensor and
    /// orthogonalised by one batched Newton–Schulz instead of one per filter.
    pub batched: bool,
    /// Momentum buffers kept in fp16.
    pub half_momentum: bool,
    /// Renormalise the filters every this many steps (1: every step).
    pub norm_every: u64,
    /// The step's magnitude scales the update (the filters renormalise to
    /// √C_out) instead of the filters' norm.
    pub scale_update: bool,
}

impl MuonOptions {
    pub fn airbench(momentum: f64, ns_steps: i64) -> MuonOptions {
        MuonOptions {
            momentum,
            nesterov: true,
            ns_steps,
            ns_coeffs: NS_AIRBENCH,
            batched: false,
            half_momentum: false,
            norm_every: 1,
            scale_update: false,
        }
    }
}

/// Muon for conv filters: buf = μ·buf + g; g' = g + μ·buf (Nesterov) or buf;
/// every `norm_every` steps w ← w·m·√C_out/‖w‖ (m the target magnitude, 1
/// in airbench); w −= lr·NS(g' as C_out × rest). With `scale_update` the
/// filters renormalise to √C_out and the update is m·lr·NS(g') instead. No weight decay: the
/// renormalisation fixes the weight norm instead.
pub struct Muon {
    groups: Vec<Group>,
    bufs: State,
    o: MuonOptions,
    steps: u64,
}

impl Muon {
    pub fn new(groups: Vec<Group>, momentum: f64, nesterov: bool, ns_steps: i64) -> Muon {
        Muon::with_options(
            groups,
            MuonOptions {
                nesterov,
                ..MuonOptions::airbench(momentum, ns_steps)
            },
        )
    }

    pub fn with_options(groups: Vec<Group>, o: MuonOptions) -> Muon {
        let mut bufs = State::zeros_like(&groups);
        if o.half_momentum {
            for g in bufs.0.iter_mut() {
                for b in g.iter_mut() {
                    *b = b.to_kind(Kind::Half);
                }
            }
        }
        Muon {
            groups,
            bufs,
            o,
            steps: 0,
        }
    }

    /// One step at `lr`, renormalising (when due) to `magnitude`·√C_out, or
    /// with `scale_update` to √C_out with the update scaled by `magnitude`.
    pub fn step_to(&mut self, lr: f64, magnitude: f64) {
        let renorm = self.steps.is_multiple_of(self.o.norm_every.max(1));
        self.steps += 1;
        tch::no_grad(|| {
            // (weight, its lr, its momentum-corrected gradient) of every filter with a gradient.
            let mut todo: Vec<(Tensor, f64, Tensor)> = Vec::new();
            for (gi, group) in self.groups.iter().enumerate() {
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let buf = self.bufs.get_mut(gi, pi);
                    let _ = buf
                        .g_mul_scalar_(self.o.momentum)
                        .g_add_(&g.to_kind(buf.kind()));
                    let b = buf.to_kind(g.kind());
                    let g = if self.o.nesterov {
                        g + b * self.o.momentum
                    } else {
                        b
                    };
                    todo.push((w.shallow_clone(), lr * group.lr_mult, g));
                }
            }
            let updates = self.orthogonalise(&todo);
            for ((w, lr, _), update) in todo.iter().zip(updates) {
                let mut wm = w.shallow_clone();
                let (norm_to, step) = if self.o.scale_update {
                    (1.0, *lr * magnitude)
                } else {
                    (magnitude, *lr)
                };
                if renorm {
                    let rows = w.size()[0] as f64;
                    let scale = (wm.norm() + 1e-12).reciprocal() * (norm_to * rows.sqrt());
                    let _ = wm.g_mul_(&scale.to_kind(wm.kind()));
                }
                let _ = wm.g_sub_(&(update * step));
            }
        });
    }

    /// NS(g') of every filter, shaped like it: one call per filter, or one
    /// batched call over all of them padded to the largest.
    fn orthogonalise(&self, todo: &[(Tensor, f64, Tensor)]) -> Vec<Tensor> {
        let (steps, coeffs) = (self.o.ns_steps, self.o.ns_coeffs);
        let mats: Vec<Tensor> = todo
            .iter()
            .map(|(w, _, g)| g.reshape([w.size()[0], -1]))
            .collect();
        let out: Vec<Tensor> = if !self.o.batched || mats.len() < 2 {
            mats.iter()
                .map(|m| newton_schulz(m, steps, coeffs))
                .collect()
        } else {
            let rows = mats.iter().map(|m| m.size()[0]).max().unwrap_or(0);
            let cols = mats.iter().map(|m| m.size()[1]).max().unwrap_or(0);
            let padded: Vec<Tensor> = mats
                .iter()
                .map(|m| {
                    let (r, c) = (m.size()[0], m.size()[1]);
                    m.constant_pad_nd([0, cols - c, 0, rows - r])
                })
                .collect();
            let x = newton_schulz_batched(&Tensor::stack(&padded, 0), steps, coeffs);
            mats.iter()
                .enumerate()
                .map(|(i, m)| {
                    x.get(i as i64)
                        .narrow(0, 0, m.size()[0])
                        .narrow(1, 0, m.size()[1])
                })
                .collect()
        };
        out.into_iter()
            .zip(todo)
            .map(|(u, (w, _, _))| u.reshape(w.size()))
            .collect()
    }
}

impl Optimizer for Muon {
    fn step(&mut self, lr: f64) {
        self.step_to(lr, 1.0);
    }

    /// Newton-Schulz normalises its input first: the update is scale-free.
    fn set_loss_scale(&mut self, _scale: f64) {}

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}
