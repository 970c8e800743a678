//! Power and sample size: the noncentral t distribution, the power of the
//! two-sample and paired t tests, the seeds a difference needs and the
//! replicates a factorial effect needs.

use std::f64::consts::{FRAC_2_PI, LN_2, PI};

use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::beta::beta_reg;
use statrs::function::gamma::ln_gamma;

use super::t_quantile;

/// Standard normal CDF.
pub(super) fn std_normal_cdf(x: f64) -> f64 {
    Normal::standard().cdf(x)
}

/// Convergence tolerance and iteration cap of AS 243 (Lenth 1989 uses
/// errmax = 1e-12, itrmax = 1000).
const NCT_ERRMAX: f64 = 1e-12;
const NCT_ITRMAX: usize = 1000;

/// CDF of the noncentral t distribution, P(T ≤ t) for T with `df` degrees
/// of freedom and noncentrality `ncp`.
///
/// Lenth (1989), "Algorithm AS 243: Cumulative distribution function of the
/// non-central t distribution", Applied Statistics 38:185–189: for t ≥ 0,
/// P(T ≤ t) = Φ(−δ) + ½ Σ_j [P_j I_x(j+½, ν/2) + Q_j I_x(j+1, ν/2)] with
/// x = t²/(t²+ν), Poisson-type weights P_j = e^{−δ²/2}(δ²/2)^j/j! and
/// Q_j = δ e^{−δ²/2}(δ²/2)^j/(√2 Γ(j+3/2)); the incomplete beta ratios are
/// updated by their recurrences and the series stops when the remaining
/// Poisson mass bounds the error below 1e-12. Negative t uses
/// P(T ≤ t; δ) = 1 − P(T ≤ −t; −δ). As in R's `pnt` (which implements the
/// same algorithm), (1−x)^{ν/2} is computed as (ν/(t²+ν))^{ν/2} to keep
/// accuracy when t² ≪ ν, and where e^{−δ²/2} would underflow or ν is huge
/// the normal approximation of Abramowitz & Stegun (1964) Eq. 26.7.10 is
/// used.
pub fn noncentral_t_cdf(t: f64, df: f64, ncp: f64) -> f64 {
    if t.is_nan() || ncp.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 1.0 } else { 0.0 };
    }
    let (tt, del, negdel) = if t >= 0.0 {
        (t, ncp, false)
    } else {
        (-t, -ncp, true)
    };
    let lower = if df > 4e5 || del * del > 2.0 * LN_2 * 1021.0 {
        // A&S 26.7.10: T(1 − 1/(4ν)) − δ over √(1 + T²/(2ν)) is ≈ N(0, 1).
        let s = 1.0 / (4.0 * df);
        std_normal_cdf((tt * (1.0 - s) - del) / (1.0 + tt * tt * 2.0 * s).sqrt())
    } else {
        as243_series(tt, df, del) + std_normal_cdf(-del)
    };
    let lower = lower.clamp(0.0, 1.0);
    if negdel { 1.0 - lower } else { lower }
}

/// The series part of AS 243 for t ≥ 0 (everything but Φ(−δ)).
fn as243_series(t: f64, df: f64, del: f64) -> f64 {
    let x = t * t / (t * t + df);
    if x <= 0.0 {
        return 0.0;
    }
    let lambda = del * del;
    let mut p = 0.5 * (-0.5 * lambda).exp();
    let mut q = (FRAC_2_PI).sqrt() * p * del;
    // Remaining Poisson mass ½(1 − e^{−λ/2}); expm1 keeps it accurate for small λ.
    let mut s = -0.5 * (-0.5 * lambda).exp_m1();
    let mut a = 0.5;
    let b = 0.5 * df;
    let rxb = (df / (t * t + df)).powf(b);
    let albeta = 0.5 * PI.ln() + ln_gamma(b) - ln_gamma(0.5 + b);
    let mut xodd = beta_reg(a, b, x);
    let mut godd = 2.0 * rxb * (a * x.ln() - albeta).exp();
    let bx = b * x;
    let mut xeven = if bx < f64::EPSILON { bx } else { 1.0 - rxb };
    let mut geven = bx * rxb;
    let mut tnc = p * xodd + q * xeven;
    for it in 1..=NCT_ITRMAX {
        a += 1.0;
        xodd -= godd;
        xeven -= geven;
        godd *= x * (a + b - 1.0) / a;
        geven *= x * (a + b - 0.5) / (a + 0.5);
        p *= lambda / (2 * it) as f64;
        q *= lambda / (2 * it + 1) as f64;
        tnc += p * xodd + q * xeven;
        s -= p;
        // All Poisson mass used (up to rounding): nothing left to add.
        if s <= 0.0 && it > 1 {
            break;
        }
        let errbd = 2.0 * s * (xodd - godd);
        if errbd.abs() < NCT_ERRMAX {
            break;
        }
    }
    tnc
}

