//! One summary row per run, to and from `runs.parquet`.

use crate::events::{RunId, RunSummary};
use anyhow::{Context, Result};
use polars::prelude::*;
use std::path::Path;

/// How a finished run ended, as `runs.parquet` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Done,
    Failed,
    Cancelled,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Done => "done",
            Ended::Failed => "failed",
            Ended::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<Ended> {
        [Ended::Done, Ended::Failed, Ended::Cancelled]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

/// A `runs.parquet` cell type: how a column of it is written and read back
/// (missing values read as the type's empty value).
trait Cell: Sized + Clone {
    fn column(name: &str, values: Vec<Self>) -> Column;
    fn read(c: &Column) -> Result<Vec<Self>>;
    /// The column is not in the file (written by an older tricklab).
    fn absent(_rows: usize) -> Result<Vec<Self>> {
        anyhow::bail!("the column is missing")
    }
}

fn strings(c: &Column) -> Result<Vec<Option<String>>> {
    Ok(c.str()?.iter().map(|v| v.map(String::from)).collect())
}

fn floats(c: &Column) -> Result<Vec<Option<f64>>> {
    Ok(c.cast(&DataType::Float64)?.f64()?.iter().collect())
}

fn unsigned(c: &Column) -> Result<Vec<Option<u64>>> {
    Ok(c.cast(&DataType::UInt64)?.u64()?.iter().collect())
}

impl Cell for String {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(strings(c)?
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }
}

impl Cell for Option<String> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![None; rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        strings(c)
    }
}

impl Cell for Ended {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(
            name.into(),
            values.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        )
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        strings(c)?
            .into_iter()
            .map(|s| {
                let s = s.unwrap_or_default();
                Ended::parse(&s).ok_or_else(|| anyhow::anyhow!("unknown run status `{s}`"))
            })
            .collect()
    }
}

impl Cell for f64 {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(floats(c)?
            .into_iter()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect())
    }
}

impl Cell for Option<f64> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![None; rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        floats(c)
    }
}

impl Cell for u32 {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(unsigned(c)?
            .into_iter()
            .map(|v| v.unwrap_or(0) as u32)
            .collect())
    }
}

impl Cell for Option<u32> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![None; rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(unsigned(c)?
            .into_iter()
            .map(|v| v.map(|v| v as u32))
            .collect())
    }
}

impl Cell for u64 {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(unsigned(c)?
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }
}

impl Cell for Option<u64> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![None; rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        unsigned(c)
    }
}

/// The one column table of `runs.parquet`: the row type, its writer and its
/// reader come from this list, so they cannot disagree.
macro_rules! runs_table {
    ($(#[$doc:meta])* pub struct RunRow { $(pub $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct RunRow { $(pub $field: $ty,)* }

        pub fn runs_frame(rows: &[RunRow]) -> Result<DataFrame> {
            let cols = vec![$(
                <$ty as Cell>::column(stringify!($field), rows.iter().map(|r| r.$field.clone()).collect()),
            )*];
            Ok(DataFrame::new(rows.len(), cols)?)
        }

        fn rows_of(df: &DataFrame) -> Result<Vec<RunRow>> {
            $(let $field = match df.column(stringify!($field)) {
                Ok(c) => <$ty as Cell>::read(c),
                Err(_) => <$ty as Cell>::absent(df.height()),
            }
            .with_context(|| format!("column `{}`", stringify!($field)))?;)*
            Ok((0..df.height())
                .map(|i| RunRow { $($field: $field[i].clone(),)* })
                .collect())
        }
    };
}

runs_table! {
    /// One summary row per run.
    pub struct RunRow {
        pub matrix: String,
        pub index: u32,
        pub variant: String,
        pub repeat: u32,
        pub seed: u64,
        pub status: Ended,
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
        pub loader_s: Option<f64>,
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
}

impl RunRow {
    pub fn new(
        run: &RunId,
        started: Option<(u64, &serde_json::Value, f64)>,
        status: Ended,
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
            status,
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
            loader_s: c.map(|c| c.loader_s),
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
    rows_of(&df).map_err(|e| bad_err(e, &bad))
}

fn bad_err(e: anyhow::Error, msg: &dyn Fn() -> String) -> anyhow::Error {
    e.context(msg())
}
