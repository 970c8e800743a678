//! What each trick buys whatever the order (issue 37): for the folders of a
//! factorial, fractional or Shapley matrix, the main effects and two-way
//! interactions with 95% CIs and each factor's Shapley value, for time on
//! the recipe's clock and for accuracy. The maths is `stats` (least
//! squares on ±1 coding, Lenth's pseudo standard error without replicates,
//! Shapley's formula); one lazy polars query per folder selects its runs.

use super::Clock;
use crate::matrix::{Design, DesignPlan};
use crate::stats::design::{self, Word};
use crate::stats::{self as fx, Interval, Obs};
use crate::store::{Ended, Folder, RunRow};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

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
    /// A main effect's or Shapley value's factor as a ladder among the same
    /// folders credits it: the Δ of the rung that adds it alone.
    pub ladder: Option<LadderCredit>,
}

/// What a ladder credits a factor with: its rung's Δ against the rung
/// before (paired by seed where the seeds match), on the same clock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LadderCredit {
    pub matrix: String,
    pub rung: String,
    pub estimate: f64,
    /// The 95% interval (NaN where the rung has too few runs for one).
    pub lo: f64,
    pub hi: f64,
    /// The two intervals do not overlap: the credit depends on the order
    /// the tricks were added in.
    pub order_dependent: bool,
}

impl Analysis {
    /// Both methods in one sentence each, as the tables and the TUI show them.
    pub fn methods(&self) -> String {
        [self.method.as_str(), self.shapley_method.as_str()]
            .into_iter()
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join(". ")
    }
}

impl Estimate {
    fn of(term: String, i: &Interval, aliases: Vec<String>) -> Estimate {
        Estimate {
            term,
            estimate: i.estimate,
            lo: i.lo,
            hi: i.hi,
            aliases,
            ladder: None,
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
    /// How the effects' intervals were made, in words (empty: no effects).
    pub method: String,
    /// How the Shapley values and their intervals were made (empty: none).
    pub shapley_method: String,
    /// Main effects, then two-way interactions (high minus low).
    pub effects: Vec<Estimate>,
    pub shapley: Vec<Estimate>,
    /// The mean response of each configuration with runs, by `config`: the
    /// interaction plot's points and the Shapley waterfall's ends (none and
    /// all on) are drawn from them.
    pub cells: Vec<Cell>,
    /// Why a part could not be estimated (a configuration without runs).
    pub notes: Vec<String>,
}

/// One configuration's runs: how many finished and their mean response.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// Bit i set: factor i (`Effects::factors`) at its high level.
    pub config: Word,
    /// The factors at their high level, by name (a trick on, a setting's
    /// second value), so that the JSON reads without the bit order.
    pub high: Vec<String>,
    pub n: usize,
    pub mean: f64,
}

impl Analysis {
    /// The configuration's cell, if it has runs.
    pub fn cell(&self, config: Word) -> Option<&Cell> {
        self.cells.iter().find(|c| c.config == config)
    }

    /// The mean response at each level of factors `a` and `b`, `[a][b]` with
    /// 0 low and 1 high: the mean of the cell means over the other factors,
    /// the averages the least-squares effects of a balanced design are
    /// differences of. `None` where a combination has no runs.
    pub fn two_way_means(&self, a: usize, b: usize) -> Option<[[f64; 2]; 2]> {
        let mut out = [[0.0; 2]; 2];
        for (la, row) in out.iter_mut().enumerate() {
            for (lb, m) in row.iter_mut().enumerate() {
                let ys: Vec<f64> = self
                    .cells
                    .iter()
                    .filter(|c| {
                        (c.config >> a & 1) as usize == la && (c.config >> b & 1) as usize == lb
                    })
                    .map(|c| c.mean)
                    .collect();
                if ys.is_empty() {
                    return None;
                }
                *m = ys.iter().sum::<f64>() / ys.len() as f64;
            }
        }
        Some(out)
    }
}

/// The effects of one results folder's design.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Effects {
    pub matrix: String,
    pub folder: PathBuf,
    pub clock: Clock,
    /// The factors in the order of a configuration's bits.
    pub factors: Vec<String>,
    /// What `matrix show` says of the design.
    pub design: Vec<String>,
    pub runs: usize,
    /// Of the `runs`, those flagged noisy (none once `--drop-noisy` left them out).
    pub noisy: usize,
    pub analyses: Vec<Analysis>,
}

impl Effects {
    /// The two factors of an interaction's term (`tta×lookahead`), by their
    /// bit; `None` for a main effect or a name not among the factors.
    pub fn pair(&self, term: &str) -> Option<(usize, usize)> {
        let (a, b) = term.split_once('×')?;
        let at = |n: &str| self.factors.iter().position(|f| f == n);
        Some((at(a)?, at(b)?))
    }
}

/// The effects of every folder whose matrix is a designed one, from the
/// design its session recorded.
pub fn analyse(folders: &[Folder], clock: Option<Clock>, drop_noisy: bool) -> Vec<Effects> {
    folders
        .iter()
        .filter_map(|f| {
            let r = f.record()?;
            let design = r.design.as_ref()?;
            let clock = clock.unwrap_or(r.clock);
            Some(folder_effects(f, &r.name, design, clock, drop_noisy))
        })
        .collect()
}

