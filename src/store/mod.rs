//! The results store: `results/<matrix>/<timestamp>/` with `manifest.json`,
//! `runs.parquet` (one row per finished, failed or cancelled run) and
//! per-run `steps/<key>.parquet` and `epochs/<key>.parquet`. It is a consumer
//! of the event stream. Every file is written atomically, so a killed process
//! loses at most the run in progress.

mod folder;
mod merge;
mod pages;
mod rows;
pub mod saved_queue;

pub use folder::{Folder, Upgraded, record_of};
pub use merge::{MergeSummary, merge};
pub use rows::{Ended, RunRow, Timestamp, read_runs, runs_frame, timestamps, write_runs};

use crate::events::{EpochRow, Event, RunId, StepRow};
use crate::util::lock::FolderLock;
use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame, NamedFrom, SchemaExt, Series};
use polars_io::SerReader;
use polars_io::prelude::{KeyValueMetadata, ParquetReader, ParquetWriter};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

struct LiveRun {
    seed: u64,
    record: std::sync::Arc<crate::record::RunRecord>,
    target: f64,
    steps: Vec<StepRow>,
    epochs: Vec<EpochRow>,
}

pub struct ResultsWriter {
    dir: PathBuf,
    manifest: serde_json::Value,
    runs: Vec<RunRow>,
    live: HashMap<RunId, LiveRun>,
    /// Each queued run's seed, from the queue's snapshots: a run that fails
    /// before it starts is stored with its own seed, not 0.
    seeds: HashMap<RunId, u64>,
    /// Held while this writer lives: one writer per folder.
    _lock: FolderLock,
    /// The folder's (device, inode) when it was opened: a folder deleted or
    /// replaced meanwhile is not written into.
    identity: (u64, u64),
}

fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Folder-name-safe version of a matrix name (also the charts' file-name
/// suffix when a report holds several designed matrices).
pub(crate) fn safe(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "matrix".into() } else { s }
}

