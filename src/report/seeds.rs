//! How many seeds a question needs, and where `until_decided` stopped
//! (issue 37, item 3). From the measured spread of a results folder, for
//! each difference its matrix asks about (`Matrix::asked`: each rung against
//! the previous, each add-one or leave-one-out variant against its
//! reference, each effect of a design), the seeds that resolve a Δ at 80%
//! power and two-sided α = 0.05 by the noncentral t (`stats`):
//! pairs where the folder's seeds match across the pair, else seeds a side
//! at the pooled sd, or replicates of the whole design. `matrix show
//! --power` prints it; the report's "Seeds needed" section is the same.
//! For a matrix with `until_decided`, the verdict of each question at the
//! folder's last look, and which stayed open.

use super::Clock;
use crate::matrix::{Asked, Decision, Precision, Record, Response, Sample};
use crate::stats::{self as fx, Matched, Obs};
use crate::store::Folder;
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The power every row is computed for.
pub const POWER: f64 = 0.8;
/// The two-sided level of the test the power is for.
pub const ALPHA: f64 = 0.05;
/// The time difference to resolve by default: this share of the
/// reference's mean time (of the design's mean for an effect).
pub const DEFAULT_TIME_SHARE: f64 = 0.05;
/// The accuracy difference to resolve by default (0.5 points).
pub const DEFAULT_ACC: f64 = 0.005;

/// The differences to resolve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Deltas {
    /// Seconds; `None`: [`DEFAULT_TIME_SHARE`] of the reference's mean time.
    pub time_s: Option<f64>,
    /// Accuracy as a fraction.
    pub acc: f64,
}

impl Default for Deltas {
    fn default() -> Self {
        Deltas {
            time_s: None,
            acc: DEFAULT_ACC,
        }
    }
}

/// How a row's seeds were computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Paired t on the per-seed differences: pairs of runs.
    Paired,
    /// Two-sample t at the pooled sd: seeds a side.
    TwoSample,
    /// Replicates of the whole design at its pure-error (or residual) sd.
    DesignReplicates,
}

/// One response of one row: the measured spread and what it needs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Need {
    /// The standard deviation the test works with (see [`Method`]).
    pub sd: Option<f64>,
    /// The difference to resolve, in the response's units.
    pub delta: f64,
    /// Seeds (pairs, a side, or design replicates); `None` with `over_max`
    /// past [`super::compare::MAX_MORE_RUNS`], else for want of a spread.
    pub seeds: Option<usize>,
    pub over_max: bool,
}

/// One asked difference, or every effect of a design.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub question: String,
    pub method: Option<Method>,
    /// Pairs, the smaller side's runs, or the design's runs, as measured.
    pub n: usize,
    pub time: Option<Need>,
    pub accuracy: Option<Need>,
    /// Why there is no row of numbers, where there is none.
    pub note: Option<String>,
}

/// Where `until_decided` stands in a folder.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decided {
    /// The option in words (margins, rounds, looks, Bonferroni over looks).
    pub rule: String,
    /// Seeds a variant the folder ran, and the most the option allows.
    pub rounds: usize,
    pub max: usize,
    /// The look those rounds make (`None` before the first).
    pub look: Option<usize>,
    pub looks: usize,
    /// Each question's verdict at that look.
    pub decisions: Vec<Decision>,
    /// Each interval's width against the widest asked (`width_time`,
    /// `width_acc`), at the same look.
    pub precisions: Vec<Precision>,
    /// Whether it asks for verdicts (`time`, `acc`), and for widths.
    pub decides: bool,
    pub widths: bool,
}

impl Decided {
    /// What is still open: undecided questions, then intervals wider than asked.
    pub fn open(&self) -> Vec<String> {
        crate::matrix::still_open(&self.decisions, &self.precisions)
    }
}

/// The seeds one folder's questions need.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Seeds {
    pub matrix: String,
    pub folder: PathBuf,
    pub clock: Clock,
    /// Finished runs counted; of the runs flagged noisy, those left out (re-run,
    /// or `--drop-noisy`) and those counted.
    pub runs: usize,
    pub left_out: usize,
    pub noisy_counted: usize,
    pub deltas: Deltas,
    pub rows: Vec<Row>,
    pub until_decided: Option<Decided>,
}

