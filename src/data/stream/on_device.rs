//! The crop, resize and flip of a batch as tensor ops on the run's device,
//! for images a decoder left there whole (a GPU decoder's): the same boxes
//! the host loader draws (`geometry`), and the same antialiased triangle
//! filter as [`super::resample`], so the two paths give the same pixels to
//! within a rounding.
//!
//! The filter is separable and linear, so for each image the resized crop is
//! `Wy · X · Wxᵀ`, where `Wx` (out_w × width) and `Wy` (out_h × height) hold
//! each output pixel's source weights (zero outside its crop). The images
//! are padded into one batch tensor and both products are one batched
//! matmul each: the whole batch's crop-and-resize in two kernels, the
//! weights built on the device from each image's box, not a loop of
//! per-image kernels on the host. A flip reverses an image's `Wx` rows.

use super::resample::CropBox;
use anyhow::{Result, bail};
use tch::{Device, Kind, Tensor};

/// An image's crop along one axis: where it starts, how long it is, the
/// image's size along the axis, and whether the output runs backwards.
struct Span {
    start: f64,
    len: f64,
    src: usize,
    reversed: bool,
}

/// One axis's filter weights for the batch, (N, out, src_max): image n's
/// output pixel o reads source pixel i with weight `[n, o, i]`.
fn axis_weights(boxes: &[Span], out: usize, src_max: usize, device: Device) -> Tensor {
    let n = boxes.len() as i64;
    let col = |f: &dyn Fn(&Span) -> f64| {
        Tensor::from_slice(&boxes.iter().map(f).collect::<Vec<f64>>())
            .to_device(device)
            .view([n, 1, 1])
    };
    let scale = col(&|b| b.len / out as f64);
    // Downscaling widens the filter to cover every source pixel; upscaling
    // keeps bilinear's radius of one pixel (as `resample::taps`).
    let support = col(&|b| (b.len / out as f64).max(1.0));
    let start = col(&|b| b.start);
    let src = col(&|b| b.src as f64);
    let reversed = col(&|b| f64::from(u8::from(b.reversed)));
    let o = Tensor::arange(out as i64, (Kind::Double, device)).view([1, -1, 1]);
    // A flipped image's output o takes the taps of out - 1 - o.
    let o = &o + &reversed * ((out as f64 - 1.0) - &o * 2.0);
    let centre = &start + (o + 0.5) * &scale;
    let i = Tensor::arange(src_max as i64, (Kind::Double, device)).view([1, 1, -1]);
    let inside = i.lt_tensor(&src);
    let d = ((&i + 0.5 - &centre) / &support).abs();
    let w = (d.neg() + 1.0).clamp_min(0.0) * inside.to_kind(Kind::Double);
    // Normalised in float32, as the host filter sums its float32 taps.
    let w = w.to_kind(Kind::Float);
    let sum = w.sum_dim_intlist(-1, true, Kind::Float);
    // A box narrower than a pixel between two centres: the nearest pixel.
    let nearest = centre
        .floor()
        .clamp_min(0.0)
        .minimum(&(&src - 1.0))
        .to_kind(Kind::Float);
    let onehot = i
        .to_kind(Kind::Float)
        .eq_tensor(&nearest)
        .to_kind(Kind::Float);
    let has = sum.gt(0.0);
    (&w / sum.clamp_min(f64::MIN_POSITIVE)).where_self(&has, &onehot)
}

/// Crops `geometry[n].0` out of `images[n]` (each (3, H, W) uint8 on one
/// device), resizes it to `out_h` x `out_w` with the host loader's
/// antialiased filter, mirrors it where `geometry[n].1`, and returns the
/// batch as (N, 3, out_h, out_w) uint8 on that device, the layout the host
/// loader's batches have.
pub fn crop_resize_flip(
    images: &[Tensor],
    geometry: &[(CropBox, bool)],
    (out_h, out_w): (usize, usize),
) -> Result<Tensor> {
    if images.is_empty() || images.len() != geometry.len() {
        bail!(
            "{} images and {} crop boxes: one box for each image",
            images.len(),
            geometry.len()
        );
    }
    let device = images[0].device();
    let mut sides = Vec::with_capacity(images.len());
    for t in images {
        match t.size()[..] {
            [3, h, w] if t.kind() == Kind::Uint8 && t.device() == device => {
                sides.push((h as usize, w as usize));
            }
            _ => bail!(
                "an image of {:?} {:?} on {:?}: each must be (3, H, W) uint8 on {device:?}",
                t.size(),
                t.kind(),
                t.device()
            ),
        }
    }
    let h_max = sides.iter().map(|s| s.0).max().unwrap_or(1);
    let w_max = sides.iter().map(|s| s.1).max().unwrap_or(1);
    let n = images.len() as i64;
    let batch = Tensor::zeros([n, 3, h_max as i64, w_max as i64], (Kind::Float, device));
    for (k, (t, (h, w))) in images.iter().zip(&sides).enumerate() {
        batch
            .get(k as i64)
            .narrow(1, 0, *h as i64)
            .narrow(2, 0, *w as i64)
            .copy_(t);
    }
    let along_x: Vec<_> = geometry
        .iter()
        .zip(&sides)
        .map(|((c, flip), (_, w))| Span {
            start: c.x,
            len: c.w,
            src: *w,
            reversed: *flip,
        })
        .collect();
    let along_y: Vec<_> = geometry
        .iter()
        .zip(&sides)
        .map(|((c, _), (h, _))| Span {
            start: c.y,
            len: c.h,
            src: *h,
            reversed: false,
        })
        .collect();
    let wx = axis_weights(&along_x, out_w, w_max, device);
    let wy = axis_weights(&along_y, out_h, h_max, device);
    // Along the rows first, then the columns, as the host filter does.
    let mid = batch.matmul(&wx.transpose(1, 2).unsqueeze(1));
    let out = wy.unsqueeze(1).matmul(&mid);
    Ok(out.round().clamp(0.0, 255.0).to_kind(Kind::Uint8))
}

