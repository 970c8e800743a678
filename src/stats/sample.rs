//! Samples of runs and the differences between them: mean and spread, the
//! matching of two variants' runs by seed, Welch's interval, and how many
//! runs a side would settle a question.

use std::collections::BTreeMap;

use super::power::seeds_needed;

/// A difference with its standard error and degrees of freedom: Welch's,
/// a paired t's, or a fit's. `until_decided` decides it look by look.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Current estimate of the difference.
    pub estimate: f64,
    /// Its standard error.
    pub se: f64,
    /// Degrees of freedom of the standard error, fractional where
    /// Welch–Satterthwaite's: never rounded.
    pub df: f64,
}

impl Estimate {
    /// Half-width of its two-sided interval at `level` (0.95: a 95% CI);
    /// ∞ without degrees of freedom or a finite standard error.
    pub fn half_width(&self, level: f64) -> f64 {
        if self.df > 0.0 && self.se.is_finite() && self.se >= 0.0 {
            super::t_multiplier(level, self.df) * self.se
        } else {
            f64::INFINITY
        }
    }

    /// Its two-sided interval at `level`.
    pub fn interval(&self, level: f64) -> super::Interval {
        super::Interval::symmetric(self.estimate, self.half_width(level))
    }
}

/// What two one-sided tests at α = 0.05 say of a difference against ±margin
/// (Schuirmann 1987).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tost {
    /// The 90% CI lies within ±margin.
    Equivalent,
    /// The 95% CI lies wholly beyond the margin, on one side.
    Different,
    /// Neither.
    Open,
}

impl Estimate {
    /// Two one-sided tests of this difference against ±`margin`: see [`Tost`].
    pub fn tost(&self, margin: f64) -> Tost {
        let (i90, i95) = (self.interval(0.90), self.interval(0.95));
        if -margin < i90.lo && i90.hi < margin {
            Tost::Equivalent
        } else if i95.lo > margin || i95.hi < -margin {
            Tost::Different
        } else {
            Tost::Open
        }
    }
}

/// Sample mean and standard deviation (n − 1 divisor; NaN below 2 values).
pub fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, if x.len() < 2 { f64::NAN } else { var.sqrt() })
}

/// Welch's difference mean(b) − mean(a) of two independent samples, each
/// given as (mean, sd of one run, runs): see [`welch_of`]. `None` below 2
/// runs a side or for a mean that is not a number.
pub fn welch(a: (f64, f64, usize), b: (f64, f64, usize)) -> Option<Estimate> {
    let ((ma, sa, na), (mb, sb, nb)) = (a, b);
    if !(ma.is_finite() && mb.is_finite()) {
        return None;
    }
    welch_of(mb - ma, &[(sa, na), (sb, nb)])
}

/// An estimate made of independent samples' means (a difference of two, or
/// of differences), each sample given as (sd of one run, runs): se =
/// √Σ sᵢ²/nᵢ on the Welch–Satterthwaite d.f. (Σ sᵢ²/nᵢ)² / Σ (sᵢ²/nᵢ)²/(nᵢ−1)
/// (Welch 1947, Biometrika 34:28–35; Satterthwaite 1946), Σ (nᵢ − 1) when
/// every spread is 0. The d.f. stay fractional. `None` below 2 runs in a
/// sample.
pub fn welch_of(estimate: f64, samples: &[(f64, usize)]) -> Option<Estimate> {
    if samples.iter().any(|&(_, n)| n < 2) {
        return None;
    }
    let v: Vec<(f64, f64)> = samples
        .iter()
        .map(|&(s, n)| (s * s / n as f64, (n - 1) as f64))
        .collect();
    let var: f64 = v.iter().map(|(v, _)| v).sum();
    let se = var.sqrt();
    let df = if se > 0.0 {
        var * var / v.iter().map(|(v, d)| v * v / d).sum::<f64>()
    } else {
        v.iter().map(|(_, d)| d).sum()
    };
    Some(Estimate { estimate, se, df })
}

/// The fewest runs a side, n ≥ 2 (every sample of the estimate given the
/// same n), at which its interval's half-width t_p(ν)·√(Σ sᵢ²/n) would be at
/// most `distance` if the estimate and the spreads stayed as measured: the
/// runs that would carry an interval's end past a threshold `distance`
/// from the estimate. `sds` are the samples' sds of one run (one, of the
/// paired differences, for a paired t); `p` the quantile the verdict reads
/// (0.975 for an end of a 95% CI, 0.95 for two one-sided tests at α =
/// 0.05). ν is Welch–Satterthwaite's at n runs each, (n − 1)(Σ sᵢ²)² / Σ sᵢ⁴,
/// unrounded, so a sample whose spread dominates asks for the runs its few
/// d.f. need. The normal approximation n = (z·s/distance)² asked, on an
/// H200, for the 6 runs a side that had just left a parity verdict open
/// (stats/tests.rs). `None` past `max` or without a finite distance and spread.
pub fn runs_to_settle(distance: f64, sds: &[f64], p: f64, max: usize) -> Option<usize> {
    let var: f64 = sds.iter().map(|s| s * s).sum();
    let quad: f64 = sds.iter().map(|s| s.powi(4)).sum();
    if !(distance.is_finite() && distance != 0.0 && var.is_finite()) {
        return None;
    }
    let df_per_run = if var > 0.0 { var * var / quad } else { 1.0 };
    (2..=max.max(2)).find(|&n| {
        let df = (n - 1) as f64 * df_per_run;
        super::t_quantile(p, df) * (var / n as f64).sqrt() <= distance.abs()
    })
}

