//! The data pipeline in both states of T1: the whole set resident on the
//! device with batched augmentation there (on), or a CPU loader that
//! augments per sample and copies each batch to the device (off).

use crate::data::Split;
use crate::native::Rng;
use crate::plan::Norm;
pub use crate::plan::{AugOp, Augment, ColourJitter};
use tch::{Device, Kind, Tensor};

/// uint8 N×C×H×W bytes → a tensor on `device`.
pub fn to_tensor(split: &Split, c: usize, h: usize, w: usize, device: Device) -> (Tensor, Tensor) {
    let x = Tensor::from_slice(&split.images)
        .view([split.len() as i64, c as i64, h as i64, w as i64])
        .to_device(device);
    let y = Tensor::from_slice(&split.labels)
        .to_kind(Kind::Int64)
        .to_device(device);
    (x, y)
}

/// uint8 → normalised float, with the plan's constants (`norm`), computed
/// in `kind` (float32; float64 for a golden trajectory's replay).
pub fn normalise(x: &Tensor, norm: &Norm, kind: Kind) -> Tensor {
    let dev = x.device();
    let c = x.size()[1];
    let (mean, std) = if c == 3 {
        (
            Tensor::from_slice(&norm.mean).to_device(dev),
            Tensor::from_slice(&norm.std).to_device(dev),
        )
    } else {
        (
            Tensor::full([c], 120.0, (Kind::Double, dev)),
            Tensor::full([c], 64.0, (Kind::Double, dev)),
        )
    };
    ((x.to_kind(kind) - mean.to_kind(kind).view([1, c, 1, 1]))
        / std.to_kind(kind).view([1, c, 1, 1]))
    .contiguous()
}

pub fn reflect_pad(x: &Tensor, pad: i64) -> Tensor {
    if pad == 0 {
        x.shallow_clone()
    } else {
        x.reflection_pad2d([pad, pad, pad, pad])
    }
}

/// Per-sample random option indices in [0, options), on the device. With
/// `groups` (Page's `max_options`): shuffle, cut into min(options, groups)
/// near-equal groups, and give each group a distinct option, so a crop's
/// (dy, dx) or a cutout's position is shared by the whole group.
fn draws(rng: &Rng, n: i64, options: i64, groups: Option<i64>, dev: Device) -> Tensor {
    match groups {
        Some(g) => {
            let k = g.min(options).min(n).max(1);
            let chosen = rng.randperm(options, dev).narrow(0, 0, k);
            let group_of = (rng.randperm(n, dev) * k).divide_scalar_mode(n, "floor");
            chosen.index_select(0, &group_of)
        }
        None => rng.randint(options, &[n], dev),
    }
}

/// Row and column offsets from one draw over a `rows` x `cols` grid of positions.
fn draws_2d(
    rng: &Rng,
    n: i64,
    rows: i64,
    cols: i64,
    groups: Option<i64>,
    dev: Device,
) -> (Tensor, Tensor) {
    let i = draws(rng, n, rows * cols, groups, dev);
    (i.divide_scalar_mode(cols, "floor"), i.remainder(cols))
}

/// Crops each image of a padded batch at its own offset, with two gathers (no host sync).
pub fn crop(xp: &Tensor, dy: &Tensor, dx: &Tensor, h: i64, w: i64) -> Tensor {
    let (n, c, _, wp) = xp.size4().expect("NCHW");
    let dev = xp.device();
    let rows = (dy.view([n, 1]) + Tensor::arange(h, (Kind::Int64, dev)).view([1, h]))
        .view([n, 1, h, 1])
        .expand([n, c, h, wp], true);
    let xr = xp.gather(2, &rows, false);
    let cols = (dx.view([n, 1]) + Tensor::arange(w, (Kind::Int64, dev)).view([1, w]))
        .view([n, 1, 1, w])
        .expand([n, c, h, w], true);
    xr.gather(3, &cols, false)
}

