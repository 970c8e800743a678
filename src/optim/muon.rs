//! Muon as airbench94_muon runs it (`Muon.step`, `zeropower_via_newtonschulz5`)
//! and as hiverge's speedrun runs it (cifar10_speedrun.py:24-229): momentum,
//! Nesterov, the filters rescaled to Frobenius norm √C_out, then
//! w −= lr·NS(g'), then (speedrun) decoupled decay.

use tch::{Kind, Tensor};

use super::{Group, Optimizer, State, grad_of, zero_grads};

/// Quintic Newton–Schulz coefficients tuned to push every singular value
/// into roughly [0.7, 1.2] in a few steps (not exactly to 1).
pub const NS_AIRBENCH: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
/// hiverge's retuned coefficients (TRICKS.md 2.4).
pub const NS_SPEEDRUN: (f64, f64, f64) = (3.4576, -4.7391, 2.0843);

/// hiverge scales X to this magnitude, going linearly from the first to the
/// second over training, before dividing it by its own norm.
const SPEEDRUN_MAGNITUDE: (f64, f64) = (0.5012, 0.0786);

/// airbench94_muon's Newton–Schulz, or hiverge's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsVariant {
    /// (3.4445, −4.7750, 2.0315); X /= ‖X‖ + 1e-7.
    Airbench,
    /// (3.4576, −4.7391, 2.0843); X scaled to a magnitude going linearly
    /// from 0.5012 to 0.0786 over training, then divided by its own norm
    /// (each with eps 1e-5): the magnitude cancels but for the eps, and the
    /// update is lr·NS(g), unscaled (cifar10_speedrun.py:36-68).
    Speedrun,
}

impl NsVariant {
    pub fn coeffs(self) -> (f64, f64, f64) {
        match self {
            NsVariant::Airbench => NS_AIRBENCH,
            NsVariant::Speedrun => NS_SPEEDRUN,
        }
    }
}

/// The type Newton–Schulz iterates in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsDtype {
    /// bf16 whatever the filters are (airbench94_muon).
    Bf16,
    /// The gradients' own type: fp16 in an fp16 net (hiverge's speedrun).
    Filters,
}

impl NsDtype {
    fn kind(self, of: &Tensor) -> Kind {
        match self {
            NsDtype::Bf16 => Kind::BFloat16,
            NsDtype::Filters => of.kind(),
        }
    }
}

/// When the filters are rescaled to √C_out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Renorm {
    /// Before every update (airbench94_muon).
    EveryStep,
    /// hiverge: at 1-based step t when t − (the last rescaled step) ≥
    /// base + int(growth·t/T), the last starting at 0: first at step 2,
    /// then at intervals growing from 2 to 17 (37 times in 243 steps).
    Growing { base: u64, growth: f64 },
}

impl Renorm {
    /// Whether 1-based step `t` of `total` rescales, given the last that did.
    pub fn due(self, t: u64, last: u64, total: u64) -> bool {
        match self {
            Renorm::EveryStep => true,
            Renorm::Growing { base, growth } => {
                let every = base + (growth * t as f64 / total.max(1) as f64) as u64;
                t - last >= every
            }
        }
    }
}

