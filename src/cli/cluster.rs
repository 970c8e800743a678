//! Scale-out: `tricklab merge` joins shard folders, and `tricklab slurm`
//! hands a matrix to Slurm as a job array (one task per shard, each into its
//! own folder: nothing is shared or locked across nodes) and follows it.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Shard folders (results/<matrix>/<timestamp>-shard-i-of-N, or a Slurm
    /// job's shard-*/<matrix>/<timestamp>).
    #[arg(required = true)]
    pub folders: Vec<PathBuf>,
    /// The new results folder.
    #[arg(long)]
    pub into: PathBuf,
}

pub fn cmd_merge(args: MergeArgs) -> Result<i32> {
    let s = crate::store::merge(&args.folders, &args.into)?;
    for d in &s.duplicates {
        eprintln!("duplicate: {d} (the first kept)");
    }
    if !s.missing.is_empty() {
        eprintln!(
            "missing: {} run(s) no shard finished: {}",
            s.missing.len(),
            s.missing.join(", ")
        );
    }
    println!(
        "merged {} folders into {} ({} runs, {} duplicates, {} missing); `tricklab report {}`",
        s.folders,
        args.into.display(),
        s.runs,
        s.duplicates.len(),
        s.missing.len(),
        args.into.display()
    );
    Ok(if s.missing.is_empty() { 0 } else { 1 })
}

#[derive(clap::Args, Debug)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum SlurmCommand {
    /// Write an sbatch script for a job array (one task per shard) and submit it.
    Submit(SubmitArgs),
    /// A job's tasks (squeue, and sacct where accounting is on) and its shards' runs.
    Status(JobArgs),
    /// Submit again only the tasks whose shard has runs left (failed or pre-empted).
    Resubmit(JobArgs),
}

#[derive(clap::Args, Clone, Debug)]
pub struct SubmitArgs {
    pub matrix: PathBuf,
    #[arg(long)]
    pub partition: Option<String>,
    /// GPUs per task (0: CPU tasks).
    #[arg(long, default_value_t = 1)]
    pub gpus_per_task: u32,
    /// Spread each multi-rank run's ranks over this many nodes (its
    /// world_size divided evenly among them), as `srun --nodes N` does.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// GPUs per node for multi-node runs (`#SBATCH --gpus-per-node`), in
    /// place of --gpus-per-task: a rank takes cuda:SLURM_LOCALID.
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    #[arg(long, default_value_t = 2)]
    pub cpus_per_task: u32,
    /// At most this many tasks at once (`--array=...%N`).
    #[arg(long)]
    pub array_parallel: Option<u32>,
    /// Time limit per task (Slurm's format, e.g. 2:00:00).
    #[arg(long, default_value = "4:00:00")]
    pub time: String,
    /// Number of shards (tasks); default: one per run, at most 32.
    #[arg(long)]
    pub shards: Option<usize>,
    /// Override the matrix's repeats.
    #[arg(long)]
    pub repeats: Option<usize>,
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Print the script and where it would go; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(clap::Args, Debug)]
pub struct JobArgs {
    pub job: String,
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// `status` only: text, or json (one document).
    #[arg(long, value_enum, default_value = "text")]
    pub format: crate::util::TextOrJson,
}

pub fn cmd_slurm(args: SlurmArgs) -> Result<i32> {
    match args.command {
        SlurmCommand::Submit(a) => submit(a),
        SlurmCommand::Status(a) => status(a),
        SlurmCommand::Resubmit(a) => resubmit(a),
    }
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The job array's script: task i runs shard i into `dir/shard-i`, or
/// resumes that folder when a re-submitted task finds one.
/// A value written into an `#SBATCH` line, which sbatch reads itself and no
/// shell quoting protects: no whitespace or control characters, so a value
/// cannot end the line and start a command of its own.
fn directive(what: &str, v: &str) -> Result<String> {
    if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!(
            "{what} `{}` cannot go into the sbatch script: no spaces, newlines or control characters",
            v.escape_debug()
        );
    }
    Ok(v.to_string())
}

