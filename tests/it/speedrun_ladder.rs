//! hiverge's speedrun ladder rehearsed at CPU scale, as README tells a user to
//! try a GPU matrix first: every rung from airbench94_muon to the record runs,
//! with its results under the matrix's `-tiny` name.

/// Thirteen real tiny trainings, one a rung, each a different code path of
/// the engine (the record's changes), so none can be planted; it runs alone,
/// first (nextest.toml). On 1,000 synthetic images (`--data`, which the tiny
/// form's embedded 4,000 give way to) each rung trains in about 1.5 s where
/// the embedded data took 6 s: 32 s in all against 117 s, every code path
/// the same.
#[test]
fn speedrun_ladder_runs_tiny_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let matrix = super::common::repo().join("ablations/speedrun-ladder.toml");
    let o = super::common::bin()
        .args([
            "run",
            matrix.to_str().unwrap(),
            "--tiny",
            "--data",
            "synthetic:1000",
            "--headless",
            "--repeats",
            "1",
            "--devices",
            "cpu",
            "--results",
            "res",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(tmp.path().join("res/speedrun-ladder-tiny").is_dir());
    assert!(!tmp.path().join("res/speedrun-ladder").exists());
    // The report as a user reads it: every rung ran once and none failed,
    // each is read against the one before, its Δ as the runs say.
    let folder = std::fs::read_dir(tmp.path().join("res/speedrun-ladder-tiny"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let report = super::common::check_ladder(&folder, 13, 1);
    assert_eq!(report["rows"][12]["variant"], "R12 retuned = the record");
    // The terminal gets the short table: a line a rung, and the verdict.
    let rungs = out.lines().filter(|l| l.starts_with('R')).count();
    assert!(rungs == 13 && out.contains("fastest: R"), "{out}");
    // Each finished run is reported on its recipe's own clock (airbench's here).
    let err = String::from_utf8_lossy(&o.stderr);
    let done: Vec<&str> = err.lines().filter(|l| l.starts_with("done  ")).collect();
    assert_eq!(done.len(), 13, "{err}");
    assert!(
        done.iter().all(|l| l.contains(" s on the airbench clock")),
        "{err}"
    );
}
