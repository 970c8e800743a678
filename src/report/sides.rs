//! Does the engine's ablation tell the record's story? One record ablated
//! twice, by the engine's recipe (`ablations/speedrun-loo.toml`) and by the
//! published script in its own code (`ablations/speedrun-script.toml`),
//! read trick by trick: each side's Δ against its own first variant (the
//! record as published), side by side, whether the two intervals overlap,
//! and a mark where the two Δ point opposite ways.
//!
//! Both sides are timed on the script's convention (its runs carry only
//! that clock; the engine's carry all four), and the Δ are `delta::between`:
//! paired by seed where both ran the same seeds, else Welch's interval.

use super::delta::{Delta, between, samples};
use crate::config::Clock;
use crate::store::{Folder, RunRow};
use anyhow::{Result, bail};
use std::fmt::Write as _;

/// One variant present in both folders (its name says which trick it takes back).
#[derive(Clone, Debug)]
pub struct TrickRow {
    pub variant: String,
    /// (engine, script): Δ seconds on the clock.
    pub time: (Option<Delta>, Option<Delta>),
    /// (engine, script): Δ accuracy (a fraction).
    pub acc: (Option<Delta>, Option<Delta>),
}

/// Whether both intervals exist and share a point.
pub fn overlap(a: Option<Delta>, b: Option<Delta>) -> Option<bool> {
    let (a, b) = (a?, b?);
    let finite = |d: Delta| d.lo.is_finite() && d.hi.is_finite();
    (finite(a) && finite(b)).then_some(a.lo <= b.hi && b.lo <= a.hi)
}

/// Whether the two Δ point opposite ways (a gain on one side, a loss on the other).
pub fn opposite(a: Option<Delta>, b: Option<Delta>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.mean * b.mean < 0.0)
}

/// The two leave-one-outs read side by side.
#[derive(Clone, Debug)]
pub struct SideBySide {
    pub engine: String,
    pub script: String,
    pub clock: Clock,
    /// Each side's first variant, which the Δ are read against.
    pub bases: (String, String),
    pub rows: Vec<TrickRow>,
    /// Variants only one side ran (named with their side), not compared.
    pub unmatched: Vec<String>,
}

/// The runs of a folder's first variant, and its name.
fn base(runs: &[RunRow]) -> Option<(&str, Vec<&RunRow>)> {
    let first = runs.iter().map(|r| r.index).min()?;
    let rows: Vec<&RunRow> = runs.iter().filter(|r| r.index == first).collect();
    Some((rows[0].variant.as_str(), rows))
}

fn variant_rows(runs: &[RunRow], name: &str) -> Vec<RunRow> {
    runs.iter()
        .filter(|r| r.variant == name)
        .cloned()
        .collect::<Vec<_>>()
}

/// The folders' shared variants, each side's Δ against its own base.
pub fn side_by_side(engine: &Folder, script: &Folder) -> Result<SideBySide> {
    let name = |f: &Folder| f.dir.display().to_string();
    let Some((engine_base, _)) = base(&engine.runs) else {
        bail!(
            "{}: no runs to read; run the engine's matrix first",
            name(engine)
        );
    };
    let Some((script_base, _)) = base(&script.runs) else {
        bail!(
            "{}: no runs to read; run the script's matrix first",
            name(script)
        );
    };
    // The script's runs carry its own convention's seconds only.
    let clock = script
        .runs
        .iter()
        .find_map(|r| r.clock.as_deref().and_then(Clock::parse))
        .unwrap_or(Clock::Wall);
    let delta = |rows: &[RunRow], base_name: &str, variant: &str| {
        let base = samples(&variant_rows(rows, base_name), clock, false);
        let this = samples(&variant_rows(rows, variant), clock, false);
        (between(&base.0, &this.0), between(&base.1, &this.1))
    };
    let names = |runs: &[RunRow], base: &str| {
        let mut seen: Vec<(u32, String)> = runs
            .iter()
            .filter(|r| r.variant != base)
            .map(|r| (r.index, r.variant.clone()))
            .collect();
        seen.sort();
        seen.dedup();
        seen.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
    };
    let (engine_names, script_names) = (
        names(&engine.runs, engine_base),
        names(&script.runs, script_base),
    );
    let mut rows = Vec::new();
    let mut unmatched = Vec::new();
    for v in &engine_names {
        if !script_names.contains(v) {
            unmatched.push(format!("{v} (engine only)"));
            continue;
        }
        let (et, ea) = delta(&engine.runs, engine_base, v);
        let (st, sa) = delta(&script.runs, script_base, v);
        rows.push(TrickRow {
            variant: v.clone(),
            time: (et, st),
            acc: (ea, sa),
        });
    }
    unmatched.extend(
        script_names
            .iter()
            .filter(|v| !engine_names.contains(v))
            .map(|v| format!("{v} (script only)")),
    );
    if rows.is_empty() {
        bail!(
            "{} and {} share no variant name besides their bases: name the script's variants as the engine's (`- trick`)",
            name(engine),
            name(script)
        );
    }
    Ok(SideBySide {
        engine: name(engine),
        script: name(script),
        clock,
        bases: (engine_base.to_string(), script_base.to_string()),
        rows,
        unmatched,
    })
}

