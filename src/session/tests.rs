//! Queue, worker and session behaviour on the planted trainer (no tch).

use super::*;
use crate::events::{RunStatus, StepRow};
use crate::train::{Planted, Trainer};
use std::time::Duration;

/// Workers on the planted trainer (src/train/planted.rs) with `options`
/// added: each warms up before its first run as the engine does, and every
/// "+ flip" fails as a diverged run does ("loss became NaN").
fn factory(options: &str) -> Factory {
    let planted = Planted::parse(&format!("warm_up=true; fail=+ flip; {options}")).unwrap();
    Arc::new(move |_d: &str| Ok(Box::new(planted.clone()) as Box<dyn Trainer>))
}

/// A run of three steps (the tiny recipe's three epochs of one), none slept.
const QUICK: &str = "steps_per_epoch=1; step_ms=0";

fn matrix(repeats: usize) -> Matrix {
    crate::matrix::parse(&format!("name='s'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu','flip']\nrepeats={repeats}\n"), "s.toml").unwrap()
}

fn opts(root: &std::path::Path, devices: &[&str]) -> SessionOptions {
    SessionOptions {
        results_root: root.to_path_buf(),
        devices: devices.iter().map(|s| s.to_string()).collect(),
        resume: None,
        keep_alive: false,
        min_free_bytes: 0,
        cpu_threads: None,
    }
}

fn drain(s: &mut Session) -> Vec<Event> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut out = Vec::new();
    rt.block_on(async {
        while let Some(e) = tokio::time::timeout(Duration::from_secs(20), s.recv())
            .await
            .expect("session stalled")
        {
            out.push(e);
        }
    });
    out
}

#[test]
fn failures_and_panics_are_isolated_and_everything_is_stored() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Session::start(
        vec![matrix(2)],
        opts(root.path(), &["a", "b"]),
        factory("steps_per_epoch=1; step_ms=1; panic=+ celu"),
    )
    .unwrap();
    let ev = drain(&mut s);
    let dir = s.results_dirs()[0].clone();
    s.join();
    let finished = ev
        .iter()
        .filter(|e| matches!(e, Event::RunFinished { .. }))
        .count();
    let failed: Vec<String> = ev
        .iter()
        .filter_map(|e| {
            if let Event::RunFailed { reason, .. } = e {
                Some(reason.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(finished, 2, "base ran twice");
    assert_eq!(failed.len(), 4);
    // One discarded warm-up per device, before its first run; none of its events
    // escape. A warm-up that panics ("+ celu") is a warning, and its worker lives
    // on to run its share of the queue.
    let warm: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Log { message, .. } if message.contains("warm-up") => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(warm.len(), 2, "{warm:?}");
    assert!(
        warm.iter().all(
            |m| m.starts_with("warm-up on cpu (planted): one discarded run")
                || m.contains("failed (planted panic in `+ celu`")
        ),
        "{warm:?}"
    );
    let started = ev
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count();
    assert_eq!(started, 6);
    assert!(
        failed.iter().any(|r| r.contains("NaN"))
            && failed
                .iter()
                .any(|r| r.contains("internal error: planted panic in `+ celu`"))
    );
    assert!(matches!(ev.last(), Some(Event::Drained)));
    let rows = crate::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 6);
    assert!(dir.join("queue.json").exists());
    // Resume: the finished runs are skipped, the failed ones run again.
    let mut again = Session::start(
        vec![],
        SessionOptions {
            resume: Some(dir.clone()),
            ..opts(root.path(), &["a"])
        },
        factory(QUICK),
    )
    .unwrap();
    let ev = drain(&mut again);
    let started = ev
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count();
    assert_eq!(started, 4);
    again.join();
}

#[test]
fn pause_cancel_and_stop_after_current() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Session::start(
        vec![matrix(1)],
        opts(root.path(), &["a"]),
        // 201 steps of 5 ms, each step's row sent at once: the pause lands
        // mid-run, and a worker that ran on while paused would be seen.
        factory("steps_per_epoch=67; step_ms=5; steps_every=1"),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ev = rt.block_on(async {
        let mut out = Vec::new();
        let mut paused_at = None;
        while let Some(e) = tokio::time::timeout(Duration::from_secs(20), s.recv())
            .await
            .expect("stalled")
        {
            match &e {
                Event::Steps { rows, .. }
                    if paused_at.is_none() && rows.last().is_some_and(|r| r.step >= 5) =>
                {
                    s.send(Command::Pause);
                    paused_at = Some(std::time::Instant::now());
                }
                Event::WorkerPaused(true) => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    while let Some(x) = s.try_recv() {
                        // At most the step in flight finishes after a pause.
                        if let Event::Steps { rows, .. } = &x {
                            assert!(rows.len() <= 2, "worker kept running while paused");
                        }
                        out.push(x);
                    }
                    s.send(Command::CancelCurrent);
                    s.send(Command::StopAfterCurrent);
                    s.send(Command::Resume);
                }
                _ => {}
            }
            out.push(e);
        }
        out
    });
    assert!(ev.iter().any(|e| matches!(e, Event::RunCancelled { .. })));
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count(),
        1,
        "stop after current"
    );
    s.join();
}

