//! Data sets: every source loads into one in-memory form, [`Dataset`].
//!
//! Sources: the embedded default (a real-image CIFAR-10 subset compiled into
//! the binary), the CIFAR-10 binary format (folder or the official archive),
//! image folders imported once into a binary cache, and a seeded synthetic
//! generator for tests.

mod cache;
mod check;
mod cifar;
mod embedded;
mod export;
mod fetch;
mod folder;
pub mod stream;
mod synthetic;

pub use cache::{read_cache, write_cache};
pub use check::{Problem, check};
pub use cifar::{CIFAR10_CLASSES, load_cifar_archive, load_cifar_dir};
pub use embedded::{EMBEDDED, load_embedded, make_embedded};
pub use export::export_raw;
pub use fetch::{CIFAR10_MD5, CIFAR10_URL, FetchOptions, fetch_cifar10};
pub use folder::{import, read_image_tree};
pub use synthetic::synthetic;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Images of one split, uint8, laid out N×C×H×W (CIFAR's own record layout).
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub name: String,
    pub classes: Vec<String>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub train: Split,
    pub test: Split,
    /// Hex sha256 over shapes, class names, images and labels (see [`content_hash`]).
    pub hash: String,
}

impl Dataset {
    pub fn image_bytes(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Training images `subset(train_per_class, _)` would keep, without copying them.
    pub fn train_len(&self, train_per_class: Option<usize>) -> usize {
        self.kept(&self.train, train_per_class)
    }

    /// Test images `subset(_, test_per_class)` would keep, without copying them.
    pub fn test_len(&self, test_per_class: Option<usize>) -> usize {
        self.kept(&self.test, test_per_class)
    }

    fn kept(&self, split: &Split, per_class: Option<usize>) -> usize {
        let Some(per) = per_class else {
            return split.len();
        };
        let mut counts = vec![0usize; self.classes.len()];
        for &l in &split.labels {
            counts[l as usize] += 1;
        }
        counts.iter().map(|&c| c.min(per)).sum()
    }

    /// The first `train_per_class` / `test_per_class` images of each class, in
    /// the original order; the hash is recomputed.
    pub fn subset(&self, train_per_class: Option<usize>, test_per_class: Option<usize>) -> Dataset {
        let take = |split: &Split, per: Option<usize>| -> Split {
            let Some(per) = per else { return split.clone() };
            let mut counts = vec![0usize; self.classes.len()];
            let sz = self.image_bytes();
            let mut out = Split {
                images: Vec::new(),
                labels: Vec::new(),
            };
            for (i, &l) in split.labels.iter().enumerate() {
                let c = &mut counts[l as usize];
                if *c < per {
                    *c += 1;
                    out.labels.push(l);
                    out.images
                        .extend_from_slice(&split.images[i * sz..(i + 1) * sz]);
                }
            }
            out
        };
        let mut d = Dataset {
            name: self.name.clone(),
            classes: self.classes.clone(),
            channels: self.channels,
            height: self.height,
            width: self.width,
            train: take(&self.train, train_per_class),
            test: take(&self.test, test_per_class),
            hash: String::new(),
        };
        d.hash = content_hash(&d);
        d
    }

    /// Counts of each class in a split.
    pub fn class_counts(&self, split: &Split) -> Vec<usize> {
        let mut counts = vec![0usize; self.classes.len()];
        for &l in &split.labels {
            if let Some(c) = counts.get_mut(l as usize) {
                *c += 1;
            }
        }
        counts
    }
}

/// The order an import gives each split. CIFAR-10's own files are class-mixed,
/// and the references whiten from "the first N training images" (airbench
/// 5,000, hiverge's speedrun 960, Page 10,000); an image tree lists its images
/// class by class, so the first 960 would all be airplanes. An import therefore
/// interleaves the classes round robin: image 0 of every class in class order,
/// then image 1 of every class, and so on, each class in file-name order (a
/// class that runs out is skipped). Every prefix holds each class to within one
/// image; the order needs no random numbers, so any tool can rebuild it.
pub const IMPORT_ORDER: &str = "class-interleaved";

/// `split` reordered into [`IMPORT_ORDER`], keeping each class's own order.
/// The most bytes an image file may hold: far past any real photograph
/// (a 100-megapixel JPEG is tens of MB), short of a device's endless stream.
pub const MAX_IMAGE_FILE_BYTES: u64 = 256 << 20;

/// An image file's bytes, read only if it is a regular file (after links)
/// of at most [`MAX_IMAGE_FILE_BYTES`]: a FIFO would block the reader for
/// ever and a link to /dev/zero would fill the memory.
pub fn read_image_file(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let meta = image_file_meta(path)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path)
        .context("cannot read it")?
        .take(MAX_IMAGE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .context("cannot read it")?;
    if bytes.len() as u64 > MAX_IMAGE_FILE_BYTES {
        anyhow::bail!("it grew past {} MB while read", MAX_IMAGE_FILE_BYTES >> 20);
    }
    Ok(bytes)
}

/// An image file's two ends, as [`read_image_file`] would admit it: its
/// first `head` bytes, then its last 1 KiB where the file is longer. The
/// header and the end marker are there, so a folder of any size is checked
/// without reading its pixels (the session's pre-check).
pub fn read_image_ends(path: &std::path::Path, head: usize) -> Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 1024;
    let meta = image_file_meta(path)?;
    let mut f = std::fs::File::open(path).context("cannot read it")?;
    let mut bytes = Vec::new();
    (&mut f)
        .take(head as u64)
        .read_to_end(&mut bytes)
        .context("cannot read it")?;
    if meta.len() > bytes.len() as u64 {
        let from = meta.len().saturating_sub(TAIL).max(bytes.len() as u64);
        f.seek(SeekFrom::Start(from)).context("cannot read it")?;
        f.take(TAIL)
            .read_to_end(&mut bytes)
            .context("cannot read it")?;
    }
    Ok(bytes)
}

