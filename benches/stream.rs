//! The streaming loader beside torchvision's, on the same JPEGs and cores, in
//! one run (issue 35):
//!
//! - tricklab: read + decode + random-resized crop to 224 + flip + u8 tensor,
//!   `workers` threads;
//! - torchvision 0.26: ImageFolder + RandomResizedCrop(224) +
//!   RandomHorizontalFlip + ToTensor through a DataLoader with the same
//!   number of worker processes (`scripts/bench/torchvision_loader.py`, under
//!   .venv's python; skipped with a line if torchvision is missing);
//! - the plain decode of the same files on the same threads: the decoder's
//!   limit, against which the pipeline's distance is read;
//! - peak memory over an epoch of BENCH_STREAM_IMAGES entries (default
//!   100,000; the generated files repeat), against one of 1/10 the length:
//!   flat, not growing with the data set.
//!
//! Each side: one warm-up epoch, then the best of two. Env: BENCH_STREAM_FILES
//! (default 512 JPEGs), BENCH_STREAM_WORKERS (default: every core).

use std::sync::Arc;
use std::time::Instant;
use tricklab::data::stream::synth::{SynthSpec, imagenet_like};
use tricklab::data::stream::{
    Crop, FolderIndex, Images, Loader, LoaderOptions, OnBadImage, Pipeline, decode, store,
};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn epoch(entries: &Arc<dyn Images>, workers: usize, batch: usize) -> (usize, f64) {
    let pipe = Pipeline {
        size: 224,
        crop: Crop::TRAIN,
        flip: true,
    };
    let opts = LoaderOptions {
        batch,
        workers,
        ..LoaderOptions::default()
    };
    let t = Instant::now();
    let mut n = 0;
    for b in Loader::new(entries.clone(), pipe, &opts).expect("loader") {
        let b = b.expect("batch");
        let (x, _) = b.to_tensors(tch::Device::Cpu).expect("tensors");
        n += x.size()[0] as usize;
    }
    (n, t.elapsed().as_secs_f64())
}

fn main() {
    let files = env("BENCH_STREAM_FILES", 512);
    let workers = env(
        "BENCH_STREAM_WORKERS",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let long = env("BENCH_STREAM_IMAGES", 100_000);
    let batch = 64;
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = SynthSpec {
        classes: 10,
        train_per_class: files / 10,
        val_per_class: 0,
        long_side: (330, 500),
        quality: 90,
        seed: 1,
    };
    let bytes = imagenet_like(dir.path(), &spec).expect("writing the JPEGs");
    let index = FolderIndex::open(dir.path()).expect("index");
    let files: Arc<Vec<tricklab::data::stream::Entry>> = Arc::new(index.train.clone());
    let entries: Arc<dyn Images> = files.clone();
    let n = files.len();
    println!(
        "{n} JPEGs, {:.0} KB on average, long side 330-500 px; {workers} workers, batch {batch}, output 224x224",
        bytes as f64 / n as f64 / 1024.0
    );

    // tricklab: warm-up epoch, then the best of two.
    epoch(&entries, workers, batch);
    let ours = (0..2)
        .map(|_| epoch(&entries, workers, batch))
        .map(|(k, s)| k as f64 / s)
        .fold(0.0, f64::max);

    let decode_rate = decode_rate(&files, workers);

    let tv_rate = torchvision_rate(dir.path(), workers, batch);

    // Memory: an epoch of `long` entries (the files repeated) against one of long/10.
    let rss_before = peak_rss_mib();
    let short_list: Vec<_> = files.iter().cycle().take(long / 10).cloned().collect();
    let (k_short, _) = epoch(&(Arc::new(short_list) as Arc<dyn Images>), workers, batch);
    let rss_short = peak_rss_mib();
    let long_list: Vec<_> = files.iter().cycle().take(long).cloned().collect();
    let (k_long, s_long) = epoch(&(Arc::new(long_list) as Arc<dyn Images>), workers, batch);
    let rss_long = peak_rss_mib();
    // After the memory epochs: building a store holds a chunk of images.
    let stores = store_rates(dir.path(), workers, batch);

    println!();
    println!("| pipeline | images/s | × torchvision |");
    println!("|---|---|---|");
    let vs = |r: f64| tv_rate.map_or("-".into(), |t| format!("{:.2}", r / t));
    println!(
        "| tricklab: the JPEG folder ({:.0} KB an image): read + decode + random-resized crop 224 + flip + u8 tensor | {ours:.0} | {} |",
        bytes as f64 / n as f64 / 1024.0,
        vs(ours)
    );
    if let Some(t) = tv_rate {
        println!(
            "| torchvision 0.26: ImageFolder + RandomResizedCrop(224) + flip + ToTensor, DataLoader | {t:.0} | 1.00 |"
        );
    }
    println!(
        "| tricklab: plain decode of the same files (the decoder's limit) | {decode_rate:.0} | {} |",
        vs(decode_rate)
    );
    for (what, rate) in &stores {
        println!(
            "| tricklab: the same pipeline from a store ({what}) | {rate:.0} | {} |",
            vs(*rate)
        );
    }
    if let Some((_, mixed)) = stores.iter().find(|(w, _)| w.starts_with("mixed, 10%")) {
        println!(
            "\nthe mixed 10% store at {:.2}× the folder's images/s (goal: ≥ 3×)",
            mixed / ours
        );
    }
    like_for_like(&entries, dir.path(), workers, batch);
    println!(
        "\npipeline at {:.0}% of the plain decode",
        100.0 * ours / decode_rate
    );
    println!(
        "peak memory: {rss_before:.0} MiB before; {rss_short:.0} MiB after an epoch of {k_short} images; {rss_long:.0} MiB after one of {k_long} ({:.0} images/s over it)",
        k_long as f64 / s_long
    );
}

/// Like for like (issue 51 item 6): torchvision ending in uint8
/// (PILToTensor), as tricklab's pipeline does, in alternating pairs with
/// their spread.
fn like_for_like(entries: &Arc<dyn Images>, dir: &std::path::Path, workers: usize, batch: usize) {
    let pairs: Vec<(f64, f64)> = (0..3)
        .filter_map(|_| {
            let (k, s) = epoch(entries, workers, batch);
            let tv = torchvision_rate_with(
                dir,
                workers,
                batch,
                &["--to-tensor", "uint8", "--epochs", "1"],
            )?;
            Some((k as f64 / s, tv))
        })
        .collect();
    if !pairs.is_empty() {
        let range = |v: Vec<f64>| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            format!("{lo:.0}-{hi:.0}")
        };
        let ratios: Vec<f64> = pairs.iter().map(|(a, b)| a / b).collect();
        println!(
            "\nlike for like, {} alternating pairs: tricklab {} images/s, torchvision with PILToTensor (uint8) {} images/s; tricklab at {}× (goal ≥ 1.5×)",
            pairs.len(),
            range(pairs.iter().map(|p| p.0).collect()),
            range(pairs.iter().map(|p| p.1).collect()),
            {
                let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = ratios.iter().copied().fold(0.0, f64::max);
                format!("{lo:.2}-{hi:.2}")
            }
        );
    }
}

