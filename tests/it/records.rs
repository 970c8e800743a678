//! The published records' script matrices (ablations/*-script.toml). CI
//! has no copy of the records: there, each must name the one command that
//! fetches its copy. Where the copies are fetched (a developer's machine,
//! `make parity`), every variant's take-backs must apply, and the adapter's
//! own substitutions (python/tricklab/peers.py) must still match the
//! patched text on both devices, each exactly as often as it expects.

use super::common::repo;
use std::path::{Path, PathBuf};

fn records() -> Vec<PathBuf> {
    tricklab::matrix::matrix_files(&repo().join("ablations"))
        .into_iter()
        .filter(|f| tricklab::matrix::pins_a_published_copy(f))
        .collect()
}

#[test]
fn without_its_copy_each_record_matrix_names_the_command_that_fetches_it() {
    let files = records();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "airbench94-script",
        "airbench94-muon-script",
        "speedrun-script",
        "hlb-script",
        "page-final-script",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let empty = tempfile::tempdir().unwrap();
    let base = empty.path().join("ablations");
    std::fs::create_dir_all(&base).unwrap();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let origin = f.file_name().unwrap().to_string_lossy();
        let e = tricklab::matrix::parse_in(&text, &origin, &base).unwrap_err();
        let e = tricklab::util::one_line(&e);
        assert!(
            e.starts_with(&format!("{origin}:"))
                && e.contains("fetch it: git clone https://github.com/"),
            "{e}"
        );
        assert!(
            e.contains(&format!("{}", empty.path().join("peers").display())),
            "the copy is looked for in peers/ beside ablations/: {e}"
        );
    }
}

/// The adapter's name: the word after `tricklab.peers` in the command.
fn adapter_name(argv: &[String]) -> &str {
    let i = argv
        .iter()
        .position(|a| a == "tricklab.peers")
        .expect("runs tricklab.peers");
    &argv[i + 1]
}

/// The pinned files of `rec`'s folder, copied into `to` with its patches applied.
fn patched_copy(rec: &tricklab::record::ScriptRecord, files: &[String], to: &Path) {
    for f in files {
        let dest = to.join(f);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(rec.dir.join(f), &dest).unwrap();
    }
    for p in &rec.patches {
        let path = to.join(&p.file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches(&p.find).count(),
            p.count,
            "{}: {}",
            p.trick,
            p.find
        );
        std::fs::write(&path, text.replace(&p.find, &p.replace)).unwrap();
    }
}

#[test]
fn with_its_copy_every_variant_takes_back_cleanly_under_the_adapter() {
    let python = std::env::var("TRICKLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let tmp = tempfile::tempdir().unwrap();
    let mut jobs = Vec::new();
    for f in records() {
        let m = match tricklab::matrix::load(&f) {
            Ok(m) => m,
            // No copy here (CI): the test above checks what the user is told.
            Err(e) if format!("{e:#}").contains("fetch it:") => continue,
            Err(e) => panic!("{}: {e:#}", f.display()),
        };
        assert!(m.warnings.is_empty(), "{}: {:?}", f.display(), m.warnings);
        for i in 0..m.variants.len() {
            let v = m.variant_record(i);
            let rec = v.script().unwrap();
            let files: Vec<String> = rec.provenance.files.keys().cloned().collect();
            let to = tmp.path().join(format!("{}-{i}", m.name));
            patched_copy(rec, &files, &to);
            for device in ["cpu", "cuda"] {
                jobs.push(serde_json::json!({
                    "what": format!("{} / {} on {device}", m.name, v.name),
                    "argv": [adapter_name(&rec.argv), "--repo", to, "--list-changes", "--device", device],
                }));
            }
        }
    }
    if jobs.is_empty() {
        eprintln!("no fetched record copy under peers/: nothing to check here");
        return;
    }
    let list = tmp.path().join("jobs.json");
    std::fs::write(&list, serde_json::to_string(&jobs).unwrap()).unwrap();
    // One interpreter for every check: torch is imported once.
    let check = r#"
import contextlib, io, json, sys
from tricklab import peers
bad = []
for job in json.load(open(sys.argv[1])):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            peers.main(job["argv"])
    except (peers.PeerChanged, SystemExit, SyntaxError) as e:
        bad.append(f"{job['what']}: {e}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
"#;
    let o = std::process::Command::new(&python)
        .args(["-c", check])
        .arg(&list)
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
