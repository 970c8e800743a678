//! Streaming image folders: images too many or too large for the in-memory
//! cache (ImageNet: 1.28 M JPEGs) are read, decoded, cropped and flipped every
//! epoch on a pool of threads, ahead of the step that needs them.
//!
//! The pipeline, in the order the data flows (FFCV states its loaders the
//! same way):
//!
//! 1. **index**: `train/<class>/*` and `val/<class>/*` (or `test/`), or a flat
//!    `val/` with ImageNet's `LOC_val_solution.csv` or a `labels.txt`; classes
//!    sorted by name, as torchvision's `ImageFolder` numbers them.
//! 2. **order**: a permutation of the split drawn from (seed, epoch); global
//!    batch `b` is positions `b·B .. (b+1)·B` of it, and rank `r` of `W`
//!    takes the positions `p` with `p % W == r`.
//! 3. **read + decode** ([`decode`]): a worker thread per image.
//! 4. **crop + resize + flip** ([`resample`]): random-resized crop for
//!    training, centre crop for validation, in one antialiased resampling.
//!    Each image draws its crop and flip from a generator seeded by (seed,
//!    epoch, image), so the bytes do not depend on the number of threads or
//!    on which thread ran first.
//! 5. **prefetch**: finished batches wait in a bounded queue; the loader never
//!    holds more than `prefetch` batches, whatever the data set's size.
//!
//! A file that is not a decodable image is, per `--on-bad-image`, an error
//! that names it (`fail`) or left out of its batch with one line naming it
//! (`skip`); it is never replaced by a blank image.

pub mod decode;
pub mod on_device;
pub mod rect;
pub mod resample;
pub mod rgb;
pub mod source;
pub mod store;
pub mod survey;
pub mod synth;
#[cfg(test)]
mod tests;
#[cfg(feature = "turbojpeg")]
mod turbo;

use anyhow::{Context, Result, bail};
use crossbeam_channel::{Receiver, bounded};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub use source::StreamData;

/// The per-image and per-epoch generator: host-side, the same on every machine.
pub use crate::util::splitmix::SplitMix64 as SplitMix;

/// What to do with a file that is not a decodable image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnBadImage {
    /// Leave it out of its batch, count it and name it in one line.
    Skip,
    /// Stop with an error naming the file.
    Fail,
}

/// One image file and its class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub label: u32,
}

/// An image folder's files, found once.
#[derive(Clone, Debug)]
pub struct FolderIndex {
    pub root: PathBuf,
    pub classes: Vec<String>,
    pub train: Vec<Entry>,
    pub val: Vec<Entry>,
    /// One line for each thing left aside while indexing (empty class
    /// folders, files that are not named as images).
    pub notes: Vec<String>,
}

fn is_image_name(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["jpg", "jpeg", "png"].contains(&e.to_ascii_lowercase().as_str()))
}

/// The entries of `dir` named as images, sorted; counts the other files
/// into `other`. A FIFO, a device or a broken link named as an image stays
/// in, so that reading it names it as a problem (`read_image_file`) where
/// `check` and `stream` both see it, instead of leaving it out unsaid.
fn images_in(dir: &Path, other: &mut usize) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let p = e?.path();
        if is_image_name(&p) && !p.is_dir() {
            out.push(p);
        } else if p.is_file() {
            *other += 1;
        }
    }
    out.sort();
    Ok(out)
}

fn subdirs(dir: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    out.sort();
    Ok(out)
}

