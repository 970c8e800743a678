//! A data set as a streaming run reads it: the training and validation
//! images behind the [`Images`] trait, whatever holds them.
//!
//! A spec resolves, in this order, to
//! 1. a store made by `data import --max-side` (an imported name, the store
//!    file, or a folder holding it),
//! 2. an image folder (`train/<class>/*`, `val/` or `test/`), indexed once
//!    and read file by file every epoch,
//! 3. anything the in-memory loader reads (`embedded`, `synthetic:N`, CIFAR,
//!    an imported cache), served from memory: the same pipeline on small
//!    images, which is what a `--tiny` rehearsal of an ImageNet recipe runs.

use super::store::{STORE_FILE, Store};
use super::{FolderIndex, Images, Subset, decode::Rgb};
use crate::data::{Dataset, data_dir};
use anyhow::{Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a streaming run's images come from.
#[derive(Clone)]
pub struct StreamData {
    pub name: String,
    /// Hex sha256 identifying the content: a folder's relative paths, labels
    /// and file sizes; a store's header and index; an in-memory set's bytes.
    pub hash: String,
    pub classes: Vec<String>,
    pub train: Arc<dyn Images>,
    pub val: Arc<dyn Images>,
    /// One line for each thing indexing left aside.
    pub notes: Vec<String>,
    /// What the loader reads, as the user is told: `a JPEG folder`, `a
    /// store (10% JPEG, the rest raw; at most 400 px)`, `memory`.
    pub format: String,
}

/// A store's images in words: how they are kept and how large.
pub fn store_words(h: &super::store::Header) -> String {
    use super::store::Format;
    let kept = match (h.format, h.jpeg_fraction) {
        (Format::Jpeg, _) => "JPEG".to_string(),
        (Format::Raw, _) => "raw".to_string(),
        (Format::Mixed, Some(f)) => format!("{:.0}% JPEG, the rest raw", 100.0 * f),
        (Format::Mixed, None) => "JPEG and raw".to_string(),
    };
    format!("a store ({kept}; at most {} px)", h.max_side)
}

/// The store file a spec names, if it names one.
pub fn store_file(spec: &str) -> Option<PathBuf> {
    let p = Path::new(spec);
    [
        data_dir().join(spec).join(STORE_FILE),
        p.join(STORE_FILE),
        p.to_path_buf(),
    ]
    .into_iter()
    .find(|f| f.is_file() && f.file_name().is_some_and(|n| n == STORE_FILE))
}

/// A store's identity: its header and its index (each image's place, size
/// and label), as the ranks of a gang compare it and `data list` shows it.
/// The image bytes are not read: hashing a store of ImageNet would read
/// every byte of it before each run.
pub fn store_hash(s: &Store) -> Result<String> {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&s.header)?);
    h.update(s.index_bytes());
    Ok(hex::encode(h.finalize()))
}

/// Whether `spec` is an image folder to stream file by file.
fn is_image_folder(spec: &str) -> bool {
    Path::new(spec).join("train").is_dir()
}

/// Whether `spec` can only be streamed (a store): the in-memory loader
/// cannot read it.
pub fn stream_only(spec: &str) -> bool {
    store_file(spec).is_some()
}

