//! `tricklab data ...` subcommands.

use crate::data::*;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub command: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Download a data set (only `cifar10`: the official binary archive).
    Fetch {
        /// Data set to download.
        name: String,
        /// Destination folder (default: the data folder).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Download from this URL instead of the official host (a mirror).
        #[arg(long)]
        url: Option<String>,
    },
    /// Decode an image tree (folder or .tar.gz with train/<class>/*, test/<class>/*) once into the data folder.
    Import {
        source: PathBuf,
        #[arg(long)]
        name: String,
        /// Build a streaming store instead (FFCV's manner): every image shrunk
        /// to at most N px on a side, one memory-mapped file.
        #[arg(long)]
        max_side: Option<usize>,
        /// The store's image format (with --max-side).
        #[arg(long, value_enum, default_value = "jpeg")]
        format: stream::store::Format,
        /// With --max-side: FFCV's mixed store, this share of the images as
        /// JPEG and the rest raw (its `write_mode='proportion'`; FFCV's
        /// ResNet-18 store: --max-side 400 --jpeg-fraction 0.1; ResNet-50:
        /// --max-side 500 --jpeg-fraction 0.5). Overrides --format.
        #[arg(long)]
        jpeg_fraction: Option<f64>,
        /// With --max-side: what to do with a file that is not a decodable image.
        #[arg(long, value_enum, default_value = "fail")]
        on_bad_image: stream::OnBadImage,
    },
    /// List the embedded and imported data sets.
    List,
    /// Write a data set (or its per-class subset) as raw bytes for other
    /// programs, in the order tricklab trains on it: meta.json,
    /// {train,test}_images.u8 (N x H x W x C) and {train,test}_labels.u8.
    Export {
        /// A data set spec: embedded, an imported name, a folder or an archive.
        name: String,
        #[arg(long)]
        out: PathBuf,
        /// Keep the first N training images of each class (the `train_per_class` setting).
        #[arg(long)]
        train_per_class: Option<usize>,
        /// Keep the first N test images of each class (`test_per_class`).
        #[arg(long)]
        test_per_class: Option<usize>,
    },
    /// Stream an image folder through the loader as training would read it
    /// (decode, crop, flip on a pool of threads) and state its throughput.
    Stream {
        /// An image folder (train/<class>/*, and val/<class>/* or test/<class>/*),
        /// a store from `data import --max-side`, or any data set spec.
        dir: PathBuf,
        /// train: random-resized crop and flip, shuffled; val: centre crop, in order.
        #[arg(long, default_value = "train")]
        split: String,
        /// Output side in pixels.
        #[arg(long, default_value_t = 224)]
        size: usize,
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// Decoding threads (default: every core).
        #[arg(long)]
        workers: Option<usize>,
        /// Stop after this many batches (default: the whole epoch).
        #[arg(long)]
        batches: Option<usize>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long, value_enum, default_value = "fail")]
        on_bad_image: stream::OnBadImage,
        /// Also time the plain decode of the same files on the same threads:
        /// the decoder's limit beside the whole pipeline.
        #[arg(long)]
        decode_only: bool,
        /// With --split val: fast.ai's rectangular validation (images sorted
        /// by aspect ratio, each batch cropped to its own rectangle).
        #[arg(long)]
        rect: bool,
    },
    /// Write an ImageNet-like folder of synthetic JPEGs (train/<class>/*,
    /// val/<class>/*): photo sizes and aspect ratios, a class's colour and
    /// stripes, so that the loader, the streaming recipes and a GPU can be
    /// tried where no ImageNet is.
    Synth {
        /// The folder to create (it must not exist).
        dir: PathBuf,
        #[arg(long, default_value_t = 10)]
        classes: usize,
        #[arg(long, default_value_t = 100)]
        train_per_class: usize,
        #[arg(long, default_value_t = 10)]
        val_per_class: usize,
        /// The long side's range in pixels, MIN-MAX (ImageNet's photos are about 400 x 350).
        #[arg(long, default_value = "330-500")]
        long_side: String,
        #[arg(long, default_value_t = 90)]
        quality: u8,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Counts per class, image size, hash and problems found.
    Check {
        /// A data set spec: embedded, an imported name, a folder or an archive.
        #[arg(default_value = "embedded")]
        name: String,
    },
}