/// Deletes the temporary files a killed process left in a results folder
/// (`write_atomic`'s `.NAME.tmp-PID` and the storage probe); returns how many.
pub fn remove_leftover_temps(dir: &Path) -> usize {
    let mut removed = 0;
    for sub in [dir.to_path_buf(), dir.join("steps"), dir.join("epochs")] {
        let Ok(rd) = std::fs::read_dir(&sub) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let temp = name.starts_with('.')
                && (name.contains(".tmp-") || name.starts_with(".tricklab-probe-"));
            if temp && e.path().is_file() && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// A results folder as a write-up names it: `matrix/timestamp`, its last
/// two parts, so that a report mailed or committed holds no path of the
/// machine it was written on.
pub fn session_label(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let parts: Vec<String> = dir
        .components()
        .rev()
        .take(2)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// A results folder: what `tricklab run` or `merge` made (its manifest, or
/// at least its runs).
pub fn is_session(dir: &Path) -> bool {
    dir.join("manifest.json").is_file() || dir.join("runs.parquet").is_file()
}

/// The results folders below `dir`, down to `depth` levels (1: its
/// children; 2: `results/<matrix>/<session>` from `results`), not looking
/// inside a results folder; sorted, so the newest timestamp is last.
pub fn sessions_below(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if is_session(&p) {
            out.push(p);
        } else {
            out.extend(sessions_below(&p, depth - 1));
        }
    }
    out.sort();
    out
}

/// Whether `dir` holds a finished run. A session quit before any run
/// finished holds only its manifest and queue (and perhaps the cancelled
/// run): there is nothing in it to report.
pub fn has_finished_run(dir: &Path) -> bool {
    folder_runs(dir).is_ok_and(|runs| runs.iter().any(|r| r.status == Ended::Done))
}

/// The newest of `sessions` (sorted oldest first, as [`sessions_below`]
/// gives them) that holds a finished run, and the newer ones passed over
/// for holding none. The empty ones are kept on disk, their queues
/// resumable; they are only not what "the newest session" means.
pub fn newest_finished(sessions: &[PathBuf]) -> Option<(PathBuf, Vec<PathBuf>)> {
    let at = sessions.iter().rposition(|s| has_finished_run(s))?;
    Some((sessions[at].clone(), sessions[at + 1..].to_vec()))
}

/// A results folder's runs table, read without taking its lock (browsing a
/// folder another process writes is fine: every file is replaced atomically).
pub fn folder_runs(dir: &Path) -> Result<Vec<RunRow>> {
    let rpath = dir.join("runs.parquet");
    if rpath.exists() {
        read_runs(&rpath)
    } else {
        Ok(Vec::new())
    }
}

/// What a matrix's runs took before on one device: mean wall seconds a
/// finished run and how many runs that mean is of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EarlierRuns {
    pub mean_s: f64,
    pub n: usize,
}

/// Per (matrix name, data set as the matrix named it), what its finished
/// runs took on `device_label` in the results folders below `root`
/// (`results/<matrix>/<session>`), on this machine's CPU model, runs flagged
/// noisy left out: how the picker prices a matrix without touching the
/// device a run may be timing. Folders that predate the recorded matrix
/// (`matrix_resolved`) do not say their data set and are left out.
pub fn earlier_runs(
    root: &Path,
    device_label: &str,
) -> std::collections::HashMap<(String, String), EarlierRuns> {
    let cpu = crate::util::machine::cpu_model();
    let mut sums: std::collections::HashMap<(String, String), (f64, usize)> = Default::default();
    for dir in sessions_below(root, 2) {
        let Some(data) = read_manifest(&dir).ok().and_then(|m| {
            let data = m["record"]["data"]
                .as_str()
                .or(m["matrix_resolved"]["data"].as_str());
            data.map(String::from)
        }) else {
            continue;
        };
        for r in folder_runs(&dir).unwrap_or_default() {
            let here = r.cpu_model.as_deref().is_none_or(|m| m == cpu);
            let Some(s) = r.wall_s.filter(|s| s.is_finite() && *s > 0.0) else {
                continue;
            };
            if r.status == Ended::Done && r.device == device_label && here && r.noisy != Some(true)
            {
                let e = sums.entry((r.matrix, data.clone())).or_default();
                e.0 += s;
                e.1 += 1;
            }
        }
    }
    sums.into_iter()
        .map(|(k, (sum, n))| {
            (
                k,
                EarlierRuns {
                    mean_s: sum / n as f64,
                    n,
                },
            )
        })
        .collect()
}

/// A results folder's `manifest.json`.
pub fn read_manifest(dir: &Path) -> Result<serde_json::Value> {
    let mpath = dir.join("manifest.json");
    // The io error adds nothing to the fix, and would trail after it.
    let text = std::fs::read_to_string(&mpath).map_err(|_| {
        anyhow::anyhow!(
            "{} is not a results folder (no manifest.json); pass a folder made by `tricklab run`",
            dir.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not valid JSON; restore it or start a new results folder",
            mpath.display()
        )
    })
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl ResultsWriter {
    /// Creates `root/<matrix>/<YYYYmmdd-HHMMSS>/` and its manifest.
    pub fn create(root: &Path, matrix_name: &str, matrix_text: &str) -> Result<ResultsWriter> {
        Self::create_labelled(root, matrix_name, matrix_text, None)
    }

    /// [`ResultsWriter::create`] with a label after the timestamp (a shard's
    /// `shard-2-of-4`), so that shards started in the same second differ.
    pub fn create_labelled(
        root: &Path,
        matrix_name: &str,
        matrix_text: &str,
        label: Option<&str>,
    ) -> Result<ResultsWriter> {
        let base = root.join(safe(matrix_name));
        let mut stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
        if let Some(l) = label {
            stamp = format!("{stamp}-{l}");
        }
        let mut dir = base.join(&stamp);
        let mut k = 1;
        while dir.exists() {
            dir = base.join(format!("{stamp}-{k}"));
            k += 1;
        }
        std::fs::create_dir_all(&dir).with_context(|| {
            format!(
                "cannot create results folder {} (check permissions or pass --results)",
                dir.display()
            )
        })?;
        let torch = crate::util::device::torch_info();
        let manifest = serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "matrix": matrix_name,
            "matrix_file": matrix_text,
            "tricklab_version": env!("CARGO_PKG_VERSION"),
            "build_commit": env!("TRICKLAB_BUILD_COMMIT"),
            "git_commit": git_commit(),
            "libtorch_version": torch.version,
            "cuda_available": torch.cuda_available,
            "cuda_runtime_version": torch.cuda_runtime_version,
            "cudnn_version": torch.cudnn_version,
            "cuda_devices": torch.cuda_devices,
            "cpu_threads": torch.threads,
            "devices": [],
            "data_sets": [],
            "host": crate::util::machine::hostname(),
            "created_at": chrono::Local::now().to_rfc3339(),
        });
        let w = ResultsWriter {
            _lock: FolderLock::acquire(&dir, "writing results")?,
            identity: identity(&dir).context("the new results folder vanished")?,
            dir,
            manifest,
            runs: Vec::new(),
            live: HashMap::new(),
            seeds: HashMap::new(),
        };
        w.write_manifest()?;
        Ok(w)
    }

    /// Reopens a results folder to resume it (or to merge into it).
    pub fn open(dir: &Path) -> Result<ResultsWriter> {
        let manifest = read_manifest(dir)?;
        let lock = FolderLock::acquire(dir, "resuming")?;
        remove_leftover_temps(dir);
        let runs = folder_runs(dir)?;
        Ok(ResultsWriter {
            _lock: lock,
            identity: identity(dir).context("the results folder vanished")?,
            dir: dir.to_path_buf(),
            manifest,
            runs,
            live: HashMap::new(),
            seeds: HashMap::new(),
        })
    }

    /// Refuses to write into a folder that was deleted or replaced since it
    /// was opened: recreating it would leave runs without a manifest that
    /// nothing could resume, compare or report.
    pub fn check_folder(&self) -> Result<()> {
        // A failure of the machine's files, not of the input (exit 3), whether
        // a write or the gate before the next run finds it first.
        if identity(&self.dir) != Some(self.identity) {
            return Err(crate::util::failure(anyhow::anyhow!(
                "results folder {} was deleted or replaced while the session ran; nothing more is written there: start a new session (the runs stored elsewhere are safe)",
                self.dir.display()
            )));
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn runs(&self) -> &[RunRow] {
        &self.runs
    }

    /// Runs finished (status done) in this folder: (variant, repeat).
    pub fn finished(&self) -> HashSet<(String, usize)> {
        self.runs
            .iter()
            .filter(|r| r.status == Ended::Done)
            .map(|r| (r.variant.clone(), r.repeat as usize))
            .collect()
    }

    pub fn matrix_text(&self) -> Option<&str> {
        self.manifest["matrix_file"].as_str()
    }

    /// Records what the matrix decided (`matrix::Record`: its header and
    /// each variant's overrides, tricks, clock and resolved values), so the
    /// folder says what it ran after a recipe or a trick changes, and no
    /// reader decides it again.
    pub fn record_matrix(&mut self, record: &crate::matrix::Record) -> Result<()> {
        self.manifest["record"] = serde_json::to_value(record)?;
        self.write_manifest()
    }

    fn write_manifest(&self) -> Result<()> {
        self.check_folder()?;
        let text = serde_json::to_string_pretty(&self.manifest)?;
        self.vanished_or(crate::util::write_atomic_into(
            &self.dir.join("manifest.json"),
            |f| std::io::Write::write_all(f, text.as_bytes()).map_err(Into::into),
        ))
    }

    /// A write that failed because the folder went away between the check
    /// before it and its rename says so (`check_folder`'s failure, exit 3),
    /// not which file it was moving: CI saw a folder deleted in that window.
    fn vanished_or<T>(&self, r: Result<T>) -> Result<T> {
        r.or_else(|e| self.check_folder().and(Err(e)))
    }

    fn note_unique(&mut self, field: &str, v: serde_json::Value) -> Result<()> {
        let arr = self.manifest[field]
            .as_array_mut()
            .context("manifest field")?;
        if !arr.contains(&v) {
            arr.push(v);
            self.write_manifest()?;
        }
        Ok(())
    }

    pub fn on_event(&mut self, ev: &Event) -> Result<()> {
        match ev {
            Event::Queue(items) => {
                self.seeds
                    .extend(items.iter().map(|i| (i.run.clone(), i.seed)));
            }
            Event::RunStarted {
                run,
                seed,
                record,
                target_acc,
                device,
                ..
            } => {
                self.note_unique("devices", serde_json::json!(device))?;
                self.note_unique("data_sets", serde_json::to_value(&record.data)?)?;
                self.live.insert(
                    run.clone(),
                    LiveRun {
                        seed: *seed,
                        record: record.clone(),
                        target: *target_acc,
                        steps: Vec::new(),
                        epochs: Vec::new(),
                    },
                );
            }
            Event::Steps { run, rows, .. } => {
                if let Some(l) = self.live.get_mut(run) {
                    l.steps.extend(rows.iter().cloned());
                }
            }
            Event::Epoch { run, row } => {
                if let Some(l) = self.live.get_mut(run) {
                    l.epochs.push(row.clone());
                }
            }
            Event::RunFinished { run, summary } => {
                self.finish(run, Ended::Done, None, Some(summary))?
            }
            Event::RunFailed { run, reason } => {
                self.finish(run, Ended::Failed, Some(reason.clone()), None)?
            }
            Event::RunCancelled { run } => self.finish(run, Ended::Cancelled, None, None)?,
            _ => {}
        }
        Ok(())
    }

    fn finish(
        &mut self,
        run: &RunId,
        status: Ended,
        reason: Option<String>,
        summary: Option<&crate::events::RunSummary>,
    ) -> Result<()> {
        let r = self.store_run(run, status, reason, summary);
        self.vanished_or(r)
    }

    /// The run's step and epoch tables and its row in runs.parquet.
    fn store_run(
        &mut self,
        run: &RunId,
        status: Ended,
        reason: Option<String>,
        summary: Option<&crate::events::RunSummary>,
    ) -> Result<()> {
        self.check_folder()?;
        if !self.dir.join("manifest.json").is_file() {
            anyhow::bail!(
                "{}: manifest.json was deleted while the session ran; nothing more is written there: start a new session",
                self.dir.display()
            );
        }
        let live = self.live.remove(run);
        if let Some(l) = &live {
            let key = run.key();
            let file = |sub: &str| -> Result<PathBuf> {
                // Not create_dir_all: the results folder itself must exist.
                let d = self.dir.join(sub);
                match std::fs::create_dir(&d) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(e).with_context(|| format!("cannot create {}", d.display()));
                    }
                }
                Ok(d.join(format!("{key}.parquet")))
            };
            if !l.steps.is_empty() {
                let mut df = steps_frame(run, l.seed, &l.steps)?;
                write_parquet_into(&file("steps")?, &mut df)?;
            }
            if !l.epochs.is_empty() {
                let mut df = epochs_frame(run, l.seed, &l.epochs)?;
                write_parquet_into(&file("epochs")?, &mut df)?;
            }
        }
        let mut row = RunRow::new(
            run,
            live.as_ref().map(|l| (l.seed, &*l.record, l.target)),
            status,
            reason,
            summary,
        );
        // A run that failed before it started (a device that cannot be used)
        // still belongs to its matrix's target, or the report reads NaN%: the
        // target the folder recorded, else its matrix file read again.
        if live.is_none()
            && let Some(seed) = self.seeds.get(run)
        {
            row.seed = *seed;
        }
        if live.is_none()
            && let Some(t) = self.manifest["matrix_resolved"]["target"]
                .as_f64()
                .or_else(|| {
                    let r = record_of(&self.dir, &self.manifest).ok()?;
                    Some(r.record().target)
                })
        {
            row.target_acc = t;
        }
        // A requeued run replaces its earlier row.
        self.runs
            .retain(|r| !(r.variant == row.variant && r.repeat == row.repeat));
        self.runs.push(row);
        write_parquet_into(
            &self.dir.join("runs.parquet"),
            &mut rows::runs_frame(&self.runs)?,
        )
    }
}