fn folder_effects(
    folder: &Folder,
    matrix: &str,
    design: &Design,
    clock: Clock,
    drop_noisy: bool,
) -> Effects {
    let (time, acc, noisy) = observations(&folder.runs, design, clock, drop_noisy);
    let notes: Vec<String> = Vec::new();
    let runs = time.len();
    let described = partial(design.describe(), &time, design);
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
        folder: folder.dir.clone(),
        clock,
        factors: design.factors.clone(),
        design: described,
        runs,
        noisy,
        analyses,
    }
}

/// The design's words as the runs stand: a factorial not yet run whole
/// cannot estimate every term, and its description does not claim so.
fn partial(mut lines: Vec<String>, obs: &[Obs], design: &Design) -> Vec<String> {
    let mut seen: Vec<Word> = obs.iter().map(|o| o.config).collect();
    seen.sort_unstable();
    seen.dedup();
    let mut planned = design.configs.clone();
    planned.sort_unstable();
    planned.dedup();
    if seen.len() < planned.len() {
        for l in &mut lines {
            if let Some(head) = l.strip_suffix("; every main effect and interaction is estimable") {
                *l = format!(
                    "{head}, {} of them with finished runs so far: the terms below are what those runs can estimate",
                    seen.len()
                );
            }
        }
    }
    lines
}

/// The design's observations among a folder's finished runs (each run
/// once): seconds on `clock` and accuracy with TTA by configuration, and
/// how many of the timed ones were flagged noisy.
fn observations(
    runs: &[RunRow],
    design: &Design,
    clock: Clock,
    drop_noisy: bool,
) -> (Vec<Obs>, Vec<Obs>, usize) {
    let (mut t, mut a, mut k) = (Vec::new(), Vec::new(), 0);
    let done = runs
        .iter()
        .filter(|r| r.status == Ended::Done && !(drop_noisy && r.noisy == Some(true)));
    for r in done {
        let Some(&config) = design.configs.get(r.index as usize) else {
            continue;
        };
        if let Some(s) = r.secs(clock).filter(|s| s.is_finite()) {
            t.push(Obs { config, y: s });
            k += usize::from(r.noisy == Some(true));
        }
        if let Some(x) = r.acc_tta.filter(|x| x.is_finite()) {
            a.push(Obs { config, y: x });
        }
    }
    (t, a, k)
}

