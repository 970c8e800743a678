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
