//! `tricklab compare BASE CANDIDATE`: per variant, is the candidate slower or
//! less accurate than allowed, beyond the run-to-run noise? For overnight
//! ladder regressions, where a false alarm costs a morning and a missed one
//! a week.
//!
//! Each difference of means gets a 95% confidence interval by Welch's t (two
//! samples, unequal variances, Welch–Satterthwaite degrees of freedom). A
//! regression is called only when the whole interval lies beyond the
//! threshold; an interval that straddles it is "inconclusive", with the number
//! of runs per side that would likely settle it.
//!
//! Machine-wide drift: a shared machine can be 20% slower one night for every
//! run alike, which is not a regression of any rung. By default each time is
//! therefore judged net of the session's drift, measured on its control, the
//! matrix's first variant (a ladder's baseline rung, leave-one-out's all-on,
//! add-one's base): a variant's change is ln(t_c/t_b) − ln(c_c/c_b) on log
//! means, its standard error the four samples' combined (se of a log mean ≈
//! std/mean/√n), on their Welch–Satterthwaite degrees of freedom
//! (`stats::welch_of`). The drift itself is reported on the control's row, never a
//! verdict; `--absolute` judges raw times (a change that slows every rung
//! alike, the control too, needs it).

use super::{Clock, Report, VariantStats};

/// The quantile a 95% CI's end reads: how far a run count must carry it.
const END_OF_95: f64 = 0.975;

/// What the candidate may lose before it is a regression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Allowed slowdown of the mean time, as a fraction of the base
    /// (0.05 = 5%; negative demands a speedup).
    pub max_slowdown: f64,
    /// Allowed drop of the mean accuracy (0.002 = 0.2 points).
    pub max_acc_drop: f64,
}

impl Thresholds {
    /// One-line errors for values that would switch a check off silently.
    pub fn validate(&self) -> Result<(), String> {
        let s = self.max_slowdown;
        if !(s.is_finite() && (-0.99..=10.0).contains(&s)) {
            return Err(format!(
                "--max-slowdown {s}: give a fraction in [-0.99, 10] (0.05 = 5% slower allowed; write a negative one as --max-slowdown=-0.05)"
            ));
        }
        let a = self.max_acc_drop;
        if !(a.is_finite() && (0.0..=1.0).contains(&a)) {
            return Err(format!(
                "--max-acc-drop {a}: give a fraction in [0, 1] (0.002 = 0.2 points)"
            ));
        }
        Ok(())
    }
}

/// A difference of two means (candidate − base) with its 95% CI by Welch's t.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diff {
    pub base: f64,
    pub cand: f64,
    pub delta: f64,
    /// Half-width of the 95% CI of `delta`.
    pub half_width: f64,
    /// Standard error of `delta`.
    pub se: f64,
    /// Degrees of freedom of its t interval (Welch–Satterthwaite, or n − 1
    /// of paired differences).
    pub df: f64,
    /// The sds of one run of each sample behind it (the paired
    /// differences' and 0 when paired): what more runs would shrink.
    pub sds: [f64; 2],
}

impl Diff {
    pub fn lo(&self) -> f64 {
        self.delta - self.half_width
    }

    pub fn hi(&self) -> f64 {
        self.delta + self.half_width
    }
}

/// Welch's t interval for mean(c) − mean(b) (`stats::welch`, its degrees
/// of freedom unrounded); `None` below 2 runs a side.
pub fn welch(b: (f64, f64, usize), c: (f64, f64, usize)) -> Option<Diff> {
    let q = crate::stats::welch(b, c)?;
    Some(Diff {
        base: b.0,
        cand: c.0,
        delta: q.estimate,
        half_width: q.half_width(0.95),
        se: q.se,
        df: q.df,
        sds: [b.1, c.1],
    })
}

/// Why a variant is inconclusive, and what would settle it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// About this many more runs a side would likely settle it.
    MoreRuns(usize),
    /// A side has fewer than 2 runs: there is no interval to judge, whatever
    /// the means say.
    NoInterval,
    /// The estimate sits on the threshold: no number of runs settles it.
    OnThreshold,
    /// Settling it would take more than `MAX_MORE_RUNS` more runs a side:
    /// the noise is large against the difference from the threshold.
    TooMany,
    /// Every finished candidate run was flagged noisy and `--drop-noisy`
    /// left them out: not a failure of the candidate, and nothing to judge.
    AllNoisy,
}