/// Two variants' runs matched by seed, by the rule of the report's Δ
/// columns: paired where every seed of the side with fewer seeds ran on
/// both (the seed's data order and initialisation are then shared, and
/// cancel in the difference), else two independent samples.
#[derive(Clone, Debug, PartialEq)]
pub enum Matched {
    /// The per-seed differences this − reference, each seed's runs
    /// averaged first.
    Paired(Vec<f64>),
    /// The two samples as they are.
    Independent { reference: Vec<f64>, this: Vec<f64> },
}

/// Matches `this` against `reference`, each given as (seed, value);
/// non-finite values are left out. `None` when a side has no value.
pub fn match_by_seed(reference: &[(u64, f64)], this: &[(u64, f64)]) -> Option<Matched> {
    let by_seed = |v: &[(u64, f64)]| -> BTreeMap<u64, Vec<f64>> {
        let mut m: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for &(s, x) in v.iter().filter(|(_, x)| x.is_finite()) {
            m.entry(s).or_default().push(x);
        }
        m
    };
    let (a, b) = (by_seed(reference), by_seed(this));
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let avg = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let pairs: Vec<f64> = b
        .iter()
        .filter_map(|(s, xs)| a.get(s).map(|ys| avg(xs) - avg(ys)))
        .collect();
    if pairs.len() == a.len().min(b.len()) {
        return Some(Matched::Paired(pairs));
    }
    Some(Matched::Independent {
        reference: a.into_values().flatten().collect(),
        this: b.into_values().flatten().collect(),
    })
}

impl Matched {
    pub fn is_paired(&self) -> bool {
        matches!(self, Matched::Paired(_))
    }

    /// Pairs, or the smaller side's runs.
    pub fn n(&self) -> usize {
        match self {
            Matched::Paired(d) => d.len(),
            Matched::Independent { reference, this } => reference.len().min(this.len()),
        }
    }

    /// The estimated difference this − reference.
    pub fn estimate(&self) -> f64 {
        match self {
            Matched::Paired(d) => mean_sd(d).0,
            Matched::Independent { reference, this } => mean_sd(this).0 - mean_sd(reference).0,
        }
    }

    /// The difference as an [`Estimate`]. Paired: the mean difference d̄, se =
    /// s_d/√n on n − 1 d.f. (the paired t). Independent: Welch's se =
    /// √(s₁²/n₁ + s₂²/n₂) on the Welch–Satterthwaite d.f.
    /// (s₁²/n₁ + s₂²/n₂)² / ((s₁²/n₁)²/(n₁−1) + (s₂²/n₂)²/(n₂−1)) (Welch
    /// 1947, Biometrika 34:28–35), n₁ + n₂ − 2 when both spreads are 0.
    /// `None` below 2 pairs or 2 runs a side: no spread to measure.
    pub fn question(&self) -> Option<Estimate> {
        match self {
            Matched::Paired(d) if d.len() >= 2 => {
                let (m, sd) = mean_sd(d);
                let n = d.len() as f64;
                Some(Estimate {
                    estimate: m,
                    se: sd / n.sqrt(),
                    df: n - 1.0,
                })
            }
            Matched::Independent { reference, this } => {
                let ((ma, sa), (mb, sb)) = (mean_sd(reference), mean_sd(this));
                welch((ma, sa, reference.len()), (mb, sb, this.len()))
            }
            _ => None,
        }
    }

    /// The standard deviation a power calculation for this pair uses: that
    /// of the per-seed differences when paired, else the pooled
    /// s_p = √(((n₁−1)s₁² + (n₂−1)s₂²)/(n₁ + n₂ − 2)) of the two-sample t
    /// test. `None` below 2 pairs or 2 runs a side.
    pub fn spread(&self) -> Option<f64> {
        match self {
            Matched::Paired(d) if d.len() >= 2 => Some(mean_sd(d).1),
            Matched::Independent { reference, this } if reference.len().min(this.len()) >= 2 => {
                let ((_, sa), (_, sb)) = (mean_sd(reference), mean_sd(this));
                let (na, nb) = (reference.len() as f64, this.len() as f64);
                let pooled = ((na - 1.0) * sa * sa + (nb - 1.0) * sb * sb) / (na + nb - 2.0);
                Some(pooled.sqrt())
            }
            _ => None,
        }
    }

    /// Seeds (pairs, or runs a side) that detect a true difference `delta`
    /// with probability `power` by the two-sided level-`alpha` test this
    /// matching calls for, at the measured [`Matched::spread`]: see
    /// [`seeds_needed`]. `None` without a spread, with a zero one, or past
    /// `max`.
    pub fn seeds_needed(&self, delta: f64, alpha: f64, power: f64, max: usize) -> Option<usize> {
        let sd = self.spread()?;
        seeds_needed(delta, sd, alpha, power, self.is_paired(), max)
    }
}
