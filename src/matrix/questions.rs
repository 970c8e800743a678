//! The differences a matrix asks about (issue 37): each ladder rung against
//! the previous one, each add-one or leave-one-out variant against its
//! reference, a grid's or a list's variants against the first (as the
//! report's Δ columns read them), and each effect of a factorial or
//! fractional design. `until_decided` asks whether each is decided yet; the
//! statistics are `util::effects`' (`match_by_seed`, `fit`, `decide`).

use super::{DesignPlan, Kind, Matrix, UntilDecided};
use crate::util::doe::{Word, word_label};
use crate::util::effects::{self as fx, Obs, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

/// One difference a matrix asks about.
#[derive(Clone, Debug, PartialEq)]
pub enum Asked {
    /// Variant `variant` minus variant `reference`.
    Pair { reference: usize, variant: usize },
    /// An effect of a two-level design (high − low), with the terms of order
    /// ≤ 2 a fraction cannot tell it from.
    Effect { term: Word, aliases: Vec<Word> },
}

impl Asked {
    /// `+ celu vs base`, or the effect's term by its factors' names
    /// (`tta×lookahead`).
    pub fn label(&self, m: &Matrix) -> String {
        match self {
            Asked::Pair { reference, variant } => format!(
                "{} vs {}",
                m.variants[*variant].name, m.variants[*reference].name
            ),
            Asked::Effect { term, .. } => {
                let names = m.design.as_ref().map_or(&[][..], |d| &d.factors[..]);
                word_label(*term, names)
            }
        }
    }
}

impl Matrix {
    /// The variant a Δ of variant `index` is taken against: the one
    /// [`Matrix::reference`] names, else (a grid or a list) the first.
    fn compared_with(&self, index: usize) -> Option<usize> {
        match (self.reference(index), self.kind) {
            (Some(r), _) => Some(r.index),
            (None, Kind::Grid | Kind::List) if index > 0 => Some(0),
            _ => None,
        }
    }

    /// Every difference this matrix asks about, in order. A Shapley design
    /// asks none that seeds settle: its intervals come from its sampled orders.
    pub fn asked(&self) -> Vec<Asked> {
        match &self.design {
            Some(d) if matches!(d.plan, DesignPlan::Factorial(_)) => d
                .terms()
                .into_iter()
                .map(|(term, aliases)| Asked::Effect { term, aliases })
                .collect(),
            Some(_) => Vec::new(),
            None => (0..self.variants.len())
                .filter_map(|variant| {
                    let reference = self.compared_with(variant)?;
                    Some(Asked::Pair { reference, variant })
                })
                .collect(),
        }
    }
}

/// One finished run as the decisions and the power calculation count it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub seed: u64,
    /// Seconds on the matrix's clock (its recipe's convention).
    pub secs: f64,
    /// Final accuracy with the run's TTA level.
    pub acc: f64,
}

/// The two responses every difference is asked of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Response {
    Time,
    Accuracy,
}

impl Response {
    pub fn of(self, s: &Sample) -> f64 {
        match self {
            Response::Time => s.secs,
            Response::Accuracy => s.acc,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Response::Time => "time",
            Response::Accuracy => "accuracy",
        }
    }
}

/// The state of one asked difference at one look.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// What [`Asked::label`] says.
    pub question: String,
    pub response: Response,
    pub verdict: Verdict,
    pub estimate: f64,
    /// The look's (1 − α/looks) interval; ±infinity where there is none yet.
    pub lo: f64,
    pub hi: f64,
    /// ± this, in the response's units (seconds, accuracy as a fraction).
    pub margin: f64,
    /// Why there is no interval, where there is none.
    pub note: Option<String>,
}

/// Each variant's samples, by variant index.
pub type Runs = BTreeMap<usize, Vec<Sample>>;

