use super::*;
use crate::events::RunSummary;

pub use crate::testkit::{rid, summary};

/// Feeds one whole run through the writer.
/// A whole run's events into `w`; the first store error.
pub fn feed_result(
    w: &mut ResultsWriter,
    run: RunId,
    seed: u64,
    s: Option<RunSummary>,
) -> anyhow::Result<()> {
    w.on_event(&Event::RunStarted {
        run: run.clone(),
        seed,
        record: crate::testkit::record(&run),
        total_steps: 3,
        total_epochs: 1.0,
        target_acc: 0.5,
        device: "cpu".into(),
        reference: None,
    })?;
    let rows = (1..=3)
        .map(|k| StepRow {
            step: k,
            epoch: k as f64 / 3.0,
            loss: 2.0 / k as f64,
            lr: 0.1,
            bn_scale: vec![1.0, 0.5],
            bn_bias: vec![0.0, 0.1],
            loader_s: 0.01 * k as f64,
        })
        .collect();
    w.on_event(&Event::Steps {
        run: run.clone(),
        rows,
        images_per_s: 10.0,
        loader_share: 0.0,
    })?;
    let row = EpochRow {
        epoch: 1,
        steps: 3,
        train_loss: 1.0,
        train_acc: 0.5,
        test_acc: 0.4,
        test_acc_tta: None,
        train_s: 1.0,
        eval_s: 0.1,
        images_per_s: 10.0,
        peak_mem_bytes: None,
        loader_s: 0.25,
        loader_images_per_s: Some(900.0),
        ddp: None,
    };
    w.on_event(&Event::Epoch {
        run: run.clone(),
        row,
    })?;
    match s {
        Some(summary) => w.on_event(&Event::RunFinished { run, summary }),
        None => w.on_event(&Event::RunFailed {
            run,
            reason: "loss became NaN".into(),
        }),
    }
}

pub fn feed(w: &mut ResultsWriter, run: RunId, seed: u64, s: Option<RunSummary>) {
    feed_result(w, run, seed, s).unwrap()
}

/// A results folder of the matrix `text` under `root`, as a session leaves
/// it (its record in the manifest), holding the finished runs `runs`
/// (variant index, repeat, seed, summary) in its runs table, written at
/// once: for tests of the report that need many runs and no curves, where
/// feeding each run's events through the writer (a table written a run)
/// would be most of their time.
pub fn folder_of_runs(
    root: &Path,
    text: &str,
    runs: &[(usize, usize, u64, RunSummary)],
) -> PathBuf {
    let m = crate::matrix::parse(text, "m.toml").unwrap();
    let w = ResultsWriter::create(root, &m.name, text).unwrap();
    let mut w = w;
    w.record_matrix(&m.record()).unwrap();
    let rows: Vec<RunRow> = runs
        .iter()
        .map(|(i, rep, seed, s)| {
            let mut id = rid(&m.variants[*i].name, *i, *rep);
            id.matrix.clone_from(&m.name);
            let rec = crate::testkit::record(&id);
            RunRow::new(
                &id,
                Some((*seed, &rec, m.target)),
                Ended::Done,
                None,
                Some(s),
            )
        })
        .collect();
    write_runs(&w.dir().join("runs.parquet"), &rows).unwrap();
    w.dir().to_path_buf()
}

#[test]
fn writes_runs_steps_epochs_and_manifest_and_resumes() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "demo ladder", "name = 'x'").unwrap();
    feed(
        &mut w,
        rid("base", 0, 0),
        0,
        Some(summary(0.5, 10.0, Some(8.0))),
    );
    feed(&mut w, rid("base", 0, 1), 1, None);
    let dir = w.dir().to_path_buf();
    assert!(dir.starts_with(root.path().join("demo_ladder")));
    assert!(
        dir.join("steps/base#0.parquet").exists() && dir.join("epochs/base#0.parquet").exists()
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["data_sets"][0]["hash"], "h");
    assert_eq!(m["matrix_file"], "name = 'x'");
    assert!(m["libtorch_version"].as_str().unwrap().starts_with("2.11"));

    let runs = read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(
        (
            runs[0].acc,
            runs[0].tricks.join(","),
            runs[0].time_to_target_s
        ),
        (
            Some(0.5),
            crate::testkit::record(&rid("a", 0, 0))
                .variant
                .tricks
                .join(","),
            Some(8.0)
        )
    );
    assert_eq!(
        (runs[1].status.as_str(), runs[1].reason.as_deref()),
        ("failed", Some("loss became NaN"))
    );

    // One writer per folder: resuming waits for this writer to end.
    let e = ResultsWriter::open(&dir).err().unwrap().to_string();
    assert!(
        e.contains("is locked by pid") && e.contains("resuming needs it alone"),
        "{e}"
    );
    drop(w);
    let again = ResultsWriter::open(&dir).unwrap();
    assert_eq!(
        again.finished(),
        [("base".to_string(), 0usize)].into_iter().collect()
    );
}