pub fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<()> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create folder {}", dir.display()))?;
    }
    write_parquet_into(path, df)
}

pub use crate::util::SCHEMA_VERSION;

/// [`write_parquet`] into a folder that must exist (the results writer's:
/// a folder deleted under it is not recreated).
fn write_parquet_into(path: &Path, df: &mut DataFrame) -> Result<()> {
    crate::util::write_atomic_into(path, |f| {
        // polars embeds its newest Arrow schema (string_view columns, which
        // pyarrow cannot filter on) unless one is given: give the oldest
        // (large_string), which polars, pyarrow and DuckDB all read.
        let arrow = df.schema().to_arrow(polars::prelude::CompatLevel::oldest());
        let meta = KeyValueMetadata::Static(vec![
            polars_parquet::write::schema_to_metadata_key(&arrow),
            polars_parquet::write::KeyValue {
                key: "tricklab.schema_version".into(),
                value: Some(SCHEMA_VERSION.to_string()),
            },
        ]);
        ParquetWriter::new(f)
            .with_key_value_metadata(Some(meta))
            .finish(df)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    })
}

/// A run's `steps/` or `epochs/` file in `dir` (`sub`), under its key or
/// the keys older folders used; `None` if absent.
pub fn run_file(dir: &Path, sub: &str, row: &RunRow) -> Option<PathBuf> {
    let id = row.id();
    [id.key(), id.escaped_key(), id.legacy_key()]
        .into_iter()
        .map(|k| dir.join(sub).join(format!("{k}.parquet")))
        .find(|p| p.is_file())
}

