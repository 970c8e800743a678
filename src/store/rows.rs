//! One summary row per run, to and from `runs.parquet`.

use crate::events::{RunId, RunSummary};
use anyhow::Result;
use polars::prelude::*;
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    pub matrix: String,
    pub index: u32,
    pub variant: String,
    pub repeat: u32,
    pub seed: u64,
    pub status: String,
    pub reason: Option<String>,
    pub recipe: String,
    pub tricks: String,
    pub overrides: String,
    pub target_acc: f64,
    pub acc: Option<f64>,
    pub acc_tta: Option<f64>,
    pub dawn_s: Option<f64>,
    pub airbench_s: Option<f64>,
    pub hlb_s: Option<f64>,
    pub eval_s: Option<f64>,
    pub prep_s: Option<f64>,
    pub whiten_s: Option<f64>,
    pub wall_s: Option<f64>,
    pub time_to_target_s: Option<f64>,
    pub epoch_to_target: Option<u32>,
    pub epochs: Option<f64>,
    pub steps: Option<u64>,
    pub peak_mem_bytes: Option<u64>,
    pub final_train_loss: Option<f64>,
    pub device: String,
    pub data_hash: String,
    pub finished_at: String,
}

impl RunRow {
    pub fn new(
        run: &RunId,
        started: Option<(u64, &serde_json::Value, f64)>,
        status: &str,
        reason: Option<String>,
        s: Option<&RunSummary>,
    ) -> RunRow {
        let (seed, cfg, target) = match started {
            Some((seed, cfg, t)) => (seed, cfg.clone(), t),
            None => (0, serde_json::Value::Null, f64::NAN),
        };
        let join = |v: &serde_json::Value, sep: &str| {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(sep)
                })
                .unwrap_or_default()
        };
        let c = s.map(|s| &s.clocks);
        RunRow {
            matrix: run.matrix.clone(),
            index: run.index as u32,
            variant: run.variant.clone(),
            repeat: run.repeat as u32,
            seed,
            status: status.into(),
            reason,
            recipe: cfg["recipe"].as_str().unwrap_or_default().into(),
            tricks: join(&cfg["tricks_on"], ","),
            overrides: join(&cfg["overrides"], ";"),
            target_acc: target,
            acc: s.map(|s| s.acc),
            acc_tta: s.map(|s| s.acc_tta),
            dawn_s: c.map(|c| c.dawn_s),
            airbench_s: c.map(|c| c.airbench_s),
            hlb_s: c.map(|c| c.hlb_s),
            eval_s: c.map(|c| c.eval_s),
            prep_s: c.map(|c| c.prep_s),
            whiten_s: c.map(|c| c.whiten_s),
            wall_s: c.map(|c| c.wall_s),
            time_to_target_s: s.and_then(|s| s.time_to_target_s),
            epoch_to_target: s.and_then(|s| s.epoch_to_target.map(|e| e as u32)),
            epochs: s.map(|s| s.epochs),
            steps: s.map(|s| s.steps),
            peak_mem_bytes: s.and_then(|s| s.peak_mem_bytes),
            final_train_loss: s.map(|s| s.final_train_loss),
            device: s.map(|s| s.device.clone()).unwrap_or_default(),
            data_hash: cfg["data_hash"].as_str().unwrap_or_default().into(),
            finished_at: chrono::Local::now().to_rfc3339(),
        }
    }
}

macro_rules! col {
    ($rows:expr, $name:literal, $f:ident) => {
        Column::new(
            $name.into(),
            $rows.iter().map(|r| r.$f.clone()).collect::<Vec<_>>(),
        )
    };
}

pub fn runs_frame(rows: &[RunRow]) -> Result<DataFrame> {
    let cols = vec![
        col!(rows, "matrix", matrix),
        col!(rows, "index", index),
        col!(rows, "variant", variant),
        col!(rows, "repeat", repeat),
        col!(rows, "seed", seed),
        col!(rows, "status", status),
        col!(rows, "reason", reason),
        col!(rows, "recipe", recipe),
        col!(rows, "tricks", tricks),
        col!(rows, "overrides", overrides),
        col!(rows, "target_acc", target_acc),
        col!(rows, "acc", acc),
        col!(rows, "acc_tta", acc_tta),
        col!(rows, "dawn_s", dawn_s),
        col!(rows, "airbench_s", airbench_s),
        col!(rows, "hlb_s", hlb_s),
        col!(rows, "eval_s", eval_s),
        col!(rows, "prep_s", prep_s),
        col!(rows, "whiten_s", whiten_s),
        col!(rows, "wall_s", wall_s),
        col!(rows, "time_to_target_s", time_to_target_s),
        col!(rows, "epoch_to_target", epoch_to_target),
        col!(rows, "epochs", epochs),
        col!(rows, "steps", steps),
        col!(rows, "peak_mem_bytes", peak_mem_bytes),
        col!(rows, "final_train_loss", final_train_loss),
        col!(rows, "device", device),
        col!(rows, "data_hash", data_hash),
        col!(rows, "finished_at", finished_at),
    ];
    Ok(DataFrame::new(rows.len(), cols)?)
}