/// Approximate orthogonalisation of a matrix (R, C) or a batch of them
/// (B, R, C), each normalised on its own, iterating in `kind`; returned in
/// `kind`. `progress` ∈ (0, 1] is hiverge's step/total.
pub fn newton_schulz(g: &Tensor, steps: i64, ns: NsVariant, kind: Kind, progress: f64) -> Tensor {
    let dims = g.dim();
    assert!(
        dims == 2 || dims == 3,
        "newton_schulz takes a matrix or a batch of them, got shape {:?}",
        g.size()
    );
    let (r, c) = (dims as i64 - 2, dims as i64 - 1);
    let norm = |x: &Tensor| x.norm_scalaropt_dim(2, [r, c], true);
    let mut x = g.to_kind(kind);
    x = match ns {
        NsVariant::Airbench => &x / (norm(&x) + 1e-7),
        NsVariant::Speedrun => {
            let (start, end) = SPEEDRUN_MAGNITUDE;
            let magnitude = start * (1.0 - progress) + end * progress;
            let x = &x * (magnitude / (norm(&x) + 1e-5));
            &x / (norm(&x) + 1e-5)
        }
    };
    // X(XᵀX)ᵏ = (XXᵀ)ᵏX: iterate on the smaller Gram matrix.
    let transposed = x.size()[r as usize] > x.size()[c as usize];
    if transposed {
        x = x.transpose(r, c);
    }
    let (a, b, cc) = ns.coeffs();
    for _ in 0..steps {
        let gram = x.matmul(&x.transpose(r, c));
        // The order of the scaling decides the rounding, which three steps
        // in bf16 grow to ~1e-2: airbench writes `c * A @ A`, i.e. (cA)A;
        // hiverge `c * (A @ A)`.
        let cubic = match ns {
            NsVariant::Airbench => (&gram * cc).matmul(&gram),
            NsVariant::Speedrun => gram.matmul(&gram) * cc,
        };
        let poly = &gram * b + cubic;
        x = &x * a + poly.matmul(&x);
    }
    if transposed {
        x = x.transpose(r, c);
    }
    x
}

/// airbench94_muon's `zeropower_via_newtonschulz5(G, steps)`: bf16, its coefficients.
pub fn newton_schulz5(g: &Tensor, steps: i64) -> Tensor {
    newton_schulz(g, steps, NsVariant::Airbench, Kind::BFloat16, 1.0).to_kind(g.kind())
}

/// How Muon steps; [`MuonOptions::airbench`] is airbench94_muon's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MuonOptions {
    pub momentum: f64,
    pub nesterov: bool,
    pub ns_steps: i64,
    pub ns: NsVariant,
    pub ns_dtype: NsDtype,
    /// Every filter zero-padded into one (n, max C_out, max C_in·k·k rounded
    /// up to 16) tensor and orthogonalised by one batched Newton–Schulz.
    pub batched: bool,
    /// Momentum buffers kept in fp16.
    pub half_momentum: bool,
    pub renorm: Renorm,
    /// Decoupled: w ×= 1 − lr·wd after the update.
    pub weight_decay: f64,
    /// The run's steps: the renormalisation interval and hiverge's
    /// magnitude read the step as a fraction of it.
    pub total_steps: u64,
}

impl MuonOptions {
    pub fn airbench(momentum: f64, ns_steps: i64, total_steps: u64) -> MuonOptions {
        MuonOptions {
            momentum,
            nesterov: true,
            ns_steps,
            ns: NsVariant::Airbench,
            ns_dtype: NsDtype::Bf16,
            batched: false,
            half_momentum: false,
            renorm: Renorm::EveryStep,
            weight_decay: 0.0,
            total_steps,
        }
    }
}

/// Muon for conv filters: buf = μ·buf + g; g' = g + μ·buf (Nesterov) or
/// buf; when due, w ← w·√C_out/‖w‖; w −= lr·NS(g' as C_out × rest); then
/// w ×= 1 − lr·wd.
pub struct Muon {
    groups: Vec<Group>,
    bufs: State,
    o: MuonOptions,
    /// 1-based count of steps taken, and the last that rescaled.
    steps: u64,
    last_renorm: u64,
    /// The loss scale the momentum buffers' history is in.
    scale: f64,
}

impl Muon {
    pub fn new(groups: Vec<Group>, o: MuonOptions) -> Muon {
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
            last_renorm: 0,
            scale: 1.0,
        }
    }

    /// The 1-based steps at which the filters were rescaled, for a run of
    /// `total` steps (what `step` does, without tensors).
    pub fn renorm_steps(renorm: Renorm, total: u64) -> Vec<u64> {
        let mut last = 0;
        (1..=total)
            .filter(|&t| {
                let due = renorm.due(t, last, total);
                if due {
                    last = t;
                }
                due
            })
            .collect()
    }
}

