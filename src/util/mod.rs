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
    let target = output_target(path)?;
    create_parent(&target)?;
    replace(path, &target, |tmp| fill_file(tmp, fill))
}

/// Like [`write_atomic_with`], into a folder that must already exist: a
/// results folder deleted under a session must not come back half-empty.
pub fn write_atomic_into(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let target = output_target(path)?;
    replace(path, &target, |tmp| fill_file(tmp, fill))
}

/// Like [`write_atomic_with`], for a writer that only takes a path
/// (libtorch's safetensors writer): `fill` writes the temporary file it is
/// given, which is then flushed and renamed into place.
pub fn write_atomic_path(path: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let target = output_target(path)?;
    create_parent(&target)?;
    replace(path, &target, |tmp| {
        fill(tmp)?;
        // fsync through a read-only handle: the writer closed its own.
        std::fs::File::open(tmp)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("cannot flush {} (disk full?)", tmp.display()))
    })
}

/// The file a write to `path` lands in. A rename over `path` would turn a
/// link into a copy (a weights file shared through a link would never
/// update) and a FIFO or device into a plain file (`/dev/null`, as root),
/// so links are followed to the file they name (a dangling one: the path it
/// names, created), and anything that exists but is not a file is refused.
pub fn output_target(path: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    // The kernel's own limit on links followed in one lookup (ELOOP).
    const MAX_LINKS: usize = 40;
    let mut p = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        // Any other failure to look (a parent that is a file, no permission)
        // is the write's to report, with the message it has for it.
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            return Ok(p);
        };
        let ty = meta.file_type();
        let kind = if ty.is_symlink() {
            let next = std::fs::read_link(&p)
                .with_context(|| format!("cannot read the link {}", p.display()))?;
            // A relative link names a path from the folder it sits in.
            p = match p.parent() {
                Some(dir) if next.is_relative() => dir.join(next),
                _ => next,
            };
            continue;
        } else if ty.is_file() {
            return Ok(p);
        } else if ty.is_dir() {
            "a folder"
        } else if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_char_device() {
            "a character device"
        } else if ty.is_block_device() {
            "a block device"
        } else if ty.is_socket() {
            "a socket"
        } else {
            "not a plain file"
        };
        let shown = if p == path {
            path.display().to_string()
        } else {
            format!("{} (a link to {})", path.display(), p.display())
        };
        anyhow::bail!("{shown} is {kind}, not a file: give a file path");
    }
    anyhow::bail!(
        "{}: more than {MAX_LINKS} links in a row (a loop?): give a file path",
        path.display()
    )
}

fn create_parent(target: &Path) -> Result<()> {
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create folder {}", dir.display()))
}

/// Creates the temporary file `tmp`, fills it and flushes it to disk.
fn fill_file(tmp: &Path, fill: impl FnOnce(&mut std::fs::File) -> Result<()>) -> Result<()> {
    let mut f =
        std::fs::File::create(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    fill(&mut f)?;
    f.sync_all()
        .with_context(|| format!("cannot flush {} (disk full?)", tmp.display()))
}

/// Writes `target` (the file `path` names, [`output_target`]) through a
/// temporary file beside it, renamed over it: beside the target, not the
/// link, as a rename does not cross file systems and must replace the file.
fn replace(path: &Path, target: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = temp_sibling(target);
    let result = fill(&tmp).and_then(|()| {
        std::fs::rename(&tmp, target)
            .with_context(|| format!("cannot move {} into place", target.display()))
    });
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
    /// `compare` and `nightly`: a regression, a variant that failed or is
    /// missing in the candidate, or (`--fail-inconclusive`) one inconclusive;
    /// `doctor` and `data check`: a problem found.
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

/// A hidden temporary name next to `path`, unique per process.
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
/// CSV's one null, in every table tricklab writes: a number that does not
/// exist (NaN, an infinity, no value) is an empty cell, which pandas, polars
/// and spreadsheets read as missing; never the text `NaN`.
pub fn csv_num(x: f64) -> String {
    if x.is_finite() {
        x.to_string()
    } else {
        String::new()
    }
}

/// [`csv_num`] of a value that may be absent.
pub fn csv_opt(x: Option<f64>) -> String {
    x.map_or_else(String::new, csv_num)
}

/// A text cell, quoted where RFC 4180 needs it (a comma, a quote, a newline).
pub fn csv_text(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

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

    fn mkfifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path for mkfifo(3).
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    fn is_fifo(p: &Path) -> bool {
        use std::os::unix::fs::FileTypeExt;
        std::fs::symlink_metadata(p).unwrap().file_type().is_fifo()
    }

    #[test]
    fn a_fifo_is_refused_unopened_and_stays_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipe");
        mkfifo(&p);
        // Opening it to write would block this test: the refusal comes first.
        for r in [
            write_atomic(&p, b"x"),
            write_atomic_into(&p, |_| Ok(())),
            write_atomic_path(&p, |_| Ok(())),
        ] {
            let msg = one_line(&r.unwrap_err());
            assert_eq!(
                msg,
                format!("{} is a FIFO, not a file: give a file path", p.display())
            );
        }
        assert!(is_fifo(&p));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_folder_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("keep"), b"k").unwrap();
        let err = write_atomic(&p, b"x").unwrap_err();
        assert!(!is_failure(&err), "the input's fault, not the machine's");
        assert_eq!(
            one_line(&err),
            format!("{} is a folder, not a file: give a file path", p.display())
        );
        assert_eq!(std::fs::read(p.join("keep")).unwrap(), b"k");
    }

    #[test]
    fn a_link_is_written_through_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let target = shared.join("w.safetensors");
        std::fs::write(&target, b"old").unwrap();
        // Two hops, the second relative to the first link's folder.
        let mid = shared.join("latest");
        std::os::unix::fs::symlink("w.safetensors", &mid).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&mid, &link).unwrap();
        assert_eq!(output_target(&link).unwrap(), target);
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert!(std::fs::symlink_metadata(&mid).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        write_atomic_path(&link, |tmp| {
            std::fs::write(tmp, b"newer").map_err(Into::into)
        })
        .unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"newer");
        // No temporary file left beside the link or the target.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 2);
    }

    #[test]
    fn a_dangling_link_creates_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/w.bin");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomic(&link, b"w").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"w");
    }

    #[test]
    fn a_link_to_a_fifo_or_a_loop_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        mkfifo(&fifo);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let msg = one_line(&write_atomic(&link, b"x").unwrap_err());
        assert!(
            msg.contains("link (a link to")
                && msg.ends_with("is a FIFO, not a file: give a file path"),
            "{msg}"
        );
        assert!(is_fifo(&fifo));
        let a = dir.path().join("a");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        let msg = one_line(&write_atomic(&a, b"x").unwrap_err());
        assert!(msg.contains("(a loop?)"), "{msg}");
    }
}
