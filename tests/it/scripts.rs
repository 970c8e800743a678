//! A user's own training script under the workbench (docs/scripts.md):
//! tricks switched by flags, environment variables and source patches come
//! back as effects; live events reach the store; every failure is named;
//! kill -9 leaves no script running and `--resume` runs what is left; a
//! run spreads over two processes under torchrun.
//!
//! The scripts are small Python files written here, standard library only
//! (the `tricklab` module that tricklab puts on their PYTHONPATH), so that
//! their seconds and accuracies are planted and checked exactly; the
//! torchrun one uses torch from the project's `.venv`.

use super::common::{bin, err, headless, out, repo};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// The Python `make test` installs (TRICKLAB_PYTHON), else the system's.
fn python() -> String {
    std::env::var("TRICKLAB_PYTHON").unwrap_or_else(|_| {
        let venv = repo().join(".venv/bin/python3");
        if venv.is_file() {
            venv.display().to_string()
        } else {
            "python3".into()
        }
    })
}

/// A script whose seconds and accuracy are planted by its tricks:
/// `--fast` (a flag) saves 2 s, `PLANTED_ACC=1` (the environment) adds 2
/// points, `PATCHED = 1` (a patch) saves 1 s and adds 1 point; a seed
/// moves the time by 0.01 s × (seed mod 3) and the accuracy by 0.1 point ×
/// (seed mod 2). It logs `steps` steps and two epochs.
const PLANTED: &str = r#"import os, sys, time
import tricklab

PATCHED = 0
args = sys.argv[1:]
seed = int(args[args.index("--seed") + 1])
fast = "--fast" in args
env = os.environ.get("PLANTED_ACC") == "1"
secs = 10.0 - 2.0 * fast - 1.0 * PATCHED + 0.01 * (seed % 3)
acc = 0.80 + 0.02 * env + 0.01 * PATCHED + 0.001 * (seed % 2)
steps = int(os.environ.get("PLANTED_STEPS", "20"))
for step in range(1, steps + 1):
    tricklab.log(step=step, loss=2.0 / step, lr=0.1, bn_scale=1.0, images=64 * step)
    time.sleep(float(os.environ.get("PLANTED_STEP_S", "0")))
tricklab.epoch(epoch=1, acc=acc - 0.05, seconds=secs / 2)
tricklab.epoch(epoch=2, acc=acc, seconds=secs)
tricklab.final(acc=acc, seconds=secs)
"#;

/// The `[script]` and `[tricks]` tables over `planted.py` in `dir`.
fn tables(extra_env: &str) -> String {
    format!(
        r#"
[script]
command = ["{py}", "planted.py", "--seed", "{{seed}}"]
env = {{ PLANTED_STEPS = "20"{extra_env} }}
timeout = "2m"

[tricks.fast]
args = ["--fast"]

[tricks.env_acc]
env = {{ PLANTED_ACC = "1" }}

[tricks.patched]
patch = [{{ file = "planted.py", find = "PATCHED = 0", replace = "PATCHED = 1" }}]
"#,
        py = python()
    )
}

/// A folder holding `planted.py` and the matrix `head` over it.
fn setup(dir: &Path, name: &str, head: &str, extra_env: &str) -> PathBuf {
    std::fs::write(dir.join("planted.py"), PLANTED).unwrap();
    let m = dir.join(format!("{name}.toml"));
    std::fs::write(
        &m,
        format!("name = \"{name}\"\n{head}\n{}", tables(extra_env)),
    )
    .unwrap();
    m
}

fn session(root: &Path, matrix: &str) -> PathBuf {
    let d = root.join(matrix);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    found.sort();
    found.pop().expect("a session folder")
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin().args(args).current_dir(dir).output().unwrap()
}

/// The effects table's estimate of `term` on `response` (`time`, `acc`).
fn effect(csv: &str, response: &str, term: &str) -> f64 {
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    for line in csv.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
        if cells[col("response")].starts_with(response)
            && cells[col("term")] == term
            && cells[col("kind")] == "main"
        {
            return cells[col("estimate")].parse().unwrap();
        }
    }
    panic!("no {response} effect of {term} in:\n{csv}");
}

