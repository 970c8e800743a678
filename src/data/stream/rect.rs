//! fast.ai's rectangular validation (the DAWNBench ImageNet entry, 2018;
//! `training/dataloader.py` of cybertronai/imagenet18: `sort_ar`,
//! `map_idx2ar`, `CropArTfm`): validation images sorted by aspect ratio and
//! batched in that order, each batch resized to one rectangle near its
//! images' shape instead of a centre square, so little of any image is cut.
//!
//! - each image's ratio w/h, rounded to 5 decimals; the images sorted by it
//!   (a stable sort);
//! - batches of `batch` consecutive images; a batch's ratio is the mean of
//!   its images', rounded to 5 decimals;
//! - ratio < 1: `size` wide and `int(size / ratio)` high, cut down to a
//!   multiple of 8; otherwise `size` high and `int(size · ratio)` wide, likewise;
//! - each image: `Resize(int(size · 1.14))` (its short side), then a centre
//!   crop of the batch's rectangle.
//!
//! One difference: where the rectangle is larger than an image resized so
//! (an image far from its batch's mean), torchvision's `center_crop` pads it
//! with black; here the crop stops at the image's edge and the resampling
//! stretches it to the rectangle, so no batch carries black borders.

use super::resample::CropBox;

fn round5(x: f64) -> f64 {
    (x * 1e5).round() / 1e5
}

/// The validation order and each batch's (height, width).
#[derive(Clone, Debug, PartialEq)]
pub struct RectPlan {
    pub order: Vec<usize>,
    pub sizes: Vec<(usize, usize)>,
}

/// `dims` are each image's (width, height).
pub fn plan(dims: &[(usize, usize)], batch: usize, size: usize) -> RectPlan {
    let ars: Vec<f64> = dims
        .iter()
        .map(|&(w, h)| round5(w as f64 / h.max(1) as f64))
        .collect();
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by(|&a, &b| ars[a].total_cmp(&ars[b]));
    let sizes = order
        .chunks(batch.max(1))
        .map(|chunk| {
            let mean = round5(chunk.iter().map(|&i| ars[i]).sum::<f64>() / chunk.len() as f64);
            let s = size as f64;
            if mean < 1.0 {
                (((s / mean) as usize / 8 * 8).max(8), size)
            } else {
                (size, ((s * mean) as usize / 8 * 8).max(8))
            }
        })
        .collect();
    RectPlan { order, sizes }
}

/// The source box of an image `w` x `h` that `Resize(int(size · 1.14))`
/// then a centre crop to `out_h` x `out_w` keeps, stopped at the image's edge.
pub fn crop_box(w: usize, h: usize, out_h: usize, out_w: usize, size: usize) -> CropBox {
    let short = (size as f64 * 1.14) as usize;
    // torchvision's Resize(int): the short side to `short`, the long side
    // int(short · long / short_side).
    let (rw, rh) = if w <= h {
        (short, (short as f64 * h as f64 / w as f64) as usize)
    } else {
        ((short as f64 * w as f64 / h as f64) as usize, short)
    };
    let (cw, ch) = (out_w.min(rw), out_h.min(rh));
    // torchvision's center_crop: int(round((size - crop) / 2)), Python's
    // round halving to even.
    let left = ((rw - cw) as f64 / 2.0).round_ties_even();
    let top = ((rh - ch) as f64 / 2.0).round_ties_even();
    let (sx, sy) = (w as f64 / rw as f64, h as f64 / rh as f64);
    CropBox {
        x: left * sx,
        y: top * sy,
        w: cw as f64 * sx,
        h: ch as f64 * sy,
    }
}