impl FolderIndex {
    /// Indexes `root`: `train/<class>/` must exist; `val/` (or `test/`) is by
    /// class folder or flat with a labels file.
    pub fn open(root: &Path) -> Result<FolderIndex> {
        let train_dir = root.join("train");
        if !train_dir.is_dir() {
            bail!(
                "{}: no train/ folder; an image folder holds train/<class>/*.jpg (and val/<class>/* or test/<class>/*)",
                root.display()
            );
        }
        let classes = subdirs(&train_dir)?;
        if classes.is_empty() {
            bail!(
                "{}: no class folders; put each class's images in train/<class>/",
                train_dir.display()
            );
        }
        let mut notes = Vec::new();
        let mut other = 0;
        let mut train = Vec::new();
        for (label, c) in classes.iter().enumerate() {
            let files = images_in(&train_dir.join(c), &mut other)?;
            if files.is_empty() {
                notes.push(format!(
                    "{}: no images; the class keeps its label ({label})",
                    train_dir.join(c).display()
                ));
            }
            train.extend(files.into_iter().map(|path| Entry {
                path,
                label: label as u32,
            }));
        }
        let val_dir = ["val", "test"]
            .iter()
            .map(|s| root.join(s))
            .find(|p| p.is_dir());
        let val = match &val_dir {
            None => Vec::new(),
            Some(dir) if !subdirs(dir)?.is_empty() => {
                let mut val = Vec::new();
                for c in subdirs(dir)? {
                    let Some(label) = classes.iter().position(|k| *k == c) else {
                        bail!(
                            "{}: class `{c}` is not among train/'s {} classes; rename or remove it",
                            dir.join(&c).display(),
                            classes.len()
                        );
                    };
                    val.extend(
                        images_in(&dir.join(&c), &mut other)?
                            .into_iter()
                            .map(|path| Entry {
                                path,
                                label: label as u32,
                            }),
                    );
                }
                val
            }
            Some(dir) => flat_val(root, dir, &classes, &mut other)?,
        };
        if other > 0 {
            notes.push(format!(
                "{other} files not named .jpg, .jpeg or .png were left out"
            ));
        }
        Ok(FolderIndex {
            root: root.to_path_buf(),
            classes,
            train,
            val,
            notes,
        })
    }
}

/// ImageNet's flat `val/`: labels from `LOC_val_solution.csv` (ImageId,
/// PredictionString starting with the wnid) beside it, or `val/labels.txt`
/// (`file class` a line).
fn flat_val(root: &Path, dir: &Path, classes: &[String], other: &mut usize) -> Result<Vec<Entry>> {
    let csv = root.join("LOC_val_solution.csv");
    let txt = dir.join("labels.txt");
    let mut labels = std::collections::HashMap::new();
    if csv.is_file() {
        let text = std::fs::read_to_string(&csv)?;
        for line in text.lines().skip(1) {
            let (id, pred) = line.split_once(',').with_context(|| {
                format!(
                    "{}: `{line}` is not `ImageId,PredictionString`",
                    csv.display()
                )
            })?;
            let wnid = pred.split_whitespace().next().unwrap_or("");
            labels.insert(id.to_string(), wnid.to_string());
        }
    } else if txt.is_file() {
        for line in std::fs::read_to_string(&txt)?
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            let mut it = line.split_whitespace();
            let (Some(f), Some(c)) = (it.next(), it.next()) else {
                bail!("{}: `{line}` is not `file class`", txt.display());
            };
            let stem = Path::new(f)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(f);
            labels.insert(stem.to_string(), c.to_string());
        }
    } else {
        bail!(
            "{}: images without class folders and no labels: add {} or {}, or sort them into val/<class>/",
            dir.display(),
            csv.display(),
            txt.display()
        );
    }
    let mut out = Vec::new();
    for path in images_in(dir, other)? {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let Some(class) = labels.get(stem) else {
            bail!("{}: no label for it in the labels file", path.display());
        };
        let Some(label) = classes.iter().position(|k| k == class) else {
            bail!(
                "{}: its class `{class}` is not among train/'s classes",
                path.display()
            );
        };
        out.push(Entry {
            path,
            label: label as u32,
        });
    }
    Ok(out)
}

