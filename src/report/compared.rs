//! `compare`'s judgement of two results folders: are they comparable (the
//! same matrix, recipes, data and devices), which runs pair up, the
//! control's drift, and each variant's verdict with the exit code a script
//! or a night reads (the per-variant statistics: `compare`).

use super::{
    Clock, Comparison, Report, ReportOptions, Thresholds, TimeModel, Verdict, aggregate, compare,
    control, drift,
};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `compare` is asked: two folders, the clock, the thresholds and how
/// strictly to judge.
#[derive(clap::Args, Debug)]
pub struct CompareOptions {
    pub base: PathBuf,
    pub candidate: PathBuf,
    /// Clock to compare (default: each recipe's own convention).
    #[arg(long, value_enum)]
    pub clock: Option<Clock>,
    /// Allowed slowdown as a fraction (0.05 = 5%; a negative one demands a
    /// speedup: --max-slowdown=-0.05).
    #[arg(long, default_value_t = 0.05, allow_hyphen_values = true)]
    pub max_slowdown: f64,
    /// Allowed accuracy drop as a fraction (0.002 = 0.2 points).
    #[arg(long, default_value_t = 0.002)]
    pub max_acc_drop: f64,
    /// Compare even if the matrix file, recipes, data or devices differ.
    #[arg(long)]
    pub allow_different: bool,
    /// Exit 1 (a failed check) when a variant is inconclusive (too few runs to tell).
    #[arg(long)]
    pub fail_inconclusive: bool,
    /// Judge raw times instead of times net of the session's drift (measured
    /// on the matrix's first variant, the control).
    #[arg(long)]
    pub absolute: bool,
    /// Leave out runs flagged noisy on both sides (as `report --drop-noisy`);
    /// without it, noisy runs are counted in and warned about.
    #[arg(long)]
    pub drop_noisy: bool,
}

/// What must match for two folders' times to be comparable: (what, value).
fn identity(dir: &Path, report: &Report) -> Result<Vec<(&'static str, String)>> {
    let m = crate::store::read_manifest(dir)?;
    let list = |key: &str, f: &dyn Fn(&serde_json::Value) -> String| {
        let mut v: Vec<String> = m[key]
            .as_array()
            .map(|a| a.iter().map(f).collect())
            .unwrap_or_default();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let mut recipes: Vec<&str> = report.rows.iter().map(|r| r.recipe.as_str()).collect();
    recipes.sort();
    recipes.dedup();
    // What the matrix trains, not how its text reads: a merged folder's
    // manifest holds the matrix re-serialised, a shard's its `shard` line,
    // a session its own seeds.
    // Read from the folder's record, as its session decided it.
    let text = m["matrix_file"].as_str().unwrap_or("");
    let matrix = match crate::store::record_of(dir, &m).map(crate::store::Upgraded::record) {
        Ok(mx) => format!(
            "{} {} {:?} {} {:?}",
            mx.name,
            mx.recipe,
            mx.kind,
            mx.data,
            mx.variants
                .iter()
                .map(|v| (&v.name, &v.overrides))
                .collect::<Vec<_>>()
        ),
        Err(_) => text.to_string(),
    };
    Ok(vec![
        ("matrix file", matrix),
        ("recipe", recipes.join(", ")),
        (
            "data hash",
            list("data_sets", &|d| {
                d["hash"].as_str().unwrap_or("?").to_string()
            }),
        ),
        (
            "device",
            list("devices", &|d| d.as_str().unwrap_or("?").to_string()),
        ),
    ])
}

/// Where a script matrix's sources stood when its session read them, one
/// entry a thing that can differ (`train.py`, `git commit`, `torch`): empty
/// for an engine matrix.
fn script_sources(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(m) = crate::store::read_manifest(dir) else {
        return out;
    };
    let Ok(up) = crate::store::record_of(dir, &m) else {
        return out;
    };
    for s in up.record().variants.iter().filter_map(|v| v.script()) {
        let p = &s.provenance;
        for (f, h) in &p.files {
            out.insert(f.clone(), format!("sha256 {}", &h[..h.len().min(12)]));
        }
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                out.insert(k.into(), v.clone());
            }
        };
        put("git commit", &p.git_commit);
        put(
            "uncommitted changes",
            &p.git_diff
                .as_ref()
                .map(|d| format!("sha256 {}", &d[..d.len().min(12)])),
        );
        put("interpreter", &p.interpreter);
        put("torch", &p.torch);
    }
    out
}

