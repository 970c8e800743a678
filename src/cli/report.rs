//! `tricklab report`, `tricklab results` and `tricklab compare`: their
//! arguments and output; the judgement is `report::compared`'s.

use crate::report::compared::{CompareOptions, Compared, compare_folders};
use crate::report::{Clock, Report, ReportOptions, aggregate, history};
use crate::store::session_folder;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Results folders (results/<matrix>/<timestamp>).
    #[arg(required_unless_present = "history")]
    pub results: Vec<PathBuf>,
    /// A nightly history folder (`tricklab nightly --history`): each rung's
    /// time and accuracy night by night, and its chart (into --plots, or the folder).
    #[arg(long, conflicts_with = "results")]
    pub history: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "md")]
    pub format: Format,
    /// Which table `--format csv` prints: one row per variant, or one row
    /// per main effect, interaction and Shapley value of each designed
    /// matrix (md and json carry both).
    #[arg(long, value_enum, default_value = "variants")]
    pub table: Table,
    /// Also write the charts (PNG and SVG) into this folder.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Clock for the time columns and speedups (default: each recipe's own
    /// convention, DAWNBench-style for Page's, airbench-style for airbench's).
    #[arg(long, value_enum)]
    pub clock: Option<Clock>,
    /// Target accuracy (default: the one the runs were made with).
    #[arg(long)]
    pub target: Option<f64>,
    /// One row per variant and device (runs of a multi-GPU or cluster sweep).
    #[arg(long)]
    pub by_device: bool,
    /// Leave out runs flagged noisy (a busy machine, a throttled GPU, a
    /// ragged throughput: the `noisy` and `noise` columns of runs.parquet).
    #[arg(long)]
    pub drop_noisy: bool,
    /// The charts' file format for --plots.
    #[arg(long, value_enum, default_value = "both")]
    pub plots_format: crate::charts::PlotFormat,
    /// Every chart at WIDTHxHEIGHT pixels (default: each chart's own size).
    #[arg(long, value_parser = crate::charts::parse_plot_size)]
    pub plots_size: Option<(u32, u32)>,
    /// light (white background, for papers) or dark (for dark slides).
    #[arg(long, value_enum, default_value = "light")]
    pub plots_theme: crate::charts::PlotTheme,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// A short aligned table for the terminal, as a headless run ends.
    Text,
    Md,
    Csv,
    Json,
}

/// The CSV output is one rectangular table, so that `report --format csv >
/// x.csv` reads straight into pandas or polars: the effects, whose columns
/// are not the variants', are a table of their own, chosen here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Table {
    Variants,
    Effects,
}

