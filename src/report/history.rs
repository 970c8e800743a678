//! The nightly history: one row per night and variant in `ROOT/history.csv`,
//! appended by `tricklab nightly` and read back (polars) by
//! `tricklab report --history ROOT` as each rung's time and accuracy across
//! nights, with the commit and data of each night.

use super::{Comparison, Report};
use crate::util::{csv_num as num, csv_text as csv_field};
use anyhow::{Context, Result};
use polars::prelude::*;
use polars_io::prelude::{CsvReadOptions, SerReader};
use std::path::{Path, PathBuf};

/// The header of `history.csv`, its columns in order.
pub const COLUMNS: &[&str] = &[
    "night",
    "folder",
    "git_commit",
    "data_hash",
    "matrix",
    "index",
    "variant",
    "clock",
    "n",
    "time_s",
    "time_ci95",
    "acc_tta",
    "acc_tta_ci95",
    "verdict",
];

/// One variant on one night.
#[derive(Clone, Debug, PartialEq)]
pub struct Night {
    /// When the night's session started (RFC 3339, from its manifest).
    pub night: String,
    pub folder: String,
    pub git_commit: String,
    pub data_hash: String,
    pub matrix: String,
    pub index: usize,
    pub variant: String,
    pub clock: String,
    pub n: usize,
    pub time_s: f64,
    pub time_ci95: f64,
    pub acc_tta: f64,
    pub acc_tta_ci95: f64,
    /// Against the baseline of that night.
    pub verdict: String,
}

pub fn history_file(root: &Path) -> PathBuf {
    root.join("history.csv")
}

/// The rows a finished night adds: its report, its manifest's facts and the
/// verdicts of its comparison.
pub fn nights_of(dir: &Path, report: &Report, verdicts: &[Comparison]) -> Result<Vec<Night>> {
    let m = crate::store::read_manifest(dir)?;
    let text = |k: &str| m[k].as_str().unwrap_or("unknown").to_string();
    let data_hash = m["data_sets"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["hash"].as_str())
                .collect::<Vec<_>>()
                .join("+")
        })
        .unwrap_or_default();
    Ok(report
        .rows
        .iter()
        .map(|r| Night {
            night: text("created_at"),
            folder: dir.display().to_string(),
            // Outside a checkout the session's own commit is unknown; the
            // binary's (built from a checkout) is what ran.
            git_commit: match text("git_commit").as_str() {
                "unknown" | "" => text("build_commit"),
                c => c.to_string(),
            },
            data_hash: data_hash.clone(),
            matrix: r.matrix.clone(),
            index: r.index,
            variant: r.variant.clone(),
            clock: r.headline.name().to_string(),
            n: r.n,
            time_s: r.time().mean,
            time_ci95: r.time().ci95,
            acc_tta: r.acc_tta_mean,
            acc_tta_ci95: r.acc_tta_ci95,
            verdict: verdicts
                .iter()
                .find(|c| c.variant == r.variant)
                .map_or_else(|| "-".into(), |c| c.verdict.label()),
        })
        .collect())
}

/// Appends nights to `ROOT/history.csv` (a rewrite through a temporary file,
/// so a kill leaves the old history or the new one).
pub fn append(root: &Path, nights: &[Night]) -> Result<PathBuf> {
    // Two nightlies sharing a history take turns: read, add, write under the
    // folder's lock, so neither night is lost.
    let _lock = crate::util::lock::FolderLock::acquire_waiting(
        root,
        "appending a night to the history",
        std::time::Duration::from_secs(600),
    )?;
    let path = history_file(root);
    let mut text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{}\n", COLUMNS.join(",")),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the history {}", path.display()));
        }
    };
    if !text.starts_with(&COLUMNS.join(",")) {
        anyhow::bail!(
            "{} is not a tricklab history (its header differs): pass another --history folder",
            path.display()
        );
    }
    for n in nights {
        let fields = [
            csv_field(&n.night),
            csv_field(&n.folder),
            csv_field(&n.git_commit),
            csv_field(&n.data_hash),
            csv_field(&n.matrix),
            n.index.to_string(),
            csv_field(&n.variant),
            n.clock.clone(),
            n.n.to_string(),
            num(n.time_s),
            num(n.time_ci95),
            num(n.acc_tta),
            num(n.acc_tta_ci95),
            csv_field(&n.verdict),
        ];
        text.push_str(&fields.join(","));
        text.push('\n');
    }
    crate::util::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Every night of a history, oldest first, in rung order within a night.