/// What changed in the script's sources from base to candidate, in one
/// line; `None` when nothing did (or neither ran a script).
fn sources_changed(base: &Path, candidate: &Path) -> Option<String> {
    let (b, c) = (script_sources(base), script_sources(candidate));
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(c.keys()).collect();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|k| b.get(*k) != c.get(*k))
        .map(|k| {
            let side =
                |m: &BTreeMap<String, String>| m.get(k).cloned().unwrap_or_else(|| "none".into());
            format!("{k}: {} → {}", side(&b), side(&c))
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "base and candidate ran different script sources ({}): the verdicts measure that change too",
            changed.join("; ")
        )
    })
}

/// What `compare` found, before it is printed.
pub struct Compared {
    pub code: i32,
    pub rows: Vec<Comparison>,
    /// The candidate's report (for the nightly history).
    pub report: Option<Report>,
    pub thresholds: Option<Thresholds>,
    /// The control's drift, when times are judged net of it.
    pub drift: Option<(String, crate::report::Rel)>,
    /// Why the folders were not compared, or what to say about the verdicts.
    pub error: Option<String>,
    pub warnings: Vec<String>,
    /// Finished runs flagged noisy in the base and the candidate (before
    /// --drop-noisy left them out).
    pub noisy: Option<(usize, usize)>,
}

impl Compared {
    pub fn refused(error: String) -> Compared {
        Compared {
            code: crate::util::exit::INPUT,
            rows: vec![],
            report: None,
            thresholds: None,
            drift: None,
            error: Some(error),
            warnings: vec![],
            noisy: None,
        }
    }

    /// The text output: (stdout, stderr).
    pub fn text(&self) -> (String, String) {
        let (mut out, mut err) = (String::new(), String::new());
        for w in &self.warnings {
            err += &format!("warning: {w}\n");
        }
        // The table on every outcome: the night something regressed is the
        // night its rows are read.
        if let Some(th) = &self.thresholds
            && !self.rows.is_empty()
        {
            out += &comparison_table(&self.rows, th);
        }
        if let Some((control, d)) = &self.drift {
            out += &format!(
                "drift: the control `{control}` is {:+.1}% [{:+.1}, {:+.1}] in the candidate; every other time is judged net of it (--absolute judges raw times)\n",
                100.0 * d.rel,
                100.0 * d.lo,
                100.0 * d.hi
            );
        }
        if let Some(e) = &self.error {
            let prefix = if self.code == crate::util::exit::INPUT && self.rows.is_empty() {
                "error: "
            } else {
                ""
            };
            err += &format!("{prefix}{e}\n");
        }
        (out, err)
    }

    /// The JSON document `compare --format json` prints, whatever the exit code.
    pub fn to_json(&self, o: &CompareOptions) -> serde_json::Value {
        serde_json::json!({
            "exit_code": self.code,
            "base": o.base,
            "candidate": o.candidate,
            "time_model": if o.absolute { "absolute" } else { "net_of_drift" },
            "thresholds": self.thresholds.map(|t| serde_json::json!({
                "max_slowdown": t.max_slowdown,
                "max_acc_drop": t.max_acc_drop,
            })),
            "drift": self.drift.as_ref().map(|(control, d)| serde_json::json!({
                "control": control, "rel": d.rel, "lo": d.lo, "hi": d.hi,
            })),
            "variants": self.rows.iter().map(Comparison::to_json).collect::<Vec<_>>(),
            "regressions": self.rows.iter().filter(|r| r.verdict.is_bad()).count(),
            "message": self.error,
            "warnings": self.warnings,
            "noisy_runs": self.noisy.map(|(b, c)| serde_json::json!({
                "base": b, "candidate": c, "dropped": o.drop_noisy,
            })),
        })
    }
}