/// `tricklab matrix show FILE --power FOLDER`: the seeds each question of
/// the matrix needs at 80% power, from the folder's measured spread.
pub fn cmd_power(
    files: &[PathBuf],
    tiny: bool,
    folder: &Path,
    delta_time: Option<f64>,
    delta_acc: f64,
    format: crate::util::TextOrJson,
) -> Result<i32> {
    use crate::report::seeds;
    let [file] = files else {
        anyhow::bail!(
            "--power reads one matrix's results: name one matrix file (got {})",
            files.len()
        );
    };
    if let Some(t) = delta_time.filter(|t| !(t.is_finite() && *t > 0.0)) {
        anyhow::bail!("--delta-time {t}: give a positive number of seconds, e.g. 0.5");
    }
    if !(delta_acc.is_finite() && delta_acc > 0.0 && delta_acc <= 100.0) {
        anyhow::bail!("--delta-acc {delta_acc}: give accuracy points in (0, 100], e.g. 0.5");
    }
    let m = crate::matrix::load(file)?;
    let m = if tiny { m.tiny()? } else { m };
    let folder = crate::store::Folder::open(&session_folder(folder)?)?;
    let m = m.record();
    let clock = m.clock;
    let deltas = seeds::Deltas {
        time_s: delta_time,
        acc: delta_acc / 100.0,
    };
    let s = seeds::seeds(&folder, &m, clock, deltas, false)?;
    match format {
        crate::util::TextOrJson::Json => {
            let mut v = serde_json::to_value(&s)?;
            v["file"] = serde_json::json!(file);
            v["power"] = seeds::POWER.into();
            v["alpha"] = seeds::ALPHA.into();
            crate::util::print_json(serde_json::json!({ "matrices": [v] }));
        }
        crate::util::TextOrJson::Text => print!("{}", seeds::to_text(&s)),
    }
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct ResultsArgs {
    /// The results root.
    #[arg(default_value = "results")]
    pub root: PathBuf,
    /// The results root, named as every other command's --results names it.
    #[arg(long = "results", value_name = "ROOT", conflicts_with = "root")]
    pub results_root: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: crate::util::TextOrJson,
}

/// `tricklab results`: every session under a root with its date, matrix, runs and status.
/// One session as `results` lists it.
struct SessionLine {
    date: String,
    matrix: String,
    done: usize,
    failed: usize,
    cancelled: usize,
    status: String,
    dir: std::path::PathBuf,
}

/// A session's line: its runs counted by how they ended, and its status.
fn session_line(matrix: String, s: std::path::PathBuf) -> SessionLine {
    use crate::store::Ended;
    let manifest = crate::store::read_manifest(&s).unwrap_or_default();
    let runs = crate::store::read_runs(&s.join("runs.parquet"));
    let rows = runs.as_deref().unwrap_or_default();
    let count = |e: Ended| rows.iter().filter(|r| r.status == e).count();
    let (done, failed, cancelled) = (
        count(Ended::Done),
        count(Ended::Failed),
        count(Ended::Cancelled),
    );
    let status = session_status(&s, &manifest, runs.as_ref().err(), cancelled);
    SessionLine {
        date: manifest["created_at"]
            .as_str()
            .unwrap_or("?")
            .chars()
            .take(16)
            .collect(),
        matrix,
        done,
        failed,
        cancelled,
        status,
        dir: s,
    }
}

/// What a session's folder says of it. A table or queue that does not
/// read is `unreadable` with the store's reason, never complete: its runs
/// cannot be counted.
fn session_status(
    s: &std::path::Path,
    manifest: &serde_json::Value,
    runs_err: Option<&anyhow::Error>,
    cancelled: usize,
) -> String {
    use crate::events::RunStatus;
    let queue = if s.join("queue.json").exists() {
        match crate::store::saved_queue::load_saved(s) {
            Ok(q) => q,
            Err(e) => return format!("unreadable ({e})"),
        }
    } else {
        Vec::new()
    };
    let has = |st: &[RunStatus]| queue.iter().filter(|e| st.contains(&e.status)).count();
    let left = has(&[RunStatus::Queued, RunStatus::Running]);
    let ended = has(&[RunStatus::Done, RunStatus::Failed, RunStatus::Cancelled]);
    let merged = manifest.get("merged_from").is_some();
    let missing = runs_err.is_some();
    match runs_err {
        Some(e) if s.join("runs.parquet").exists() => return format!("unreadable ({e})"),
        // No table where the queue says runs ended: their rows are lost.
        Some(_) if merged => {
            return "unreadable (no runs.parquet; `tricklab merge` its shards again)".into();
        }
        Some(_) if ended > 0 => {
            return format!(
                "unreadable (no runs.parquet, though {ended} of its runs ended; `tricklab run --resume {}` runs them again)",
                s.display()
            );
        }
        _ => {}
    }
    if merged {
        "merged".to_string()
    } else if left > 0 {
        format!("unfinished ({left} left)")
    } else if cancelled > 0 {
        // A cancelled run was not trained: its session is not complete.
        format!("stopped ({cancelled} cancelled)")
    } else if let Some((ran, planned)) = crate::store::saved_queue::budget_stop(&queue) {
        format!("stopped by its budget ({ran} of {planned} runs)")
    } else if missing {
        // Quit before any run finished (its manifest, perhaps its queue).
        "empty (no run finished)".to_string()
    } else {
        "complete".to_string()
    }
}

pub fn cmd_results(mut args: ResultsArgs) -> Result<i32> {
    if let Some(root) = args.results_root.take() {
        args.root = root;
    }
    let mut rows = Vec::new();
    for m in std::fs::read_dir(&args.root)
        .with_context(|| format!("{}: no results root here", args.root.display()))?
        .flatten()
    {
        for s in crate::store::sessions_below(&m.path(), 1) {
            rows.push(session_line(
                m.file_name().to_string_lossy().into_owned(),
                s,
            ));
        }
    }
    rows.sort_by(|a, b| (&a.date, &a.matrix, &a.dir).cmp(&(&b.date, &b.matrix, &b.dir)));
    if args.format == crate::util::TextOrJson::Json {
        let sessions: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "created_at": r.date, "matrix": r.matrix, "done": r.done,
                    "failed": r.failed, "cancelled": r.cancelled,
                    "status": r.status.split(' ').next().unwrap_or(""), "detail": r.status,
                    "folder": r.dir,
                })
            })
            .collect();
        crate::util::print_json(serde_json::json!({ "root": args.root, "sessions": sessions }));
        return Ok(0);
    }
    // Columns as wide as the longest matrix name and status, so they align.
    let mw = rows
        .iter()
        .map(|r| r.matrix.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let sw = rows
        .iter()
        .map(|r| r.status.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<17} {:<mw$} {:>5} {:>6} {:>9}  {:<sw$}  folder",
        "date", "matrix", "done", "failed", "cancelled", "status"
    );
    for r in &rows {
        println!(
            "{:<17} {:<mw$} {:>5} {:>6} {:>9}  {:<sw$}  {}",
            r.date,
            r.matrix,
            r.done,
            r.failed,
            r.cancelled,
            r.status,
            r.dir.display()
        );
    }
    if rows.is_empty() {
        eprintln!("{}: no sessions yet", args.root.display());
    }
    Ok(0)
}