#[test]
fn step_chunks_coalesce_while_the_consumer_lags() {
    let q = EventQueue::default();
    let id = crate::events::RunId {
        matrix: "m".into(),
        index: 0,
        variant: "v".into(),
        repeat: 0,
    };
    for k in 0..1000 {
        q.push(Event::Steps {
            run: id.clone(),
            rows: vec![StepRow {
                step: k,
                epoch: 0.0,
                loss: 1.0,
                lr: 0.1,
                bn_scale: vec![],
                bn_bias: vec![],
                loader_s: 0.0,
            }],
            images_per_s: 1.0,
            loader_share: 0.0,
        });
    }
    q.push(Event::Log {
        level: LogLevel::Info,
        message: "x".into(),
    });
    assert_eq!(q.len(), 2);
    let Some(Event::Steps { rows, .. }) = q.try_pop() else {
        panic!()
    };
    assert_eq!(rows.len(), 1000, "no step is lost");
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one session scenario read top to bottom"
)]
fn queue_commands_reach_the_queue() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Session::start(
        vec![matrix(1)],
        SessionOptions {
            keep_alive: true,
            ..opts(root.path(), &["a"])
        },
        factory(QUICK),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut failed = None;
        while let Some(e) = tokio::time::timeout(Duration::from_secs(20), s.recv())
            .await
            .expect("stalled")
        {
            if let Event::RunFailed { run, .. } = &e {
                failed = Some(run.clone());
            }
            if s.idle() && failed.is_some() {
                break;
            }
        }
        let f = failed.unwrap();
        s.send(Command::Requeue(f.clone()));
        // The requeued run fails again (its variant always fails) and is recorded once.
        loop {
            let e = tokio::time::timeout(Duration::from_secs(20), s.recv())
                .await
                .expect("stalled")
                .unwrap();
            if matches!(&e, Event::RunFailed { run, .. } if *run == f) {
                break;
            }
        }
        let n = s
            .enqueue_matrix(
                crate::matrix::parse(
                    "name='more'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['tta']\n",
                    "m.toml",
                )
                .unwrap(),
                crate::session::Pricing::Probe,
            )
            .unwrap();
        assert_eq!(n, 2);
        let mut done = 0;
        while done < 2 {
            if let Event::RunFinished { run, .. } =
                tokio::time::timeout(Duration::from_secs(20), s.recv())
                    .await
                    .expect("stalled")
                    .unwrap()
            {
                assert_eq!(run.matrix, "more");
                done += 1;
            }
        }
        s.send(Command::Shutdown);
        while tokio::time::timeout(Duration::from_secs(20), s.recv())
            .await
            .expect("stalled")
            .is_some()
        {}
    });
    assert_eq!(s.results_dirs().len(), 2);
    let st: Vec<RunStatus> = crate::store::read_runs(&s.results_dirs()[0].join("runs.parquet"))
        .unwrap()
        .iter()
        .map(|r| {
            if r.status == crate::store::Ended::Done {
                RunStatus::Done
            } else {
                RunStatus::Failed
            }
        })
        .collect();
    assert_eq!(st.len(), 3, "requeued run replaces its row");
    s.join();
}

