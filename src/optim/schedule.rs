//! The learning-rate schedule: every optimiser step's multiplier, decided
//! before the first (`Schedule`), each `Shape` after its reference's own
//! step arithmetic; the shape a run's settings give (`base_shape`); and the
//! piecewise-linear knots some shapes interpolate (np.interp semantics).

use crate::config::{RunConfig, ScheduleKind};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Knots (x, value) with non-decreasing x; the value is interpolated
/// linearly between knots and held constant outside them. x is in whatever
/// unit the caller evaluates in (fractional epochs for Page, steps for
/// airbench); `in_units` converts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Piecewise {
    pub knots: Vec<(f64, f64)>,
}

impl Piecewise {
    pub fn new(knots: Vec<(f64, f64)>) -> Result<Piecewise> {
        if knots.is_empty() {
            bail!("an lr schedule needs at least one knot");
        }
        if knots.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
            bail!("lr schedule knots must be finite numbers, got {knots:?}");
        }
        if knots.windows(2).any(|w| w[1].0 < w[0].0) {
            bail!("lr schedule knot positions must not decrease, got {knots:?}");
        }
        Ok(Piecewise { knots })
    }

    pub fn at(&self, x: f64) -> f64 {
        let k = &self.knots;
        let Some(&(x0, y0)) = k.first() else {
            return 0.0;
        };
        if x <= x0 {
            return y0;
        }
        for w in k.windows(2) {
            let ((xa, ya), (xb, yb)) = (w[0], w[1]);
            if x <= xb {
                if xb == xa {
                    return yb;
                }
                return ya + (yb - ya) * (x - xa) / (xb - xa);
            }
        }
        k[k.len() - 1].1
    }

    /// Page B8: the schedule ends `last` units early at `floor` and stays
    /// there, e.g. triangle(2, 10, 1.0) → [0, 2, 8, 10] → [0, 1, 0.1, 0.1].
    pub fn with_floor(mut self, last: f64, floor: f64) -> Piecewise {
        if let Some(&(end, _)) = self.knots.last() {
            let cut = end - last;
            self.knots.retain(|&(x, _)| x < cut);
            self.knots.push((cut, floor));
            self.knots.push((end, floor));
        }
        self
    }
}

/// The lr multiplier of every optimiser step, decided before the first one.
/// Each shape follows its reference's own step arithmetic, so step s gets
/// the reference's value (tests/golden pins them).
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub shape: Shape,
    /// A linear ramp over the first this-many epochs, on top.
    pub warmup_epochs: Option<f64>,
    /// The ramp's multiplier at step 0 (Goyal et al.: 1/k, from η to kη).
    pub warmup_start: f64,
    /// (epochs, value): the last epochs held at `value`, the shape run to its
    /// end before them (Page's EMA floor on a shape that is not Page's own).
    pub floor: Option<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// np.interp over fractional epochs, read after counting the step as
    /// Page's `opt_step` does: his first step already has a non-zero lr.
    EpochKnots(Piecewise),
    /// airbench94's LambdaLR: `start` → 1 over the first int(peak·T) steps,
    /// then linearly to `end` at step T.
    Airbench {
        start: f64,
        peak: f64,
        end: f64,
    },
    /// hlb's OneCycleLR, linear, div_factor 1e16: from ~0 to 1 at step
    /// peak·T − 1, then to `end` at step T − 1.
    OneCycle {
        peak: f64,
        end: f64,
    },
    /// FFCV's cyclic: np.interp at the step's fractional epoch s/per_epoch
    /// (its `lrs = np.interp(arange(iters), [0, iters], [lr(e), lr(e+1)])`
    /// between the knots' per-epoch values): no Page-style post-increment.
    StepKnots(Piecewise),
    /// Step decay: × `factor` at each epoch of `at` (0-based, counted at
    /// epoch boundaries as torch's MultiStepLR stepped once an epoch): Goyal
    /// et al.'s ÷10 at 30, 60 and 80.
    Steps {
        at: Vec<f64>,
        factor: f64,
    },
    /// fast.ai's phases: the phase in force is the last one starting at or
    /// before the step's epoch; a ramp runs linearly from `start` to `end`
    /// across its epochs, read after the step (its `Scheduler.update_lr`
    /// counts batches from 1), a flat phase holds `start`.
    Phases(Vec<LrPhase>),
    /// Fujitsu's (MXNet, its MLPerf v0.6 ResNet-50): a linear warm-up from
    /// 0 over `warmup` epochs, then TensorFlow's `polynomial_decay` over
    /// `decay` epochs, (1 − end)·(1 − p)^power + end, held at `end` after.
    /// The warm-up reads the update count (step + 1: MXNet's `num_update`),
    /// the decay the iteration before it (the explorer's `current_iter`).
    Poly {
        warmup: f64,
        decay: f64,
        power: f64,
        end: f64,
    },
    /// airbench94_muon and the speedrun: 1 − s/T.
    LinearToZero,
    Constant,
}