/// `compare`'s work: the verdicts, the exit code and the candidate's report.
#[allow(
    clippy::too_many_lines,
    reason = "folders checked, paired, drift-corrected and judged in the order docs/reports.md states"
)]
pub fn compare_folders(args: &CompareOptions) -> Result<Compared> {
    let th = Thresholds {
        max_slowdown: args.max_slowdown,
        max_acc_drop: args.max_acc_drop,
    };
    if let Err(e) = th.validate() {
        return Ok(Compared::refused(e));
    }
    if same_folder(&args.base, &args.candidate) {
        return Ok(Compared::refused(format!(
            "{} is both the base and the candidate: every difference would be 0 by construction; pass two sessions (`tricklab results` lists them)",
            args.base.display()
        )));
    }
    let opts = ReportOptions {
        clock: args.clock,
        drop_noisy: args.drop_noisy,
        ..Default::default()
    };
    let (base, cand) = match (
        aggregate(std::slice::from_ref(&args.base), &opts),
        aggregate(std::slice::from_ref(&args.candidate), &opts),
    ) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => return Ok(Compared::refused(crate::util::one_line(&e))),
    };
    for (dir, r) in [(&args.base, &base), (&args.candidate, &cand)] {
        // A candidate whose runs all finished noisy is compared, every
        // variant inconclusive (a busy night is not a failed one); a base
        // like that leaves nothing to judge against.
        let candidate_all_noisy = args.drop_noisy
            && std::ptr::eq(r, &cand)
            && crate::store::folder_runs(dir).is_ok_and(|runs| {
                let done = runs
                    .iter()
                    .filter(|x| x.status == crate::store::Ended::Done);
                done.clone().count() > 0 && done.clone().all(|x| x.noisy == Some(true))
            });
        if r.rows.is_empty() && !candidate_all_noisy {
            let why = if args.drop_noisy {
                "every run is flagged noisy and --drop-noisy left them all out; compare without it, or run again on a quieter machine"
            } else {
                "it has no runs; pass a session that `tricklab run` finished"
            };
            return Ok(Compared::refused(format!(
                "{}: nothing to compare: {why}",
                dir.display()
            )));
        }
    }
    // What each session ran, noisy runs included: --drop-noisy may have
    // emptied a side whose recipe still has to match.
    let ran = |dir: &PathBuf, r: &Report| -> Result<Report> {
        if args.drop_noisy {
            let every = ReportOptions {
                clock: args.clock,
                ..Default::default()
            };
            aggregate(std::slice::from_ref(dir), &every)
        } else {
            Ok(r.clone())
        }
    };
    let (ib, ic) = (
        identity(&args.base, &ran(&args.base, &base)?)?,
        identity(&args.candidate, &ran(&args.candidate, &cand)?)?,
    );
    let differ: Vec<String> = ib
        .iter()
        .zip(&ic)
        .filter(|(b, c)| b.1 != c.1)
        .map(|((what, b), (_, c))| match *what {
            "matrix file" => "the matrix files differ".to_string(),
            _ => format!("{what}: base {b}, candidate {c}"),
        })
        .collect();
    let mut warnings = Vec::new();
    if !differ.is_empty() {
        let line = differ.join("; ");
        if !args.allow_different {
            return Ok(Compared::refused(format!(
                "{} and {} are not comparable ({line}); pass --allow-different to compare anyway",
                args.base.display(),
                args.candidate.display()
            )));
        }
        warnings.push(format!("comparing anyway although {line}"));
    }
    warnings.extend(sources_changed(&args.base, &args.candidate));
    let (runs_b, runs_c) = (
        crate::store::folder_runs(&args.base)?,
        crate::store::folder_runs(&args.candidate)?,
    );
    if is_copy(&runs_b, &runs_c) {
        warnings.push(format!(
            "{} holds the same runs as {} (same variants, seeds and finish times): a copy of one session, so every difference is 0",
            args.candidate.display(),
            args.base.display()
        ));
    }
    let noisy = (noisy_runs(&runs_b), noisy_runs(&runs_c));
    warnings.extend(noisy_warning(noisy, args.drop_noisy));
    let mut model = if args.absolute {
        TimeModel::Absolute
    } else {
        TimeModel::NetOfDrift
    };
    // A drift known less precisely than the threshold would carry its own
    // noise into every verdict: judge raw times then, and say so.
    if model == TimeModel::NetOfDrift
        && let (Some(d), Some(c)) = (drift(&base, &cand), control(&base))
        && d.hi - d.lo > th.max_slowdown
    {
        warnings.push(format!(
            "the control `{}`'s drift {:+.1}% [{:+.1}, {:+.1}] is known less precisely than the {:.1}% threshold (its 95% CI is wider): times are judged raw, as with --absolute; more runs of the control on each side would narrow it",
            c.variant,
            100.0 * d.rel,
            100.0 * d.lo,
            100.0 * d.hi,
            100.0 * th.max_slowdown
        ));
        model = TimeModel::Absolute;
    }
    let mut rows = compare(&base, &cand, &th, model);
    if args.drop_noisy {
        // A variant whose candidate runs all finished noisy is gone from the
        // candidate's report, not failed.
        for r in rows.iter_mut().filter(|r| r.n.1 == 0) {
            let done: Vec<&crate::store::RunRow> = runs_c
                .iter()
                .filter(|x| x.variant == r.variant && x.status == crate::store::Ended::Done)
                .collect();
            if !done.is_empty() && done.iter().all(|x| x.noisy == Some(true)) {
                r.left_out_as_noisy();
            }
        }
    }
    if model == TimeModel::NetOfDrift && drift(&base, &cand).is_none() {
        let runs =
            |r: &Report, name: &str| r.rows.iter().find(|x| x.variant == name).map_or(0, |x| x.n);
        let (nb, nc) = control(&base).map_or((0, 0), |c| (c.n, runs(&cand, &c.variant)));
        warnings.push(if nb > 0 && nc > 0 {
            format!(
                "no drift to judge times against: the control (the matrix's first variant) has {nb} run(s) in the base and {nc} in the candidate, and a drift needs two a side; times are compared raw, as with --absolute"
            )
        } else {
            "no drift to judge times against: the control (the matrix's first variant) has no runs on one side (failed, or all noisy and left out by --drop-noisy); times are compared raw, as with --absolute".to_string()
        });
    }
    let drift = match (model, drift(&base, &cand), control(&base)) {
        (TimeModel::NetOfDrift, Some(d), Some(control)) => {
            if d.lo > th.max_slowdown {
                warnings.push(format!(
                    "the whole candidate session is slower beyond {:+.0}%: a slower machine, or a change that slows every rung alike (judge it with --absolute)",
                    100.0 * th.max_slowdown
                ));
            }
            Some((control.variant.clone(), d))
        }
        _ => None,
    };
    let bad = rows.iter().filter(|r| r.verdict.is_bad()).count();
    let open = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Inconclusive { .. }))
        .count();
    let (code, error) = if bad > 0 {
        let names: Vec<String> = rows
            .iter()
            .filter(|r| r.verdict.is_bad())
            .map(|r| format!("`{}` ({})", r.variant, r.verdict.label()))
            .collect();
        (
            crate::util::exit::REGRESSION,
            Some(format!(
                "{bad} of {} variants regressed or failed: {}",
                rows.len(),
                names.join(", ")
            )),
        )
    } else if open > 0 && args.fail_inconclusive {
        // A check the user asked to fail, not a wrong input: exit 1 as a
        // regression does, so CI tells it from a broken night (2, 3).
        (
            crate::util::exit::REGRESSION,
            Some(format!("{open} of {} variants inconclusive", rows.len())),
        )
    } else {
        (crate::util::exit::OK, None)
    };
    Ok(Compared {
        code,
        rows,
        report: Some(cand),
        thresholds: Some(th),
        drift,
        error,
        warnings,
        noisy: Some(noisy),
    })
}

