//! Stages 1 and 2 of a run: the tensors' layout, and the data on its way
//! in: host bytes → prepared tensors (the DAWNBench clock's `prep_s`) →
//! each epoch's batches, augmented on the device or by the CPU loader.

use super::pipeline::{
    CpuLoader, augment_epoch, cutmix_batch, jitter_draws, jitter_with, normalise, reflect_pad,
    to_tensor,
};
use crate::data::Dataset;
use crate::data::stream::StreamData;
use crate::native::{AutocastKind, Rng};
use crate::plan::{Half, RunPlan};
use anyhow::{Result, bail};
use tch::{Device, Kind, Tensor};

/// NHWC strides on an NCHW-shaped tensor: channels_last without a tch API for it.
pub(super) fn channels_last(x: &Tensor) -> Tensor {
    x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// How tensors are laid out: the plan's precision and memory format, on any
/// device (libtorch runs fp16 and bf16 convolutions, BN on half input and
/// NHWC on a CPU too, slowly, so tests exercise the GPU path); autocast too,
/// through `native` where tch's covers CUDA only.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub half: Option<Kind>,
    /// BatchNorm cast to `half` too.
    pub bn_half: bool,
    /// Autocast the forward pass to this type (any device).
    pub amp: Option<AutocastKind>,
    pub channels_last: bool,
}

impl Layout {
    pub fn of(plan: &RunPlan) -> Layout {
        if plan.precision.float64 {
            // Weights, BatchNorm and inputs in float64 (a golden trajectory's replay).
            return Layout {
                half: Some(Kind::Double),
                bn_half: true,
                amp: None,
                channels_last: plan.precision.channels_last,
            };
        }
        Layout {
            half: plan.precision.half.map(Half::kind),
            bn_half: plan.precision.bn_half,
            amp: plan.precision.amp.map(|h| match h {
                Half::F16 => AutocastKind::F16,
                Half::Bf16 => AutocastKind::Bf16,
            }),
            channels_last: plan.precision.channels_last,
        }
    }

    /// Normalised images in the type the run keeps its data in (Page,
    /// airbench and hlb keep it in fp16): what the whitening sees too.
    pub fn data(&self, x: Tensor) -> Tensor {
        match self.half {
            Some(k) => x.to_kind(k),
            None => x,
        }
    }

    /// An input batch in the run's kind and memory format.
    pub fn input(&self, x: Tensor) -> Tensor {
        let x = self.data(x);
        if self.channels_last {
            channels_last(&x)
        } else {
            x
        }
    }
}

/// The data set on its way into the run: host bytes held in memory, or
/// (a streaming run) none, its images read by the loader every epoch.
pub(super) struct Source {
    pub train_u8: Tensor,
    pub train_y: Tensor,
    pub test_u8: Tensor,
    pub test_y: Tensor,
    pub classes: i64,
    /// The side of the images the net first sees.
    pub h: i64,
    pub w: i64,
    /// A streaming run's images (`stream`): the tensors above are empty.
    pub stream: Option<StreamData>,
}

impl Source {
    pub fn new(data: &Dataset) -> Result<Source> {
        if data.train.is_empty() || data.test.is_empty() {
            bail!("data set `{}` has an empty split", data.name);
        }
        let (c, h, w) = (data.channels, data.height, data.width);
        let (train_u8, train_y) = to_tensor(&data.train, c, h, w, Device::Cpu);
        let (test_u8, test_y) = to_tensor(&data.test, c, h, w, Device::Cpu);
        Ok(Source {
            train_u8,
            train_y,
            test_u8,
            test_y,
            classes: data.classes.len() as i64,
            h: h as i64,
            w: w as i64,
            stream: None,
        })
    }

    /// A streaming run's source: no image in memory; the net first sees
    /// `side` x `side` crops.
    pub fn streamed(data: StreamData, side: usize) -> Result<Source> {
        if data.train.count() == 0 {
            bail!(
                "data set `{}` has no training images: it needs train/<class>/ images",
                data.name
            );
        }
        if data.val.count() == 0 {
            bail!(
                "data set `{}` has no validation images: add val/<class>/ (or test/) images, or ImageNet's flat val/ with LOC_val_solution.csv",
                data.name
            );
        }
        let empty = |k: Kind| Tensor::zeros([0], (k, Device::Cpu));
        Ok(Source {
            train_u8: Tensor::zeros([0, 3, side as i64, side as i64], (Kind::Uint8, Device::Cpu)),
            train_y: empty(Kind::Int64),
            test_u8: Tensor::zeros([0, 3, side as i64, side as i64], (Kind::Uint8, Device::Cpu)),
            test_y: empty(Kind::Int64),
            classes: data.classes.len() as i64,
            h: side as i64,
            w: side as i64,
            stream: Some(data),
        })
    }

