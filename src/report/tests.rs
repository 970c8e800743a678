//! The report on a fixture folder, against numbers computed here.

use super::*;
use crate::store::ResultsWriter;

fn fixture(root: &Path, name: &str, slow: f64) -> PathBuf {
    fixture_kind(root, name, slow, "")
}

fn fixture_kind(root: &Path, name: &str, slow: f64, matrix_text: &str) -> PathBuf {
    let mut w = ResultsWriter::create(root, name, matrix_text).unwrap();
    // Rung 0: acc 0.50/0.52/0.54, time 10/12/14; rung 1: acc 0.60/0.62, time 5/7; rung 1 also one failure.
    let data = [
        (0, 0, 0.50, 10.0, None),
        (0, 1, 0.52, 12.0, Some(9.0)),
        (0, 2, 0.54, 14.0, Some(11.0)),
        (1, 0, 0.60, 5.0, Some(4.0)),
        (1, 1, 0.62, 7.0, Some(6.0)),
    ];
    for (idx, rep, acc, t, ttt) in data {
        let v = if idx == 0 { "base" } else { "+ trick" };
        crate::store::tests::feed(
            &mut w,
            crate::store::tests::rid(v, idx, rep),
            rep as u64,
            Some(crate::store::tests::summary(acc - 0.01, t * slow, ttt)),
        );
    }
    crate::store::tests::feed(&mut w, crate::store::tests::rid("+ trick", 1, 2), 2, None);
    w.dir().to_path_buf()
}