fn plot_options(args: &ReportArgs) -> crate::charts::PlotOptions {
    crate::charts::PlotOptions {
        format: args.plots_format,
        size: args.plots_size,
        theme: args.plots_theme,
    }
}

pub fn cmd_report(args: ReportArgs) -> Result<i32> {
    if args.table == Table::Effects
        && (args.history.is_some() || !matches!(args.format, Format::Csv))
    {
        anyhow::bail!(
            "--table effects picks the CSV table of a designed matrix's effects: add --format csv (md and json carry the effects already; a --history has none)"
        );
    }
    if let Some(root) = &args.history {
        let nights = history::load(root)?;
        match args.format {
            Format::Csv => print!("{}", std::fs::read_to_string(history::history_file(root))?),
            Format::Json => crate::util::print_json(serde_json::json!({
                "history": root,
                "nights": history::to_json(&nights),
            })),
            Format::Md | Format::Text => print!("{}", history::to_markdown(&nights)),
        }
        let out = args.plots.as_deref().unwrap_or(root);
        for p in crate::charts::write_history(&nights, out, &plot_options(&args))? {
            eprintln!("wrote {}", p.display());
        }
        return Ok(0);
    }
    let results: Vec<PathBuf> = args
        .results
        .iter()
        .map(|d| session_folder(d))
        .collect::<Result<_>>()?;
    let args = ReportArgs { results, ..args };
    let r = aggregate(
        &args.results,
        &ReportOptions {
            target: args.target,
            clock: args.clock,
            by_device: args.by_device,
            drop_noisy: args.drop_noisy,
        },
    )?;
    // Before the table is printed: a folder that cannot be made is the only output.
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the plots folder {}: {e}; pass a writable folder to --plots",
                dir.display()
            )
        })?;
    }
    // A folder whose record does not read, runs passed twice, a budget
    // that stopped a session: one line on stderr whatever the format,
    // besides the Markdown report's own line.
    for n in &r.notes {
        eprintln!("warning: {n}");
    }
    match args.format {
        Format::Text => print!("{}", r.to_text()),
        Format::Md => print!("{}", r.to_markdown()),
        Format::Csv if args.table == Table::Effects => {
            print!("{}", r.to_effects_csv());
            effects_csv_notes(&r);
        }
        Format::Csv => print!("{}", r.to_csv()),
        Format::Json => println!("{}", r.to_json()?),
    }
    if let Some(dir) = &args.plots {
        let figures = crate::report::figures::Figures::read(&r, &r.dirs)?;
        for p in crate::charts::write_all(&r, &figures, dir, &plot_options(&args))? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(0)
}

/// On stderr, what the effects table cannot say in its rows: no designed
/// matrix among the folders, or why part of one could not be estimated.
fn effects_csv_notes(r: &Report) {
    if r.effects.is_empty() {
        eprintln!(
            "note: no factorial, fractional or shapley matrix among these folders: the effects table has its header only (ablations/README.md, Kinds)"
        );
    }
    for e in &r.effects {
        for a in &e.analyses {
            for n in &a.notes {
                eprintln!("note: {} {}: {n}", e.matrix, a.response);
            }
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub ask: CompareOptions,
    /// text (the table) or json (one document on stdout, whatever the exit code).
    #[arg(long, value_enum, default_value = "text")]
    pub format: crate::util::TextOrJson,
}

/// Exit 0: no regression; 1: a regression, a variant that failed or is
/// missing in the candidate (or, with --fail-inconclusive, a variant is
/// inconclusive); 2: the folders are not comparable.
pub fn cmd_compare(args: CompareArgs) -> Result<i32> {
    let ask = &args.ask;
    let (base, candidate) = match (session_folder(&ask.base), session_folder(&ask.candidate)) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => {
            let out = Compared::refused(crate::util::one_line(&e));
            return Ok(print(&out, ask, args.format));
        }
    };
    let ask = CompareOptions {
        base,
        candidate,
        ..args.ask
    };
    Ok(print(&compare_folders(&ask)?, &ask, args.format))
}

/// Prints the table (or the JSON document) and returns the exit code.
pub fn print(c: &Compared, ask: &CompareOptions, format: crate::util::TextOrJson) -> i32 {
    match format {
        crate::util::TextOrJson::Text => {
            let (out, err) = c.text();
            print!("{out}");
            eprint!("{err}");
        }
        crate::util::TextOrJson::Json => crate::util::print_json(c.to_json(ask)),
    }
    c.code
}
