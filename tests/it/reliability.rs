//! What people who leave tricklab running overnight, or share a results
//! folder, run into: a second writer, stop signals in every phase, a folder
//! deleted under a session, a saved queue that does not match its folder,
//! options that would silently change a resumed session, a bad baseline.
//!
//! None of it is about what training computes: every scenario here runs on
//! the planted trainer (src/train/planted.rs), whose runs last as long as
//! its `step_ms` and steps make them, without libtorch.

use super::common::{bin, err as stderr, headless, planted_runs, run_planted as output};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tricklab::train::PLANTED_ENV;

/// The planted trainer of the long runs: a step every 50 ms, so that
/// `long_matrix`'s 9999 epochs of 4 steps last over half an hour and a
/// signal always lands inside a run.
const LONG: &str = "step_ms=50";

/// `tricklab ARGS` started in `cwd` on the planted trainer `planted`.
fn spawn(args: &[&str], cwd: &Path, planted: &str, env: &[(&str, &str)]) -> Child {
    let mut c = bin();
    c.env(PLANTED_ENV, planted)
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("starting tricklab")
}

/// A matrix of `runs` repeats of one long run on synthetic data: each run
/// lasts as long as a test needs it to (with `LONG`, over half an hour).
fn long_matrix(dir: &Path, name: &str, runs: usize) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            "name = \"{name}\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = {runs}\nset = {{ epochs = 9999, batch_size = 20, train_per_class = 0, test_per_class = 0 }}\n[[variant]]\nname = \"long\"\n"
        ),
    )
    .unwrap();
    p
}

/// The session folder a run started, once its manifest exists.
fn wait_for_folder(root: &Path, matrix: &str, secs: u64) -> PathBuf {
    let start = Instant::now();
    loop {
        let found = std::fs::read_dir(root.join(matrix))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("manifest.json").is_file());
        if let Some(f) = found {
            return f;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "no results folder appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `child` has printed `what` on stderr, in the first `secs`; returns it all.
fn wait_exit(mut child: Child, secs: u64) -> (i32, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {secs} s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn term(child: &Child) {
    signal(child, libc::SIGTERM);
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Waits for the first step of the run in progress (its steps file is
/// written at the end, so: for training to have started at all).
fn wait_running(dir: &Path) {
    std::thread::sleep(Duration::from_millis(1500));
    assert!(dir.join("manifest.json").is_file());
}

#[test]
fn one_writer_per_folder_and_stop_signals_are_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    let m = long_matrix(tmp.path(), "long", 2);
    let m = m.to_str().unwrap();
    let first = spawn(
        &headless(m, "res", &["--devices", "cpu"]),
        tmp.path(),
        LONG,
        &[("TRICKLAB_STOP_GRACE_S", "2")],
    );
    let dir = wait_for_folder(&tmp.path().join("res"), "long", 60);
    wait_running(&dir);
    // A second writer of the same folder is refused at once, naming the holder.
    let second = output(
        &[
            "run",
            "--headless",
            "--devices",
            "cpu",
            "--resume",
            dir.to_str().unwrap(),
        ],
        tmp.path(),
        LONG,
    );
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    let e = stderr(&second);
    assert!(
        e.contains("is locked by pid")
            && e.contains(&first.id().to_string())
            && e.lines().count() == 1,
        "{e}"
    );
    // One SIGTERM: stop after the run in progress, which the grace period
    // (2 s here) then cancels: exit 143, with the resume command.
    term(&first);
    let (code, err) = wait_exit(first, 60);
    assert_eq!(code, 143, "{err}");
    assert!(
        err.contains("terminated: finishing the current run")
            && err.contains("did not end within 2 s"),
        "{err}"
    );
    // The command it prints continues headless: without --headless,
    // `run --resume` would open the TUI.
    assert!(
        err.contains(&format!(
            "`tricklab run --headless --resume res/long/{}` continues",
            dir.file_name().unwrap().to_string_lossy()
        )),
        "{err}"
    );
    // The killed session's lock is gone: resuming works, and two SIGTERMs
    // cancel at once; Ctrl-C twice does the same and exits 130, as a shell
    // expects of SIGINT.
    for (sig, code_expected) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let (code, err) = resume_and_signal_twice(&dir, tmp.path(), sig);
        assert_eq!(code, code_expected, "{err}");
        assert!(
            err.contains("stop signal again: cancelling the current run")
                && err.contains("`tricklab run --headless --resume"),
            "{err}"
        );
    }
}

/// Resumes `dir` headless, lets it train, then sends `sig` twice; its exit
/// code and stderr.
fn resume_and_signal_twice(dir: &Path, cwd: &Path, sig: i32) -> (i32, String) {
    let child = spawn(
        &[
            "run",
            "--headless",
            "--devices",
            "cpu",
            "--resume",
            dir.to_str().unwrap(),
        ],
        cwd,
        LONG,
        &[],
    );
    std::thread::sleep(Duration::from_millis(2500));
    signal(&child, sig);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, sig);
    wait_exit(child, 30)
}

#[test]
fn a_folder_deleted_under_a_session_stops_it_without_recreating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("gone.toml");
    std::fs::write(
        &m,
        "name = \"gone\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = 4\nset = { epochs = 4, batch_size = 20, train_per_class = 0, test_per_class = 0 }\n[[variant]]\nname = \"short\"\n",
    )
    .unwrap();
    // Each run 16 planted steps of 100 ms: the folder goes inside the first.
    let child = spawn(
        &headless(&m, "res", &["--devices", "cpu"]),
        tmp.path(),
        "step_ms=100",
        &[],
    );
    let dir = wait_for_folder(&tmp.path().join("res"), "gone", 60);
    std::fs::remove_dir_all(&dir).unwrap();
    // The store finds out when the run in progress ends, and the session stops there.
    let (code, err) = wait_exit(child, 120);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("was deleted or replaced while the session ran"),
        "{err}"
    );
    assert!(!dir.exists(), "the deleted folder was recreated");
}