impl StreamData {
    /// Opens `spec` (see the module's order); `load` reads the in-memory ones.
    pub fn open(spec: &str, load: impl FnOnce(&str) -> Result<Dataset>) -> Result<StreamData> {
        let spec = spec.trim();
        if let Some(f) = store_file(spec) {
            let s = Store::open(&f)?;
            return Ok(StreamData {
                name: dir_name(spec),
                hash: store_hash(&s)?,
                classes: s.header.classes.clone(),
                train: s.split(false),
                val: s.split(true),
                notes: Vec::new(),
                format: store_words(&s.header),
            });
        }
        if is_image_folder(spec) {
            let index = FolderIndex::open(Path::new(spec))?;
            let mut h = Sha256::new();
            for (split, entries) in [("train", &index.train), ("val", &index.val)] {
                h.update(split.as_bytes());
                for e in entries {
                    let rel = e.path.strip_prefix(&index.root).unwrap_or(&e.path);
                    h.update(rel.to_string_lossy().as_bytes());
                    h.update(e.label.to_le_bytes());
                    let size = std::fs::metadata(&e.path).map_or(0, |m| m.len());
                    h.update(size.to_le_bytes());
                }
            }
            return Ok(StreamData {
                name: dir_name(spec),
                hash: hex::encode(h.finalize()),
                classes: index.classes,
                train: Arc::new(index.train),
                val: Arc::new(index.val),
                notes: index.notes,
                format: "an image folder".into(),
            });
        }
        let d = Arc::new(load(spec)?);
        if d.channels != 3 && d.channels != 1 {
            bail!(
                "data set `{}` has {} channels: the streaming loader reads RGB or grey images",
                d.name,
                d.channels
            );
        }
        Ok(StreamData {
            name: d.name.clone(),
            hash: d.hash.clone(),
            classes: d.classes.clone(),
            train: Arc::new(MemorySplit {
                data: Arc::clone(&d),
                val: false,
            }),
            val: Arc::new(MemorySplit { data: d, val: true }),
            notes: Vec::new(),
            format: "memory".into(),
        })
    }

    /// Every image a run will read, checked at its header and end as the
    /// loader would read it (`Images::readable`), before training starts:
    /// a bad file is named now, not in epoch 2. One line: how many, the
    /// first, and the fix. Runs that `skip` unreadable images are not
    /// refused: the lines say how many they will skip, and name a class
    /// that loses every training image (no run can learn it), unless every
    /// image of a split is bad: skipping them all leaves a run nothing to
    /// train or evaluate on, so it is refused, naming `spec`, the data set
    /// as the matrix gave it.
    pub fn precheck(&self, spec: &str, skip: bool) -> Result<Vec<String>> {
        use rayon::prelude::*;
        let mut notes = Vec::new();
        for (split, images) in [("train", &self.train), ("val", &self.val)] {
            let mut bad: Vec<(usize, String)> = (0..images.count())
                .into_par_iter()
                .filter_map(|i| images.readable(i).err().map(|e| (i, format!("{e:#}"))))
                .collect();
            bad.sort_unstable_by_key(|b| b.0);
            let Some((i, why)) = bad.first() else {
                continue;
            };
            let (count, first) = (images.count(), images.name(*i));
            if !skip {
                bail!(
                    "data set `{}`: {} of its {count} {split} images will not read, the first {first}: {why}; `tricklab data check {}` lists them all: remove or replace them",
                    self.name,
                    bad.len(),
                    self.name
                );
            }
            if bad.len() == count {
                let on = if split == "train" {
                    "train on"
                } else {
                    "evaluate on"
                };
                bail!(
                    "data set `{spec}`: all {count} of its {split} images will not read (the first {first}: {why}), so even with stream.on_bad_image = skip a run would have nothing to {on}; `tricklab data check {spec}` lists them: remove or replace them"
                );
            }
            notes.push(format!(
                "data set `{}`: {} of its {count} {split} images will not read and are skipped (stream.on_bad_image = skip), the first {first}: {why}",
                self.name,
                bad.len(),
            ));
            if split == "train" {
                notes.extend(self.classes_lost(images, &bad));
            }
        }
        Ok(notes)
    }

    /// One line for each class whose every training image is in `bad`.
    fn classes_lost(&self, images: &Arc<dyn Images>, bad: &[(usize, String)]) -> Vec<String> {
        let mut total = vec![0usize; self.classes.len()];
        let mut lost = vec![0usize; self.classes.len()];
        for i in 0..images.count() {
            if let Some(t) = total.get_mut(images.label(i) as usize) {
                *t += 1;
            }
        }
        for (i, _) in bad {
            if let Some(l) = lost.get_mut(images.label(*i) as usize) {
                *l += 1;
            }
        }
        self.classes
            .iter()
            .zip(total.iter().zip(&lost))
            .filter(|(_, (t, l))| **t > 0 && t == l)
            .map(|(name, (t, _))| {
                format!(
                    "data set `{}`: class `{name}` loses all {t} of its training images to them: no run can learn it (`tricklab data check {}` lists the files)",
                    self.name, self.name
                )
            })
            .collect()
    }

