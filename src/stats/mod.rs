//! The statistics of ablations: t quantiles and confidence intervals (here,
//! shared by the queue's adaptive repeats and the reports), two-level
//! designs and their aliases (`design`), and what is estimated from them:
//! factorial effects, Shapley credit, power and sequential rules (`estimate`).

pub mod design;
pub mod estimate;

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

/// Two-sided 95% Student t quantile for `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match df {
        0 => f64::INFINITY,
        d => StudentsT::new(0.0, 1.0, d as f64).map_or(1.96, |t| t.inverse_cdf(0.975)),
    }
}

/// The one-sided upper `p` quantile of Student's t for `df` degrees of
/// freedom (p = 0.95: the half-width factor of a 90% interval, the one two
/// one-sided tests at α = 0.05 read).
pub fn t_quantile(p: f64, df: usize) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match df {
        0 => f64::INFINITY,
        d => StudentsT::new(0.0, 1.0, d as f64).map_or(f64::NAN, |t| t.inverse_cdf(p)),
    }
}

/// Wilson's 95% interval of a proportion, `k` of `n` (`None` for n = 0):
/// unlike the normal approximation, it stays inside [0, 1] and is not zero
/// wide at 0 or n successes.
pub fn wilson95(k: usize, n: usize) -> Option<(f64, f64)> {
    use statrs::distribution::{ContinuousCDF, Normal};
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
mod tests {
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
