//! What each trick buys whatever the order (issue 37): for the folders of a
//! factorial, fractional or Shapley matrix, the main effects and two-way
//! interactions with 95% CIs and each factor's Shapley value, for time on
//! the recipe's clock and for accuracy. The maths is `util::effects` (least
//! squares on ±1 coding, Lenth's pseudo standard error without replicates,
//! Shapley's formula); one lazy polars query per folder selects its runs.

use super::Clock;
use crate::matrix::{Design, DesignPlan};
use crate::util::doe::{self, Word};
use crate::util::effects::{self as fx, Interval, Obs};
use anyhow::Result;
use polars::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One estimated quantity: a main effect, an interaction or a Shapley value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// `tta`, `tta×lookahead`.
    pub term: String,
    pub estimate: f64,
    /// The 95% interval (±infinity where no error estimate exists).
    pub lo: f64,
    pub hi: f64,
    /// The terms this one cannot be told apart from in a fraction (its
    /// aliases of order ≤ 2): its estimate is their sum.
    pub aliases: Vec<String>,
}

impl Estimate {
    fn of(term: String, i: &Interval, aliases: Vec<String>) -> Estimate {
        Estimate {
            term,
            estimate: i.estimate,
            lo: i.lo,
            hi: i.hi,
            aliases,
        }
    }

    /// Whether the interval excludes zero.
    pub fn decided(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }
}

/// One response's analysis: time (seconds) or accuracy (fraction).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// `time` or `accuracy`.
    pub response: String,
    /// How the intervals were made, in words.
    pub method: String,
    /// Main effects, then two-way interactions (high minus low).
    pub effects: Vec<Estimate>,
    pub shapley: Vec<Estimate>,
    /// Why a part could not be estimated (a configuration without runs).
    pub notes: Vec<String>,
}

/// The effects of one results folder's design.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Effects {
    pub matrix: String,
    pub folder: PathBuf,
    pub clock: Clock,
    /// What `matrix show` says of the design.
    pub design: Vec<String>,
    pub runs: usize,
    pub analyses: Vec<Analysis>,
}

/// The effects of every folder whose matrix is a designed one.
pub fn analyse(dirs: &[PathBuf], clock: Option<Clock>, drop_noisy: bool) -> Vec<Effects> {
    dirs.iter()
        .filter_map(|d| {
            let manifest = crate::store::read_manifest(d).ok()?;
            let m = crate::store::recorded_matrix(&manifest)?;
            let design = m.design.clone()?;
            let clock = clock.unwrap_or_else(|| super::clock_of_recipe(&m.recipe));
            Some(folder_effects(d, &m.name, &design, clock, drop_noisy))
        })
        .collect()
}

fn folder_effects(
    dir: &Path,
    matrix: &str,
    design: &Design,
    clock: Clock,
    drop_noisy: bool,
) -> Effects {
    let (time, acc, notes) = match observations(dir, design, clock, drop_noisy) {
        Ok((t, a)) => (t, a, Vec::new()),
        Err(e) => (Vec::new(), Vec::new(), vec![crate::util::one_line(&e)]),
    };
    let runs = time.len();
    let analyses = [("time", time), ("accuracy", acc)]
        .into_iter()
        .map(|(name, obs)| {
            let mut a = analysis(name, &obs, design);
            a.notes.extend(notes.iter().cloned());
            a
        })
        .collect();
    Effects {
        matrix: matrix.into(),
        folder: dir.into(),
        clock,
        design: design.describe(),
        runs,
        analyses,
    }
}

/// Each finished run as (its configuration, seconds) and (its configuration,
/// accuracy with TTA): one lazy query over the folder's runs, the last row
/// of a run recorded twice kept.
fn observations(
    dir: &Path,
    design: &Design,
    clock: Clock,
    drop_noisy: bool,
) -> Result<(Vec<Obs>, Vec<Obs>)> {
    let mut runs = super::scan_runs(&[dir.to_path_buf()])?.filter(col("status").eq(lit("done")));
    if drop_noisy {
        runs = runs.filter(col("noisy").fill_null(lit(false)).not());
    }
    let df = runs
        .select([
            col("index").cast(DataType::Int64),
            col("repeat").cast(DataType::Int64),
            col(clock.column()).cast(DataType::Float64),
            col("acc_tta").cast(DataType::Float64),
        ])
        .collect()?;
    let ints =
        |name: &str| -> Result<Vec<Option<i64>>> { Ok(df.column(name)?.i64()?.iter().collect()) };
    let floats =
        |name: &str| -> Result<Vec<Option<f64>>> { Ok(df.column(name)?.f64()?.iter().collect()) };
    let (index, repeat) = (ints("index")?, ints("repeat")?);
    let (secs, acc) = (floats(clock.column())?, floats("acc_tta")?);
    let mut last = std::collections::BTreeMap::new();
    for i in 0..df.height() {
        if let (Some(v), Some(r)) = (index[i], repeat[i]) {
            last.insert((v, r), i);
        }
    }
    let (mut t, mut a) = (Vec::new(), Vec::new());
    for (&(v, _), &i) in &last {
        let Some(&config) = design.configs.get(v as usize) else {
            continue;
        };
        if let Some(s) = secs[i].filter(|s| s.is_finite()) {
            t.push(Obs { config, y: s });
        }
        if let Some(x) = acc[i].filter(|x| x.is_finite()) {
            a.push(Obs { config, y: x });
        }
    }
    Ok((t, a))
}