/// `tricklab data SUBCOMMAND`: each subcommand is a function of its own below.
pub fn cmd_data(args: DataArgs) -> Result<i32> {
    match args.command {
        DataCommand::Fetch { name, dir, url } => fetch_cmd(&name, dir, url),
        DataCommand::Import {
            source,
            name,
            max_side: Some(max_side),
            format,
            jpeg_fraction,
            on_bad_image,
        } => import_store_cmd(
            &source,
            &name,
            max_side,
            jpeg_fraction.unwrap_or(format.jpeg_fraction()),
            on_bad_image,
        ),
        DataCommand::Import { source, name, .. } => import_cmd(&source, &name),
        DataCommand::List => list_cmd(),
        DataCommand::Export {
            name,
            out,
            train_per_class,
            test_per_class,
        } => export_cmd(&name, &out, train_per_class, test_per_class),
        DataCommand::Stream {
            dir,
            split,
            size,
            batch,
            workers,
            batches,
            seed,
            on_bad_image,
            decode_only,
            rect,
        } => stream_cmd(&StreamCmd {
            dir,
            split,
            size,
            batch,
            workers,
            batches,
            seed,
            on_bad_image,
            decode_only,
            rect,
        }),
        DataCommand::Synth {
            dir,
            classes,
            train_per_class,
            val_per_class,
            long_side,
            quality,
            seed,
        } => synth_cmd(
            &dir,
            &long_side,
            (classes, train_per_class, val_per_class, quality, seed),
        ),
        DataCommand::Check { name } => check_cmd(&name),
    }
}

/// `tricklab data fetch cifar10`.
fn fetch_cmd(name: &str, dir: Option<PathBuf>, url: Option<String>) -> Result<i32> {
    if name != "cifar10" {
        bail!(
            "`{name}` cannot be fetched: only `cifar10` has a download; import image folders with `tricklab data import`"
        );
    }
    let dir = dir.unwrap_or_else(|| data_dir().join("cifar10"));
    let out = fetch_cifar10(&FetchOptions {
        url: url.unwrap_or_else(|| CIFAR10_URL.to_string()),
        dir,
        md5: CIFAR10_MD5.to_string(),
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    })?;
    println!("CIFAR-10 ready in {}", out.display());
    println!("use it with --data {}", out.display());
    Ok(0)
}

/// `tricklab data import --max-side`: a streaming store, as FFCV writes one.
fn import_store_cmd(
    source: &Path,
    name: &str,
    max_side: usize,
    fraction: f64,
    on_bad_image: stream::OnBadImage,
) -> Result<i32> {
    let t = std::time::Instant::now();
    let out = data_dir().join(name).join(stream::store::STORE_FILE);
    let r = keep_no_empty_folder(&data_dir().join(name), || {
        stream::store::build(source, &out, max_side, fraction, on_bad_image)
    })?;
    for s in &r.skipped {
        eprintln!("{s}");
    }
    let format = match fraction {
        f if f >= 1.0 => "JPEG".to_string(),
        f if f <= 0.0 => "raw".to_string(),
        f => format!("{:.0}% JPEG, the rest raw", 100.0 * f),
    };
    println!(
        "stored {} train + {} val images of {} at most {max_side} px on a side ({format}, {:.1} MB, {} skipped) in {} in {:.1} s",
        r.train,
        r.val,
        source.display(),
        r.bytes as f64 / 1e6,
        r.skipped.len(),
        out.display(),
        t.elapsed().as_secs_f64()
    );
    println!("stream it with `tricklab data stream {name}`");
    Ok(0)
}