/// How each image becomes a `size` x `size` square.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crop {
    /// torchvision's `RandomResizedCrop(size, scale, ratio)`.
    RandomResized {
        scale: (f64, f64),
        ratio: (f64, f64),
    },
    /// `Resize(size / ratio)` then `CenterCrop(size)` (ratio 0.875 = 224/256).
    Centre { ratio: f64 },
    /// fast.ai's rectangular validation ([`rect`]): each batch's own
    /// rectangle, from `LoaderOptions::rect`, over images in its order.
    Rect,
}

impl Crop {
    /// torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3).
    pub const TRAIN: Crop = Crop::RandomResized {
        scale: (0.08, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    };
    pub const VAL: Crop = Crop::Centre { ratio: 0.875 };
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pipeline {
    pub size: usize,
    pub crop: Crop,
    pub flip: bool,
}

#[derive(Clone, Debug)]
pub struct LoaderOptions {
    /// The global batch: all ranks' images together.
    pub batch: usize,
    pub workers: usize,
    /// Finished batches waiting at most.
    pub prefetch: usize,
    pub seed: u64,
    pub epoch: u64,
    pub shuffle: bool,
    /// Drop a last partial global batch (training), or keep it (validation).
    pub drop_last: bool,
    pub rank: usize,
    pub world: usize,
    pub on_bad: OnBadImage,
    /// Each global batch's (height, width) with [`Crop::Rect`].
    pub rect: Option<Arc<Vec<(usize, usize)>>>,
    /// How the error for an unreadable file says to skip such files: the
    /// command line's flag, or a training run's setting.
    pub skip_hint: &'static str,
    /// Hand each image over whole with its crop box and flip, for the crop
    /// on the device (`on_device`), instead of cropping on the threads.
    pub whole: bool,
}

/// The command line's way to leave unreadable files out.
pub const SKIP_FLAG: &str = "pass --on-bad-image skip";

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch: 256,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefetch: 4,
            seed: 0,
            epoch: 0,
            shuffle: true,
            drop_last: true,
            rank: 0,
            world: 1,
            on_bad: OnBadImage::Fail,
            rect: None,
            skip_hint: SKIP_FLAG,
            whole: false,
        }
    }
}

/// One rank's share of a global batch.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Which global batch of the epoch.
    pub index: usize,
    pub height: usize,
    pub width: usize,
    /// N x height x width x 3, RGB (empty where the images come `whole`).
    pub images: Vec<u8>,
    /// Each image decoded whole with the crop and flip drawn for it, to be
    /// cut on the device (`LoaderOptions::whole`).
    pub whole: Vec<Whole>,
    pub labels: Vec<i64>,
    /// One line for each file left out of this batch.
    pub skipped: Vec<String>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images as an N x 3 x height x width uint8 tensor (channels-last
    /// in memory, as the bytes come; cropped there where they came whole)
    /// and the labels, on `device`.
    pub fn to_tensors(&self, device: tch::Device) -> Result<(tch::Tensor, tch::Tensor)> {
        let y = tch::Tensor::from_slice(&self.labels).to_device(device);
        if !self.whole.is_empty() {
            let uploaded: Vec<tch::Tensor> =
                self.whole.iter().map(|w| w.to_device(device)).collect();
            let geometry: Vec<_> = self.whole.iter().map(|w| (w.crop, w.flip)).collect();
            let x = on_device::crop_resize_flip(&uploaded, &geometry, (self.height, self.width))?;
            return Ok((x, y));
        }
        let n = self.len() as i64;
        let x = tch::Tensor::from_slice(&self.images)
            .view([n, self.height as i64, self.width as i64, 3])
            .permute([0, 3, 1, 2])
            .to_device(device);
        Ok((x, y))
    }
}

/// An image decoded whole, and the crop box and flip the loader drew for it.
#[derive(Clone, Debug)]
pub struct Whole {
    pub image: decode::Rgb,
    pub crop: resample::CropBox,
    pub flip: bool,
}

