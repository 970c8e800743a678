//! The real binary in a real terminal (tmux): open the TUI on a tiny matrix,
//! switch screens, pause and resume, wait for the runs, export, quit, and
//! check that the terminal was restored and the results were written.
//!
//! The session, browsing and quitting scenarios run on the planted trainer
//! (src/train/planted.rs): they are about the terminal, not training. The
//! `--tiny` GPU ladder and the bare picker keep the engine: the first shows
//! a tiny rung really starting on the CPU, the second a real probe's price.

use super::common::{Tmux, planted_runs};
use std::path::{Path, PathBuf};
use tricklab::train::PLANTED_ENV;

fn results(root: &Path) -> PathBuf {
    let base = root.join("res/tiny-test");
    std::fs::read_dir(&base)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

#[test]
fn interactive_session_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.toml");
    let t = Tmux {
        socket: format!("tricklab-e2e-{}", std::process::id()),
    };
    // The TUI driving a session, not training: its runs are planted, 20
    // steps of 25 ms each (half a second, as long as a real tiny run).
    let planted = "step_ms=25;steps_per_epoch=20";
    let shell = format!(
        "cd {} && NO_COLOR=1 {PLANTED_ENV}='{planted}' {} tui {} --results-root res; echo EXITED-$?; sleep 60",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_tricklab"),
        fixture.display()
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        &shell,
    ]);
    t.wait_for("the queue", 60, |s| {
        s.contains("1 Queue") && s.contains("tiny-test")
    });
    t.keys("2");
    t.wait_for("the live screen", 60, |s| {
        s.contains("loss (log)") || s.contains("no run has started")
    });
    t.keys("p");
    t.wait_for("pause", 30, |s| s.contains("[PAUSED]"));
    t.keys("p");
    t.wait_for("resume", 30, |s| !s.contains("[PAUSED]"));
    t.keys("1");
    t.wait_for("all four runs", 120, |s| {
        s.matches(" done ").count() == 4 && !s.contains(" running ") && !s.contains(" queued ")
    });
    t.keys("3");
    t.wait_for("the results table", 30, |s| {
        s.contains("+ label smoothing") && s.contains("acc % ± 95% CI")
    });
    t.keys("4");
    t.wait_for("the ladder", 30, |s| {
        s.contains("ladder: full-run time per rung") && s.contains("baseline")
    });
    t.keys("e");
    t.wait_for("export", 60, |s| s.contains("exported"));
    t.keys("q");
    let s = t.wait_for("exit", 60, |s| s.contains("EXITED-0"));
    assert!(s.contains("results: res/tiny-test/"), "{s}");
    assert_eq!(
        t.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "0",
        "terminal left in the alternate screen"
    );
    let dir = results(tmp.path());
    for f in ["runs.parquet", "report.md", "ladder.png", "curves.svg"] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    assert_eq!(planted_runs(&dir, planted).len(), 4);
}

#[test]
fn browse_a_finished_folder_and_resize() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.toml");
    // Browsing a stored folder: its runs are planted (the defaults).
    let o = super::common::bin()
        .env(PLANTED_ENV, "")
        .args([
            "run",
            fixture.to_str().unwrap(),
            "--headless",
            "--results",
            "res",
            "--repeats",
            "1",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    let dir = results(tmp.path());
    assert_eq!(planted_runs(&dir, "").len(), 2);
    let t = Tmux {
        socket: format!("tricklab-browse-{}", std::process::id()),
    };
    let shell = format!(
        "{PLANTED_ENV}= {} tui --open {}; echo EXITED-$?; sleep 60",
        env!("CARGO_BIN_EXE_tricklab"),
        dir.display()
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "80",
        "-y",
        "24",
        &shell,
    ]);
    t.wait_for("the results", 60, |s| {
        s.contains("[browse]") && s.contains("+ label smoothing")
    });
    // Live draws the folder's stored curves, not "no run has started yet".
    t.keys("2");
    t.wait_for("the stored curves", 30, |s| {
        s.contains("loss (log)") && s.contains("eval accuracy") && s.contains(" on cpu")
    });
    // At 80×24 the Queue footer keeps its way to help and out.
    t.keys("1");
    t.wait_for("the Queue footer", 30, |s| {
        s.contains("queue (") && s.contains("? help") && s.contains("q quit")
    });
    t.cmd(&["resize-window", "-t", "t", "-x", "160", "-y", "48"]);
    t.wait_for("a redraw at the new size", 30, |s| {
        s.lines().next().is_some_and(|l| l.trim_end().len() > 90)
    });
    t.keys("5");
    t.wait_for("the trick catalog", 30, |s| {
        s.contains("gpu_data") && s.contains("source:")
    });
    t.keys("q");
    t.wait_for("exit", 30, |s| s.contains("EXITED-0"));
}