#[test]
fn a_session_that_cannot_store_stops_and_trains_nothing_more() {
    // A disk without the free space a run needs: nothing is trained at all.
    let root = tempfile::tempdir().unwrap();
    let e = Session::start(
        vec![matrix(2)],
        SessionOptions {
            min_free_bytes: u64::MAX,
            cpu_threads: None,
            ..opts(root.path(), &["a"])
        },
        factory(QUICK),
    )
    .err()
    .expect("a full disk stops the session before it starts");
    assert!(format!("{e}").contains("MiB free"), "{e}");

    // A store write that fails: the run in progress ends, no other starts.
    let root = tempfile::tempdir().unwrap();
    let mut s = Session::start(
        vec![matrix(2)],
        opts(root.path(), &["a"]),
        factory("steps_per_epoch=1; step_ms=20"),
    )
    .unwrap();
    let dir = s.results_dirs()[0].clone();
    // A folder where the store's temporary file would go makes its write fail.
    std::fs::create_dir(crate::util::temp_sibling(&dir.join("runs.parquet"))).unwrap();
    let events = drain(&mut s);
    let finished = events
        .iter()
        .filter(|e| matches!(e, Event::RunFinished { .. } | Event::RunFailed { .. }))
        .count();
    assert_eq!(finished, 1, "runs kept training after the store failed");
    // The run trained but its row was not written: not "done" to anyone.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::RunFinished { .. })),
        "a run without its row was reported done"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::RunFailed { reason, .. }
            if reason.starts_with("finished, but its row could not be written")
                && reason.contains("--resume"))),
        "{events:?}"
    );
    let q = s.shared.queue.lock().unwrap();
    assert!(
        !q.entries().iter().any(|e| e.status == RunStatus::Done),
        "the queue kept a run without its row as done"
    );
    drop(q);
    let reason = s.halted().expect("the session says why it stopped");
    assert!(
        reason.contains(&dir.display().to_string()) && reason.contains("--resume"),
        "{reason}"
    );
    s.join();

    // Free space that runs out mid-session: checked before each run is handed out.
    let root = tempfile::tempdir().unwrap();
    let free = crate::util::free_bytes(root.path()).unwrap();
    let mut s = Session::start(
        vec![matrix(2)],
        SessionOptions {
            min_free_bytes: free / 2,
            cpu_threads: None,
            ..opts(root.path(), &["a"])
        },
        factory(QUICK),
    )
    .unwrap();
    s.shared.set_gate(Box::new(|_| Err("disk full".into())));
    let events = drain(&mut s);
    // The worker may have taken its first run before the test swapped the
    // gate in; none after it.
    let started = events
        .iter()
        .filter(|e| matches!(e, Event::RunStarted { .. }))
        .count();
    assert!(started <= 1, "{started} runs started after the disk filled");
    assert_eq!(s.halted().as_deref(), Some("disk full"));
    s.join();
}

