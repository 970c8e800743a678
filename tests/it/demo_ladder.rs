//! The demo ladder end to end, exactly as README tells a new user to run it:
//! the embedded data, every rung, report and charts. Its wall time is
//! recorded in README (measured with `make bench`), not asserted here.

/// About 70 s in a clean CI: nine real trainings of the demo ladder, as a
/// new user's first session trains them (the embedded data, the charts),
/// so none can be planted; it runs alone, first (nextest.toml).
#[test]
fn demo_ladder_runs_headless_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let matrix = super::common::repo().join("ablations/demo-ladder.toml");
    let o = super::common::bin()
        .args([
            "run",
            matrix.to_str().unwrap(),
            "--headless",
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
    let base = tmp.path().join("res/demo-ladder");
    let dir = std::fs::read_dir(&base)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for f in [
        "runs.parquet",
        "report.md",
        "ladder.png",
        "ladder.svg",
        "accuracy.png",
        "curves.png",
        "pareto.png",
        "time_to_accuracy.png",
    ] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    // report.md shows its charts, by paths relative to it.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("![ladder](ladder.png)")
            && md.contains("![time_to_accuracy](time_to_accuracy.png)"),
        "{md}"
    );
    // README quotes this report's lead table: its header as the binary
    // prints it, and rows of the demo ladder's rungs in its columns.
    let readme = std::fs::read_to_string(super::common::repo().join("README.md")).unwrap();
    let head = md
        .lines()
        .find(|l| l.starts_with("| # | variant |"))
        .unwrap_or_else(|| panic!("no lead table in report.md:\n{md}"));
    let quoted: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != head)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(
        quoted.len() >= 3,
        "README.md quotes no report table under report.md's header (regenerate it from a demo ladder's report.md):\n{head}"
    );
    for row in &quoted[2..] {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            row.matches('|').count(),
            head.matches('|').count(),
            "README.md's quoted row has other columns than report.md's: {row}"
        );
        let rung = format!("| {} | {} |", cells[1], cells[2]);
        assert!(
            md.lines().any(|l| l.starts_with(&rung)),
            "README.md quotes a rung the demo ladder's report.md does not have: {row}"
        );
    }
    // "(TTA)" only on the rung that turns TTA on (the tiny recipe has it off).
    let err = String::from_utf8_lossy(&o.stderr);
    let done: Vec<&str> = err.lines().filter(|l| l.starts_with("done  ")).collect();
    assert_eq!(done.len(), 9, "{err}");
    let tta: Vec<&&str> = done.iter().filter(|l| l.contains("(TTA)")).collect();
    assert!(
        tta.len() == 1 && tta[0].contains("B8-9 + EMA, TTA"),
        "{err}"
    );
    // The report as a user reads it: every rung ran once and none failed,
    // each is read against the one before, its Δ as the runs say.
    super::common::check_ladder(&dir, 9, 1);
    // The terminal gets the short table: a line a rung, and the verdict.
    let rungs = out.lines().filter(|l| l.starts_with('B')).count();
    assert!(rungs == 9 && out.contains("fastest: B"), "{out}");
}
