//! Results as other tools read them: pyarrow filters the Parquet files,
//! TensorBoard's own reader opens the export, every `--format json` parses,
//! and the exit codes tell a regression from bad input.
//!
//! The Python side runs on `TRICKLAB_PYTHON` (else the project's `.venv`):
//! `make test` installs pyarrow and tensorboard there and sets
//! `TRICKLAB_REQUIRE_PY_TOOLS=1`, so that a missing one fails instead of
//! skipping.

use super::common::{err, headless, out, planted_runs, repo, run_planted};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `tricklab ARGS` in `cwd`, its runs on the planted trainer's defaults
/// (src/train/planted.rs): what is read back here is the store's and the
/// exports' form, not what training computes.
fn run(args: &[&str], cwd: &Path) -> Output {
    run_planted(args, cwd, "")
}

/// The python with pyarrow and tensorboard, or `None` (skipped, said) when
/// the tools are not required.
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("TRICKLAB_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import pyarrow, tensorboard"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    assert!(
        std::env::var_os("TRICKLAB_REQUIRE_PY_TOOLS").is_none(),
        "{} lacks pyarrow or tensorboard: `make test` installs them",
        p.display()
    );
    eprintln!(
        "skipped the Python readers: {} lacks pyarrow or tensorboard",
        p.display()
    );
    None
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&out(o)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out(o)))
}