/// torchvision's loader on the same folder and workers, through .venv's
/// python; `None` (with a line saying why) where it cannot run.
fn torchvision_rate(dir: &std::path::Path, workers: usize, batch: usize) -> Option<f64> {
    torchvision_rate_with(dir, workers, batch, &[])
}

/// torchvision's loader with more arguments for its script (`--to-tensor
/// uint8`, `--epochs 1`).
fn torchvision_rate_with(
    dir: &std::path::Path,
    workers: usize,
    batch: usize,
    extra: &[&str],
) -> Option<f64> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python3");
    let out = std::process::Command::new(&python)
        .arg(root.join("scripts/bench/torchvision_loader.py"))
        .arg(dir)
        .args([
            "--workers",
            &workers.to_string(),
            "--batch",
            &batch.to_string(),
        ])
        .args(extra)
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let line = String::from_utf8_lossy(&o.stdout);
            serde_json::from_str::<serde_json::Value>(line.trim())
                .ok()
                .and_then(|v| v["images_per_s"].as_f64())
        }
        Ok(o) => {
            eprintln!(
                "torchvision side failed: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            eprintln!(
                "torchvision side not run ({}: {e}); `make bench` installs it",
                python.display()
            );
            None
        }
    }
}

/// The same folder as a pre-resized store (FFCV's manner): JPEG, raw, and
/// FFCV's mixed stores (10% JPEG as its ResNet-18 store, 50% as its
/// ResNet-50's): (what, images/s).
fn store_rates(dir: &std::path::Path, workers: usize, batch: usize) -> Vec<(String, f64)> {
    [
        ("JPEG", 1.0),
        ("raw", 0.0),
        ("mixed, 10% JPEG", 0.1),
        ("mixed, 50% JPEG", 0.5),
    ]
    .into_iter()
    .map(|(format, fraction)| {
        let out = dir.join(format!("store-{fraction}.tlst"));
        let t = Instant::now();
        let r = store::build(dir, &out, 256, fraction, OnBadImage::Fail).expect("store");
        let build_s = t.elapsed().as_secs_f64();
        let train: Arc<dyn Images> = store::Store::open(&out).expect("open").split(false);
        epoch(&train, workers, batch);
        let rate = (0..2)
            .map(|_| epoch(&train, workers, batch))
            .map(|(k, s)| k as f64 / s)
            .fold(0.0, f64::max);
        let what = format!(
            "{format}, at most 256 px, {:.0} KB an image, built at {:.0} images/s",
            r.bytes as f64 / (r.train + r.val) as f64 / 1024.0,
            (r.train + r.val) as f64 / build_s
        );
        (what, rate)
    })
    .collect()
}

/// The plain read + decode of the same files on the same number of threads,
/// best of two passes.
fn decode_rate(files: &[tricklab::data::stream::Entry], workers: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .expect("pool");
    (0..2)
        .map(|_| {
            let t = Instant::now();
            pool.install(|| {
                use rayon::prelude::*;
                files.par_iter().for_each(|e| {
                    let b = std::fs::read(&e.path).expect("read");
                    std::hint::black_box(decode::decode(&b).expect("decode"));
                });
            });
            files.len() as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}