pub fn load(root: &Path) -> Result<Vec<Night>> {
    let path = history_file(root);
    if !path.is_file() {
        anyhow::bail!(
            "{}: no history.csv here; `tricklab nightly MATRIX --baseline DIR --history {}` starts one",
            root.display(),
            root.display()
        );
    }
    // Garbage (random bytes, a NUL) is refused by its header before polars
    // reads it: polars' own error would print its query plan, NUL and all.
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cannot read the history {}", path.display()))?;
    if !bytes.starts_with(COLUMNS.join(",").as_bytes()) {
        anyhow::bail!(
            "{} is not a tricklab history (its first line is not the `{},...` header): move it away (the next nightly starts a new one) or pass another --history folder",
            path.display(),
            COLUMNS[..2].join(",")
        );
    }
    read_nights(&path).map_err(|e| {
        anyhow::anyhow!(
            "{} is damaged ({}): fix or delete its bad lines, or move it away (the next nightly starts a new one)",
            path.display(),
            short_cause(&e)
        )
    })
}

/// The root cause of `e` fit for one line of a terminal: its first line,
/// control characters dropped, at most 160 characters.
fn short_cause(e: &anyhow::Error) -> String {
    let text = e.root_cause().to_string();
    let first = text.lines().next().unwrap_or("").trim();
    let clean: String = first.chars().filter(|c| !c.is_control()).collect();
    match clean.char_indices().nth(160) {
        Some((i, _)) => format!("{}...", &clean[..i]),
        None => clean,
    }
}

/// The rows of the history file `path` (its header checked), in order.
fn read_nights(path: &Path) -> Result<Vec<Night>> {
    let df = CsvReadOptions::default()
        .with_has_header(true)
        .try_into_reader_with_file_path(Some(path.to_path_buf()))?
        .finish()?
        .lazy()
        .sort(["night", "index"], SortMultipleOptions::default())
        .collect()?;
    let s = |c: &str| -> Result<Vec<String>> {
        Ok(df
            .column(c)?
            .cast(&DataType::String)?
            .str()?
            .iter()
            .map(|v| v.unwrap_or("").to_string())
            .collect())
    };
    let f = |c: &str| -> Result<Vec<f64>> {
        Ok(df
            .column(c)?
            .cast(&DataType::Float64)?
            .f64()?
            .iter()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect())
    };
    let (night, folder, commit, hash) =
        (s("night")?, s("folder")?, s("git_commit")?, s("data_hash")?);
    let (matrix, variant, clock, verdict) =
        (s("matrix")?, s("variant")?, s("clock")?, s("verdict")?);
    let (index, n) = (f("index")?, f("n")?);
    let (t, tci, a, aci) = (
        f("time_s")?,
        f("time_ci95")?,
        f("acc_tta")?,
        f("acc_tta_ci95")?,
    );
    Ok((0..df.height())
        .map(|i| Night {
            night: night[i].clone(),
            folder: folder[i].clone(),
            git_commit: commit[i].clone(),
            data_hash: hash[i].clone(),
            matrix: matrix[i].clone(),
            index: index[i] as usize,
            variant: variant[i].clone(),
            clock: clock[i].clone(),
            n: n[i] as usize,
            time_s: t[i],
            time_ci95: tci[i],
            acc_tta: a[i],
            acc_tta_ci95: aci[i],
            verdict: verdict[i].clone(),
        })
        .collect())
}

/// The history as a Markdown table: per rung, one line per night.
/// The nights for `report --history --format json`: the verdict as one
/// lowercase word (the CSV keeps the table's label).
pub fn to_json(nights: &[Night]) -> serde_json::Value {
    let word = |label: &str| {
        let head = label.split(['(', ':']).next().unwrap_or("").trim();
        match head {
            "-" => "none".to_string(),
            h => h.to_lowercase().replace(' ', "_"),
        }
    };
    nights
        .iter()
        .map(|n| {
            serde_json::json!({
                "night": n.night, "folder": n.folder, "git_commit": n.git_commit,
                "data_hash": n.data_hash, "matrix": n.matrix, "index": n.index,
                "variant": n.variant, "clock": n.clock, "n": n.n,
                "time_s": n.time_s, "time_ci95": n.time_ci95,
                "acc_tta": n.acc_tta, "acc_tta_ci95": n.acc_tta_ci95,
                "verdict": word(&n.verdict),
            })
        })
        .collect()
}