#[test]
fn a_folder_deleted_or_replaced_mid_session_is_not_recreated() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
    feed(&mut w, rid("a", 0, 0), 0, Some(summary(0.5, 10.0, None)));
    let dir = w.dir().to_path_buf();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut run = || feed_result(&mut w, rid("a", 0, 1), 1, Some(summary(0.5, 10.0, None)));
    let e = format!("{:#}", run().unwrap_err());
    assert!(
        e.contains("deleted or replaced") && e.contains("start a new session"),
        "{e}"
    );
    assert!(!dir.exists(), "the folder was recreated");
    // Replaced by a new folder of the same name: not written into either.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.json"), "{}").unwrap();
    let e = format!("{:#}", run().unwrap_err());
    assert!(e.contains("deleted or replaced"), "{e}");
    assert!(!dir.join("runs.parquet").exists());
}

#[test]
fn corrupt_runs_parquet_is_one_clear_line_and_failed_write_keeps_old() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
    feed(&mut w, rid("a", 0, 0), 0, Some(summary(0.5, 10.0, None)));
    let p = w.dir().join("runs.parquet");
    let good = std::fs::read(&p).unwrap();
    std::fs::write(&p, b"PAR1 not really").unwrap();
    let dir = w.dir().to_path_buf();
    drop(w);
    let e = format!("{:#}", ResultsWriter::open(&dir).err().unwrap());
    assert!(e.contains("runs.parquet") && e.contains("delete it"), "{e}");
    std::fs::write(&p, &good).unwrap();
    let r = crate::util::write_atomic_with(&p, |_| anyhow::bail!("disk full"));
    assert!(r.is_err());
    assert_eq!(read_runs(&p).unwrap().len(), 1);
}

#[test]
fn a_runs_parquet_without_a_newer_column_still_reads() {
    // Folders written before `loader_s` existed: the optional column reads as empty.
    let dir = tempfile::tempdir().unwrap();
    let row = RunRow::new(
        &rid("a", 0, 0),
        None,
        Ended::Done,
        None,
        Some(&summary(0.5, 10.0, None)),
    );
    let mut df = super::rows::runs_frame(std::slice::from_ref(&row))
        .unwrap()
        .drop("loader_s")
        .unwrap();
    let p = dir.path().join("runs.parquet");
    write_parquet(&p, &mut df).unwrap();
    let back = read_runs(&p).unwrap();
    assert_eq!(back[0].loader_s, None);
    assert_eq!(back[0].dawn_s, Some(10.0));
    // A required column missing is an error naming it and the file.
    let mut df = super::rows::runs_frame(&[row])
        .unwrap()
        .drop("variant")
        .unwrap();
    write_parquet(&p, &mut df).unwrap();
    let e = format!("{:#}", read_runs(&p).unwrap_err());
    assert!(e.contains("`variant`") && e.contains("runs.parquet"), "{e}");
}

#[test]
fn sessions_below_finds_results_folders_without_looking_inside_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mk = |rel: &str, file: Option<&str>| {
        let d = root.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        if let Some(f) = file {
            std::fs::write(d.join(f), b"x").unwrap();
        }
        d
    };
    let a = mk("m1/20261124-010000", Some("manifest.json"));
    let b = mk("m1/20261124-020000", Some("runs.parquet"));
    mk("m1/20261124-020000/steps/inner", Some("manifest.json"));
    mk("m2/empty", None);
    mk("m3/deep/deeper", Some("manifest.json"));
    std::fs::write(root.join("m1/notes.txt"), b"x").unwrap();
    assert_eq!(sessions_below(root, 2), vec![a.clone(), b.clone()]);
    assert_eq!(sessions_below(&root.join("m1"), 1), vec![a.clone(), b]);
    assert!(sessions_below(root, 1).is_empty());
    assert!(sessions_below(root, 0).is_empty());
    assert!(sessions_below(&root.join("missing"), 2).is_empty());
    assert!(is_session(&a) && !is_session(&root.join("m2/empty")));
}