/// A Parquet file read whole (only `columns`, when named).
pub fn read_parquet(path: &Path, columns: Option<&[&str]>) -> Result<DataFrame> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // Its pages checked first: polars aborts the process on some damaged headers.
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    std::panic::catch_unwind(|| pages::check(&bytes))
        .map_err(|_| anyhow::anyhow!("the parquet reader failed on its metadata"))?
        .with_context(|| format!("{} is damaged", path.display()))?;
    drop(bytes);
    let columns = columns.map(|c| c.iter().map(|s| s.to_string()).collect());
    // polars-parquet 0.55 unwraps some fields of a damaged file's metadata
    // (column_chunk_metadata.rs): a damaged file is an error, not a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ParquetReader::new(f).with_columns(columns).finish()
    }))
    .map_err(|_| anyhow::anyhow!("the parquet reader failed on its metadata"))?
    .map_err(anyhow::Error::from)
}

/// A numeric column as `f64`s (absent or null: `None`).
pub fn f64_column(df: &DataFrame, name: &str) -> Result<Vec<Option<f64>>> {
    let Ok(c) = df.column(name) else {
        return Ok(vec![None; df.height()]);
    };
    Ok(c.cast(&polars::prelude::DataType::Float64)?
        .f64()?
        .iter()
        .collect())
}