#[test]
fn quitting_during_a_run_says_so_until_the_worker_stops() {
    let tmp = tempfile::tempdir().unwrap();
    // A planted run of 12 epochs of 7 steps of 100 ms: long enough (8 s)
    // that it is surely in progress while q and s are pressed and read,
    // short enough that the test waits on little else.
    let planted = "step_ms=100;steps_per_epoch=7";
    std::fs::write(
        tmp.path().join("long.toml"),
        "name = 'long'\nrecipe = 'tiny-page-resnet9'\nkind = 'ladder'\ndata = 'synthetic:400'\nrepeats = 3\nset = { epochs = 12, batch_size = 20 }\n[[rung]]\nname = 'baseline'\n",
    )
    .unwrap();
    let t = Tmux {
        socket: format!("tricklab-quit-{}", std::process::id()),
    };
    let shell = format!(
        "cd {} && NO_COLOR=1 {PLANTED_ENV}='{planted}' {} tui long.toml --results-root res --devices cpu; echo EXITED-$?; sleep 60",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_tricklab"),
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        &shell,
    ]);
    t.wait_for("a run in progress", 90, |s| s.contains(" running "));
    t.keys("q");
    t.wait_for("the question", 30, |s| s.contains("cancel it and quit"));
    // "s": stop after the run in progress; the run goes on for seconds, saying so.
    t.keys("s");
    t.wait_for("the quitting message", 30, |s| {
        s.contains("quitting: stopping after the run in progress finishes")
    });
    let s = t.wait_for("exit after that run", 300, |s| s.contains("EXITED-0"));
    assert!(s.contains("results: res/long/"), "{s}");
    let dir = std::fs::read_dir(tmp.path().join("res/long"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let rows = planted_runs(&dir, planted);
    assert_eq!(
        rows.len(),
        1,
        "the run in progress finished and no other started"
    );
    assert_eq!(rows[0].status, tricklab::store::Ended::Done);
}

#[test]
fn a_gpu_ladder_opens_tiny_in_the_tui() {
    let tmp = tempfile::tempdir().unwrap();
    let matrix = Path::new(env!("CARGO_MANIFEST_DIR")).join("ablations/speedrun-ladder.toml");
    let t = Tmux {
        socket: format!("tricklab-tiny-{}", std::process::id()),
    };
    let shell = format!(
        "cd {} && NO_COLOR=1 {} tui {} --tiny --results res --devices cpu; echo EXITED-$?; sleep 60",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_tricklab"),
        matrix.display()
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "40",
        &shell,
    ]);
    t.wait_for("the tiny ladder queued", 60, |s| {
        s.contains("speedrun-ladder-tiny") && s.contains("R12 retuned")
    });
    t.wait_for("its first rung running", 90, |s| s.contains(" running "));
    // Ctrl-C cancels the run and quits without a question.
    t.keys("C-c");
    t.wait_for("exit", 60, |s| s.contains("EXITED-"));
    assert!(tmp.path().join("res/speedrun-ladder-tiny").is_dir());
    assert!(!tmp.path().join("res/speedrun-ladder").exists());
}

