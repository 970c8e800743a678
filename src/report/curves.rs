//! The training curves behind the curve chart: every run's step metrics,
//! aggregated per variant and step (one lazy query), so the chart only draws.

use crate::config::{Clock, Stage};
use anyhow::{Context, Result};
use polars::prelude::{DataType, IntoLazy, SortMultipleOptions, col};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Mean curve over seeds with a min–max band, per variant.
pub struct Curve {
    pub index: usize,
    pub variant: String,
    /// (epoch, mean loss, min loss, max loss, mean lr, mean BN scale)
    pub points: Vec<(f64, f64, f64, f64, f64, Option<f64>)>,
}

/// A folder's step files, in name order.
fn step_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("steps"))
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The one-line error for a step file that does not read (a kill or a full
/// disk can leave one behind), naming it and the fix.
fn damaged(f: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is damaged (not a readable Parquet file): delete it; its run keeps its row in runs.parquet, only its curve is lost",
        f.display()
    )
}

/// The step-metric columns the curves read.
const CURVE_COLUMNS: [&str; 8] = [
    "matrix",
    "index",
    "variant",
    "step",
    "epoch",
    "loss",
    "lr",
    "bn_scale_mean",
];

/// Aggregates every run's step metrics by variant and step (polars, lazy).
#[allow(
    clippy::too_many_lines,
    reason = "one pass over every step file of every folder, its columns read in place"
)]
pub fn curves(dirs: &[PathBuf]) -> Result<Vec<Curve>> {
    let mut frames = Vec::new();
    for d in dirs {
        let files = step_files(d);
        if files.is_empty() {
            continue;
        }
        // Step files without a matrix column (older stores) take it from the manifest.
        let name = crate::store::read_manifest(d)
            .ok()
            .and_then(|m| m.get("matrix")?.as_str().map(str::to_string))
            .unwrap_or_default();
        let read: Vec<Result<polars::prelude::LazyFrame>> = files
            .par_iter()
            .map(|f| {
                let mut df = crate::store::read_parquet(f, None).map_err(|_| damaged(f))?;
                if df.column("matrix").is_err() {
                    df.with_column(polars::prelude::Column::new(
                        "matrix".into(),
                        vec![name.as_str(); df.height()],
                    ))?;
                }
                let cols: Vec<&str> = CURVE_COLUMNS
                    .into_iter()
                    .filter(|c| df.column(c).is_ok())
                    .collect();
                Ok(df.select(cols)?.lazy())
            })
            .collect();
        frames.extend(read.into_iter().collect::<Result<Vec<_>>>()?);
    }
    if frames.is_empty() {
        return Ok(Vec::new());
    }
    let lf = polars::prelude::concat(
        frames,
        polars::prelude::UnionArgs {
            diagonal: true,
            ..Default::default()
        },
    )?;
    let df = lf
        .group_by([col("matrix"), col("index"), col("variant"), col("step")])
        .agg([
            col("epoch").mean().alias("epoch"),
            col("loss").mean().alias("loss"),
            col("loss").min().alias("loss_min"),
            col("loss").max().alias("loss_max"),
            col("lr").mean().alias("lr"),
            col("bn_scale_mean").mean().alias("bn"),
        ])
        .sort(["matrix", "index", "step"], SortMultipleOptions::default())
        .collect()
        .context("aggregating step metrics")?;
    let f = |n: &str| -> Result<Vec<Option<f64>>> {
        Ok(df
            .column(n)?
            .cast(&DataType::Float64)?
            .f64()?
            .iter()
            .collect())
    };
    let (idx, ep, lo, lmin, lmax, lr, bn) = (
        f("index")?,
        f("epoch")?,
        f("loss")?,
        f("loss_min")?,
        f("loss_max")?,
        f("lr")?,
        f("bn")?,
    );
    let var: Vec<String> = df
        .column("variant")?
        .str()?
        .iter()
        .map(|v| v.unwrap_or("").to_string())
        .collect();
    let mut out: Vec<Curve> = Vec::new();
    for i in 0..df.height() {
        let index = idx[i].unwrap_or(0.0) as usize;
        if out
            .last()
            .is_none_or(|c| c.index != index || c.variant != var[i])
        {
            out.push(Curve {
                index,
                variant: var[i].clone(),
                points: Vec::new(),
            });
        }
        let c = out.last_mut().expect("pushed");
        c.points.push((
            ep[i].unwrap_or(0.0),
            lo[i].unwrap_or(f64::NAN),
            lmin[i].unwrap_or(f64::NAN),
            lmax[i].unwrap_or(f64::NAN),
            lr[i].unwrap_or(0.0),
            bn[i],
        ));
    }
    Ok(out)
}

/// One evaluation of a variant, aggregated over the seeds evaluated there.
#[derive(Clone, Debug, PartialEq)]
pub struct TimePoint {
    pub epoch: u32,
    /// Mean seconds on the variant's clock when the evaluation was made.
    pub seconds: f64,
    /// Mean test accuracy (with the run's TTA where it used TTA).
    pub acc: f64,
    /// Half-width of the t-based 95% CI of `acc` (`None` below 2 runs).
    pub acc_ci95: Option<f64>,
    /// Runs evaluated at this epoch.
    pub n: usize,
}