/// A run's curves as its `steps/` and `epochs/` files keep them (what
/// [`ResultsWriter`] wrote), for screens that draw a finished run again;
/// `None` where the run has no such file. The per-layer BN biases are not
/// kept per layer, so they come back empty.
pub fn read_curves(dir: &Path, row: &RunRow) -> Result<(Vec<StepRow>, Vec<EpochRow>)> {
    let damaged = |f: &Path| {
        format!(
            "{} is damaged: delete it (only its curve is lost)",
            f.display()
        )
    };
    let mut steps = Vec::new();
    if let Some(f) = run_file(dir, "steps", row) {
        let df = read_parquet(&f, None).with_context(|| damaged(&f))?;
        let (step, epoch, loss, lr) = (
            f64_column(&df, "step")?,
            f64_column(&df, "epoch")?,
            f64_column(&df, "loss")?,
            f64_column(&df, "lr")?,
        );
        // Absent from files written before the loader was measured per step.
        let loader = f64_column(&df, "loader_s")?;
        let bn: Vec<Vec<f32>> = match df.column("bn_scale").ok().map(|c| c.list()) {
            Some(Ok(lists)) => (0..lists.len())
                .map(|i| {
                    lists
                        .get_as_series(i)
                        .and_then(|s| s.cast(&polars::prelude::DataType::Float32).ok())
                        .and_then(|s| s.f32().ok().map(|v| v.iter().flatten().collect()))
                        .unwrap_or_default()
                })
                .collect(),
            _ => vec![Vec::new(); df.height()],
        };
        steps = (0..df.height())
            .map(|i| StepRow {
                step: step[i].unwrap_or(0.0) as u64,
                epoch: epoch[i].unwrap_or(f64::NAN),
                loss: loss[i].unwrap_or(f64::NAN),
                lr: lr[i].unwrap_or(f64::NAN),
                bn_scale: bn[i].clone(),
                bn_bias: Vec::new(),
                loader_s: loader[i].unwrap_or(0.0),
            })
            .collect();
    }
    let mut epochs = Vec::new();
    if let Some(f) = run_file(dir, "epochs", row) {
        let df = read_parquet(&f, None).with_context(|| damaged(&f))?;
        let c = |n: &str| f64_column(&df, n);
        let (loader_s, loader_ips) = (c("loader_s")?, c("loader_images_per_s")?);
        let (epoch, n_steps, loss, train_acc, acc, tta, train_s, eval_s, ips, mem) = (
            c("epoch")?,
            c("steps")?,
            c("train_loss")?,
            c("train_acc")?,
            c("test_acc")?,
            c("test_acc_tta")?,
            c("train_s")?,
            c("eval_s")?,
            c("images_per_s")?,
            c("peak_mem_bytes")?,
        );
        epochs = (0..df.height())
            .map(|i| EpochRow {
                epoch: epoch[i].unwrap_or(0.0) as usize,
                steps: n_steps[i].unwrap_or(0.0) as u64,
                train_loss: loss[i].unwrap_or(f64::NAN),
                train_acc: train_acc[i].unwrap_or(f64::NAN),
                // Written as null for an epoch without an evaluation.
                test_acc: acc[i].unwrap_or(f64::NAN),
                test_acc_tta: tta[i],
                train_s: train_s[i].unwrap_or(0.0),
                eval_s: eval_s[i].unwrap_or(0.0),
                images_per_s: ips[i].unwrap_or(0.0),
                peak_mem_bytes: mem[i].map(|b| b as u64),
                loader_s: loader_s[i].unwrap_or(0.0),
                loader_images_per_s: loader_ips[i],
                ddp: None,
            })
            .collect();
    }
    Ok((steps, epochs))
}