/// The most extra runs a side `compare` recommends; beyond it the advice is
/// not a plan anyone would follow.
pub const MAX_MORE_RUNS: usize = 100;

impl Open {
    fn more_runs(self) -> Option<usize> {
        match self {
            Open::MoreRuns(n) => Some(n),
            _ => None,
        }
    }

    /// One lowercase word for `--format json`.
    pub fn code(self) -> &'static str {
        match self {
            Open::MoreRuns(_) => "more_runs",
            Open::NoInterval => "no_interval",
            Open::OnThreshold => "on_threshold",
            Open::TooMany => "too_many_runs",
            Open::AllNoisy => "all_noisy",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Faster,
    /// Within the thresholds (and not significantly faster).
    NoChange,
    /// Slower beyond the allowed slowdown (whole CI beyond it).
    Slower,
    /// Less accurate beyond the allowed drop (whole CI beyond it).
    LessAccurate,
    /// The CI straddles a threshold, or there is none yet.
    Inconclusive {
        open: Open,
    },
    FailedInCandidate,
    MissingInCandidate,
    NewInCandidate,
    /// The candidate's values are not numbers (every run's time or accuracy NaN).
    NotANumber,
    /// The control, on which the session's drift is measured.
    Control,
}

impl Verdict {
    /// A regression or a failure: `compare` exits 1.
    pub fn is_bad(&self) -> bool {
        matches!(
            self,
            Verdict::Slower
                | Verdict::LessAccurate
                | Verdict::FailedInCandidate
                | Verdict::MissingInCandidate
                | Verdict::NotANumber
        )
    }

    /// The verdict as one lowercase word, for `--format json`.
    pub fn code(&self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::NoChange => "no_change",
            Verdict::Slower => "slower",
            Verdict::LessAccurate => "less_accurate",
            Verdict::Inconclusive { .. } => "inconclusive",
            Verdict::FailedInCandidate => "failed_in_candidate",
            Verdict::MissingInCandidate => "missing_in_candidate",
            Verdict::NewInCandidate => "new_in_candidate",
            Verdict::NotANumber => "not_a_number",
            Verdict::Control => "control",
        }
    }

    pub fn label(&self) -> String {
        match self {
            Verdict::Faster => "faster".into(),
            Verdict::NoChange => "no change".into(),
            Verdict::Slower => "SLOWER".into(),
            Verdict::LessAccurate => "LESS ACCURATE".into(),
            Verdict::Inconclusive {
                open: Open::MoreRuns(n),
            } => format!("inconclusive (need {n} more runs a side)"),
            Verdict::Inconclusive {
                open: Open::NoInterval,
            } => "inconclusive (no interval below 2 runs a side)".into(),
            Verdict::Inconclusive {
                open: Open::OnThreshold,
            } => "inconclusive (the estimate sits on the threshold)".into(),
            Verdict::Inconclusive {
                open: Open::TooMany,
            } => format!("inconclusive (settling it needs over {MAX_MORE_RUNS} more runs a side)"),
            Verdict::Inconclusive {
                open: Open::AllNoisy,
            } => "inconclusive (every candidate run noisy, left out)".into(),
            Verdict::FailedInCandidate => "FAILED in candidate".into(),
            Verdict::MissingInCandidate => "MISSING in candidate".into(),
            Verdict::NewInCandidate => "new in candidate".into(),
            Verdict::NotANumber => "NaN in candidate".into(),
            Verdict::Control => "control: the session's drift".into(),
        }
    }
}

/// A relative change, candidate / base − 1, with its 95% CI and standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rel {
    pub rel: f64,
    pub lo: f64,
    pub hi: f64,
    pub se: f64,
    /// The log-scale sds of one run (std/mean) of each sample behind it:
    /// base and candidate, then the control's two where net of the drift
    /// (0 where absent, which adds nothing).
    pub sds: [f64; 4],
}

/// A log-mean difference ln(c) − ln(b) (net of the drift's, where judged
/// so) and its samples, each as (log-scale sd of one run, runs).
#[derive(Clone, Debug, PartialEq)]
struct LogDiff {
    d: f64,
    samples: Vec<(f64, usize)>,
}

impl LogDiff {
    fn of(b: (f64, f64, usize), c: (f64, f64, usize)) -> Option<LogDiff> {
        let ((mb, sb, nb), (mc, sc, nc)) = (b, c);
        if nb < 2 || nc < 2 || !(mb > 0.0 && mc > 0.0 && mb.is_finite() && mc.is_finite()) {
            return None;
        }
        Some(LogDiff {
            d: mc.ln() - mb.ln(),
            samples: vec![(sb / mb, nb), (sc / mc, nc)],
        })
    }