/// What every image reader asks of a path first: a regular file, not too large.
fn image_file_meta(path: &std::path::Path) -> Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path).context("cannot read it (a broken link?)")?;
    if !meta.is_file() {
        anyhow::bail!(
            "not a regular file (a FIFO, device, socket or folder, or a link to one): move it out of the image folder"
        );
    }
    if meta.len() > MAX_IMAGE_FILE_BYTES {
        anyhow::bail!(
            "{} MB, more than an image file can be ({} MB): move it out of the image folder",
            meta.len() >> 20,
            MAX_IMAGE_FILE_BYTES >> 20
        );
    }
    Ok(meta)
}

pub fn interleave_classes(split: &Split, classes: usize, image_bytes: usize) -> Split {
    let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); classes.max(1)];
    for (i, &l) in split.labels.iter().enumerate() {
        by_class[(l as usize).min(classes.max(1) - 1)].push(i);
    }
    let longest = by_class.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Split {
        images: Vec::with_capacity(split.images.len()),
        labels: Vec::with_capacity(split.len()),
    };
    for rank in 0..longest {
        for members in &by_class {
            if let Some(&i) = members.get(rank) {
                out.labels.push(split.labels[i]);
                out.images
                    .extend_from_slice(&split.images[i * image_bytes..(i + 1) * image_bytes]);
            }
        }
    }
    out
}

/// A hash of everything that defines the data, so results can name exactly what they trained on.
pub fn content_hash(d: &Dataset) -> String {
    let mut h = Sha256::new();
    h.update(
        format!(
            "{}x{}x{};{}",
            d.channels,
            d.height,
            d.width,
            d.classes.join(",")
        )
        .as_bytes(),
    );
    for s in [&d.train, &d.test] {
        h.update((s.len() as u64).to_le_bytes());
        h.update(&s.labels);
        h.update(&s.images);
    }
    hex::encode(h.finalize())
}

/// Where imported and downloaded data sets live: `$TRICKLAB_DATA`, else `./data`.
pub fn data_dir() -> PathBuf {
    std::env::var_os("TRICKLAB_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("data"))
}

/// File name of an imported data set's cache inside `data_dir()/NAME/`.
pub const CACHE_FILE: &str = "dataset.tlds";

/// Loads a data set from its spec:
/// `embedded` | `synthetic[:N]` | an imported name | a folder (CIFAR binary or
/// image tree) | a `.tar.gz` archive (CIFAR binary or image tree).
pub fn load(spec: &str) -> Result<Dataset> {
    let spec = spec.trim();
    if is_embedded(spec) {
        return load_embedded();
    }
    if let Some(n) = synthetic_size(spec)? {
        return Ok(synthetic(n, (n / 5).max(10), 10, 32, 0));
    }
    let imported = data_dir().join(spec).join(CACHE_FILE);
    if imported.is_file() {
        return read_cache(&imported);
    }
    if stream::source::stream_only(spec) {
        bail!(
            "`{spec}` is a streaming store (`data import --max-side`): only runs with the `stream` trick read it; use a recipe that streams (`tricklab recipes`) or add `--trick stream`, or import the folder without --max-side"
        );
    }
    let path = Path::new(spec);
    if path.is_dir() {
        if path.join("data_batch_1.bin").exists() || path.join("test_batch.bin").exists() {
            return load_cifar_dir(path);
        }
        if path.join("cifar-10-batches-bin").is_dir() {
            return load_cifar_dir(&path.join("cifar-10-batches-bin"));
        }
        if path.join(CACHE_FILE).is_file() {
            return read_cache(&path.join(CACHE_FILE));
        }
        return read_image_tree(path, &dir_name(path));
    }
    if path.is_file() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            return match load_cifar_archive(path) {
                Ok(d) => Ok(d),
                Err(e) if format!("{e:#}").contains("no CIFAR-10 batch files") => read_image_tree(
                    path,
                    name.trim_end_matches(".tar.gz").trim_end_matches(".tgz"),
                ),
                Err(e) => Err(e),
            };
        }
        if name.ends_with(".tlds") {
            return read_cache(path);
        }
        bail!(
            "{}: not a data set (expected a folder, a .tar.gz archive or a .tlds cache)",
            path.display()
        );
    }
    Err(unknown_data(spec))
}