fn cell(d: Option<Delta>, scale: f64) -> String {
    d.map_or_else(|| "-".into(), |d| d.label(scale))
}

fn yes_no(o: Option<bool>) -> &'static str {
    match o {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "-",
    }
}

impl SideBySide {
    /// The page: what was read, the table, and the legend.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# Does the engine's ablation tell the record's story?\n\n\
             - engine: `{}` (Δ against `{}`)\n- script: `{}` (Δ against `{}`)\n\
             - seconds on the {} clock, the script's own convention; Δ = variant − base with a 95% CI, paired by seed where both ran the same seeds; `*` where the CI excludes 0\n\
             - overlap: whether the two 95% intervals share a point; ≠: the two Δ point opposite ways\n",
            self.engine,
            self.bases.0,
            self.script,
            self.bases.1,
            self.clock.name()
        );
        let _ = writeln!(
            s,
            "| variant | engine Δ s | script Δ s | overlap | engine Δ acc (points) | script Δ acc (points) | overlap |\n|---|---|---|---|---|---|---|"
        );
        for r in &self.rows {
            let mark = |a, b| if opposite(a, b) { " ≠" } else { "" };
            let _ = writeln!(
                s,
                "| {} | {} | {}{} | {} | {} | {}{} | {} |",
                r.variant,
                cell(r.time.0, 1.0),
                cell(r.time.1, 1.0),
                mark(r.time.0, r.time.1),
                yes_no(overlap(r.time.0, r.time.1)),
                cell(r.acc.0, 100.0),
                cell(r.acc.1, 100.0),
                mark(r.acc.0, r.acc.1),
                yes_no(overlap(r.acc.0, r.acc.1)),
            );
        }
        if !self.unmatched.is_empty() {
            let _ = writeln!(
                s,
                "\nNot compared (one side only): {}.",
                self.unmatched.join(", ")
            );
        }
        s
    }

    /// One row a variant and side-pair, every number as is (empty where none).
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "variant,response,engine_delta,engine_lo,engine_hi,engine_n,script_delta,script_lo,script_hi,script_n,overlap,opposite\n",
        );
        let num = crate::util::csv_num;
        let side = |d: Option<Delta>| {
            d.map_or_else(
                || ",,,".to_string(),
                |d| format!("{},{},{},{}", num(d.mean), num(d.lo), num(d.hi), d.n),
            )
        };
        for r in &self.rows {
            for (response, (a, b)) in [("time_s", r.time), ("acc", r.acc)] {
                let _ = writeln!(
                    s,
                    "\"{}\",{response},{},{},{},{}",
                    r.variant.replace('"', "\"\""),
                    side(a),
                    side(b),
                    overlap(a, b).map_or(String::new(), |o| o.to_string()),
                    opposite(a, b)
                );
            }
        }
        s
    }
}