/// `tricklab data import`: an image folder or archive into the in-memory cache.
fn import_cmd(source: &Path, name: &str) -> Result<i32> {
    let t = std::time::Instant::now();
    let (d, path) =
        keep_no_empty_folder(&data_dir().join(name), || import(source, name, &data_dir()))?;
    println!(
        "imported {} train + {} test images of {} classes ({}x{}) into {} in {:.1} s",
        d.train.len(),
        d.test.len(),
        d.classes.len(),
        d.width,
        d.height,
        path.display(),
        t.elapsed().as_secs_f64()
    );
    println!("use it with --data {name}");
    Ok(0)
}

/// `tricklab data list`.
fn list_cmd() -> Result<i32> {
    println!(
        "{:<28} {:>7} {:>6} {:>7}  {:<16} source",
        "name", "train", "test", "classes", "hash"
    );
    for i in list()? {
        println!(
            "{:<28} {:>7} {:>6} {:>7}  {:<16} {}",
            i.name,
            i.train,
            i.test,
            i.classes,
            &i.hash[..16.min(i.hash.len())],
            i.source
        );
    }
    Ok(0)
}

/// `tricklab data export`: raw bytes other programs read, in tricklab's order.
fn export_cmd(
    name: &str,
    out: &Path,
    train_per_class: Option<usize>,
    test_per_class: Option<usize>,
) -> Result<i32> {
    let full = load(name)?;
    let d = if train_per_class.is_some() || test_per_class.is_some() {
        full.subset(train_per_class, test_per_class)
    } else {
        full
    };
    // Image trees and the embedded set load interleaved; CIFAR-10's binary keeps its own order.
    let order = if is_embedded(name) || data_dir().join(name).join(CACHE_FILE).is_file() {
        IMPORT_ORDER
    } else {
        "as loaded"
    };
    export_raw(&d, out, order)?;
    println!(
        "exported {} train + {} test images of `{}` (hash {}) to {}",
        d.train.len(),
        d.test.len(),
        d.name,
        &d.hash[..16.min(d.hash.len())],
        out.display()
    );
    Ok(0)
}

/// `tricklab data synth`: an ImageNet-like folder of JPEGs, its long side
/// read from `long_side` (MIN-MAX) and the rest as (classes, train and
/// validation images a class, JPEG quality, seed).
fn synth_cmd(
    dir: &Path,
    long_side: &str,
    (classes, train_per_class, val_per_class, quality, seed): (usize, usize, usize, u8, u64),
) -> Result<i32> {
    let bad = || {
        anyhow::anyhow!(
            "--long-side {long_side:?} is not MIN-MAX in pixels with 1 <= MIN <= MAX (e.g. 330-500)"
        )
    };
    let (lo, hi) = long_side.split_once('-').ok_or_else(bad)?;
    let long_side: (u32, u32) = (
        lo.trim().parse().map_err(|_| bad())?,
        hi.trim().parse().map_err(|_| bad())?,
    );
    if long_side.0 == 0 || long_side.0 > long_side.1 {
        return Err(bad());
    }
    if classes == 0 || train_per_class == 0 || !(1..=100).contains(&quality) {
        bail!("--classes and --train-per-class must be at least 1 and --quality 1-100");
    }
    if dir.exists() {
        bail!(
            "{} exists: give a new folder (synth never writes into an existing one)",
            dir.display()
        );
    }
    // Written beside its place and renamed at the end: a killed run leaves no half folder under the name.
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let t = std::time::Instant::now();
    let spec = stream::synth::SynthSpec {
        classes,
        train_per_class,
        val_per_class,
        long_side,
        quality,
        seed,
    };
    let bytes = stream::synth::imagenet_like(&partial, &spec)?;
    std::fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))?;
    let n = classes * (train_per_class + val_per_class);
    println!(
        "wrote {} train + {} val JPEGs of {classes} classes ({:.0} MB, {:.0} KB each, long side {}-{} px) into {} in {:.1} s",
        classes * train_per_class,
        classes * val_per_class,
        bytes as f64 / 1e6,
        bytes as f64 / n as f64 / 1024.0,
        long_side.0,
        long_side.1,
        dir.display(),
        t.elapsed().as_secs_f64()
    );
    println!(
        "stream it with `tricklab data stream {}`, train on it with --data {0}",
        dir.display()
    );
    Ok(0)
}

