//! What each rung bought: Δ seconds and Δ accuracy against the rung it is
//! read against (a ladder's previous rung; the first variant of the other
//! kinds), paired by seed where both ran the same seeds (the seed's noise,
//! data order and init cancel), else Welch's interval, with a 95% CI.

use crate::store::{Ended, RunRow};
use serde::Serialize;

/// A difference of means (this − reference) with its 95% CI.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Delta {
    pub mean: f64,
    /// NaN when no interval is possible (one pair, or one run a side).
    pub lo: f64,
    pub hi: f64,
    /// Pairs (paired) or the smaller side's runs.
    pub n: usize,
    pub paired: bool,
}

impl Delta {
    /// The interval lies wholly on one side of 0.
    pub fn excludes_zero(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }

    /// `−1.90 [−2.31, −1.49]*`: `*` where the CI excludes 0; at n = 1 the
    /// value and why there is no interval.
    pub fn label(&self, scale: f64) -> String {
        let v = |x: f64| format!("{:+.2}", scale * x).replace('-', "−");
        if !self.mean.is_finite() {
            return "-".into();
        }
        if !(self.lo.is_finite() && self.hi.is_finite()) {
            return format!("{} (n={}: no interval)", v(self.mean), self.n);
        }
        let mark = if self.excludes_zero() { "*" } else { "" };
        format!("{} [{}, {}]{mark}", v(self.mean), v(self.lo), v(self.hi))
    }
}

/// this − reference over runs given as (seed, value): paired by seed when
/// every seed of the smaller side ran on both, else Welch; the matching and
/// the interval are `stats::match_by_seed` and `Matched::question`, which
/// `matrix show --power`, `until_decided` and `compare` share.
pub fn between(reference: &[(u64, f64)], this: &[(u64, f64)]) -> Option<Delta> {
    let m = crate::stats::match_by_seed(reference, this)?;
    let ci = m.question().map_or((f64::NAN, f64::NAN), |q| {
        let i = q.interval(0.95);
        (i.lo, i.hi)
    });
    Some(Delta {
        mean: m.estimate(),
        lo: ci.0,
        hi: ci.1,
        n: m.n(),
        paired: m.is_paired(),
    })
}

/// Values keyed by the seed that gave them.
pub type BySeed = Vec<(u64, f64)>;

/// A variant's finished runs: (seed, seconds on `clock`) and (seed, accuracy with TTA).
pub fn samples(rows: &[RunRow], clock: crate::config::Clock, drop_noisy: bool) -> (BySeed, BySeed) {
    let ok = |r: &&RunRow| r.status == Ended::Done && !(drop_noisy && r.noisy == Some(true));
    let t = rows
        .iter()
        .filter(ok)
        .map(|r| (r.seed, r.secs(clock).unwrap_or(f64::NAN)))
        .collect();
    let a = rows
        .iter()
        .filter(ok)
        .map(|r| (r.seed, r.acc_tta.unwrap_or(f64::NAN)))
        .collect();
    (t, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_by_seed_when_the_seeds_match_else_welch() {
        // Seed noise shared by both rungs: paired, the rung's −1 s shows through.
        let base = [(0, 10.0), (1, 12.0), (2, 14.0)];
        let rung = [(0, 9.0), (1, 11.1), (2, 12.9)];
        let d = between(&base, &rung).unwrap();
        assert!(d.paired && d.n == 3 && (d.mean + 1.0).abs() < 1e-9, "{d:?}");
        assert!(d.excludes_zero(), "{d:?}");
        assert!(d.label(1.0).ends_with('*'), "{}", d.label(1.0));
        // Different seeds: Welch on the two samples, which the seed noise swamps.
        let other = [(7, 9.0), (8, 11.1), (9, 12.9)];
        let w = between(&base, &other).unwrap();
        assert!(!w.paired && !w.excludes_zero(), "{w:?}");
        // One run a side: the value, and no interval.
        let one = between(&[(0, 10.0)], &[(0, 8.5)]).unwrap();
        assert_eq!(one.label(1.0), "−1.50 (n=1: no interval)");
        assert_eq!(between(&[], &rung), None);
    }
}