/// A variant's accuracy against seconds on its clock: the time-to-target
/// question answered per evaluation instead of only at the target.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeCurve {
    pub matrix: String,
    pub index: usize,
    pub variant: String,
    /// Finished runs behind the curve, and how many of them were flagged noisy.
    pub runs: usize,
    pub noisy: usize,
    pub points: Vec<TimePoint>,
}

/// (epoch, seconds on `clock`, accuracy) at each evaluation of one run, from
/// its epochs file. The seconds are rebuilt from the clocks' parts the way
/// `train::eval::time_on` adds them: DAWNBench-style is preparation and
/// whitening plus the training so far, airbench-style whitening plus the
/// training so far plus this evaluation, hlb the training so far; wall time
/// is not recorded per epoch, so it is the sum of its recorded parts
/// (preparation, whitening, training and evaluations so far).
fn run_evals(f: &Path, row: &crate::store::RunRow, clock: Clock) -> Result<Vec<(u32, f64, f64)>> {
    let df = crate::store::read_parquet(f, None).map_err(|_| damaged(f))?;
    let col_f = |n: &str| crate::store::f64_column(&df, n);
    let (epoch, acc, tta, train, eval) = (
        col_f("epoch")?,
        col_f("test_acc")?,
        col_f("test_acc_tta")?,
        col_f("train_s")?,
        col_f("eval_s")?,
    );
    let (prep, whiten) = (row.prep_s.unwrap_or(0.0), row.whiten_s.unwrap_or(0.0));
    // Runs stored before it was recorded counted no net build here.
    let build = row.build_s.unwrap_or(0.0);
    // Runs stored before it was recorded counted no preprocessing here.
    let preprocess = row.preprocess_s.unwrap_or(0.0);
    let (mut trained, mut evaluated) = (0.0, 0.0);
    let mut out = Vec::new();
    for i in 0..df.height() {
        trained += train[i].unwrap_or(0.0);
        evaluated += eval[i].unwrap_or(0.0);
        // An epoch without an evaluation records no test accuracy.
        let Some(a) = tta[i].or(acc[i]).filter(|a| a.is_finite()) else {
            continue;
        };
        // The clock's own sum of its stages (`Clock::sum`, as the engine's
        // time to target reads it), had the run stopped at this evaluation.
        let secs = clock
            .sum(|s| match s {
                Stage::Loading => prep - preprocess,
                Stage::Preprocessing => preprocess,
                Stage::Whitening => whiten,
                Stage::NetBuild => build,
                Stage::Training => trained,
                Stage::FinalEvaluation => eval[i].unwrap_or(0.0),
                Stage::EpochEvaluation => 0.0,
            })
            .unwrap_or(prep + whiten + trained + evaluated);
        out.push((epoch[i].unwrap_or(0.0) as u32, secs, a));
    }
    Ok(out)
}

/// Every variant's accuracy against seconds on its clock (`clock_of` picks
/// it per run), per evaluation epoch: the mean over the finished runs
/// evaluated there, with a t-based 95% CI of the accuracy. `drop_noisy`
/// leaves noisy runs out, as `report --drop-noisy` does in the tables.
pub fn time_curves(
    dirs: &[PathBuf],
    clock_of: &dyn Fn(&crate::store::RunRow) -> Clock,
    drop_noisy: bool,
) -> Result<Vec<TimeCurve>> {
    /// A variant's finished runs, its noisy ones, and (seconds, accuracy) per evaluation epoch.
    #[derive(Default)]
    struct Gathered {
        runs: usize,
        noisy: usize,
        evals: BTreeMap<u32, Vec<(f64, f64)>>,
    }
    let mut by_variant: BTreeMap<(String, usize, String), Gathered> = BTreeMap::new();
    for d in dirs {
        let p = d.join("runs.parquet");
        if !p.is_file() {
            continue;
        }
        // A run recorded twice in one folder counts once, as its last row.
        let mut rows = crate::store::read_runs(&p)?;
        rows.reverse();
        let mut seen = std::collections::HashSet::new();
        rows.retain(|r| seen.insert((r.matrix.clone(), r.variant.clone(), r.repeat)));
        rows.reverse();
        for row in rows.iter().filter(|r| {
            r.status == crate::store::Ended::Done && !(drop_noisy && r.noisy == Some(true))
        }) {
            let key = (row.matrix.clone(), row.index as usize, row.variant.clone());
            let entry = by_variant.entry(key).or_default();
            entry.runs += 1;
            entry.noisy += usize::from(row.noisy == Some(true));
            let Some(f) = crate::store::run_file(d, "epochs", row) else {
                continue;
            };
            for (epoch, secs, acc) in run_evals(&f, row, clock_of(row))? {
                entry.evals.entry(epoch).or_default().push((secs, acc));
            }
        }
    }
    Ok(by_variant
        .into_iter()
        .map(|((matrix, index, variant), g)| {
            let points = g
                .evals
                .into_iter()
                .map(|(epoch, v)| {
                    let n = v.len();
                    let accs: Vec<f64> = v.iter().map(|p| p.1).collect();
                    TimePoint {
                        epoch,
                        seconds: v.iter().map(|p| p.0).sum::<f64>() / n as f64,
                        acc: accs.iter().sum::<f64>() / n as f64,
                        acc_ci95: (n >= 2).then(|| crate::stats::ci95_half_width(&accs)),
                        n,
                    }
                })
                .collect();
            TimeCurve {
                matrix,
                index,
                variant,
                runs: g.runs,
                noisy: g.noisy,
                points,
            }
        })
        .collect())
}
