//! Piecewise-linear learning-rate schedules (np.interp semantics).

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

    /// Page's triangle: 0 → `peak` at `peak_epoch` → 0 at `epochs`.
    pub fn page_triangle(peak_epoch: f64, epochs: f64, peak: f64) -> Piecewise {
        Piecewise {
            knots: vec![(0.0, 0.0), (peak_epoch, peak), (epochs, 0.0)],
        }
    }

    /// airbench94's multiplier, in steps: 0.2 → 1 linearly over the first
    /// int(0.23·total) steps, then 1 → 0.07 at `total_steps`.
    pub fn airbench_warmup(total_steps: usize) -> Piecewise {
        Piecewise::warmup_decay(total_steps, 0.23, 0.2, 0.07)
    }

    /// Generic start → 1 over int(frac·total) steps, then 1 → end.
    pub fn warmup_decay(total_steps: usize, warmup_frac: f64, start: f64, end: f64) -> Piecewise {
        let total = total_steps as f64;
        let warm = (warmup_frac * total).floor();
        Piecewise {
            knots: vec![(0.0, start), (warm, 1.0), (total, end)],
        }
    }

    /// hlb's linear OneCycle multiplier: ≈0 → 1 at `pct_start` of the run,
    /// then 1 → `end` (hlb: 0.23 and 0.07 over 581 steps; PyTorch's start
    /// value max/1e16 is 0 here).
    pub fn one_cycle(total_steps: usize, pct_start: f64, end: f64) -> Piecewise {
        let total = total_steps as f64;
        Piecewise {
            knots: vec![(0.0, 0.0), (pct_start * total, 1.0), (total, end)],
        }
    }

    /// airbench-muon: 1 → 0 linearly, no warm-up.
    pub fn linear_to_zero(total: f64) -> Piecewise {
        Piecewise {
            knots: vec![(0.0, 1.0), (total, 0.0)],
        }
    }

    /// Linear warm-up from `start` to 1 over `warmup`, then constant.
    pub fn linear_warmup(warmup: f64, start: f64) -> Piecewise {
        Piecewise {
            knots: vec![(0.0, start), (warmup, 1.0)],
        }
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

    /// Every value × `factor` (a multiplier schedule → an lr schedule).
    pub fn scaled(mut self, factor: f64) -> Piecewise {
        for k in &mut self.knots {
            k.1 *= factor;
        }
        self
    }

    /// Re-expresses the knot positions in another unit: x / `per_unit`
    /// (steps → epochs with `per_unit = steps_per_epoch`).
    pub fn in_units(mut self, per_unit: f64) -> Piecewise {
        for k in &mut self.knots {
            k.0 /= per_unit;
        }
        self
    }
}