#[test]
fn rows_carry_what_the_run_trained_with_and_schema_1_tables_still_read() {
    let id = rid("a", 0, 0);
    let rec = crate::testkit::record_with(&id, &["flip", "celu", "label_smoothing"]);
    let row = RunRow::new(
        &id,
        Some((3, &rec, 0.9)),
        Ended::Done,
        None,
        Some(&summary(0.5, 10.0, None)),
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("runs.parquet");
    write_runs(&p, std::slice::from_ref(&row)).unwrap();
    let back = &read_runs(&p).unwrap()[0];
    assert_eq!(back, &row);
    // The columns are the record's fields, typed, not words looked up.
    let (cfg, set) = (
        rec.variant.engine_config().unwrap(),
        rec.variant.settings().unwrap(),
    );
    assert_eq!(back.tricks, rec.variant.tricks);
    assert!(
        ["celu", "flip", "label_smoothing"]
            .iter()
            .all(|t| back.tricks.iter().any(|b| b == t))
    );
    let written = ("tiny-page-resnet9", "flip=on;celu=on;label_smoothing=on");
    assert_eq!((back.recipe.as_str(), back.overrides.as_str()), written);
    assert_eq!(
        (
            back.lr,
            back.batch_size,
            back.precision.as_deref(),
            back.muon_lr
        ),
        (
            Some(set.lr),
            Some(set.batch_size as u32),
            Some(set.precision.as_str()),
            None
        )
    );
    assert_eq!(
        (
            back.label_smoothing,
            back.channels_last,
            back.schedule.as_deref(),
            back.clock.as_deref(),
            back.data_hash.as_str(),
        ),
        (
            Some(set.label_smoothing),
            Some(set.channels_last),
            Some("page"),
            Some("dawn"),
            "h"
        )
    );
    assert!(
        set.label_smoothing > 0.0 && cfg.overrides.len() == 3,
        "{cfg:?}"
    );
    let df = read_parquet(&p, Some(&["finished_at", "tricks"])).unwrap();
    assert!(matches!(
        df.column("finished_at").unwrap().dtype(),
        polars::prelude::DataType::Datetime(..)
    ));
    assert!(matches!(
        df.column("tricks").unwrap().dtype(),
        polars::prelude::DataType::List(_)
    ));
}

/// Tables of schema 1 still read: the tricks one comma-joined string, the
/// end time RFC 3339 text, no configuration columns.
#[test]
fn schema_1_tables_still_read() {
    let id = rid("a", 0, 0);
    let rec = crate::testkit::record(&id);
    let row = RunRow::new(
        &id,
        Some((3, &rec, 0.9)),
        Ended::Done,
        None,
        Some(&summary(0.5, 10.0, None)),
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("runs.parquet");
    let mut df = super::rows::runs_frame(std::slice::from_ref(&row)).unwrap();
    for c in ["tricks", "finished_at", "lr", "precision", "batch_size"] {
        let _ = df.drop_in_place(c).unwrap();
    }
    df.with_column(Column::new("tricks".into(), ["flip,celu"]))
        .unwrap();
    df.with_column(Column::new(
        "finished_at".into(),
        ["2026-11-20T10:00:00.5+01:00"],
    ))
    .unwrap();
    write_parquet(&p, &mut df).unwrap();
    let old = &read_runs(&p).unwrap()[0];
    assert_eq!(old.tricks, ["flip", "celu"]);
    assert_eq!(
        old.finished_at.0.to_rfc3339(),
        "2026-11-20T09:00:00.500+00:00"
    );
    assert_eq!((old.lr, old.precision.as_deref()), (None, None));
}

/// A throttle the watcher saw between two clean end readings reaches the
/// row's throttle column and its peaks; a CPU run leaves the GPU columns empty.
#[test]
fn rows_carry_the_gpu_watchers_extremes() {
    use crate::util::machine::{GpuPeak, MachineState, parse_gpu_line};
    let mut s = summary(0.5, 10.0, None);
    s.machine = Some(Box::new(MachineState {
        gpu_start: parse_gpu_line("H100, 1980, 40, 300, 0x0"),
        gpu_end: parse_gpu_line("H100, 1980, 60, 500, 0x0"),
        gpu_peak: Some(GpuPeak {
            samples: 7,
            sm_clock_min_mhz: Some(1410.0),
            sm_clock_max_mhz: Some(1980.0),
            temperature_max_c: Some(88.0),
            power_max_w: Some(700.0),
            throttle: vec!["hw_thermal".into()],
        }),
        ..Default::default()
    }));
    let row = RunRow::new(&rid("a", 0, 0), None, Ended::Done, None, Some(&s));
    assert_eq!(
        (
            row.gpu_name.as_deref(),
            row.gpu_sm_clock_min_mhz,
            row.gpu_temp_peak_c,
            row.gpu_power_peak_w,
            row.gpu_samples,
            row.gpu_throttle.as_deref()
        ),
        (
            Some("H100"),
            Some(1410.0),
            Some(88.0),
            Some(700.0),
            Some(7),
            Some("hw_thermal")
        )
    );
    let mut cpu = summary(0.5, 10.0, None);
    cpu.machine = Some(Box::default());
    let row = RunRow::new(&rid("a", 0, 0), None, Ended::Done, None, Some(&cpu));
    assert_eq!((row.gpu_throttle, row.gpu_samples), (None, None));
}

/// A run that fails before it starts takes the target its folder recorded,
/// even when the matrix file no longer parses (a trick renamed since).
#[test]
fn a_run_failed_before_it_started_keeps_the_recorded_target() {
    let root = tempfile::tempdir().unwrap();
    let text = "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['a_trick_renamed_since']\n";
    let mut w = ResultsWriter::create(root.path(), "m", text).unwrap();
    // What the session decided, before the trick was renamed.
    let decided = "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['celu']\ntarget = 0.37\n";
    w.record_matrix(&crate::testkit::matrix_record(decided))
        .unwrap();
    // The queue said its seed (the second repeat's, 1001): the row keeps it.
    w.on_event(&Event::Queue(vec![crate::events::QueueItem {
        run: rid("base", 0, 1),
        seed: 1001,
        status: crate::events::RunStatus::Queued,
        reason: None,
    }]))
    .unwrap();
    w.on_event(&Event::RunFailed {
        run: rid("base", 0, 1),
        reason: "cuda:3: no such device".into(),
    })
    .unwrap();
    assert_eq!(w.runs()[0].status, Ended::Failed);
    assert_eq!(w.runs()[0].target_acc, 0.37);
    assert_eq!(w.runs()[0].seed, 1001, "its own seed, not 0");
}

/// Earlier finished runs price a matrix per device; failed, noisy and other
/// devices' runs do not count.
#[test]
fn earlier_runs_price_a_matrix_on_one_device() {
    let root = tempfile::tempdir().unwrap();
    for (i, dawn) in [10.0, 20.0, 300.0].iter().enumerate() {
        let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
        // The third session ran the same matrix on other data.
        let data = if i < 2 { "embedded" } else { "cifar10" };
        let mut r = crate::testkit::matrix_record(
            "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['celu']\n",
        );
        r.data = data.into();
        w.record_matrix(&r).unwrap();
        // summary(): wall = dawn + 2.
        feed(&mut w, rid("a", 0, i), 0, Some(summary(0.5, *dawn, None)));
        feed(&mut w, rid("b", 1, i), 1, None);
        let mut noisy = summary(0.5, 500.0, None);
        noisy.noise = Some("busy".into());
        feed(&mut w, rid("c", 2, i), 2, Some(noisy));
        let mut gpu = summary(0.5, 1.0, None);
        gpu.device = "cuda:0 H100".into();
        feed(&mut w, rid("d", 3, i), 3, Some(gpu));
    }
    // A folder that predates the recorded matrix does not say its data.
    let mut old = ResultsWriter::create(root.path(), "m", "").unwrap();
    feed(
        &mut old,
        rid("a", 0, 0),
        0,
        Some(summary(0.5, 1000.0, None)),
    );
    drop(old);
    let key = |d: &str| ("m".to_string(), d.to_string());
    let cpu = earlier_runs(root.path(), "cpu");
    assert_eq!(cpu[&key("embedded")], EarlierRuns { mean_s: 17.0, n: 2 });
    assert_eq!(
        cpu[&key("cifar10")],
        EarlierRuns {
            mean_s: 302.0,
            n: 1
        }
    );
    assert_eq!(cpu.len(), 2);
    assert_eq!(
        earlier_runs(root.path(), "cuda:0 H100")[&key("embedded")].n,
        2
    );
    assert!(earlier_runs(root.path(), "cuda:1").is_empty());
    assert!(earlier_runs(&root.path().join("missing"), "cpu").is_empty());
}

/// A session quit before any run finished (a manifest, perhaps a cancelled
/// run) is passed over as "the newest session", and said to be; with none
/// finished anywhere there is none.
#[test]
fn the_newest_session_is_the_newest_with_a_finished_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mk = |name: &str, rows: &[Ended]| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("manifest.json"), b"{}").unwrap();
        if !rows.is_empty() {
            let rows: Vec<RunRow> = rows
                .iter()
                .enumerate()
                .map(|(i, &status)| RunRow {
                    repeat: i as u32,
                    status,
                    ..Default::default()
                })
                .collect();
            write_runs(&d.join("runs.parquet"), &rows).unwrap();
        }
        d
    };
    let old = mk("20261124-010000", &[Ended::Failed, Ended::Done]);
    let cancelled = mk("20261124-020000", &[Ended::Cancelled]);
    let empty = mk("20261124-030000", &[]);
    assert!(has_finished_run(&old) && !has_finished_run(&cancelled) && !has_finished_run(&empty));
    let sessions = sessions_below(tmp.path(), 1);
    assert_eq!(
        newest_finished(&sessions),
        Some((old.clone(), vec![cancelled.clone(), empty.clone()]))
    );
    assert_eq!(newest_finished(&sessions[..1]), Some((old, vec![])));
    assert_eq!(newest_finished(&sessions[1..]), None);
}