/// An s×s square per image with its top-left corner at (y0, x0): a boolean
/// [n, 1, h, w] mask, built on the device (cutout and CutMix share it).
pub fn square_mask(n: i64, h: i64, w: i64, y0: &Tensor, x0: &Tensor, s: i64) -> Tensor {
    let dev = y0.device();
    let r = Tensor::arange(h, (Kind::Int64, dev)).view([1, h]);
    let c = Tensor::arange(w, (Kind::Int64, dev)).view([1, w]);
    let (y0, x0) = (y0.view([n, 1]), x0.view([n, 1]));
    let mr = r.ge_tensor(&y0).logical_and(&r.lt_tensor(&(&y0 + s)));
    let mc = c.ge_tensor(&x0).logical_and(&c.lt_tensor(&(&x0 + s)));
    mr.view([n, 1, h, 1]).logical_and(&mc.view([n, 1, 1, w]))
}

/// Zeroes an s×s square per image, fully inside it (after normalisation: the mean colour).
pub fn cutout(x: &Tensor, y0: &Tensor, x0: &Tensor, s: i64) -> Tensor {
    let (n, _, h, w) = x.size4().expect("NCHW");
    x.masked_fill(&square_mask(n, h, w, y0, x0, s), 0.0)
}

/// hlb's CutMix: a square from a permuted copy of the batch, labels mixed by area.
pub fn cutmix_batch(
    rng: &Rng,
    x: &Tensor,
    y: &Tensor,
    size: i64,
    classes: i64,
) -> (Tensor, Tensor) {
    let (n, _, h, w) = x.size4().expect("NCHW");
    let dev = x.device();
    let perm = rng.randperm(n, dev);
    let y0 = rng.randint(h - size + 1, &[n], dev);
    let x0 = rng.randint(w - size + 1, &[n], dev);
    let mask = square_mask(n, h, w, &y0, &x0, size);
    let mixed = x.index_select(0, &perm).where_self(&mask, x);
    let share = (size * size) as f64 / (h * w) as f64;
    let one = y.one_hot(classes).to_kind(Kind::Float);
    let soft = &one * (1.0 - share) + one.index_select(0, &perm) * share;
    (mixed, soft)
}

/// One epoch of augmented training images, all on the device.
/// `flip0` is the epoch-0 flip draw that alternating flip keeps.
pub fn augment_epoch(
    rng: &Rng,
    xp: &Tensor,
    h: i64,
    w: i64,
    a: &Augment,
    epoch: usize,
    flip0: &Tensor,
) -> Tensor {
    let n = xp.size()[0];
    let dev = xp.device();
    let mut x = xp.shallow_clone();
    for op in &a.ops {
        x = match *op {
            AugOp::PadCrop { pad } if pad > 0 => {
                let hi = 2 * pad + 1;
                let (dy, dx) = draws_2d(rng, n, hi, hi, a.groups, dev);
                crop(&x, &dy, &dx, h, w)
            }
            AugOp::Flip { alternating } => {
                let mask = if !alternating {
                    draws(rng, n, 2, a.groups, dev).eq(1)
                } else if epoch.is_multiple_of(2) {
                    flip0.shallow_clone()
                } else {
                    flip0.logical_not()
                };
                x.flip([3]).where_self(&mask.view([n, 1, 1, 1]), &x)
            }
            AugOp::Cutout { size } => {
                let (y0, x0) = draws_2d(rng, n, h - size + 1, w - size + 1, a.groups, dev);
                cutout(&x, &y0, &x0, size)
            }
            // Colour jitter is the batch builder's (drawn per epoch, after
            // the order); resized crops are the streaming loader's.
            AugOp::PadCrop { .. } | AugOp::Jitter(_) | AugOp::ResizedCrop { .. } => x,
        };
    }
    x
}