impl Whole {
    /// The image's bytes as an (H, W, 3) uint8 tensor on the host.
    pub fn hwc(&self) -> tch::Tensor {
        let (h, w) = (self.image.height as i64, self.image.width as i64);
        tch::Tensor::from_slice(&self.image.pixels).view([h, w, 3])
    }

    /// The image as (3, H, W) uint8 on `device`.
    pub fn to_device(&self, device: tch::Device) -> tch::Tensor {
        self.hwc().to_device(device).permute([2, 0, 1])
    }
}

/// What the loader has done so far: it states its own throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoaderStats {
    pub batches: usize,
    pub images: usize,
    pub skipped: usize,
    /// Since the loader started.
    pub seconds: f64,
    /// Time the consumer spent blocked waiting for a batch.
    pub wait_s: f64,
}

impl LoaderStats {
    pub fn images_per_s(&self) -> f64 {
        self.images as f64 / self.seconds.max(1e-9)
    }
}

enum Msg {
    Batch(Result<Batch>),
    End,
}

/// Batches of one epoch of one rank, produced ahead on a thread pool.
///
/// Dropping it ends the producer at its next send (the channel closes); the
/// batch in hand is thrown away.
pub struct Loader {
    rx: Receiver<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
    batches: usize,
    started: Instant,
    stats: LoaderStats,
    finished: bool,
}

