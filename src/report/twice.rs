//! The same runs passed to a report twice: one folder named twice
//! (`report F F`, `report F ./F/`), or a folder and its copy (`cp -r`).
//! Counted twice, every n doubles and every interval narrows with no new
//! run behind it; so each run counts once, and the report says so.

use crate::store::{Folder, RunRow, session_label};
use std::collections::HashMap;
use std::path::PathBuf;

/// A run as two folders can both hold it: copied, not run again, it keeps
/// its matrix, variant, repeat, seed and end time to the microsecond (as
/// `compare`'s `is_copy` reads a copy).
type RunKey = (String, String, u32, u64, i64);

fn key(r: &RunRow) -> Option<RunKey> {
    let at = r.finished_at.0.timestamp_micros();
    // A table that recorded no end time cannot tell two runs apart by it.
    (at > 0).then(|| (r.matrix.clone(), r.variant.clone(), r.repeat, r.seed, at))
}

/// Drops from `folders` what an earlier folder of the list holds already: a
/// folder named again, or the runs a copy repeats (a folder left with none
/// is dropped). One line a folder that lost runs, for the report's notes.
pub fn count_once(folders: &mut Vec<Folder>) -> Vec<String> {
    let mut notes = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut owner: HashMap<RunKey, usize> = HashMap::new();
    let mut kept = Vec::new();
    for mut f in std::mem::take(folders) {
        let path = f.dir.canonicalize().unwrap_or_else(|_| f.dir.clone());
        if paths.contains(&path) {
            notes.push(format!(
                "{}: named twice; its runs are counted once",
                session_label(&f.dir)
            ));
            continue;
        }
        let before = f.runs.len();
        let mut first = None;
        f.runs.retain(|r| match key(r).and_then(|k| owner.get(&k)) {
            Some(&i) => {
                first.get_or_insert(i);
                false
            }
            None => true,
        });
        let here = kept.len();
        for r in &f.runs {
            if let Some(k) = key(r) {
                owner.entry(k).or_insert(here);
            }
        }
        if let Some(i) = first {
            notes.push(copy_note(&kept[i], &f, before));
        }
        paths.push(path);
        if f.runs.is_empty() && before > 0 {
            continue;
        }
        kept.push(f);
    }
    // A folder dropped whole took no index: `owner` only names kept ones.
    *folders = kept;
    notes
}

/// The line for `copy`, which repeated runs of `of` (it held `before`).
fn copy_note(of: &Folder, copy: &Folder, before: usize) -> String {
    let (a, b) = (session_label(&of.dir), session_label(&copy.dir));
    // A copy elsewhere can end in the same two names as its original (the
    // report names no path of the machine it was written on).
    let (a, b) = if a == b {
        (
            format!("{a} (the first named)"),
            format!("{b} (the second)"),
        )
    } else {
        (a, b)
    };
    let repeated = before - copy.runs.len();
    if copy.runs.is_empty() {
        format!("{b}: a copy of {a} (the same {repeated} runs, to the microsecond); counted once")
    } else {
        format!(
            "{b}: {repeated} of its {before} runs are {a}'s (the same runs, to the microsecond); counted once"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{feed, rid, summary};

    /// A folder of three finished runs of `m`, and a copy of it in a
    /// second results root (as `cp -r` makes one).
    fn folder_and_copy(root: &std::path::Path) -> (PathBuf, PathBuf) {
        let mut w = crate::store::ResultsWriter::create(&root.join("a"), "m", "").unwrap();
        for rep in 0..3 {
            feed(
                &mut w,
                rid("base", 0, rep),
                rep as u64,
                Some(summary(0.9, 10.0 + rep as f64, None)),
            );
        }
        let dir = w.dir().to_path_buf();
        let copy = root.join("b/m").join(dir.file_name().unwrap());
        std::fs::create_dir_all(&copy).unwrap();
        for f in ["manifest.json", "runs.parquet"] {
            std::fs::copy(dir.join(f), copy.join(f)).unwrap();
        }
        (dir, copy)
    }

    fn open(dirs: &[&PathBuf]) -> Vec<Folder> {
        dirs.iter().map(|d| Folder::open(d).unwrap()).collect()
    }

    #[test]
    fn a_folder_named_twice_or_copied_counts_once() {
        let root = tempfile::tempdir().unwrap();
        let (dir, copy) = folder_and_copy(root.path());
        let mut one = open(&[&dir]);
        assert!(count_once(&mut one).is_empty());
        let dotted = dir.join(".");
        let mut twice = open(&[&dir, &dotted]);
        let notes = count_once(&mut twice);
        assert_eq!(twice.len(), 1);
        assert_eq!(
            notes,
            [format!(
                "{}: named twice; its runs are counted once",
                session_label(&dir)
            )]
        );
        let mut copied = open(&[&dir, &copy]);
        let notes = count_once(&mut copied);
        assert_eq!((copied.len(), copied[0].dir.clone()), (1, dir.clone()));
        // The two end in the same `m/<timestamp>`: said which is which.
        let label = session_label(&dir);
        assert_eq!(
            notes,
            [format!(
                "{label} (the second): a copy of {label} (the first named) (the same 3 runs, to the microsecond); counted once"
            )]
        );
    }

    #[test]
    fn a_folder_that_repeats_some_runs_keeps_the_others() {
        let root = tempfile::tempdir().unwrap();
        let (dir, copy) = folder_and_copy(root.path());
        let mut folders = open(&[&dir, &copy]);
        // The copy's last run was run again: another end time.
        let again = folders[1].runs.last_mut().unwrap();
        again.finished_at.0 += chrono::Duration::seconds(1);
        let notes = count_once(&mut folders);
        assert_eq!(
            (folders.len(), folders[0].runs.len(), folders[1].runs.len()),
            (2, 3, 1)
        );
        assert!(
            notes.len() == 1 && notes[0].contains("2 of its 3 runs are"),
            "{notes:?}"
        );
        // Runs without an end time are never taken for each other.
        let mut old = open(&[&dir, &copy]);
        for f in &mut old {
            for r in &mut f.runs {
                r.finished_at.0 = chrono::DateTime::UNIX_EPOCH;
            }
        }
        assert!(count_once(&mut old).is_empty());
        assert_eq!(old.len(), 2);
    }
}
