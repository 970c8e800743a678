//! Aggregation of results folders with polars (lazy): per variant n,
//! accuracy mean ± 95% CI, P(acc ≥ target), each clock's mean, min and
//! median (airbench reports its best time, Page a mean: columns name their
//! statistic), time-to-target, and speedups against the previous and first rung.

mod compare;
pub mod compared;
pub mod curves;
pub mod delta;
pub mod effects;
pub mod figures;
mod format;
pub mod history;
pub mod seeds;
pub mod sides;
mod text;
mod twice;

pub use text::{NOISY_MARK, noise_banner};

pub use compare::{
    Comparison, Diff, Rel, Thresholds, TimeModel, Verdict, compare, control, drift, welch,
};

use crate::stats::t95;
use crate::store::Folder;
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
    /// Leave out runs flagged noisy.
    pub drop_noisy: bool,
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

/// A training loop that spends more than this share of its time building
/// batches (`loader_s / hlb_s`) makes a run data-bound: the loader, not the
/// net, sets its time. With an asynchronous GPU the share bounds the steps'
/// wait from above.
pub const DATA_BOUND_SHARE: f64 = 0.05;

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
    /// Of the `n`, runs whose seconds were disturbed (a busy machine, a
    /// throttled GPU, a ragged throughput); `report --drop-noisy` leaves them out.
    pub noisy: usize,
    pub acc_mean: f64,
    pub acc_std: f64,
    pub acc_ci95: f64,
    /// Accuracy with each run's TTA level.
    pub acc_tta_mean: f64,
    pub acc_tta_std: f64,
    pub acc_tta_ci95: f64,
    pub p_target: f64,
    /// Wilson's 95% interval of `p_target` over the `n` runs.
    pub p_target_ci95: Option<(f64, f64)>,
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
    /// The variant this one is read against: a ladder's previous rung, the
    /// first variant of the other kinds.
    pub delta_vs: Option<String>,
    /// Seconds (this variant's clock) and accuracy against `delta_vs`,
    /// paired by seed where the seeds match, with 95% CIs.
    pub delta_time: Option<delta::Delta>,
    pub delta_acc: Option<delta::Delta>,
    /// Rungs between this one and `delta_vs` that have no finished run (a
    /// ladder's Δ then spans them, and says so).
    pub delta_skips: usize,
    /// The UTC day its last finished run ended (YYYY-MM-DD), where recorded.
    pub last_finished: Option<String>,
    /// Mean share of the training loop (the hlb clock) spent building
    /// batches; `None` where the runs predate the record or had no loader.
    pub loader_share: Option<f64>,
    /// A data-parallel variant's gradient all-reduce a step and the part the
    /// backward left exposed, ms by DDP's clock (rank 0), mean over runs.
    pub ddp_allreduce_ms: Option<f64>,
    pub ddp_exposed_ms: Option<f64>,
    /// Mean seconds a run in each of [`STAGE_COLUMNS`]' stages; `None`
    /// where the runs predate them (forward and backward apart: also where
    /// a CUDA graph replayed them as one).
    pub stages: [Option<f64>; 6],
    /// The first finished run's `graphs` (`on`, `off`, `off: <why>`).
    pub graphs: Option<String>,
    /// Each finished run's (seed, accuracy with TTA): `compare` pairs the
    /// two sessions' accuracies by seed.
    #[serde(skip)]
    pub acc_by_seed: Vec<(u64, f64)>,
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
    /// What the numbers were measured on (hardware, device, data, clock, n,
    /// commit, date), as the report's first block says.
    pub setup: Vec<(String, String)>,
    pub target: f64,
    /// The clock all rows share (`None`: rows of recipes with different conventions).
    pub clock: Option<Clock>,
    pub dirs: Vec<PathBuf>,
    pub rows: Vec<VariantStats>,
    /// Noisy runs were left out (`--drop-noisy`): the charts that read runs
    /// themselves leave them out too.
    pub dropped_noisy: bool,
    /// Main effects, interactions and Shapley values of the folders whose
    /// matrix is a factorial, fractional or Shapley design.
    pub effects: Vec<effects::Effects>,
    /// The seeds each folder's questions need at 80% power, and where its
    /// `until_decided` stands.
    pub seeds: Vec<seeds::Seeds>,
    /// A line for each folder whose record of what its session decided
    /// does not read (what of the report it lacks, and why), whose runs
    /// another folder passed holds too (counted once), or whose budget
    /// stopped its session before all its runs.
    pub notes: Vec<String>,
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