/// `tricklab data check`: a store, an image folder's survey, or an
/// in-memory set's counts and problems.
fn check_cmd(name: &str) -> Result<i32> {
    if let Some(f) = stream::source::store_file(name) {
        return check_store(&f);
    }
    let dir = Path::new(name);
    if dir.join("train").is_dir() {
        let (ok, uniform) = survey_folder(dir)?;
        if !ok {
            return Ok(1);
        }
        if !uniform {
            println!(
                "sizes vary: the in-memory checks (duplicates, train/test leaks) are for fixed-size sets; this folder streams (`tricklab data stream`)"
            );
            return Ok(0);
        }
        // The in-memory loader reads train/ + test/ (CIFAR's layout);
        // a train/ + val/ folder of one size still only streams.
        if !dir.join("test").is_dir() {
            println!(
                "one image size, but no test/ folder: the in-memory checks (duplicates, train/test leaks) read train/ + test/; this folder streams (`tricklab data stream`)"
            );
            return Ok(0);
        }
        println!("one image size: the in-memory checks follow");
    }
    let d = load(name)?;
    println!(
        "{}: {}x{}x{} images, hash {}",
        d.name, d.channels, d.height, d.width, d.hash
    );
    let (tr, te) = (d.class_counts(&d.train), d.class_counts(&d.test));
    println!("{:<16} {:>7} {:>6}", "class", "train", "test");
    for (i, c) in d.classes.iter().enumerate() {
        println!("{c:<16} {:>7} {:>6}", tr[i], te[i]);
    }
    println!("{:<16} {:>7} {:>6}", "total", d.train.len(), d.test.len());
    let problems = check(&d);
    if problems.is_empty() {
        println!("no problems found");
        return Ok(0);
    }
    for p in &problems {
        println!("problem: {}", p.0);
    }
    eprintln!("error: {} problem(s) found in {name}", problems.len());
    Ok(1)
}

struct StreamCmd {
    dir: PathBuf,
    split: String,
    size: usize,
    batch: usize,
    workers: Option<usize>,
    batches: Option<usize>,
    seed: u64,
    on_bad_image: stream::OnBadImage,
    decode_only: bool,
    rect: bool,
}

/// `tricklab data stream`: one epoch (or `--batches`) through the loader, with
/// its throughput, the time the consumer waited and the files left out.
/// Training drops a last partial batch, as every reference does: a batch
/// past the split's images would stream nothing.
fn refuse_empty_epoch(a: &StreamCmd, held: usize, train: bool) -> Result<()> {
    if train && a.batch > held {
        bail!(
            "--batch {} is more than the {held} {} images of {}: a training epoch drops its last partial batch and would read none; lower --batch (at most {held})",
            a.batch,
            a.split,
            a.dir.display()
        );
    }
    Ok(())
}

/// Runs an import into `folder`; a failed one (a full disk, a bad source)
/// leaves no empty `data/NAME/` behind that it made itself.
fn keep_no_empty_folder<T>(folder: &Path, import: impl FnOnce() -> Result<T>) -> Result<T> {
    let existed = folder.exists();
    let r = import();
    if r.is_err() && !existed {
        // remove_dir takes an empty folder only: nothing written is lost.
        let _ = std::fs::remove_dir(folder);
    }
    r
}

