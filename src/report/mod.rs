//! Aggregation of results folders with polars (lazy): per variant n,
//! accuracy mean ± 95% CI, P(acc ≥ target), each clock's mean, min and
//! median (airbench reports its best time, Page a mean: columns name their
//! statistic), time-to-target, and speedups against the previous and first rung.

mod compare;
mod format;
pub mod history;

pub use compare::{Comparison, Diff, Rel, Thresholds, TimeModel, Verdict, compare, drift, welch};

use crate::util::stats::t95;
use anyhow::{Context, Result, bail};
use polars::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Which timing convention the speedups and the ladder use (TRICKS.md section 5).
pub use crate::config::Clock;

/// The convention a recipe's publication timed itself with, for folders
/// whose manifest predates the clock being recorded with each run.
pub fn clock_of_recipe(recipe: &str) -> Clock {
    crate::recipe::convention(recipe).unwrap_or(Clock::Dawn)
}

#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// Overrides the target recorded with the runs.
    pub target: Option<f64>,
    /// One clock for every variant; `None`: each recipe's own convention
    /// (DAWNBench-style for Page's, airbench-style for airbench's).
    pub clock: Option<Clock>,
    /// One row per variant and device (`variant @ device`).
    pub by_device: bool,
}

/// Mean, min and median of one clock over a variant's runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClockStats {
    pub mean: f64,
    /// Sample standard deviation over the runs (NaN below 2 runs).
    pub std: f64,
    pub ci95: f64,
    pub min: f64,
    pub median: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariantStats {
    pub matrix: String,
    pub index: usize,
    pub variant: String,
    pub tricks: String,
    pub recipe: String,
    /// The clock of this variant's headline time and speedups.
    pub headline: Clock,
    /// Finished runs.
    pub n: usize,
    pub failed: usize,
    pub acc_mean: f64,
    pub acc_std: f64,
    pub acc_ci95: f64,
    /// Accuracy with each run's TTA level.
    pub acc_tta_mean: f64,
    pub acc_tta_std: f64,
    pub acc_tta_ci95: f64,
    pub p_target: f64,
    pub dawn: ClockStats,
    pub airbench: ClockStats,
    pub hlb: ClockStats,
    pub wall: ClockStats,
    pub eval_mean: f64,
    /// Time to the first evaluation at the target, per run, averaged over the
    /// `ttt_n` runs that reached it (a selection: `n - ttt_n` did not).
    pub ttt_mean: Option<f64>,
    pub ttt_ci95: Option<f64>,
    pub ttt_n: usize,
    /// Previous rung's mean (chosen clock) / this rung's.
    pub speedup_prev: Option<f64>,
    pub speedup_first: Option<f64>,
}

impl VariantStats {
    /// The full-run time in this variant's headline convention.
    pub fn time(&self) -> &ClockStats {
        self.clock(self.headline)
    }