fn ids(run: &RunId, seed: u64, n: usize) -> Vec<Column> {
    vec![
        Column::new("matrix".into(), vec![run.matrix.clone(); n]),
        Column::new("index".into(), vec![run.index as u32; n]),
        Column::new("variant".into(), vec![run.variant.clone(); n]),
        Column::new("repeat".into(), vec![run.repeat as u32; n]),
        Column::new("seed".into(), vec![seed; n]),
    ]
}

fn steps_frame(run: &RunId, seed: u64, steps: &[StepRow]) -> Result<DataFrame> {
    let n = steps.len();
    let mean = |v: &Vec<f32>| {
        (!v.is_empty()).then(|| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64)
    };
    let mut cols = ids(run, seed, n);
    cols.push(Column::new(
        "step".into(),
        steps.iter().map(|s| s.step).collect::<Vec<u64>>(),
    ));
    cols.push(Column::new(
        "epoch".into(),
        steps.iter().map(|s| s.epoch).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "loss".into(),
        steps.iter().map(|s| s.loss).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "lr".into(),
        steps.iter().map(|s| s.lr).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "bn_scale_mean".into(),
        steps
            .iter()
            .map(|s| mean(&s.bn_scale))
            .collect::<Vec<Option<f64>>>(),
    ));
    cols.push(Column::new(
        "bn_bias_mean".into(),
        steps
            .iter()
            .map(|s| mean(&s.bn_bias))
            .collect::<Vec<Option<f64>>>(),
    ));
    let lists: Vec<Series> = steps
        .iter()
        .map(|s| Series::new("".into(), s.bn_scale.clone()))
        .collect();
    cols.push(Column::new("bn_scale".into(), lists));
    cols.push(Column::new(
        "loader_s".into(),
        steps.iter().map(|s| s.loader_s).collect::<Vec<f64>>(),
    ));
    Ok(DataFrame::new(n, cols)?)
}