/// A folder's finished runs per variant of `m` (matched by name), counted
/// as `until_decided` counts them: a noisy run whose seed the variant ran
/// again is left out (every noisy run with `drop_noisy`). Also the noisy
/// runs left out and those counted.
fn counted(
    folder: &Folder,
    m: &Record,
    clock: Clock,
    drop_noisy: bool,
) -> Result<(BTreeMap<usize, Vec<Sample>>, usize, usize)> {
    let rows = &folder.runs;
    if let Some(other) = rows.iter().map(|r| &r.matrix).find(|n| **n != m.name) {
        anyhow::bail!(
            "{} holds runs of matrix `{other}`, not `{}`; pass that matrix's own results folder (or its --tiny form for a `-tiny` folder)",
            folder.dir.display(),
            m.name
        );
    }
    // The folder holds each run once, as its last row.
    let mut last: BTreeMap<(String, u32), &crate::store::RunRow> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.status == crate::store::Ended::Done)
    {
        last.insert((r.variant.clone(), r.repeat), r);
    }
    let rerun = |r: &crate::store::RunRow| {
        last.values()
            .any(|o| o.variant == r.variant && o.seed == r.seed && o.repeat > r.repeat)
    };
    let (mut runs, mut left_out, mut noisy_counted) = (BTreeMap::<usize, Vec<Sample>>::new(), 0, 0);
    for r in last.values() {
        let Some(index) = m.variants.iter().position(|v| v.name == r.variant) else {
            continue;
        };
        if r.noisy == Some(true) {
            if drop_noisy || rerun(r) {
                left_out += 1;
                continue;
            }
            noisy_counted += 1;
        }
        runs.entry(index).or_default().push(Sample {
            seed: r.seed,
            secs: r.secs(clock).unwrap_or(f64::NAN),
            acc: r.acc_tta.unwrap_or(f64::NAN),
        });
    }
    Ok((runs, left_out, noisy_counted))
}

/// The seeds `m`'s questions need from folder `dir`'s spread, and where its
/// `until_decided` stands.
pub fn seeds(
    folder: &Folder,
    m: &Record,
    clock: Clock,
    deltas: Deltas,
    drop_noisy: bool,
) -> Result<Seeds> {
    let (runs, left_out, noisy_counted) = counted(folder, m, clock, drop_noisy)?;
    let rows = match &m.design {
        Some(_) => vec![design_row(m, &runs, deltas)],
        None => m
            .asked()
            .iter()
            .map(|a| pair_row(m, a, &runs, deltas))
            .collect(),
    };
    let until_decided = m.until_decided.map(|u| {
        let rounds = runs
            .values()
            .flatten()
            .map(|s| s.seed)
            .collect::<BTreeSet<_>>();
        let look = u.look_at(rounds.len());
        Decided {
            rule: crate::matrix::until_words(&u),
            rounds: rounds.len(),
            max: u.max,
            look,
            looks: u.looks(),
            decisions: look.map_or_else(Vec::new, |l| crate::matrix::decide_all(m, &u, &runs, l)),
            precisions: look.map_or_else(Vec::new, |_| crate::matrix::precision_all(m, &u, &runs)),
            decides: u.decides(),
            widths: u.widths(),
        }
    });
    Ok(Seeds {
        matrix: m.name.clone(),
        folder: folder.dir.clone(),
        clock,
        runs: runs.values().map(Vec::len).sum(),
        left_out,
        noisy_counted,
        deltas,
        rows,
        until_decided,
    })
}

/// The seeds `seeds_for` gives at the largest number compare advises.
fn need(sd: Option<f64>, delta: f64, seeds_for: impl Fn(usize) -> Option<usize>) -> Need {
    let max = super::compare::MAX_MORE_RUNS;
    let seeds = seeds_for(max);
    Need {
        sd,
        delta,
        seeds,
        over_max: seeds.is_none() && sd.is_some_and(|s| s > 0.0) && delta != 0.0,
    }
}

fn mean(xs: &[(u64, f64)]) -> f64 {
    xs.iter().map(|x| x.1).sum::<f64>() / xs.len() as f64
}

