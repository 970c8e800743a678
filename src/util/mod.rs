//! Small helpers at the bottom of the crate, used by every layer above:
//! atomic writes, one-line errors, devices, statistics.

pub mod device;
pub mod lock;
pub mod machine;
pub mod signals;
pub mod splitmix;

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through a temporary file in the same folder and a
/// rename, so a reader (or a crash) never sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes).map_err(Into::into))
}

/// Like [`write_atomic`], for writers that stream into the file.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create folder {}", dir.display()))?;
    write_atomic_into(path, fill)
}

/// Like [`write_atomic_with`], into a folder that must already exist: a
/// results folder deleted under a session must not come back half-empty.
pub fn write_atomic_into(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let tmp = temp_sibling(path);
    let result = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        fill(&mut f)?;
        f.sync_all()
            .with_context(|| format!("cannot flush {} (disk full?)", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} into place", path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
        .with_context(|| format!("writing {} failed; nothing was replaced", path.display()))
        .map_err(failure)
}

/// The project's python (`.venv`'s, else `python3` on PATH): the published
/// scripts and the exporters run on it.
pub fn default_python() -> PathBuf {
    let venv = PathBuf::from(".venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// The layout of `manifest.json`, `runs.parquet`, the step files and every
/// command's `--format json` (docs/reference.md, "Schema"): 2 added the typed
/// configuration columns, the tricks as a list, `finished_at` as a
/// timestamp, plain Parquet strings and the JSON outputs.
pub const SCHEMA_VERSION: u32 = 2;

/// How a command prints what it found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TextOrJson {
    /// For people.
    #[default]
    Text,
    /// One JSON document with `schema_version`, lowercase words for every enum.
    Json,
}

/// Prints `v` (an object) as the command's JSON document, with `schema_version`.
pub fn print_json(v: serde_json::Value) {
    let mut doc = serde_json::Map::new();
    doc.insert("schema_version".into(), SCHEMA_VERSION.into());
    match v {
        serde_json::Value::Object(o) => doc.extend(o),
        other => {
            doc.insert("data".into(), other);
        }
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::Value::Object(doc)).unwrap_or_default()
    );
}

/// The process exit codes (docs/reference.md, "Exit codes"), so that a script or CI can
/// tell a slow night from a broken one.
pub mod exit {
    /// Done; `compare` and `nightly`: no regression.
    pub const OK: i32 = 0;
    /// `compare` and `nightly`: a regression, or a variant that failed or is
    /// missing in the candidate; `doctor` and `data check`: a problem found.
    pub const REGRESSION: i32 = 1;
    /// The command line, or a file or folder it names, is wrong: fix the input.
    pub const INPUT: i32 = 2;
    /// tricklab or its machine failed (a write, a full disk, libtorch).
    pub const FAILURE: i32 = 3;
}

/// An error of tricklab's own doing or its machine's, not of the input:
/// exit [`exit::FAILURE`]. Displays as the error it wraps.
#[derive(Debug)]
pub struct Failure(String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// Marks `e` as a failure of the tool or machine (exit 3).
pub fn failure(e: anyhow::Error) -> anyhow::Error {
    if is_failure(&e) {
        return e;
    }
    anyhow::Error::new(Failure(one_line(&e)))
}

pub fn is_failure(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Failure>())
}

/// A full disk (or quota) anywhere in `e`'s chain: the machine's failure,
/// not the input's, whichever command met it.
pub fn is_disk_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            io.kind() == std::io::ErrorKind::StorageFull
                || matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        })
    })
}

/// The exit code of a command that ended in `e`.
pub fn exit_code_of(e: &anyhow::Error) -> i32 {
    if is_failure(e) || is_disk_full(e) {
        exit::FAILURE
    } else {
        exit::INPUT
    }
}

/// The whole error chain on one line, without a backtrace.
pub fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// A hidden temporary name next to `path`, unique per process.
/// Free space a results folder keeps for the next run: its per-step and
/// per-epoch tables take a few MiB at most. `TRICKLAB_MIN_FREE_MB` overrides it.
pub fn min_free_bytes() -> u64 {
    std::env::var("TRICKLAB_MIN_FREE_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(64)
        .saturating_mul(1 << 20)
}

/// Bytes available to this user on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .with_context(|| format!("{}: a path with a NUL byte", dir.display()))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the call to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        anyhow::bail!(
            "cannot read the free space of {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Can a run's results still be stored in `dir`? Checked before each run is
/// handed to a worker, so that a full or read-only disk does not let runs
/// train for nothing.
pub fn check_storage(dir: &Path, need: u64) -> Result<()> {
    let resume = format!("then `tricklab run --resume {}`", dir.display());
    let probe = dir.join(format!(".tricklab-probe-{}", std::process::id()));
    if let Err(e) = std::fs::write(&probe, b"ok") {
        let _ = std::fs::remove_file(&probe);
        return Err(failure(anyhow::anyhow!(
            "{} is not writable ({e}): fix its permissions or free space, {resume}",
            dir.display()
        )));
    }
    let _ = std::fs::remove_file(&probe);
    let free = free_bytes(dir).map_err(failure)?;
    if free < need {
        return Err(failure(anyhow::anyhow!(
            "{}: {} MiB free on its disk, a run needs {} MiB: free space (or lower TRICKLAB_MIN_FREE_MB), {resume}",
            dir.display(),
            free >> 20,
            need >> 20
        )));
    }
    Ok(())
}

pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// "90s", "30m", "2h" (or plain seconds), positive and at most a week.
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_alphabetic()).unwrap_or(s.len()));
    let v: f64 = num.trim().parse().ok()?;
    let secs = match unit.trim() {
        "s" | "" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs > 0.0 && secs <= 7.0 * 24.0 * 3600.0)
        .then(|| std::time::Duration::from_secs_f64(secs))
}

/// A number that JSON carried as `null` (serde_json writes a NaN or an
/// infinity so), read back as NaN: an epoch without an evaluation, a
/// diverged loss. Without it the whole line fails to parse, and a rank's
/// message would be lost (issue 64).
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// As [`nan_if_null`], for each of a list's numbers (a diverged net's BN scales).
pub fn nans_if_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<f32>, D::Error> {
    use serde::Deserialize;
    Ok(Vec::<Option<f32>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f32::NAN))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_fill_keeps_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"old").unwrap();
        let err = write_atomic_with(&p, |_| anyhow::bail!("boom")).unwrap_err();
        assert!(format!("{err:#}").contains("nothing was replaced"));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
    }
}