    /// The first `train_per_class` / `test_per_class` images of each class,
    /// in the source's order (as `Dataset::subset` keeps them).
    pub fn subset(&self, train_per_class: Option<usize>, test_per_class: Option<usize>) -> Self {
        let take = |images: &Arc<dyn Images>, per: Option<usize>| -> Arc<dyn Images> {
            let Some(per) = per else {
                return Arc::clone(images);
            };
            let mut counts = vec![0usize; self.classes.len()];
            let ids = (0..images.count())
                .filter(|&i| {
                    let c = &mut counts[images.label(i) as usize];
                    *c += 1;
                    *c <= per
                })
                .collect();
            Arc::new(Subset {
                inner: Arc::clone(images),
                ids,
            })
        };
        // A cut is another data set: its hash says which cut of which.
        let hash = match (train_per_class, test_per_class) {
            (None, None) => self.hash.clone(),
            cut => hex::encode(Sha256::digest(format!("{}/{cut:?}", self.hash))),
        };
        StreamData {
            name: self.name.clone(),
            hash,
            classes: self.classes.clone(),
            train: take(&self.train, train_per_class),
            val: take(&self.val, test_per_class),
            notes: self.notes.clone(),
            format: self.format.clone(),
        }
    }

    /// The first `train` training and `val` validation images.
    pub fn first(&self, train: usize, val: usize) -> Self {
        let cut = |images: &Arc<dyn Images>, n: usize| -> Arc<dyn Images> {
            Arc::new(Subset {
                inner: Arc::clone(images),
                ids: (0..images.count().min(n)).collect(),
            })
        };
        StreamData {
            train: cut(&self.train, train),
            val: cut(&self.val, val),
            ..self.clone()
        }
    }
}

fn dir_name(spec: &str) -> String {
    let p = Path::new(spec);
    let p = if p.file_name().is_some_and(|n| n == STORE_FILE) {
        p.parent().unwrap_or(p)
    } else {
        p
    };
    p.file_name()
        .map_or_else(|| spec.to_string(), |n| n.to_string_lossy().to_string())
}

/// One split of an in-memory data set as loader input: each image's C×H×W
/// bytes as RGB rows (a grey image's one channel three times).
pub struct MemorySplit {
    data: Arc<Dataset>,
    val: bool,
}

impl MemorySplit {
    fn split(&self) -> &crate::data::Split {
        if self.val {
            &self.data.test
        } else {
            &self.data.train
        }
    }
}

impl Images for MemorySplit {
    fn count(&self) -> usize {
        self.split().len()
    }
    fn label(&self, i: usize) -> u32 {
        u32::from(self.split().labels[i])
    }
    fn name(&self, i: usize) -> String {
        format!(
            "{} {} image {i}",
            self.data.name,
            if self.val { "test" } else { "train" }
        )
    }
    fn dims(&self, _: usize) -> Result<(usize, usize)> {
        Ok((self.data.width, self.data.height))
    }
    fn pixels(&self, i: usize) -> Result<Rgb> {
        let (c, h, w) = (self.data.channels, self.data.height, self.data.width);
        let sz = c * h * w;
        let img = &self.split().images[i * sz..(i + 1) * sz];
        let mut pixels = Vec::with_capacity(h * w * 3);
        for p in 0..h * w {
            for ch in 0..3 {
                pixels.push(img[(ch % c) * h * w + p]);
            }
        }
        Ok(Rgb {
            width: w,
            height: h,
            pixels,
        })
    }
}