/// One pair's row: paired or two-sample, as its seeds fall.
fn pair_row(m: &Record, a: &Asked, runs: &BTreeMap<usize, Vec<Sample>>, deltas: Deltas) -> Row {
    let Asked::Pair { reference, variant } = *a else {
        unreachable!("a matrix without a design asks pairs")
    };
    let values = |i: usize, r: Response| -> Vec<(u64, f64)> {
        let all = runs.get(&i).into_iter().flatten();
        all.map(|s| (s.seed, r.of(s)))
            .filter(|x| x.1.is_finite())
            .collect()
    };
    let mut row = Row {
        question: a.label(m),
        method: None,
        n: 0,
        time: None,
        accuracy: None,
        note: None,
    };
    let few = [reference, variant]
        .into_iter()
        .find(|&i| values(i, Response::Accuracy).len() < 2);
    if let Some(i) = few {
        let n = values(i, Response::Accuracy).len();
        row.note = Some(format!(
            "{n} counted run{} of `{}`: under 2, no spread to measure; run 2 or more seeds",
            if n == 1 { "" } else { "s" },
            m.variants[i].name
        ));
        return row;
    }
    for r in [Response::Time, Response::Accuracy] {
        let (base, this) = (values(reference, r), values(variant, r));
        let Some(matched) = fx::match_by_seed(&base, &this) else {
            continue;
        };
        let delta = match r {
            Response::Time => deltas.time_s.unwrap_or(DEFAULT_TIME_SHARE * mean(&base)),
            Response::Accuracy => deltas.acc,
        };
        row.method = Some(if matched.is_paired() {
            Method::Paired
        } else {
            Method::TwoSample
        });
        row.n = matched.n();
        let sd = matched.spread();
        let n = need(sd, delta, |max| {
            Matched::seeds_needed(&matched, delta, ALPHA, POWER, max)
        });
        match r {
            Response::Time => row.time = Some(n),
            Response::Accuracy => row.accuracy = Some(n),
        }
    }
    row
}

/// The design's row: every effect of a two-level design has the same
/// standard error 2σ/√N (Montgomery §6.4), so one number of replicates
/// (`stats::replicates_for_effect`) serves them all.
fn design_row(m: &Record, runs: &BTreeMap<usize, Vec<Sample>>, deltas: Deltas) -> Row {
    let design = m.design.as_ref().expect("a designed matrix");
    let asked = m.asked();
    let names: Vec<String> = asked.iter().map(|a| a.label(m)).collect();
    let mut row = Row {
        question: format!("each effect ({})", names.join(", ")),
        method: Some(Method::DesignReplicates),
        n: runs.values().map(Vec::len).sum(),
        time: None,
        accuracy: None,
        note: None,
    };
    if asked.is_empty() {
        row.question = "each Shapley value".into();
        row.method = None;
        row.note = Some("a shapley matrix's intervals come from its sampled orders, not its seeds: more `orders` narrow them".into());
        return row;
    }
    let terms: Vec<_> = design.terms().into_iter().map(|t| t.0).collect();
    for r in [Response::Time, Response::Accuracy] {
        let obs: Vec<Obs> = runs
            .iter()
            .filter_map(|(i, ss)| Some((*design.configs.get(*i)?, ss)))
            .flat_map(|(config, ss)| ss.iter().map(move |s| Obs { config, y: r.of(s) }))
            .filter(|o| o.y.is_finite())
            .collect();
        // Pure error where a configuration ran twice; else the residual of
        // the main effects and two-way interactions, where it has d.f.
        let fit = fx::fit(&obs, design.factors.len(), &terms).ok();
        let sigma = fx::pure_error(&obs)
            .map(|p| p.0)
            .or_else(|| fit.as_ref().and_then(|f| f.sigma));
        if fx::pure_error(&obs).is_none() {
            row.note = Some(match sigma {
                Some(_) => "no configuration ran twice: σ from the residuals of the main effects and two-way interactions, not from replicates".into(),
                None => "no configuration ran twice and the fit leaves no residual: no spread to measure; run 2 or more seeds".into(),
            });
        }
        let delta = match r {
            Response::Time => deltas
                .time_s
                .unwrap_or_else(|| DEFAULT_TIME_SHARE * fit.as_ref().map_or(f64::NAN, |f| f.mean)),
            Response::Accuracy => deltas.acc,
        };
        let n = need(sigma, delta, |max| {
            sigma.and_then(|s| {
                fx::replicates_for_effect(delta, s, design.configs.len(), ALPHA, POWER, max)
            })
        });
        match r {
            Response::Time => row.time = Some(n),
            Response::Accuracy => row.accuracy = Some(n),
        }
    }
    row
}