/// Matrices that are not ladders, from what each folder's session decided
/// (its record), so a renamed trick or a changed parser cannot turn an old
/// folder into a ladder. A folder whose record does not read keeps the
/// ladder reading: the columns stay filled.
fn non_ladder_matrices(folders: &[Folder]) -> std::collections::HashSet<String> {
    folders
        .iter()
        .filter_map(Folder::record)
        .filter(|r| r.kind != crate::matrix::Kind::Ladder)
        .map(|r| r.name.clone())
        .collect()
}

/// All run rows of the folders as one lazy frame, from the rows each
/// folder was read into once (`store::Folder`: each run once, its last row).
pub fn scan_runs(folders: &[Folder]) -> Result<LazyFrame> {
    let frames = folders
        .iter()
        .map(|f| {
            let mut df = crate::store::runs_frame(&f.runs)?;
            as_schema_1_words(&mut df)?;
            Ok(df.lazy())
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

/// The tables the report reads, old and new alike: the trick list as one
/// comma-joined word, the end time as its UTC day (`finished_on`: the type of
/// `finished_at` changed with schema 2), and a `noisy` flag (false where a
/// table predates it).
/// The runs' seconds by stage of the training steps (train/stages.rs), in
/// the order report.csv and the stage chart give them.
pub const STAGE_COLUMNS: [&str; 6] = [
    "stage_data_s",
    "stage_forward_s",
    "stage_backward_s",
    "stage_forward_backward_s",
    "stage_optimiser_s",
    "stage_eval_s",
];

fn as_schema_1_words(df: &mut DataFrame) -> Result<()> {
    let n = df.height();
    let day = match df.drop_in_place("finished_at") {
        Ok(c) => finished_days(&c)?,
        Err(_) => vec![None; n],
    };
    df.with_column(Column::new("finished_on".into(), day))?;
    if df.column("noisy").is_err() {
        df.with_column(Column::new("noisy".into(), vec![false; n]))?;
    }
    if df.column("clock").is_err() {
        df.with_column(Column::new("clock".into(), vec![None::<String>; n]))?;
    }
    for c in ["loader_s", "ddp_allreduce_ms", "ddp_exposed_ms"] {
        if df.column(c).is_err() {
            df.with_column(Column::new(c.into(), vec![None::<f64>; n]))?;
        }
    }
    for c in STAGE_COLUMNS {
        if df.column(c).is_err() {
            df.with_column(Column::new(c.into(), vec![None::<f64>; n]))?;
        }
    }
    if df.column("graphs").is_err() {
        df.with_column(Column::new("graphs".into(), vec![None::<String>; n]))?;
    }
    let Ok(c) = df.column("tricks") else {
        return Ok(());
    };
    if let DataType::List(_) = c.dtype() {
        let lists = c.list()?;
        let joined = (0..lists.len())
            .map(|i| match lists.get_as_series(i) {
                Some(l) => Ok(Some(
                    l.str()?.iter().flatten().collect::<Vec<_>>().join(","),
                )),
                None => Ok(None),
            })
            .collect::<PolarsResult<Vec<Option<String>>>>()?;
        df.with_column(Column::new("tricks".into(), joined))?;
    }
    Ok(())
}

/// Each row's UTC day from `finished_at` (either schema); the Unix epoch
/// (no time recorded) is no day.
fn finished_days(c: &Column) -> Result<Vec<Option<String>>> {
    Ok(crate::store::timestamps(c)?
        .into_iter()
        .map(|t| (t.0.timestamp() > 0).then(|| t.0.format("%Y-%m-%d").to_string()))
        .collect())
}

fn f(df: &DataFrame, name: &str) -> Result<Vec<Option<f64>>> {
    Ok(df
        .column(name)?
        .cast(&DataType::Float64)?
        .f64()?
        .iter()
        .collect())
}

/// Each variant's runs in the folders, summarised: one lazy query groups
/// them (`variant_aggs`), its columns are read out into rows, and the
/// rungs are set against each other (speedups, Δ), then the designed
/// matrices' effects and the seeds their questions need.
pub fn aggregate(dirs: &[PathBuf], opts: &ReportOptions) -> Result<Report> {
    if dirs.is_empty() {
        bail!("name at least one results folder (e.g. results/demo-ladder/20261122-120000)");
    }
    // What a results folder must be, said before it is read; then each is
    // read once, for every table and analysis below.
    for d in dirs {
        runs_file(d)?;
    }
    let mut folders = Folder::open_all(dirs)?;
    let twice = twice::count_once(&mut folders);
    let dirs: Vec<PathBuf> = folders.iter().map(|f| f.dir.clone()).collect();
    let dirs = &dirs[..];
    let mut runs = scan_runs(&folders)?;
    if opts.drop_noisy {
        runs = runs.filter(col("noisy").fill_null(lit(false)).not());
    }
    let df = grouped(runs, dirs, opts)?;
    let target = opts.target.unwrap_or_else(|| {
        f(&df, "target_acc")
            .ok()
            .and_then(|v| v.into_iter().flatten().find(|t| t.is_finite()))
            .unwrap_or(0.94)
    });
    let mut rows = variant_rows(&df, opts)?;
    let unordered = non_ladder_matrices(&folders);
    add_speedups(&mut rows, &unordered);
    add_deltas(&mut rows, &folders, &unordered, opts);
    let clock = rows.first().map(|r| r.headline);
    let clock = clock.filter(|c| rows.iter().all(|r| r.headline == *c));
    let mut effects = effects::analyse(&folders, opts.clock, opts.drop_noisy);
    effects::add_ladder_credit(&mut effects, &folders, &rows);
    Ok(Report {
        setup: setup(&folders, &rows),
        target,
        clock,
        dirs: dirs.to_vec(),
        rows,
        dropped_noisy: opts.drop_noisy,
        effects,
        seeds: seeds::analyse(&folders, opts.clock, opts.drop_noisy),
        notes: folder_notes(&folders, twice),
    })
}

/// The report's one-line notes: runs passed twice, each folder whose record
/// does not read whole, and each a budget stopped.
fn folder_notes(folders: &[Folder], twice: Vec<String>) -> Vec<String> {
    let mut notes = twice;
    for f in folders {
        notes.extend(f.note().map(String::from));
        notes.extend(budget_note(f));
    }
    notes
}

/// A folder whose matrix's budget was spent before all its runs were
/// handed out (its queue.json says which): its table holds fewer runs than
/// it planned, and a reader must not take it for the whole matrix.
fn budget_note(f: &Folder) -> Option<String> {
    let queue = crate::store::saved_queue::load_saved(&f.dir).ok()?;
    let (ran, planned) = crate::store::saved_queue::budget_stop(&queue)?;
    let budget = f
        .record()
        .and_then(|r| r.budget_s)
        .map_or_else(String::new, |b| {
            format!(" of {}", crate::store::saved_queue::budget_words(b))
        });
    Some(format!(
        "{}: stopped by its budget{budget}: {ran} of its {planned} runs were handed out, {} not run (`tricklab run --resume` on the folder runs them)",
        crate::store::session_label(&f.dir),
        planned - ran
    ))
}

/// What the report's lazy query computes for each variant: run counts,
/// accuracies, every clock's mean, sd, min and median, stage means and the
/// time to the target (of finished runs only).
fn variant_aggs(opts: &ReportOptions) -> Vec<Expr> {
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
        col("noisy")
            .fill_null(lit(false))
            .and(col("status").eq(lit("done")))
            .cast(DataType::UInt32)
            .sum()
            .alias("noisy"),
        col("tricks").first().alias("tricks"),
        col("recipe").first().alias("recipe"),
        col("clock").first().alias("clock"),
        col("target_acc").first().alias("target_acc"),
        col("finished_on")
            .filter(col("status").eq(lit("done")))
            .max()
            .alias("last_finished"),
    ];
    let done = || col("status").eq(lit("done"));
    aggs.push(
        (col("loader_s").cast(DataType::Float64) / col("hlb_s").cast(DataType::Float64))
            .filter(done())
            .mean()
            .alias("loader_share"),
    );
    for c in ["ddp_allreduce_ms", "ddp_exposed_ms"] {
        aggs.push(
            col(c)
                .cast(DataType::Float64)
                .filter(done())
                .mean()
                .alias(c),
        );
    }
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
    aggs.extend(time_aggs());
    aggs
}

/// Each clock's mean, sd, min and median, the evaluations' and each
/// stage's mean seconds, and the time to the target (finished runs only).
fn time_aggs() -> Vec<Expr> {
    let done = || col("status").eq(lit("done"));
    let mut aggs = Vec::new();
    for c in ["dawn_s", "airbench_s", "hlb_s", "wall_s"] {
        aggs.push(col(c).filter(done()).mean().alias(format!("{c}_mean")));
        aggs.push(col(c).filter(done()).std(1).alias(format!("{c}_std")));
        aggs.push(col(c).filter(done()).min().alias(format!("{c}_min")));
        aggs.push(col(c).filter(done()).median().alias(format!("{c}_median")));
    }
    aggs.push(col("eval_s").filter(done()).mean().alias("eval_s_mean"));
    for c in STAGE_COLUMNS {
        aggs.push(col(c).filter(done()).mean().alias(format!("{c}_mean")));
    }
    aggs.push(col("graphs").filter(done()).first().alias("graphs"));
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
    aggs
}

/// The runs grouped by variant (and device, with `by_device`), in matrix
/// and rung order.
fn grouped(runs: LazyFrame, dirs: &[PathBuf], opts: &ReportOptions) -> Result<DataFrame> {
    let mut keys = vec![col("matrix"), col("index"), col("variant")];
    let mut order = vec!["matrix", "index"];
    if opts.by_device {
        keys.push(col("device"));
        order.push("device");
    }
    runs.group_by(keys)
        .agg(variant_aggs(opts))
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
        })
}

