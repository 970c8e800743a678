//! What leaves a results folder: its write-up (`writeup`: report.md,
//! report.html and the charts beside them), and `tricklab export`: results
//! folders in other tools' own offline formats.
//! A run becomes one tracker run (named matrix/session/variant/seed-N, so
//! that two sessions of one matrix stay two runs) with its resolved
//! configuration as hyperparameters, its step curves (loss, lr,
//! BN scale) and epoch evaluations as metrics, and its summary.
//!
//! TensorBoard's event files are a stable record format and are written
//! here; MLflow and W&B are written through their own Python libraries
//! (`scripts/export/`), fed this module's CSV export, since their on-disk
//! formats are theirs to change.

mod tensorboard;
pub mod writeup;

use crate::store::{RunRow, read_parquet, read_runs, run_file};
use crate::util::{csv_num as num, csv_text as csv_field};
use anyhow::{Context, Result, bail};
use polars::prelude::{DataFrame, DataType};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Event files for `tensorboard --logdir OUT`, one folder per run.
    Tensorboard,
    /// An MLflow tracking store (`mlflow ui --backend-store-uri OUT`); needs `mlflow-skinny`.
    Mlflow,
    /// W&B offline runs (`wandb sync OUT/wandb/offline-run-*`); needs `wandb`.
    WandbOffline,
    /// runs.csv (one row per run, the configuration as columns) and steps.csv.
    Csv,
}

