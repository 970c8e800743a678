//! Crop boxes (random-resized and centre) and one antialiased resampling of a
//! box to the output size.
//!
//! The box is cut and resized in one pass: a separable triangle (bilinear)
//! filter whose support widens with the downscale factor, as Pillow's
//! `Image.resize(..., BILINEAR)` that torchvision's `RandomResizedCrop` calls,
//! so a 500 px crop shrunk to 224 is averaged rather than aliased.

use super::decode::Rgb;

/// A crop in source pixels: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropBox {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// torchvision's `RandomResizedCrop.get_params`: up to 10 draws of an area
/// fraction in `scale` and a log-uniform aspect ratio in `ratio`; then the
/// whole image clamped to the ratio range, centred.
pub fn random_resized(
    width: usize,
    height: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
    mut uniform: impl FnMut() -> f64,
) -> CropBox {
    let (wf, hf) = (width as f64, height as f64);
    let area = wf * hf;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * (scale.0 + (scale.1 - scale.0) * uniform());
        let aspect = (lr0 + (lr1 - lr0) * uniform()).exp();
        let w = (target * aspect).sqrt().round();
        let h = (target / aspect).sqrt().round();
        if w > 0.0 && h > 0.0 && w <= wf && h <= hf {
            // torch.randint(0, H - h + 1): a whole-pixel offset.
            let y = ((hf - h + 1.0) * uniform()).floor().min(hf - h);
            let x = ((wf - w + 1.0) * uniform()).floor().min(wf - w);
            return CropBox { x, y, w, h };
        }
    }
    let in_ratio = wf / hf;
    let (w, h) = if in_ratio < ratio.0 {
        (wf, (wf / ratio.0).round().max(1.0))
    } else if in_ratio > ratio.1 {
        ((hf * ratio.1).round().max(1.0), hf)
    } else {
        (wf, hf)
    };
    CropBox {
        x: ((wf - w) / 2.0).floor(),
        y: ((hf - h) / 2.0).floor(),
        w,
        h,
    }
}

/// Validation's resize-then-centre-crop (`Resize(size / crop_ratio)` then
/// `CenterCrop(size)`) as one box: the central square whose side is
/// `crop_ratio` of the short side.
pub fn centre(width: usize, height: usize, crop_ratio: f64) -> CropBox {
    let side = (width.min(height) as f64 * crop_ratio).max(1.0);
    CropBox {
        x: (width as f64 - side) / 2.0,
        y: (height as f64 - side) / 2.0,
        w: side,
        h: side,
    }
}

/// The source taps and their normalised weights for each output coordinate.
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<f32>>,
}

fn taps(start: f64, len: f64, src: usize, out: usize) -> Taps {
    let scale = len / out as f64;
    // Downscaling widens the filter to cover every source pixel; upscaling
    // keeps bilinear's radius of one pixel.
    let support = scale.max(1.0);
    let mut first = Vec::with_capacity(out);
    let mut weights = Vec::with_capacity(out);
    for o in 0..out {
        let centre = start + (o as f64 + 0.5) * scale;
        let lo = ((centre - support).floor().max(0.0) as usize).min(src - 1);
        let hi = ((centre + support).ceil() as usize).clamp(lo + 1, src);
        let mut w: Vec<f32> = (lo..hi)
            .map(|i| {
                let d = ((i as f64 + 0.5 - centre) / support).abs();
                (1.0 - d).max(0.0) as f32
            })
            .collect();
        let sum: f32 = w.iter().sum();
        if sum > 0.0 {
            w.iter_mut().for_each(|v| *v /= sum);
        } else {
            // A box narrower than a pixel between two centres: nearest.
            w.iter_mut().for_each(|v| *v = 0.0);
            let nearest = (centre.floor().max(0.0) as usize).clamp(lo, hi - 1);
            w[nearest - lo] = 1.0;
        }
        first.push(lo);
        weights.push(w);
    }
    Taps { first, weights }
}

/// Resamples `crop` of `img` to `out_w` x `out_h`, optionally mirrored, into
/// `dst` (HWC, 3 bytes a pixel).
pub fn resample(img: &Rgb, crop: CropBox, out_w: usize, out_h: usize, flip: bool, dst: &mut [u8]) {
    assert_eq!(dst.len(), out_w * out_h * 3, "destination size");
    let tx = taps(crop.x, crop.w, img.width, out_w);
    let ty = taps(crop.y, crop.h, img.height, out_h);
    // Horizontal pass over only the rows the vertical taps read.
    let row_lo = ty.first.iter().copied().min().unwrap_or(0);
    let row_hi = ty
        .first
        .iter()
        .zip(&ty.weights)
        .map(|(f, w)| f + w.len())
        .max()
        .unwrap_or(0);
    let mut mid = vec![0f32; (row_hi - row_lo) * out_w * 3];
    // Each source row once to f32 (the taps of neighbouring outputs overlap),
    // then each output's taps as one slice: no per-tap bounds checks.
    let mut row = vec![0f32; img.width * 3];
    for r in row_lo..row_hi {
        let src = &img.pixels[r * img.width * 3..(r + 1) * img.width * 3];
        row.iter_mut()
            .zip(src)
            .for_each(|(d, &v)| *d = f32::from(v));
        let line = &mut mid[(r - row_lo) * out_w * 3..(r - row_lo + 1) * out_w * 3];
        for (o, (&first, w)) in tx.first.iter().zip(&tx.weights).enumerate() {
            let taps = &row[first * 3..(first + w.len()) * 3];
            let mut acc = [0f32; 3];
            for (p, &wk) in taps.chunks_exact(3).zip(w) {
                acc[0] += wk * p[0];
                acc[1] += wk * p[1];
                acc[2] += wk * p[2];
            }
            let at = if flip { out_w - 1 - o } else { o };
            line[at * 3..at * 3 + 3].copy_from_slice(&acc);
        }
    }
    // Vertical pass a whole row at a time, so the inner loop runs along
    // memory and vectorises.
    let stride = out_w * 3;
    let mut acc = vec![0f32; stride];
    for (o, (first, w)) in ty.first.iter().zip(&ty.weights).enumerate() {
        acc.fill(0.0);
        for (k, wk) in w.iter().enumerate() {
            let row = &mid[(first + k - row_lo) * stride..(first + k - row_lo + 1) * stride];
            acc.iter_mut().zip(row).for_each(|(a, v)| *a += wk * v);
        }
        let out = &mut dst[o * stride..(o + 1) * stride];
        out.iter_mut()
            .zip(&acc)
            .for_each(|(d, a)| *d = a.round().clamp(0.0, 255.0) as u8);
    }
}
