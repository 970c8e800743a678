//! The training curves behind the curve chart: every run's step metrics,
//! aggregated per variant and step (one lazy query), so the chart only draws.

use anyhow::{Context, Result};
use polars::prelude::{DataType, IntoLazy, SortMultipleOptions, col};
use rayon::prelude::*;
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