pub fn sbatch_script(
    a: &SubmitArgs,
    name: &str,
    dir: &Path,
    matrix: &Path,
    bin: &Path,
    (shards, world): (usize, usize),
) -> Result<String> {
    crate::config::check_matrix_name(name).map_err(anyhow::Error::msg)?;
    let out = directive("the job folder", &dir.display().to_string())?;
    let time = directive("--time", &a.time)?;
    let mut s = String::from("#!/bin/bash\n");
    s += &format!("#SBATCH --job-name=tricklab-{name}\n");
    s += &match a.array_parallel {
        Some(p) => format!("#SBATCH --array=1-{shards}%{p}\n"),
        None => format!("#SBATCH --array=1-{shards}\n"),
    };
    s += &format!("#SBATCH --output={out}/logs/%A_%a.out\n");
    s += &format!("#SBATCH --time={time}\n");
    let nodes = a.nodes.max(1) as usize;
    if nodes > 1 && (world < nodes || world % nodes != 0) {
        bail!(
            "--nodes {nodes} spreads each run's ranks evenly over the nodes, but the matrix's largest world_size is {world}: set world_size to a multiple of {nodes}, or drop --nodes"
        );
    }
    if world > 1 {
        // A task is a gang: the session in the batch step starts the ranks
        // with srun, one task (and its CPUs or GPU) each; over several
        // nodes, as many on each.
        s += &format!("#SBATCH --ntasks={world}\n");
        if nodes > 1 {
            s += &format!("#SBATCH --nodes={nodes}\n");
            s += &format!("#SBATCH --ntasks-per-node={}\n", world / nodes);
        }
    }
    s += &format!("#SBATCH --cpus-per-task={}\n", a.cpus_per_task);
    match a.gpus_per_node {
        Some(g) if g > 0 => s += &format!("#SBATCH --gpus-per-node={g}\n"),
        _ if a.gpus_per_task > 0 => {
            s += &format!("#SBATCH --gpus-per-task={}\n", a.gpus_per_task);
        }
        _ => {}
    }
    if let Some(p) = &a.partition {
        s += &format!("#SBATCH --partition={}\n", directive("--partition", p)?);
    }
    // The CPUs Slurm allotted, not the node's cores (which other tasks share).
    // A gang's ranks take their devices from srun (cuda:SLURM_LOCALID or
    // the CPU); the session only needs as many as the largest world size.
    let devices = format!(
        "--devices {} --cpu-threads {}",
        match (world, a.gpus_per_task.max(a.gpus_per_node.unwrap_or(0))) {
            (w, _) if w > 1 => format!("cpu:{w}"),
            (_, 0) => "cpu".into(),
            _ => "auto".into(),
        },
        a.cpus_per_task
    );
    s += &format!(
        "# tricklab: shard i of {shards} of {name} into its own folder; a re-submitted task resumes it.\n\
         set -euo pipefail\n\
         i=$SLURM_ARRAY_TASK_ID\n\
         root={dir}/shard-$i\n\
         prev=$(ls -d \"$root\"/*/*/ 2>/dev/null | head -n 1 || true)\n\
         if [ -n \"$prev\" ]; then\n\
         \x20 exec {bin} run --headless --resume \"$prev\" --results \"$root\" {devices}\n\
         fi\n\
         exec {bin} run {matrix} --headless --shard \"$i/{shards}\" --results \"$root\" {devices}\n",
        dir = quote(dir),
        bin = quote(bin),
        matrix = quote(matrix),
    );
    Ok(s)
}