/// The epoch's order of `n` images: a Fisher–Yates shuffle from (seed, epoch).
pub fn epoch_order(n: usize, seed: u64, epoch: u64, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if shuffle {
        let mut g = SplitMix(seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
        for i in (1..n).rev() {
            let j = (g.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
    }
    order
}

/// Where the loader's images come from: a folder's files, or a pre-resized
/// store ([`store`]).
pub trait Images: Send + Sync {
    fn count(&self) -> usize;
    fn label(&self, i: usize) -> u32;
    /// How messages name image `i`: its file, or the store and its number.
    fn name(&self, i: usize) -> String;
    /// Image `i`'s pixels; `Err` carries the reason only.
    fn pixels(&self, i: usize) -> Result<decode::Rgb>;
    /// Image `i`'s (width, height), without decoding it where the source can.
    fn dims(&self, i: usize) -> Result<(usize, usize)> {
        self.pixels(i).map(|p| (p.width, p.height))
    }
    /// Whether image `i` will read, from its header and end alone, in the
    /// loader's words: a file is read at its two ends; memory and a store
    /// (its index checked when opened) have nothing to find.
    fn readable(&self, _i: usize) -> Result<()> {
        Ok(())
    }
    /// Image `i` at 1/d of its sides where its decoder shrinks for free, d
    /// at most what `choose` says given the full sides, and only the part
    /// it wants where the decoder can leave the rest out
    /// ([`decode::decode_reduced`]).
    fn pixels_reduced(
        &self,
        i: usize,
        choose: &mut dyn FnMut(usize, usize) -> decode::Want,
    ) -> Result<decode::Decoded> {
        let img = self.pixels(i)?;
        choose(img.width, img.height);
        Ok(decode::Decoded {
            img,
            d: 1,
            origin: (0, 0),
        })
    }
}

impl Images for Vec<Entry> {
    fn count(&self) -> usize {
        self.len()
    }
    fn label(&self, i: usize) -> u32 {
        self[i].label
    }
    fn name(&self, i: usize) -> String {
        self[i].path.display().to_string()
    }
    fn pixels(&self, i: usize) -> Result<decode::Rgb> {
        let bytes = crate::data::read_image_file(&self[i].path)?;
        decode::decode(&bytes)
    }
    fn pixels_reduced(
        &self,
        i: usize,
        choose: &mut dyn FnMut(usize, usize) -> decode::Want,
    ) -> Result<decode::Decoded> {
        let bytes = crate::data::read_image_file(&self[i].path)?;
        decode::decode_reduced(&bytes, choose)
    }
    fn dims(&self, i: usize) -> Result<(usize, usize)> {
        let bytes = crate::data::read_image_file(&self[i].path)?;
        survey::dimensions(&bytes)
    }
    fn readable(&self, i: usize) -> Result<()> {
        // 256 KiB holds any header (EXIF included); the last KiB the end marker.
        let ends = crate::data::read_image_ends(&self[i].path, 256 << 10)?;
        decode::header(&ends).map(|_| ())
    }
}

/// Some of another source's images, in a given order (the first batches of
/// an epoch, say).
pub struct Subset {
    pub inner: Arc<dyn Images>,
    pub ids: Vec<usize>,
}

impl Images for Subset {
    fn count(&self) -> usize {
        self.ids.len()
    }
    fn label(&self, i: usize) -> u32 {
        self.inner.label(self.ids[i])
    }
    fn name(&self, i: usize) -> String {
        self.inner.name(self.ids[i])
    }
    fn pixels(&self, i: usize) -> Result<decode::Rgb> {
        self.inner.pixels(self.ids[i])
    }
    fn dims(&self, i: usize) -> Result<(usize, usize)> {
        self.inner.dims(self.ids[i])
    }
    fn readable(&self, i: usize) -> Result<()> {
        self.inner.readable(self.ids[i])
    }
    fn pixels_reduced(
        &self,
        i: usize,
        choose: &mut dyn FnMut(usize, usize) -> decode::Want,
    ) -> Result<decode::Decoded> {
        self.inner.pixels_reduced(self.ids[i], choose)
    }
}

/// The generator image `i` draws its crop and flip from in `epoch`: the
/// same on every worker, rank and run of the same seed.
pub fn image_rng(seed: u64, epoch: u64, i: usize) -> SplitMix {
    SplitMix(
        seed ^ epoch.wrapping_mul(0xA076_1D64_78BD_642F)
            ^ (i as u64).wrapping_mul(0xE703_7ED1_A0B4_28DB),
    )
}

/// The crop box of an image of `w` x `h` for an `out_h` x `out_w` output,
/// drawn from `rng` where the pipeline's crop is random.
fn crop_of(
    p: &Pipeline,
    (w, h): (usize, usize),
    (out_h, out_w): (usize, usize),
    rng: &mut SplitMix,
) -> resample::CropBox {
    match p.crop {
        Crop::RandomResized { scale, ratio } => {
            resample::random_resized(w, h, scale, ratio, || rng.unit_f64())
        }
        Crop::Centre { ratio } => resample::centre(w, h, ratio),
        Crop::Rect => rect::crop_box(w, h, out_h, out_w, p.size),
    }
}

/// The crop box and flip the loader draws for image `i` (of `w` x `h`) in
/// `epoch`, at full size: what a decoder that does not shrink (a GPU's)
/// hands to the crop on the device (`on_device`), so both paths cut the
/// same boxes from the same seed.
pub fn geometry(
    p: &Pipeline,
    (w, h): (usize, usize),
    out: (usize, usize),
    (seed, epoch, i): (u64, u64, usize),
) -> (resample::CropBox, bool) {
    let mut rng = image_rng(seed, epoch, i);
    let crop = crop_of(p, (w, h), out, &mut rng);
    (crop, p.flip && rng.unit_f64() < 0.5)
}

/// Decodes and crops image `i` to `out_h` x `out_w`; `Err` carries the
/// reason only.
fn load_one(
    images: &dyn Images,
    i: usize,
    p: &Pipeline,
    (out_h, out_w): (usize, usize),
    rng: &mut SplitMix,
) -> Result<Vec<u8>> {
    // The crop is drawn on the full sides; the decoder may then shrink the
    // image by d where the crop would still cover the output at 1/d, and
    // decode only the rows and columns the resampler's taps read: the crop
    // and a margin of its filter's reach (up to a source pixel per output
    // pixel, and the rounding to whole pixels at 1/d).
    let mut crop = None;
    let got = images.pixels_reduced(i, &mut |w, h| {
        let c = crop_of(p, (w, h), (out_h, out_w), rng);
        crop = Some(c);
        let reduce = ((c.w / out_w as f64).min(c.h / out_h as f64).floor() as usize).max(1);
        let r = reduce as f64;
        let (mx, my) = (
            (c.w / out_w as f64 + 2.0) * r,
            (c.h / out_h as f64 + 2.0) * r,
        );
        let keep = resample::CropBox {
            x: c.x - mx,
            y: c.y - my,
            w: c.w + 2.0 * mx,
            h: c.h + 2.0 * my,
        };
        decode::Want {
            reduce,
            keep: Some(keep),
        }
    })?;
    let crop = crop.context("the decoder never said the image's sides")?;
    let (img, d) = (got.img, got.d as f64);
    let (ox, oy) = (got.origin.0 as f64, got.origin.1 as f64);
    // The crop in the decoded part's pixels; at the image's far edges the
    // part ends where the image does.
    let (x, y) = (crop.x / d - ox, crop.y / d - oy);
    let crop = resample::CropBox {
        x,
        y,
        w: (crop.w / d).min(img.width as f64 - x),
        h: (crop.h / d).min(img.height as f64 - y),
    };
    let flip = p.flip && rng.unit_f64() < 0.5;
    let mut out = vec![0u8; out_h * out_w * 3];
    resample::resample(&img, crop, out_w, out_h, flip, &mut out);
    Ok(out)
}

/// One image as the loader's threads leave it: cropped, or whole.
enum Loaded {
    Pixels(Vec<u8>),
    Whole(Whole),
}

/// Global batch `b`'s share for this rank: its images loaded on the pool,
/// in position order, the bad ones left out (skip) or the first one an error
/// (fail).
fn produce(
    b: usize,
    order: &[usize],
    images: &dyn Images,
    pipeline: &Pipeline,
    o: &LoaderOptions,
    pool: &rayon::ThreadPool,
) -> Result<Batch> {
    use rayon::prelude::*;
    let n = order.len();
    let hw = o
        .rect
        .as_ref()
        .map_or((pipeline.size, pipeline.size), |r| r[b]);
    let positions: Vec<usize> = (b * o.batch..((b + 1) * o.batch).min(n))
        .filter(|p| p % o.world == o.rank)
        .collect();
    let loaded: Vec<(usize, Result<Loaded>)> = pool.install(|| {
        positions
            .par_iter()
            .map(|&pos| {
                let i = order[pos];
                let mut rng = image_rng(o.seed, o.epoch, i);
                // A panic in a decoder is this file's error, not a dead thread.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if o.whole {
                        let image = images.pixels(i)?;
                        let (crop, flip) = geometry(
                            pipeline,
                            (image.width, image.height),
                            hw,
                            (o.seed, o.epoch, i),
                        );
                        Ok(Loaded::Whole(Whole { image, crop, flip }))
                    } else {
                        load_one(images, i, pipeline, hw, &mut rng).map(Loaded::Pixels)
                    }
                }))
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the decoder panicked")));
                (i, r)
            })
            .collect()
    });
    let px = hw.0 * hw.1 * 3;
    let mut batch = Batch {
        index: b,
        height: hw.0,
        width: hw.1,
        images: Vec::with_capacity(if o.whole { 0 } else { loaded.len() * px }),
        whole: Vec::new(),
        labels: Vec::with_capacity(loaded.len()),
        skipped: Vec::new(),
    };
    for (i, r) in loaded {
        match r {
            Ok(img) => {
                match img {
                    Loaded::Pixels(p) => batch.images.extend_from_slice(&p),
                    Loaded::Whole(w) => batch.whole.push(w),
                }
                batch.labels.push(i64::from(images.label(i)));
            }
            Err(e) if o.on_bad == OnBadImage::Skip => batch
                .skipped
                .push(format!("skipped {}: {e:#}", images.name(i))),
            Err(e) => bail!(
                "{}: {e:#}; fix or remove it, or {} to leave such files out",
                images.name(i),
                o.skip_hint
            ),
        }
    }
    Ok(batch)
}

