//! Small helpers at the bottom of the crate, used by every layer above:
//! atomic writes, one-line errors, devices, statistics.

pub mod device;
pub mod native;
pub mod stats;

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
    result.with_context(|| format!("writing {} failed; nothing was replaced", path.display()))
}

/// The whole error chain on one line, without a backtrace.
pub fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// A hidden temporary name next to `path`, unique per process.
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
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