fn submit(a: SubmitArgs) -> Result<i32> {
    let mut m = crate::matrix::load_all(std::slice::from_ref(&a.matrix), a.repeats)?.remove(0);
    let runs = m.runs().len();
    let shards = a.shards.unwrap_or(runs.min(32)).clamp(1, runs.max(1));
    if let Some(n) = a.shards
        && n > runs
    {
        eprintln!("note: {n} shards for {runs} runs: using {shards}");
    }
    if let Some(r) = a.repeats {
        // The tasks read the copied file: it carries the repeats asked for.
        let mut t: toml::Table = toml::from_str(&m.text)?;
        t.remove("seeds");
        t.insert("repeats".into(), toml::Value::Integer(r as i64));
        m.text = toml::to_string(&t)?;
    }
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let results = std::path::absolute(&a.results)?;
    let dir = results.join(&m.name).join(format!("slurm-{stamp}"));
    let bin = std::env::current_exe().context("where is this binary?")?;
    let matrix = dir.join("matrix.toml");
    let world = m
        .runs()
        .iter()
        .map(|s| m.world_size(s.id.index))
        .max()
        .unwrap_or(1);
    let script = sbatch_script(&a, &m.name, &dir, &matrix, &bin, (shards, world))?;
    if a.dry_run {
        println!("{script}");
        eprintln!(
            "dry run: {shards} tasks for {runs} runs; would write {} and submit it",
            dir.join("job.sbatch").display()
        );
        return Ok(0);
    }
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}: pass a writable --results", dir.display()))?;
    crate::util::write_atomic(&matrix, m.text.as_bytes())?;
    let sbatch = dir.join("job.sbatch");
    crate::util::write_atomic(&sbatch, script.as_bytes())?;
    let job = sbatch_submit(&sbatch, None)?;
    let info = serde_json::json!({
        "job": job, "matrix": m.name, "shards": shards, "runs": runs,
        "dir": dir, "submitted_at": chrono::Local::now().to_rfc3339(), "resubmits": [],
    });
    crate::util::write_atomic(
        &dir.join("job.json"),
        serde_json::to_string_pretty(&info)?.as_bytes(),
    )?;
    println!(
        "submitted job {job}: {shards} tasks for {runs} runs of {}; results under {}; `tricklab slurm status {job}`",
        m.name,
        dir.display()
    );
    Ok(0)
}

/// `sbatch --parsable` (with `--array=LIST` to re-submit some tasks): the job id.
fn sbatch_submit(script: &Path, array: Option<&str>) -> Result<String> {
    let mut c = Command::new("sbatch");
    c.arg("--parsable");
    if let Some(a) = array {
        c.arg(format!("--array={a}"));
    }
    let o = c.arg(script).output().map_err(|e| {
        anyhow::anyhow!(
            "cannot run sbatch ({e}): run this on a Slurm login node, or `--dry-run` to see the script"
        )
    })?;
    if !o.status.success() {
        bail!(
            "sbatch refused {}: {}",
            script.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    Ok(out.trim().split(';').next().unwrap_or("").to_string())
}

/// A submitted job's folder and record, found by its id under `results`.
fn find_job(results: &Path, job: &str) -> Result<(PathBuf, serde_json::Value)> {
    let root = std::fs::read_dir(results).with_context(|| {
        format!(
            "{}: no results folder here; pass --results",
            results.display()
        )
    })?;
    for m in root.flatten() {
        for d in std::fs::read_dir(m.path()).into_iter().flatten().flatten() {
            let f = d.path().join("job.json");
            let Ok(t) = std::fs::read_to_string(&f) else {
                continue;
            };
            let v: serde_json::Value =
                serde_json::from_str(&t).with_context(|| format!("{} is damaged", f.display()))?;
            let ids =
                std::iter::once(&v["job"]).chain(v["resubmits"].as_array().into_iter().flatten());
            if ids.filter_map(|j| j.as_str()).any(|j| j == job) {
                return Ok((d.path(), v));
            }
        }
    }
    bail!(
        "no job {job} under {}: `tricklab slurm submit` records its jobs there (pass --results if it was another folder)",
        results.display()
    )
}

/// Per shard: its results folder and (finished, planned) runs.
fn shard_progress(dir: &Path, shards: usize) -> Vec<(usize, Option<PathBuf>, usize, usize)> {
    (1..=shards)
        .map(|i| {
            let folder = crate::store::sessions_below(&dir.join(format!("shard-{i}")), 2)
                .into_iter()
                .find(|p| p.join("manifest.json").is_file());
            let (done, planned) = folder.as_ref().map_or((0, 0), |f| {
                let done = crate::store::read_runs(&f.join("runs.parquet"))
                    .map(|rows| {
                        rows.iter()
                            .filter(|r| r.status == crate::store::Ended::Done)
                            .count()
                    })
                    .unwrap_or(0);
                let planned = crate::store::saved_queue::load_saved(f).map_or(0, |q| q.len());
                (done, planned)
            });
            (i, folder, done, planned)
        })
        .collect()
}

/// Lines of a Slurm tool's output for job `job`, or `None` where it is not
/// available (or accounting is off, for sacct).
fn slurm_lines(tool: &str, args: &[&str]) -> Option<Vec<String>> {
    let o = Command::new(tool).args(args).output().ok()?;
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect()
    })
}