#[test]
fn a_factorial_over_flag_environment_and_patch_tricks_gives_their_planted_effects() {
    let tmp = tempfile::tempdir().unwrap();
    let m = setup(
        tmp.path(),
        "planted-factorial",
        "kind = \"factorial\"\nvary = [\"fast\", \"env_acc\", \"patched\"]\nrepeats = 2\ntarget = 0.5",
        "",
    );
    let o = run_in(tmp.path(), &headless(&m, "res", &["--devices", "cpu"]));
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let dir = session(&tmp.path().join("res"), "planted-factorial");
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 16);
    for r in &rows {
        assert_eq!(r.status, tricklab::store::Ended::Done, "{r:?}");
        assert_eq!(r.clock.as_deref(), Some("hlb"));
        // Only the clock the script keeps is filled; the others were not measured.
        assert_eq!(r.dawn_s, None);
        assert!(r.wall_s.is_some());
        // Its steps arrived as they were logged, and were stored.
        let steps = tricklab::store::run_file(&dir, "steps", r).expect("a steps file");
        let (s, e) = tricklab::store::read_curves(&dir, r).unwrap();
        assert_eq!(s.len(), 20, "{}", steps.display());
        assert_eq!(e.len(), 2);
    }
    // The user's file was patched in copies only.
    assert!(
        std::fs::read_to_string(tmp.path().join("planted.py"))
            .unwrap()
            .contains("PATCHED = 0\n")
    );
    let o = run_in(
        tmp.path(),
        &[
            "report",
            dir.to_str().unwrap(),
            "--format",
            "csv",
            "--table",
            "effects",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let csv = out(&o);
    let near = |got: f64, want: f64| (got - want).abs() < 1e-6;
    assert!(near(effect(&csv, "time", "fast"), -2.0), "{csv}");
    assert!(near(effect(&csv, "time", "patched"), -1.0), "{csv}");
    assert!(near(effect(&csv, "time", "env_acc"), 0.0), "{csv}");
    assert!(near(effect(&csv, "acc", "env_acc"), 0.02), "{csv}");
    assert!(near(effect(&csv, "acc", "patched"), 0.01), "{csv}");
    assert!(near(effect(&csv, "acc", "fast"), 0.0), "{csv}");
    // Its charts: the effects, and no "ladder" (a factorial has no rungs).
    let o = run_in(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let charts: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png"))
        .collect();
    assert!(
        charts.iter().any(|c| c.starts_with("effects_")),
        "{charts:?}"
    );
    assert!(
        !charts.iter().any(|c| c.starts_with("ladder")),
        "{charts:?}"
    );
}

#[test]
fn a_ladder_of_script_tricks_reports_each_rungs_saving_and_matrix_show_prints_the_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let m = setup(
        tmp.path(),
        "planted-ladder",
        "kind = \"ladder\"\nrepeats = 2\ntarget = 0.5\n[[rung]]\nname = \"base\"\n[[rung]]\nname = \"+ fast\"\non = [\"fast\"]\n[[rung]]\nname = \"+ patched\"\non = [\"patched\"]",
        "",
    );
    let o = run_in(tmp.path(), &["matrix", "show", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let shown = out(&o);
    assert!(shown.contains("planted.py --seed {seed} --fast"), "{shown}");
    assert!(
        shown.contains("patch (patched): planted.py: \"PATCHED = 0\" -> \"PATCHED = 1\""),
        "{shown}"
    );
    assert!(shown.contains("env: PLANTED_STEPS=20"), "{shown}");
    let o = run_in(tmp.path(), &headless(&m, "res", &["--devices", "cpu"]));
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let dir = session(&tmp.path().join("res"), "planted-ladder");
    let o = run_in(
        tmp.path(),
        &["report", dir.to_str().unwrap(), "--format", "csv"],
    );
    let csv = out(&o);
    let mean = |variant: &str| -> f64 {
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = header.iter().position(|h| *h == "hlb_s_mean").unwrap();
        let line = csv
            .lines()
            .find(|l| l.contains(&format!("\"{variant}\"")))
            .unwrap_or_else(|| panic!("{variant} in {csv}"));
        line.split(',').nth(col).unwrap().parse().unwrap()
    };
    // Seeds 0 and 1 add 0.00 and 0.01 s: the means are planted + 0.005.
    assert!((mean("base") - 10.005).abs() < 1e-9, "{csv}");
    assert!((mean("+ fast") - 8.005).abs() < 1e-9, "{csv}");
    assert!((mean("+ patched") - 7.005).abs() < 1e-9, "{csv}");
    // The manifest's record holds each variant's command and the hash of
    // the script it ran.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let v2 = &manifest["record"]["variants"][2]["runs"];
    assert_eq!(v2["with"], "script");
    assert_eq!(v2["patches"][0]["replace"], "PATCHED = 1");
    assert_eq!(
        v2["provenance"]["files"]["planted.py"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    // The report's setup names the script and where it ran.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| script | `"), "{md}");
    assert!(md.contains("| data | the script's own |"), "{md}");

    // The script changes (a comment is enough), the ladder runs again:
    // compare says the sources differ, with the file's old and new hash.
    let text = std::fs::read_to_string(tmp.path().join("planted.py")).unwrap();
    std::fs::write(tmp.path().join("planted.py"), format!("# changed\n{text}")).unwrap();
    // Another second, another folder.
    std::thread::sleep(Duration::from_millis(1100));
    let o = run_in(tmp.path(), &headless(&m, "res", &["--devices", "cpu"]));
    assert!(o.status.success(), "{}", err(&o));
    let cand = session(&tmp.path().join("res"), "planted-ladder");
    assert_ne!(cand, dir);
    let o = run_in(
        tmp.path(),
        &["compare", dir.to_str().unwrap(), cand.to_str().unwrap()],
    );
    let said = format!("{}{}", out(&o), err(&o));
    assert!(
        said.contains("base and candidate ran different script sources (planted.py: sha256 "),
        "{said}"
    );
    // A night against the first folder: trained, judged, kept in the
    // history, saying the sources changed; the script runs export as the
    // engine's do.
    let o = run_in(
        tmp.path(),
        &[
            "nightly",
            m.to_str().unwrap(),
            "--baseline",
            dir.to_str().unwrap(),
            "--history",
            "hist",
            "--results",
            "res",
            "--devices",
            "cpu",
        ],
    );
    let said = format!("{}{}", out(&o), err(&o));
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("different script sources"), "{said}");
    let history = std::fs::read_to_string(tmp.path().join("hist/history.csv")).unwrap();
    assert_eq!(history.lines().count(), 1 + 3, "{history}");
    let o = run_in(
        tmp.path(),
        &[
            "export",
            cand.to_str().unwrap(),
            "--to",
            "csv",
            "--out",
            "csv",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let runs = std::fs::read_to_string(tmp.path().join("csv/runs.csv")).unwrap();
    assert_eq!(runs.lines().count(), 1 + 6, "{runs}");
    assert!(runs.contains("fast"), "{runs}");
}

/// A list matrix whose every variant fails its own way, and one that works.
#[test]
fn every_way_a_script_fails_is_named_and_the_session_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let scripts = [
        (
            "exits.py",
            "import sys\nprint('loading config', file=sys.stderr)\nprint('ValueError: bad learning rate', file=sys.stderr)\nsys.exit(3)\n",
        ),
        (
            "silent.py",
            "import tricklab\ntricklab.epoch(epoch=1, acc=0.5)\n",
        ),
        (
            "garbled.py",
            "import os\nf = open(os.environ['TRICKLAB_EVENTS'], 'a')\nf.write('not json\\n')\nf.write('{\"final\": {\"acc\": 0.7, \"seconds\": 1.0}}\\n')\n",
        ),
        ("hangs.py", "import time\ntime.sleep(60)\n"),
        (
            "diverges.py",
            "import tricklab\ntricklab.log(step=1, loss=1.0, lr=0.1)\ntricklab.log(step=2, loss=float('nan'), lr=0.1)\nimport time\ntime.sleep(30)\n",
        ),
    ];
    for (f, text) in scripts {
        std::fs::write(d.join(f), text).unwrap();
    }
    let m = d.join("fails.toml");
    std::fs::write(
        &m,
        format!(
            r#"name = "fails"
kind = "list"
[script]
command = ["{py}", "{{file}}"]
timeout = "3s"
params = {{ file = "exits.py" }}
[[variant]]
name = "exits"
[[variant]]
name = "silent"
set = {{ file = "silent.py" }}
[[variant]]
name = "garbled"
set = {{ file = "garbled.py" }}
[[variant]]
name = "hangs"
set = {{ file = "hangs.py" }}
[[variant]]
name = "diverges"
set = {{ file = "diverges.py" }}
"#,
            py = python()
        ),
    )
    .unwrap();
    let start = Instant::now();
    let o = run_in(d, &headless(&m, "res", &["--devices", "cpu"]));
    let log = format!("{}\n{}", out(&o), err(&o));
    assert!(start.elapsed() < Duration::from_secs(60), "{log}");
    let dir = session(&d.join("res"), "fails");
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    let reason = |v: &str| -> String {
        let r = rows.iter().find(|r| r.variant == v).unwrap();
        r.reason.clone().unwrap_or_default()
    };
    assert!(
        reason("exits").contains("exited with status 3")
            && reason("exits").contains("ValueError: bad learning rate"),
        "{}",
        reason("exits")
    );
    assert!(
        reason("silent").contains("without a final result"),
        "{}",
        reason("silent")
    );
    assert!(
        reason("hangs").contains("timed out after"),
        "{}",
        reason("hangs")
    );
    assert!(reason("diverges").contains("NaN"), "{}", reason("diverges"));
    let garbled = rows.iter().find(|r| r.variant == "garbled").unwrap();
    assert_eq!(garbled.status, tricklab::store::Ended::Done);
    assert_eq!(garbled.acc, Some(0.7));
    assert!(log.contains("events.jsonl:1: not a JSON object"), "{log}");
    // Each run's output is kept in the folder.
    let kept = dir.join("scripts");
    assert!(kept.is_dir(), "{log}");
    // A command that is not there is refused before the session opens.
    let bad = d.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\nkind = \"list\"\n[script]\ncommand = [\"no-such-program-tl\", \"x\"]\n[tricks.t]\nargs = [\"-\"]\n[[variant]]\nname = \"a\"\n",
    )
    .unwrap();
    let o = run_in(d, &headless(&bad, "res", &["--devices", "cpu"]));
    assert!(!o.status.success());
    assert!(
        err(&o).contains("command `no-such-program-tl` is not found"),
        "{}",
        err(&o)
    );
    assert!(!d.join("res/bad").exists());
}

/// Whether process `pid` is gone (or a zombie nobody reaps).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
}

#[test]
fn kill_9_leaves_no_script_running_and_resume_runs_what_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // Each run writes its pid into its {out} folder, then logs a step every 0.1 s.
    let m = setup(
        d,
        "killed",
        "kind = \"list\"\nrepeats = 3\ntarget = 0.5\n[[variant]]\nname = \"only\"",
        ", PLANTED_STEP_S = \"0.1\"",
    );
    let text = std::fs::read_to_string(d.join("planted.py")).unwrap().replace(
        "import tricklab\n",
        "import tricklab\nopen(os.path.join(os.environ['PLANTED_OUT'], 'pid'), 'w').write(str(os.getpid()))\n",
    );
    std::fs::write(d.join("planted.py"), text).unwrap();
    let toml = std::fs::read_to_string(&m).unwrap().replace(
        "PLANTED_STEPS = \"20\"",
        "PLANTED_STEPS = \"20\", PLANTED_OUT = \"{out}\"",
    );
    std::fs::write(&m, toml).unwrap();
    let mut child = bin()
        .args(headless(&m, "res", &["--devices", "cpu"]))
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Into the second run: the first is stored, the second has its pid.
    let start = Instant::now();
    let pid = loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the second run never started"
        );
        let runs = d.join("res/killed");
        let second = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("scripts"))
            .flat_map(|s| std::fs::read_dir(s).into_iter().flatten().flatten())
            .map(|e| e.path().join("out/pid"))
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|p| p.trim().parse::<i32>().ok())
            .filter(|p| !gone(*p))
            .last();
        let stored = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().join("runs.parquet").is_file());
        if let (Some(p), true) = (second, stored) {
            break p;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    while !gone(pid) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(gone(pid), "the script {pid} outlived kill -9 of tricklab");
    let dir = session(&d.join("res"), "killed");
    let before = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert!(!before.is_empty() && before.len() < 3, "{before:?}");
    let o = run_in(
        d,
        &[
            "run",
            "--resume",
            dir.to_str().unwrap(),
            "--headless",
            "--devices",
            "cpu",
            "--results",
            "res",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    let mut repeats: Vec<u32> = rows.iter().map(|r| r.repeat).collect();
    repeats.sort();
    assert_eq!(repeats, [0, 1, 2], "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.status == tricklab::store::Ended::Done)
    );
}

/// torchrun beside the Python that `make test` installs, if it is there.
fn torchrun_python() -> Option<String> {
    let p = PathBuf::from(python());
    p.parent()?
        .join("torchrun")
        .is_file()
        .then(|| p.display().to_string())
}

#[test]
fn world_size_2_runs_the_script_under_torchrun_on_gloo() {
    let Some(py) = torchrun_python() else {
        eprintln!("no torchrun beside TRICKLAB_PYTHON: the 2-process script run is not tried");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("ddp.py"),
        r#"import os
import torch, torch.distributed as dist
import tricklab
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
tricklab.log(step=1, loss=float(x), lr=0.1)
# Every rank calls it; only rank 0's lines reach the events file.
tricklab.final(acc=float(x) / 10, seconds=float(world))
dist.destroy_process_group()
"#,
    )
    .unwrap();
    let m = d.join("ddp.toml");
    std::fs::write(
        &m,
        format!(
            "name = \"ddp\"\nkind = \"list\"\n[script]\ncommand = [\"{py}\", \"ddp.py\"]\nworld_size = 2\ntimeout = \"2m\"\n[tricks.t]\nenv = {{ X = \"1\" }}\n[[variant]]\nname = \"two\"\n"
        ),
    )
    .unwrap();
    let o = run_in(d, &headless(&m, "res", &["--devices", "cpu:2"]));
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let dir = session(&d.join("res"), "ddp");
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 1);
    // 1 + 2 summed over the two ranks: both took part, rank 0 reported.
    assert_eq!(rows[0].acc, Some(0.3), "{rows:?}");
    assert_eq!(rows[0].hlb_s, Some(2.0));
    let (steps, _) = tricklab::store::read_curves(&dir, &rows[0]).unwrap();
    assert_eq!(steps.len(), 1);
}

/// torchrun starts each rank in a session of its own: the keeper between
/// tricklab and the command is what takes the ranks down with a kill -9.
#[test]
fn kill_9_during_a_torchrun_run_leaves_no_rank_running() {
    let Some(py) = torchrun_python() else {
        eprintln!("no torchrun beside TRICKLAB_PYTHON: the ranks' kill -9 is not tried");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("ranks.py"),
        "import os, sys, time\nopen(os.path.join(sys.argv[1], 'pid-' + os.environ['RANK']), 'w').write(str(os.getpid()))\ntime.sleep(120)\n",
    )
    .unwrap();
    let m = d.join("ranks.toml");
    std::fs::write(
        &m,
        format!(
            "name = \"ranks\"\nkind = \"list\"\n[script]\ncommand = [\"{py}\", \"ranks.py\", \"{{out}}\"]\nworld_size = 2\n[[variant]]\nname = \"sleeps\"\n"
        ),
    )
    .unwrap();
    let mut child = bin()
        .args(headless(&m, "res", &["--devices", "cpu:2"]))
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let pids: Vec<i32> = loop {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the ranks never started"
        );
        let outs: Vec<PathBuf> = std::fs::read_dir(d.join("res/ranks"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("scripts"))
            .flat_map(|s| std::fs::read_dir(s).into_iter().flatten().flatten())
            .map(|e| e.path().join("out"))
            .collect();
        let pids: Vec<i32> = outs
            .iter()
            .flat_map(|o| ["pid-0", "pid-1"].map(|f| o.join(f)))
            .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
            .collect();
        if pids.len() == 2 {
            break pids;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    while !pids.iter().all(|p| gone(*p)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in pids {
        assert!(gone(p), "rank {p} outlived kill -9 of tricklab");
    }
}

/// A stand-in for a published record (CI has no copy of the real ones): a
/// script that has an EMA and a compile mode as written, reads the data set
/// tricklab exports for it, and plants its result: the EMA adds 2 points,
/// eager costs 1 s, and the accuracy's third decimal is the training images
/// over 1000 (the export's `meta.json`).
const RECORD: &str = r#"import json, os, sys
import tricklab

EMA = True
args = sys.argv[1:]
data = args[args.index("--data") + 1]
compiled = args[args.index("--compile") + 1] != "off"
train = json.load(open(os.path.join(data, "meta.json")))["train"]
with open(os.path.join(data, "train_labels.u8"), "rb") as f:
    assert len(f.read()) == train
tricklab.start(steps=4, epochs=1)
acc = 0.80 + 0.02 * EMA + train / 1e6
tricklab.epoch(epoch=1, acc=acc)
tricklab.final(acc=acc, seconds=5.0 + 1.0 * (not compiled))
"#;

#[test]
fn a_published_record_runs_pinned_with_its_tricks_taken_back_in_copies_on_exported_data() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("peers/record");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::write(copy.join("record.py"), RECORD).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(RECORD.as_bytes()));
    let matrix = |dir: &str| {
        format!(
            r#"name = "record-loo"
kind = "leave-one-out"
vary = ["ema", "compile"]
target = 0.5
repeats = 2
[script]
command = ["{py}", "record.py", "--data", "{{data}}", "--seed", "{{seed}}"]
dir = "{dir}"
timeout = "2m"
[script.source]
repo = "owner/record"
commit = "0123456789abcdef0123456789abcdef01234567"
files = {{ "record.py" = "{sha}" }}
[script.data]
name = "embedded"
train_per_class = 30
test_per_class = 10
[tricks.ema]
help = "the record's EMA, taken back"
[tricks.ema.off]
patch = [{{ file = "record.py", find = "EMA = True", replace = "EMA = False" }}]
[tricks.compile]
args = ["--compile", "auto"]
[tricks.compile.off]
args = ["--compile", "off"]
"#,
            py = python()
        )
    };
    let m = tmp.path().join("record-loo.toml");
    // No copy yet: the one command that fetches it, and nothing runs.
    std::fs::write(&m, matrix("peers/elsewhere")).unwrap();
    let o = run_in(tmp.path(), &["matrix", "show", m.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("fetch it: git clone https://github.com/owner/record"),
        "{}",
        err(&o)
    );
    std::fs::write(&m, matrix("peers/record")).unwrap();
    let o = run_in(tmp.path(), &["matrix", "show", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let shown = out(&o);
    assert!(
        shown.contains(
            "{data}: `embedded` exported as raw bytes (30 training, 10 test images a class)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("patch (ema): record.py: \"EMA = True\" -> \"EMA = False\""),
        "{shown}"
    );
    let o = run_in(tmp.path(), &headless(&m, "res", &["--devices", "cpu"]));
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    // Its epoch line, with no throughput it never reported.
    let said = err(&o);
    assert!(
        said.contains("epoch 1 loss") && !said.contains("img/s"),
        "{said}"
    );
    let dir = session(&tmp.path().join("res"), "record-loo");
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    let got = |v: &str| {
        let r = rows
            .iter()
            .find(|r| r.variant == v)
            .unwrap_or_else(|| panic!("{v}: {rows:?}"));
        assert_eq!(r.status, tricklab::store::Ended::Done, "{r:?}");
        (r.acc.unwrap(), r.hlb_s.unwrap())
    };
    let near = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9;
    assert!(near(got("all"), (0.8203, 5.0)), "{:?}", got("all"));
    assert!(near(got("- ema"), (0.8003, 5.0)), "{:?}", got("- ema"));
    assert!(
        near(got("- compile"), (0.8203, 6.0)),
        "{:?}",
        got("- compile")
    );
    // The published copy is read, never written.
    assert_eq!(
        std::fs::read_to_string(copy.join("record.py")).unwrap(),
        RECORD
    );
    assert!(dir.join("scripts/data/embedded-30x10/meta.json").is_file());
    // The report's setup names the set tricklab exported, not "the script's own".
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("| data | embedded: 30 training and 10 test images a class, exported by tricklab as the script's `{data}` |"),
        "{md}"
    );

    // A second ablation of the same tricks whose EMA costs a point instead
    // (as an engine that reproduced it badly would): read side by side, the
    // EMA's Δ accuracy points the other way and the intervals do not meet;
    // eager's +1 s agrees on both.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("record.py"),
        RECORD.replace("0.02 * EMA", "-0.01 * EMA"),
    )
    .unwrap();
    let text = matrix("other").replace("record-loo", "other-loo");
    let cut = text.find("[script.source]").unwrap();
    let end = text.find("[script.data]").unwrap();
    let m2 = tmp.path().join("other-loo.toml");
    std::fs::write(&m2, format!("{}{}", &text[..cut], &text[end..])).unwrap();
    let o = run_in(tmp.path(), &headless(&m2, "res", &["--devices", "cpu"]));
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let page = tmp.path().join("sides");
    let o = run_in(
        tmp.path(),
        &[
            "parity",
            "--tricks",
            "res/other-loo",
            "res/record-loo",
            "--out",
            page.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let md = std::fs::read_to_string(page.with_extension("md")).unwrap();
    let row = |v: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {v} |")))
            .unwrap_or_else(|| panic!("{md}"))
            .to_string()
    };
    assert!(
        row("- ema").contains("+1.00 [+1.00, +1.00]* | −2.00 [−2.00, −2.00]* ≠ | **no**"),
        "{md}"
    );
    assert!(
        row("- compile").contains("+1.00 [+1.00, +1.00]* | +1.00 [+1.00, +1.00]* | yes"),
        "{md}"
    );
    assert!(md.contains("on the hlb clock"), "{md}");
    let csv = std::fs::read_to_string(page.with_extension("csv")).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("\"- ema\",acc,") && l.ends_with(",false,true")),
        "{csv}"
    );
}

#[test]
fn the_compile_trick_runs_eagerly_on_a_cpu_and_says_so() {
    // The adapter's decision for a published compiled record, without its
    // copy: `--list-changes` prints what a run would change on `device`.
    let changes = |device: &str| {
        let o = std::process::Command::new(python())
            .args(["-m", "tricklab.peers", "airbench94-muon", "--list-changes"])
            .args([
                "--device",
                device,
                "--compile",
                "auto",
                "--compile-form",
                "graphs",
            ])
            .env("PYTHONPATH", repo().join("python"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        said
    };
    let said = changes("cpu");
    assert!(said.contains("compile off"), "{said}");
    assert!(
        said.contains("--compile auto on the CPU: eager")
            && said.contains("--compile-form graphs not applied"),
        "{said}"
    );
    // On cuda the same arguments compile, in the form asked for.
    let said = changes("cuda:3");
    assert!(
        said.contains("compile on") && said.contains("--compile-form graphs"),
        "{said}"
    );
}