#[test]
fn aggregate_matches_hand_computed_statistics() {
    let root = tempfile::tempdir().unwrap();
    let dir = fixture(root.path(), "m", 1.0);
    let r = aggregate(
        std::slice::from_ref(&dir),
        &ReportOptions {
            target: Some(0.53),
            clock: Some(Clock::Dawn),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.rows.len(), 2);
    let (a, b) = (&r.rows[0], &r.rows[1]);
    assert_eq!(
        (a.variant.as_str(), a.n, a.failed, b.n, b.failed),
        ("base", 3, 0, 2, 1)
    );
    // summary() sets acc_tta = acc + 0.01, and the fixture passed acc - 0.01.
    assert!((a.acc_tta_mean - 0.52).abs() < 1e-9);
    let sd = (((0.02f64).powi(2) * 2.0) / 2.0).sqrt();
    let t2 = 0.95 / (2.0f64 * 0.975 * 0.025).sqrt();
    assert!((a.acc_tta_ci95 - t2 * sd / 3f64.sqrt()).abs() < 1e-9);
    assert!((a.p_target - 1.0 / 3.0).abs() < 1e-9);
    assert!((a.dawn.mean - 12.0).abs() < 1e-9 && a.dawn.min == 10.0 && a.dawn.median == 12.0);
    assert_eq!((a.ttt_mean, a.ttt_n), (Some(10.0), 2));
    assert!((b.dawn.mean - 6.0).abs() < 1e-9);
    // Written just now (a run at midnight UTC may straddle two days).
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let yesterday = (chrono::Utc::now() - chrono::Duration::days(1))
        .format("%Y-%m-%d")
        .to_string();
    assert!(
        [today, yesterday].contains(a.last_finished.as_ref().unwrap()),
        "{:?}",
        a.last_finished
    );
    assert_eq!(b.speedup_prev, Some(2.0));
    assert_eq!(b.speedup_first, Some(2.0));
    assert_eq!(a.speedup_prev, None);
    let md = r.to_markdown();
    assert!(
        // n = 2: the t interval as an interval (within 0), not ± 12.71.
        md.contains("| 1 | + trick | 2 | 6.00 [0.00, 18.71] | −5.00 [−5.00, −5.00]* |")
            && md.contains("(sd 1.41) | 1 |")
            && md.contains("×2.00"),
        "{md}"
    );
    // Rung 0's accuracies 49/51/53%: ± the 95% CI, then the sd papers give.
    assert!(md.contains("± 4.97 (sd 2.00)"), "{md}");
    assert!(r.to_csv().lines().count() == 3);
    assert!(r.to_json().unwrap().contains("\"speedup_prev\": 2.0"));
    // Not a ladder: only the speedup against the reference (the first variant) is meaningful.
    let loo = fixture_kind(
        root.path(),
        "m",
        1.0,
        "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['celu']\n",
    );
    let r2 = aggregate(std::slice::from_ref(&loo), &ReportOptions::default()).unwrap();
    assert_eq!(r2.rows[1].speedup_prev, None);
    assert_eq!(r2.rows[1].speedup_first, Some(2.0));
    // What the folder recorded decides, not today's parser: a matrix file that
    // no longer parses (a trick renamed since) reports the same.
    let mut m = crate::store::read_manifest(&loo).unwrap();
    m["matrix_resolved"] = serde_json::json!({ "name": "m", "kind": "add-one" });
    m["matrix_file"] = serde_json::json!(
        "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['a_trick_renamed_since']\n"
    );
    crate::util::write_atomic(&loo.join("manifest.json"), m.to_string().as_bytes()).unwrap();
    let r3 = aggregate(&[loo], &ReportOptions::default()).unwrap();
    assert_eq!(r3.rows[1].speedup_prev, None);
    assert_eq!(r3.rows[1].speedup_first, Some(2.0));
    // Without --target, the runs' own target (0.5) applies.
    let r = aggregate(&[dir], &ReportOptions::default()).unwrap();
    assert_eq!(r.target, 0.5);
    assert!((r.rows[0].p_target - 1.0).abs() < 1e-9);
}

#[test]
fn compare_calls_a_regression_only_beyond_the_noise() {
    let root = tempfile::tempdir().unwrap();
    let o = ReportOptions::default();
    let report =
        |name: &str, slow: f64| aggregate(&[fixture(root.path(), name, slow)], &o).unwrap();
    let (b, same, slow, much) = (
        report("a", 1.0),
        report("b", 1.0),
        report("c", 1.2),
        report("d", 3.0),
    );
    let th = Thresholds {
        max_slowdown: 0.05,
        max_acc_drop: 0.002,
    };
    // Raw times: this fixture slows every rung alike.
    let verdicts = |c: &Report| -> Vec<Verdict> {
        compare(&b, c, &th, TimeModel::Absolute)
            .into_iter()
            .map(|c| c.verdict)
            .collect()
    };
    assert!(verdicts(&same).iter().all(|v| !v.is_bad()));
    // 20% slower on three runs of 10/12/14 s: the CI still reaches below 5%.
    assert!(matches!(verdicts(&slow)[0], Verdict::Inconclusive { .. }));
    assert_eq!(verdicts(&much)[0], Verdict::Slower);
    let rows = compare(&b, &much, &th, TimeModel::Absolute);
    let t = rows[0].time.unwrap();
    assert!(
        (t.delta - 24.0).abs() < 1e-9 && t.lo() > 0.05 * t.base,
        "{t:?}"
    );
    // A candidate variant that failed every run, one that is missing, one that is new.
    let mut failed = same.clone();
    failed.rows[1].n = 0;
    assert_eq!(verdicts(&failed)[1], Verdict::FailedInCandidate);
    let mut renamed = same.clone();
    renamed.rows[1].variant = "+ other".into();
    let v = verdicts(&renamed);
    assert_eq!(v[1], Verdict::MissingInCandidate);
    assert_eq!(v[2], Verdict::NewInCandidate);
    assert!(v[1].is_bad() && !v[2].is_bad());
}

/// One run a side: each side's means are shown, and the verdict says there is
/// no interval rather than a count of runs; where seeds match, accuracy is paired.
#[test]
fn one_run_a_side_shows_the_means_and_no_count_of_runs() {
    let root = tempfile::tempdir().unwrap();
    let one = |name: &str, t: f64| {
        let mut w = ResultsWriter::create(root.path(), name, "").unwrap();
        for (idx, v) in ["control", "a"].into_iter().enumerate() {
            let s = crate::store::tests::summary(0.6, t * (idx + 1) as f64, None);
            crate::store::tests::feed(&mut w, crate::store::tests::rid(v, idx, 0), 0, Some(s));
        }
        aggregate(&[w.dir().to_path_buf()], &ReportOptions::default()).unwrap()
    };
    let (b, c) = (one("b", 10.0), one("c", 11.0));
    let th = Thresholds {
        max_slowdown: 0.05,
        max_acc_drop: 0.002,
    };
    let rows = compare(&b, &c, &th, TimeModel::NetOfDrift);
    let a = &rows[1];
    assert_eq!(a.n, (1, 1));
    assert_eq!(
        a.verdict,
        Verdict::Inconclusive {
            open: super::compare::Open::NoInterval
        }
    );
    assert!(!a.verdict.label().contains("need"), "{}", a.verdict.label());
    assert!(a.time.is_none() && a.acc.is_none());
    let (tb, tc) = (b.rows[1].clock(a.clock).mean, c.rows[1].clock(a.clock).mean);
    assert!((tc / tb - 1.1).abs() < 1e-9, "{tb} {tc}");
    assert_eq!((a.means.base_s, a.means.cand_s), (tb, tc));
    assert!((a.means.base_acc - 0.61).abs() < 1e-9 && (a.means.cand_acc - 0.61).abs() < 1e-9);
    let json = a.to_json();
    assert_eq!(json["base_s"].as_f64(), Some(tb));
    assert_eq!(json["inconclusive_because"], "no_interval");
    assert!(json["more_runs"].is_null());
    // Three and two runs of the same seeds on both sides: accuracy paired.
    let o = ReportOptions::default();
    let (fb, fc) = (
        aggregate(&[fixture(root.path(), "fb", 1.0)], &o).unwrap(),
        aggregate(&[fixture(root.path(), "fc", 1.0)], &o).unwrap(),
    );
    let rows = compare(&fb, &fc, &th, TimeModel::NetOfDrift);
    assert!(rows.iter().all(|r| r.acc_paired), "{rows:?}");
    // A rung with no finished run in the base is new in the candidate.
    let mut gone = b.clone();
    gone.rows[1].n = 0;
    let rows = compare(&gone, &c, &th, TimeModel::NetOfDrift);
    assert_eq!(rows[1].verdict, Verdict::NewInCandidate);
    gone.rows.remove(1);
    let rows = compare(&gone, &c, &th, TimeModel::NetOfDrift);
    assert_eq!(rows[1].verdict, Verdict::NewInCandidate);
}

/// A session of three variants, eight runs each, with times spread ±0.5% by
/// seed: `control`, `a` and `b` at 10, 20 and 30 s times `slow` (and `b`
/// times `b_extra`), accuracies steady.
fn drift_fixture(root: &Path, name: &str, slow: f64, b_extra: f64) -> PathBuf {
    let mut w = ResultsWriter::create(root, name, "").unwrap();
    for (idx, (v, t)) in [("control", 10.0), ("a", 20.0), ("b", 30.0)]
        .into_iter()
        .enumerate()
    {
        for rep in 0..8 {
            let noise = 1.0 + 0.005 * ((rep * 7 % 5) as f64 - 2.0) / 2.0;
            let extra = if v == "b" { b_extra } else { 1.0 };
            crate::store::tests::feed(
                &mut w,
                crate::store::tests::rid(v, idx, rep),
                rep as u64,
                Some(crate::store::tests::summary(
                    0.60,
                    t * slow * extra * noise,
                    None,
                )),
            );
        }
    }
    w.dir().to_path_buf()
}

#[test]
fn a_slower_night_is_drift_and_only_a_rung_slower_on_top_of_it_is_flagged() {
    let root = tempfile::tempdir().unwrap();
    let o = ReportOptions::default();
    let at = |name, slow, extra| {
        aggregate(&[drift_fixture(root.path(), name, slow, extra)], &o).unwrap()
    };
    let base = at("base", 1.0, 1.0);
    let th = Thresholds {
        max_slowdown: 0.02,
        max_acc_drop: 0.002,
    };
    let verdicts = |c: &Report, m| -> Vec<Verdict> {
        compare(&base, c, &th, m)
            .into_iter()
            .map(|c| c.verdict)
            .collect()
    };
    // The whole machine 20% slower, no rung changed: drift, not a regression.
    let slow_night = at("slow", 1.2, 1.0);
    assert_eq!(
        verdicts(&slow_night, TimeModel::NetOfDrift),
        [Verdict::Control, Verdict::NoChange, Verdict::NoChange]
    );
    let d = drift(&base, &slow_night).unwrap();
    assert!(
        (d.rel - 0.2).abs() < 1e-6 && d.lo > 0.19 && d.hi < 0.21,
        "{d:?}"
    );
    // Judged raw, every rung would read as a regression.
    assert!(
        verdicts(&slow_night, TimeModel::Absolute)
            .iter()
            .all(|v| *v == Verdict::Slower)
    );
    // One rung 5% slower on top of the drift: only that rung is flagged.
    let b_slower = at("b-slower", 1.2, 1.05);
    assert_eq!(
        verdicts(&b_slower, TimeModel::NetOfDrift),
        [Verdict::Control, Verdict::NoChange, Verdict::Slower]
    );
    let rows = compare(&base, &b_slower, &th, TimeModel::NetOfDrift);
    let b = rows[2].time_rel.unwrap();
    assert!((b.rel - 0.05).abs() < 1e-6, "{b:?}");
    // A candidate whose values are not numbers is a failure, not a pass.
    let mut nan = slow_night.clone();
    nan.rows[1].acc_tta_mean = f64::NAN;
    let v = verdicts(&nan, TimeModel::NetOfDrift);
    assert_eq!(v[1], Verdict::NotANumber);
    assert!(v[1].is_bad());
}

#[test]
fn missing_folders_are_named() {
    let e = format!(
        "{:#}",
        aggregate(
            &[PathBuf::from("/nonexistent/x")],
            &ReportOptions::default()
        )
        .unwrap_err()
    );
    assert!(
        e.contains("/nonexistent/x") && e.contains("no such results folder"),
        "{e}"
    );
}

#[test]
fn a_run_that_fails_before_it_starts_keeps_its_matrix_target() {
    // A device that cannot be used fails the run before RunStarted: the row
    // must still carry the matrix's target, or the report reads NaN%.
    let root = tempfile::tempdir().unwrap();
    let text = "name = 'm'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['celu']\ntarget = 0.4\n";
    let mut w = ResultsWriter::create(root.path(), "m", text).unwrap();
    w.on_event(&crate::events::Event::RunFailed {
        run: crate::store::tests::rid("base", 0, 0),
        reason: "unknown device `tpu`".into(),
    })
    .unwrap();
    assert_eq!(w.runs()[0].status, crate::store::Ended::Failed);
    assert_eq!(w.runs()[0].target_acc, 0.4);
    let r = crate::report::aggregate(&[w.dir().to_path_buf()], &Default::default()).unwrap();
    assert_eq!(r.target, 0.4);
}

#[test]
fn each_recipe_is_headlined_in_its_own_timing_convention() {
    assert_eq!(clock_of_recipe("page-final"), Clock::Dawn);
    assert_eq!(clock_of_recipe("tiny-page-resnet18"), Clock::Dawn);
    assert_eq!(clock_of_recipe("airbench94"), Clock::Airbench);
    assert_eq!(clock_of_recipe("tiny-airbench94-muon"), Clock::Airbench);
    assert_eq!(clock_of_recipe("a-recipe-from-elsewhere"), Clock::Dawn);
    let root = tempfile::tempdir().unwrap();
    let dir = fixture(root.path(), "m", 1.0);
    let auto = aggregate(std::slice::from_ref(&dir), &ReportOptions::default()).unwrap();
    assert!(auto.rows.iter().all(|r| r.headline == Clock::Dawn));
    assert_eq!(auto.clock, Some(Clock::Dawn));
    let md = auto.to_markdown();
    // Time to target is secondary, per run, with how many runs did not get there.
    assert!(md.contains("first eval at target (s, per run)"), "{md}");
    assert!(md.contains("(n=2, 1 not)"), "{md}");
    let hlb = aggregate(
        std::slice::from_ref(&dir),
        &ReportOptions {
            target: None,
            clock: Some(Clock::Hlb),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        hlb.rows
            .iter()
            .all(|r| r.headline == Clock::Hlb && r.time() == &r.hlb)
    );
    assert!(hlb.to_csv().lines().nth(1).unwrap().contains(",hlb,"));
}

#[test]
fn by_device_splits_each_variant_by_the_device_its_runs_used() {
    let root = tempfile::tempdir().unwrap();
    let dir = fixture(root.path(), "m", 1.0);
    let path = dir.join("runs.parquet");
    let mut rows = crate::store::read_runs(&path).unwrap();
    for (k, r) in rows.iter_mut().enumerate() {
        r.device = if k % 2 == 0 {
            "cuda:0".into()
        } else {
            "cuda:1".into()
        };
    }
    crate::store::write_runs(&path, &rows).unwrap();
    let opts = ReportOptions {
        by_device: true,
        ..Default::default()
    };
    let r = aggregate(std::slice::from_ref(&dir), &opts).unwrap();
    let names: Vec<&str> = r.rows.iter().map(|x| x.variant.as_str()).collect();
    assert!(
        names.contains(&"base @ cuda:0") && names.contains(&"base @ cuda:1"),
        "{names:?}"
    );
    let n: usize = r.rows.iter().map(|x| x.n + x.failed).sum();
    assert_eq!(n, rows.len());
}

#[test]
fn compare_pairs_accuracy_by_seed_where_the_seeds_match() {
    let root = tempfile::tempdir().unwrap();
    let o = ReportOptions::default();
    let b = aggregate(&[fixture(root.path(), "a", 1.0)], &o).unwrap();
    // Every seed 0.3 points lower in the candidate: across seeds the spread is
    // wider than that, but seed by seed the drop is exact.
    let mut c = b.clone();
    for row in &mut c.rows {
        for x in &mut row.acc_by_seed {
            x.1 -= 0.003;
        }
        row.acc_tta_mean -= 0.003;
    }
    let th = Thresholds {
        max_slowdown: 0.05,
        max_acc_drop: 0.002,
    };
    let rows = compare(&b, &c, &th, TimeModel::Absolute);
    let first = rows.iter().find(|r| r.n.0 >= 2).unwrap();
    let a = first.acc.unwrap();
    assert!(
        (a.delta + 0.003).abs() < 1e-9 && a.half_width < 1e-9,
        "{a:?}"
    );
    assert_eq!(first.verdict, Verdict::LessAccurate);
    // The report's own Δ against the previous rung is paired too.
    let r = &b.rows[1];
    let d = r.delta_acc.unwrap();
    assert!(d.paired, "{d:?}");
    // The candidate ran seeds 0 and 1 of the base's 0, 1, 2: paired over
    // those two, and the means shown are theirs, so that their difference is
    // the Δ printed beside them (seed 2's accuracy is not in either mean).
    let mut c2 = c.clone();
    for row in &mut c2.rows {
        row.acc_by_seed.retain(|x| x.0 < 2);
    }
    let rows = compare(&b, &c2, &th, TimeModel::Absolute);
    let first = rows.iter().find(|r| r.n.0 >= 3).unwrap();
    let a = first.acc.unwrap();
    assert!((a.cand - a.base - a.delta).abs() < 1e-12, "{a:?}");
    let b0 = &b.rows[first_index(&b, &first.variant)].acc_by_seed;
    let base_01 = b0.iter().filter(|x| x.0 < 2).map(|x| x.1).sum::<f64>() / 2.0;
    assert!((a.base - base_01).abs() < 1e-12, "{a:?} {b0:?}");
}

fn first_index(r: &Report, variant: &str) -> usize {
    r.rows.iter().position(|x| x.variant == variant).unwrap()
}

/// Both end-time shapes give the day; a table with no recorded time gives none.
#[test]
fn the_day_a_variant_last_finished_reads_from_either_schema() {
    let text = Column::new(
        "finished_at".into(),
        [
            Some("2026-11-20T23:30:00+00:00"),
            Some("2026-11-21T00:30:00+01:00"),
            None,
        ],
    );
    assert_eq!(
        finished_days(&text).unwrap(),
        [Some("2026-11-20".into()), Some("2026-11-20".into()), None]
    );
    let micros = Series::new("finished_at".into(), [1_795_000_000_000_000i64, 0])
        .cast(&DataType::Datetime(TimeUnit::Microseconds, None))
        .unwrap()
        .into();
    assert_eq!(
        finished_days(&micros).unwrap(),
        [Some("2026-11-18".into()), None]
    );
}

/// With the control's runs left out (`--drop-noisy` on a session whose first
/// variant ran noisy), no other variant is taken for the control: no drift.
#[test]
fn a_control_left_out_is_not_replaced_by_the_next_variant() {
    let root = tempfile::tempdir().unwrap();
    let o = ReportOptions::default();
    let b = aggregate(&[fixture(root.path(), "a", 1.0)], &o).unwrap();
    let c = aggregate(&[fixture(root.path(), "b", 1.3)], &o).unwrap();
    assert_eq!(control(&b).map(|r| r.index), Some(0));
    assert!(drift(&b, &c).is_some());
    let mut without = b.clone();
    without.rows.remove(0);
    assert!(control(&without).is_none());
    assert!(drift(&without, &c).is_none());
    let th = Thresholds {
        max_slowdown: 0.05,
        max_acc_drop: 0.002,
    };
    let rows = compare(&without, &c, &th, TimeModel::NetOfDrift);
    assert!(
        rows.iter().all(|r| r.verdict != Verdict::Control),
        "{rows:?}"
    );
}

/// A data-parallel variant's gradient all-reduce by DDP's clock reaches
/// runs.parquet, the report's mean, its Markdown column and its CSV; a
/// one-process variant beside it shows "-", and a report of one-process
/// runs alone has no such column.
#[test]
fn a_data_parallel_variants_all_reduce_is_a_report_column() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(tmp.path(), "ddp", "").unwrap();
    for (idx, v, ddp) in [(0, "one process", None), (1, "two ranks", Some(0.004))] {
        for rep in 0..2 {
            let mut s = crate::store::tests::summary(0.9, 10.0, None);
            if let Some(hidden) = ddp {
                let rank = |r| crate::events::RankEnd {
                    rank: r,
                    host: "h".into(),
                    device: "cpu".into(),
                    allreduce_s: 0.1,
                    throughput_cv: None,
                    machine: crate::util::machine::MachineState::default(),
                    cpu_s: 1.0,
                    wall_s: 1.0,
                    ddp: Some(crate::config::DdpTimes {
                        backward_s: 0.02,
                        // Runs of 10 and 12 ms: a mean of 11, 6 and 8 exposed.
                        allreduce_s: 0.010 + 0.002 * rep as f64,
                        hidden_s: hidden,
                    }),
                };
                s.ranks = vec![rank(0), rank(1)];
            }
            crate::store::tests::feed(
                &mut w,
                crate::store::tests::rid(v, idx, rep),
                rep as u64,
                Some(s),
            );
        }
    }
    let r = aggregate(&[w.dir().to_path_buf()], &ReportOptions::default()).unwrap();
    assert_eq!(
        (r.rows[0].ddp_allreduce_ms, r.rows[0].ddp_exposed_ms),
        (None, None)
    );
    let (a, e) = (
        r.rows[1].ddp_allreduce_ms.unwrap(),
        r.rows[1].ddp_exposed_ms.unwrap(),
    );
    assert!((a - 11.0).abs() < 1e-9 && (e - 7.0).abs() < 1e-9, "{a} {e}");
    let whole = r.to_markdown();
    let md = &whole[whole.find("## Appendix").unwrap()..]; // the lead table keeps its nine
    let head = md.lines().find(|l| l.starts_with("| # |")).unwrap();
    assert!(
        head.ends_with("| all-reduce ms/step (exposed), DDP's clock |"),
        "{head}"
    );
    let cells = |name: &str| {
        md.lines()
            .find(|l| l.contains(&format!("| {name} |")))
            .unwrap()
            .split('|')
            .count()
    };
    assert_eq!(cells("one process"), head.split('|').count());
    for (v, end) in [("two ranks", "| 11.0 (7.0) |"), ("one process", "| - |")] {
        let row = |l: &&str| l.contains(&format!("| {v} |")) && l.ends_with(end);
        assert!(md.lines().any(|l| row(&l)), "{md}");
    }
    let csv = r.to_csv();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",graphs,ddp_allreduce_ms,ddp_exposed_ms")
    );
    assert!(csv.lines().nth(2).unwrap().ends_with(",11,7"), "{csv}");
    let plain = aggregate(
        &[fixture(tmp.path(), "plain", 1.0)],
        &ReportOptions::default(),
    )
    .unwrap()
    .to_markdown();
    assert!(!plain.contains("all-reduce ms/step"), "{plain}");
}