#[cfg(test)]
mod tests {
    use super::super::synth::{SynthSpec, imagenet_like};
    use super::super::{
        Crop, Images, Loader, LoaderOptions, OnBadImage, Pipeline, geometry, store,
    };
    use super::*;
    use std::sync::Arc;

    /// The device path and the host loader on one raw store (which the host
    /// decodes whole, as a GPU decoder would): the same crop boxes and flips
    /// from the same seed, and pixels within one level of the host's.
    #[test]
    fn the_device_crop_cuts_the_host_loaders_boxes_to_within_a_rounding() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SynthSpec {
            seed: 3,
            ..SynthSpec::small(2, 6, 2)
        };
        imagenet_like(dir.path(), &spec).unwrap();
        let out = dir.path().join("raw.tlst");
        store::build(dir.path(), &out, 64, 0.0, OnBadImage::Fail).unwrap();
        let train = store::Store::open(&out).unwrap().split(false);
        let n = train.count();
        let pipe = |size, crop, flip| (Pipeline { size, crop, flip }, size);
        for (pipe, size) in [
            pipe(24, Crop::TRAIN, true),
            pipe(40, Crop::TRAIN, true),
            pipe(32, Crop::VAL, false),
        ] {
            let opts = LoaderOptions {
                batch: n,
                seed: 11,
                epoch: 2,
                shuffle: false,
                workers: 1,
                ..LoaderOptions::default()
            };
            let host: Vec<_> = Loader::new(train.clone() as Arc<dyn Images>, pipe, &opts)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let (want, _) = host[0].to_tensors(Device::Cpu).unwrap();
            let images: Vec<Tensor> = (0..n)
                .map(|i| {
                    let img = train.pixels(i).unwrap();
                    Tensor::from_slice(&img.pixels)
                        .view([img.height as i64, img.width as i64, 3])
                        .permute([2, 0, 1])
                        .contiguous()
                })
                .collect();
            let geo: Vec<_> = (0..n)
                .map(|i| {
                    let (w, h) = train.dims(i).unwrap();
                    geometry(&pipe, (w, h), (size, size), (11, 2, i))
                })
                .collect();
            assert!(
                !pipe.flip || geo.iter().any(|g| g.1) && geo.iter().any(|g| !g.1),
                "both flips drawn"
            );
            let got = crop_resize_flip(&images, &geo, (size, size)).unwrap();
            assert_eq!(got.size(), want.size());
            let diff = (got.to_kind(Kind::Int) - want.to_kind(Kind::Int)).abs();
            let worst = diff.max().int64_value(&[]);
            let mean = diff
                .to_kind(Kind::Double)
                .mean(Kind::Double)
                .double_value(&[]);
            assert!(
                worst <= 1 && mean < 0.05,
                "{pipe:?}: worst {worst}, mean {mean}"
            );
        }
    }

    /// A box for each image, and images of one layout.
    #[test]
    fn the_device_crop_wants_a_box_for_each_image_and_chw_bytes() {
        let one = Tensor::zeros([3, 4, 4], (Kind::Uint8, Device::Cpu));
        assert!(crop_resize_flip(std::slice::from_ref(&one), &[], (2, 2)).is_err());
        let hwc = Tensor::zeros([4, 4, 3], (Kind::Uint8, Device::Cpu));
        let b = CropBox {
            x: 0.0,
            y: 0.0,
            w: 4.0,
            h: 4.0,
        };
        let e = crop_resize_flip(&[hwc], &[(b, false)], (2, 2)).unwrap_err();
        assert!(e.to_string().contains("(3, H, W) uint8"), "{e}");
    }
}