/// hiverge's `batch_color_jitter` on normalised images: x ← (x + b)·c per
/// image, b = (2u − 1)·brightness, c = 1 + (2v − 1)·contrast for uniform u,
/// v of shape [n, 1, 1, 1]. The contrast acts about 0, the data set's mean.
pub fn jitter_with(x: &Tensor, u: &Tensor, v: &Tensor, j: &ColourJitter) -> Tensor {
    // In float32 at least (half images too); a float64 replay's in float64.
    let k = match x.kind() {
        Kind::Double => Kind::Double,
        _ => Kind::Float,
    };
    let b = (u.to_kind(k) * 2.0 - 1.0) * j.brightness;
    let c = (v.to_kind(k) * 2.0 - 1.0) * j.contrast + 1.0;
    ((x.to_kind(k) + b) * c).to_kind(x.kind())
}

/// The epoch's jitter draws for `n` images: (u, v) as `jitter_with` takes them.
pub fn jitter_draws(rng: &Rng, n: i64, dev: Device) -> (Tensor, Tensor) {
    (rng.rand(&[n, 1, 1, 1], dev), rng.rand(&[n, 1, 1, 1], dev))
}

/// The T1 off state: per-sample augmentation on the CPU, one host→device copy per batch.
pub struct CpuLoader {
    /// Normalised (when preprocessed once) or raw uint8, padded or not, on the CPU.
    pub x: Tensor,
    pub y: Tensor,
    pub pre_normalised: bool,
    /// The constants it normalises with, when not preprocessed, and the type.
    pub norm: (Norm, Kind),
    pub pre_padded: bool,
    pub h: i64,
    pub w: i64,
    /// The epoch-0 flip draw that alternating flip keeps.
    pub flip0: Vec<bool>,
    /// The loader's own generator state (per-sample draws stay off libtorch's).
    pub rng: u64,
}