fn analysis(response: &str, obs: &[Obs], design: &Design) -> Analysis {
    let names = &design.factors;
    let k = names.len();
    let label = |w: Word| design::word_label(w, names);
    let mut a = Analysis {
        response: response.into(),
        method: String::new(),
        shapley_method: String::new(),
        effects: Vec::new(),
        shapley: Vec::new(),
        cells: cells(obs, names),
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
                // The residual's degrees of freedom: replicates (pure error)
                // and the terms the fit leaves out (lack of fit).
                let configs = config_means(obs).len();
                let pure = obs.len() - configs;
                a.method = match fit.method {
                    fx::ErrorMethod::Replicates { df } => format!(
                        "Least squares on ±1 coding; 95% t intervals from the residual error ({df} df: {pure} from repeats, {} from the terms left out of the fit{})",
                        df.saturating_sub(pure),
                        if pure == 0 {
                            "; no repeats, so the left-out terms are taken as noise"
                        } else {
                            ""
                        }
                    ),
                    fx::ErrorMethod::Lenth { df } => format!(
                        "Least squares on ±1 coding; no replicates: Lenth's pseudo standard error (Lenth 1989), t on {df:.1} df"
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
            a.shapley_method = how;
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
    let v = |w: Word| means.iter().find(|m| m.0 == w).map(|m| m.1);
    match &design.plan {
        DesignPlan::Shapley { orders, .. } => fx::shapley_sampled(orders, v).map(|vals| {
            with_noise(vals, orders, obs, k)
        }),
        DesignPlan::Factorial(d) if d.defining_relation.is_empty() => {
            fx::shapley_exact(obs, k).map(|s| {
                let how = match s.note {
                    Some(n) => format!("Exact Shapley values over all 2^{k} configurations; {n}"),
                    None => format!(
                        "Exact Shapley values over all 2^{k} configurations; 95% t intervals on {} df",
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

/// Sampled orders' Shapley intervals widened by the measurement noise.
/// The t interval across orders (Castro et al. 2009) covers which orders
/// were drawn, not the noise in each configuration's mean: orders that share
/// a configuration share its noise. Each estimate is a linear combination
/// Σ c_S v(S) of configuration means (+1/m at prefix ∪ {i}, −1/m at the
/// prefix, per order), so its noise variance is σ² Σ c_S² / n_S with σ² the
/// pooled within-configuration variance; the two half-widths are added in
/// quadrature (independent sources).
fn with_noise(
    vals: Vec<Interval>,
    orders: &[Vec<usize>],
    obs: &[Obs],
    k: usize,
) -> (Vec<Interval>, String) {
    let m = orders.len() as f64;
    let means = config_means(obs);
    let counts = |w: Word| obs.iter().filter(|o| o.config == w).count() as f64;
    let sse: f64 = obs
        .iter()
        .map(|o| {
            let mean = means.iter().find(|c| c.0 == o.config).map_or(o.y, |c| c.1);
            (o.y - mean).powi(2)
        })
        .sum();
    let df = obs.len() - means.len();
    let mut how = format!(
        "Shapley values from {} sampled orders (permutation estimator, Castro et al. 2009)",
        orders.len()
    );
    if df == 0 {
        how.push_str(
            "; the intervals cover the sampling of orders only (no repeats measure the noise: run repeats)",
        );
        return (vals, how);
    }
    let var = sse / df as f64;
    let t = crate::stats::t95(df);
    let widened = (0..k)
        .zip(vals)
        .map(|(i, iv)| {
            let mut c: std::collections::BTreeMap<Word, f64> = Default::default();
            for o in orders {
                let at = o
                    .iter()
                    .position(|f| *f == i)
                    .expect("every factor in every order");
                let prefix: Word = o[..at].iter().map(|f| 1 << f).sum();
                *c.entry(prefix | 1 << i).or_default() += 1.0 / m;
                *c.entry(prefix).or_default() -= 1.0 / m;
            }
            let noise = t * (var * c.iter().map(|(w, x)| x * x / counts(*w)).sum::<f64>()).sqrt();
            let order = (iv.hi - iv.lo) / 2.0;
            let half = if order.is_finite() {
                order.hypot(noise)
            } else {
                order
            };
            Interval {
                estimate: iv.estimate,
                lo: iv.estimate - half,
                hi: iv.estimate + half,
            }
        })
        .collect();
    how.push_str(&format!(
        "; 95% intervals: t across orders and the repeats' noise ({df} df), added in quadrature"
    ));
    (widened, how)
}

/// The mean response of each configuration with runs.
fn config_means(obs: &[Obs]) -> Vec<(Word, f64, usize)> {
    let mut sums: std::collections::BTreeMap<Word, (f64, usize)> = Default::default();
    for o in obs {
        let e = sums.entry(o.config).or_default();
        e.0 += o.y;
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(w, (s, n))| (w, s / n as f64, n))
        .collect()
}

fn cells(obs: &[Obs], names: &[String]) -> Vec<Cell> {
    config_means(obs)
        .into_iter()
        .map(|(config, mean, n)| Cell {
            config,
            high: design::factors_of(config)
                .into_iter()
                .filter_map(|i| names.get(i).cloned())
                .collect(),
            n,
            mean,
        })
        .collect()
}

/// An error of the maths layer, its factor letters kept and their names added.
fn names_in(e: &str, names: &[String]) -> String {
    let legend: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={n}", design::letters(1 << i)))
        .collect();
    format!("{e} ({})", legend.join(", "))
}

/// One ladder rung: what it adds alone (a trick it turns on, or its name),
/// and its Δ time and Δ accuracy against the rung before.
struct Rung<'a> {
    matrix: &'a str,
    name: &'a str,
    adds: Vec<String>,
    /// What its runs were, beside its tricks ([`scale`]).
    scale: Scale,
    time: Option<&'a super::delta::Delta>,
    acc: Option<&'a super::delta::Delta>,
    clock: Clock,
}

/// What makes a rung's Δ and a design's effect the same question beside
/// their tricks: the recipe, the data, and the scale a variant's runs
/// resolve to (epochs, batch, width), each as (name, value).
type Scale = Vec<(&'static str, String)>;

fn scale(m: &crate::matrix::Record, v: &crate::record::VariantRecord) -> Scale {
    let mut s = vec![("recipe", m.recipe.clone()), ("data", m.data.clone())];
    if let crate::record::Runs::Engine {
        config: Some(c), ..
    } = &v.runs
    {
        s.push(("epochs", c.epochs.to_string()));
        s.push(("batch_size", c.batch_size.to_string()));
        s.push(("width", c.width_mult.to_string()));
    }
    s
}

/// Why a rung of other settings gives a design no credit, in one line.
fn other_settings(r: &Rung, design: &Scale) -> String {
    let differ: Vec<String> = r
        .scale
        .iter()
        .zip(design)
        .filter(|(a, b)| a != b)
        .map(|((k, a), (_, b))| format!("{k} {a} where this design has {b}"))
        .collect();
    format!(
        "{}'s rung «{}» is not credited here: its runs are at other settings ({})",
        r.matrix,
        r.name,
        differ.join(", ")
    )
}

/// Beside each main effect and Shapley value, the credit a ladder among
/// the same folders gives its factor (the rung that adds that trick alone,
/// or the rung of that name for a `[[factor]]` bundle), on the same clock;
/// flagged "order-dependent" where the two intervals do not overlap. A
/// rung run at other settings than the design (another recipe, data set,
/// length, batch or width) answers another question: it is left out, and
/// a note says so.
pub fn add_ladder_credit(all: &mut [Effects], folders: &[Folder], rows: &[super::VariantStats]) {
    let records: Vec<&crate::matrix::Record> = folders.iter().filter_map(Folder::record).collect();
    let ladders = records
        .iter()
        .filter(|m| m.kind == crate::matrix::Kind::Ladder);
    let mut rungs = Vec::new();
    for m in ladders {
        for (i, v) in m.variants.iter().enumerate().skip(1) {
            let before = &m.variants[i - 1].overrides;
            let adds = v
                .overrides
                .iter()
                .filter(|o| !before.contains(o))
                .filter_map(|o| match o {
                    crate::config::Override::Trick { key, on: true } => Some(key.clone()),
                    _ => None,
                })
                .collect();
            if let Some(r) = rows.iter().find(|r| r.matrix == m.name && r.index == i) {
                rungs.push(Rung {
                    matrix: &m.name,
                    name: &v.name,
                    adds,
                    scale: scale(m, v),
                    time: r.delta_time.as_ref(),
                    acc: r.delta_acc.as_ref(),
                    clock: r.headline,
                });
            }
        }
    }
    for e in all.iter_mut() {
        // The scales the design's own runs are at (a factor may be one).
        let mut design: Vec<Scale> = records
            .iter()
            .filter(|m| m.name == e.matrix && m.design.is_some())
            .flat_map(|m| m.variants.iter().map(|v| scale(m, v)))
            .collect();
        design.dedup();
        for a in &mut e.analyses {
            let time = a.response == "time";
            let mut left_out: Vec<String> = Vec::new();
            for x in a.effects.iter_mut().chain(a.shapley.iter_mut()) {
                let credit = rungs.iter().find_map(|r| {
                    let alone = r.adds.len() == 1 && r.adds[0] == x.term;
                    if !(alone || r.name == x.term) || (time && r.clock != e.clock) {
                        return None;
                    }
                    if let Some(first) = design.first()
                        && !design.contains(&r.scale)
                    {
                        left_out.push(other_settings(r, first));
                        return None;
                    }
                    let d = if time { r.time } else { r.acc }?;
                    let apart =
                        x.lo.is_finite() && d.lo.is_finite() && (d.lo > x.hi || x.lo > d.hi);
                    Some(LadderCredit {
                        matrix: r.matrix.to_string(),
                        rung: r.name.to_string(),
                        estimate: d.mean,
                        lo: d.lo,
                        hi: d.hi,
                        order_dependent: apart,
                    })
                });
                x.ladder = credit;
            }
            left_out.dedup();
            a.notes.extend(left_out);
        }
    }
}

/// One row of an effects table: its kind, term, estimate, interval, aliases
/// and a ladder's credit, in `scale`'s units.
/// A signed number with the one minus sign the write-up uses (U+2212), as
/// the variants table's Δ columns print it.
fn signed(v: f64) -> String {
    format!("{v:+.3}").replace('-', "−")
}

/// One effect's row; `noisy`: the folder's runs include noisy ones, so a
/// star is marked where it stands.
fn markdown_row(kind: &str, x: &Estimate, scale: f64, noisy: bool) -> String {
    let ci = if x.lo.is_finite() && x.hi.is_finite() {
        format!(
            "[{}, {}]{}",
            signed(scale * x.lo),
            signed(scale * x.hi),
            match (x.decided(), noisy) {
                (true, true) => " * (noisy)",
                (true, false) => " *",
                _ => "",
            }
        )
    } else {
        "no error estimate".into()
    };
    let ladder = x.ladder.as_ref().map_or_else(
        || "-".to_string(),
        |l| {
            let ci = if l.lo.is_finite() {
                format!(" [{}, {}]", signed(scale * l.lo), signed(scale * l.hi))
            } else {
                String::new()
            };
            let flag = if l.order_dependent {
                " **order-dependent**"
            } else {
                ""
            };
            format!(
                "{}{ci} ({}: {}){flag}",
                signed(scale * l.estimate),
                l.matrix,
                l.rung
            )
        },
    );
    let aliases = if x.aliases.is_empty() {
        "-".into()
    } else {
        x.aliases.join(", ")
    };
    format!(
        "| {kind} | {} | {} | {ci} | {aliases} | {ladder} |\n",
        x.term,
        signed(scale * x.estimate)
    )
}

/// The effects as Markdown: one table a response, effects then Shapley values.
pub fn to_markdown(all: &[Effects]) -> String {
    let mut s = String::new();
    for e in all {
        s.push_str(&format!(
            "\n## Effects: {} ({} runs{}, time on the {})\n\n",
            e.matrix,
            e.runs,
            if e.noisy > 0 {
                format!(", {} noisy", e.noisy)
            } else {
                String::new()
            },
            e.clock.label()
        ));
        if let Some(b) = super::noise_banner(e.noisy, e.runs) {
            s.push_str(&format!("> **Noisy.** {b}\n\n"));
        }
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
                a.response,
                a.methods()
            ));
            if !a.effects.is_empty() || !a.shapley.is_empty() {
                s.push_str(
                    "| kind | term | estimate | 95% CI | aliased with | a ladder's credit |\n|---|---|---|---|---|---|\n",
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
                s.push_str(&markdown_row(kind, x, scale, e.noisy > 0));
            }
            for n in &a.notes {
                s.push_str(&format!("\nnote: {n}\n"));
            }
        }
        s.push_str("\n`*`: the 95% interval excludes 0.\n");
    }
    s
}

/// The columns of [`to_csv`], in order.
pub const CSV_HEADER: &str = "matrix,folder,response,unit,clock,kind,term,estimate,ci_low,ci_high,excludes_0,aliased_with,ladder_matrix,ladder_rung,ladder_estimate,ladder_ci_low,ladder_ci_high,order_dependent,method";

/// A row's kind as a spreadsheet filters on it.
fn kind_of(x: &Estimate, shapley: bool) -> &'static str {
    match (shapley, x.term.contains('×')) {
        (true, _) => "shapley",
        (false, true) => "interaction",
        (false, false) => "main",
    }
}

/// The effects as one rectangular CSV table (`report --format csv --table
/// effects`): a row per main effect, interaction and Shapley value of each
/// response, in the stored units (seconds; accuracy as a fraction, as the
/// variants table has it). A value that does not exist (no interval, no
/// ladder credit) is an empty cell, which pandas and polars read as null:
/// a spreadsheet filters on `kind`, `response` and `excludes_0` directly.
pub fn to_csv(all: &[Effects]) -> String {
    let mut s = format!("{CSV_HEADER}\n");
    let num = crate::util::csv_num;
    let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
    for e in all {
        for a in &e.analyses {
            let time = a.response == "time";
            let rows = a
                .effects
                .iter()
                .map(|x| (x, false))
                .chain(a.shapley.iter().map(|x| (x, true)));
            for (x, shapley) in rows {
                let bounded = x.lo.is_finite() && x.hi.is_finite();
                let l = x.ladder.as_ref();
                let cells = [
                    q(&e.matrix),
                    q(&e.folder.display().to_string()),
                    a.response.clone(),
                    if time { "s" } else { "fraction" }.to_string(),
                    if time { e.clock.name() } else { "" }.to_string(),
                    kind_of(x, shapley).to_string(),
                    q(&x.term),
                    num(x.estimate),
                    num(x.lo),
                    num(x.hi),
                    if bounded {
                        x.decided().to_string()
                    } else {
                        String::new()
                    },
                    q(&x.aliases.join("; ")),
                    l.map_or(String::new(), |l| q(&l.matrix)),
                    l.map_or(String::new(), |l| q(&l.rung)),
                    l.map_or(String::new(), |l| num(l.estimate)),
                    l.map_or(String::new(), |l| num(l.lo)),
                    l.map_or(String::new(), |l| num(l.hi)),
                    l.map_or(String::new(), |l| l.order_dependent.to_string()),
                    q(if shapley {
                        &a.shapley_method
                    } else {
                        &a.method
                    }),
                ];
                s.push_str(&cells.join(","));
                s.push('\n');
            }
        }
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::stats::design::Word;
    use crate::store::{ResultsWriter, tests as st};
    use crate::util::splitmix::SplitMix64;
    use std::path::{Path, PathBuf};

    /// A results folder of the designed matrix `text` under `root`, each
    /// variant run `repeats` times with `y(configuration, rng)` giving the
    /// run's (accuracy, airbench seconds); returns the folder and each
    /// configuration's responses as fed (accuracy with TTA, seconds).
    pub(crate) fn planted(
        root: &Path,
        text: &str,
        repeats: usize,
        y: &dyn Fn(Word, &mut SplitMix64) -> (f64, f64),
    ) -> (PathBuf, Vec<(Word, f64, f64)>) {
        let m = crate::matrix::parse(text, "m.toml").unwrap();
        let mut w = ResultsWriter::create(root, &m.name, text).unwrap();
        // As a session records what it decided.
        w.record_matrix(&m.record()).unwrap();
        let mut rng = SplitMix64(7);
        let mut fed = Vec::new();
        for rep in 0..repeats {
            for (idx, v) in m.variants.iter().enumerate() {
                let c = m.design.as_ref().unwrap().configs[idx];
                let (acc, secs) = y(c, &mut rng);
                // summary(): airbench seconds are 0.9 × the dawn ones, and
                // the accuracy with TTA 0.01 above the one without.
                let s = st::summary(acc - 0.01, secs / 0.9, None);
                fed.push((c, s.acc_tta, s.clocks.airbench_s));
                st::feed(&mut w, st::rid(&v.name, idx, rep), rep as u64, Some(s));
            }
        }
        (w.dir().to_path_buf(), fed)
    }

    #[test]
    fn a_factorial_run_in_part_does_not_claim_every_term_estimable() {
        let text = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nvary = [\"tta\", \"lookahead\"]\n";
        let m = crate::matrix::parse(text, "m.toml").unwrap();
        let d = m.design.unwrap();
        use crate::stats::Obs;
        let obs = |configs: &[Word]| -> Vec<Obs> {
            configs
                .iter()
                .map(|&config| Obs { config, y: 1.0 })
                .collect()
        };
        let whole = super::partial(d.describe(), &obs(&[0, 1, 2, 3]), &d);
        assert!(
            whole
                .iter()
                .any(|l| l.ends_with("every main effect and interaction is estimable"))
        );
        let part = super::partial(d.describe(), &obs(&[0, 1, 1, 2]), &d);
        assert!(
            !part.iter().any(|l| l.contains("every main effect")),
            "{part:?}"
        );
        assert!(
            part.iter()
                .any(|l| l.contains("4 configurations, 3 of them with finished runs so far")),
            "{part:?}"
        );
    }

    /// A results folder of a 2^2 factorial with planted effects (tta +4
    /// points and +2 s, lookahead −2 points, no interaction) and seed noise:
    /// the report recovers each within its interval, names the design, and
    /// the Shapley values add up to all-on minus all-off.
    #[test]
    fn a_planted_factorial_is_recovered_by_the_report() {
        let text = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 4\nvary = [\"tta\", \"lookahead\"]\n";
        let root = tempfile::tempdir().unwrap();
        let (dir, _) = planted(root.path(), text, 4, &|c, rng| {
            let (tta, la) = (f64::from(c & 1), f64::from(c >> 1 & 1));
            let noise = 0.004 * (rng.unit_f64() - 0.5);
            let acc = 0.5 + 0.04 * tta - 0.02 * la + noise;
            let secs = 10.0 + 2.0 * tta + 0.02 * (rng.unit_f64() - 0.5);
            (acc, secs)
        });
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
        assert!(
            acc.method.contains("12 from repeats") && acc.shapley_method.contains("Exact Shapley"),
            "{}",
            acc.methods()
        );
        let total: f64 = acc.shapley.iter().map(|s| s.estimate).sum();
        assert!((total - 0.02).abs() < 0.004, "Shapley total {total}");
        let md = r.to_markdown();
        assert!(
            md.contains("## Effects: m") && md.contains("| main effect | tta |"),
            "{md}"
        );
    }
    /// A folder keeps its analysis when a later version renames a trick its
    /// matrix file names: the report reads the record the session wrote,
    /// not today's parser. A folder without a record whose matrix no longer
    /// parses says so in one line naming it, and still shows its runs.
    #[test]
    fn a_renamed_trick_keeps_the_effects_its_session_recorded() {
        let text = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 2\nvary = [\"tta\", \"lookahead\"]\n";
        let root = tempfile::tempdir().unwrap();
        let (dir, _) = planted(root.path(), text, 2, &|c, rng| {
            let noise = 0.004 * (rng.unit_f64() - 0.5);
            (0.5 + 0.04 * f64::from(c & 1) + noise, 10.0 + noise)
        });
        let before = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default())
            .unwrap()
            .to_markdown();
        // A later version renamed `tta`: the recorded matrix file no longer parses.
        let path = dir.join("manifest.json");
        let mut manifest = crate::store::read_manifest(&dir).unwrap();
        manifest["matrix_file"] = text.replace("\"tta\"", "\"test_time_augmentation\"").into();
        crate::util::write_atomic(&path, manifest.to_string().as_bytes()).unwrap();
        assert!(crate::matrix::parse(manifest["matrix_file"].as_str().unwrap(), "m").is_err());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        assert_eq!(r.effects.len(), 1);
        assert_eq!(r.to_markdown(), before);
        // Without its record (a folder of an older version), the one upgrade
        // fails and the report says so, naming the folder.
        manifest.as_object_mut().unwrap().remove("record");
        crate::util::write_atomic(&path, manifest.to_string().as_bytes()).unwrap();
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        assert!(r.effects.is_empty());
        assert_eq!(r.notes.len(), 1);
        let label = crate::store::session_label(&dir);
        assert!(
            r.notes[0].starts_with(&label)
                && r.notes[0].contains("no longer reads")
                && r.notes[0].contains("test_time_augmentation")
                && !r.notes[0].contains('\n'),
            "{}",
            r.notes[0]
        );
        let md = r.to_markdown();
        assert!(md.contains(&format!("> **Note.** {label}")), "{md}");
        assert_eq!(r.rows.len(), 4, "the runs are all still shown");
    }

    /// Sampled orders of an additive truth: every order credits each trick
    /// with the same amount, so the spread across orders is only the noise
    /// the orders share through their configurations' means. The intervals
    /// must carry that noise (from the repeats) to cover the planted values.
    #[test]
    fn sampled_shapley_intervals_carry_the_measurement_noise() {
        let text = "name = \"s\"\nrecipe = \"tiny-airbench94\"\nkind = \"shapley\"\norders = 6\nrepeats = 3\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n";
        let m = crate::matrix::parse(text, "s.toml").unwrap();
        let truth = [0.04, 0.0, -0.02];
        let mut covered = 0;
        for folder in 0..20u64 {
            let root = tempfile::tempdir().unwrap();
            let mut rng = SplitMix64(100 + folder);
            let mut runs = Vec::new();
            for rep in 0..3 {
                for idx in 0..m.variants.len() {
                    let c = m.design.as_ref().unwrap().configs[idx];
                    let mean: f64 = (0..3).map(|i| truth[i] * f64::from(c >> i & 1)).sum();
                    // Sums of uniforms: sd about 0.01.
                    let noise = 0.01 * ((0..12).map(|_| rng.unit_f64()).sum::<f64>() - 6.0);
                    let s = st::summary(0.5 + mean + noise, 10.0, None);
                    runs.push((idx, rep, rep as u64, s));
                }
            }
            let dir = st::folder_of_runs(root.path(), text, &runs);
            let r = crate::report::aggregate(&[dir], &Default::default()).unwrap();
            let acc = r.effects[0]
                .analyses
                .iter()
                .find(|a| a.response == "accuracy")
                .unwrap();
            assert!(
                acc.shapley_method.contains("repeats' noise"),
                "{}",
                acc.shapley_method
            );
            covered += acc
                .shapley
                .iter()
                .zip(truth)
                .filter(|(s, t)| s.lo <= *t && *t <= s.hi)
                .count();
        }
        // 60 intervals at 95% (conservative: the quadrature sum): at least 54.
        assert!(
            covered >= 54,
            "{covered} of 60 intervals cover the planted values"
        );
    }

    /// Each configuration's cell is the mean of the responses fed to it, the
    /// two-way means average the cells over the third factor, the Shapley
    /// values climb from the all-off cell to the all-on one, and the JSON
    /// carries the cells and the factors.
    #[test]
    fn cells_are_each_configurations_mean_response() {
        let text = "name = \"m3\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 2\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n";
        let root = tempfile::tempdir().unwrap();
        let (dir, fed) = planted(root.path(), text, 2, &|c, rng| {
            let on = |i: u32| f64::from(c >> i & 1);
            let acc = 0.5 + 0.03 * on(0) + 0.02 * on(0) * on(1) + 0.01 * rng.unit_f64();
            (acc, 10.0 + on(2) + rng.unit_f64())
        });
        let r = crate::report::aggregate(&[dir], &Default::default()).unwrap();
        let e = &r.effects[0];
        assert_eq!(e.factors, ["tta", "lookahead", "label_smoothing"]);
        assert_eq!(e.pair("tta×label_smoothing"), Some((0, 2)));
        assert_eq!((e.pair("tta"), e.pair("tta×nope")), (None, None));
        let mean = |c: Word, acc: bool| {
            let ys: Vec<f64> = fed
                .iter()
                .filter(|f| f.0 == c)
                .map(|f| if acc { f.1 } else { f.2 })
                .collect();
            ys.iter().sum::<f64>() / ys.len() as f64
        };
        for a in &e.analyses {
            let acc = a.response == "accuracy";
            assert_eq!(a.cells.len(), 8, "{}", a.response);
            for c in &a.cells {
                assert_eq!(c.n, 2);
                assert!((c.mean - mean(c.config, acc)).abs() < 1e-9, "{c:?}");
            }
            assert_eq!(a.cell(0b101).unwrap().high, ["tta", "label_smoothing"]);
            assert!(a.cell(0).unwrap().high.is_empty());
            // tta and lookahead both high: the mean over label smoothing's two levels.
            let m = a.two_way_means(0, 1).unwrap();
            let want = (mean(0b011, acc) + mean(0b111, acc)) / 2.0;
            assert!((m[1][1] - want).abs() < 1e-9, "{m:?}");
            let want = (mean(0b010, acc) + mean(0b110, acc)) / 2.0;
            assert!((m[0][1] - want).abs() < 1e-9, "{m:?}");
            let total: f64 = a.shapley.iter().map(|s| s.estimate).sum();
            let ends = a.cell(0b111).unwrap().mean - a.cell(0).unwrap().mean;
            assert!((total - ends).abs() < 1e-9, "{total} {ends}");
        }
        let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        let cell = &json["effects"][0]["analyses"][1]["cells"][3];
        assert_eq!(cell["config"], 3);
        assert_eq!(cell["high"], serde_json::json!(["tta", "lookahead"]));
        assert_eq!(json["effects"][0]["factors"][2], "label_smoothing");
    }

    /// A 2^2 factorial of tta (+4 points) and lookahead (nothing) under
    /// `root`, and a ladder whose second rung adds tta alone for +10 points
    /// (its seconds the same throughout): the folders of both.
    pub(crate) fn factorial_and_ladder(root: &Path) -> [PathBuf; 2] {
        factorial_and_ladder_at(root, 3)
    }

    /// The same, the ladder run at `epochs` (the factorial at the recipe's 3).
    fn factorial_and_ladder_at(root: &Path, epochs: u32) -> [PathBuf; 2] {
        let fac = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 3\nvary = [\"tta\", \"lookahead\"]\n";
        let (fac_dir, _) = planted(root, fac, 3, &|c, rng| {
            (0.5 + 0.04 * f64::from(c & 1) + 0.002 * rng.unit_f64(), 10.0)
        });
        let lad = format!(
            "name = \"lad\"\nrecipe = \"tiny-airbench94\"\nkind = \"ladder\"\nrepeats = 3\n[[rung]]\nname = \"base\"\nset = {{ epochs = {epochs} }}\n[[rung]]\nname = \"+ tta\"\non = [\"tta\"]\n"
        );
        let mut w = ResultsWriter::create(root, "lad", &lad).unwrap();
        for rep in 0..3 {
            for (idx, (name, acc)) in [("base", 0.5), ("+ tta", 0.6)].into_iter().enumerate() {
                let run = crate::events::RunId {
                    matrix: "lad".into(),
                    index: idx,
                    variant: name.into(),
                    repeat: rep,
                };
                let acc = acc + 0.001 * rep as f64;
                st::feed(&mut w, run, rep as u64, Some(st::summary(acc, 10.0, None)));
            }
        }
        [fac_dir, w.dir().to_path_buf()]
    }

    /// A ladder among the same folders credits tta with +10 points where the
    /// factorial's main effect and Shapley value say +4: both are shown, and
    /// the disagreement is flagged; lookahead, which no rung adds alone, has
    /// no ladder credit.
    #[test]
    fn a_ladders_credit_is_shown_and_flagged_when_it_disagrees() {
        let root = tempfile::tempdir().unwrap();
        let dirs = factorial_and_ladder(root.path());
        let r = crate::report::aggregate(&dirs, &Default::default()).unwrap();
        let acc = r.effects[0]
            .analyses
            .iter()
            .find(|a| a.response == "accuracy")
            .unwrap();
        for x in acc
            .effects
            .iter()
            .chain(&acc.shapley)
            .filter(|x| x.term == "tta")
        {
            let l = x.ladder.as_ref().expect("the ladder's rung adds tta alone");
            assert_eq!((l.matrix.as_str(), l.rung.as_str()), ("lad", "+ tta"));
            assert!(
                (l.estimate - 0.1).abs() < 1e-9 && l.order_dependent,
                "{x:?}"
            );
        }
        let la = acc.effects.iter().find(|x| x.term == "lookahead").unwrap();
        assert!(la.ladder.is_none());
        let md = r.to_markdown();
        assert!(md.contains("(lad: + tta) **order-dependent**"), "{md}");
    }

    /// A ladder run at 2 epochs beside a factorial at 3 asks another
    /// question: its rung credits nothing, and the note says why.
    #[test]
    fn a_ladder_at_other_settings_is_not_credited_and_a_note_says_so() {
        let root = tempfile::tempdir().unwrap();
        let dirs = factorial_and_ladder_at(root.path(), 2);
        let r = crate::report::aggregate(&dirs, &Default::default()).unwrap();
        for a in &r.effects[0].analyses {
            assert!(
                a.effects
                    .iter()
                    .chain(&a.shapley)
                    .all(|x| x.ladder.is_none()),
                "{a:?}"
            );
        }
        let md = r.to_markdown();
        assert!(
            md.contains("note: lad's rung «+ tta» is not credited here: its runs are at other settings (epochs 2 where this design has 3)"),
            "{md}"
        );
        assert!(!md.contains("(lad: + tta)"), "{md}");
    }

    /// The effects CSV is one rectangular table polars reads with typed
    /// columns: a row per effect and Shapley value of each response, each
    /// estimate and interval as the report holds it, the ladder's credit in
    /// its own columns where a rung adds the factor alone (empty elsewhere),
    /// and a quoted term or method with a comma in it kept whole.
    #[test]
    fn the_effects_csv_is_one_table_a_row_an_estimate() {
        use polars::prelude::DataType;
        use polars_io::prelude::{CsvReadOptions, SerReader};
        let root = tempfile::tempdir().unwrap();
        let dirs = factorial_and_ladder(root.path());
        let r = crate::report::aggregate(&dirs, &Default::default()).unwrap();
        let csv = r.to_effects_csv();
        let path = root.path().join("effects.csv");
        std::fs::write(&path, &csv).unwrap();
        let df = CsvReadOptions::default()
            .with_has_header(true)
            .try_into_reader_with_file_path(Some(path))
            .unwrap()
            .finish()
            .unwrap();
        let cols: Vec<String> = df
            .get_column_names()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(cols.join(","), super::CSV_HEADER);
        // Two responses × (2 main effects + 1 interaction + 2 Shapley values).
        assert_eq!(df.height(), 10, "{csv}");
        let text = |c: &str| -> Vec<String> {
            let col = df.column(c).unwrap().cast(&DataType::String).unwrap();
            col.str()
                .unwrap()
                .iter()
                .map(|v| v.unwrap_or("").to_string())
                .collect()
        };
        let float = |c: &str| -> Vec<Option<f64>> {
            let col = df.column(c).unwrap();
            assert_eq!(col.dtype(), &DataType::Float64, "{c}");
            col.f64().unwrap().iter().collect()
        };
        let flag = |c: &str| -> Vec<Option<bool>> {
            let col = df.column(c).unwrap();
            assert_eq!(col.dtype(), &DataType::Boolean, "{c}");
            col.bool().unwrap().iter().collect()
        };
        let (kind, term, response) = (text("kind"), text("term"), text("response"));
        let (est, lo, hi) = (float("estimate"), float("ci_low"), float("ci_high"));
        let (excl, dep, credit) = (
            flag("excludes_0"),
            flag("order_dependent"),
            float("ladder_estimate"),
        );
        let want_kinds = ["main", "main", "interaction", "shapley", "shapley"];
        let acc = &r.effects[0].analyses[1];
        for (i, x) in acc.effects.iter().chain(&acc.shapley).enumerate() {
            let row = 5 + i;
            assert_eq!(
                (response[row].as_str(), kind[row].as_str(), &term[row]),
                ("accuracy", want_kinds[i], &x.term)
            );
            assert_eq!(
                (est[row], lo[row], hi[row]),
                (Some(x.estimate), Some(x.lo), Some(x.hi))
            );
            assert_eq!(excl[row], Some(x.decided()));
            // tta's main effect and Shapley value carry the rung's +10
            // points, flagged; the others nothing.
            if x.term == "tta" {
                assert_eq!(text("ladder_rung")[row], "+ tta");
                assert!((credit[row].unwrap() - 0.1).abs() < 1e-9);
                assert_eq!(dep[row], Some(true));
            } else {
                assert_eq!((credit[row], dep[row]), (None, None), "{}", x.term);
            }
        }
        assert_eq!(text("unit")[0], "s");
        assert_eq!(text("clock")[0], "airbench");
        assert!(text("method")[0].starts_with("Least squares on ±1 coding"));
        assert!(text("method")[3].starts_with("Exact Shapley values"));
    }
}