/// The grouped query's columns read out, a row a variant, in the order of
/// [`VariantStats`]; speedups and Δ are left for the rungs' comparison.
fn variant_rows(df: &DataFrame, opts: &ReportOptions) -> Result<Vec<VariantStats>> {
    let c = Columns::read(df, opts.by_device)?;
    Ok((0..df.height()).map(|i| c.row(i, opts)).collect())
}

/// The numeric columns of the grouped query that rows read by name.
const NUMBERS: [&str; 32] = [
    "index",
    "n",
    "failed",
    "noisy",
    "loader_share",
    "ddp_allreduce_ms",
    "ddp_exposed_ms",
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
    "ttt_n",
];

/// The grouped query's columns, each read once: the texts a row keeps and
/// every number by its name.
struct Columns {
    matrix: Vec<String>,
    variant: Vec<String>,
    tricks: Vec<String>,
    recipe: Vec<String>,
    last_finished: Vec<String>,
    /// The clock each run recorded; folders older than the column fall
    /// back on the recipe's convention.
    recorded_clock: Vec<String>,
    graphs: Vec<String>,
    numbers: std::collections::HashMap<String, Vec<Option<f64>>>,
}

impl Columns {
    fn read(df: &DataFrame, by_device: bool) -> Result<Columns> {
        let s = |n: &str| -> Result<Vec<String>> {
            Ok(df
                .column(n)?
                .cast(&DataType::String)?
                .str()?
                .iter()
                .map(|v| v.unwrap_or("").to_string())
                .collect())
        };
        let mut variant = s("variant")?;
        if by_device {
            for (v, d) in variant.iter_mut().zip(s("device")?) {
                *v = format!("{v} @ {d}");
            }
        }
        let stages = STAGE_COLUMNS.iter().map(|c| format!("{c}_mean"));
        Ok(Columns {
            matrix: s("matrix")?,
            variant,
            tricks: s("tricks")?,
            recipe: s("recipe")?,
            last_finished: s("last_finished")?,
            recorded_clock: s("clock")?,
            graphs: s("graphs")?,
            numbers: NUMBERS
                .iter()
                .map(|c| c.to_string())
                .chain(stages)
                .map(|c| Ok((c.clone(), f(df, &c)?)))
                .collect::<Result<_>>()?,
        })
    }