/// NS(g') of every filter's corrected gradient `g`, shaped like it: one call
/// per filter, or with `o.batched` one call over all of them zero-padded to
/// the largest. `progress` ∈ (0, 1] is the step over the run's total.
pub fn orthogonalise(grads: &[Tensor], o: &MuonOptions, progress: f64) -> Vec<Tensor> {
    let (steps, ns) = (o.ns_steps, o.ns);
    let mats: Vec<Tensor> = grads.iter().map(|g| g.reshape([g.size()[0], -1])).collect();
    let out: Vec<Tensor> = if !o.batched || mats.len() < 2 {
        mats.iter()
            .map(|m| newton_schulz(m, steps, ns, o.ns_dtype.kind(m), progress))
            .collect()
    } else {
        let rows = mats.iter().map(|m| m.size()[0]).max().unwrap_or(0);
        let cols = mats.iter().map(|m| m.size()[1]).max().unwrap_or(0);
        // hiverge rounds the width up to a multiple of 16 (tensor cores).
        let cols = (cols + 15) / 16 * 16;
        let padded: Vec<Tensor> = mats
            .iter()
            .map(|m| {
                let (r, c) = (m.size()[0], m.size()[1]);
                m.constant_pad_nd([0, cols - c, 0, rows - r])
            })
            .collect();
        let batch = Tensor::stack(&padded, 0);
        let x = newton_schulz(&batch, steps, ns, o.ns_dtype.kind(&batch), progress);
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
        .zip(grads)
        .map(|(u, g)| u.reshape(g.size()))
        .collect()
}

impl Optimizer for Muon {
    fn step(&mut self, lr: f64) {
        self.steps += 1;
        let (t, total) = (self.steps, self.o.total_steps.max(1));
        let renorm = self.o.renorm.due(t, self.last_renorm, total);
        if renorm {
            self.last_renorm = t;
        }
        let progress = t as f64 / total as f64;
        let mu = self.o.momentum;
        tch::no_grad(|| {
            // (weight, its momentum-corrected gradient) of every filter with a gradient.
            let mut todo: Vec<(Tensor, Tensor)> = Vec::new();
            for (gi, group) in self.groups.iter().enumerate() {
                for (pi, w) in group.params.iter().enumerate() {
                    let Some(g) = grad_of(w) else { continue };
                    let buf = self.bufs.get_mut(gi, pi);
                    let _ = buf.g_mul_scalar_(mu).g_add_(&g.to_kind(buf.kind()));
                    let g = if self.o.nesterov {
                        &g + buf.to_kind(g.kind()) * mu
                    } else {
                        buf.to_kind(g.kind())
                    };
                    todo.push((w.shallow_clone(), g));
                }
            }
            let grads: Vec<Tensor> = todo.iter().map(|(_, g)| g.shallow_clone()).collect();
            let updates = orthogonalise(&grads, &self.o, progress);
            let shrink = 1.0 - lr * self.o.weight_decay;
            for ((w, _), update) in todo.iter().zip(updates) {
                let mut w = w.shallow_clone();
                if renorm {
                    let rows = (w.size()[0] as f64).sqrt();
                    // airbench divides by the bare norm; hiverge adds 1e-7.
                    let eps = match self.o.renorm {
                        Renorm::EveryStep => 0.0,
                        Renorm::Growing { .. } => 1e-7,
                    };
                    let scale = (w.norm() + eps).reciprocal() * rows;
                    let _ = w.g_mul_(&scale.to_kind(w.kind()));
                }
                // add_(update, alpha=−lr): the product in fp32 at least (a
                // half filter's too), then into w; a float64 replay's in float64.
                let product = match w.kind() {
                    Kind::Double => Kind::Double,
                    _ => Kind::Float,
                };
                let _ = w.g_sub_(&(update.to_kind(product) * lr));
                if shrink != 1.0 {
                    let _ = w.g_mul_scalar_(shrink);
                }
            }
        });
    }

    /// Newton-Schulz normalises its input first, so the update is
    /// scale-free; but the buffer sums gradients of the loss as it was
    /// scaled, and a new scale rescales its history to the new gradients'.
    fn set_loss_scale(&mut self, scale: f64) {
        self.bufs.rescale(scale / self.scale);
        self.scale = scale;
    }

    fn zero_grad(&mut self, set_to_none: bool) {
        zero_grads(&self.groups, set_to_none);
    }
}