#[test]
fn resume_follows_the_folders_queue_and_cleans_up_after_a_kill() {
    let root = tempfile::tempdir().unwrap();
    // Made with `--repeats 1` from a file that says 3: 3 variants x 1 run.
    let mut m = matrix(3);
    m.seeds = vec![0];
    let mut s = Session::start(vec![m], opts(root.path(), &["a"]), factory(QUICK)).unwrap();
    let dir = s.results_dirs()[0].clone();
    drain(&mut s);
    s.join();
    // A kill left a temp file; queue.json says the failed run was done (the
    // process died between the queue's write and the store's).
    let temp = dir.join(".runs.parquet.tmp-99999");
    std::fs::write(&temp, b"partial").unwrap();
    let q = dir.join("queue.json");
    let mut entries: Vec<crate::session::queue::Entry> =
        serde_json::from_str(&std::fs::read_to_string(&q).unwrap()).unwrap();
    assert_eq!(entries.len(), 3);
    let flip = entries
        .iter_mut()
        .find(|e| e.spec.id.variant == "+ flip")
        .unwrap();
    flip.status = RunStatus::Done;
    std::fs::write(&q, serde_json::to_string(&entries).unwrap()).unwrap();
    let rows = |dir: &std::path::Path| crate::store::folder_runs(dir).unwrap().len();
    let before = rows(&dir);
    let mut again = Session::start(
        vec![],
        SessionOptions {
            resume: Some(dir.clone()),
            ..opts(root.path(), &["a"])
        },
        factory(QUICK),
    )
    .unwrap();
    assert!(
        !temp.exists(),
        "temp file of the killed process left behind"
    );
    let ev = drain(&mut again);
    again.join();
    let started: Vec<String> = ev
        .iter()
        .filter_map(|e| match e {
            Event::RunStarted { run, .. } => Some(run.to_string()),
            _ => None,
        })
        .collect();
    // The table, not queue.json, says what is done: the failed "+ flip" runs
    // again, and only it: not the file's 3 repeats of each variant.
    assert_eq!(started, ["s/+ flip#0"], "{started:?}");
    let entries: Vec<crate::session::queue::Entry> =
        serde_json::from_str(&std::fs::read_to_string(&q).unwrap()).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(rows(&dir), before, "one row per run, replaced");
}

/// `until_decided` through the whole session, as `run --headless` and the
/// TUI drive it: the planted trainer gives "+ celu" the base's very time and
/// accuracy, every seed (decided: within the margin at once), and fails every "+ flip",
/// whose question so stays open: a round is added at a time up to max,
/// and the log says which question stayed open. A resume counts the
/// folder's earlier runs.
#[test]
fn until_decided_adds_rounds_through_the_session_and_says_what_stayed_open() {
    let root = tempfile::tempdir().unwrap();
    let text = "name='s'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu','flip']\nuntil_decided = { time = 0.05, acc = 0.005, max = 3 }\n";
    let m = crate::matrix::parse(text, "s.toml").unwrap();
    let alike = format!("{QUICK}; acc_spread=0; time_spread=0; base@10/0.9; + celu@10/0.9");
    let mut s = Session::start(vec![m], opts(root.path(), &["a"]), factory(&alike)).unwrap();
    let dir = s.results_dirs()[0].clone();
    let ev = drain(&mut s);
    s.join();
    let started = |ev: &[Event]| {
        ev.iter()
            .filter(|e| matches!(e, Event::RunStarted { .. }))
            .count()
    };
    let logs = |ev: &[Event], level: LogLevel| -> Vec<String> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Log { level: l, message } if *l == level => Some(message.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(started(&ev), 9, "3 variants, 3 rounds");
    let info = logs(&ev, LogLevel::Info);
    assert!(
        info.iter()
            .any(|m| m.contains("2 open after 2 seeds a variant (look 1 of 2): adding seed 2")),
        "{info:?}"
    );
    let warn = logs(&ev, LogLevel::Warn);
    assert!(
        warn.iter().any(|m| m.contains("2 stayed open at the budget of 3 seeds a variant: time of + flip vs base, accuracy of + flip vs base")),
        "{warn:?}"
    );
    // Resumed: the failed runs of "+ flip" run again (and fail), the
    // earlier runs of the others count, and no fourth round is added.
    let mut again = Session::start(
        vec![],
        SessionOptions {
            resume: Some(dir),
            ..opts(root.path(), &["a"])
        },
        factory(&alike),
    )
    .unwrap();
    let ev = drain(&mut again);
    again.join();
    assert_eq!(started(&ev), 3);
    assert!(
        logs(&ev, LogLevel::Warn)
            .iter()
            .any(|m| m.contains("2 stayed open"))
    );
}

/// Devices are grouped into gangs as large as the largest world size queued
/// (what is left over stays idle), and a run larger than the session is
/// refused with both numbers.
#[test]
fn devices_form_gangs_of_the_largest_world_size() {
    let m = |world: usize| {
        crate::matrix::parse(
            &format!(
                "name='g'\nrecipe='tiny-page-resnet9'\nkind='list'\nset={{ batch_size = 64 }}\n[[variant]]\nname='one'\n[[variant]]\nname='gang'\nset={{ world_size = {world} }}\n"
            ),
            "g.toml",
        )
        .unwrap()
    };
    let cpus = |n: usize| vec!["cpu".to_string(); n];
    let g = gangs(&[m(2)], &cpus(5)).unwrap();
    assert_eq!(g, vec![cpus(2), cpus(2)]);
    assert_eq!(gangs(&[m(1)], &cpus(3)).unwrap(), vec![cpus(1); 3]);
    let e = gangs(&[m(4)], &cpus(2)).unwrap_err().to_string();
    assert!(
        e.contains("world_size 4") && e.contains("2 device(s)"),
        "{e}"
    );
}

/// A time probe holds the workers: it is granted only while nothing is
/// queued or running, a matrix queued under it waits for it to end, and
/// while runs train no probe is granted.
#[test]
fn a_time_probe_holds_the_queue_and_is_refused_while_runs_train() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Session::start(
        Vec::new(),
        SessionOptions {
            keep_alive: true,
            ..opts(root.path(), &["a"])
        },
        factory("steps_per_epoch=14; step_ms=5"),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let hold = s.hold_for_probe().expect("an idle session grants a probe");
        assert!(s.probing());
        s.enqueue_matrix(matrix(1), crate::session::Pricing::Probe)
            .unwrap();
        // Held: nothing starts however long the probe takes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        while let Some(e) = s.try_recv() {
            assert!(
                !matches!(e, Event::RunStarted { .. }),
                "a run started under a probe"
            );
        }
        drop(hold);
        assert!(!s.probing());
        loop {
            let e = tokio::time::timeout(Duration::from_secs(20), s.recv())
                .await
                .expect("stalled")
                .unwrap();
            if matches!(e, Event::RunStarted { .. }) {
                break;
            }
        }
        // A run is training: no probe beside it.
        assert!(s.hold_for_probe().is_none());
        s.send(Command::Shutdown);
        while tokio::time::timeout(Duration::from_secs(20), s.recv())
            .await
            .expect("stalled")
            .is_some()
        {}
    });
    s.join();
}