/// The embedded subset, by any of its names.
pub fn is_embedded(spec: &str) -> bool {
    spec.is_empty() || spec == "embedded" || spec == "default"
}

/// The largest synthetic data set (about 300 MB of 32x32 images).
pub const MAX_SYNTHETIC: usize = 100_000;

/// `synthetic[:N]` → Some(N train images); any other spec → None.
fn synthetic_size(spec: &str) -> Result<Option<usize>> {
    let Some(rest) = spec.strip_prefix("synthetic") else {
        return Ok(None);
    };
    let n = match rest.strip_prefix(':') {
        Some(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_SYNTHETIC).contains(n))
            .with_context(|| {
                format!(
                    "data spec `{spec}`: expected synthetic:N with 1 ≤ N ≤ {MAX_SYNTHETIC} train images"
                )
            })?,
        None if rest.is_empty() => 1000,
        None => return Err(unknown_data(spec)),
    };
    Ok(Some(n))
}

fn unknown_data(spec: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "unknown data set `{spec}`: not `embedded`, not imported in {} and not a path; `tricklab data list` shows what is available",
        data_dir().display()
    )
}

/// Checks that a spec names a data set that exists, without loading it: a
/// session checks every matrix before it creates a results folder.
pub fn locate(spec: &str) -> Result<()> {
    let spec = spec.trim();
    if is_embedded(spec)
        || synthetic_size(spec)?.is_some()
        || data_dir().join(spec).join(CACHE_FILE).is_file()
        || stream::source::stream_only(spec)
        || Path::new(spec).exists()
    {
        Ok(())
    } else {
        Err(unknown_data(spec))
    }
}

fn dir_name(p: &Path) -> String {
    p.canonicalize()
        .ok()
        .and_then(|c| c.file_name().map(|n| n.to_string_lossy().to_string()))
        .unwrap_or_else(|| "images".into())
}

/// One line of `tricklab data list`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DataInfo {
    pub name: String,
    pub source: String,
    pub train: usize,
    pub test: usize,
    pub classes: usize,
    pub hash: String,
}

/// The embedded default and every data set imported into `data_dir()`.
pub fn list() -> Result<Vec<DataInfo>> {
    let mut out = Vec::new();
    let info = |d: &Dataset, source: String| DataInfo {
        name: d.name.clone(),
        source,
        train: d.train.len(),
        test: d.test.len(),
        classes: d.classes.len(),
        hash: d.hash.clone(),
    };
    out.push(info(&load_embedded()?, "compiled into the binary".into()));
    let dir = data_dir();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            let f = p.join(CACHE_FILE);
            if f.is_file() {
                let header = cache::read_header(&f)?;
                out.push(DataInfo {
                    name: header.name,
                    source: f.display().to_string(),
                    train: header.train,
                    test: header.test,
                    classes: header.classes.len(),
                    hash: header.hash,
                });
            }
            let f = p.join(stream::store::STORE_FILE);
            if f.is_file() {
                let s = stream::store::Store::open(&f)?;
                out.push(DataInfo {
                    name: p
                        .file_name()
                        .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                    source: format!(
                        "{} (streamed: {})",
                        f.display(),
                        stream::source::store_words(&s.header)
                    ),
                    train: s.header.train,
                    test: s.header.val,
                    classes: s.header.classes.len(),
                    hash: stream::source::store_hash(&s)?,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_synthetic_and_reject_unknown() {
        let d = load("synthetic:50").unwrap();
        assert_eq!((d.train.len(), d.test.len()), (50, 10));
        let e = load("no-such-set").unwrap_err();
        assert!(format!("{e:#}").contains("tricklab data list"), "{e:#}");
        assert!(load("synthetic:x").is_err());
    }

    #[test]
    fn interleaving_mixes_the_classes_and_keeps_each_classs_order() {
        // Class by class, as an image tree lists them: 3 of class 0, 2 of 1, 3 of 2.
        let labels = [0u8, 0, 0, 1, 1, 2, 2, 2];
        let split = Split {
            images: (0..8u8).flat_map(|i| [i, i]).collect(),
            labels: labels.to_vec(),
        };
        let out = interleave_classes(&split, 3, 2);
        assert_eq!(out.labels, [0, 1, 2, 0, 1, 2, 0, 2]);
        let firsts: Vec<u8> = out.images.chunks(2).map(|c| c[0]).collect();
        assert_eq!(firsts, [0, 3, 5, 1, 4, 6, 2, 7]);
        // The embedded set: its first ten training images are ten classes.
        let d = load_embedded().unwrap();
        let mut first: Vec<u8> = d.train.labels[..10].to_vec();
        first.sort();
        assert_eq!(first, (0..10).collect::<Vec<u8>>());
    }
}