/// A store keeps its images at most max_side: past it the output is
/// upsampled, which a user measuring a loader should be told.
fn upsample_note(dir: &Path, size: usize) -> Result<()> {
    if let Some(f) = stream::source::store_file(&dir.to_string_lossy()) {
        let most = stream::store::Store::open(&f)?.header.max_side;
        if most < size {
            eprintln!(
                "note: the store keeps its images at most {most} px on a side, so a {size}x{size} output upsamples them; import with --max-side {size} or more to stream them at full detail"
            );
        }
    }
    Ok(())
}

fn stream_cmd(a: &StreamCmd) -> Result<i32> {
    use stream::{Crop, Images, Loader, LoaderOptions, Pipeline};
    let (pipeline, train) = match (a.split.as_str(), a.rect) {
        ("train", false) => (Crop::TRAIN, true),
        ("val" | "test", false) => (Crop::VAL, false),
        ("val" | "test", true) => (Crop::Rect, false),
        ("train", true) => bail!("--rect is fast.ai's validation: use it with --split val"),
        (other, _) => bail!("--split {other}: choose train or val"),
    };
    let (images, classes) = open_images(&a.dir, train)?;
    upsample_note(&a.dir, a.size)?;
    let held = images.count();
    refuse_empty_epoch(a, held, train)?;
    let limit = a
        .batches
        .map_or(images.count(), |b| (b * a.batch).min(images.count()));
    let workers = a
        .workers
        .unwrap_or_else(|| LoaderOptions::default().workers);
    // `--batches` streams the first batches of the same epoch.
    let (mut order, mut rects) = match a.rect {
        true => {
            let plan = rect_order(images.as_ref(), a.batch, a.size)?;
            (plan.order, Some(plan.sizes))
        }
        false => (stream::epoch_order(images.count(), a.seed, 0, train), None),
    };
    order.truncate(limit);
    if let Some(r) = rects.as_mut() {
        r.truncate(limit.div_ceil(a.batch));
    }
    let opts = LoaderOptions {
        batch: a.batch,
        workers,
        seed: a.seed,
        // Ordered above, before `--batches` cuts the epoch short.
        shuffle: false,
        drop_last: train,
        on_bad: a.on_bad_image,
        rect: rects.map(std::sync::Arc::new),
        ..LoaderOptions::default()
    };
    let chosen: std::sync::Arc<dyn Images> = std::sync::Arc::new(stream::Subset {
        inner: images,
        ids: order,
    });
    // What the folder holds, and (where --batches or the dropped last batch
    // cut it) how many of them this pass reads.
    let reads = if train {
        chosen.count() / a.batch * a.batch
    } else {
        chosen.count()
    };
    let reading = if reads == held {
        String::new()
    } else {
        format!(" (reading {reads})")
    };
    println!(
        "{}: {held} {} images{reading} of {} classes; pipeline: read, decode ({}), {}, resize to {}x{} (antialiased){}; batch {}, {} threads, prefetch {}",
        a.dir.display(),
        a.split,
        classes,
        crate::data::stream::decode::DECODERS,
        describe(pipeline),
        a.size,
        a.size,
        if train { ", flip" } else { "" },
        a.batch,
        workers,
        opts.prefetch
    );
    let pipe = Pipeline {
        size: a.size,
        crop: pipeline,
        flip: train,
    };
    let mut loader = Loader::new(chosen.clone(), pipe, &opts)?;
    for b in loader.by_ref() {
        b?.skipped.iter().for_each(|s| eprintln!("{s}"));
    }
    say_throughput(&loader.stats(), chosen.as_ref(), workers, a.decode_only)?;
    Ok(0)
}

/// ImageNet-1k's images (train + val), for the size a store's settings
/// would give the whole set.
const IMAGENET_IMAGES: f64 = 1_281_167.0 + 50_000.0;