/// Two names of one folder (`results/m/X` and `./results/m/X/`).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The candidate's finished runs are the base's, to the microsecond: a
/// session copied, not run again.
fn is_copy(base: &[crate::store::RunRow], cand: &[crate::store::RunRow]) -> bool {
    let key = |rows: &[crate::store::RunRow]| {
        let mut k: Vec<(String, u64, i64)> = rows
            .iter()
            .filter(|r| r.status == crate::store::Ended::Done)
            .map(|r| {
                (
                    r.variant.clone(),
                    r.seed,
                    r.finished_at.0.timestamp_micros(),
                )
            })
            .collect();
        k.sort();
        k
    };
    let b = key(base);
    !b.is_empty() && b == key(cand)
}

/// Finished runs flagged noisy (a busy machine, a throttled GPU, a ragged
/// throughput): their seconds are not the code's.
fn noisy_runs(rows: &[crate::store::RunRow]) -> usize {
    rows.iter()
        .filter(|r| r.status == crate::store::Ended::Done && r.noisy == Some(true))
        .count()
}

/// What `compare` and `nightly` say about noisy runs on either side.
fn noisy_warning((base, cand): (usize, usize), dropped: bool) -> Option<String> {
    if base + cand == 0 {
        return None;
    }
    Some(if dropped {
        format!(
            "left out {base} noisy run(s) of the base and {cand} of the candidate (--drop-noisy)"
        )
    } else {
        format!(
            "{base} run(s) of the base and {cand} of the candidate are flagged noisy (a busy machine, a throttled GPU or a ragged throughput): their times are in the verdicts; --drop-noisy leaves them out"
        )
    })
}