impl Loader {
    /// Starts producing `images`' batches for one epoch of one rank.
    pub fn new(
        images: Arc<dyn Images>,
        pipeline: Pipeline,
        opts: &LoaderOptions,
    ) -> Result<Loader> {
        if opts.batch == 0 || opts.world == 0 || opts.rank >= opts.world {
            bail!(
                "loader: batch {} for rank {} of {} is not a batch",
                opts.batch,
                opts.rank,
                opts.world
            );
        }
        if pipeline.size == 0 {
            bail!("loader: an output size of 0 px");
        }
        let n = images.count();
        let batches = if opts.drop_last {
            n / opts.batch
        } else {
            n.div_ceil(opts.batch)
        };
        match (&opts.rect, pipeline.crop) {
            (Some(r), Crop::Rect) if r.len() == batches => {}
            (None, Crop::Rect) | (Some(_), Crop::Rect) => bail!(
                "loader: rectangular validation needs one rectangle per batch ({batches}); make them with rect::plan"
            ),
            (Some(_), _) => bail!("loader: rectangles are for Crop::Rect only"),
            (None, _) => {}
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.workers.max(1))
            .thread_name(|i| format!("tricklab-decode-{i}"))
            .build()
            .context("cannot start the decoding threads")?;
        let (tx, rx) = bounded(opts.prefetch.max(1));
        let o = opts.clone();
        let thread = std::thread::Builder::new()
            .name("tricklab-loader".into())
            .spawn(move || {
                let order = epoch_order(n, o.seed, o.epoch, o.shuffle);
                for b in 0..batches {
                    let msg = Msg::Batch(produce(b, &order, images.as_ref(), &pipeline, &o, &pool));
                    let stop = matches!(msg, Msg::Batch(Err(_)));
                    // The consumer went away (dropped the loader): stop quietly.
                    if tx.send(msg).is_err() || stop {
                        return;
                    }
                }
                let _ = tx.send(Msg::End);
            })
            .context("cannot start the loader thread")?;
        Ok(Loader {
            rx,
            thread: Some(thread),
            batches,
            started: Instant::now(),
            stats: LoaderStats::default(),
            finished: false,
        })
    }