fn analysis(response: &str, obs: &[Obs], design: &Design) -> Analysis {
    let names = &design.factors;
    let k = names.len();
    let label = |w: Word| doe::word_label(w, names);
    let mut a = Analysis {
        response: response.into(),
        method: String::new(),
        effects: Vec::new(),
        shapley: Vec::new(),
        notes: Vec::new(),
    };
    if obs.is_empty() {
        a.notes.push("no finished runs".into());
        return a;
    }
    if let DesignPlan::Factorial(_) = &design.plan {
        let terms = design.terms();
        let words: Vec<Word> = terms.iter().map(|t| t.0).collect();
        match fx::fit(obs, k, &words) {
            Ok(fit) => {
                a.method = match fit.method {
                    fx::ErrorMethod::Replicates { df } => format!(
                        "least squares on ±1 coding; 95% t intervals from the replicates' residual error ({df} df)"
                    ),
                    fx::ErrorMethod::Lenth { df } => format!(
                        "least squares on ±1 coding; no replicates: Lenth's pseudo standard error (Lenth 1989), t on {df:.1} df"
                    ),
                };
                for (t, (_, aliases)) in fit.terms.iter().zip(&terms) {
                    a.effects.push(Estimate::of(
                        label(t.term),
                        &t.effect,
                        aliases.iter().map(|w| label(*w)).collect(),
                    ));
                }
            }
            Err(e) => a.notes.push(format!("effects: {}", names_in(&e, names))),
        }
    }
    match shapley(obs, design) {
        Ok((vals, how)) => {
            a.shapley = vals
                .iter()
                .enumerate()
                .map(|(i, iv)| Estimate::of(names[i].clone(), iv, Vec::new()))
                .collect();
            if a.method.is_empty() {
                a.method = how;
            } else {
                a.method = format!("{}; {how}", a.method);
            }
        }
        Err(e) => a.notes.push(format!("shapley: {}", names_in(&e, names))),
    }
    a
}

/// Each factor's Shapley value and how it was made: exact from a complete
/// full factorial, else from the sampled orders.
fn shapley(obs: &[Obs], design: &Design) -> Result<(Vec<Interval>, String), String> {
    let k = design.factors.len();
    let means = config_means(obs);
    let v = |w: Word| means.iter().find(|(c, _)| *c == w).map(|m| m.1);
    match &design.plan {
        DesignPlan::Shapley { orders, .. } => fx::shapley_sampled(orders, v).map(|vals| {
            (
                vals,
                format!(
                    "Shapley values from {} sampled orders (permutation estimator, Castro et al. 2009), t across orders",
                    orders.len()
                ),
            )
        }),
        DesignPlan::Factorial(d) if d.defining_relation.is_empty() => {
            fx::shapley_exact(obs, k).map(|s| {
                let how = match s.note {
                    Some(n) => format!("exact Shapley values over all 2^{k} configurations; {n}"),
                    None => format!(
                        "exact Shapley values over all 2^{k} configurations; 95% t intervals on {} df",
                        s.df
                    ),
                };
                (s.values, how)
            })
        }
        DesignPlan::Factorial(_) => Err(
            "a fraction does not run every configuration: Shapley values need a full factorial or a shapley matrix"
                .into(),
        ),
    }
}

/// The mean response of each configuration with runs.
fn config_means(obs: &[Obs]) -> Vec<(Word, f64)> {
    let mut sums: std::collections::BTreeMap<Word, (f64, usize)> = Default::default();
    for o in obs {
        let e = sums.entry(o.config).or_default();
        e.0 += o.y;
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(w, (s, n))| (w, s / n as f64))
        .collect()
}

/// An error of the maths layer, its factor letters kept and their names added.
fn names_in(e: &str, names: &[String]) -> String {
    let legend: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={n}", doe::letters(1 << i)))
        .collect();
    format!("{e} ({})", legend.join(", "))
}