#[test]
fn resume_refuses_options_that_would_change_the_folder_and_a_queue_that_is_not_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("small.toml");
    std::fs::write(
        &m,
        "name = \"small\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"add-one\"\ndata = \"synthetic:100\"\nvary = [\"celu\"]\nset = { epochs = 1, batch_size = 20, train_per_class = 0, test_per_class = 0 }\n",
    )
    .unwrap();
    let o = output(&headless(&m, "res", &["--devices", "cpu"]), tmp.path(), "");
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = wait_for_folder(&tmp.path().join("res"), "small", 5);
    let d = dir.to_str().unwrap();
    // Its two runs, with the numbers the planted trainer gave them.
    let stored = || planted_runs(&dir, "").len();
    assert_eq!(stored(), 2);
    for extra in [
        &["--repeats", "3"][..],
        &["--data", "synthetic:50"],
        &["--tiny"],
    ] {
        let o = output(
            &[&["run", "--headless", "--resume", d][..], extra].concat(),
            tmp.path(),
            "",
        );
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains("continues the folder with the runs and options it was made with"),
            "{e}"
        );
    }
    // A saved queue naming a variant the folder's matrix lacks: refused, not trained.
    let q = dir.join("queue.json");
    let text = std::fs::read_to_string(&q).unwrap();
    std::fs::write(&q, text.replace("+ celu", "+ ghost")).unwrap();
    let o = output(
        &["run", "--headless", "--devices", "cpu", "--resume", d],
        tmp.path(),
        "",
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("variant `+ ghost` is not in the folder's matrix"),
        "{e}"
    );
    // Another matrix's queue.
    std::fs::write(&q, text.replace("\"small\"", "\"other\"")).unwrap();
    let o = output(
        &["run", "--headless", "--devices", "cpu", "--resume", d],
        tmp.path(),
        "",
    );
    assert!(
        stderr(&o).contains("holds runs of matrix `other`"),
        "{}",
        stderr(&o)
    );
    // None of the refused resumes trained or stored a run.
    assert_eq!(stored(), 2);
}