/// The seeds of every folder whose session's record reads.
pub fn analyse(folders: &[Folder], clock: Option<Clock>, drop_noisy: bool) -> Vec<Seeds> {
    folders
        .iter()
        .filter_map(|f| {
            let m = f.record()?;
            seeds(
                f,
                m,
                clock.unwrap_or(m.clock),
                Deltas::default(),
                drop_noisy,
            )
            .ok()
        })
        .collect()
}

/// A value of `r` in its unit: seconds, or accuracy in points.
fn amount(r: Response, x: f64) -> String {
    match r {
        // Three decimals, or three significant figures below 0.01 s: a tiny
        // net's widths are a few ms, which "0.000 s" would hide.
        Response::Time => {
            let decimals = if x.is_finite() && x != 0.0 && x.abs() < 0.01 {
                (2 - x.abs().log10().floor() as i32).clamp(3, 9) as usize
            } else {
                3
            };
            format!("{x:.decimals$} s")
        }
        Response::Accuracy => format!("{:.2} points", 100.0 * x),
    }
}

/// `sd 0.031 s → 3 seeds for Δ 0.250 s`, or why there is no count.
fn need_words(n: Option<&Need>, r: Response, method: Option<Method>) -> String {
    let Some(n) = n else {
        return "-".into();
    };
    let unit = match method {
        Some(Method::Paired) => "seeds",
        Some(Method::TwoSample) => "seeds a side",
        Some(Method::DesignReplicates) => "replicates",
        None => "",
    };
    let count = match (n.seeds, n.over_max) {
        (Some(k), _) => format!("{k} {unit}"),
        (None, true) => format!("over {} {unit}", super::compare::MAX_MORE_RUNS),
        (None, false) => "no count".into(),
    };
    match n.sd {
        Some(sd) if sd > 0.0 => format!(
            "sd {} → {count} for Δ {}",
            amount(r, sd),
            amount(r, n.delta)
        ),
        Some(_) => "sd 0: every difference equal, no spread to measure".into(),
        None => "no spread to measure".into(),
    }
}

/// `paired, 3 seeds`: how a row was computed and from how much.
fn method_words(row: &Row) -> String {
    match row.method {
        Some(Method::Paired) => format!("paired, {} seeds", row.n),
        Some(Method::TwoSample) => format!("two-sample, {} runs a side", row.n),
        Some(Method::DesignReplicates) => format!("design replicates, {} runs", row.n),
        None => "-".into(),
    }
}

/// What was counted and the Δs asked: the header both forms share.
fn counted_words(s: &Seeds) -> String {
    let time = match s.deltas.time_s {
        Some(t) => format!("{t} s"),
        None => format!(
            "{:.0}% of the reference's mean time (of the design's mean for an effect)",
            100.0 * DEFAULT_TIME_SHARE
        ),
    };
    let mut parts = vec![format!("{} finished runs counted", s.runs)];
    if s.noisy_counted > 0 {
        parts.push(format!(
            "{} of them flagged noisy (counted: their seed did not run again)",
            s.noisy_counted
        ));
    }
    if s.left_out > 0 {
        parts.push(format!(
            "{} noisy runs left out (their seed ran again, or --drop-noisy)",
            s.left_out
        ));
    }
    format!(
        "{}; time on the {}; Δ time {time}, Δ accuracy {:.2} points",
        parts.join(", "),
        s.clock.label(),
        100.0 * s.deltas.acc
    )
}