#[test]
fn a_variant_whose_steps_wait_for_the_loader_is_called_data_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(tmp.path(), "loader", "").unwrap();
    // hlb_s = 0.8 · dawn = 8 s: 2.4 s of loading is 30%, 0.2 s is 2.5%.
    for (idx, v, loader) in [(0, "CPU loader", 2.4), (1, "+ GPU data", 0.2)] {
        for rep in 0..2 {
            let mut s = crate::store::tests::summary(0.9, 10.0, None);
            s.clocks.loader_s = loader;
            crate::store::tests::feed(
                &mut w,
                crate::store::tests::rid(v, idx, rep),
                rep as u64,
                Some(s),
            );
        }
    }
    let r = aggregate(&[w.dir().to_path_buf()], &ReportOptions::default()).unwrap();
    let share = |i: usize| r.rows[i].loader_share.unwrap();
    assert!((share(0) - 0.30).abs() < 1e-9 && (share(1) - 0.025).abs() < 1e-9);
    let md = r.to_markdown();
    let line = md
        .lines()
        .find(|l| l.starts_with("*Data-bound*"))
        .expect(&md);
    assert!(
        line.contains("CPU loader (30.0%)") && !line.contains("GPU data"),
        "{line}"
    );
    // Runs with no loader at all, or from before the record: no line.
    let md = aggregate(
        &[fixture(tmp.path(), "plain", 1.0)],
        &ReportOptions::default(),
    )
    .unwrap()
    .to_markdown();
    assert!(!md.contains("Data-bound"), "{md}");
}