    /// This difference net of another (the control's drift).
    fn net_of(&self, drift: &LogDiff) -> LogDiff {
        LogDiff {
            d: self.d - drift.d,
            samples: [self.samples.as_slice(), &drift.samples].concat(),
        }
    }

    fn rel(&self) -> Rel {
        let q = crate::stats::welch_of(self.d, &self.samples)
            .expect("LogDiff::of keeps 2 runs a sample");
        let h = q.half_width(0.95);
        Rel {
            rel: self.d.exp() - 1.0,
            lo: (self.d - h).exp() - 1.0,
            hi: (self.d + h).exp() - 1.0,
            se: q.se,
            sds: std::array::from_fn(|i| self.samples.get(i).map_or(0.0, |s| s.0)),
        }
    }
}

/// How times are judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimeModel {
    /// Net of the session's drift on its control (the first variant).
    #[default]
    NetOfDrift,
    /// Raw times.
    Absolute,
}

impl Comparison {
    /// Marks a variant that seems missing or failed in the candidate only
    /// because `--drop-noisy` left out its finished runs, all flagged noisy:
    /// inconclusive, not a regression.
    pub fn left_out_as_noisy(&mut self) {
        if matches!(
            self.verdict,
            Verdict::MissingInCandidate | Verdict::FailedInCandidate
        ) {
            self.verdict = Verdict::Inconclusive {
                open: Open::AllNoisy,
            };
        }
    }

    /// One variant's comparison as `compare --format json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        let open = match self.verdict {
            Verdict::Inconclusive { open } => Some(open),
            _ => None,
        };
        serde_json::json!({
            "variant": self.variant,
            "n_base": self.n.0,
            "n_candidate": self.n.1,
            "clock": self.clock,
            "base_s": finite(self.means.base_s),
            "candidate_s": finite(self.means.cand_s),
            "time_rel": self.time_rel.map(|r| r.rel),
            "time_rel_lo": self.time_rel.map(|r| r.lo),
            "time_rel_hi": self.time_rel.map(|r| r.hi),
            "base_acc": finite(self.means.base_acc),
            "candidate_acc": finite(self.means.cand_acc),
            "acc_paired": self.acc_paired,
            "acc_delta": self.acc.map(|d| d.delta),
            "acc_delta_lo": self.acc.map(|d| d.lo()),
            "acc_delta_hi": self.acc.map(|d| d.hi()),
            "verdict": self.verdict.code(),
            "regression": self.verdict.is_bad(),
            "more_runs": open.and_then(Open::more_runs),
            "inconclusive_because": open.map(Open::code),
        })
    }
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Each side's mean time and accuracy, also where a side has one run and no
/// interval can be drawn (NaN where a side has none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Means {
    pub base_s: f64,
    pub cand_s: f64,
    pub base_acc: f64,
    pub cand_acc: f64,
}