/// A finished run's curves come back from its files as they were fed, for
/// the TUI's Live screen on a folder opened with `tui --open`.
#[test]
fn a_runs_curves_read_back_as_written() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "demo", "name = 'x'").unwrap();
    feed(
        &mut w,
        rid("a", 0, 0),
        7,
        Some(summary(0.6, 1.0, Some(0.5))),
    );
    let dir = w.dir().to_path_buf();
    let row = w.runs()[0].clone();
    drop(w);
    let (steps, epochs) = read_curves(&dir, &row).unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2].step, 3);
    assert!((steps[1].loss - 1.0).abs() < 1e-12 && (steps[0].epoch - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(steps[0].bn_scale, vec![1.0, 0.5]);
    assert_eq!(epochs.len(), 1);
    let e = &epochs[0];
    assert_eq!((e.epoch, e.steps, e.test_acc_tta), (1, 3, None));
    assert!((e.test_acc - 0.4).abs() < 1e-12 && (e.train_s - 1.0).abs() < 1e-12);
    // The loader's share and rate, per step and per epoch.
    assert!((steps[2].loader_s - 0.03).abs() < 1e-12);
    assert_eq!((e.loader_s, e.loader_images_per_s), (0.25, Some(900.0)));
    // A run without files has no curves, and no error.
    let mut other = row.clone();
    other.variant = "never ran".into();
    assert_eq!(read_curves(&dir, &other).unwrap(), (Vec::new(), Vec::new()));
}

/// TTA is named only where the run's record says it evaluated with it.
#[test]
fn tta_is_named_only_for_runs_that_used_it() {
    let s = summary(0.447, 10.0, None);
    let off = crate::testkit::record_with(&rid("off", 0, 0), &["tta=off"]);
    let on = crate::testkit::record_with(&rid("on", 1, 0), &["tta"]);
    assert!(!off.uses_tta() && on.uses_tta());
    assert_eq!(s.acc_words(off.uses_tta()), "acc 45.70%");
    assert_eq!(s.acc_words(on.uses_tta()), "acc 45.70% (TTA)");
}

/// Step and epoch files are named as the variant reads
/// (`+ label smoothing#0.parquet`); a folder written under the older
/// escaped (`+%20label%20smoothing#0`) or legacy keys still reads.
#[test]
fn run_files_are_named_as_the_variant_reads_and_older_names_still_read() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
    feed(
        &mut w,
        rid("+ label smoothing", 1, 0),
        0,
        Some(summary(0.5, 10.0, None)),
    );
    feed(
        &mut w,
        rid("B0 (a/b)", 0, 0),
        0,
        Some(summary(0.5, 10.0, None)),
    );
    let dir = w.dir().to_path_buf();
    drop(w);
    assert!(dir.join("steps/+ label smoothing#0.parquet").is_file());
    assert!(dir.join("epochs/B0 (a%2Fb)#0.parquet").is_file());
    let runs = read_runs(&dir.join("runs.parquet")).unwrap();
    let row = runs
        .iter()
        .find(|r| r.variant == "+ label smoothing")
        .unwrap();
    let (steps, _) = crate::store::read_curves(&dir, row).unwrap();
    assert!(!steps.is_empty());
    for (old, f) in [
        ("+%20label%20smoothing#0", "+ label smoothing#0"),
        ("+_label_smoothing#0", "+%20label%20smoothing#0"),
    ] {
        for sub in ["steps", "epochs"] {
            std::fs::rename(
                dir.join(sub).join(format!("{f}.parquet")),
                dir.join(sub).join(format!("{old}.parquet")),
            )
            .unwrap();
        }
        let (again, _) = crate::store::read_curves(&dir, row).unwrap();
        assert_eq!(again.len(), steps.len(), "{old}");
    }
}