/// Power of a two-sided level-`alpha` t test on `df` degrees of freedom
/// when the statistic is noncentral t with noncentrality `ncp`:
/// P(T > t_{1−α/2}) + P(T < −t_{1−α/2}). (R's `power.t.test` keeps only the
/// first term by default; the second is below 1e-6 whenever power matters.)
pub fn power_t(df: f64, ncp: f64, alpha: f64) -> f64 {
    if !(alpha > 0.0 && alpha < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let crit = t_quantile(1.0 - alpha / 2.0, df);
    (1.0 - noncentral_t_cdf(crit, df, ncp)) + noncentral_t_cdf(-crit, df, ncp)
}

/// Power of the two-sided two-sample t test with `n_per_side` seeds per arm,
/// true difference `delta`, common standard deviation `sd`: df = 2n − 2,
/// ncp = δ/(sd·√(2/n)), the standard noncentral-t power computation (as in
/// R's `stats::power.t.test`). 0 when n < 2 (no test possible); NaN for
/// sd ≤ 0 or alpha outside (0, 1).
pub fn power_two_sample(n_per_side: usize, delta: f64, sd: f64, alpha: f64) -> f64 {
    if sd.is_nan() || sd <= 0.0 {
        return f64::NAN;
    }
    if n_per_side < 2 {
        return 0.0;
    }
    let n = n_per_side as f64;
    power_t(2.0 * n - 2.0, delta / (sd * (2.0 / n).sqrt()), alpha)
}

/// Power of the two-sided paired t test with `n` pairs (seeds run with both
/// settings), true mean difference `delta` and standard deviation of the
/// differences `sd_diff`: df = n − 1, ncp = δ/(sd_diff/√n). 0 when n < 2;
/// NaN for sd_diff ≤ 0 or alpha outside (0, 1).
pub fn power_paired(n: usize, delta: f64, sd_diff: f64, alpha: f64) -> f64 {
    if sd_diff.is_nan() || sd_diff <= 0.0 {
        return f64::NAN;
    }
    if n < 2 {
        return 0.0;
    }
    power_t((n - 1) as f64, delta / (sd_diff / (n as f64).sqrt()), alpha)
}

/// Smallest n in 2..=max with `power_of(n) ≥ target`, assuming power grows
/// with n (true for these t tests: ncp grows and the critical value falls),
/// by bisection. None when even `max` falls short.
fn smallest_n(target: f64, max: usize, power_of: impl Fn(usize) -> f64) -> Option<usize> {
    if max < 2 {
        return None;
    }
    let top = power_of(max);
    if top.is_nan() || top < target {
        return None;
    }
    if power_of(2) >= target {
        return Some(2);
    }
    let (mut lo, mut hi) = (2, max); // power(lo) < target ≤ power(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if power_of(mid) >= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Seeds needed to detect a difference `delta` with probability `power` by a
/// two-sided level-`alpha` t test: per arm for two independent samples, or
/// pairs when `paired` (then `sd` is the sd of the paired differences).
/// Smallest n ≥ 2; None when more than `max` would be needed (or for
/// invalid inputs).
pub fn seeds_needed(
    delta: f64,
    sd: f64,
    alpha: f64,
    power: f64,
    paired: bool,
    max: usize,
) -> Option<usize> {
    smallest_n(power, max, |n| {
        if paired {
            power_paired(n, delta, sd, alpha)
        } else {
            power_two_sample(n, delta, sd, alpha)
        }
    })
}

/// Replicates of a two-level design (each `runs_per_replicate` runs) needed
/// to detect a factorial effect of size `delta` with probability `power` by
/// a two-sided level-`alpha` t test.
///
/// With N = r·runs total runs, the effect (difference of two means of N/2
/// runs each) has SE = 2σ/√N (Montgomery, *Design and Analysis of
/// Experiments*, §6.4), so ncp = δ√N/(2σ). The error
/// d.f. are those of pure error, N − runs = runs·(r−1): the saturated model
/// (every effect the design can estimate), which is what is left when the
/// analysis may fit any of them. Smallest r ≥ 2; None beyond `max`.
pub fn replicates_for_effect(
    delta: f64,
    sigma: f64,
    runs_per_replicate: usize,
    alpha: f64,
    power: f64,
    max: usize,
) -> Option<usize> {
    if sigma.is_nan() || sigma <= 0.0 || runs_per_replicate == 0 {
        return None;
    }
    smallest_n(power, max, |r| {
        let n_total = (r * runs_per_replicate) as f64;
        let df = n_total - runs_per_replicate as f64;
        power_t(df, delta * n_total.sqrt() / (2.0 * sigma), alpha)
    })
}