/// The effects as Markdown: one table a response, effects then Shapley values.
pub fn to_markdown(all: &[Effects]) -> String {
    let mut s = String::new();
    for e in all {
        s.push_str(&format!(
            "\n## Effects: {} ({} runs, time on the {})\n\n",
            e.matrix,
            e.runs,
            e.clock.label()
        ));
        for line in &e.design {
            s.push_str(&format!("- {line}\n"));
        }
        for a in &e.analyses {
            let (unit, scale) = if a.response == "time" {
                ("s", 1.0)
            } else {
                ("points", 100.0)
            };
            s.push_str(&format!(
                "\n**{}** ({unit}, high − low). {}\n\n",
                a.response, a.method
            ));
            if !a.effects.is_empty() || !a.shapley.is_empty() {
                s.push_str(
                    "| kind | term | estimate | 95% CI | aliased with |\n|---|---|---|---|---|\n",
                );
            }
            let rows = a
                .effects
                .iter()
                .map(|x| {
                    (
                        if x.term.contains('×') {
                            "interaction"
                        } else {
                            "main effect"
                        },
                        x,
                    )
                })
                .chain(a.shapley.iter().map(|x| ("shapley", x)));
            for (kind, x) in rows {
                let ci = if x.lo.is_finite() && x.hi.is_finite() {
                    format!(
                        "[{:+.3}, {:+.3}]{}",
                        scale * x.lo,
                        scale * x.hi,
                        if x.decided() { " *" } else { "" }
                    )
                } else {
                    "no error estimate".into()
                };
                s.push_str(&format!(
                    "| {kind} | {} | {:+.3} | {ci} | {} |\n",
                    x.term,
                    scale * x.estimate,
                    if x.aliases.is_empty() {
                        "-".into()
                    } else {
                        x.aliases.join(", ")
                    }
                ));
            }
            for n in &a.notes {
                s.push_str(&format!("\nnote: {n}\n"));
            }
        }
        s.push_str("\n`*`: the 95% interval excludes 0.\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use crate::store::{ResultsWriter, tests as st};
    use crate::util::splitmix::SplitMix64;

    /// A results folder of a 2^2 factorial with planted effects (tta +4
    /// points and +2 s, lookahead −2 points, no interaction) and seed noise:
    /// the report recovers each within its interval, names the design, and
    /// the Shapley values add up to all-on minus all-off.
    #[test]
    fn a_planted_factorial_is_recovered_by_the_report() {
        let text = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 4\nvary = [\"tta\", \"lookahead\"]\n";
        let m = crate::matrix::parse(text, "m.toml").unwrap();
        let root = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::create(root.path(), "m", text).unwrap();
        let mut rng = SplitMix64(7);
        for rep in 0..4 {
            for (idx, v) in m.variants.iter().enumerate() {
                let c = m.design.as_ref().unwrap().configs[idx];
                let (tta, la) = (f64::from(c & 1), f64::from(c >> 1 & 1));
                let noise = 0.004 * (rng.unit_f64() - 0.5);
                let acc = 0.5 + 0.04 * tta - 0.02 * la + noise;
                // summary(): airbench seconds are 0.9 × the dawn ones.
                let secs = (10.0 + 2.0 * tta + 0.02 * (rng.unit_f64() - 0.5)) / 0.9;
                st::feed(
                    &mut w,
                    st::rid(&v.name, idx, rep),
                    rep as u64,
                    Some(st::summary(acc, secs, None)),
                );
            }
        }
        let dir = w.dir().to_path_buf();
        let r = crate::report::aggregate(&[dir], &Default::default()).unwrap();
        let e = &r.effects[0];
        assert_eq!((e.runs, e.clock), (16, crate::config::Clock::Airbench));
        let find = |resp: &str, term: &str| {
            let a = e.analyses.iter().find(|a| a.response == resp).unwrap();
            a.effects.iter().find(|x| x.term == term).unwrap().clone()
        };
        for (resp, term, truth) in [
            ("accuracy", "tta", 0.04),
            ("accuracy", "lookahead", -0.02),
            ("accuracy", "tta×lookahead", 0.0),
            ("time", "tta", 2.0),
            ("time", "lookahead", 0.0),
        ] {
            let x = find(resp, term);
            assert!(x.lo <= truth && truth <= x.hi, "{resp} {term}: {x:?}");
            assert_eq!(x.decided(), truth != 0.0, "{resp} {term}: {x:?}");
        }
        let acc = e
            .analyses
            .iter()
            .find(|a| a.response == "accuracy")
            .unwrap();
        assert!(acc.method.contains("replicates") && acc.method.contains("exact Shapley"));
        let total: f64 = acc.shapley.iter().map(|s| s.estimate).sum();
        assert!((total - 0.02).abs() < 0.004, "Shapley total {total}");
        let md = r.to_markdown();
        assert!(
            md.contains("## Effects: m") && md.contains("| main effect | tta |"),
            "{md}"
        );
    }
}