/// `matrix show --power` as text: one line a question.
pub fn to_text(s: &Seeds) -> String {
    let mut out = format!(
        "{}: seeds to resolve each Δ at {:.0}% power, two-sided α = {ALPHA} (noncentral t), from {}: {}\n",
        s.matrix,
        100.0 * POWER,
        s.folder.display(),
        counted_words(s)
    );
    for row in &s.rows {
        let line = match (&row.note, row.method) {
            (Some(note), None) => format!("  {}: {note}", row.question),
            (note, _) => format!(
                "  {}: {}; time {}; accuracy {}{}",
                row.question,
                method_words(row).replacen(", ", " over ", 1),
                need_words(row.time.as_ref(), Response::Time, row.method),
                need_words(row.accuracy.as_ref(), Response::Accuracy, row.method),
                note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(d) = &s.until_decided {
        out.push_str(&format!("  until_decided: {}\n", decided_line(d)));
    }
    out
}

/// Where `until_decided` stands, in one sentence.
fn decided_line(d: &Decided) -> String {
    let Some(look) = d.look else {
        return format!(
            "{} counted seeds a variant so far: no look yet (the first comes after {} rounds)",
            d.rounds,
            d.max + 1 - d.looks
        );
    };
    let names = d.open();
    let open = &names;
    match (open.is_empty(), d.rounds >= d.max) {
        (true, _) => format!(
            "{} after {} seeds a variant (look {look} of {})",
            match (d.decides, d.widths) {
                (true, true) => "every asked Δ decided and every interval as narrow as asked",
                (false, true) => "every interval as narrow as asked",
                _ => "every asked Δ decided",
            },
            d.rounds,
            d.looks
        ),
        (false, true) => format!(
            "{} stayed open at the budget of {} seeds a variant: {}",
            open.len(),
            d.max,
            names.join(", ")
        ),
        (false, false) => format!(
            "{} open after {} seeds a variant (look {look} of {}; the session stopped before max = {}: `run --resume` goes on): {}",
            open.len(),
            d.rounds,
            d.looks,
            d.max,
            names.join(", ")
        ),
    }
}

/// The report's "Seeds needed" sections (and "Run until decided" where a
/// matrix has it), one a folder.
pub fn to_markdown(all: &[Seeds]) -> String {
    let mut s = String::new();
    for f in all {
        s.push_str(&format!(
            "\n## Seeds needed: {}\n\nSeeds to resolve each Δ at {:.0}% power, two-sided α = {ALPHA}, by the noncentral t, from this folder's spread: {}. *Paired* where both variants ran the same seeds (the sd of the per-seed differences), else *two-sample* at the pooled sd; a design's effects need replicates of the whole design. Other Δs: `tricklab matrix show FILE --power FOLDER --delta-time S --delta-acc P`. (`compare`'s \"more runs a side\" is what narrows an interval past a threshold, not this power.)\n\n| Δ | from | time: sd → seeds for Δ | accuracy: sd → seeds for Δ |\n|---|---|---|---|\n",
            f.matrix,
            100.0 * POWER,
            counted_words(f)
        ));
        for row in &f.rows {
            let cell = |t: String| t.replace('|', "\\|");
            let (time, acc) = match (&row.note, row.method) {
                (Some(note), None) => (note.clone(), "-".into()),
                _ => (
                    need_words(row.time.as_ref(), Response::Time, row.method),
                    need_words(row.accuracy.as_ref(), Response::Accuracy, row.method),
                ),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                cell(row.question.clone()),
                cell(method_words(row)),
                cell(time),
                cell(acc)
            ));
        }
        for note in f
            .rows
            .iter()
            .filter(|r| r.method.is_some())
            .filter_map(|r| r.note.as_ref())
        {
            s.push_str(&format!("\nnote: {note}\n"));
        }
        if let Some(d) = &f.until_decided {
            s.push_str(&decided_markdown(&f.matrix, d));
        }
    }
    s
}

/// The "Run until decided" section: the rule, each question at the last
/// look, and which stayed open.
fn decided_markdown(matrix: &str, d: &Decided) -> String {
    let mut s = format!(
        "\n## Run until decided: {matrix}\n\nSeeds were added {}.\n\n{}.\n",
        d.rule,
        {
            let line = decided_line(d);
            let mut c = line.chars();
            c.next()
                .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
        }
    );
    if !d.decisions.is_empty() {
        s.push_str("\n| Δ | response | estimate [interval at the look's level] | margin | verdict |\n|---|---|---|---|---|\n");
    }
    for x in &d.decisions {
        let estimate = with_interval(x.response, x.estimate, (x.lo, x.hi), x.note.as_ref());
        s.push_str(&format!(
            "| {} | {} | {} | ±{} | {} |\n",
            x.question.replace('|', "\\|"),
            x.response.name(),
            estimate.replace('|', "\\|"),
            amount(x.response, x.margin),
            x.verdict.words()
        ));
    }
    if !d.precisions.is_empty() {
        s.push_str("\nThe widths asked stop the run for precision, not on a test: they spend no α, and an interval after such a stop is approximate (ablations/README.md, \"Run until decided\").\n\n| Δ, effect or Shapley value | response | estimate [95% CI] | width | widest asked | precision |\n|---|---|---|---|---|---|\n");
    }
    for p in &d.precisions {
        let estimate = with_interval(p.response, p.estimate, (p.lo, p.hi), p.note.as_ref());
        let width = p.hi - p.lo;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            p.question.replace('|', "\\|"),
            p.response.name(),
            estimate.replace('|', "\\|"),
            if width.is_finite() {
                amount(p.response, width)
            } else {
                "-".into()
            },
            amount(p.response, p.max_width),
            if p.narrow {
                "narrow enough"
            } else {
                "too wide"
            }
        ));
    }
    s
}