#[test]
fn results_read_in_pyarrow_tensorboard_and_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = repo().join("tests/fixtures/tiny.toml");
    let o = run(&headless(&fixture, "res", &["--repeats", "2"]), tmp.path());
    assert!(o.status.success(), "{}", err(&o));
    let root = tmp.path().join("res");
    let dir = crate::cli::newest(&root.join("tiny-test"));
    // Two rungs × 2 seeds, each run with its planted seconds and accuracy.
    let rows = planted_runs(&dir, "");
    assert_eq!(rows.len(), 4);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["schema_version"], 2);

    // The build a result came from, and shell completions.
    let v = run(&["--version"], tmp.path());
    assert!(out(&v).contains(env!("CARGO_PKG_VERSION")) && out(&v).contains("commit "));
    assert!(out(&v).contains("libtorch 2.11"), "{}", out(&v));
    let c = run(&["completions", "bash"], tmp.path());
    assert!(c.status.success() && out(&c).contains("_tricklab()"));

    // A second session of the same matrix (a copy under a later timestamp):
    // compared, it is said to be a copy; exported together with the first,
    // the two stay two sets of runs.
    let second = dir.with_file_name("29991231-235959");
    copy_dir(&dir, &second);
    let session = dir.file_name().unwrap().to_str().unwrap().to_string();

    // JSON from every command that reports, with lowercase words.
    let same = run(
        &[
            "compare",
            dir.to_str().unwrap(),
            second.to_str().unwrap(),
            "--format",
            "json",
        ],
        tmp.path(),
    );
    let doc = json(&same);
    assert_eq!(same.status.code(), Some(0));
    assert!(doc["warnings"].to_string().contains("a copy"), "{doc}");
    assert!(doc["noisy_runs"]["base"].is_u64(), "{doc}");
    // A folder against itself: refused, as input that cannot be compared.
    let itself = run(
        &[
            "compare",
            dir.to_str().unwrap(),
            &format!("{}/", dir.display()),
        ],
        tmp.path(),
    );
    assert_eq!(itself.status.code(), Some(2), "{}", err(&itself));
    assert!(err(&itself).contains("both the base and the candidate"));
    assert_eq!(
        (doc["exit_code"].as_i64(), doc["schema_version"].as_i64()),
        (Some(0), Some(2))
    );
    let verdicts: Vec<&str> = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts.len(), 2);
    assert!(
        verdicts
            .iter()
            .all(|v| v.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    );
    // A missing folder: input error (2), still one JSON document.
    let missing = run(
        &["compare", dir.to_str().unwrap(), "nope", "--format", "json"],
        tmp.path(),
    );
    assert_eq!(missing.status.code(), Some(2));
    assert!(json(&missing)["message"].as_str().unwrap().contains("nope"));
    let results = run(&["results", "res", "--format", "json"], tmp.path());
    assert_eq!(json(&results)["sessions"][1]["matrix"], "tiny-test");
    let show = run(
        &[
            "matrix",
            "show",
            fixture.to_str().unwrap(),
            "--format",
            "json",
        ],
        tmp.path(),
    );
    let m = json(&show);
    assert_eq!(m["matrices"][0]["kind"], "ladder");
    assert_eq!(
        m["matrices"][0]["variants"][1]["resolved"]["label_smoothing"].as_f64(),
        Some(0.2)
    );
    // The augmentation as the ordered list the executors walk.
    assert_eq!(
        m["matrices"][0]["variants"][1]["resolved"]["augment"],
        serde_json::json!(["crop(reflect pad 4)", "flip(p 0.5)", "cutout(8×8)"])
    );
    let report = run(
        &["report", dir.to_str().unwrap(), "--format", "json"],
        tmp.path(),
    );
    assert_eq!(json(&report)["schema_version"], 2);

    // The configuration is in the table, typed, with the session, the
    // noise flag and the paused seconds.
    let csv = tmp.path().join("csv");
    let o = run(
        &[
            "export",
            dir.to_str().unwrap(),
            second.to_str().unwrap(),
            "--to",
            "csv",
            "--out",
            csv.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let runs_csv = std::fs::read_to_string(csv.join("runs.csv")).unwrap();
    let header: Vec<&str> = runs_csv.lines().next().unwrap().split(',').collect();
    for c in [
        "run",
        "session",
        "noisy",
        "paused_s",
        "lr",
        "batch_size",
        "label_smoothing",
        "precision",
        "acc_tta",
    ] {
        assert!(header.contains(&c), "{header:?}");
    }
    assert_eq!(runs_csv.lines().count(), 1 + 8);
    let first_run = runs_csv.lines().nth(1).unwrap();
    assert!(
        first_run.starts_with(&format!("tiny-test/{session}/")),
        "{first_run}"
    );
    for file in ["steps.csv", "evals.csv"] {
        let text = std::fs::read_to_string(csv.join(file)).unwrap();
        assert!(text.starts_with("run,session,"), "{file}: {text:.80}");
        let mut keys: Vec<(&str, &str)> = text
            .lines()
            .skip(1)
            .map(|l| {
                let mut f = l.splitn(4, ',');
                let (run, _session, x) = (f.next().unwrap(), f.next(), f.next().unwrap());
                (run, x)
            })
            .collect();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n, "{file}: duplicate (run, x) rows");
        assert!(text.contains(",29991231-235959,"), "{file}");
    }

    let tb = tmp.path().join("tb");
    let o = run(
        &[
            "export",
            dir.to_str().unwrap(),
            second.to_str().unwrap(),
            "--to",
            "tensorboard",
            "--out",
            tb.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", err(&o));

    let Some(py) = python() else { return };
    let check = Command::new(&py)
        .arg(repo().join("scripts/check_parquet.py"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", err(&check));
    let checked: serde_json::Value = serde_json::from_str(&out(&check)).unwrap();
    assert_eq!(
        (checked["runs"].as_i64(), checked["step_files"].as_i64()),
        (Some(4), Some(4))
    );

    // TensorBoard's own reader: every run, its steps and its summary (OUT's
    // own file holds only the HParams experiment).
    let read = r#"
import json, sys
from pathlib import Path
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {}
for f in sorted(Path(sys.argv[1]).rglob("events.out.tfevents.*")):
    if f.parent == Path(sys.argv[1]): continue
    acc = EventAccumulator(str(f.parent)); acc.Reload()
    tags = acc.Tags()["scalars"]
    out[str(f.parent.relative_to(sys.argv[1]))] = {
        t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags}
print(json.dumps(out))
"#;
    let o = Command::new(&py)
        .args(["-c", read])
        .arg(&tb)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let runs: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let runs = runs.as_object().unwrap();
    assert_eq!(runs.len(), 8, "{runs:?}");
    // Each session's summaries are its runs' planted accuracies (as f32).
    let mut read: Vec<f64> = runs
        .values()
        .map(|s| s["summary/acc_tta"][0][1].as_f64().unwrap())
        .collect();
    let mut stored: Vec<f64> = rows
        .iter()
        .chain(&rows)
        .map(|r| f64::from(r.acc_tta.unwrap() as f32))
        .collect();
    read.sort_by(f64::total_cmp);
    stored.sort_by(f64::total_cmp);
    assert!(
        read.iter().zip(&stored).all(|(r, s)| (r - s).abs() < 1e-12),
        "{read:?} read, {stored:?} stored"
    );
    for (name, scalars) in runs {
        assert!(
            name.starts_with(&format!("tiny-test/{session}/"))
                || name.starts_with("tiny-test/29991231-235959/"),
            "{name}"
        );
        let loss = scalars["train/loss"].as_array().unwrap();
        assert!(!loss.is_empty(), "{name}");
        assert!(loss.iter().all(|p| p[1].as_f64().unwrap().is_finite()));
        let acc = scalars["summary/acc_tta"].as_array().unwrap();
        assert_eq!(acc.len(), 1, "{name}");
        assert!(
            scalars.get("eval/test_acc").is_some(),
            "{name}: {scalars:?}"
        );
    }
    check_hparams(&py, &tb);
}

/// The TensorBoard export as the HParams tab reads it: the plugin's own
/// handlers (those behind its /experiment and /session_groups routes) over
/// TensorBoard's data provider.
fn hparams_tab(py: &Path, logdir: &Path) -> serde_json::Value {
    let read = r#"
import json, sys
from google.protobuf import json_format
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, get_experiment, hparams_plugin, list_session_groups
m = plugin_event_multiplexer.EventMultiplexer()
m.AddRunsFromDirectory(sys.argv[1]); m.Reload()
provider = data_provider.MultiplexerDataProvider(m, sys.argv[1])
plugin = hparams_plugin.HParamsPlugin(base_plugin.TBContext(
    logdir=sys.argv[1], multiplexer=m, data_provider=provider))
ctx = context.RequestContext()
exp = get_experiment.Handler(ctx, plugin._context, "", api_pb2.GetExperimentRequest()).run()
req = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=[0, 1, 2, 3])
groups = list_session_groups.Handler(ctx, plugin._context, "", req).run()
print(json.dumps({"experiment": json_format.MessageToDict(exp),
                  "groups": json_format.MessageToDict(groups)}))
"#;
    let o = Command::new(py)
        .args(["-c", read])
        .arg(logdir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    serde_json::from_str(&out(&o)).unwrap()
}

/// Hyperparameters reach TensorBoard's HParams tab typed, one row per run
/// of each session, with the summary metrics as its columns.
fn check_hparams(py: &Path, logdir: &Path) {
    let tab = hparams_tab(py, logdir);
    let infos = tab["experiment"]["hparamInfos"].as_array().unwrap();
    let ty = |name: &str| {
        infos
            .iter()
            .find(|h| h["name"] == name)
            .unwrap_or_else(|| panic!("no hparam {name}: {infos:?}"))["type"]
            .clone()
    };
    assert_eq!(ty("lr"), "DATA_TYPE_FLOAT64");
    assert_eq!(ty("session"), "DATA_TYPE_STRING");
    assert_eq!(ty("noisy"), "DATA_TYPE_BOOL");
    let metrics = tab["experiment"]["metricInfos"].to_string();
    assert!(metrics.contains("summary/acc_tta"), "{metrics}");
    let groups = tab["groups"]["sessionGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 8, "{groups:?}");
    let sessions: std::collections::BTreeSet<&str> = groups
        .iter()
        .map(|g| g["hparams"]["session"].as_str().unwrap())
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    for g in groups {
        assert!(g["hparams"]["lr"].as_f64().unwrap() > 0.0, "{g}");
        assert_eq!(g["sessions"][0]["status"], "STATUS_SUCCESS", "{g}");
        let acc = g["metricValues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"]["tag"] == "summary/acc_tta")
            .unwrap_or_else(|| panic!("no summary/acc_tta: {g}"));
        assert!(acc["value"].as_f64().unwrap() > 0.0);
    }
}

/// A results folder copied whole (its steps and epochs too).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