impl Shape {
    /// The multiplier of step `s` where epochs have different lengths: the
    /// step starts at fractional epoch `before` and ends at `after`.
    fn at_position(&self, s: u64, total: u64, (before, after): (f64, f64)) -> f64 {
        match self {
            Shape::EpochKnots(k) => k.at(after),
            Shape::StepKnots(k) => k.at(before),
            Shape::Steps { at, factor } => {
                let passed = at.iter().filter(|&&e| e > 0.0 && before.floor() >= e);
                factor.powi(passed.count() as i32)
            }
            Shape::Phases(phases) => {
                let epoch = before.floor();
                match phases.iter().rev().find(|p| p.from <= epoch) {
                    // Held at its end past its last epoch (only a shrunk
                    // schedule's ramp ends inside an epoch).
                    Some(p) if p.to > p.from => {
                        let x = ((after - p.from) / (p.to - p.from)).min(1.0);
                        p.start + (p.end - p.start) * x
                    }
                    Some(p) => p.start,
                    None => phases.first().map_or(1.0, |p| p.start),
                }
            }
            Shape::Poly {
                warmup,
                decay,
                power,
                end,
            } => {
                // `after` is (step + 1) epochs-worth, `before` the step's own.
                let warm = if *warmup > 0.0 && after < *warmup {
                    after / warmup
                } else {
                    1.0
                };
                let p = ((before - warmup).max(0.0) / decay.max(f64::MIN_POSITIVE)).min(1.0);
                warm * ((1.0 - end) * (1.0 - p).powf(*power) + end)
            }
            // The step-counted shapes do not read the epochs.
            _ => self.at(s, total, 1),
        }
    }

    /// The multiplier of 0-based step `s` of `total`.
    fn at(&self, s: u64, total: u64, per_epoch: u64) -> f64 {
        let (s, t) = (s as f64, total.max(1) as f64);
        match self {
            Shape::EpochKnots(k) => k.at((s + 1.0) / per_epoch.max(1) as f64),
            Shape::StepKnots(k) => k.at(s / per_epoch.max(1) as f64),
            Shape::Phases(_) | Shape::Poly { .. } => {
                let e = s / per_epoch.max(1) as f64;
                self.at_position(s as u64, total, (e, (s + 1.0) / per_epoch.max(1) as f64))
            }
            Shape::Steps { at, factor } => {
                let epoch = (s / per_epoch.max(1) as f64).floor();
                let passed = at.iter().filter(|&&e| e > 0.0 && epoch >= e).count();
                factor.powi(passed as i32)
            }
            Shape::Airbench { start, peak, end } => {
                let warm = (t * peak).floor();
                if s < warm {
                    let f = s / warm;
                    start * (1.0 - f) + f
                } else {
                    let f = (s - warm) / (t - warm);
                    (1.0 - f) + end * f
                }
            }
            Shape::OneCycle { peak, end } => {
                // torch's initial lr is max_lr / div_factor.
                const START: f64 = 1e-16;
                let up = peak * t - 1.0;
                if s <= up {
                    START + (1.0 - START) * s / up
                } else {
                    1.0 + (end - 1.0) * (s - up) / (t - 1.0 - up)
                }
            }
            Shape::LinearToZero => 1.0 - s / t,
            Shape::Constant => 1.0,
        }
    }
}