/// A bare `tricklab` in a checkout opens on the picker with the demo ladder
/// selected, priced by a probe, and queues nothing until asked; Esc closes
/// it, q quits, and no results folder is made. (`make run` names the demo ladder and starts it.)
#[test]
fn a_bare_tricklab_opens_the_picker_on_the_demo_ladder_and_queues_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir(tmp.path().join("ablations")).unwrap();
    for f in [
        "demo-ladder.toml",
        "speedrun-ladder.toml",
        "page-ladder.toml",
    ] {
        std::fs::copy(
            repo.join("ablations").join(f),
            tmp.path().join("ablations").join(f),
        )
        .unwrap();
    }
    let t = Tmux {
        socket: format!("tricklab-bare-{}", std::process::id()),
    };
    let shell = format!(
        "cd {} && NO_COLOR=1 {}; echo EXITED-$?; sleep 60",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_tricklab"),
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "80",
        "-y",
        "24",
        &shell,
    ]);
    let s = t.wait_for("the picker", 60, |s| s.contains("add matrix: Enter queues"));
    assert!(
        s.contains("ablations/demo-ladder.toml")
            && s.contains("runs of")
            && s.contains(
                "nothing queued yet: Enter queues the demo ladder, Esc closes, a reopens"
            ),
        "{s}"
    );
    // No earlier runs price it here: the picker probes a step while nothing
    // trains, and says the time.
    let s = t.wait_for("the probed time", 120, |s| s.contains("(probed:"));
    // Read as one text (the dialog wraps it at any word, and a busy machine
    // adds a clause after the device), not through one layout of it.
    let text: Vec<&str> = s
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '│' || c == ' '))
        .collect();
    assert!(
        text.join(" ").contains("s a step at batch 128 on cpu"),
        "{s}"
    );
    // Esc: the queue is empty; nothing started.
    t.keys("Escape");
    let s = t.wait_for("the queue", 30, |s| !s.contains("add matrix"));
    assert!(
        s.contains("queue (empty") && !s.contains(" running "),
        "{s}"
    );
    t.keys("q");
    t.wait_for("exit", 60, |s| s.contains("EXITED-0"));
    assert!(!tmp.path().join("results").join("demo").exists());
}

/// A script run in the TUI: its steps reach the Live tab with the length
/// the script planned, a pause stops the script's process (state T) and
/// keeps its time out of the clock, and the run finishes after the resume.
#[test]
fn a_script_run_is_live_in_the_tui_and_a_pause_stops_its_process() {
    let tmp = tempfile::tempdir().unwrap();
    let py = std::env::var("TRICKLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    std::fs::write(
        tmp.path().join("slow.py"),
        "import os, time, tricklab\nopen('slow.pid', 'w').write(str(os.getpid()))\ntricklab.start(steps=40, epochs=1)\nfor s in range(1, 41):\n    tricklab.log(step=s, loss=2.0 / s, lr=0.1, bn_scale=1.0)\n    time.sleep(0.1)\ntricklab.epoch(epoch=1, acc=0.5, seconds=4.0)\ntricklab.final(acc=0.5, seconds=4.0)\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("slow.toml"),
        format!("name = \"slow\"\nkind = \"list\"\ntarget = 0.4\n[script]\ncommand = [\"{py}\", \"slow.py\"]\n[[variant]]\nname = \"only\"\n"),
    )
    .unwrap();
    let t = Tmux {
        socket: format!("tricklab-e2e-script-{}", std::process::id()),
    };
    let shell = format!(
        "cd {} && NO_COLOR=1 {} tui slow.toml --results-root res; echo EXITED-$?; sleep 60",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_tricklab"),
    );
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "35",
        &shell,
    ]);
    t.keys("2");
    t.wait_for("the script's steps", 60, |s| {
        s.contains("/40") && s.contains("loss (log)")
    });
    t.keys("p");
    t.wait_for("pause", 30, |s| s.contains("[PAUSED]"));
    let pid = std::fs::read_to_string(tmp.path().join("slow.pid")).unwrap();
    let state = || {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(String::from))
    };
    let start = std::time::Instant::now();
    while state().as_deref() != Some("T") && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        state().as_deref(),
        Some("T"),
        "the paused script still runs"
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    t.keys("p");
    t.wait_for("resume", 30, |s| !s.contains("[PAUSED]"));
    t.keys("1");
    t.wait_for("the run done", 60, |s| {
        s.contains(" done ") && !s.contains(" running ")
    });
    t.keys("q");
    t.wait_for("exit", 60, |s| s.contains("EXITED-0"));
    let dir = std::fs::read_dir(tmp.path().join("res/slow"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 1);
    // The paused seconds are kept apart, out of the wall clock.
    assert!(rows[0].paused_s.unwrap() >= 1.5, "{rows:?}");
    assert_eq!(rows[0].hlb_s, Some(4.0));
}