impl CpuLoader {
    /// Builds one batch from CPU indices with whole-batch tensor ops (Page's
    /// P1c lesson: few bulk calls, not millions of small ones). The loader's
    /// own generator draws each image's offsets in the same order as a
    /// per-image loop would, so the batch is the same.
    pub fn batch(
        &mut self,
        idx: &[i64],
        a: &Augment,
        epoch: usize,
        device: Device,
    ) -> (Tensor, Tensor) {
        let (flip0, rng) = (&self.flip0, &mut self.rng);
        let mut next = |hi: i64| -> i64 {
            *rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*rng >> 33) % hi as u64) as i64
        };
        // Each image's draws op by op, in the list's order: a per-image
        // loop's order. Crops and cutouts draw (row, column) pairs.
        let mut drawn: Vec<Vec<i64>> = vec![Vec::with_capacity(2 * idx.len()); a.ops.len()];
        for &i in idx {
            for (op, d) in a.ops.iter().zip(&mut drawn) {
                match *op {
                    AugOp::PadCrop { pad } if pad > 0 => {
                        d.push(next(2 * pad + 1));
                        d.push(next(2 * pad + 1));
                    }
                    AugOp::Flip { alternating: true } => {
                        d.push(i64::from(flip0[i as usize] ^ (epoch % 2 == 1)));
                    }
                    AugOp::Flip { alternating: false } => d.push(next(2)),
                    AugOp::Cutout { size } => {
                        d.push(next(self.h - size + 1));
                        d.push(next(self.w - size + 1));
                    }
                    AugOp::PadCrop { .. } | AugOp::Jitter(_) | AugOp::ResizedCrop { .. } => {}
                }
            }
        }
        let pairs = |d: &[i64]| -> (Tensor, Tensor) {
            let (r, c): (Vec<i64>, Vec<i64>) = d.chunks(2).map(|p| (p[0], p[1])).unzip();
            (Tensor::from_slice(&r), Tensor::from_slice(&c))
        };
        let ix = Tensor::from_slice(idx);
        let mut x = self.x.index_select(0, &ix);
        if !self.pre_normalised {
            x = normalise(&x, &self.norm.0, self.norm.1);
        }
        for (op, d) in a.ops.iter().zip(&drawn) {
            x = match *op {
                AugOp::PadCrop { pad } if pad > 0 => {
                    if !self.pre_padded {
                        x = reflect_pad(&x, pad);
                    }
                    let (dy, dx) = pairs(d);
                    crop(&x, &dy, &dx, self.h, self.w)
                }
                AugOp::Flip { .. } => {
                    let on: Vec<bool> = d.iter().map(|&f| f == 1).collect();
                    let mask = Tensor::from_slice(&on).view([idx.len() as i64, 1, 1, 1]);
                    x.flip([3]).where_self(&mask, &x)
                }
                AugOp::Cutout { size } => {
                    let (y0, x0) = pairs(d);
                    cutout(&x, &y0, &x0, size)
                }
                // As on the device: the batch builder's and the stream's.
                AugOp::PadCrop { .. } | AugOp::Jitter(_) | AugOp::ResizedCrop { .. } => x,
            };
        }
        (
            x.to_device(device),
            self.y.index_select(0, &ix).to_device(device),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    pub(crate) fn crop_takes_each_images_own_window() {
        let x = Tensor::arange(2 * 36, (Kind::Float, Device::Cpu)).view([2, 1, 6, 6]);
        let out = crop(
            &x,
            &Tensor::from_slice(&[0i64, 2]),
            &Tensor::from_slice(&[1i64, 0]),
            4,
            4,
        );
        assert_eq!(out.size(), [2, 1, 4, 4]);
        assert_eq!(out.double_value(&[0, 0, 0, 0]), 1.0);
        assert_eq!(out.double_value(&[1, 0, 0, 0]), 36.0 + 12.0);
    }

    #[test]
    pub(crate) fn cutout_zeroes_exactly_the_square() {
        let x = Tensor::ones([1, 2, 8, 8], (Kind::Float, Device::Cpu));
        let out = cutout(
            &x,
            &Tensor::from_slice(&[3i64]),
            &Tensor::from_slice(&[4i64]),
            3,
        );
        assert_eq!(out.sum(Kind::Float).double_value(&[]), 2.0 * (64.0 - 9.0));
        assert_eq!(out.double_value(&[0, 1, 3, 4]), 0.0);
        assert_eq!(out.double_value(&[0, 1, 2, 4]), 1.0);
    }

    #[test]
    pub(crate) fn colour_jitter_shifts_then_scales_each_image_within_its_bounds() {
        let rng = Rng::new(Device::Cpu, 5);
        let x = rng.rand(&[200, 3, 6, 6], Device::Cpu) * 4.0 - 2.0;
        let j = ColourJitter {
            brightness: 0.1399,
            contrast: 0.1308,
        };
        let (u, v) = jitter_draws(&rng, 200, Device::Cpu);
        let out = jitter_with(&x, &u, &v, &j);
        // out = (x + b)·c: with two pixels p, q of one image, c = (out_p − out_q)/(p − q).
        let flat = |t: &Tensor| t.view([200, -1]);
        let (xo, oo) = (flat(&x), flat(&out));
        let c = (oo.select(1, 0) - oo.select(1, 1)) / (xo.select(1, 0) - xo.select(1, 1));
        let b = oo.select(1, 0) / &c - xo.select(1, 0);
        let (b, c) = (
            Vec::<f32>::try_from(&b).unwrap(),
            Vec::<f32>::try_from(&c).unwrap(),
        );
        assert!(b.iter().all(|b| b.abs() <= 0.1399 + 1e-4), "{b:?}");
        assert!(c.iter().all(|c| (c - 1.0).abs() <= 0.1308 + 1e-4), "{c:?}");
        let spread = |v: &[f32]| {
            v.iter().cloned().fold(f32::MIN, f32::max) - v.iter().cloned().fold(f32::MAX, f32::min)
        };
        assert!(spread(&b) > 0.2 && spread(&c) > 0.2, "drawn per image");
        // The same (b, c) for every pixel of an image: an affine map of it.
        let want = (&x + Tensor::from_slice(&b).view([200, 1, 1, 1]))
            * Tensor::from_slice(&c).view([200, 1, 1, 1]);
        assert!(out.allclose(&want, 1e-4, 1e-4, false));
    }

    #[test]
    pub(crate) fn flip_mirrors_each_image_or_leaves_it() {
        let _defaults = crate::native::default_generators();
        tch::manual_seed(2);
        let rng = Rng::new(Device::Cpu, 2);
        let x = Tensor::randn([64, 1, 4, 4], (Kind::Float, Device::Cpu));
        let flip0 = Tensor::zeros([64], (Kind::Bool, Device::Cpu));
        let a = Augment {
            ops: vec![AugOp::Flip { alternating: false }],
            groups: None,
        };
        let out = augment_epoch(&rng, &x, 4, 4, &a, 0, &flip0);
        let (mut kept, mut mirrored) = (0, 0);
        for i in 0..64 {
            if out.get(i).equal(&x.get(i)) {
                kept += 1;
            } else if out.get(i).equal(&x.get(i).flip([2])) {
                mirrored += 1;
            }
        }
        assert_eq!(kept + mirrored, 64);
        assert!(
            kept > 16 && mirrored > 16,
            "p = 0.5: {kept} kept, {mirrored} mirrored"
        );
        let off = Augment::default();
        assert!(augment_epoch(&rng, &x, 4, 4, &off, 0, &flip0).equal(&x));
    }

    #[test]
    pub(crate) fn alternating_flip_alternates_and_groups_share_options() {
        let _defaults = crate::native::default_generators();
        tch::manual_seed(0);
        let rng = Rng::new(Device::Cpu, 0);
        let x = Tensor::randn([16, 3, 8, 8], (Kind::Float, Device::Cpu));
        let flip0 = Tensor::randint(2, [16], (Kind::Int64, Device::Cpu)).eq(1);
        let a = Augment {
            ops: vec![AugOp::Flip { alternating: true }],
            groups: None,
        };
        let e0 = augment_epoch(&rng, &x, 8, 8, &a, 0, &flip0);
        let e1 = augment_epoch(&rng, &x, 8, 8, &a, 1, &flip0);
        // Every image appears in both orientations across two epochs.
        assert!(e0.flip([3]).allclose(&e1, 1e-6, 1e-6, false));
        let g = draws(&rng, 1000, 81, Some(10), Device::Cpu);
        let distinct: std::collections::HashSet<i64> =
            Vec::<i64>::try_from(&g).unwrap().into_iter().collect();
        assert!(distinct.len() <= 10);
    }

    #[test]
    pub(crate) fn page_groups_share_one_option_and_options_are_distinct() {
        let _defaults = crate::native::default_generators();
        tch::manual_seed(11);
        let rng = Rng::new(Device::Cpu, 11);
        let dev = Device::Cpu;
        // 81 crop positions, at most 200 groups: all 81 used, one (dy, dx) per group.
        let (dy, dx) = draws_2d(&rng, 1000, 9, 9, Some(200), dev);
        let pairs: Vec<i64> = Vec::try_from(dy * 9 + dx).unwrap();
        let mut distinct = pairs.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 81);
        // Groups are near-equal: each option covers 1000/81 (12 or 13) images.
        for o in &distinct {
            let c = pairs.iter().filter(|p| *p == o).count();
            assert!((12..=13).contains(&c), "{c}");
        }
        // 2 flip states: exactly half flipped.
        let flips: Vec<i64> = Vec::try_from(draws(&rng, 1000, 2, Some(200), dev)).unwrap();
        assert_eq!(flips.iter().sum::<i64>(), 500);
        // 625 cutout positions capped at 200 distinct ones.
        let (y0, x0) = draws_2d(&rng, 1000, 25, 25, Some(200), dev);
        let mut pos: Vec<i64> = Vec::try_from(y0 * 25 + x0).unwrap();
        pos.sort();
        pos.dedup();
        assert_eq!(pos.len(), 200);
        assert!(pos.iter().all(|p| (0..625).contains(p)));
    }
}