#[test]
fn nightly_checks_its_baseline_and_history_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let m = long_matrix(tmp.path(), "night", 1);
    let start = Instant::now();
    // A baseline that is not a results folder.
    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let o = output(
        &[
            "nightly",
            m.to_str().unwrap(),
            "--baseline",
            "empty",
            "--devices",
            "cpu",
        ],
        tmp.path(),
        LONG,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--baseline"), "{}", stderr(&o));
    // A history that is not a tricklab history.
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("manifest.json"), "{}").unwrap();
    let o = output(
        &[
            "nightly",
            m.to_str().unwrap(),
            "--baseline",
            "base",
            "--devices",
            "cpu",
        ],
        tmp.path(),
        LONG,
    );
    assert!(stderr(&o).contains("no finished run"), "{}", stderr(&o));
    // Neither trained: the long matrix's planted run lasts over half an hour.
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_gpu_matrix_on_a_cpu_is_refused_with_its_estimate_and_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("ablations/page-ladder.toml");
    let page = page.to_str().unwrap();
    // A full-size recipe and no data named: it would train on the embedded subset.
    let o = output(
        &headless(page, "res", &["--devices", "cpu"]),
        tmp.path(),
        "",
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("names no data") && e.contains("--tiny") && e.lines().count() == 1,
        "{e}"
    );
    assert!(!tmp.path().join("res").exists());
    // Data named: a probe puts it at days on this CPU; refused before
    // any run, with the estimate, `--tiny` and `--insist`. The probe is
    // planted (a second an image): the real one took two minutes of a
    // debug build to price a full-size net, and its wording is what is
    // tested here (the engine's probe has tests of its own).
    let o = output(
        &headless(page, "res", &["--devices", "cpu", "--data", "embedded"]),
        tmp.path(),
        "probe_image_s=1",
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("in all on cpu")
            && e.contains("s a training step at batch 512, scaled from ")
            && e.contains(" at batch 16;"),
        "{e}"
    );
    assert!(e.contains("--tiny") && e.contains("--insist"), "{e}");
    assert!(!tmp.path().join("res").exists());
}

/// kill -9 at moments spread over a session (just after a run is stored,
/// inside the next, while files are written), each time resumed: every run
/// ends up stored exactly once, with its steps, and no temporary file is left.
#[test]
fn kill_9_at_any_moment_loses_and_duplicates_no_run() {
    const RUNS: usize = 10;
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("crash.toml");
    std::fs::write(
        &m,
        format!("name = \"crash\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = {RUNS}\nset = {{ epochs = 3, batch_size = 20, train_per_class = 0, test_per_class = 0 }}\n[[variant]]\nname = \"short\"\n"),
    )
    .unwrap();
    let args = |resume: Option<&Path>| -> Vec<String> {
        let mut a: Vec<String> = ["run", "--headless", "--devices", "cpu", "--results", "res"]
            .map(String::from)
            .to_vec();
        match resume {
            Some(d) => a.extend(["--resume".into(), d.display().to_string()]),
            None => a.push(m.display().to_string()),
        }
        a
    };
    let stored =
        |d: &Path| tricklab::store::read_runs(&d.join("runs.parquet")).map_or(0, |r| r.len());
    let mut dir: Option<PathBuf> = None;
    // A run is 3 epochs of 4 planted steps of 100 ms: 1.2 s, longer than
    // any delay below, so that at most one more run is stored by a kill.
    const PLANTED: &str = "step_ms=100";
    // The k-th kill waits for k stored runs, then a fixed delay (ms): a
    // failure reproduces, and every kill lands inside the session.
    for (k, delay_ms) in [0u64, 150, 400, 30, 700, 250].into_iter().enumerate() {
        let a = args(dir.as_deref());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let mut child = spawn(&a, tmp.path(), PLANTED, &[]);
        let d = dir
            .get_or_insert_with(|| wait_for_folder(&tmp.path().join("res"), "crash", 60))
            .clone();
        let start = Instant::now();
        while stored(&d) < k + 1 && start.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        assert!(d.join("manifest.json").is_file());
    }
    let dir = dir.unwrap();
    let before = stored(&dir);
    assert!(before < RUNS, "every run finished before the last kill");
    let a = args(Some(&dir));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, err) = wait_exit(spawn(&a, tmp.path(), PLANTED, &[]), 300);
    assert_eq!(code, 0, "{err}");
    // Every stored run holds its own run's numbers, not a half-written one's.
    let rows = planted_runs(&dir, PLANTED);
    let mut repeats: Vec<u32> = rows.iter().map(|r| r.repeat).collect();
    repeats.sort();
    assert_eq!(repeats, (0..RUNS as u32).collect::<Vec<u32>>(), "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.status == tricklab::store::Ended::Done),
        "{rows:?}"
    );
    for r in &rows {
        assert!(
            tricklab::store::run_file(&dir, "steps", r).is_some(),
            "no steps file for repeat {}",
            r.repeat
        );
    }
    let temps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
}