/// Every asked difference of `m` for each response `u` asks about, judged
/// at look `look` of `u.looks()` on the counted runs `runs`.
pub fn decide_all(m: &Matrix, u: &UntilDecided, runs: &Runs, look: usize) -> Vec<Decision> {
    let responses = [(Response::Time, u.time), (Response::Accuracy, u.acc)];
    let asked = m.asked();
    let mut out = Vec::new();
    for (response, margin) in responses {
        let Some(margin) = margin else { continue };
        match &m.design {
            Some(_) => out.extend(effect_decisions(m, u, runs, look, response, margin)),
            None => out.extend(asked.iter().map(|a| {
                let Asked::Pair { reference, variant } = a else {
                    unreachable!("a matrix without a design asks pairs")
                };
                let values = |i: usize| -> Vec<(u64, f64)> {
                    runs.get(&i)
                        .into_iter()
                        .flatten()
                        .map(|s| (s.seed, response.of(s)))
                        .collect()
                };
                let (r, v) = (values(*reference), values(*variant));
                // Time's margin is relative to the reference's mean time.
                let within = match response {
                    Response::Time => margin * mean(r.iter().map(|x| x.1)),
                    Response::Accuracy => margin,
                };
                let q = fx::match_by_seed(&r, &v).and_then(|mt| mt.question());
                judged(a.label(m), response, q, u, look, within)
            })),
        }
    }
    out
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    sum / n as f64
}

/// A question judged by `decide` at `look`, with the interval it judged.
fn judged(
    question: String,
    response: Response,
    q: Option<fx::Question>,
    u: &UntilDecided,
    look: usize,
    within: f64,
) -> Decision {
    let Some(q) = q else {
        return Decision {
            question,
            response,
            verdict: Verdict::Open,
            estimate: f64::NAN,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
            margin: within,
            note: Some("under 2 counted runs a side: no spread yet".into()),
        };
    };
    let ci = fx::look_interval(&q, u.looks(), u.alpha);
    Decision {
        question,
        response,
        verdict: fx::decide(&q, look, u.looks(), u.alpha, within),
        estimate: q.estimate,
        lo: ci.lo,
        hi: ci.hi,
        margin: within,
        note: None,
    }
}