    pub fn train_len(&self) -> i64 {
        match &self.stream {
            Some(s) => s.train.count() as i64,
            None => self.train_y.size()[0],
        }
    }

    pub fn test_len(&self) -> usize {
        match &self.stream {
            Some(s) => s.val.count(),
            None => self.test_y.size()[0] as usize,
        }
    }
}

/// The data after preparation.
pub(super) struct Prepared {
    /// Normalised and padded when preprocessed once, raw bytes otherwise.
    pub train: Tensor,
    pub train_y: Tensor,
    pub test_x: Tensor,
    pub test_y: Tensor,
    /// Where the training set lives: the run's device when resident.
    pub device: Device,
}

/// Normalise, pad and move the data (`upload` then `preprocess`).
#[cfg(test)]
pub(super) fn prepare(plan: &RunPlan, src: &Source, dev: Device) -> Prepared {
    preprocess(plan, upload(plan, src, dev))
}

/// The bytes where the run keeps them: the training set on the device when
/// resident, the test set on the device. airbench loads its data to the GPU
/// before its timer (`CifarLoader.__init__`); the DAWNBench clock counts it.
pub(super) fn upload(plan: &RunPlan, src: &Source, dev: Device) -> Prepared {
    let data_dev = if plan.data.resident { dev } else { Device::Cpu };
    Prepared {
        train: src.train_u8.to_device(data_dev),
        train_y: src.train_y.to_device(data_dev),
        test_x: src.test_u8.to_device(dev),
        test_y: src.test_y.to_device(dev),
        device: data_dev,
    }
}

/// Normalise (and pad, when preprocessed once) the uploaded bytes, as
/// airbench's first epoch and final evaluation do inside its timer.
/// Preprocessed data is kept in the training precision (Page keeps it in
/// fp16): half the memory traffic of every epoch's augmentation.
pub(super) fn preprocess(plan: &RunPlan, up: Prepared) -> Prepared {
    let d = &plan.data;
    let train = if d.preprocess_once {
        let x = reflect_pad(
            &normalise(&up.train, &d.norm, plan.precision.data_kind()),
            d.augment.pad(),
        );
        match plan.precision.half {
            Some(h) => x.to_kind(h.kind()),
            None => x,
        }
    } else {
        up.train
    };
    Prepared {
        train,
        test_x: normalise(&up.test_x, &d.norm, plan.precision.data_kind()),
        ..up
    }
}

/// Each epoch's training batches: the whole epoch augmented on the device
/// at once (resident data, T1 on), or built batch by batch by the CPU loader
/// (T1 off). Jitter, downscaling and the layout are applied here, so a step
/// receives a batch ready for the forward pass.
pub(super) struct Batches<'a> {
    plan: &'a RunPlan,
    data: &'a Prepared,
    rng: &'a Rng,
    layout: Layout,
    device: Device,
    h: i64,
    w: i64,
    classes: i64,
    /// The epoch-0 flip draw that alternating flip keeps.
    flip0: Tensor,
    loader: Option<CpuLoader>,
    epoch: Option<EpochState>,
}

struct EpochState {
    epoch: usize,
    /// The augmented epoch (resident) and the permutation, on its device.
    images: Option<Tensor>,
    perm: Tensor,
    perm_host: Vec<i64>,
    /// Colour jitter draws for every image of the epoch.
    jitter: Option<(Tensor, Tensor)>,
    /// Side of the downscaled images while training small.
    small: Option<i64>,
    /// CutMix's soft targets for every image, when the epoch's resident set
    /// was mixed as a whole.
    soft: Option<Tensor>,
}