#[cfg(test)]
mod loader_tests {
    use super::*;

    /// The per-image loader the batched one replaced, kept as the reference.
    fn per_image(l: &mut CpuLoader, idx: &[i64], a: &Augment, epoch: usize) -> Tensor {
        let (flip0, rng) = (&l.flip0, &mut l.rng);
        let mut next = |hi: i64| -> i64 {
            *rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*rng >> 33) % hi as u64) as i64
        };
        let imgs: Vec<Tensor> = idx
            .iter()
            .map(|&i| {
                let mut img = l.x.get(i);
                if !l.pre_normalised {
                    img = normalise(&img.unsqueeze(0), &l.norm.0, l.norm.1).squeeze_dim(0);
                }
                for op in &a.ops {
                    match *op {
                        AugOp::PadCrop { pad } if pad > 0 => {
                            if !l.pre_padded {
                                img = reflect_pad(&img.unsqueeze(0), pad).squeeze_dim(0);
                            }
                            let (dy, dx) = (next(2 * pad + 1), next(2 * pad + 1));
                            img = img.narrow(1, dy, l.h).narrow(2, dx, l.w);
                        }
                        AugOp::Flip { alternating } => {
                            let flip = if alternating {
                                flip0[i as usize] ^ (epoch % 2 == 1)
                            } else {
                                next(2) == 1
                            };
                            if flip {
                                img = img.flip([2]);
                            }
                        }
                        AugOp::Cutout { size: s } => {
                            let (y0, x0) = (next(l.h - s + 1), next(l.w - s + 1));
                            img = img.copy();
                            let _ = img.narrow(1, y0, s).narrow(2, x0, s).fill_(0.0);
                        }
                        _ => {}
                    }
                }
                img
            })
            .collect();
        Tensor::stack(&imgs, 0)
    }

    #[test]
    fn the_batched_cpu_loader_builds_the_per_image_batch() {
        let _defaults = crate::native::default_generators();
        tch::manual_seed(5);
        let raw = Tensor::randint(256, [12, 3, 8, 8], (Kind::Uint8, Device::Cpu));
        let y = Tensor::arange(12, (Kind::Int64, Device::Cpu));
        let idx = [3i64, 0, 7, 11, 5];
        for (once, a) in [
            (
                true,
                Augment {
                    ops: vec![
                        AugOp::PadCrop { pad: 2 },
                        AugOp::Flip { alternating: false },
                        AugOp::Cutout { size: 3 },
                    ],
                    groups: None,
                },
            ),
            (
                false,
                Augment {
                    ops: vec![AugOp::PadCrop { pad: 2 }, AugOp::Flip { alternating: true }],
                    groups: None,
                },
            ),
            (
                false,
                Augment {
                    ops: vec![AugOp::Cutout { size: 4 }],
                    groups: None,
                },
            ),
        ] {
            let x = if once {
                reflect_pad(&normalise(&raw, &Norm::PAGE, Kind::Float), a.pad())
            } else {
                raw.shallow_clone()
            };
            let make = || CpuLoader {
                x: x.shallow_clone(),
                y: y.shallow_clone(),
                pre_normalised: once,
                norm: (Norm::PAGE, Kind::Float),
                pre_padded: once,
                h: 8,
                w: 8,
                flip0: (0..12).map(|i| i % 3 == 0).collect(),
                rng: 99,
            };
            let (mut batched, mut reference) = (make(), make());
            for epoch in 0..2 {
                let (xb, yb) = batched.batch(&idx, &a, epoch, Device::Cpu);
                let want = per_image(&mut reference, &idx, &a, epoch);
                assert!(xb.equal(&want), "{a:?} epoch {epoch}");
                assert!(yb.equal(&Tensor::from_slice(&idx)));
            }
        }
    }
}