/// `+1.234 [+0.500, +1.968] s`, the estimate alone where there is no
/// interval, or the note that says why there is neither.
fn with_interval(
    r: Response,
    estimate: f64,
    (lo, hi): (f64, f64),
    note: Option<&String>,
) -> String {
    let v = |y: f64| match r {
        Response::Time => format!("{y:+.3}").replace('-', "−"),
        Response::Accuracy => format!("{:+.2}", 100.0 * y).replace('-', "−"),
    };
    let unit = match r {
        Response::Time => "s",
        Response::Accuracy => "points",
    };
    match (estimate.is_finite(), lo.is_finite() && hi.is_finite()) {
        (true, true) => format!("{} [{}, {}] {unit}", v(estimate), v(lo), v(hi)),
        (true, false) => format!("{} {unit}", v(estimate)),
        _ => note.cloned().unwrap_or_else(|| "-".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ResultsWriter, tests as st};

    /// Seconds keep three decimals, and three significant figures below
    /// 0.01 s, where a tiny net's widths would read "0.000 s".
    #[test]
    fn small_times_keep_their_significant_figures() {
        assert_eq!(amount(Response::Time, 0.25), "0.250 s");
        assert_eq!(amount(Response::Time, 0.031), "0.031 s");
        assert_eq!(amount(Response::Time, 0.00042), "0.000420 s");
        assert_eq!(amount(Response::Time, 0.0), "0.000 s");
        assert_eq!(amount(Response::Accuracy, 0.005), "0.50 points");
    }

    /// A results folder of matrix `text` (named `m`) with runs (variant
    /// index, seed, seconds on the dawn clock, accuracy with TTA).
    fn folder(
        root: &std::path::Path,
        text: &str,
        runs: &[(usize, u64, f64, f64)],
    ) -> (Folder, crate::matrix::Record) {
        let m = crate::matrix::parse(text, "m.toml").unwrap().record();
        let mut w = ResultsWriter::create(root, "m", text).unwrap();
        let mut repeats = BTreeMap::<usize, usize>::new();
        for &(i, seed, secs, acc) in runs {
            let rep = repeats.entry(i).or_default();
            // summary() records acc + 0.01 as the accuracy with TTA.
            let s = st::summary(acc - 0.01, secs, None);
            st::feed(&mut w, st::rid(&m.variants[i].name, i, *rep), seed, Some(s));
            *rep += 1;
        }
        (Folder::open(w.dir()).unwrap(), m)
    }

    #[test]
    fn pairs_need_the_t_tests_seeds_at_their_measured_spread() {
        let text = "name='m'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu','flip','label_smoothing']\n";
        let mut runs = Vec::new();
        for (k, d) in [(0u64, 1.0), (1, 0.0), (2, 2.0)] {
            let x = k as f64 - 1.0;
            // base: sd 1 s and 1 point; + celu on the same seeds, its
            // per-seed differences [1, 0, 2] (sd 1, in s and in points);
            // + flip on other seeds, sd 1 (pooled sd 1).
            runs.push((0, k, 10.0 + x, 0.5 + 0.01 * x));
            runs.push((1, k, 10.0 + x + d, 0.5 + 0.01 * (x + d)));
            runs.push((2, 10 + k, 11.0 + x, 0.51 + 0.01 * x));
        }
        runs.push((3, 0, 10.0, 0.5));
        let root = tempfile::tempdir().unwrap();
        let (dir, m) = folder(root.path(), text, &runs);
        let deltas = Deltas {
            time_s: Some(1.0),
            acc: 0.01,
        };
        let s = seeds(&dir, &m, Clock::Dawn, deltas, false).unwrap();
        assert_eq!(s.rows.len(), 3);
        // Paired, sd of the differences 1, Δ 1: 10 pairs (power 0.803, and
        // 0.780 at 9: R's power.t.test(n = 10, delta = 1, type = "paired")).
        let celu = &s.rows[0];
        assert_eq!((celu.method, celu.n), (Some(Method::Paired), 3));
        for n in [celu.time.unwrap(), celu.accuracy.unwrap()] {
            assert!((n.sd.unwrap() - 1.0 * n.delta).abs() < 1e-9, "{n:?}");
            assert_eq!(n.seeds, Some(10));
        }
        // Two-sample, pooled sd 1, Δ 1: 17 seeds a side (R: n = 16.71).
        let flip = &s.rows[1];
        assert_eq!(flip.method, Some(Method::TwoSample));
        assert_eq!(flip.time.unwrap().seeds, Some(17));
        assert_eq!(flip.accuracy.unwrap().seeds, Some(17));
        // One run of + label_smoothing: one line saying so.
        let ls = &s.rows[2];
        assert!(ls.method.is_none() && ls.time.is_none());
        assert!(
            ls.note
                .as_deref()
                .unwrap()
                .contains("1 counted run of `+ label_smoothing`: under 2")
        );
        let text = to_text(&s);
        assert!(text.contains("+ celu vs base: paired over 3 seeds; time sd 1.000 s → 10 seeds for Δ 1.000 s; accuracy sd 1.00 points → 10 seeds for Δ 1.00 points"), "{text}");
        assert!(
            text.contains(
                "+ flip vs base: two-sample over 3 runs a side; time sd 1.000 s → 17 seeds a side"
            ),
            "{text}"
        );
        // The default Δ: 5% of the reference's mean time (10 s), 0.5 points;
        // past 100 seeds it says so.
        let s = seeds(&dir, &m, Clock::Dawn, Deltas::default(), false).unwrap();
        let t = s.rows[0].time.unwrap();
        assert!((t.delta - 0.5).abs() < 1e-9 && t.seeds.is_some());
        assert!((s.rows[1].accuracy.unwrap().delta - 0.005).abs() < 1e-12);
        let small = Deltas {
            time_s: Some(0.1),
            ..Deltas::default()
        };
        let s = seeds(&dir, &m, Clock::Dawn, small, false).unwrap();
        let t = s.rows[1].time.unwrap();
        assert!(t.over_max && t.seeds.is_none(), "{t:?}");
        let md = to_markdown(&[s]);
        assert!(
            md.contains("## Seeds needed: m")
                && md.contains("| + flip vs base | two-sample, 3 runs a side |"),
            "{md}"
        );
        assert!(md.contains("over 100 seeds a side"), "{md}");
    }

    #[test]
    fn a_design_needs_replicates_at_its_pure_error() {
        // A 2^3 factorial, two runs a configuration c ± √2/2: pure error
        // SS = 8 · 1 = 8 on 8 d.f., σ = 1. An effect of 1 needs 5
        // replicates of the 8 runs (stats' replicates test).
        let text = "name='m'\nrecipe='tiny-page-resnet9'\nkind='factorial'\nvary=['celu','flip','label_smoothing']\nuntil_decided = { time = 0.05, max = 6 }\n";
        let h = std::f64::consts::SQRT_2 / 2.0;
        let runs: Vec<(usize, u64, f64, f64)> = (0..8)
            .flat_map(|i| {
                let c = 10.0 + i as f64;
                [(i, 0, c + h, 0.5 + 0.01 * h), (i, 1, c - h, 0.5 - 0.01 * h)]
            })
            .collect();
        let root = tempfile::tempdir().unwrap();
        let (dir, m) = folder(root.path(), text, &runs);
        let deltas = Deltas {
            time_s: Some(1.0),
            acc: 0.01,
        };
        let s = seeds(&dir, &m, Clock::Dawn, deltas, false).unwrap();
        assert_eq!(s.rows.len(), 1);
        let r = &s.rows[0];
        assert!(
            r.question
                .starts_with("each effect (celu, flip, label_smoothing, celu×flip"),
            "{}",
            r.question
        );
        assert_eq!((r.method, r.n), (Some(Method::DesignReplicates), 16));
        assert!((r.time.unwrap().sd.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(r.time.unwrap().seeds, Some(5));
        assert_eq!(r.accuracy.unwrap().seeds, Some(5));
        // Its until_decided: 2 seeds, the first of 5 looks; celu's effect
        // (configurations 1, 3, 5, 7 one second slower each) is 4 s.
        let d = s.until_decided.as_ref().unwrap();
        assert_eq!((d.rounds, d.look, d.looks), (2, Some(1), 5));
        assert_eq!(d.decisions.len(), 6, "time only: the six effects");
        assert_eq!(d.decisions[0].question, "celu");
        assert!(
            (d.decisions[0].estimate - 1.0).abs() < 1e-9,
            "{:?}",
            d.decisions[0]
        );
        let md = to_markdown(std::slice::from_ref(&s));
        assert!(
            md.contains("## Run until decided: m") && md.contains("Bonferroni over looks"),
            "{md}"
        );
    }

    /// A folder run with a width rule: the report lists each pair's 95%
    /// interval against the widest asked, says which stayed too wide at the
    /// budget, and that the widths spend no α.
    #[test]
    fn the_report_says_which_intervals_stayed_wider_than_asked() {
        let text = "name='m'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu']\nuntil_decided = { width_time = 0.5, width_acc = 0.0001, min = 2, max = 3 }\n";
        // + celu 1 s slower and 1 point better, give or take 0.1 of each.
        let runs: Vec<(usize, u64, f64, f64)> = (0..3u64)
            .flat_map(|k| {
                let e = [0.1, -0.1, 0.05][k as usize];
                [
                    (0, k, 10.0 + k as f64, 0.5),
                    (1, k, 11.0 + k as f64 + e, 0.51 + 0.01 * e),
                ]
            })
            .collect();
        let root = tempfile::tempdir().unwrap();
        let (dir, m) = folder(root.path(), text, &runs);
        let s = seeds(&dir, &m, Clock::Dawn, Deltas::default(), false).unwrap();
        let d = s.until_decided.as_ref().unwrap();
        assert!(d.decisions.is_empty(), "no margin asked: no verdicts");
        assert_eq!(d.precisions.len(), 2);
        let (time, acc) = (&d.precisions[0], &d.precisions[1]);
        // ±5 s (half of 10.0 + 1.0 mean) allowed; the interval is about 0.5 s wide.
        assert!(
            time.narrow && (time.max_width - 5.5).abs() < 1e-9,
            "{time:?}"
        );
        assert!(!acc.narrow, "{acc:?}");
        assert_eq!(d.open(), ["width of accuracy of + celu vs base"]);
        let md = to_markdown(std::slice::from_ref(&s));
        for want in [
            "1 stayed open at the budget of 3 seeds a variant: width of accuracy of + celu vs base",
            "they spend no α",
            "| + celu vs base | time | +1.017 [",
            "| 5.500 s | narrow enough |",
            "| 0.01 points | too wide |",
            "is at most 50% of the mean time / 0.01 points of accuracy wide",
        ] {
            assert!(md.contains(want), "{want}: {md}");
        }
    }
}