    /// Column `name` of row `i`: `None` where null.
    fn get(&self, name: &str, i: usize) -> Option<f64> {
        self.numbers[name][i]
    }

    /// The same, NaN where null.
    fn v(&self, name: &str, i: usize) -> f64 {
        self.get(name, i).unwrap_or(f64::NAN)
    }

    /// A 95% t interval's half-width over `n` runs of sd `std` (NaN below 2).
    fn ci(std: f64, n: usize) -> f64 {
        if n >= 2 && std.is_finite() {
            t95(n - 1) * std / (n as f64).sqrt()
        } else {
            f64::NAN
        }
    }

    fn clock(&self, p: &str, i: usize, n: usize) -> ClockStats {
        let std = self.v(&format!("{p}_std"), i);
        ClockStats {
            mean: self.v(&format!("{p}_mean"), i),
            std,
            ci95: Self::ci(std, n),
            min: self.v(&format!("{p}_min"), i),
            median: self.v(&format!("{p}_median"), i),
        }
    }

    fn row(&self, i: usize, opts: &ReportOptions) -> VariantStats {
        let n = self.v("n", i).max(0.0) as usize;
        let tn = self.get("ttt_n", i).unwrap_or(0.0) as usize;
        let finite = |name: &str| self.get(name, i).filter(|x| x.is_finite());
        let p_target = self.v("p_target", i);
        let recipe = &self.recipe[i];
        VariantStats {
            matrix: self.matrix[i].clone(),
            index: self.get("index", i).unwrap_or(0.0) as usize,
            variant: self.variant[i].clone(),
            tricks: self.tricks[i].clone(),
            recipe: recipe.clone(),
            headline: opts.clock.unwrap_or_else(|| {
                Clock::parse(&self.recorded_clock[i]).unwrap_or_else(|| clock_of_recipe(recipe))
            }),
            n,
            failed: self.get("failed", i).unwrap_or(0.0) as usize,
            noisy: self.get("noisy", i).unwrap_or(0.0) as usize,
            loader_share: finite("loader_share").filter(|x| *x > 0.0),
            ddp_allreduce_ms: finite("ddp_allreduce_ms"),
            ddp_exposed_ms: finite("ddp_exposed_ms"),
            stages: std::array::from_fn(|k| finite(&format!("{}_mean", STAGE_COLUMNS[k]))),
            graphs: Some(self.graphs[i].clone()).filter(|g| !g.is_empty()),
            acc_mean: self.v("acc_mean", i),
            acc_std: self.v("acc_std", i),
            acc_ci95: Self::ci(self.v("acc_std", i), n),
            acc_tta_mean: self.v("acc_tta_mean", i),
            acc_tta_std: self.v("acc_tta_std", i),
            acc_tta_ci95: Self::ci(self.v("acc_tta_std", i), n),
            p_target,
            p_target_ci95: p_target
                .is_finite()
                .then(|| crate::stats::wilson95((p_target * n as f64).round() as usize, n))
                .flatten(),
            dawn: self.clock("dawn_s", i, n),
            airbench: self.clock("airbench_s", i, n),
            hlb: self.clock("hlb_s", i, n),
            wall: self.clock("wall_s", i, n),
            eval_mean: self.v("eval_s_mean", i),
            ttt_mean: (tn > 0).then(|| self.v("ttt_mean", i)),
            ttt_ci95: (tn > 1).then(|| Self::ci(self.v("ttt_std", i), tn)),
            ttt_n: tn,
            speedup_prev: None,
            speedup_first: None,
            delta_vs: None,
            delta_time: None,
            delta_skips: 0,
            delta_acc: None,
            last_finished: Some(self.last_finished[i].clone()).filter(|d| !d.is_empty()),
            acc_by_seed: Vec::new(),
        }
    }
}