impl Means {
    fn of(b: Option<&VariantStats>, c: Option<&VariantStats>, clock: Clock) -> Means {
        let side = |r: Option<&VariantStats>| match r {
            Some(r) if r.n > 0 => (r.clock(clock).mean, r.acc_tta_mean),
            _ => (f64::NAN, f64::NAN),
        };
        let ((base_s, base_acc), (cand_s, cand_acc)) = (side(b), side(c));
        Means {
            base_s,
            cand_s,
            base_acc,
            cand_acc,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub variant: String,
    /// Finished runs in the base and the candidate.
    pub n: (usize, usize),
    pub clock: Clock,
    pub means: Means,
    /// Whether `acc` is paired by seed (every seed of one side ran on the other).
    pub acc_paired: bool,
    /// Raw time difference in seconds.
    pub time: Option<Diff>,
    /// The relative time change the verdict rests on: net of the drift, or raw.
    pub time_rel: Option<Rel>,
    /// Accuracy difference (with TTA), as a fraction.
    pub acc: Option<Diff>,
    pub verdict: Verdict,
}

/// The accuracy difference paired by seed, when every seed of the side with
/// fewer ran on the other too. `base` and `cand` are the means over those
/// shared seeds (each seed's runs averaged first), so that cand − base is the
/// paired difference shown beside them.
fn paired(b: &VariantStats, c: &VariantStats) -> Option<Diff> {
    let m = crate::stats::match_by_seed(&b.acc_by_seed, &c.acc_by_seed)?;
    let crate::stats::Matched::Paired(diffs) = &m else {
        return None;
    };
    let q = m.question()?;
    let by_seed = |v: &[(u64, f64)]| {
        let mut m: std::collections::BTreeMap<u64, (f64, usize)> = Default::default();
        for &(seed, x) in v.iter().filter(|(_, x)| x.is_finite()) {
            let e = m.entry(seed).or_default();
            *e = (e.0 + x, e.1 + 1);
        }
        m.into_iter()
            .map(|(seed, (sum, k))| (seed, sum / k as f64))
            .collect::<std::collections::BTreeMap<u64, f64>>()
    };
    let (bs, cs) = (by_seed(&b.acc_by_seed), by_seed(&c.acc_by_seed));
    let shared: Vec<(f64, f64)> = bs
        .iter()
        .filter_map(|(seed, x)| Some((*x, *cs.get(seed)?)))
        .collect();
    let k = shared.len().max(1) as f64;
    Some(Diff {
        base: shared.iter().map(|p| p.0).sum::<f64>() / k,
        cand: shared.iter().map(|p| p.1).sum::<f64>() / k,
        delta: q.estimate,
        half_width: q.half_width(0.95),
        se: q.se,
        df: q.df,
        sds: [crate::stats::mean_sd(diffs).1, 0.0],
    })
}

/// The runs a side that would carry the 95% CI's end past a threshold
/// `distance` away, were the estimate and the spreads `sds` to stay
/// (`stats::runs_to_settle`, as parity and the until_decided advice use);
/// `n` have run. Only for a finite interval, and only up to
/// `MAX_MORE_RUNS` more.
fn more_runs(n: usize, sds: &[f64], distance: f64) -> Open {
    if sds.iter().any(|s| !s.is_finite()) {
        return Open::NoInterval;
    }
    if distance <= 0.0 || !distance.is_finite() {
        return Open::OnThreshold;
    }
    match crate::stats::runs_to_settle(distance, sds, END_OF_95, n + MAX_MORE_RUNS) {
        Some(k) => Open::MoreRuns(k.saturating_sub(n).max(1)),
        None => Open::TooMany,
    }
}

fn judge(time: Option<&Rel>, acc: Option<&Diff>, n: usize, th: &Thresholds) -> Verdict {
    let (Some(t), Some(a)) = (time, acc) else {
        return Verdict::Inconclusive {
            open: Open::NoInterval,
        };
    };
    if t.lo > th.max_slowdown {
        return Verdict::Slower;
    }
    let drop = -th.max_acc_drop;
    if a.hi() < drop {
        return Verdict::LessAccurate;
    }
    if t.hi > th.max_slowdown {
        // The standard error of the relative change is that of the log.
        return Verdict::Inconclusive {
            open: more_runs(n, &t.sds, (t.rel.ln_1p() - th.max_slowdown.ln_1p()).abs()),
        };
    }
    if a.lo() < drop {
        return Verdict::Inconclusive {
            open: more_runs(n, &a.sds, (a.delta - drop).abs()),
        };
    }
    if t.hi < 0.0 {
        Verdict::Faster
    } else {
        Verdict::NoChange
    }
}

fn sample(r: &VariantStats, clock: Clock) -> ((f64, f64, usize), (f64, f64, usize)) {
    let c = r.clock(clock);
    ((c.mean, c.std, r.n), (r.acc_tta_mean, r.acc_tta_std, r.n))
}

/// The session's drift: the control's (the base's first variant's) relative
/// time change, when both sides ran it at least twice.
pub fn drift(base: &Report, cand: &Report) -> Option<Rel> {
    drift_log(base, cand).as_ref().map(LogDiff::rel)
}

/// The control: the matrix's first variant (index 0), where the base has
/// it. Not merely the first row: `--drop-noisy` may have left the control's
/// runs out, and another variant's own change must not pass for drift.
pub fn control(base: &Report) -> Option<&VariantStats> {
    base.rows.first().filter(|r| r.index == 0)
}

fn drift_log(base: &Report, cand: &Report) -> Option<LogDiff> {
    let b = control(base)?;
    let c = cand.rows.iter().find(|c| c.variant == b.variant)?;
    LogDiff::of(sample(b, b.headline).0, sample(c, b.headline).0)
}

/// Every variant of either side, in the base's order, then those new in the candidate.
pub fn compare(base: &Report, cand: &Report, th: &Thresholds, model: TimeModel) -> Vec<Comparison> {
    let drift = match model {
        TimeModel::NetOfDrift => drift_log(base, cand),
        TimeModel::Absolute => None,
    };
    let control = control(base).map(|r| r.variant.clone());
    let mut out: Vec<Comparison> = base
        .rows
        .iter()
        .map(|b| {
            let clock = b.headline;
            let c = cand.rows.iter().find(|c| c.variant == b.variant);
            let n = (b.n, c.map_or(0, |c| c.n));
            let mut means = Means::of(Some(b), c, clock);
            let mut acc_paired = false;
            let (time, time_rel, acc, verdict) = match c {
                None => (None, None, None, Verdict::MissingInCandidate),
                Some(c) if c.n == 0 && b.n > 0 => (None, None, None, Verdict::FailedInCandidate),
                // No finished run in the base (its runs failed or were left
                // out): nothing to compare against, as for a new rung.
                Some(c) if b.n == 0 && c.n > 0 => (None, None, None, Verdict::NewInCandidate),
                Some(c) => {
                    let ((tb, ab), (tc, ac)) = (sample(b, clock), sample(c, clock));
                    // Accuracy paired by seed where both sessions ran the
                    // same seeds (same data order and init: the seeds' noise cancels).
                    let pair = paired(b, c);
                    acc_paired = pair.is_some();
                    if let Some(p) = pair {
                        // The means over the shared seeds, whose difference
                        // the paired Δ is.
                        (means.base_acc, means.cand_acc) = (p.base, p.cand);
                    }
                    let (time, acc) = (welch(tb, tc), pair.or_else(|| welch(ab, ac)));
                    let raw = LogDiff::of(tb, tc);
                    let is_control = drift.is_some() && control.as_deref() == Some(&b.variant);
                    let rel = match (raw, &drift) {
                        (Some(r), Some(d)) if !is_control => Some(r.net_of(d).rel()),
                        (r, _) => r.as_ref().map(LogDiff::rel),
                    };
                    let verdict = if c.n > 0 && (tc.0.is_nan() || ac.0.is_nan()) {
                        Verdict::NotANumber
                    } else if is_control {
                        // Its time is the drift; its accuracy is judged as any variant's.
                        if acc.is_some_and(|a| a.hi() < -th.max_acc_drop) {
                            Verdict::LessAccurate
                        } else {
                            Verdict::Control
                        }
                    } else {
                        judge(rel.as_ref(), acc.as_ref(), n.0.min(n.1), th)
                    };
                    (time, rel, acc, verdict)
                }
            };
            Comparison {
                variant: b.variant.clone(),
                n,
                clock,
                means,
                acc_paired,
                time,
                time_rel,
                acc,
                verdict,
            }
        })
        .collect();
    out.extend(
        cand.rows
            .iter()
            .filter(|c| !base.rows.iter().any(|b| b.variant == c.variant))
            .map(|c| Comparison {
                variant: c.variant.clone(),
                n: (0, c.n),
                clock: c.headline,
                means: Means::of(None, Some(c), c.headline),
                acc_paired: false,
                time: None,
                time_rel: None,
                acc: None,
                verdict: Verdict::NewInCandidate,
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_matches_a_hand_computed_interval() {
        // b: mean 10, sd 1, n 5; c: mean 12, sd 2, n 5 → se = √(0.2 + 0.8) = 1,
        // df = 1 / (0.04/4 + 0.64/4) = 5.882, kept fractional (the floor to 5
        // gave 2.5706 here, wider than Welch's interval):
        // t(0.975; 5.882) = 2.4588237 (mpmath, 30 digits).
        let d = welch((10.0, 1.0, 5), (12.0, 2.0, 5)).unwrap();
        assert!((d.delta - 2.0).abs() < 1e-12);
        assert!((d.df - 100.0 / 17.0).abs() < 1e-12, "{d:?}");
        assert!((d.half_width - 2.458_823_709_7).abs() < 1e-8, "{d:?}");
        assert!(welch((10.0, 1.0, 1), (12.0, 2.0, 5)).is_none());
    }

    #[test]
    fn verdicts_follow_the_interval_not_the_means() {
        let th = Thresholds {
            max_slowdown: 0.05,
            max_acc_drop: 0.002,
        };
        let acc = welch((0.94, 0.001, 10), (0.94, 0.001, 10));
        let time = |mc: f64, sd: f64, n: usize| {
            LogDiff::of((1.0, sd, n), (mc, sd, n))
                .as_ref()
                .map(LogDiff::rel)
        };
        let v = |t: Option<Rel>, n| judge(t.as_ref(), acc.as_ref(), n, &th);
        // Two runs a side at 0.18 vs 0.21 s with a wide spread: not a regression.
        let noisy = LogDiff::of((0.18, 0.1, 2), (0.21, 0.1, 2))
            .as_ref()
            .map(LogDiff::rel);
        assert!(matches!(v(noisy, 2), Verdict::Inconclusive { .. }));
        assert_eq!(v(time(1.2, 0.01, 10), 10), Verdict::Slower);
        assert_eq!(v(time(0.8, 0.01, 10), 10), Verdict::Faster);
        assert_eq!(v(time(1.02, 0.01, 10), 10), Verdict::NoChange);
        let Verdict::Inconclusive {
            open: Open::MoreRuns(k),
        } = v(time(1.10, 0.05, 4), 4)
        else {
            panic!()
        };
        assert!((1..=MAX_MORE_RUNS).contains(&k), "{k}");
        // 6% slower at the same spread sits so near 5% that the runs it would
        // take are no advice.
        assert_eq!(
            v(time(1.06, 0.05, 4), 4),
            Verdict::Inconclusive {
                open: Open::TooMany
            }
        );
        // Accuracy: a drop whose whole interval is beyond 0.2 points.
        let lower = welch((0.94, 0.001, 10), (0.93, 0.001, 10));
        let t = time(1.0, 0.01, 10);
        assert_eq!(
            judge(t.as_ref(), lower.as_ref(), 10, &th),
            Verdict::LessAccurate
        );
        // A negative threshold demands a speedup: 2% faster is not 5% faster.
        let demand = Thresholds {
            max_slowdown: -0.05,
            ..th
        };
        let t = time(0.98, 0.001, 10);
        assert_eq!(
            judge(t.as_ref(), acc.as_ref(), 10, &demand),
            Verdict::Slower
        );
    }

    #[test]
    fn more_runs_are_advised_only_for_a_finite_interval_and_a_practical_number() {
        // Two samples of sd 0.02 a run, 4 runs each, 0.02 from the threshold:
        // t(0.975; 2(n − 1))·√(0.0008/n) ≤ 0.02 first at n = 9 (mpmath), so 5
        // more a side; at sd 0.01 the 4 that ran would do, and one is said.
        assert_eq!(more_runs(4, &[0.02, 0.02], 0.02), Open::MoreRuns(5));
        assert_eq!(more_runs(4, &[0.01, 0.01], 0.02), Open::MoreRuns(1));
        assert_eq!(more_runs(2, &[f64::NAN, 0.01], 0.02), Open::NoInterval);
        assert_eq!(more_runs(2, &[f64::INFINITY, 0.01], 0.02), Open::NoInterval);
        assert_eq!(more_runs(4, &[0.01, 0.01], 0.0), Open::OnThreshold);
        // A wide spread 0.01 from the threshold: thousands of runs, not advice.
        assert_eq!(more_runs(2, &[0.5, 0.5], 0.01), Open::TooMany);
        for open in [
            Open::NoInterval,
            Open::OnThreshold,
            Open::TooMany,
            Open::AllNoisy,
        ] {
            let label = Verdict::Inconclusive { open }.label();
            assert!(!label.contains("need "), "{label}");
        }
        // No interval on either measure (a side with one run): said so, no count.
        let th = Thresholds {
            max_slowdown: 0.05,
            max_acc_drop: 0.002,
        };
        assert_eq!(
            judge(None, None, 1, &th),
            Verdict::Inconclusive {
                open: Open::NoInterval
            }
        );
    }

    #[test]
    fn thresholds_must_be_finite_and_in_range() {
        let ok = Thresholds {
            max_slowdown: -0.05,
            max_acc_drop: 0.002,
        };
        assert!(ok.validate().is_ok());
        for s in [f64::NAN, f64::INFINITY, -1.0, 11.0] {
            let e = Thresholds {
                max_slowdown: s,
                ..ok
            }
            .validate()
            .unwrap_err();
            assert!(e.contains("--max-slowdown"), "{e}");
        }
        assert!(
            Thresholds {
                max_acc_drop: f64::NAN,
                ..ok
            }
            .validate()
            .is_err()
        );
    }
}
