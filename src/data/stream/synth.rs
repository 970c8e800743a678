//! ImageNet-like image folders for the tests and benchmarks: JPEGs of
//! photo-like sizes and aspect ratios (ImageNet's average is about 400 x 350
//! and 110 KB), whose class shows in their colour and stripes, so that a net
//! can learn them and a wrong label or a blank image shows.

use anyhow::{Context, Result};
use image::ImageEncoder;
use std::path::Path;

use super::SplitMix;

#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub classes: usize,
    pub train_per_class: usize,
    pub val_per_class: usize,
    /// The long side is drawn from this range, the short side from an aspect
    /// ratio among ImageNet's common ones (4:3, 16:9, 5:4, 1:1, 3:2, portrait).
    pub long_side: (u32, u32),
    pub quality: u8,
    pub seed: u64,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            classes: 10,
            train_per_class: 20,
            val_per_class: 5,
            long_side: (330, 500),
            quality: 90,
            seed: 0,
        }
    }
}

impl SynthSpec {
    /// A test's small folder: `classes` classes of `train_per_class`
    /// training and `val_per_class` validation images, long sides of 40 to
    /// 90 px, and the rest [`Default`]'s (quality 90, seed 0); a test sets
    /// its own seed, sizes or quality by struct update.
    pub fn small(classes: usize, train_per_class: usize, val_per_class: usize) -> SynthSpec {
        SynthSpec {
            classes,
            train_per_class,
            val_per_class,
            long_side: (40, 90),
            ..SynthSpec::default()
        }
    }
}

/// Class `c`'s colour and stripe frequency, so that images of one class look alike.
fn class_look(c: usize) -> ([f64; 3], f64) {
    let hue = c as f64 * 2.399_963; // the golden angle: classes far apart
    (
        [
            128.0 + 90.0 * hue.cos(),
            128.0 + 90.0 * (hue + 2.094).cos(),
            128.0 + 90.0 * (hue + 4.189).cos(),
        ],
        2.0 + (c % 7) as f64,
    )
}

/// One JPEG of class `c`, `w` x `h`.
pub fn photo(c: usize, w: u32, h: u32, quality: u8, g: &mut SplitMix) -> Result<Vec<u8>> {
    let (tint, freq) = class_look(c);
    let phase = g.unit_f64() * std::f64::consts::TAU;
    let mut px = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (f64::from(x) / f64::from(w), f64::from(y) / f64::from(h));
            let wave = 40.0 * (freq * std::f64::consts::TAU * (u + 0.5 * v) + phase).sin();
            for t in tint {
                let grain = (g.next_u64() % 40) as f64 - 20.0;
                px.push((t + wave + grain).clamp(0.0, 255.0) as u8);
            }
        }
    }
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality)
        .write_image(&px, w, h, image::ExtendedColorType::Rgb8)
        .context("encoding a synthetic JPEG")?;
    Ok(out)
}

/// Writes `root/train/<class>/NNNNN.JPEG` and `root/val/<class>/...`;
/// returns the bytes written. Each (split, class) draws from its own
/// generator, so that the classes are written on every core and a folder is
/// the same whatever the number of threads.
pub fn imagenet_like(root: &Path, spec: &SynthSpec) -> Result<u64> {
    let jobs: Vec<(&str, usize, usize)> =
        [("train", spec.train_per_class), ("val", spec.val_per_class)]
            .into_iter()
            .flat_map(|(split, per)| (0..spec.classes).map(move |c| (split, c, per)))
            .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(jobs.len()).max(1))
            .map(|_| {
                s.spawn(|| -> Result<u64> {
                    let mut bytes = 0;
                    loop {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(split, c, per)) = jobs.get(j) else {
                            return Ok(bytes);
                        };
                        bytes += class_folder(root, spec, split, c, per)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a synthetic-folder thread panicked"))
            .sum()
    })
}

/// One class of one split: `per` JPEGs of photo-like sizes.
fn class_folder(root: &Path, spec: &SynthSpec, split: &str, c: usize, per: usize) -> Result<u64> {
    let ratios: [f64; 6] = [0.75, 0.5625, 0.8, 1.0, 0.667, 1.333];
    let split_no = u64::from(split == "val");
    let mut g = SplitMix(
        spec.seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(((c as u64) << 1 | split_no).wrapping_mul(0xD1B5_4A32_D192_ED03)),
    );
    let dir = root.join(split).join(format!("n{c:08}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut bytes = 0u64;
    for i in 0..per {
        let span = u64::from(spec.long_side.1 - spec.long_side.0 + 1);
        let long = spec.long_side.0 + (g.next_u64() % span) as u32;
        let r = ratios[(g.next_u64() % ratios.len() as u64) as usize];
        let short = ((f64::from(long) * r.min(1.0 / r)).round() as u32).max(1);
        let (w, h) = if r <= 1.0 {
            (long, short)
        } else {
            (short, long)
        };
        let jpg = photo(c, w, h, spec.quality, &mut g)?;
        bytes += jpg.len() as u64;
        let path = dir.join(format!("{i:05}.JPEG"));
        std::fs::write(&path, jpg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(bytes)
}