fn status(a: JobArgs) -> Result<i32> {
    let (dir, info) = find_job(&a.results, &a.job)?;
    let shards = info["shards"].as_u64().unwrap_or(0) as usize;
    let squeue = slurm_lines("squeue", &["-h", "-j", &a.job, "-o", "%i %T %M %R"]);
    // Accounting is off on many small clusters: sacct then says so, and we skip it.
    let sacct = slurm_lines(
        "sacct",
        &["-n", "-P", "-X", "-j", &a.job, "-o", "JobID,State,ExitCode"],
    );
    let progress = shard_progress(&dir, shards);
    let left = progress
        .iter()
        .filter(|(_, _, done, planned)| folder_incomplete(*done, *planned))
        .count();
    let merge = format!(
        "tricklab merge {}/shard-*/*/* --into {}/merged",
        dir.display(),
        dir.display()
    );
    if a.format == crate::util::TextOrJson::Json {
        let word = |l: &str, i: usize| l.split(['|', ' ']).nth(i).unwrap_or("").to_lowercase();
        crate::util::print_json(serde_json::json!({
            "job": a.job,
            "folder": dir,
            "runs": info["runs"],
            "shards": progress.iter().map(|(i, folder, done, planned)| serde_json::json!({
                "shard": i, "folder": folder, "done": done, "planned": planned,
                "finished": !folder_incomplete(*done, *planned),
            })).collect::<Vec<_>>(),
            "unfinished": left,
            "squeue": squeue.as_ref().map(|ls| ls.iter().map(|l| serde_json::json!({
                "task": word(l, 0), "state": word(l, 1), "line": l,
            })).collect::<Vec<_>>()),
            "sacct": sacct.as_ref().map(|ls| ls.iter().map(|l| serde_json::json!({
                "task": word(l, 0), "state": word(l, 1), "line": l,
            })).collect::<Vec<_>>()),
            "merge": merge,
        }));
        return Ok(0);
    }
    println!(
        "job {} ({} runs in {shards} tasks) in {}",
        a.job,
        info["runs"],
        dir.display()
    );
    match &squeue {
        Some(lines) if lines.iter().all(|l| l.trim().is_empty()) => {
            println!("squeue: no task queued or running")
        }
        Some(lines) => lines.iter().for_each(|l| println!("squeue: {l}")),
        None => println!("squeue: not available here"),
    }
    for l in sacct.iter().flatten() {
        println!("sacct: {l}");
    }
    for (i, folder, done, planned) in &progress {
        match folder {
            Some(f) => println!("shard {i}: {done}/{planned} runs done ({})", f.display()),
            None => println!("shard {i}: not started"),
        }
    }
    println!("{left} of {shards} shards unfinished; when done: `{merge}`");
    Ok(0)
}

fn folder_incomplete(done: usize, planned: usize) -> bool {
    planned == 0 || done < planned
}