/// A table whose runs are mostly noisy says so at the top, and marks the
/// ratios and the Δ read from them in place; the terminal's short table
/// names the fastest variant and the largest significant saving.
#[test]
fn noisy_runs_put_a_banner_over_the_report_and_a_mark_on_their_ratios() {
    use crate::store::tests::{feed, rid, summary};
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
    // base 10/11/12 s quiet; + celu 6/6.5/7 s, two of them on a busy machine.
    for (idx, rep, t, noisy) in [
        (0, 0, 10.0, false),
        (0, 1, 11.0, false),
        (0, 2, 12.0, false),
        (1, 0, 6.0, true),
        (1, 1, 6.5, true),
        (1, 2, 7.0, false),
    ] {
        let mut s = summary(0.9, t, None);
        if noisy {
            s.noise = Some("other processes used 80% of the cores".into());
        }
        feed(
            &mut w,
            rid(if idx == 0 { "base" } else { "+ celu" }, idx, rep),
            rep as u64,
            Some(s),
        );
    }
    let dir = w.dir().to_path_buf();
    let r = aggregate(std::slice::from_ref(&dir), &ReportOptions::default()).unwrap();
    assert_eq!(r.noise(), (2, 6));
    let md = r.to_markdown();
    let banner = md.lines().nth(2).unwrap();
    assert!(
        banner.starts_with("> **Noisy.** 2 of 6 runs are noisy") && banner.contains("--drop-noisy"),
        "{md}"
    );
    // The lead table marks the Δ and counts the noisy runs; the appendix
    // marks the speed-up too.
    let lead = md
        .lines()
        .find(|l| l.starts_with("| 1 | + celu |"))
        .unwrap();
    assert!(
        lead.contains("* (noisy) | #0 |") && lead.ends_with("| 2 of 3 |"),
        "{lead}"
    );
    let appendix = &md[md.find("## Appendix").unwrap()..];
    let celu = appendix
        .lines()
        .find(|l| l.starts_with("| 1 | + celu |"))
        .unwrap();
    assert!(
        celu.contains("* (noisy) |") && celu.contains("×1.69 (noisy)"),
        "{celu}"
    );
    let base = md.lines().find(|l| l.starts_with("| 0 | base |")).unwrap();
    assert!(!base.contains("(noisy)"), "{base}");
    // No absolute path of this machine in the write-up.
    assert!(!md.contains(&root.path().display().to_string()), "{md}");

    let text = r.to_text();
    assert!(text.starts_with("! 2 of 6 runs are noisy"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().position(|l| l.starts_with("variant")).unwrap();
    // Aligned: every row's time ends in the head's column.
    let end = lines[head].find("time (s)").unwrap() + "time (s)".len();
    for row in &lines[head + 1..head + 3] {
        let at = |i: usize| row.chars().nth(i).unwrap_or(' ');
        assert!(at(end - 1).is_ascii_digit() && at(end) == ' ', "{text}");
    }
    assert!(lines[head + 2].contains("2 of 3"), "{text}");
    assert!(text.contains("fastest: + celu (6.50 s"), "{text}");
    assert!(
        text.contains("largest significant saving: + celu, −4.50 [")
            && text.contains("against base (noisy)"),
        "{text}"
    );

    // Without the noisy runs: no banner, no marks.
    let quiet = aggregate(
        &[dir],
        &ReportOptions {
            drop_noisy: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(quiet.noise_banner().is_none());
    assert!(!quiet.to_markdown().contains("(noisy)"));
    assert!(!quiet.to_text().starts_with('!'));
}

/// A ladder rung is read against the last rung with finished runs; where
/// that skips a rung (all its runs failed, or none ran yet) the Δ says so.
#[test]
fn a_delta_across_an_unfinished_rung_says_it_skipped_it() {
    let root = tempfile::tempdir().unwrap();
    let mut w = ResultsWriter::create(root.path(), "l", "").unwrap();
    for (idx, v, acc, t) in [(0, "base", 0.5, 10.0), (2, "+ two", 0.6, 6.0)] {
        for rep in 0..2 {
            let s = crate::store::tests::summary(acc + 0.01 * rep as f64, t + rep as f64, None);
            crate::store::tests::feed(
                &mut w,
                crate::store::tests::rid(v, idx, rep),
                rep as u64,
                Some(s),
            );
        }
    }
    crate::store::tests::feed(&mut w, crate::store::tests::rid("+ one", 1, 0), 0, None);
    let dir = w.dir().to_path_buf();
    drop(w);
    let r = aggregate(&[dir], &ReportOptions::default()).unwrap();
    let two = r.rows.iter().find(|x| x.variant == "+ two").unwrap();
    assert_eq!(
        (two.delta_vs.as_deref(), two.delta_skips),
        (Some("base"), 1)
    );
    assert!(
        r.to_text().contains("base (across 1 unfinished rung)"),
        "{}",
        r.to_text()
    );
    assert!(
        r.to_markdown().contains("(across 1 unfinished rung)"),
        "{}",
        r.to_markdown()
    );
}