impl Target {
    fn folder(self) -> &'static str {
        match self {
            Target::Tensorboard => "tensorboard",
            Target::Mlflow => "mlflow",
            Target::WandbOffline => "wandb",
            Target::Csv => "csv",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Results folders (results/<matrix>/<timestamp>, or results/<matrix>
    /// for its newest session, as `report` takes them).
    #[arg(required = true)]
    pub folders: Vec<PathBuf>,
    #[arg(long, value_enum)]
    pub to: Target,
    /// Where to write (default: FOLDER/export-TARGET of the first folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The python with mlflow or wandb (default: .venv's, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
}

/// A hyperparameter's value, typed as TensorBoard's HParams tab filters it.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Text(String),
    Num(f64),
    Bool(bool),
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Param::Text(s) => f.write_str(s),
            Param::Num(x) => write!(f, "{x}"),
            Param::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// One run as the trackers see it.
pub struct RunData {
    pub row: RunRow,
    /// The session (results folder) it ran in: the folder's name, its timestamp.
    pub session: String,
    /// Its name in the tracker: matrix/session/variant/seed-N.
    pub name: String,
    /// (step, epoch, loss, lr, BN scale mean) per recorded step.
    pub steps: Vec<(u64, f64, f64, f64, f64)>,
    /// (epoch, test accuracy, with TTA, train seconds so far) per evaluation.
    pub evals: Vec<(f64, f64, f64, f64)>,
}

impl RunData {
    /// The hyperparameters a tracker records: the session, whether the run's
    /// seconds were disturbed (`noisy`, with its reason) and the row's
    /// configuration columns.
    pub fn params(&self) -> Vec<(&'static str, Param)> {
        let r = &self.row;
        let text = |v: &str| Some(Param::Text(v.to_string()));
        let opt = |v: &Option<String>| v.clone().map(Param::Text);
        let num = |v: Option<f64>| v.map(Param::Num);
        let int = |v: Option<u64>| v.map(|x| Param::Num(x as f64));
        let entries: Vec<(&'static str, Option<Param>)> = vec![
            ("session", text(&self.session)),
            ("recipe", text(&r.recipe)),
            ("variant", text(&r.variant)),
            ("seed", int(Some(r.seed))),
            ("tricks", text(&r.tricks.join(","))),
            ("overrides", text(&r.overrides)),
            ("device", text(&r.device)),
            ("data_hash", text(&r.data_hash)),
            ("noisy", r.noisy.map(Param::Bool)),
            ("noise", opt(&r.noise)),
            ("data_name", opt(&r.data_name)),
            ("clock", opt(&r.clock)),
            ("arch", opt(&r.arch)),
            ("batch_size", int(r.batch_size.map(u64::from))),
            ("lr", num(r.lr)),
            ("momentum", num(r.momentum)),
            ("weight_decay", num(r.weight_decay)),
            ("optimizer", opt(&r.optimizer)),
            ("muon_lr", num(r.muon_lr)),
            ("schedule", opt(&r.schedule)),
            ("label_smoothing", num(r.label_smoothing)),
            ("precision", opt(&r.precision)),
            ("channels_last", r.channels_last.map(Param::Bool)),
            ("averaging", opt(&r.averaging)),
            ("whitening", opt(&r.whitening)),
            ("tta_level", int(r.tta_level.map(u64::from))),
            ("epochs", num(r.epochs)),
            ("target_acc", num(Some(r.target_acc))),
        ];
        entries
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .filter(|(_, v)| !matches!(v, Param::Num(x) if !x.is_finite()))
            .collect()
    }

    /// The run's summary metrics (absent ones left out).
    pub fn summary(&self) -> Vec<(&'static str, f64)> {
        let r = &self.row;
        [
            ("acc", r.acc),
            ("acc_tta", r.acc_tta),
            ("dawn_s", r.dawn_s),
            ("airbench_s", r.airbench_s),
            ("hlb_s", r.hlb_s),
            ("wall_s", r.wall_s),
            ("paused_s", r.paused_s),
            ("time_to_target_s", r.time_to_target_s),
            ("final_train_loss", r.final_train_loss),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.filter(|x| x.is_finite()).map(|x| (k, x)))
        .collect()
    }
}

fn column(df: &DataFrame, name: &str) -> Vec<f64> {
    df.column(name)
        .ok()
        .and_then(|c| c.cast(&DataType::Float64).ok())
        .map(|c| {
            c.f64()
                .map(|v| v.iter().map(|x| x.unwrap_or(f64::NAN)).collect())
                .unwrap_or_default()
        })
        .unwrap_or_else(|| vec![f64::NAN; df.height()])
}

/// A run's `steps/` or `epochs/` table, if it has one; a damaged one is an
/// error naming the file.
fn read_run_file(dir: &Path, sub: &str, row: &RunRow) -> Result<Option<DataFrame>> {
    let Some(f) = run_file(dir, sub, row) else {
        return Ok(None);
    };
    read_parquet(&f, None).map(Some).with_context(|| {
        format!(
            "{} is damaged: delete it (only its curve is lost)",
            f.display()
        )
    })
}

/// A session's name: its folder's (the timestamp `run` gave it), also when
/// the folder is named as `.`.
fn session_name(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    dir.file_name()
        .map_or_else(|| "session".into(), |n| n.to_string_lossy().into_owned())
}

/// Every run of a results folder with its curves.
pub fn load_runs(dir: &Path) -> Result<Vec<RunData>> {
    let runs = read_runs(&dir.join("runs.parquet"))?;
    let session = session_name(dir);
    runs.into_iter()
        .map(|row| {
            let steps = match read_run_file(dir, "steps", &row)? {
                Some(df) => {
                    let (s, e, l, lr, bn) = (
                        column(&df, "step"),
                        column(&df, "epoch"),
                        column(&df, "loss"),
                        column(&df, "lr"),
                        column(&df, "bn_scale_mean"),
                    );
                    (0..df.height())
                        .map(|i| (s[i] as u64, e[i], l[i], lr[i], bn[i]))
                        .collect()
                }
                None => Vec::new(),
            };
            let evals = match read_run_file(dir, "epochs", &row)? {
                Some(df) => {
                    let (e, a, t, s) = (
                        column(&df, "epoch"),
                        column(&df, "test_acc"),
                        column(&df, "test_acc_tta"),
                        column(&df, "train_s"),
                    );
                    (0..df.height()).map(|i| (e[i], a[i], t[i], s[i])).collect()
                }
                None => Vec::new(),
            };
            let name = format!("{}/{session}/{}/seed-{}", row.matrix, row.variant, row.seed);
            Ok(RunData {
                row,
                session: session.clone(),
                name,
                steps,
                evals,
            })
        })
        .collect()
}

pub fn cmd_export(a: ExportArgs) -> Result<i32> {
    // The folders as `report` reads them: a matrix folder is its newest
    // session (said on stderr), so what one command accepts the other does.
    let folders: Vec<PathBuf> = a
        .folders
        .iter()
        .map(|d| crate::store::session_folder(d))
        .collect::<Result<_>>()?;
    let a = ExportArgs { folders, ..a };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| a.folders[0].join(format!("export-{}", a.to.folder())));
    let mut runs = Vec::new();
    for d in &a.folders {
        if !d.join("runs.parquet").is_file() {
            bail!(
                "{}: no runs.parquet; pass a results folder made by `tricklab run` (results/<matrix>/<timestamp>)",
                d.display()
            );
        }
        runs.extend(load_runs(d)?);
    }
    let written = match a.to {
        Target::Tensorboard => tensorboard::write(&runs, &out)?,
        Target::Csv => write_csv(&runs, &out)?,
        Target::Mlflow | Target::WandbOffline => through_python(&a, &runs, &out)?,
    };
    eprintln!(
        "exported {} runs of {} folder(s) to {} ({written})",
        runs.len(),
        a.folders.len(),
        out.display()
    );
    Ok(0)
}

/// `runs.csv` (run name, status, parameters with the session first, summary)
/// and `steps.csv` and `evals.csv` (run name, session, x, values): what a
/// spreadsheet or the Python exporters read. The session column keeps two
/// sessions of one matrix apart in every file (their seeds repeat).
pub fn write_csv(runs: &[RunData], out: &Path) -> Result<String> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create {}; pass a writable --out", out.display()))?;
    let mut params: Vec<&str> = Vec::new();
    let mut metrics: Vec<&str> = Vec::new();
    for r in runs {
        for (k, _) in r.params() {
            if !params.contains(&k) {
                params.push(k);
            }
        }
        for (k, _) in r.summary() {
            if !metrics.contains(&k) {
                metrics.push(k);
            }
        }
    }
    let mut text = format!("run,status,{},{}\n", params.join(","), metrics.join(","));
    for r in runs {
        let p = r.params();
        let s = r.summary();
        let mut cells = vec![csv_field(&r.name), r.row.status.as_str().to_string()];
        cells.extend(params.iter().map(|k| {
            p.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| csv_field(&v.to_string()))
                .unwrap_or_default()
        }));
        cells.extend(metrics.iter().map(|k| {
            s.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| num(*v))
                .unwrap_or_default()
        }));
        text += &cells.join(",");
        text.push('\n');
    }
    crate::util::write_atomic(&out.join("runs.csv"), text.as_bytes())?;
    let mut steps = String::from("run,session,step,epoch,loss,lr,bn_scale_mean\n");
    let mut evals = String::from("run,session,epoch,test_acc,test_acc_tta,train_s\n");
    for r in runs {
        let name = format!("{},{}", csv_field(&r.name), csv_field(&r.session));
        for (s, e, l, lr, bn) in &r.steps {
            steps += &format!(
                "{name},{s},{},{},{},{}\n",
                num(*e),
                num(*l),
                num(*lr),
                num(*bn)
            );
        }
        for (e, a, t, s) in &r.evals {
            evals += &format!("{name},{},{},{},{}\n", num(*e), num(*a), num(*t), num(*s));
        }
    }
    crate::util::write_atomic(&out.join("steps.csv"), steps.as_bytes())?;
    crate::util::write_atomic(&out.join("evals.csv"), evals.as_bytes())?;
    Ok("runs.csv, steps.csv, evals.csv".into())
}

