//! `tricklab data fetch cifar10`: download of the official archive with
//! resume, md5 check and an atomic extract.

use anyhow::{Context, Result, bail};
use md5::{Digest, Md5};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const CIFAR10_URL: &str = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
pub const CIFAR10_MD5: &str = "c32a1d4ab5d03f1284b67883e8d87530";
const ARCHIVE: &str = "cifar-10-binary.tar.gz";

pub struct FetchOptions {
    pub url: String,
    /// Folder that receives the archive and the extracted `cifar-10-batches-bin/`.
    pub dir: PathBuf,
    pub md5: String,
    pub progress: bool,
}

/// Downloads (resuming a `.part` file), verifies and extracts. Returns the
/// extracted folder. An archive already present and valid is not downloaded again.
pub fn fetch_cifar10(opts: &FetchOptions) -> Result<PathBuf> {
    std::fs::create_dir_all(&opts.dir)
        .with_context(|| format!("cannot create {}", opts.dir.display()))?;
    let archive = opts.dir.join(ARCHIVE);
    let part = opts.dir.join(format!("{ARCHIVE}.part"));
    if !(archive.is_file() && md5_file(&archive)? == opts.md5) {
        download(&opts.url, &part, opts.progress)?;
        let got = md5_file(&part)?;
        if got != opts.md5 {
            let _ = std::fs::remove_file(&part);
            bail!(
                "{}: md5 {got} does not match {} (truncated or corrupted download); it was deleted, run the command again",
                part.display(),
                opts.md5
            );
        }
        std::fs::rename(&part, &archive)
            .with_context(|| format!("cannot move {} into place", part.display()))?;
    }
    extract(&archive, &opts.dir)
}

fn download(url: &str, part: &Path, progress: bool) -> Result<()> {
    let have = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(std::time::Duration::from_secs(15)))
        .build()
        .into();
    let mut req = agent.get(url);
    if have > 0 {
        req = req.header("Range", format!("bytes={have}-"));
    }
    let offline = |e: ureq::Error| {
        anyhow::anyhow!(
            "cannot reach {url} ({e}); download the archive elsewhere and pass its path as the data set, or use --url"
        )
    };
    let mut resp = req.call().map_err(offline)?;
    let status = resp.status().as_u16();
    let resume = match status {
        206 => true,
        200 => false,
        416 if have > 0 => return Ok(()), // the part file is already complete
        s => bail!("{url} answered HTTP {s}; check the URL or pass --url"),
    };
    let remaining: Option<u64> = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(resume)
        .truncate(!resume)
        .open(part)
        .with_context(|| format!("cannot write {}", part.display()))?;
    let start = if resume { have } else { 0 };
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new(start + remaining.unwrap_or(0));
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_position(start);
        b
    });
    let mut body = resp.body_mut().as_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = body.read(&mut buf).with_context(|| {
            format!("download interrupted after {got} bytes; run the command again to resume")
        })?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])
            .with_context(|| format!("cannot write {} (disk full?)", part.display()))?;
        got += n as u64;
        if let Some(b) = &bar {
            b.set_position(start + got);
        }
    }
    file.sync_all()?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(r) = remaining
        && got < r
    {
        bail!("download stopped after {got} of {r} bytes; run the command again to resume");
    }
    Ok(())
}

fn md5_file(p: &Path) -> Result<String> {
    let mut f = std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Extracts into a temporary folder, checks it loads, then renames it into place.
fn extract(archive: &Path, dir: &Path) -> Result<PathBuf> {
    let dest = dir.join("cifar-10-batches-bin");
    let tmp = dir.join(".extract-tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    let file = std::fs::File::open(archive)?;
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(&tmp)
        .with_context(|| {
            format!(
                "{}: cannot extract (corrupt archive or disk full)",
                archive.display()
            )
        })
        .inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&tmp);
        })?;
    let inner = tmp.join("cifar-10-batches-bin");
    if let Err(e) = super::load_cifar_dir(&inner) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&inner, &dest)
        .with_context(|| format!("cannot move the extracted folder to {}", dest.display()))?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    /// A loopback HTTP/1.1 server that serves `body` (honouring Range) for
    /// `requests` connections, then stops.
    fn serve(body: Vec<u8>, requests: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(requests) {
                let mut stream = stream.unwrap();
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut start = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(r) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                        start = r.trim().trim_end_matches('-').parse().unwrap();
                    }
                }
                let head = if start > 0 {
                    format!(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\nConnection: close\r\n\r\n",
                        body.len() - start,
                        body.len() - 1,
                        body.len()
                    )
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                };
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body[start..]);
            }
        });
        format!("http://{addr}/{ARCHIVE}")
    }

    fn opts(url: String, dir: &Path, md5: &str) -> FetchOptions {
        FetchOptions {
            url,
            dir: dir.to_path_buf(),
            md5: md5.to_string(),
            progress: false,
        }
    }

    fn md5_of(b: &[u8]) -> String {
        hex::encode(Md5::digest(b))
    }

    #[test]
    fn downloads_verifies_extracts_and_resumes() {
        let archive = crate::data::cifar::testutil::make_archive(3);
        let md5 = md5_of(&archive);
        let dir = tempfile::tempdir().unwrap();
        let out = fetch_cifar10(&opts(serve(archive.clone(), 1), dir.path(), &md5)).unwrap();
        assert_eq!(crate::data::load_cifar_dir(&out).unwrap().train.len(), 15);

        // Resume: half of the file is already there; only the rest is requested.
        let dir2 = tempfile::tempdir().unwrap();
        std::fs::write(
            dir2.path().join(format!("{ARCHIVE}.part")),
            &archive[..archive.len() / 2],
        )
        .unwrap();
        let out = fetch_cifar10(&opts(serve(archive.clone(), 1), dir2.path(), &md5)).unwrap();
        assert_eq!(crate::data::load_cifar_dir(&out).unwrap().test.len(), 3);
    }

    #[test]
    fn truncated_and_corrupted_downloads_fail_cleanly() {
        let archive = crate::data::cifar::testutil::make_archive(3);
        let md5 = md5_of(&archive);
        for bad in [archive[..archive.len() - 100].to_vec(), {
            let mut c = archive.clone();
            c[200] ^= 0xff;
            c
        }] {
            let dir = tempfile::tempdir().unwrap();
            let e = format!(
                "{:#}",
                fetch_cifar10(&opts(serve(bad, 1), dir.path(), &md5)).unwrap_err()
            );
            assert!(e.contains("md5") && e.contains("does not match"), "{e}");
            assert!(!dir.path().join("cifar-10-batches-bin").exists());
            assert!(!dir.path().join(ARCHIVE).exists());
        }
    }

    #[test]
    fn offline_gives_a_clear_line() {
        // A port nobody listens on (bound then dropped).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:{port}/{ARCHIVE}");
        let e = format!(
            "{:#}",
            fetch_cifar10(&opts(url, dir.path(), CIFAR10_MD5)).unwrap_err()
        );
        assert!(e.contains("cannot reach") && e.contains("--url"), "{e}");
    }
}