/// Speedups within each matrix, on each row's clock. "Against the previous
/// variant" means something only on a ladder, where each rung builds on the last.
fn add_speedups(rows: &mut [VariantStats], unordered: &std::collections::HashSet<String>) {
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
}

/// Where a script variant ran and from what: its folder, the folder's git
/// state, the interpreter and torch.
fn script_words(s: &crate::record::ScriptRecord) -> String {
    let p = &s.provenance;
    let mut at: Vec<String> = Vec::new();
    if let Some(c) = &p.git_commit {
        at.push(format!("git {}", c.get(..12).unwrap_or(c)));
    }
    if p.git_diff.is_some() {
        at.push("with uncommitted changes".into());
    }
    at.extend(p.interpreter.clone());
    at.extend(p.torch.as_ref().map(|t| format!("torch {t}")));
    let at = if at.is_empty() {
        String::new()
    } else {
        format!(" ({})", at.join(", "))
    };
    format!("`{}` in {}{at}", s.argv[0], s.dir.display())
}

impl VariantStats {
    /// What the Δ is read against, where a ladder skipped unfinished rungs:
    /// `(across 1 unfinished rung)`.
    pub fn skipped_words(&self) -> String {
        match self.delta_skips {
            0 => String::new(),
            1 => " (across 1 unfinished rung)".into(),
            n => format!(" (across {n} unfinished rungs)"),
        }
    }
}

