//! Sequential rules: a difference decided at planned looks with α split
//! over them (`until_decided`).

use super::sample::Estimate;
use super::{Interval, t_multiplier};

/// Outcome of [`decide`] for one question at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Not decided yet: add seeds.
    Open,
    /// The difference is not zero (its sign is known).
    NonZero,
    /// The difference lies within ±`within` (practically no difference).
    WithinMargin,
}

impl Verdict {
    /// In words, for tables.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Open => "open",
            Verdict::NonZero => "non-zero",
            Verdict::WithinMargin => "within the margin",
        }
    }
}

/// Decide a question at look number `look` (1-based) of at most `max_looks`
/// planned looks, at family-wise error rate `alpha`.
///
/// Each look uses the two-sided (1 − α/max_looks) t interval
/// estimate ± t(1 − α/(2·max_looks); df)·se. NonZero when it excludes 0,
/// WithinMargin when it lies inside (−within, +within), Open otherwise (an
/// interval that does both is reported NonZero: the sign is decided, and
/// the caller sees that the size is small).
///
/// Why the error rate holds: a wrong verdict at a look needs that look's
/// interval to miss the true difference (NonZero when it is 0, WithinMargin
/// when |difference| ≥ within). Each planned look's interval misses with
/// probability α/max_looks, so by the Bonferroni (union) bound the chance
/// that any of the max_looks intervals misses — and so of any wrong verdict,
/// however the looks are correlated and whenever sampling stops — is at most
/// α (Bonferroni inequality; the repeated-confidence-interval view of
/// Jennison & Turnbull 2000, *Group Sequential Methods with Applications
/// to Clinical Trials*, Ch. 9). It is
/// conservative: group-sequential boundaries would spend α less wastefully.
/// A look past `max_looks` has no α left and always answers Open.
pub fn decide(q: &Estimate, look: usize, max_looks: usize, alpha: f64, within: f64) -> Verdict {
    let valid = look >= 1
        && look <= max_looks
        && alpha > 0.0
        && alpha < 1.0
        && q.df > 0.0
        && q.se.is_finite()
        && q.se >= 0.0
        && q.estimate.is_finite();
    if !valid {
        return Verdict::Open;
    }
    let ci = look_interval(q, max_looks, alpha);
    if ci.lo > 0.0 || ci.hi < 0.0 {
        Verdict::NonZero
    } else if ci.lo > -within && ci.hi < within {
        Verdict::WithinMargin
    } else {
        Verdict::Open
    }
}

/// The interval one look of [`decide`] judges: the two-sided
/// (1 − α/max_looks) t interval estimate ± t(1 − α/(2·max_looks); df)·se,
/// α split evenly over the planned looks (Bonferroni). Unbounded where the
/// question carries no error estimate (df ≤ 0 or a non-finite se).
pub fn look_interval(q: &Estimate, max_looks: usize, alpha: f64) -> Interval {
    if !(q.df > 0.0 && q.se.is_finite() && q.se >= 0.0 && max_looks >= 1) {
        return Interval::unbounded(q.estimate);
    }
    let level = 1.0 - alpha / max_looks as f64;
    Interval::symmetric(q.estimate, t_multiplier(level, q.df) * q.se)
}