/// `data check` of a store: opening it checks its index (checksum, labels,
/// offsets, raw sizes); then what it holds, its bytes an image by format,
/// and the size the full ImageNet would take at those bytes.
fn check_store(path: &Path) -> Result<i32> {
    let s = stream::store::Store::open(path)?;
    let h = &s.header;
    let [(jpeg, jpeg_b), (raw, raw_b)] = s.composition();
    let n = (jpeg + raw).max(1);
    println!(
        "{}: a store of {} train + {} val images of {} classes, at most {} px on a side, from {}",
        path.display(),
        h.train,
        h.val,
        h.classes.len(),
        h.max_side,
        h.source
    );
    let per = |b: u64, k: usize| b as f64 / k.max(1) as f64 / 1024.0;
    println!(
        "stored as: {jpeg} JPEG ({:.1}%, {:.1} KB an image), {raw} raw ({:.1}%, {:.1} KB an image){}",
        100.0 * jpeg as f64 / n as f64,
        per(jpeg_b, jpeg),
        100.0 * raw as f64 / n as f64,
        per(raw_b, raw),
        h.jpeg_fraction
            .map(|f| format!("; asked {:.1}% JPEG", 100.0 * f))
            .unwrap_or_default()
    );
    let mean = (jpeg_b + raw_b) as f64 / n as f64;
    println!(
        "{:.1} KB an image: the full ImageNet (1,331,167 images) at these settings would take about {:.0} GB, if its images shrink as this store's did (ImageNet's average is about 400x350 px)",
        mean / 1024.0,
        mean * IMAGENET_IMAGES / 1e9
    );
    println!("index checked: every label, offset and size is sound");
    Ok(0)
}

/// `data check DIR`: images per class and the spread of sizes, from headers
/// only; (no problem found, every image of one size).
fn survey_folder(dir: &Path) -> Result<(bool, bool)> {
    let index = stream::FolderIndex::open(dir)?;
    for n in &index.notes {
        println!("note: {n}");
    }
    let t = std::time::Instant::now();
    let s = stream::survey::survey(&index);
    println!(
        "{}: {} classes; headers of {} files read in {:.1} s",
        dir.display(),
        index.classes.len(),
        index.train.len() + index.val.len(),
        t.elapsed().as_secs_f64()
    );
    println!("{:<24} {:>7} {:>6}", "class", "train", "val");
    for (i, c) in index.classes.iter().enumerate() {
        println!(
            "{c:<24} {:>7} {:>6}",
            s.train.per_class[i], s.val.per_class[i]
        );
    }
    println!(
        "{:<24} {:>7} {:>6}",
        "total",
        s.train.images(),
        s.val.images()
    );
    for (name, split) in [("train", &s.train), ("val", &s.val)] {
        if split.images() > 0 {
            let (lo, hi) = (
                split.per_class.iter().min().copied().unwrap_or(0),
                split.per_class.iter().max().copied().unwrap_or(0),
            );
            println!("{name}: {lo} to {hi} images a class; {}", split.spread());
        }
    }
    let problems = stream::survey::problems(&index, &s);
    for p in &problems {
        println!("problem: {p}");
    }
    let all = |v: &[usize]| v.first() == v.last();
    let uniform = all(&s.train.short) && all(&s.train.long);
    if problems.is_empty() {
        return Ok((true, uniform));
    }
    eprintln!(
        "error: {} problem(s) found in {}; `data stream --on-bad-image skip` trains without the unreadable files",
        problems.len(),
        dir.display()
    );
    Ok((false, uniform))
}

/// Images a second for the plain read + decode of `images` on `workers` threads.
fn decode_rate(images: &dyn stream::Images, workers: usize) -> Result<f64> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()?;
    let t = std::time::Instant::now();
    let decoded: usize = pool.install(|| {
        (0..images.count())
            .into_par_iter()
            .filter(|&i| images.pixels(i).is_ok())
            .count()
    });
    Ok(decoded as f64 / t.elapsed().as_secs_f64())
}

