//! Parameter averaging: Page's eval-only EMA and airbench's Lookahead.

use tch::{Tensor, nn};

/// A detached copy of a list of tensors (weights and BN running statistics)
/// that tracks them as an exponential moving average.
pub struct Ema {
    avg: Vec<Tensor>,
}

impl Ema {
    pub fn new(live: &[Tensor]) -> Ema {
        let avg = tch::no_grad(|| live.iter().map(|t| t.detach().copy()).collect());
        Ema { avg }
    }

    /// avg ← decay·avg + (1 − decay)·live, for float tensors; other kinds
    /// (counters) are copied.
    pub fn update(&mut self, live: &[Tensor], decay: f64) {
        assert_eq!(
            live.len(),
            self.avg.len(),
            "EMA built over a different tensor list"
        );
        tch::no_grad(|| {
            for (a, l) in self.avg.iter_mut().zip(live) {
                if a.is_floating_point() {
                    let l = if l.kind() == a.kind() {
                        l.shallow_clone()
                    } else {
                        l.to_kind(a.kind())
                    };
                    let _ = a.lerp_(&l, 1.0 - decay);
                } else {
                    a.copy_(l);
                }
            }
        });
    }

    /// live ← avg (Lookahead's copy-back, or loading the EMA into an eval net).
    pub fn copy_into(&self, live: &[Tensor]) {
        tch::no_grad(|| {
            for (a, l) in self.avg.iter().zip(live) {
                l.shallow_clone().copy_(a);
            }
        });
    }

    pub fn tensors(&self) -> &[Tensor] {
        &self.avg
    }
}

/// Every variable of a VarStore (trainable or not, e.g. BN running stats),
/// sorted by name so two stores built the same way line up.
pub fn float_state(vs: &nn::VarStore) -> Vec<Tensor> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
        .into_iter()
        .filter(|(_, t)| t.is_floating_point())
        .map(|(_, t)| t)
        .collect()
}

/// Page B8: EMA momentum 0.99 applied every 5 steps → decay 0.99⁵ per update.
pub fn page_ema_decay(momentum: f64, every: usize) -> f64 {
    momentum.powi(every as i32)
}

/// airbench Lookahead decay at `step` of `total`: 0.95⁵·(step/total)³
/// (≈0 early, 0.774 at the end).
pub fn lookahead_decay(step: usize, total: usize) -> f64 {
    let frac = step as f64 / total.max(1) as f64;
    0.95f64.powi(5) * frac.powi(3)
}

/// Both averagers update every `every` steps (5 in Page and airbench).
pub fn is_update_step(step: usize, every: usize) -> bool {
    every > 0 && step.is_multiple_of(every)
}