fn resubmit(a: JobArgs) -> Result<i32> {
    let (dir, mut info) = find_job(&a.results, &a.job)?;
    let shards = info["shards"].as_u64().unwrap_or(0) as usize;
    let todo: Vec<String> = shard_progress(&dir, shards)
        .into_iter()
        .filter(|s| folder_incomplete(s.2, s.3))
        .map(|s| s.0.to_string())
        .collect();
    if todo.is_empty() {
        println!(
            "every shard of job {} is complete: nothing to re-submit",
            a.job
        );
        return Ok(0);
    }
    let job = sbatch_submit(&dir.join("job.sbatch"), Some(&todo.join(",")))?;
    if let Some(r) = info["resubmits"].as_array_mut() {
        r.push(serde_json::json!(job));
    }
    crate::util::write_atomic(
        &dir.join("job.json"),
        serde_json::to_string_pretty(&info)?.as_bytes(),
    )?;
    println!("re-submitted tasks {} as job {job}", todo.join(","));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_or_resumes_one_shard_per_task() {
        let a = SubmitArgs {
            matrix: "m.toml".into(),
            partition: Some("gpu".into()),
            gpus_per_task: 1,
            nodes: 1,
            gpus_per_node: None,
            cpus_per_task: 4,
            array_parallel: Some(2),
            time: "1:00:00".into(),
            shards: None,
            repeats: None,
            results: "results".into(),
            dry_run: true,
        };
        let s = sbatch_script(
            &a,
            "m",
            Path::new("/r/m/slurm-1"),
            Path::new("/r/m/slurm-1/matrix.toml"),
            Path::new("/bin/tricklab"),
            (4, 1),
        )
        .unwrap();
        for want in [
            "#SBATCH --array=1-4%2",
            "#SBATCH --gpus-per-task=1",
            "#SBATCH --partition=gpu",
            "--shard \"$i/4\"",
            "--resume \"$prev\"",
            "--devices auto --cpu-threads 4",
            "#SBATCH --output=/r/m/slurm-1/logs/%A_%a.out",
        ] {
            assert!(s.contains(want), "{want} not in\n{s}");
        }
        // Nothing from a matrix or an option can end an #SBATCH line and start a command.
        let script = |name: &str, dir: &str, part: Option<&str>| {
            let a = SubmitArgs {
                partition: part.map(Into::into),
                ..a.clone()
            };
            let p = Path::new(dir);
            sbatch_script(
                &a,
                name,
                p,
                &p.join("matrix.toml"),
                Path::new("/bin/t"),
                (2, 1),
            )
        };
        for (name, dir, part) in [
            ("x\ntouch /tmp/pwned", "/r", None),
            ("..", "/r", None),
            ("m", "/r\n#SBATCH --wrap=id", None),
            ("m", "/r", Some("gpu\nid")),
            ("m", "/my results", None),
        ] {
            let e = script(name, dir, part).unwrap_err().to_string();
            assert!(!e.is_empty());
        }
        assert!(script("m", "/r", Some("gpu")).is_ok());
        // A matrix of 2-rank runs: each task is a gang of two srun tasks.
        let gang = sbatch_script(
            &a,
            "m",
            Path::new("/r"),
            Path::new("/r/m.toml"),
            Path::new("/b"),
            (3, 2),
        )
        .unwrap();
        assert!(
            gang.contains("#SBATCH --ntasks=2\n")
                && gang.contains("--devices cpu:2 --cpu-threads 4"),
            "{gang}"
        );
        assert!(!s.contains("--ntasks"));
    }

    /// A multi-node job: as many ranks on each node, the GPUs per node.
    #[test]
    fn nodes_split_a_runs_ranks_evenly() {
        let a = SubmitArgs {
            matrix: "m.toml".into(),
            partition: None,
            gpus_per_task: 1,
            nodes: 1,
            gpus_per_node: None,
            cpus_per_task: 4,
            array_parallel: None,
            time: "1:00:00".into(),
            shards: None,
            repeats: None,
            results: "results".into(),
            dry_run: true,
        };
        // Over two nodes with their GPUs: two ranks on each.
        let wide = SubmitArgs {
            nodes: 2,
            gpus_per_node: Some(2),
            ..a.clone()
        };
        let four = sbatch_script(
            &wide,
            "m",
            Path::new("/r"),
            Path::new("/r/m.toml"),
            Path::new("/b"),
            (1, 4),
        )
        .unwrap();
        for line in [
            "#SBATCH --ntasks=4\n",
            "#SBATCH --nodes=2\n",
            "#SBATCH --ntasks-per-node=2\n",
            "#SBATCH --gpus-per-node=2\n",
        ] {
            assert!(four.contains(line), "{line} in {four}");
        }
        assert!(!four.contains("--gpus-per-task"), "{four}");
        // Three ranks do not split over two nodes; one rank does not spread.
        for w in [3, 1] {
            let e = sbatch_script(
                &wide,
                "m",
                Path::new("/r"),
                Path::new("/r/m.toml"),
                Path::new("/b"),
                (1, w),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("--nodes 2") && e.contains("multiple of 2"),
                "{e}"
            );
        }
    }
}