/// The MLflow and W&B exporters, carried in the binary so that `export`
/// works from any folder: written beside the CSV export they read.
const PY_EXPORTERS: [(&str, &str); 3] = [
    (
        "export_csv.py",
        include_str!("../../scripts/export/export_csv.py"),
    ),
    (
        "to_mlflow.py",
        include_str!("../../scripts/export/to_mlflow.py"),
    ),
    (
        "to_wandb.py",
        include_str!("../../scripts/export/to_wandb.py"),
    ),
];

/// MLflow and W&B: the CSV export handed to their own library.
fn through_python(a: &ExportArgs, runs: &[RunData], out: &Path) -> Result<String> {
    let (name, package) = match a.to {
        Target::Mlflow => ("to_mlflow.py", "mlflow-skinny"),
        _ => ("to_wandb.py", "wandb"),
    };
    let python = a.python.clone().unwrap_or_else(crate::util::default_python);
    let csv = tempfile_dir(out)?;
    write_csv(runs, &csv)?;
    for (name, text) in PY_EXPORTERS {
        crate::util::write_atomic(&csv.join(name), text.as_bytes())?;
    }
    let script = csv.join(name);
    let o = std::process::Command::new(&python)
        .arg(&script)
        .arg(&csv)
        .arg(out)
        .output()
        .with_context(|| format!("cannot run {}; pass --python", python.display()))?;
    let _ = std::fs::remove_dir_all(&csv);
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(4) {
        bail!(
            "{} has no {package}: `{} -m pip install {package}` (or pass --python)",
            python.display(),
            python.display()
        );
    }
    if !o.status.success() {
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(crate::util::failure(anyhow::anyhow!(
            "scripts/export/{name} failed: {last}"
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A fresh folder beside `out` for the intermediate CSV files.
fn tempfile_dir(out: &Path) -> Result<PathBuf> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}; pass a writable --out", parent.display()))?;
    let d = parent.join(format!(".tricklab-export-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}
