//! The statistics of ablations, each written once: t quantiles and
//! intervals (here), samples and their differences (Welch's interval, runs
//! matched by seed, the runs that would settle a question: `sample`),
//! two-level designs and their aliases (`design`), factorial effects
//! (`fit`), Shapley credit (`shapley`), power and sample size (`power`) and
//! sequential rules (`sequential`). Reports, compare, nightly, parity and
//! the session's stopping rules read them from here.

pub mod design;
pub mod fit;
pub mod power;
pub mod sample;
pub mod sequential;
pub mod shapley;
#[cfg(test)]
mod tests;

pub use fit::{ErrorMethod, Fit, Obs, TermEffect, fit, lenth_pse, pure_error};
pub use power::{
    noncentral_t_cdf, power_paired, power_t, power_two_sample, replicates_for_effect, seeds_needed,
};
pub use sample::{
    Estimate, Matched, Tost, match_by_seed, mean_sd, runs_to_settle, welch, welch_of,
};
pub use sequential::{Verdict, decide, look_interval};
pub use shapley::{ShapleyValues, shapley_exact, shapley_sampled};

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Confidence level of every interval of the effects analysis.
pub const CONFIDENCE: f64 = 0.95;

/// A point estimate with a two-sided interval. `lo`/`hi` are ±∞ when the
/// data carry no estimate of error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Point estimate.
    pub estimate: f64,
    /// Lower end (−∞ when unknown).
    pub lo: f64,
    /// Upper end (+∞ when unknown).
    pub hi: f64,
}

impl Interval {
    /// `estimate ± half_width`.
    pub fn symmetric(estimate: f64, half_width: f64) -> Self {
        Interval {
            estimate,
            lo: estimate - half_width,
            hi: estimate + half_width,
        }
    }

    /// An estimate with no error estimate: (−∞, +∞).
    pub fn unbounded(estimate: f64) -> Self {
        Interval {
            estimate,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
        }
    }

    /// Whether `x` lies in the closed interval.
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// Student t's `p` quantile on `df` degrees of freedom, fractional df
/// (Welch–Satterthwaite's) as they are: never rounded down.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

/// Multiplier for a two-sided interval of level `level` on `df` d.f.
pub fn t_multiplier(level: f64, df: f64) -> f64 {
    t_quantile(0.5 + level / 2.0, df)
}

/// Half-width of the 95% CI of the mean (t-distribution).
pub fn ci95_half_width(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return f64::INFINITY;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    t95(n - 1) * (var / n as f64).sqrt()
}

/// Two-sided 95% Student t quantile for `df` degrees of freedom (∞ at 0).
pub fn t95(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        d => t_quantile(0.975, d as f64),
    }
}

/// Wilson's 95% interval of a proportion, `k` of `n` (`None` for n = 0):
/// unlike the normal approximation, it stays inside [0, 1] and is not zero
/// wide at 0 or n successes.
pub fn wilson95(k: usize, n: usize) -> Option<(f64, f64)> {
    use statrs::distribution::Normal;
    if n == 0 {
        return None;
    }
    let z = Normal::standard().inverse_cdf(0.975);
    let (n, p) = (n as f64, k as f64 / n as f64);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

#[cfg(test)]
mod closed_forms {
    use super::*;

    #[test]
    fn quantiles_and_intervals_match_closed_forms() {
        // t with 1 and 2 degrees of freedom have closed-form quantiles.
        let t1 = (std::f64::consts::PI * (0.975 - 0.5)).tan();
        let t2 = 0.95 / (2.0f64 * 0.975 * 0.025).sqrt();
        assert!((t95(1) - t1).abs() < 1e-9 && (t95(2) - t2).abs() < 1e-9);
        assert!((t95(100_000) - 1.959_963_98).abs() < 1e-4);
        assert!(t95(0).is_infinite());
        // Wilson at 0 of 10 and 10 of 10: [0, 0.278] and [0.722, 1] (z = 1.96).
        let (lo, hi) = wilson95(0, 10).unwrap();
        assert!(lo.abs() < 1e-12 && (hi - 0.277_5).abs() < 1e-3, "{hi}");
        let (lo, hi) = wilson95(10, 10).unwrap();
        assert!(
            (lo - 0.722_5).abs() < 1e-3 && (hi - 1.0).abs() < 1e-12,
            "{lo}"
        );
        let (lo, hi) = wilson95(5, 10).unwrap();
        assert!((lo - 0.236_6).abs() < 1e-3 && (hi - 0.763_4).abs() < 1e-3);
        assert_eq!(wilson95(0, 0), None);
    }
}
