//! One summary row per run, to and from `runs.parquet`.

use crate::events::{RunId, RunSummary};
use anyhow::{Context, Result};
use polars::prelude::*;
use std::path::Path;

/// How a finished run ended, as `runs.parquet` spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ended {
    #[default]
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

impl Cell for Option<bool> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![None; rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        Ok(c.bool()?.iter().collect())
    }
}

/// The tricks a run had on: a list column (schema 1 wrote one comma-joined string).
impl Cell for Vec<String> {
    fn column(name: &str, values: Vec<Self>) -> Column {
        let lists: Vec<Series> = values
            .iter()
            .map(|v| Series::new(PlSmallStr::EMPTY, v.as_slice()))
            .collect();
        let mut s = Series::new(name.into(), lists);
        if values.iter().all(Vec::is_empty) {
            // No string to infer the inner type from: say it.
            s = s
                .cast(&DataType::List(Box::new(DataType::String)))
                .unwrap_or(s);
        }
        s.into()
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![Vec::new(); rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        if c.dtype() == &DataType::String {
            return Ok(strings(c)?
                .into_iter()
                .map(|s| {
                    let s = s.unwrap_or_default();
                    s.split(',')
                        .filter(|t| !t.is_empty())
                        .map(String::from)
                        .collect()
                })
                .collect());
        }
        let lists = c.list()?;
        (0..lists.len())
            .map(|i| match lists.get_as_series(i) {
                Some(l) => Ok(l.str()?.iter().flatten().map(String::from).collect()),
                None => Ok(Vec::new()),
            })
            .collect()
    }
}

/// When a run ended, UTC, to the microsecond: a Parquet timestamp (schema 1
/// wrote RFC 3339 text, read back too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub chrono::DateTime<chrono::Utc>);

impl Timestamp {
    pub fn now() -> Timestamp {
        use chrono::SubsecRound;
        Timestamp(chrono::Utc::now().trunc_subsecs(6))
    }
}

impl Cell for Timestamp {
    fn column(name: &str, values: Vec<Self>) -> Column {
        let micros: Vec<i64> = values.iter().map(|t| t.0.timestamp_micros()).collect();
        Series::new(name.into(), micros)
            .cast(&DataType::Datetime(TimeUnit::Microseconds, None))
            .expect("i64 casts to a datetime")
            .into()
    }
    fn absent(rows: usize) -> Result<Vec<Self>> {
        Ok(vec![Timestamp(chrono::DateTime::UNIX_EPOCH); rows])
    }
    fn read(c: &Column) -> Result<Vec<Self>> {
        let epoch = Timestamp(chrono::DateTime::UNIX_EPOCH);
        if c.dtype() == &DataType::String {
            return Ok(strings(c)?
                .into_iter()
                .map(|s| {
                    s.and_then(|s| chrono::DateTime::parse_from_rfc3339(&s).ok())
                        .map_or(epoch, |t| Timestamp(t.to_utc()))
                })
                .collect());
        }
        let unit = match c.dtype() {
            DataType::Datetime(u, _) => *u,
            other => anyhow::bail!("a timestamp, not {other}"),
        };
        let per_micro = |v: i64| match unit {
            TimeUnit::Nanoseconds => v / 1000,
            TimeUnit::Microseconds => v,
            TimeUnit::Milliseconds => v * 1000,
        };
        Ok(c.cast(&DataType::Int64)?
            .i64()?
            .iter()
            .map(|v| {
                v.and_then(|v| chrono::DateTime::from_timestamp_micros(per_micro(v)))
                    .map_or(epoch, Timestamp)
            })
            .collect())
    }
}

/// The one column table of `runs.parquet`: the row type, its writer and its
/// reader come from this list, so they cannot disagree.
macro_rules! runs_table {
    ($(#[$doc:meta])* pub struct RunRow { $($(#[$fdoc:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct RunRow { $($(#[$fdoc])* pub $field: $ty,)* }

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
        pub tricks: Vec<String>,
        pub overrides: String,
        pub target_acc: f64,
        pub acc: Option<f64>,
        pub acc_tta: Option<f64>,
        pub dawn_s: Option<f64>,
        pub airbench_s: Option<f64>,
        pub hlb_s: Option<f64>,
        pub eval_s: Option<f64>,
        pub prep_s: Option<f64>,
        /// Of `prep_s`, the preprocessing on the device (in airbench_s).
        pub preprocess_s: Option<f64>,
        pub whiten_s: Option<f64>,
        /// Building the net (in dawn_s).
        pub build_s: Option<f64>,
        pub loader_s: Option<f64>,
        pub wall_s: Option<f64>,
        /// Seconds the run stood paused, kept out of every clock.
        pub paused_s: Option<f64>,
        pub time_to_target_s: Option<f64>,
        pub epoch_to_target: Option<u32>,
        pub epochs: Option<f64>,
        pub steps: Option<u64>,
        pub peak_mem_bytes: Option<u64>,
        pub final_train_loss: Option<f64>,
        pub device: String,
        pub data_hash: String,
        pub finished_at: Timestamp,
        // What the run trained with (the plan's values, not the names asked for).
        pub data_name: Option<String>,
        pub clock: Option<String>,
        pub arch: Option<String>,
        pub batch_size: Option<u32>,
        pub lr: Option<f64>,
        pub momentum: Option<f64>,
        pub weight_decay: Option<f64>,
        pub optimizer: Option<String>,
        pub muon_lr: Option<f64>,
        pub schedule: Option<String>,
        pub label_smoothing: Option<f64>,
        pub precision: Option<String>,
        pub bn_fp32: Option<bool>,
        pub channels_last: Option<bool>,
        pub averaging: Option<String>,
        pub whitening: Option<String>,
        pub tta_level: Option<u32>,
        // The machine over the run, and whether its seconds are to be trusted.
        pub cpu_model: Option<String>,
        pub cpu_cores: Option<u32>,
        pub load_start: Option<f64>,
        pub load_end: Option<f64>,
        pub other_cpu: Option<f64>,
        pub gpu_name: Option<String>,
        pub gpu_sm_clock_start_mhz: Option<f64>,
        pub gpu_sm_clock_end_mhz: Option<f64>,
        pub gpu_temp_start_c: Option<f64>,
        pub gpu_temp_end_c: Option<f64>,
        pub gpu_power_end_w: Option<f64>,
        // The watcher's extremes between start and end (a passing throttle).
        pub gpu_sm_clock_min_mhz: Option<f64>,
        pub gpu_temp_peak_c: Option<f64>,
        pub gpu_power_peak_w: Option<f64>,
        pub gpu_samples: Option<u32>,
        pub gpu_throttle: Option<String>,
        pub throughput_cv: Option<f64>,
        pub noisy: Option<bool>,
        pub noise: Option<String>,
        // A run spread over ranks: how many, each rank's device (rank
        // order, `;`-separated), rank 0's seconds in gradient all-reduces,
        // and every rank as it ended (host, device, machine state: JSON).
        pub world_size: Option<u32>,
        pub rank_devices: Option<String>,
        pub allreduce_s: Option<f64>,
        // Rank 0's step by DDP's own clock: the gradient all-reduce, and
        // the part of it the backward did not hide (ms a step).
        pub ddp_allreduce_ms: Option<f64>,
        pub ddp_exposed_ms: Option<f64>,
        pub ranks: Option<String>,
        // The step's CUDA graphs: `on`, `off`, or `off: <why>`.
        pub graphs: Option<String>,
        // Where the training steps' seconds went (train/stages.rs): the
        // forward and backward apart only where no graph replays them as one.
        pub stage_data_s: Option<f64>,
        pub stage_forward_s: Option<f64>,
        pub stage_backward_s: Option<f64>,
        pub stage_forward_backward_s: Option<f64>,
        pub stage_optimiser_s: Option<f64>,
        pub stage_eval_s: Option<f64>,
        pub stages_timed_by: Option<String>,
    }
}

/// A value's serde word (`airbench`, `onecycle`), as the runs table and
/// manifest.json spell it.
fn serde_word<T: serde::Serialize>(t: &T) -> Option<String> {
    serde_json::to_value(t).ok()?.as_str().map(String::from)
}

impl RunRow {
    /// The run's seconds on clock `c`: the one reading of a clock's column.
    pub fn secs(&self, c: crate::config::Clock) -> Option<f64> {
        use crate::config::Clock;
        match c {
            Clock::Dawn => self.dawn_s,
            Clock::Airbench => self.airbench_s,
            Clock::Hlb => self.hlb_s,
            Clock::Wall => self.wall_s,
        }
    }

    pub fn id(&self) -> RunId {
        RunId {
            matrix: self.matrix.clone(),
            index: self.index as usize,
            variant: self.variant.clone(),
            repeat: self.repeat as usize,
        }
    }

    #[allow(
        clippy::too_many_lines,
        reason = "one field per column of the runs table, in its order"
    )]
    pub fn new(
        run: &RunId,
        started: Option<(u64, &crate::record::RunRecord, f64)>,
        status: Ended,
        reason: Option<String>,
        s: Option<&RunSummary>,
    ) -> RunRow {
        let (seed, rec, target) = match started {
            Some((seed, rec, t)) => (seed, Some(rec), t),
            None => (0, None, f64::NAN),
        };
        let v = rec.map(|r| &r.variant);
        let (cfg, r) = (
            v.and_then(|v| v.engine_config()),
            v.and_then(|v| v.settings()),
        );
        let c = s.map(|s| &s.clocks);
        // A clock a run did not measure (a script's, beside the one it
        // keeps) is NaN in its summary and null in the table.
        let measured = |x: f64| x.is_finite().then_some(x);
        let st = s.and_then(|s| s.stages.as_ref());
        let ddp = s.and_then(|s| s.ranks.first()).and_then(|r| r.ddp);
        let m = s.and_then(|s| s.machine.as_ref());
        let (g0, g1) = (
            m.and_then(|m| m.gpu_start.as_ref()),
            m.and_then(|m| m.gpu_end.as_ref()),
        );
        let peak = m.and_then(|m| m.gpu_peak.as_ref());
        RunRow {
            matrix: run.matrix.clone(),
            index: run.index as u32,
            variant: run.variant.clone(),
            repeat: run.repeat as u32,
            seed,
            status,
            reason,
            recipe: v.and_then(|v| v.recipe()).unwrap_or_default().into(),
            tricks: v.map(|v| v.tricks.clone()).unwrap_or_default(),
            overrides: match cfg {
                Some(c) => c.overrides.join(";"),
                None => v.map(|v| v.override_words().join(";")).unwrap_or_default(),
            },
            target_acc: target,
            acc: s.map(|s| s.acc),
            acc_tta: s.map(|s| s.acc_tta),
            dawn_s: c.and_then(|c| measured(c.dawn_s)),
            airbench_s: c.and_then(|c| measured(c.airbench_s)),
            hlb_s: c.and_then(|c| measured(c.hlb_s)),
            eval_s: c.map(|c| c.eval_s),
            prep_s: c.map(|c| c.prep_s),
            preprocess_s: c.map(|c| c.preprocess_s),
            whiten_s: c.map(|c| c.whiten_s),
            build_s: c.map(|c| c.build_s),
            loader_s: c.map(|c| c.loader_s),
            wall_s: c.map(|c| c.wall_s),
            paused_s: c.map(|c| c.paused_s),
            time_to_target_s: s.and_then(|s| s.time_to_target_s),
            epoch_to_target: s.and_then(|s| s.epoch_to_target.map(|e| e as u32)),
            epochs: s.map(|s| s.epochs),
            steps: s.map(|s| s.steps),
            peak_mem_bytes: s.and_then(|s| s.peak_mem_bytes),
            final_train_loss: s.map(|s| s.final_train_loss),
            device: s.map(|s| s.device.clone()).unwrap_or_default(),
            data_hash: rec.map(|r| r.data.hash.clone()).unwrap_or_default(),
            finished_at: Timestamp::now(),
            data_name: rec.map(|r| r.data.name.clone()),
            clock: s
                .and_then(|s| s.clock)
                .or(v.map(|v| v.clock))
                .and_then(|c| serde_word(&c)),
            arch: r.map(|r| r.arch.clone()),
            batch_size: r.map(|r| r.batch_size as u32),
            lr: r.map(|r| r.lr),
            momentum: r.map(|r| r.momentum),
            weight_decay: r.map(|r| r.weight_decay),
            optimizer: r.map(|r| r.optimizer.clone()),
            muon_lr: r.and_then(|r| r.muon_lr),
            schedule: cfg.and_then(|c| serde_word(&c.schedule)),
            label_smoothing: r.map(|r| r.label_smoothing),
            precision: r.map(|r| r.precision.clone()),
            bn_fp32: r.map(|r| r.bn_fp32),
            channels_last: r.map(|r| r.channels_last),
            averaging: r.map(|r| r.averaging.clone()),
            whitening: r.map(|r| r.whitening.clone()),
            tta_level: r.map(|r| u32::from(r.tta_level)),
            cpu_model: m.map(|m| m.cpu_model.clone()),
            cpu_cores: m.map(|m| m.cpu_cores as u32),
            load_start: m.and_then(|m| m.load_start),
            load_end: m.and_then(|m| m.load_end),
            other_cpu: m.and_then(|m| m.other_cpu),
            gpu_name: g1.or(g0).map(|g| g.name.clone()),
            gpu_sm_clock_start_mhz: g0.and_then(|g| g.sm_clock_mhz),
            gpu_sm_clock_end_mhz: g1.and_then(|g| g.sm_clock_mhz),
            gpu_temp_start_c: g0.and_then(|g| g.temperature_c),
            gpu_temp_end_c: g1.and_then(|g| g.temperature_c),
            gpu_power_end_w: g1.and_then(|g| g.power_w),
            gpu_sm_clock_min_mhz: peak.and_then(|p| p.sm_clock_min_mhz),
            gpu_temp_peak_c: peak.and_then(|p| p.temperature_max_c),
            gpu_power_peak_w: peak.and_then(|p| p.power_max_w),
            gpu_samples: peak.map(|p| p.samples),
            gpu_throttle: m
                .filter(|_| g0.or(g1).is_some() || peak.is_some())
                .map(|m| crate::util::machine::gpu_throttle(m).join(",")),
            throughput_cv: s.and_then(|s| s.throughput_cv),
            noisy: s.map(|s| s.noise.is_some()),
            noise: s.and_then(|s| s.noise.clone()),
            world_size: s.map(|s| s.world_size() as u32),
            rank_devices: s.filter(|s| !s.ranks.is_empty()).map(|s| {
                s.ranks
                    .iter()
                    .map(|r| r.device.as_str())
                    .collect::<Vec<_>>()
                    .join(";")
            }),
            allreduce_s: s.and_then(|s| s.ranks.first()).map(|r| r.allreduce_s),
            ddp_allreduce_ms: ddp.map(|t| 1e3 * t.allreduce_s),
            ddp_exposed_ms: ddp.map(|t| 1e3 * t.exposed_s()),
            ranks: s
                .filter(|s| !s.ranks.is_empty())
                .and_then(|s| serde_json::to_string(&s.ranks).ok()),
            graphs: s.and_then(|s| s.graphs.clone()),
            stage_data_s: st.map(|t| t.data_s),
            stage_forward_s: st.and_then(|t| t.forward_s),
            stage_backward_s: st.and_then(|t| t.backward_s),
            stage_forward_backward_s: st.map(|t| t.forward_backward_s),
            stage_optimiser_s: st.map(|t| t.optimiser_s),
            stage_eval_s: st.map(|t| t.eval_s),
            stages_timed_by: st.map(|t| t.timed_by.clone()),
        }
    }
}

/// A `finished_at` column of either schema (RFC 3339 text or a datetime) as
/// timestamps; a missing value reads as the Unix epoch.
pub fn timestamps(c: &Column) -> Result<Vec<Timestamp>> {
    <Timestamp as Cell>::read(c)
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
    if !path.is_file() {
        anyhow::bail!("cannot open {}: no such file", path.display());
    }
    let df = super::read_parquet(path, None).map_err(|e| bad_err(e, &bad))?;
    rows_of(&df).map_err(|e| bad_err(e, &bad))
}

fn bad_err(e: anyhow::Error, msg: &dyn Fn() -> String) -> anyhow::Error {
    e.context(msg())
}
