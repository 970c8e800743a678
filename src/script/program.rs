//! The program a script matrix's command starts: found before a session
//! opens (a command not found is refused then, not at its first run), and
//! the interpreter's and torch's versions read for the record.

use crate::record::ScriptRecord;
use anyhow::{Result, bail};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Where `program` is: a path (relative to the script's folder `dir`) when
/// it names one, else the first match on PATH.
pub fn find_program(program: &str, dir: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let p = dir.join(program);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `program` is a Python interpreter (`python`, `python3.11`, a
/// venv's `bin/python3`): torchrun then runs the script itself.
pub fn is_python(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("python"))
}

/// torchrun for a command started by `program`: beside the interpreter
/// where it names one by path (a venv's), else on PATH.
pub fn torchrun_for(program: &str, dir: &Path) -> Option<PathBuf> {
    let beside = find_program(program, dir)
        .filter(|_| program.contains('/'))
        .and_then(|p| p.parent().map(|d| d.join("torchrun")))
        .filter(|p| is_executable(p));
    beside.or_else(|| find_program("torchrun", dir))
}

/// Every variant's program is there (and torchrun where a variant spreads
/// over processes); returns a note per program with its versions.
pub fn preflight(runs: &[std::sync::Arc<ScriptRecord>]) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for r in runs {
        let program = &r.argv[0];
        let Some(found) = find_program(program, &r.dir) else {
            bail!(
                "command `{program}` is not found ({}); fix `command` in [script]",
                if program.contains('/') {
                    format!("no file {}", r.dir.join(program).display())
                } else {
                    "not on PATH".into()
                }
            );
        };
        if r.world_size > 1 && torchrun_for(program, &r.dir).is_none() {
            bail!(
                "world_size = {} starts the command under torchrun, which is neither beside `{program}` nor on PATH; install torch where the script runs",
                r.world_size
            );
        }
        // The records' adapter trains with torch: a Python without it
        // would fail every run the same way, after the session started.
        if r.argv.iter().any(|a| a == "tricklab.peers") && r.provenance.torch.is_none() {
            bail!(
                "`{program}` ({}) has no torch, which the published records need: activate the environment that has it (e.g. `source .venv/bin/activate`) or name its python in [script] command",
                found.display()
            );
        }
        let note = format!(
            "script: `{program}` is {}{}{}",
            found.display(),
            r.provenance
                .interpreter
                .as_ref()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default(),
            r.provenance
                .torch
                .as_ref()
                .map(|v| format!(", torch {v}"))
                .unwrap_or_default()
        );
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    Ok(notes)
}

/// An interpreter's version and torch's, where they answer.
pub type Versions = (Option<String>, Option<String>);

/// The interpreter's version and torch's (from its installed metadata:
/// torch is not imported) where `program` is a Python that answers; read
/// once a process for each.
pub fn versions(program: &str, dir: &Path) -> Versions {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, Versions>>> = OnceLock::new();
    let Some(path) = find_program(program, dir).filter(|_| is_python(program)) else {
        return (None, None);
    };
    let seen = SEEN.get_or_init(Default::default);
    if let Some(v) = seen.lock().expect("versions").get(&path) {
        return v.clone();
    }
    const ASK: &str = "import sys, importlib.metadata as m\nprint('Python ' + sys.version.split()[0])\ntry:\n    print(m.version('torch'))\nexcept Exception:\n    print('')\n";
    let out = std::process::Command::new(&path)
        .args(["-c", ASK])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let mut lines = out.lines().map(|l| l.trim().to_string());
    let v = (
        lines.next().filter(|l| !l.is_empty()),
        lines.next().filter(|l| !l.is_empty()),
    );
    seen.lock().expect("versions").insert(path, v.clone());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_run_by_a_python_without_torch_is_refused_before_the_session() {
        let rec = |torch: Option<&str>| {
            std::sync::Arc::new(ScriptRecord {
                argv: ["sh", "-m", "tricklab.peers", "hlb"]
                    .map(String::from)
                    .to_vec(),
                dir: std::env::temp_dir(),
                env: Default::default(),
                patches: Vec::new(),
                world_size: 1,
                timeout_s: None,
                parse: Vec::new(),
                provenance: crate::record::Provenance {
                    torch: torch.map(String::from),
                    ..Default::default()
                },
                data: None,
            })
        };
        let e = preflight(&[rec(None)]).unwrap_err().to_string();
        assert!(
            e.contains("has no torch") && e.contains("source .venv/bin/activate"),
            "{e}"
        );
        let notes = preflight(&[rec(Some("2.11.0"))]).unwrap();
        assert!(notes[0].contains("torch 2.11.0"), "{notes:?}");
    }
}