fn epochs_frame(run: &RunId, seed: u64, rows: &[EpochRow]) -> Result<DataFrame> {
    let n = rows.len();
    let mut cols = ids(run, seed, n);
    cols.push(Column::new(
        "epoch".into(),
        rows.iter().map(|r| r.epoch as u32).collect::<Vec<u32>>(),
    ));
    cols.push(Column::new(
        "steps".into(),
        rows.iter().map(|r| r.steps).collect::<Vec<u64>>(),
    ));
    cols.push(Column::new(
        "train_loss".into(),
        rows.iter().map(|r| r.train_loss).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "train_acc".into(),
        rows.iter().map(|r| r.train_acc).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "test_acc".into(),
        rows.iter()
            .map(|r| (!r.test_acc.is_nan()).then_some(r.test_acc))
            .collect::<Vec<Option<f64>>>(),
    ));
    cols.push(Column::new(
        "test_acc_tta".into(),
        rows.iter()
            .map(|r| r.test_acc_tta)
            .collect::<Vec<Option<f64>>>(),
    ));
    cols.push(Column::new(
        "train_s".into(),
        rows.iter().map(|r| r.train_s).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "eval_s".into(),
        rows.iter().map(|r| r.eval_s).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "images_per_s".into(),
        rows.iter().map(|r| r.images_per_s).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "peak_mem_bytes".into(),
        rows.iter()
            .map(|r| r.peak_mem_bytes)
            .collect::<Vec<Option<u64>>>(),
    ));
    cols.push(Column::new(
        "loader_s".into(),
        rows.iter().map(|r| r.loader_s).collect::<Vec<f64>>(),
    ));
    cols.push(Column::new(
        "loader_images_per_s".into(),
        rows.iter()
            .map(|r| r.loader_images_per_s)
            .collect::<Vec<Option<f64>>>(),
    ));
    Ok(DataFrame::new(n, cols)?)
}

#[cfg(test)]
pub(crate) mod tests;
/// A folder as the user names it: a session as it is; `results/<matrix>`
/// its newest session with a finished run (said on stderr: a session quit
/// before any run finished is passed over, not deleted); `results` is a
/// list of matrices to choose from.
pub fn session_folder(dir: &Path) -> Result<PathBuf> {
    if dir.join("manifest.json").is_file() || !dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    let sessions = sessions_below(dir, 1);
    if let Some((newest, skipped)) = newest_finished(&sessions)
        && !skipped.is_empty()
    {
        eprintln!(
            "{}: using {}, the newest of its sessions with a finished run; passed over {} newer with none ({}; `tricklab tui --resume DIR` continues one)",
            dir.display(),
            newest.display(),
            skipped.len(),
            skipped
                .iter()
                .map(|s| s.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(newest);
    }
    if let Some(newest) = sessions.last() {
        if sessions.len() > 1 {
            eprintln!(
                "{}: using the newest of its {} sessions, {}",
                dir.display(),
                sessions.len(),
                newest.display()
            );
        }
        return Ok(newest.clone());
    }
    let matrices: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !sessions_below(&e.path(), 1).is_empty())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if matrices.is_empty() {
        anyhow::bail!(
            "{}: no results folder in it; `tricklab run MATRIX` makes one",
            dir.display()
        );
    }
    let mut matrices = matrices;
    matrices.sort();
    anyhow::bail!(
        "{} holds the results of {} matrices ({}): pass {}/<matrix> for its newest session; `tricklab results {}` lists the sessions",
        dir.display(),
        matrices.len(),
        matrices.join(", "),
        dir.display(),
        dir.display()
    )
}