/// The setup block: the distinct values of each fact over the folders.
#[allow(
    clippy::too_many_lines,
    reason = "one line per setup fact, each read from the folders"
)]
fn setup(folders: &[Folder], rows: &[VariantStats]) -> Vec<(String, String)> {
    let manifests: Vec<&serde_json::Value> = folders.iter().map(|f| &f.manifest).collect();
    let runs: Vec<&crate::store::RunRow> = folders.iter().flat_map(|f| &f.runs).collect();
    let distinct = |v: Vec<String>| {
        let mut v: Vec<String> = v.into_iter().filter(|s| !s.is_empty()).collect();
        v.sort();
        v.dedup();
        if v.is_empty() {
            "unknown".into()
        } else {
            v.join("; ")
        }
    };
    let text = |m: &serde_json::Value, k: &str| m[k].as_str().unwrap_or("").to_string();
    let cpu = distinct(
        runs.iter()
            .filter_map(|r| {
                Some(format!(
                    "{} ({} cores)",
                    r.cpu_model.as_ref()?,
                    r.cpu_cores?
                ))
            })
            .collect(),
    );
    let gpus = distinct(runs.iter().filter_map(|r| r.gpu_name.clone()).collect());
    let hardware = if gpus == "unknown" {
        cpu
    } else {
        format!("{cpu}; GPU {gpus}")
    };
    let data = distinct(
        manifests
            .iter()
            .flat_map(|m| m["data_sets"].as_array().cloned().unwrap_or_default())
            .map(|d| {
                format!(
                    "{} (hash {})",
                    d["name"].as_str().unwrap_or("?"),
                    d["hash"].as_str().unwrap_or("?")
                )
            })
            .collect(),
    );
    // A script's data is its own, unless its matrix has tricklab export a
    // set for it (`[script.data]`, its `{data}`); where its sources stood
    // is what says which code ran.
    let exported: Vec<String> = folders
        .iter()
        .filter_map(|f| f.record.as_ref())
        .flat_map(|r| r.variants.iter().filter_map(|v| v.script()?.data.as_ref()))
        .map(|d| {
            let count = |n: Option<usize>| n.map_or("all".to_string(), |n| n.to_string());
            format!(
                "{}: {} training and {} test images a class, exported by tricklab as the script's `{{data}}`",
                d.name,
                count(d.train_per_class),
                count(d.test_per_class)
            )
        })
        .collect();
    let data = match data == crate::matrix::SCRIPT.to_string() + " (hash )" {
        true if exported.is_empty() => "the script's own".to_string(),
        true => distinct(exported),
        false => data,
    };
    let scripts = distinct(
        folders
            .iter()
            .filter_map(|f| f.record.as_ref())
            .flat_map(|r| r.variants.iter().filter_map(|v| v.script()))
            .map(script_words)
            .collect(),
    );
    let commit = distinct(
        manifests
            .iter()
            .map(|m| {
                let c = text(m, "git_commit");
                let c = if c.is_empty() || c == "unknown" {
                    text(m, "build_commit")
                } else {
                    c
                };
                format!(
                    "{} (tricklab {}, libtorch {})",
                    c.get(..12).unwrap_or(&c),
                    text(m, "tricklab_version"),
                    text(m, "libtorch_version")
                )
            })
            .collect(),
    );
    let mut clocks: Vec<String> = rows.iter().map(|r| r.headline.name().to_string()).collect();
    clocks.dedup();
    let finished: usize = rows.iter().map(|r| r.n).sum();
    let (lo, hi) = (
        rows.iter().map(|r| r.n).min().unwrap_or(0),
        rows.iter().map(|r| r.n).max().unwrap_or(0),
    );
    let noisy: usize = rows.iter().map(|r| r.noisy).sum();
    let script = (scripts != "unknown").then(|| ("script".to_string(), scripts));
    let mut out = vec![
        ("hardware".into(), hardware),
        (
            "device".into(),
            distinct(runs.iter().map(|r| r.device.clone()).collect()),
        ),
        ("data".into(), data),
        ("clock".into(), distinct(clocks)),
        (
            "runs".into(),
            format!(
                "{finished} finished, {} per variant{}",
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}–{hi}")
                },
                if noisy > 0 {
                    format!(", {noisy} flagged noisy")
                } else {
                    String::new()
                }
            ),
        ),
        ("commit".into(), commit),
        (
            "date".into(),
            distinct(
                manifests
                    .iter()
                    .map(|m| text(m, "created_at").chars().take(16).collect())
                    .collect(),
            ),
        ),
    ];
    // After `data`: what a script matrix ran instead of the engine.
    out.splice(3..3, script);
    out
}

