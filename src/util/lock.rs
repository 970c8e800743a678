//! One writer per folder: an OS file lock (`flock`) on `DIR/.tricklab.lock`,
//! held for as long as the [`FolderLock`] lives. The kernel releases it when
//! the holder exits, however it exits, so a lock left by a killed process is
//! simply taken over; the file's text (pid, host, since, command) only names
//! the holder in the error a second writer gets. flock is per host: on a
//! network file system two hosts are kept apart only where it forwards locks.

use anyhow::{Context, Result, bail};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const LOCK_FILE: &str = ".tricklab.lock";

/// A held lock on a folder.
#[derive(Debug)]
pub struct FolderLock {
    file: std::fs::File,
    path: PathBuf,
}

fn try_flock(file: &std::fs::File) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor this process owns.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

fn open(dir: &Path) -> Result<(std::fs::File, PathBuf)> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| {
            format!(
                "cannot open the lock {}; check the folder's permissions",
                path.display()
            )
        })?;
    Ok((file, path))
}

fn holder(file: &mut std::fs::File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
    let text = text.trim().replace('\n', ", ");
    if text.is_empty() {
        "another tricklab process".into()
    } else {
        text
    }
}

impl FolderLock {
    /// Takes `dir`'s lock for `what` (e.g. "writing results"), or fails at
    /// once with a one-line error naming the holder.
    pub fn acquire(dir: &Path, what: &str) -> Result<FolderLock> {
        let (mut file, path) = open(dir)?;
        if !try_flock(&file).with_context(|| format!("cannot lock {}", path.display()))? {
            bail!(
                "{} is locked by {} ({what} needs it alone): wait for that process to end, or stop it",
                dir.display(),
                holder(&mut file)
            );
        }
        FolderLock { file, path }.stamp(what)
    }

    /// Like [`FolderLock::acquire`], but waits up to `patience` for the
    /// holder to finish, printing once that it waits.
    pub fn acquire_waiting(dir: &Path, what: &str, patience: Duration) -> Result<FolderLock> {
        let (mut file, path) = open(dir)?;
        let start = Instant::now();
        let mut told = false;
        while !try_flock(&file).with_context(|| format!("cannot lock {}", path.display()))? {
            if start.elapsed() >= patience {
                bail!(
                    "{} is still locked by {} after {} s ({what} needs it alone): stop that process or try again",
                    dir.display(),
                    holder(&mut file),
                    patience.as_secs()
                );
            }
            if !told {
                eprintln!(
                    "waiting for {} ({}) to release {}",
                    holder(&mut file),
                    what,
                    dir.display()
                );
                told = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        FolderLock { file, path }.stamp(what)
    }

    /// Writes who holds the lock, for the error a second writer gets.
    fn stamp(mut self, what: &str) -> Result<FolderLock> {
        let host = super::machine::hostname();
        let text = format!(
            "pid {} on {host} since {}, {what}: {}\n",
            std::process::id(),
            chrono::Local::now().format("%Y-%m-%d %H:%M:%S"),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())?;
        self.file.sync_all()?;
        Ok(self)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_with_the_holders_name_and_a_released_lock_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let first = FolderLock::acquire(dir.path(), "writing results").unwrap();
        // flock locks are per open file description: a second open in this
        // process contends like another process would.
        let e = FolderLock::acquire(dir.path(), "resuming")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("pid {}", std::process::id())) && e.contains("writing results"),
            "{e}"
        );
        let e = FolderLock::acquire_waiting(dir.path(), "history", Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("still locked"), "{e}");
        drop(first);
        let again = FolderLock::acquire(dir.path(), "resuming").unwrap();
        assert!(
            std::fs::read_to_string(again.path())
                .unwrap()
                .contains("resuming")
        );
    }
}