impl<'a> Batches<'a> {
    pub fn new(
        plan: &'a RunPlan,
        data: &'a Prepared,
        src: &Source,
        rng: &'a Rng,
        layout: Layout,
        device: Device,
        seed: u64,
    ) -> Batches<'a> {
        let n = data.train_y.size()[0];
        let flip0 = rng.randint(2, &[n], data.device).eq(1);
        let loader = (!plan.data.resident).then(|| CpuLoader {
            x: data.train.shallow_clone(),
            y: data.train_y.shallow_clone(),
            pre_normalised: plan.data.preprocess_once,
            norm: (plan.data.norm, plan.precision.data_kind()),
            pre_padded: plan.data.preprocess_once,
            h: src.h,
            w: src.w,
            flip0: Vec::<bool>::try_from(&flip0).unwrap_or_default(),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        });
        Batches {
            plan,
            data,
            rng,
            layout,
            device,
            h: src.h,
            w: src.w,
            classes: src.classes,
            flip0,
            loader,
            epoch: None,
        }
    }

    /// Whether a CPU loader builds the batches (T1 off).
    #[cfg(test)]
    pub fn uses_loader(&self) -> bool {
        self.loader.is_some()
    }

    /// Augments epoch `epoch` (resident) and draws its order and jitter.
    pub fn begin_epoch(&mut self, epoch: usize) -> Result<()> {
        let (plan, data) = (self.plan, self.data);
        let aug = &plan.data.augment;
        let n = data.train_y.size()[0];
        let images = plan.data.resident.then(|| {
            let src = if plan.data.preprocess_once {
                data.train.shallow_clone()
            } else {
                reflect_pad(
                    &normalise(&data.train, &plan.data.norm, plan.precision.data_kind()),
                    aug.pad(),
                )
            };
            augment_epoch(self.rng, &src, self.h, self.w, aug, epoch, &self.flip0)
        });
        let perm = self.rng.randperm(n, data.device);
        let perm_host = if plan.data.resident {
            Vec::new()
        } else {
            Vec::<i64>::try_from(&perm)?
        };
        // hiverge draws each image's (b, c) once per epoch, over the whole set.
        let jitter = aug.jitter().map(|_| jitter_draws(self.rng, n, self.device));
        let images = match (images, aug.jitter(), &jitter) {
            (Some(x), Some(j), Some((u, v))) => Some(jitter_with(&x, u, v, &j)),
            (x, _, _) => x,
        };
        // hlb mixes the whole augmented set once per epoch, before batching
        // (`get_batches`): each image's partner is from a permutation of
        // every image. A resident set does the same; the CPU loader, which
        // builds one batch at a time, mixes within the batch (the step does).
        let cutmix = plan
            .loss
            .cutmix
            .as_ref()
            .filter(|c| c.active_at(epoch, plan.epochs));
        let (images, soft) = match (images, cutmix) {
            (Some(x), Some(c)) => {
                let (mixed, soft) = cutmix_batch(self.rng, &x, &data.train_y, c.size, self.classes);
                (Some(mixed), Some(soft))
            }
            (x, _) => (x, None),
        };
        let small = plan
            .data
            .progressive
            .as_ref()
            .filter(|p| p.small_at(epoch, plan.epochs))
            .map(|p| p.size);
        self.epoch = Some(EpochState {
            epoch,
            images,
            perm,
            perm_host,
            jitter,
            small,
            soft,
        });
        Ok(())
    }

    /// Batch `s`'s soft targets, when the epoch's set was mixed as a whole.
    pub fn soft(&self, s: i64) -> Option<Tensor> {
        let bs = self.plan.batch_size as i64;
        let e = self.epoch.as_ref()?;
        let soft = e.soft.as_ref()?;
        Some(soft.index_select(0, &e.perm.narrow(0, s * bs, bs)))
    }

    /// The side the epoch trains at, when smaller than the images.
    pub fn small(&self) -> Option<i64> {
        self.epoch.as_ref().and_then(|e| e.small)
    }

    /// Batch `s` of the epoch (x ready for the net, y) and the seconds the
    /// CPU loader spent building it.
    pub fn batch(&mut self, s: i64) -> (Tensor, Tensor, f64) {
        let bs = self.plan.batch_size as i64;
        let e = self.epoch.as_ref().expect("begin_epoch before batch");
        let aug = &self.plan.data.augment;
        let (x, y, loader_s) = match (&e.images, self.loader.as_mut()) {
            (Some(images), _) => {
                let idx = e.perm.narrow(0, s * bs, bs);
                let y = self.data.train_y.index_select(0, &idx);
                (images.index_select(0, &idx), y, 0.0)
            }
            (None, Some(l)) => {
                let idx = &e.perm_host[(s * bs) as usize..((s + 1) * bs) as usize];
                let t = std::time::Instant::now();
                let (x, y) = l.batch(idx, aug, e.epoch, self.device);
                let x = match (aug.jitter(), &e.jitter) {
                    (Some(j), Some((u, v))) => {
                        let ix = Tensor::from_slice(idx).to_device(self.device);
                        jitter_with(&x, &u.index_select(0, &ix), &v.index_select(0, &ix), &j)
                    }
                    _ => x,
                };
                (x, y, t.elapsed().as_secs_f64())
            }
            (None, None) => unreachable!("a CPU loader exists when the data is not resident"),
        };
        let x = match e.small {
            Some(sz) => x.upsample_bilinear2d([sz, sz], false, None, None),
            None => x,
        };
        (self.layout.input(x), y, loader_s)
    }
}
