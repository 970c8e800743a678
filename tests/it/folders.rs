//! Results folders read right: a session whose table does not read is not
//! called complete, the same runs passed twice count once, and a session
//! its budget stopped says so. All on the planted trainer
//! (src/train/planted.rs): sessions in a fraction of a second.

use super::common::{err, headless, out, run, run_planted};
use super::interop::copy_dir;
use std::path::{Path, PathBuf};

/// A small planted session (two variants, two seeds each) under `res/small`.
fn small_session(dir: &Path) -> PathBuf {
    let m = dir.join("small.toml");
    std::fs::write(
        &m,
        "name = \"small\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"add-one\"\ndata = \"synthetic:100\"\nvary = [\"celu\"]\nrepeats = 2\nset = { epochs = 1, batch_size = 20, train_per_class = 0, test_per_class = 0 }\n",
    )
    .unwrap();
    let o = run_planted(&headless(&m, "res", &["--devices", "cpu"]), dir, "");
    assert!(o.status.success(), "{}", err(&o));
    let sessions = tricklab::store::sessions_below(&dir.join("res/small"), 1);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions[0].clone()
}

/// The `results` line of the session folder named `name`.
fn line_of<'a>(listing: &'a str, name: &str) -> &'a str {
    listing
        .lines()
        .find(|l| l.ends_with(name))
        .unwrap_or_else(|| panic!("no line for {name}:\n{listing}"))
}

#[test]
fn a_folder_passed_twice_or_copied_counts_once_and_unreadable_tables_are_said() {
    let tmp = tempfile::tempdir().unwrap();
    let f = small_session(tmp.path());
    let fs = f.to_str().unwrap();
    let copy = tmp.path().join("res/small/20990101-000000");
    copy_dir(&f, &copy);
    let report = |args: &[&str]| {
        let o = run(&[&["report"][..], args].concat(), tmp.path());
        assert!(o.status.success(), "{}", err(&o));
        (out(&o), err(&o))
    };
    let (alone, quiet) = report(&[fs]);
    assert!(!quiet.contains("warning"), "{quiet}");
    // Named twice (once with a trailing slash), or beside its copy: the
    // table of the folder alone, and one line saying why.
    let slashed = format!("{fs}/");
    for (args, says) in [
        (vec![fs, fs], "named twice; its runs are counted once"),
        (vec![fs, &slashed], "named twice; its runs are counted once"),
        (
            vec![fs, copy.to_str().unwrap()],
            "small/20990101-000000: a copy of small/",
        ),
    ] {
        let (md, warned) = report(&args);
        // The report of the folder alone, and its note line.
        let (notes, rest): (Vec<&str>, Vec<&str>) = md
            .split("\n\n")
            .partition(|b| b.starts_with("> **Note.** "));
        assert_eq!(rest.join("\n\n"), alone, "{args:?}");
        assert!(notes.len() == 1 && notes[0].contains(says), "{md}");
        let warnings: Vec<&str> = warned
            .lines()
            .filter(|l| l.starts_with("warning: "))
            .collect();
        assert!(
            warnings.len() == 1 && warnings[0].contains(says),
            "{args:?}: {warned}"
        );
    }
    let (md, _) = report(&[fs, copy.to_str().unwrap()]);
    assert!(
        md.contains("(the same 4 runs, to the microsecond); counted once"),
        "{md}"
    );
    // One session whose table is cut short, one whose table is gone.
    let cut = tmp.path().join("res/small/20990102-000000");
    let gone = tmp.path().join("res/small/20990103-000000");
    copy_dir(&f, &cut);
    copy_dir(&f, &gone);
    let bytes = std::fs::read(cut.join("runs.parquet")).unwrap();
    std::fs::write(cut.join("runs.parquet"), &bytes[..bytes.len() / 3]).unwrap();
    std::fs::remove_file(gone.join("runs.parquet")).unwrap();
    let o = run(&["results", "res"], tmp.path());
    let listing = out(&o);
    assert!(o.status.success(), "{}", err(&o));
    let name = |d: &Path| d.file_name().unwrap().to_string_lossy().into_owned();
    for d in [&f, &copy] {
        let l = line_of(&listing, &name(d));
        assert!(l.contains("    4      0         0  complete"), "{listing}");
    }
    let l = line_of(&listing, &name(&cut));
    assert!(
        l.contains("    0      0         0  unreadable (")
            && l.contains("is not a valid runs.parquet; delete it")
            && !l.contains("complete"),
        "{listing}"
    );
    let l = line_of(&listing, &name(&gone));
    assert!(
        l.contains(
            "unreadable (no runs.parquet, though 4 of its runs ended; `tricklab run --resume"
        ) && !l.contains("complete"),
        "{listing}"
    );
    let o = run(&["results", "res", "--format", "json"], tmp.path());
    let json: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let statuses: Vec<&str> = json["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["complete", "complete", "unreadable", "unreadable"],
        "{json}"
    );
}

#[test]
fn a_budget_that_stops_a_session_is_said_in_its_log_report_and_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("budgeted.toml");
    // Each run lasts 1.2 s (an epoch of 4 steps of 300 ms): the 1 s budget
    // is spent during the first, and the other three are never handed out.
    std::fs::write(
        &m,
        "name = \"budgeted\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:100\"\nbudget = \"1s\"\nrepeats = 4\nset = { epochs = 1, batch_size = 20, train_per_class = 0, test_per_class = 0 }\n[[variant]]\nname = \"only\"\n",
    )
    .unwrap();
    let o = run_planted(
        &headless(&m, "res", &["--devices", "cpu"]),
        tmp.path(),
        "step_ms=300",
    );
    let log = format!("{}{}", out(&o), err(&o));
    assert!(o.status.success(), "{log}");
    assert!(
        log.contains("budgeted: its budget of 1s is spent: 3 of its 4 runs were not run; `tricklab run --resume"),
        "{log}"
    );
    let dir = tricklab::store::sessions_below(&tmp.path().join("res/budgeted"), 1)
        .pop()
        .unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("> **Note.** budgeted/")
            && md.contains(
                "stopped by its budget of 1s: 1 of its 4 runs were handed out, 3 not run"
            ),
        "{md}"
    );
    let o = run(&["results", "res"], tmp.path());
    let listing = out(&o);
    assert!(
        listing.contains("    1      0         0  stopped by its budget (1 of 4 runs)"),
        "{listing}"
    );
}