/// The rungs the history holds, in matrix order, each once.
pub fn rungs(nights: &[Night]) -> Vec<(usize, &str)> {
    let mut rungs: Vec<(usize, &str)> = nights
        .iter()
        .map(|n| (n.index, n.variant.as_str()))
        .collect();
    rungs.sort();
    rungs.dedup();
    rungs
}

pub fn to_markdown(nights: &[Night]) -> String {
    let mut out = String::from(
        "# tricklab history\n\nEach rung's full-run time (its recipe's clock, mean ± 95% CI) and accuracy (TTA, mean ± 95% CI) night by night, with the commit and data of the night and the verdict against that night's baseline.\n\n",
    );
    let rungs = rungs(nights);
    let pm = |m: f64, ci: f64, scale: f64, digits: usize| {
        if ci.is_finite() {
            format!("{:.digits$} ± {:.digits$}", scale * m, scale * ci)
        } else {
            format!("{:.digits$}", scale * m)
        }
    };
    for (idx, v) in rungs {
        out += &format!(
            "## {idx} {v}\n\n| night | commit | data | n | time (s) | acc % | verdict |\n|---|---|---|---|---|---|---|\n"
        );
        for n in nights.iter().filter(|n| n.index == idx && n.variant == v) {
            out += &format!(
                "| {} | {} | {} | {} | {} ({}) | {} | {} |\n",
                n.night.get(..16).unwrap_or(&n.night),
                n.git_commit.get(..10).unwrap_or(&n.git_commit),
                n.data_hash.get(..12).unwrap_or(&n.data_hash),
                n.n,
                pm(n.time_s, n.time_ci95, 1.0, 2),
                n.clock,
                pm(n.acc_tta, n.acc_tta_ci95, 100.0, 2),
                n.verdict
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn night(i: usize, day: u32, t: f64, verdict: &str) -> Night {
        Night {
            night: format!("2026-11-{day:02}T02:00:00+00:00"),
            folder: format!("results/m/202611{day:02}"),
            git_commit: "abc1234".into(),
            data_hash: "d4t4".into(),
            matrix: "m".into(),
            index: i,
            variant: if i == 0 {
                "base".into()
            } else {
                "+ celu, fast".into()
            },
            clock: "dawn".into(),
            n: 5,
            time_s: t,
            time_ci95: if i == 0 { f64::NAN } else { 0.1 },
            acc_tta: 0.94,
            acc_tta_ci95: 0.001,
            verdict: verdict.into(),
        }
    }

    #[test]
    fn nights_append_and_read_back_in_order() {
        let root = tempfile::tempdir().unwrap();
        append(
            root.path(),
            &[night(0, 2, 10.0, "no change"), night(1, 2, 8.0, "faster")],
        )
        .unwrap();
        append(
            root.path(),
            &[
                night(0, 3, 11.0, "SLOWER"),
                night(1, 3, 8.1, "inconclusive (need 3 more runs a side)"),
            ],
        )
        .unwrap();
        let h = load(root.path()).unwrap();
        assert_eq!(h.len(), 4);
        assert_eq!((h[0].variant.as_str(), h[0].time_s), ("base", 10.0));
        assert!(
            h[0].time_ci95.is_nan(),
            "a missing CI reads back as missing"
        );
        assert_eq!(h[1], night(1, 2, 8.0, "faster"));
        assert_eq!(h[3].variant, "+ celu, fast");
        assert_eq!(h[3].verdict, "inconclusive (need 3 more runs a side)");
        let md = to_markdown(&h);
        assert!(md.contains("## 1 + celu, fast") && md.contains("| 2026-11-03T02:00 | abc1234 | d4t4 | 5 | 8.10 ± 0.10 (dawn) | 94.00 ± 0.10 | inconclusive"), "{md}");
        // Not a history: refused with the file named.
        std::fs::write(history_file(root.path()), "a,b\n1,2\n").unwrap();
        let e = append(root.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("history.csv") && e.contains("--history"), "{e}");
    }
}