/// Each variant's Δ against the one it is read against, from the runs
/// themselves (paired by seed): a ladder's previous rung with runs, the
/// first variant of the other kinds.
fn add_deltas(
    rows: &mut [VariantStats],
    folders: &[Folder],
    unordered: &std::collections::HashSet<String>,
    opts: &ReportOptions,
) {
    // Each folder's runs, each run once (`Folder::open`).
    let runs: Vec<&crate::store::RunRow> = folders.iter().flat_map(|f| &f.runs).collect();
    let of = |r: &VariantStats, clock: Clock| {
        let mine: Vec<crate::store::RunRow> = runs
            .iter()
            .copied()
            .filter(|x| {
                x.matrix == r.matrix
                    && x.index as usize == r.index
                    && (!opts.by_device || r.variant.ends_with(&format!(" @ {}", x.device)))
            })
            .cloned()
            .collect();
        delta::samples(&mine, clock, opts.drop_noisy)
    };
    let mut reference: Option<usize> = None;
    for i in 0..rows.len() {
        rows[i].acc_by_seed = of(&rows[i], rows[i].headline).1;
        let starts_matrix = i == 0 || rows[i - 1].matrix != rows[i].matrix;
        if starts_matrix {
            reference = None;
        }
        if let Some(j) = reference {
            let clock = rows[i].headline;
            let ((t0, a0), (t1, a1)) = (of(&rows[j], clock), of(&rows[i], clock));
            rows[i].delta_vs = Some(rows[j].variant.clone());
            // A ladder reads a rung against the last one with runs: the
            // rungs skipped (unfinished, or all failed) are counted.
            if !unordered.contains(&rows[i].matrix) {
                rows[i].delta_skips = rows[i].index.saturating_sub(rows[j].index + 1);
            }
            rows[i].delta_time = delta::between(&t0, &t1);
            rows[i].delta_acc = delta::between(&a0, &a1);
        }
        let ladder = !unordered.contains(&rows[i].matrix);
        if rows[i].n > 0 && (ladder || reference.is_none()) {
            reference = Some(i);
        }
    }
}

#[cfg(test)]
mod tests;