impl Schedule {
    /// Every step's multiplier when epochs have different lengths
    /// (`epoch_steps`: the steps of each epoch; a batch that changes by
    /// phase): each shape reads the step's place in fractional epochs.
    pub fn multipliers_by_epoch(&self, epoch_steps: &[u64], total: u64) -> Vec<f64> {
        let mut out = Vec::with_capacity(total as usize);
        for (e, &n) in epoch_steps.iter().enumerate() {
            for i in 0..n {
                let s = out.len() as u64;
                if s >= total {
                    return out;
                }
                let n = n.max(1) as f64;
                let (before, after) = (e as f64 + i as f64 / n, e as f64 + (i + 1) as f64 / n);
                let m = self.shape.at_position(s, total, (before, after));
                out.push(match self.warmup_epochs {
                    Some(w) if w > 0.0 && before < w => {
                        m * (self.warmup_start + (1.0 - self.warmup_start) * before / w)
                    }
                    _ => m,
                });
            }
        }
        out
    }

    /// Every step's multiplier for a run of `total` steps, `per_epoch` an epoch.
    pub fn multipliers(&self, total: u64, per_epoch: u64) -> Vec<f64> {
        let floor_steps = self.floor.map_or(0, |(e, _)| {
            ((e * per_epoch as f64).round().max(0.0) as u64).min(total)
        });
        let body = total - floor_steps;
        (0..total)
            .map(|s| {
                let m = match self.floor {
                    Some((_, value)) if s >= body => value,
                    _ => self.shape.at(s, body, per_epoch),
                };
                match self.warmup_epochs {
                    Some(w) if w > 0.0 => {
                        let epoch = s as f64 / per_epoch.max(1) as f64;
                        let start = self.warmup_start;
                        if epoch < w {
                            m * (start + (1.0 - start) * epoch / w)
                        } else {
                            m
                        }
                    }
                    _ => m,
                }
            })
            .collect()
    }
}

/// One phase of fast.ai's lr schedule, in multiples of the run's lr.
#[derive(Clone, Debug, PartialEq)]
pub struct LrPhase {
    pub from: f64,
    /// The ramp's last epoch (exclusive); equal to `from` for a flat phase.
    pub to: f64,
    pub start: f64,
    pub end: f64,
}

/// FFCV's cyclic schedule starts at this fraction of the peak (`1e-4 * lr`).
pub const CYCLIC_START: f64 = 1e-4;

/// Page's DAWNBench schedule ends on this lr (mean-loss units) at epoch 30 of 35.
pub const DAWN_TAIL_LR: f64 = 0.005;

/// The schedule's shape from the settings alone.
pub fn base_shape(s: &RunConfig) -> Shape {
    let e = s.epochs;
    let p = s.peak_epoch * e;
    let knots = |k: Vec<(f64, f64)>| {
        Shape::EpochKnots(Piecewise::new(k).unwrap_or_else(|_| Piecewise {
            knots: vec![(0.0, 1.0)],
        }))
    };
    match s.schedule {
        ScheduleKind::Page => knots(vec![(0.0, 0.0), (p, 1.0), (e, s.final_lr_frac)]),
        // Page parts 1-3: the knot at epoch 30 of 35 is an absolute lr (0.005 at
        // both bs 128 / lr 0.1 and bs 512 / lr 0.44), not a fraction of the peak.
        ScheduleKind::Dawn => knots(vec![
            (0.0, 0.0),
            (p, 1.0),
            (e * 30.0 / 35.0, (DAWN_TAIL_LR / s.lr).min(1.0)),
            (e, 0.0),
        ]),
        ScheduleKind::Airbench => Shape::Airbench {
            start: 0.2,
            peak: s.peak_epoch,
            end: s.final_lr_frac,
        },
        ScheduleKind::Onecycle => Shape::OneCycle {
            peak: s.peak_epoch,
            end: s.final_lr_frac,
        },
        // FFCV's get_cyclic_lr: [0, lr_peak_epoch, epochs] -> [1e-4, 1, 0] × lr.
        ScheduleKind::Cyclic => Shape::StepKnots(
            Piecewise::new(vec![(0.0, CYCLIC_START), (p, 1.0), (e, s.final_lr_frac)])
                .unwrap_or_else(|_| Piecewise {
                    knots: vec![(0.0, 1.0)],
                }),
        ),
        ScheduleKind::Linear => Shape::LinearToZero,
        ScheduleKind::Constant => Shape::Constant,
    }
}