    /// Global batches in this epoch.
    pub fn len(&self) -> usize {
        self.batches
    }

    pub fn is_empty(&self) -> bool {
        self.batches == 0
    }

    pub fn stats(&self) -> LoaderStats {
        let mut s = self.stats;
        s.seconds = self.started.elapsed().as_secs_f64();
        s
    }

    /// Why the loader thread stopped without finishing.
    fn died(&mut self) -> anyhow::Error {
        let why = match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Err(p)) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_else(|| "a panic".into()),
            _ => "it ended early".into(),
        };
        anyhow::anyhow!(
            "the loader thread stopped before the epoch's end ({why}); this is a bug in tricklab, please report it"
        )
    }
}

impl Iterator for Loader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.finished {
            return None;
        }
        let t = Instant::now();
        let msg = self.rx.recv();
        self.stats.wait_s += t.elapsed().as_secs_f64();
        match msg {
            Ok(Msg::Batch(Ok(b))) => {
                self.stats.batches += 1;
                self.stats.images += b.len();
                self.stats.skipped += b.skipped.len();
                Some(Ok(b))
            }
            Ok(Msg::Batch(Err(e))) => {
                self.finished = true;
                Some(Err(e))
            }
            Ok(Msg::End) => {
                self.finished = true;
                None
            }
            Err(_) => {
                self.finished = true;
                Some(Err(self.died()))
            }
        }
    }
}