/// The comparison as a plain-text table, with the statistic it rests on.
pub fn comparison_table(rows: &[Comparison], th: &Thresholds) -> String {
    let mut out = format!(
        "Differences candidate − base with 95% CIs (time: relative, net of the session's drift unless --absolute; accuracy: paired by seed where every seed of one side ran on the other, marked `p`, with both means over those seeds, else Welch's t); a regression needs the whole CI beyond {:+.1}% time or −{:.2} points accuracy.{}\n",
        100.0 * th.max_slowdown,
        100.0 * th.max_acc_drop,
        // Only where a variant has one run a side: its means, and no interval.
        if rows.iter().any(|r| r.n.0 == 1 || r.n.1 == 1) {
            " A variant with one run a side shows its means only: intervals and verdicts need two."
        } else {
            ""
        }
    );
    out += &format!(
        "  {:<34} {:>7} {:>9} {:>9} {:>22} {:>8} {:>8} {:>20}  verdict\n",
        "variant",
        "n b/c",
        "base s",
        "cand s",
        "Δtime [95% CI]",
        "base %",
        "cand %",
        "Δacc pts [95% CI]"
    );
    let num = |x: f64, scale: f64| {
        if x.is_finite() {
            format!("{:.2}", scale * x)
        } else {
            "–".into()
        }
    };
    for r in rows {
        let dt = r
            .time_rel
            .map(|d| {
                format!(
                    "{:+.1}% [{:+.1}, {:+.1}]",
                    100.0 * d.rel,
                    100.0 * d.lo,
                    100.0 * d.hi
                )
            })
            .unwrap_or_else(|| "–".into());
        let a = r.acc.as_ref();
        let da = a
            .map(|d| {
                format!(
                    "{}{:+.2} [{:+.2}, {:+.2}]",
                    if r.acc_paired { "p " } else { "" },
                    100.0 * d.delta,
                    100.0 * d.lo(),
                    100.0 * d.hi()
                )
            })
            .unwrap_or_else(|| "–".into());
        // ✗ marks a row that makes `compare` exit 1.
        out += &format!(
            "{} {:<34} {:>7} {:>9} {:>9} {:>22} {:>8} {:>8} {:>20}  {}\n",
            if r.verdict.is_bad() { "✗" } else { " " },
            r.variant,
            format!("{}/{}", r.n.0, r.n.1),
            num(r.means.base_s, 1.0),
            num(r.means.cand_s, 1.0),
            dt,
            num(r.means.base_acc, 100.0),
            num(r.means.cand_acc, 100.0),
            da,
            r.verdict.label()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ResultsWriter;
    use crate::store::tests::{feed, rid, summary};

    /// A session of `control` and `rung` (10 s and 20 s) with `runs` runs
    /// each, the times spread ±`spread` by seed and multiplied by `slow`
    /// (`rung` also by `extra`).
    fn session(
        root: &Path,
        name: &str,
        runs: usize,
        spread: f64,
        slow: f64,
        extra: f64,
    ) -> PathBuf {
        let mut w = ResultsWriter::create(root, name, "name = 'm'").unwrap();
        for (idx, (v, t)) in [("control", 10.0), ("rung", 20.0)].into_iter().enumerate() {
            for rep in 0..runs {
                let noise = 1.0 + spread * if rep % 2 == 0 { 1.0 } else { -1.0 };
                let extra = if v == "rung" { extra } else { 1.0 };
                let s = summary(0.60, t * slow * extra * noise, None);
                feed(&mut w, rid(v, idx, rep), rep as u64, Some(s));
            }
        }
        w.dir().to_path_buf()
    }

    fn args(base: &Path, candidate: &Path) -> CompareOptions {
        CompareOptions {
            base: base.to_path_buf(),
            candidate: candidate.to_path_buf(),
            clock: None,
            max_slowdown: 0.05,
            max_acc_drop: 0.002,
            allow_different: false,
            fail_inconclusive: false,
            absolute: false,
            drop_noisy: false,
        }
    }

    /// On a regression the text output still has the table, the failing
    /// row marked, and the last line names the variant and its verdict.
    #[test]
    fn a_regression_prints_the_table_with_the_failing_row_marked() {
        let root = tempfile::tempdir().unwrap();
        let base = session(root.path(), "base", 6, 0.002, 1.0, 1.0);
        let cand = session(root.path(), "cand", 6, 0.002, 1.0, 1.3);
        let c = compare_folders(&args(&base, &cand)).unwrap();
        assert_eq!(c.code, crate::util::exit::REGRESSION);
        let (out, err) = c.text();
        let row = out
            .lines()
            .find(|l| l.contains(" rung "))
            .unwrap_or_else(|| panic!("no row for the rung: {out}"));
        assert!(row.starts_with('✗') && row.contains("SLOWER"), "{row}");
        let control = out.lines().find(|l| l.contains(" control ")).unwrap();
        assert!(control.starts_with(' '), "{control}");
        assert!(
            err.contains("1 of 2 variants regressed or failed: `rung` (SLOWER)"),
            "{err}"
        );
    }

    /// One run a side: the warnings say so, not that a side has no runs;
    /// the one-run sentence appears only then.
    #[test]
    fn one_run_a_side_is_named_as_such_in_the_warnings() {
        let root = tempfile::tempdir().unwrap();
        let base = session(root.path(), "base1", 1, 0.0, 1.0, 1.0);
        let cand = session(root.path(), "cand1", 1, 0.0, 1.0, 1.0);
        let (out, err) = compare_folders(&args(&base, &cand)).unwrap().text();
        assert!(
            err.contains(
                "has 1 run(s) in the base and 1 in the candidate, and a drift needs two a side"
            ) && !err.contains("no runs on one side"),
            "{err}"
        );
        assert!(out.contains("one run a side shows its means only"), "{out}");
        let base = session(root.path(), "base3", 3, 0.002, 1.0, 1.0);
        let cand = session(root.path(), "cand3", 3, 0.002, 1.0, 1.0);
        let (out, _) = compare_folders(&args(&base, &cand)).unwrap().text();
        assert!(!out.contains("one run a side"), "{out}");
    }

    /// A control known only roughly (2 runs a side, spread ±40%) is not
    /// subtracted from every other time: they are judged raw, and one line
    /// says why.
    #[test]
    fn an_imprecise_drift_is_not_corrected_for() {
        let root = tempfile::tempdir().unwrap();
        let base = session(root.path(), "base", 2, 0.4, 1.0, 1.0);
        let cand = session(root.path(), "cand", 2, 0.4, 1.0, 1.0);
        let c = compare_folders(&args(&base, &cand)).unwrap();
        assert!(c.drift.is_none(), "judged net of a drift it cannot know");
        let (out, err) = c.text();
        assert!(
            err.contains("known less precisely than the 5.0% threshold")
                && err.contains("judged raw"),
            "{err}"
        );
        assert!(!out.contains("judged net of it"), "{out}");
        // A precise one (6 runs a side, ±0.2%) is corrected for.
        let base = session(root.path(), "base6", 6, 0.002, 1.0, 1.0);
        let cand = session(root.path(), "cand6", 6, 0.002, 1.2, 1.0);
        let c = compare_folders(&args(&base, &cand)).unwrap();
        assert!(c.drift.is_some());
        assert_eq!(c.code, crate::util::exit::OK, "{:?}", c.text());
    }
}
