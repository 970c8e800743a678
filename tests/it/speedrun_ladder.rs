//! hiverge's speedrun ladder rehearsed at CPU scale, as README tells a user to
//! try a GPU matrix first: every rung from airbench94_muon to the record runs,
//! with its results under the matrix's `-tiny` name.

#[test]
fn speedrun_ladder_runs_tiny_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let matrix = super::common::repo().join("ablations/speedrun-ladder.toml");
    let o = super::common::bin()
        .args([
            "run",
            matrix.to_str().unwrap(),
            "--tiny",
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
    // report.md: n = 1 and no failure on every rung (a busy machine may
    // flag the run noisy).
    let folder = std::fs::read_dir(tmp.path().join("res/speedrun-ladder-tiny"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let md = std::fs::read_to_string(folder.join("report.md")).unwrap();
    let rows: Vec<_> = md
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(" | R"))
        .filter(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[3] == "1" || cells[3] == "1 (1 noisy)") && cells[7] == "0"
        })
        .collect();
    assert_eq!(rows.len(), 13, "{md}");
    assert!(rows[12].contains("R12 retuned = the record"), "{md}");
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
