//! The CIFAR-10 binary format: records of 1 label byte + 3072 image bytes
//! (C×H×W, 32×32), in `data_batch_1..5.bin` and `test_batch.bin`.

use super::{Dataset, Split, content_hash};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

pub const CIFAR10_CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];
const RECORD: usize = 3073;
const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILE: &str = "test_batch.bin";

fn parse_records(bytes: &[u8], origin: &str, into: &mut Split) -> Result<()> {
    if bytes.is_empty() {
        bail!("{origin}: empty file; download the archive again (`tricklab data fetch cifar10`)");
    }
    if !bytes.len().is_multiple_of(RECORD) {
        bail!(
            "{origin}: {} bytes is not a whole number of {RECORD}-byte records (truncated or not CIFAR-10 binary); download the archive again",
            bytes.len()
        );
    }
    for (i, rec) in bytes.chunks_exact(RECORD).enumerate() {
        if rec[0] >= 10 {
            bail!(
                "{origin}: record {i} has label {} (CIFAR-10 labels are 0-9); the file is damaged",
                rec[0]
            );
        }
        into.labels.push(rec[0]);
        into.images.extend_from_slice(&rec[1..]);
    }
    Ok(())
}

fn assemble(files: &BTreeMap<String, Vec<u8>>, origin: &str, name: &str) -> Result<Dataset> {
    let mut train = Split {
        images: Vec::new(),
        labels: Vec::new(),
    };
    let mut test = Split {
        images: Vec::new(),
        labels: Vec::new(),
    };
    for f in TRAIN_FILES {
        let bytes = files.get(f).with_context(|| format!("{origin}: missing {f}; the CIFAR-10 binary set has data_batch_1..5.bin and test_batch.bin"))?;
        parse_records(bytes, &format!("{origin}/{f}"), &mut train)?;
    }
    let bytes = files
        .get(TEST_FILE)
        .with_context(|| format!("{origin}: missing {TEST_FILE}"))?;
    parse_records(bytes, &format!("{origin}/{TEST_FILE}"), &mut test)?;
    let classes = match files.get("batches.meta.txt") {
        Some(meta) => {
            let names: Vec<String> = String::from_utf8_lossy(meta)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            if names.len() == 10 {
                names
            } else {
                CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect()
            }
        }
        None => CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect(),
    };
    let mut d = Dataset {
        name: name.into(),
        classes,
        channels: 3,
        height: 32,
        width: 32,
        train,
        test,
        hash: String::new(),
    };
    d.hash = content_hash(&d);
    Ok(d)
}

/// Loads an extracted `cifar-10-batches-bin` folder.
pub fn load_cifar_dir(dir: &Path) -> Result<Dataset> {
    let mut files = BTreeMap::new();
    for f in TRAIN_FILES.iter().chain([&TEST_FILE, &"batches.meta.txt"]) {
        let p = dir.join(f);
        if p.exists() {
            files.insert(
                f.to_string(),
                std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?,
            );
        }
    }
    assemble(&files, &dir.display().to_string(), "cifar10")
}

/// Loads `cifar-10-binary.tar.gz` straight from the archive, without extracting it.
pub fn load_cifar_archive(archive: &Path) -> Result<Dataset> {
    let file = std::fs::File::open(archive)
        .with_context(|| format!("cannot open {}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let mut files = BTreeMap::new();
    let corrupt = || {
        format!(
            "{}: truncated or corrupt archive; download it again",
            archive.display()
        )
    };
    for entry in tar.entries().with_context(corrupt)? {
        let mut entry = entry.with_context(corrupt)?;
        let path = entry.path().with_context(corrupt)?.to_path_buf();
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().to_string()) else {
            continue;
        };
        if TRAIN_FILES.contains(&name.as_str()) || name == TEST_FILE || name == "batches.meta.txt" {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).with_context(corrupt)?;
            files.insert(name, bytes);
        }
    }
    if files.is_empty() {
        bail!(
            "{}: no CIFAR-10 batch files in this archive",
            archive.display()
        );
    }
    assemble(&files, &archive.display().to_string(), "cifar10")
}

/// Test helpers shared with the downloader's tests.
#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A CIFAR-format archive with `per_file` records per batch file, as
    /// `cifar-10-batches-bin/...` inside a .tar.gz.
    pub fn make_archive(per_file: usize) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut add = |name: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, format!("cifar-10-batches-bin/{name}"), data)
                .unwrap();
        };
        for (fi, f) in TRAIN_FILES.iter().chain([&TEST_FILE]).enumerate() {
            let mut data = Vec::new();
            for r in 0..per_file {
                data.push(((r + fi) % 10) as u8);
                data.extend((0..3072).map(|i| ((i + r * 7 + fi) % 251) as u8));
            }
            add(f, &data);
        }
        add("batches.meta.txt", CIFAR10_CLASSES.join("\n").as_bytes());
        let raw = tar.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        gz.finish().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_and_folder_load_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("cifar-10-binary.tar.gz");
        std::fs::write(&a, testutil::make_archive(4)).unwrap();
        let d = load_cifar_archive(&a).unwrap();
        assert_eq!((d.train.len(), d.test.len()), (20, 4));
        assert_eq!(d.classes[9], "truck");
        let out = dir.path().join("x");
        tar::Archive::new(flate2::read::GzDecoder::new(
            std::fs::File::open(&a).unwrap(),
        ))
        .unpack(&out)
        .unwrap();
        let f = load_cifar_dir(&out.join("cifar-10-batches-bin")).unwrap();
        assert_eq!(d, f);
        assert_eq!(crate::data::load(out.to_str().unwrap()).unwrap(), d);
    }

    #[test]
    fn short_missing_and_bad_label_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for f in TRAIN_FILES.iter().chain([&TEST_FILE]) {
            std::fs::write(p.join(f), vec![1u8; RECORD * 2]).unwrap();
        }
        assert_eq!(load_cifar_dir(p).unwrap().train.len(), 10);
        std::fs::write(p.join("data_batch_3.bin"), vec![1u8; RECORD + 5]).unwrap();
        let e = format!("{:#}", load_cifar_dir(p).unwrap_err());
        assert!(
            e.contains("data_batch_3.bin") && e.contains("whole number"),
            "{e}"
        );
        std::fs::write(p.join("data_batch_3.bin"), vec![12u8; RECORD]).unwrap();
        let e = format!("{:#}", load_cifar_dir(p).unwrap_err());
        assert!(e.contains("label 12"), "{e}");
        std::fs::remove_file(p.join("test_batch.bin")).unwrap();
        std::fs::write(p.join("data_batch_3.bin"), vec![1u8; RECORD]).unwrap();
        let e = format!("{:#}", load_cifar_dir(p).unwrap_err());
        assert!(e.contains("missing test_batch.bin"), "{e}");
    }

    #[test]
    fn truncated_archive_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("c.tar.gz");
        let bytes = testutil::make_archive(3);
        std::fs::write(&a, &bytes[..bytes.len() / 2]).unwrap();
        let e = format!("{:#}", load_cifar_archive(&a).unwrap_err());
        assert!(
            e.contains("c.tar.gz") && e.contains("truncated or corrupt"),
            "{e}"
        );
    }
}