    pub fn clock(&self, c: Clock) -> &ClockStats {
        match c {
            Clock::Dawn => &self.dawn,
            Clock::Airbench => &self.airbench,
            Clock::Hlb => &self.hlb,
            Clock::Wall => &self.wall,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub target: f64,
    /// The clock all rows share (`None`: rows of recipes with different conventions).
    pub clock: Option<Clock>,
    pub dirs: Vec<PathBuf>,
    pub rows: Vec<VariantStats>,
}

fn runs_file(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("runs.parquet");
    if dir.is_file() {
        bail!(
            "{}: a file, not a results folder; pass a folder made by `tricklab run` (results/<matrix>/<timestamp>)",
            dir.display()
        );
    }
    if !dir.is_dir() {
        bail!("{}: no such results folder", dir.display());
    }
    if !crate::store::is_session(dir) {
        // results/ or results/<matrix>/: name the folder the user meant.
        let inner: Vec<PathBuf> = crate::store::sessions_below(dir, 2)
            .into_iter()
            .filter(|d| d.join("runs.parquet").is_file())
            .collect();
        if let Some(newest) = inner.last() {
            bail!(
                "{}: not a results folder but {} of them; pass one, e.g. {}",
                dir.display(),
                inner.len(),
                newest.display()
            );
        }
    }
    if !p.is_file() {
        bail!(
            "{}: no runs.parquet yet (no run has finished in this folder)",
            dir.display()
        );
    }
    Ok(p)
}

/// Matrices whose recorded matrix file is not a ladder. A folder whose matrix
/// cannot be read back keeps the ladder reading: the columns stay filled.
fn non_ladder_matrices(dirs: &[PathBuf]) -> std::collections::HashSet<String> {
    dirs.iter()
        .filter_map(|d| {
            let m = crate::store::recorded_matrix(&crate::store::read_manifest(d).ok()?)?;
            (m.kind != crate::matrix::Kind::Ladder).then_some(m.name)
        })
        .collect()
}

/// All run rows of the folders as one lazy frame.
pub fn scan_runs(dirs: &[PathBuf]) -> Result<LazyFrame> {
    if dirs.is_empty() {
        bail!("name at least one results folder (e.g. results/demo-ladder/20261122-120000)");
    }
    let frames = dirs
        .iter()
        .map(|d| {
            let p = runs_file(d)?;
            let s = p.to_string_lossy().to_string();
            LazyFrame::scan_parquet(PlRefPath::from(s.as_str()), ScanArgsParquet::default())
                .map_err(anyhow::Error::from)
                .with_context(|| {
                    format!(
                        "{} is not a valid Parquet file; delete it to rebuild the table",
                        p.display()
                    )
                })
                // A run recorded twice in one folder counts once, as its last row
                // (rows from different folders are different runs).
                .map(|lf| {
                    let key = ["matrix", "variant", "repeat"].map(col).to_vec();
                    lf.unique_stable_generic(Some(key), UniqueKeepStrategy::Last)
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(concat(
        frames,
        UnionArgs {
            diagonal: true,
            to_supertypes: true,
            ..Default::default()
        },
    )?)
}

fn f(df: &DataFrame, name: &str) -> Result<Vec<Option<f64>>> {
    Ok(df
        .column(name)?
        .cast(&DataType::Float64)?
        .f64()?
        .iter()
        .collect())
}

pub fn aggregate(dirs: &[PathBuf], opts: &ReportOptions) -> Result<Report> {
    let runs = scan_runs(dirs)?;
    let target_lit = match opts.target {
        Some(t) => lit(t),
        None => col("target_acc"),
    };
    let mut aggs = vec![
        col("status")
            .eq(lit("done"))
            .cast(DataType::UInt32)
            .sum()
            .alias("n"),
        col("status")
            .eq(lit("failed"))
            .cast(DataType::UInt32)
            .sum()
            .alias("failed"),
        col("tricks").first().alias("tricks"),
        col("recipe").first().alias("recipe"),
        col("target_acc").first().alias("target_acc"),
    ];
    let done = || col("status").eq(lit("done"));
    for c in ["acc", "acc_tta"] {
        aggs.push(col(c).filter(done()).mean().alias(format!("{c}_mean")));
        aggs.push(col(c).filter(done()).std(1).alias(format!("{c}_std")));
    }
    aggs.push(
        col("acc_tta")
            .gt_eq(target_lit)
            .filter(done())
            .cast(DataType::Float64)
            .mean()
            .alias("p_target"),
    );
    for c in ["dawn_s", "airbench_s", "hlb_s", "wall_s"] {
        aggs.push(col(c).filter(done()).mean().alias(format!("{c}_mean")));
        aggs.push(col(c).filter(done()).std(1).alias(format!("{c}_std")));
        aggs.push(col(c).filter(done()).min().alias(format!("{c}_min")));
        aggs.push(col(c).filter(done()).median().alias(format!("{c}_median")));
    }
    aggs.push(col("eval_s").filter(done()).mean().alias("eval_s_mean"));
    aggs.push(
        col("time_to_target_s")
            .filter(done())
            .mean()
            .alias("ttt_mean"),
    );
    aggs.push(
        col("time_to_target_s")
            .filter(done())
            .std(1)
            .alias("ttt_std"),
    );
    aggs.push(
        col("time_to_target_s")
            .filter(done())
            .count()
            .alias("ttt_n"),
    );
    let mut keys = vec![col("matrix"), col("index"), col("variant")];
    let mut order = vec!["matrix", "index"];
    if opts.by_device {
        keys.push(col("device"));
        order.push("device");
    }
    let df = runs
        .group_by(keys)
        .agg(aggs)
        .sort(order, SortMultipleOptions::default())
        .collect()
        .map_err(anyhow::Error::from)
        .with_context(|| {
            let names: Vec<String> = dirs
                .iter()
                .map(|d| d.join("runs.parquet").display().to_string())
                .collect();
            format!(
                "cannot read {} (a damaged file can be deleted: the per-run files stay)",
                names.join(", ")
            )
        })?;

    let s = |n: &str| -> Result<Vec<String>> {
        Ok(df
            .column(n)?
            .cast(&DataType::String)?
            .str()?
            .iter()
            .map(|v| v.unwrap_or("").to_string())
            .collect())
    };
    let (matrix, mut variant, tricks) = (s("matrix")?, s("variant")?, s("tricks")?);
    if opts.by_device {
        for (v, d) in variant.iter_mut().zip(s("device")?) {
            *v = format!("{v} @ {d}");
        }
    }
    let recipe = s("recipe")?;
    let index = f(&df, "index")?;
    let (n, failed, ttt_n) = (f(&df, "n")?, f(&df, "failed")?, f(&df, "ttt_n")?);
    let target = opts.target.unwrap_or_else(|| {
        f(&df, "target_acc")
            .ok()
            .and_then(|v| v.into_iter().flatten().find(|t| t.is_finite()))
            .unwrap_or(0.94)
    });
    let get = |name: &str| f(&df, name);
    let cols: std::collections::HashMap<&str, Vec<Option<f64>>> = [
        "acc_mean",
        "acc_std",
        "acc_tta_mean",
        "acc_tta_std",
        "p_target",
        "dawn_s_mean",
        "dawn_s_std",
        "dawn_s_min",
        "dawn_s_median",
        "airbench_s_mean",
        "airbench_s_std",
        "airbench_s_min",
        "airbench_s_median",
        "hlb_s_mean",
        "hlb_s_std",
        "hlb_s_min",
        "hlb_s_median",
        "wall_s_mean",
        "wall_s_std",
        "wall_s_min",
        "wall_s_median",
        "eval_s_mean",
        "ttt_mean",
        "ttt_std",
    ]
    .into_iter()
    .map(|c| Ok((c, get(c)?)))
    .collect::<Result<_>>()?;
    let v = |c: &str, i: usize| cols[c][i].unwrap_or(f64::NAN);
    let ci = |std: f64, n: usize| {
        if n >= 2 && std.is_finite() {
            t95(n - 1) * std / (n as f64).sqrt()
        } else {
            f64::NAN
        }
    };
    let mut rows: Vec<VariantStats> = (0..df.height())
        .map(|i| {
            let n_i = n[i].unwrap_or(0.0) as usize;
            let clock = |p: &str| ClockStats {
                mean: v(&format!("{p}_mean"), i),
                std: v(&format!("{p}_std"), i),
                ci95: ci(v(&format!("{p}_std"), i), n_i),
                min: v(&format!("{p}_min"), i),
                median: v(&format!("{p}_median"), i),
            };
            let tn = ttt_n[i].unwrap_or(0.0) as usize;
            VariantStats {
                matrix: matrix[i].clone(),
                index: index[i].unwrap_or(0.0) as usize,
                variant: variant[i].clone(),
                tricks: tricks[i].clone(),
                recipe: recipe[i].clone(),
                headline: opts.clock.unwrap_or_else(|| clock_of_recipe(&recipe[i])),
                n: n_i,
                failed: failed[i].unwrap_or(0.0) as usize,
                acc_mean: v("acc_mean", i),
                acc_std: v("acc_std", i),
                acc_ci95: ci(v("acc_std", i), n_i),
                acc_tta_mean: v("acc_tta_mean", i),
                acc_tta_std: v("acc_tta_std", i),
                acc_tta_ci95: ci(v("acc_tta_std", i), n_i),
                p_target: v("p_target", i),
                dawn: clock("dawn_s"),
                airbench: clock("airbench_s"),
                hlb: clock("hlb_s"),
                wall: clock("wall_s"),
                eval_mean: v("eval_s_mean", i),
                ttt_mean: (tn > 0).then(|| v("ttt_mean", i)),
                ttt_ci95: (tn > 1).then(|| ci(v("ttt_std", i), tn)),
                ttt_n: tn,
                speedup_prev: None,
                speedup_first: None,
            }
        })
        .collect();
    // Speedups within each matrix, on the chosen clock. "Against the previous
    // variant" means something only on a ladder, where each rung builds on the last.
    let unordered = non_ladder_matrices(dirs);
    let mut first: Option<(String, f64)> = None;
    let mut prev: Option<(String, f64)> = None;
    for r in rows.iter_mut() {
        let t = r.time().mean;
        if first.as_ref().is_none_or(|(m, _)| *m != r.matrix) {
            first = Some((r.matrix.clone(), t));
            prev = None;
        }
        let ratio = |base: f64| (t.is_finite() && base.is_finite() && t > 0.0).then(|| base / t);
        r.speedup_first = first
            .as_ref()
            .filter(|_| prev.is_some())
            .and_then(|(_, b)| ratio(*b));
        r.speedup_prev = prev
            .as_ref()
            .filter(|_| !unordered.contains(&r.matrix))
            .and_then(|(_, b)| ratio(*b));
        if r.n > 0 {
            prev = Some((r.matrix.clone(), t));
        }
    }
    let clock = rows.first().map(|r| r.headline);
    let clock = clock.filter(|c| rows.iter().all(|r| r.headline == *c));
    Ok(Report {
        target,
        clock,
        dirs: dirs.to_vec(),
        rows,
    })
}

#[cfg(test)]
mod tests;