/// One admission: a matrix the session would refuse at its start (a world
/// size past its devices, a batch past its data) is refused when queued
/// later, the picker's way, with the same line, and no folder is made.
#[test]
fn a_matrix_queued_later_is_refused_with_the_line_the_start_gives() {
    let root = tempfile::tempdir().unwrap();
    let bad = |name: &str, set: &str| {
        crate::matrix::parse(
            &format!("name='{name}'\nrecipe='tiny-page-resnet9'\nkind='list'\n[[variant]]\nname='v'\nset={{ {set} }}\n"),
            "bad.toml",
        )
        .unwrap()
    };
    for (name, set, words) in [
        ("wide", "world_size = 4", "asks for world_size 4"),
        ("big", "batch_size = 100000", "has batch_size 100000"),
    ] {
        let rules = Rules::default();
        let refused_at_start = match Session::open(
            vec![bad(name, set)],
            opts(root.path(), &["cpu"]),
            &rules,
            factory(QUICK),
        ) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{name}: admitted at the start"),
        };
        assert!(refused_at_start.contains(words), "{refused_at_start}");
        let (mut s, _) = Session::open(
            vec![matrix(1)],
            opts(root.path(), &["cpu"]),
            &rules,
            factory(QUICK),
        )
        .unwrap();
        let later = s
            .enqueue_matrix(bad(name, set), crate::session::Pricing::Unpriced)
            .unwrap_err()
            .to_string();
        assert_eq!(later, refused_at_start);
        assert!(
            !root.path().join(name).exists(),
            "{name}: a folder was made"
        );
        drain(&mut s);
    }
}