/// The pipeline in words, as the loader runs it.
fn describe(crop: stream::Crop) -> String {
    match crop {
        stream::Crop::RandomResized { scale, ratio } => format!(
            "random-resized crop (scale {}-{}, ratio {:.3}-{:.3})",
            scale.0, scale.1, ratio.0, ratio.1
        ),
        stream::Crop::Centre { ratio } => format!("centre crop ({ratio} of the short side)"),
        stream::Crop::Rect => {
            "fast.ai's rectangular crop (short side to 1.14x, each batch its rectangle)".into()
        }
    }
}

/// A folder, a store made by `data import --max-side` (by name or path), or
/// an in-memory data set (`StreamData::open`): the split's images and the
/// number of classes.
fn open_images(dir: &Path, train: bool) -> Result<(std::sync::Arc<dyn stream::Images>, usize)> {
    let data = stream::StreamData::open(&dir.to_string_lossy(), load)?;
    for n in &data.notes {
        eprintln!("note: {n}");
    }
    let split = if train { data.train } else { data.val };
    Ok((split, data.classes.len()))
}

/// fast.ai's validation order and each batch's rectangle, from the images'
/// headers (or a store's index).
fn rect_order(
    images: &dyn stream::Images,
    batch: usize,
    size: usize,
) -> Result<stream::rect::RectPlan> {
    let dims = (0..images.count())
        .map(|i| {
            images
                .dims(i)
                .map_err(|e| anyhow::anyhow!("{}: {e:#}", images.name(i)))
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = stream::rect::plan(&dims, batch, size);
    let ratio = |&(h, w): &(usize, usize)| w as f64 / h as f64;
    let lo = plan.sizes.iter().map(ratio).fold(f64::INFINITY, f64::min);
    let hi = plan.sizes.iter().map(ratio).fold(0.0, f64::max);
    println!(
        "rectangular validation: {} batches from {lo:.2}:1 to {hi:.2}:1 (width:height)",
        plan.sizes.len()
    );
    Ok(plan)
}

/// The loader's own account, and with `--decode-only` the decoder's limit beside it.
fn say_throughput(
    st: &stream::LoaderStats,
    chosen: &dyn stream::Images,
    workers: usize,
    decode_only: bool,
) -> Result<()> {
    println!(
        "pipeline: {} images in {} batches, {:.2} s: {:.0} images/s ({} skipped); the consumer waited {:.2} s",
        st.images,
        st.batches,
        st.seconds,
        st.images_per_s(),
        st.skipped,
        st.wait_s
    );
    if decode_only {
        let rate = decode_rate(chosen, workers)?;
        println!(
            "decode only: {rate:.0} images/s on the same threads; the pipeline runs at {:.0}% of it",
            100.0 * st.images_per_s() / rate
        );
    }
    Ok(())
}

#[cfg(test)]
mod import_tests {
    /// A failed import leaves no empty folder of its own behind, and a full
    /// disk exits 3 (the machine's failure), not 2.
    #[test]
    fn a_failed_import_leaves_no_empty_folder_and_a_full_disk_exits_3() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().join("data/name");
        let full = || -> anyhow::Result<()> {
            std::fs::create_dir_all(&folder)?;
            Err(
                anyhow::Error::new(std::io::Error::from_raw_os_error(libc::ENOSPC))
                    .context("cannot write data/name/images.tlst"),
            )
        };
        let e = super::keep_no_empty_folder(&folder, full).unwrap_err();
        assert!(!folder.exists(), "an empty data/name/ was left");
        assert_eq!(crate::util::exit_code_of(&e), crate::util::exit::FAILURE);
        // A folder that was there before, or holds something, is kept.
        std::fs::create_dir_all(&folder).unwrap();
        let _ = super::keep_no_empty_folder(&folder, full);
        assert!(folder.exists());
        let bad_input = anyhow::anyhow!("src: no such folder");
        assert_eq!(
            crate::util::exit_code_of(&bad_input),
            crate::util::exit::INPUT
        );
    }
}