/// Each effect of a two-level design, by least squares on the counted runs
/// (`util::effects::fit` on the terms the report fits).
fn effect_decisions(
    m: &Matrix,
    u: &UntilDecided,
    runs: &Runs,
    look: usize,
    response: Response,
    margin: f64,
) -> Vec<Decision> {
    let Some(design) = &m.design else {
        return Vec::new();
    };
    let obs: Vec<Obs> = runs
        .iter()
        .filter_map(|(i, ss)| Some((*design.configs.get(*i)?, ss)))
        .flat_map(|(config, ss)| {
            ss.iter().map(move |s| Obs {
                config,
                y: response.of(s),
            })
        })
        .filter(|o| o.y.is_finite())
        .collect();
    let asked = m.asked();
    let terms: Vec<Word> = asked
        .iter()
        .filter_map(|a| match a {
            Asked::Effect { term, .. } => Some(*term),
            Asked::Pair { .. } => None,
        })
        .collect();
    let fit = fx::fit(&obs, design.factors.len(), &terms);
    asked
        .iter()
        .enumerate()
        .map(|(i, a)| match &fit {
            Ok(f) => {
                let df = match f.method {
                    fx::ErrorMethod::Replicates { df } => df as f64,
                    fx::ErrorMethod::Lenth { df } => df,
                };
                let t = &f.terms[i];
                let q = fx::Question {
                    estimate: t.effect.estimate,
                    se: t.se,
                    df,
                };
                // Time's margin is relative to the design's mean time.
                let within = match response {
                    Response::Time => margin * f.mean,
                    Response::Accuracy => margin,
                };
                judged(a.label(m), response, Some(q), u, look, within)
            }
            Err(e) => {
                let mut d = judged(a.label(m), response, None, u, look, margin);
                d.note = Some(e.clone());
                d
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn until(max: usize) -> UntilDecided {
        UntilDecided {
            time: Some(0.05),
            acc: Some(0.005),
            min: 2,
            max,
            alpha: 0.05,
        }
    }

    #[test]
    fn each_kind_asks_its_pairs_or_effects() {
        let head = "name='q'\nrecipe='tiny-airbench94'\n";
        let m = |body: &str| crate::matrix::parse(&format!("{head}{body}"), "q.toml").unwrap();
        let pairs = |m: &Matrix| -> Vec<(usize, usize)> {
            m.asked()
                .iter()
                .map(|a| match a {
                    Asked::Pair { reference, variant } => (*reference, *variant),
                    Asked::Effect { .. } => panic!("{a:?}"),
                })
                .collect()
        };
        let ladder = m(
            "kind='ladder'\n[[rung]]\nname='a'\n[[rung]]\nname='b'\non=['tta']\n[[rung]]\nname='c'\non=['lookahead']\n",
        );
        assert_eq!(pairs(&ladder), [(0, 1), (1, 2)]);
        let loo = m("kind='leave-one-out'\nvary=['tta','lookahead']\n");
        assert_eq!(pairs(&loo), [(0, 1), (0, 2)]);
        assert_eq!(loo.asked()[1].label(&loo), "- lookahead vs all");
        let grid = m("kind='grid'\n[grid]\nepochs=[1,2,3]\n");
        assert_eq!(pairs(&grid), [(0, 1), (0, 2)]);
        let fact = m("kind='factorial'\nvary=['tta','lookahead']\n");
        let labels: Vec<String> = fact.asked().iter().map(|a| a.label(&fact)).collect();
        assert_eq!(labels, ["tta", "lookahead", "tta×lookahead"]);
        assert!(
            m("kind='shapley'\nvary=['tta','lookahead']\norders=2\n")
                .asked()
                .is_empty()
        );
    }

    #[test]
    fn pairs_are_decided_on_their_paired_differences() {
        let m = crate::matrix::parse(
            "name='q'\nrecipe='tiny-airbench94'\nkind='add-one'\nvary=['tta']\n",
            "q.toml",
        )
        .unwrap();
        // Seed noise shared by both variants, the variant 2 s slower and
        // 0.1 points more accurate, give or take 0.01.
        let base: Vec<Sample> = (0..4)
            .map(|s| Sample {
                seed: s,
                secs: 40.0 + s as f64,
                acc: 0.5 + 0.01 * s as f64,
            })
            .collect();
        let plus: Vec<Sample> = base
            .iter()
            .map(|b| Sample {
                secs: b.secs + 2.0 + 0.01 * (b.seed % 2) as f64,
                acc: b.acc + 0.001 + 0.0001 * (b.seed % 2) as f64,
                ..*b
            })
            .collect();
        let runs: Runs = [(0, base), (1, plus)].into_iter().collect();
        let d = decide_all(&m, &until(10), &runs, 1);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].response, d[0].verdict),
            (Response::Time, Verdict::NonZero)
        );
        assert!(
            (d[0].estimate - 2.005).abs() < 1e-9 && d[0].lo > 0.0,
            "{d:?}"
        );
        // ±5% of the base's mean time of 41.5 s.
        assert!((d[0].margin - 0.05 * 41.5).abs() < 1e-9);
        // +0.1 points, decided either way: its interval excludes 0 (the
        // sign is known) although it lies within ±0.5 points too.
        assert_eq!(d[1].verdict, Verdict::NonZero);
        // One run a side: open, and said why.
        let few: Runs = runs.iter().map(|(i, s)| (*i, s[..1].to_vec())).collect();
        let d = decide_all(&m, &until(10), &few, 1);
        assert!(
            d.iter()
                .all(|x| x.verdict == Verdict::Open && x.note.is_some())
        );
    }
}