pub fn write_runs(path: &Path, rows: &[RunRow]) -> Result<()> {
    let mut df = runs_frame(rows)?;
    super::write_parquet(path, &mut df)
}

/// Reads `runs.parquet` back (for resume and for tools that want rows).
pub fn read_runs(path: &Path) -> Result<Vec<RunRow>> {
    let bad = || {
        format!(
            "{} is not a valid runs.parquet; delete it to start the folder's table afresh (per-run files are kept)",
            path.display()
        )
    };
    let f = std::fs::File::open(path)
        .map_err(|e| anyhow::Error::from(e).context(format!("cannot open {}", path.display())))?;
    let df = ParquetReader::new(f)
        .finish()
        .map_err(|e| bad_err(e.into(), &bad))?;
    let s = |n: &str| -> Result<Vec<Option<String>>> {
        Ok(df
            .column(n)
            .map_err(|e| bad_err(e.into(), &bad))?
            .str()
            .map_err(|e| bad_err(e.into(), &bad))?
            .iter()
            .map(|v| v.map(String::from))
            .collect())
    };
    let f64s = |n: &str| -> Result<Vec<Option<f64>>> {
        Ok(df
            .column(n)
            .map_err(|e| bad_err(e.into(), &bad))?
            .cast(&DataType::Float64)?
            .f64()?
            .iter()
            .collect())
    };
    let u64s = |n: &str| -> Result<Vec<Option<u64>>> {
        Ok(df
            .column(n)
            .map_err(|e| bad_err(e.into(), &bad))?
            .cast(&DataType::UInt64)?
            .u64()?
            .iter()
            .collect())
    };
    let (matrix, index, variant, repeat, seed, status, reason, recipe, tricks, overrides) = (
        s("matrix")?,
        u64s("index")?,
        s("variant")?,
        u64s("repeat")?,
        u64s("seed")?,
        s("status")?,
        s("reason")?,
        s("recipe")?,
        s("tricks")?,
        s("overrides")?,
    );
    let (target, acc, acc_tta, dawn, air, hlb, eval, prep, whiten, wall, ttt) = (
        f64s("target_acc")?,
        f64s("acc")?,
        f64s("acc_tta")?,
        f64s("dawn_s")?,
        f64s("airbench_s")?,
        f64s("hlb_s")?,
        f64s("eval_s")?,
        f64s("prep_s")?,
        f64s("whiten_s")?,
        f64s("wall_s")?,
        f64s("time_to_target_s")?,
    );
    let (ett, epochs, steps, mem, ftl) = (
        u64s("epoch_to_target")?,
        f64s("epochs")?,
        u64s("steps")?,
        u64s("peak_mem_bytes")?,
        f64s("final_train_loss")?,
    );
    let (device, hash, at) = (s("device")?, s("data_hash")?, s("finished_at")?);
    Ok((0..df.height())
        .map(|i| RunRow {
            matrix: matrix[i].clone().unwrap_or_default(),
            index: index[i].unwrap_or(0) as u32,
            variant: variant[i].clone().unwrap_or_default(),
            repeat: repeat[i].unwrap_or(0) as u32,
            seed: seed[i].unwrap_or(0),
            status: status[i].clone().unwrap_or_default(),
            reason: reason[i].clone(),
            recipe: recipe[i].clone().unwrap_or_default(),
            tricks: tricks[i].clone().unwrap_or_default(),
            overrides: overrides[i].clone().unwrap_or_default(),
            target_acc: target[i].unwrap_or(f64::NAN),
            acc: acc[i],
            acc_tta: acc_tta[i],
            dawn_s: dawn[i],
            airbench_s: air[i],
            hlb_s: hlb[i],
            eval_s: eval[i],
            prep_s: prep[i],
            whiten_s: whiten[i],
            wall_s: wall[i],
            time_to_target_s: ttt[i],
            epoch_to_target: ett[i].map(|v| v as u32),
            epochs: epochs[i],
            steps: steps[i],
            peak_mem_bytes: mem[i],
            final_train_loss: ftl[i],
            device: device[i].clone().unwrap_or_default(),
            data_hash: hash[i].clone().unwrap_or_default(),
            finished_at: at[i].clone().unwrap_or_default(),
        })
        .collect())
}

fn bad_err(e: anyhow::Error, msg: &dyn Fn() -> String) -> anyhow::Error {
    e.context(msg())
}
