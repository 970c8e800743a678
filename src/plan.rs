//! The run plan: every decision the engine acts on, typed, made before the
//! first step. `RunPlan::base` turns a run's settings into the plan with every
//! trick off; each catalog entry's `apply` then changes the fields it owns
//! (`tricks::build_plan`). The engine reads nothing else, so two runs whose
//! plans are equal train identically, and a trick that leaves the plan alone
//! does nothing.
//!
//! The plan is data. The schedule's and the averaging's maths live with the
//! optimisers (`optim::schedule`, `optim::averaging`); their types are
//! re-exported here, where the plan's fields name them.

use crate::config::{Clock, OptimizerKind, RunConfig, RunSpec};
use crate::model::{Activation, BnConfig, Dirac, NetConfig, Whitening};
use crate::optim::base_shape;
pub use crate::optim::{Averaging, AvgAction, AvgStart, LrPhase, Schedule, Shape};
pub use crate::optim::{NsDtype, NsVariant, Renorm};
use anyhow::{Result, bail};
use tch::Kind;

/// A queued run with its plan decided: what the worker hands the trainer.
/// `config` is what the manifest records (`PlannedRun::record`); the
/// engine reads only `plan`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRun {
    pub spec: RunSpec,
    pub config: RunConfig,
    pub plan: RunPlan,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    pub epochs: f64,
    pub batch_size: usize,
    pub net: NetConfig,
    /// Re-initialise the head with unit-std rows after whitening (airbench94_muon).
    pub head_unit_std: bool,
    pub data: DataPlan,
    pub precision: Precision,
    pub loss: LossPlan,
    pub step: StepPlan,
    pub optim: OptimPlan,
    pub schedule: Schedule,
    pub averaging: Averaging,
    pub eval: EvalPlan,
    /// Steps between device read-backs of the step metrics (0: once per
    /// epoch, at the epoch's own sync: no host sync inside the clocks).
    pub metrics_every: u64,
    /// Ranks the run is spread over: each trains 1/world_size of every
    /// batch on its own device, gradients averaged through c10d.
    pub world_size: usize,
    /// The global batch epoch by epoch, as (first epoch, batch) from epoch 0
    /// (fast.ai's phases); empty: `batch_size` throughout.
    pub batch_phases: Vec<(usize, usize)>,
    /// The timing convention the recipe was published with: time to target
    /// is read on it.
    pub clock: Clock,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DataPlan {
    /// The per-channel constants the 8-bit images are normalised with.
    pub norm: Norm,
    /// Images per class kept from the data set (0 = all).
    pub train_per_class: usize,
    pub test_per_class: usize,
    /// The training set lives on the device and is augmented there in whole
    /// epochs; otherwise a CPU loader builds each batch and copies it over.
    pub resident: bool,
    /// Normalise and pad once before training instead of every epoch.
    pub preprocess_once: bool,
    pub augment: Augment,
    pub progressive: Option<Progressive>,
    /// Decode the images every epoch on a pool of threads (ImageNet-sized
    /// data) instead of holding them in the in-memory cache.
    pub stream: Option<StreamPlan>,
    /// A streaming run keeps at most this many (training, validation)
    /// images after the per-class cut: the discarded warm-up's small slice.
    pub max_images: Option<(usize, usize)>,
}

/// Per-channel mean and standard deviation of 8-bit RGB images, in 0-255
/// units: a pixel v becomes (v − mean) / std.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norm {
    pub mean: [f64; 3],
    pub std: [f64; 3],
}

impl Norm {
    /// Page's CIFAR-10 constants (cifar10-fast `torch_backend.py`, 0-255 units).
    pub const PAGE: Norm = Norm {
        mean: [125.31, 122.95, 113.87],
        std: [62.99, 62.09, 66.70],
    };
    /// airbench's `CIFAR_MEAN`, `CIFAR_STD` (0-1 units, here × 255), as the
    /// scripts hold them: `torch.tensor((0.4914, ...))` is float32, so the
    /// constants are 0.4914 rounded to float32 (7e-9 apart, which a float64
    /// golden trajectory sees).
    pub const AIRBENCH: Norm = Norm {
        mean: [
            0.4914f32 as f64 * 255.0,
            0.4822f32 as f64 * 255.0,
            0.4465f32 as f64 * 255.0,
        ],
        std: [
            0.2470f32 as f64 * 255.0,
            0.2435f32 as f64 * 255.0,
            0.2616f32 as f64 * 255.0,
        ],
    };
    /// The same constants as cifar10_speedrun.py holds them, `dtype=torch.half`:
    /// rounded to fp16 (0.4914 → 0.491455078125; the blue std 0.2616 →
    /// 0.26171875, 4.5e-4 above). `half` has no const constructor here, so
    /// the values are written out; a test rounds them with libtorch.
    pub const AIRBENCH_FP16: Norm = Norm {
        mean: [
            0.491455078125 * 255.0,
            0.482177734375 * 255.0,
            0.446533203125 * 255.0,
        ],
        std: [
            0.2469482421875 * 255.0,
            0.2435302734375 * 255.0,
            0.26171875 * 255.0,
        ],
    };
}

impl DataPlan {
    /// The data plan of `settings` with every trick off: the whole set in
    /// memory, fed by the CPU loader, no augmentation.
    fn base(s: &RunConfig) -> DataPlan {
        DataPlan {
            norm: Norm::PAGE,
            train_per_class: s.train_per_class,
            test_per_class: s.test_per_class,
            resident: false,
            preprocess_once: false,
            augment: Augment::default(),
            progressive: None,
            stream: None,
            max_images: None,
        }
    }
}

/// The streaming loader's pipeline: what a training image and a validation
/// image become (`stream`, `res_ramp`).
#[derive(Clone, Debug, PartialEq)]
pub struct StreamPlan {
    /// The side of the training crops, epoch by epoch.
    pub res: Resolution,
    /// Validation: a centre crop of `eval_ratio` of the short side, resized
    /// to `eval_size` (FFCV: 224/256 of the side, at 256 px).
    pub eval_size: usize,
    pub eval_ratio: f64,
    /// Decoding threads (0: every core).
    pub workers: usize,
    /// Finished batches waiting at most.
    pub prefetch: usize,
    /// Leave unreadable images out with a line naming each, instead of
    /// stopping the run.
    pub skip_bad: bool,
    /// What changes from an epoch on (fast.ai's phases), in epoch order;
    /// empty: the fields above throughout.
    pub phases: Vec<StreamPhase>,
    /// The last this-many epochs train on the validation's centre crop at
    /// the training side, unflipped (Fujitsu's MLPerf code: `no_augument_epoch`).
    pub plain_last: usize,
    /// The crop, resize and flip run on the run's device after the loader
    /// decodes each image whole (`data::stream::on_device`), not on the
    /// loader's threads.
    pub crop_on_device: bool,
}

/// A streaming run's pipeline from epoch `from` on: training side and crop
/// scale, and how validation sees the images then.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamPhase {
    pub from: usize,
    pub size: usize,
    /// The random-resized crop's smallest area share from this phase on
    /// (`None`: the crop's own, in the augmentation's `ResizedCrop`).
    pub min_scale: Option<f64>,
    pub eval_size: usize,
    pub eval_ratio: f64,
    /// fast.ai's rectangular validation (images sorted by aspect ratio,
    /// each batch at its own rectangle) instead of the centre crop.
    pub rect_val: bool,
}

impl StreamPlan {
    /// The pipeline of 0-based epoch `epoch`.
    pub fn at(&self, epoch: usize) -> StreamPhase {
        match self.phases.iter().rev().find(|p| p.from <= epoch) {
            Some(p) => p.clone(),
            None => StreamPhase {
                from: 0,
                size: self.res.at(epoch),
                min_scale: None,
                eval_size: self.eval_size,
                eval_ratio: self.eval_ratio,
                rect_val: false,
            },
        }
    }

    /// Whether 0-based epoch `epoch` of a run of `epochs` trains without
    /// augmentation (`plain_last`).
    pub fn plain_at(&self, epoch: usize, epochs: f64) -> bool {
        self.plain_last > 0 && epoch + self.plain_last >= epochs.ceil() as usize
    }

    /// The largest training side of the run.
    pub fn largest(&self) -> usize {
        self.phases
            .iter()
            .map(|p| p.size)
            .fold(self.res.largest(), usize::max)
    }
}

/// The side a streaming run's training crops have at each epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Resolution {
    Fixed(usize),
    /// FFCV's `get_resolution`: `min` up to epoch `start`, `max` from epoch
    /// `end`, linear between them rounded to a multiple of 32.
    Ramp {
        min: usize,
        max: usize,
        start: f64,
        end: f64,
    },
}

impl Resolution {
    /// The side at 0-based epoch `epoch`.
    pub fn at(&self, epoch: usize) -> usize {
        match *self {
            Resolution::Fixed(s) => s,
            Resolution::Ramp {
                min,
                max,
                start,
                end,
            } => {
                let e = epoch as f64;
                if e <= start {
                    min
                } else if e >= end {
                    max
                } else {
                    let interp =
                        min as f64 + (max as f64 - min as f64) * (e - start) / (end - start);
                    // `int(np.round(interp / 32)) * 32`: numpy rounds halves to even.
                    ((interp / 32.0).round_ties_even() as usize) * 32
                }
            }
        }
    }

    /// The largest side of the run: what memory and kernels are sized for.
    pub fn largest(&self) -> usize {
        match *self {
            Resolution::Fixed(s) => s,
            Resolution::Ramp { min, max, .. } => min.max(max),
        }
    }
}

/// What is done to the training images, as an ordered list of operations
/// (FFCV's `Loader(pipelines=...)`). Each executor (the resident set's on
/// the device, the CPU loader's, the streaming loader's) walks the list in
/// this order, drawing its random numbers op by op, so the order is the
/// published scripts' and a golden trajectory pins it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Augment {
    pub ops: Vec<AugOp>,
    /// Page's group-wise sampling: every op draws for at most this many
    /// groups of images, not per image (the resident executor's).
    pub groups: Option<i64>,
}

/// One operation on the training images.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AugOp {
    /// A window of the image's own size from the image reflect-padded by
    /// `pad` on every side (Page, airbench, hlb).
    PadCrop { pad: i64 },
    /// torchvision's RandomResizedCrop to the stream's side: the crop's
    /// share of the image's area and its aspect-ratio range (fast.ai's
    /// phases may raise the smallest share by epoch).
    ResizedCrop {
        scale: (f64, f64),
        ratio: (f64, f64),
    },
    /// Mirror left-right with p = 0.5; `alternating` (airbench): a random
    /// half at epoch 0, then every image's orientation turned each epoch.
    Flip { alternating: bool },
    /// Zero a `size`×`size` square fully inside the image, after the
    /// normalisation (so it takes the mean colour).
    Cutout { size: i64 },
    /// hiverge's brightness and contrast per image, once per epoch.
    Jitter(ColourJitter),
}

impl AugOp {
    /// Its place in every published pipeline: crop, flip, cutout, colour.
    fn rank(&self) -> u8 {
        match self {
            AugOp::PadCrop { .. } | AugOp::ResizedCrop { .. } => 0,
            AugOp::Flip { .. } => 1,
            AugOp::Cutout { .. } => 2,
            AugOp::Jitter(_) => 3,
        }
    }

    /// The op as `recipe show` and the manifest name it.
    pub fn describe(&self) -> String {
        match *self {
            AugOp::PadCrop { pad } => format!("crop(reflect pad {pad})"),
            AugOp::ResizedCrop { scale, ratio } => format!(
                "resized_crop(area {:.3}–{:.3}, ratio {:.3}–{:.3})",
                scale.0, scale.1, ratio.0, ratio.1
            ),
            AugOp::Flip { alternating: false } => "flip(p 0.5)".into(),
            AugOp::Flip { alternating: true } => "flip(alternating)".into(),
            AugOp::Cutout { size } => format!("cutout({size}×{size})"),
            AugOp::Jitter(j) => format!(
                "colour_jitter(brightness ±{}, contrast ±{})",
                j.brightness, j.contrast
            ),
        }
    }
}

impl Augment {
    /// Puts `op` at its place in the pipeline (crop, flip, cutout, colour),
    /// in place of one of its kind: tricks apply in any order, the images
    /// are augmented in one.
    pub fn set(&mut self, op: AugOp) {
        let kind = std::mem::discriminant(&op);
        self.ops.retain(|o| std::mem::discriminant(o) != kind);
        let at = self.ops.partition_point(|o| o.rank() <= op.rank());
        self.ops.insert(at, op);
    }

    /// The reflect padding the crop takes its window from (0: no crop).
    pub fn pad(&self) -> i64 {
        self.ops
            .iter()
            .find_map(|o| match *o {
                AugOp::PadCrop { pad } => Some(pad),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The colour jitter, applied by the batch builder after the other ops
    /// (its draws are per epoch over the whole set, as hiverge's).
    pub fn jitter(&self) -> Option<ColourJitter> {
        self.ops.iter().find_map(|o| match *o {
            AugOp::Jitter(j) => Some(j),
            _ => None,
        })
    }

    /// Whether images are flipped (by either rule).
    pub fn flips(&self) -> bool {
        self.ops.iter().any(|o| matches!(o, AugOp::Flip { .. }))
    }

    /// The pipeline in order, as one line: `crop(reflect pad 2) → flip(alternating)`.
    pub fn describe(&self) -> String {
        if self.ops.is_empty() {
            return "none".into();
        }
        let mut line = self
            .ops
            .iter()
            .map(AugOp::describe)
            .collect::<Vec<_>>()
            .join(" → ");
        if let Some(g) = self.groups {
            line.push_str(&format!(", drawn for at most {g} groups per op"));
        }
        line
    }
}

/// Per image, drawn for each batch: a brightness shift b ~ U(±brightness)
/// and a contrast factor c ~ U(1 ± contrast) about the image's mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColourJitter {
    pub brightness: f64,
    pub contrast: f64,
}

/// Train on downscaled images for the first part of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Progressive {
    /// Side of the small images.
    pub size: i64,
    /// Fraction of the epochs trained small.
    pub until: f64,
    /// Evaluate the full image even while training small.
    pub eval_full_size: bool,
}

impl Progressive {
    pub fn small_at(&self, epoch: usize, epochs: f64) -> bool {
        (epoch as f64) < self.until * epochs
    }

    /// The side to evaluate at while training small (`None`: the full image).
    pub fn eval_size(&self) -> Option<i64> {
        (!self.eval_full_size).then_some(self.size)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    F16,
    Bf16,
}

impl Half {
    pub fn kind(self) -> Kind {
        match self {
            Half::F16 => Kind::Half,
            Half::Bf16 => Kind::BFloat16,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Precision {
    /// Weights, activations and the resident training data in half precision;
    /// BatchNorm parameters stay fp32 and take the half input as it is.
    pub half: Option<Half>,
    /// BatchNorm in the half precision too, statistics included (Page parts 1-2).
    pub bn_half: bool,
    /// Autocast the forward pass to this type, fp32 weights.
    pub amp: Option<Half>,
    pub channels_last: bool,
    pub cudnn_benchmark: bool,
    /// torch.compile: asked for, but libtorch has no compiler (`validate` refuses it).
    pub compile: bool,
    /// Everything in float64, the normalisation included: a golden
    /// trajectory's replay, where float32 rounding would swamp the comparison
    /// (no trick sets it; `half` and `amp` stay off).
    pub float64: bool,
}

impl Precision {
    /// The type images are normalised in.
    pub fn data_kind(&self) -> tch::Kind {
        if self.float64 {
            tch::Kind::Double
        } else {
            tch::Kind::Float
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LossPlan {
    /// Label-smoothing weight α (0 = plain cross-entropy).
    pub smoothing: f64,
    /// The loss is summed over the batch before backward, as Page, airbench and
    /// hlb do ("a crude loss scale" in Page's words): with a mean, the gradient
    /// entering a pure-fp16 net's logits (1/batch of a mean-loss gradient, times
    /// the logit scale) falls below fp16's smallest normal, 6.1e-5, and layers
    /// a step or two down flush to zero. The optimisers take the matching units.
    pub scale: f64,
    pub cutmix: Option<CutMix>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CutMix {
    pub size: i64,
    /// Applied in the last this-many epochs.
    pub last_epochs: f64,
}

impl CutMix {
    pub fn active_at(&self, epoch: usize, epochs: f64) -> bool {
        epoch as f64 >= epochs - self.last_epochs
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StepPlan {
    /// Micro-batches per optimiser step.
    pub accum: i64,
    /// Maximum global gradient norm.
    pub clip_norm: Option<f64>,
    pub zero_grad_none: bool,
    /// Forward and backward replayed as a CUDA graph (train/graph.rs).
    pub cuda_graphs: bool,
    /// A gang's DDP Reducer: its buckets and communication hook.
    pub ddp: crate::config::DdpOptions,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Family {
    /// Page's Nesterov form: lr inside the momentum buffer.
    SgdPage,
    /// PyTorch's SGD form.
    SgdTorch,
    Lars {
        trust: f64,
    },
    Lamb,
    AdamW,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OptimPlan {
    pub family: Family,
    /// Peak learning rate, mean-loss convention.
    pub lr: f64,
    /// Momentum (0 = plain SGD).
    pub momentum: f64,
    /// Nesterov's form of it (`nesterov`), or the heavy ball (`momentum`).
    pub nesterov: bool,
    /// Coupled weight decay: per-step decay lr·wd (0 = none).
    pub weight_decay: f64,
    /// lr multiplier of the BN-bias group; its decay is divided by it.
    pub bn_bias_mult: f64,
    /// No weight decay on BN weights, BN biases and conv biases.
    pub no_wd_bn_bias: bool,
    pub muon: Option<MuonPlan>,
    pub whiten_bias: Option<WhitenBias>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MuonPlan {
    /// Absolute lr of the filters, scaled by the schedule.
    pub lr: f64,
    pub momentum: f64,
    pub ns_steps: i64,
    /// lr multiplier of the head's SGD group (its decay per step unchanged).
    pub head_lr_mult: f64,
    /// Whose Newton–Schulz: coefficients and the normalisation of its input.
    pub ns: NsVariant,
    /// The type Newton–Schulz iterates in.
    pub ns_dtype: NsDtype,
    /// One batched Newton–Schulz over every filter, zero-padded.
    pub batched: bool,
    /// Momentum buffers in fp16.
    pub half_momentum: bool,
    /// When the filters are rescaled to Frobenius norm √C_out.
    pub renorm: Renorm,
    /// Decoupled weight decay after the update: w ×= 1 − lr(t)·wd (0 = none).
    pub weight_decay: f64,
}

impl MuonPlan {
    /// The optimiser's options for a run of `total_steps` (the renormalisation
    /// interval and hiverge's magnitude read the step as a fraction of it).
    pub fn options(&self, total_steps: u64) -> crate::optim::MuonOptions {
        crate::optim::MuonOptions {
            momentum: self.momentum,
            nesterov: true,
            ns_steps: self.ns_steps,
            ns: self.ns,
            ns_dtype: self.ns_dtype,
            batched: self.batched,
            half_momentum: self.half_momentum,
            renorm: self.renorm,
            weight_decay: self.weight_decay,
            total_steps,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct WhitenBias {
    /// Epochs during which the whitening bias trains: its first
    /// ceil(epochs·steps per epoch) steps, then no gradient reaches it.
    pub epochs: f64,
    /// Its own lr decay, × (1 − s/S) over those S steps, and optimiser,
    /// instead of the run's schedule (airbench94_muon, the speedrun).
    pub own_schedule: bool,
}

impl WhitenBias {
    /// The steps it trains for, as the references count them.
    pub fn steps(&self, per_epoch: u64) -> u64 {
        (self.epochs * per_epoch as f64).ceil() as u64
    }
}

/// Which optimiser group a parameter trains in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamGroup {
    /// Conv filters, the linear head and a learnable stem conv; with Muon on,
    /// everything but the filters: the head.
    Weights,
    BnWeights,
    BnBiases,
    WhitenBias,
    ConvBiases,
    /// The conv filters Muon takes.
    Filters,
}

impl OptimPlan {
    /// The lr and decays as the run's `batch` takes them, from the values a
    /// recipe wrote at `lr_batch` and `wd_batch` images (0: per batch, as
    /// written). A reference that sums its loss under a per-example lr
    /// (airbench: lr and weight decay "per 1024 examples", `lr /
    /// kilostep_scale`, `wd * batch_size`) steps further with a larger
    /// batch, by batch / lr_batch; the decay per step, lr · weight_decay,
    /// scales by batch / wd_batch alone (hlb: a per-batch gradient step, a
    /// decay `6.687e-4 * batchsize`). Muon's own lr is per step whatever the
    /// batch (its update is orthogonalised); its decoupled decay scales like
    /// the others'.
    pub fn at_batch(&mut self, batch: usize, lr_batch: usize, wd_batch: usize) {
        let per = |written: usize| match written {
            0 => 1.0,
            n => batch as f64 / n as f64,
        };
        let (lr_scale, wd_scale) = (per(lr_batch), per(wd_batch));
        self.lr *= lr_scale;
        // lr · weight_decay is the decay: undo the lr's scale, take the decay's.
        self.weight_decay *= wd_scale / lr_scale;
        if let Some(m) = &mut self.muon {
            m.weight_decay *= wd_scale;
        }
    }

    /// A group's (lr multiplier, weight-decay multiplier) on the run's lr and
    /// wd: the per-step decay of its weights is lr·lr_mult × wd·wd_mult.
    pub fn mults(&self, g: ParamGroup) -> (f64, f64) {
        let wd = if self.no_wd_bn_bias { 0.0 } else { 1.0 };
        match g {
            // airbench passes weight_decay = wd / lr to every SGD group, so
            // each decays by the same wd per step whatever its lr: the head too.
            ParamGroup::Weights => match &self.muon {
                Some(m) => (m.head_lr_mult, 1.0 / m.head_lr_mult),
                None => (1.0, 1.0),
            },
            ParamGroup::BnWeights | ParamGroup::WhitenBias | ParamGroup::ConvBiases => (1.0, wd),
            ParamGroup::BnBiases => (self.bn_bias_mult, wd / self.bn_bias_mult),
            ParamGroup::Filters => (1.0, 1.0),
        }
    }
}

/// Every step's learning rates, built once from the plan and the run's length.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRates {
    pub total: u64,
    /// Steps of the first epoch (of every epoch, unless the batch changes).
    pub per_epoch: u64,
    /// Steps of each epoch, the last one whole.
    pub epoch_steps: Vec<u64>,
    /// The schedule's multiplier of each step.
    pub main: Vec<f64>,
    /// Steps during which the whitening bias trains (when it has one).
    pub whiten_bias_steps: Option<u64>,
}

impl RunPlan {
    /// The rates of a run on `train_images` images in drop_last batches, as
    /// every reference counts them: T = ceil(epochs · ⌊n/batch⌋).
    pub fn rates(&self, train_images: u64) -> StepRates {
        let epochs = self.epochs.ceil().max(1.0) as usize;
        let epoch_steps: Vec<u64> = (0..epochs)
            .map(|e| (train_images / self.batch_at(e).max(1) as u64).max(1))
            .collect();
        let per_epoch = epoch_steps[0];
        if self.batch_phases.is_empty() {
            let total = (self.epochs * per_epoch as f64).ceil() as u64;
            return StepRates {
                total,
                per_epoch,
                epoch_steps,
                main: self.schedule.multipliers(total, per_epoch),
                whiten_bias_steps: self.optim.whiten_bias.as_ref().map(|w| w.steps(per_epoch)),
            };
        }
        // Whole epochs, then the fraction of the last one.
        let total = epoch_steps
            .iter()
            .enumerate()
            .map(|(e, &n)| {
                let part = (self.epochs - e as f64).min(1.0);
                (part * n as f64).ceil() as u64
            })
            .sum();
        StepRates {
            total,
            per_epoch,
            main: self.schedule.multipliers_by_epoch(&epoch_steps, total),
            epoch_steps,
            whiten_bias_steps: None,
        }
    }

    /// The global batch of 0-based epoch `epoch`.
    pub fn batch_at(&self, epoch: usize) -> usize {
        self.batch_phases
            .iter()
            .rev()
            .find(|(from, _)| *from <= epoch)
            .map_or(self.batch_size, |p| p.1)
    }

    /// (lr, per-step decay coefficient) of `group` at 0-based step `s`: the
    /// mean-loss lr of an SGD group (Muon's own lr for the filters) and the c
    /// of its decay term c·w (coupled for SGD, decoupled for Muon).
    pub fn group_rate(&self, group: ParamGroup, s: u64, r: &StepRates) -> (f64, f64) {
        let o = &self.optim;
        let m = r.main[s as usize];
        if group == ParamGroup::Filters
            && let Some(mu) = &o.muon
        {
            let lr = mu.lr * m;
            return (lr, lr * mu.weight_decay);
        }
        let (lr_mult, wd_mult) = o.mults(group);
        let m = match (&o.whiten_bias, r.whiten_bias_steps) {
            (Some(wb), Some(steps)) if group == ParamGroup::WhitenBias && wb.own_schedule => {
                1.0 - s as f64 / steps.max(1) as f64
            }
            _ => m,
        };
        let lr = o.lr * m * lr_mult;
        (lr, lr * o.weight_decay * wd_mult)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EvalPlan {
    /// Evaluate every N epochs (the last one always).
    pub every: usize,
    /// 0: one view; 1: + mirror; 2: + two one-pixel translations.
    pub tta_level: u8,
    /// Test images per forward pass (airbench: 2000).
    pub batch: usize,
    /// Selective TTA: only this fraction of the test images, the least
    /// confident after the plain pass, get the TTA views.
    pub tta_fraction: Option<f64>,
    /// The run's accuracy is the median of the last this-many epochs'
    /// evaluations, each of them evaluated (0: the final evaluation's).
    pub median_of_last: usize,
}

impl EvalPlan {
    /// Whether 0-based epoch `epoch` of `epochs` is evaluated (every
    /// `every`-th, the last, and each the median readout takes), and whether
    /// the readout takes it.
    pub fn due(&self, epoch: usize, epochs: usize, last: bool) -> (bool, bool) {
        let n = self.median_of_last;
        let in_readout = n > 0 && epoch + n >= epochs;
        (
            last || in_readout || (epoch + 1).is_multiple_of(self.every),
            in_readout,
        )
    }
}

/// The widest sane run: a typo of an extra zero or two, not a plan.
pub const MAX_EPOCHS: f64 = 10_000.0;

/// The values an engine run trains with, flat and typed (lowercase words):
/// what the results folder records, the runs table's columns and the
/// trackers' hyperparameters read. Decided once, from the plan.
/// (A field a folder of an older version lacks reads as its default.)
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Settings {
    pub arch: String,
    pub widths: Vec<i64>,
    pub epochs: f64,
    pub batch_size: usize,
    pub lr: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// sgd_page, sgd_torch, lars, lamb or adamw.
    pub optimizer: String,
    pub muon_lr: Option<f64>,
    pub label_smoothing: f64,
    /// fp32, fp16, bf16, amp_fp16 or amp_bf16.
    pub precision: String,
    pub bn_fp32: bool,
    pub channels_last: bool,
    /// none, page_ema or lookahead.
    pub averaging: String,
    /// off, page or airbench.
    pub whitening: String,
    pub tta_level: u8,
    pub clock: Clock,
    pub world_size: usize,
    /// Images per BatchNorm batch in training (Goyal's n).
    pub bn_batch: usize,
    /// The augmentations in the order the executors apply them.
    pub augment: Vec<String>,
}

impl RunPlan {
    /// The values the run trains with, flat and typed (lowercase words), for
    /// the results table's columns and the trackers' hyperparameters.
    pub fn resolved(&self) -> Settings {
        let half = |h: Option<Half>| match h {
            None => "fp32",
            Some(Half::F16) => "fp16",
            Some(Half::Bf16) => "bf16",
        };
        let precision = match (self.precision.half, self.precision.amp) {
            (Some(h), _) => half(Some(h)).to_string(),
            (None, Some(a)) => format!("amp_{}", half(Some(a))),
            (None, None) => "fp32".into(),
        };
        let optimizer = match self.optim.family {
            Family::SgdPage => "sgd_page",
            Family::SgdTorch => "sgd_torch",
            Family::Lars { .. } => "lars",
            Family::Lamb => "lamb",
            Family::AdamW => "adamw",
        };
        let averaging = match self.averaging {
            Averaging::None => "none",
            Averaging::PageEma { .. } => "page_ema",
            Averaging::Lookahead { .. } => "lookahead",
        };
        let whitening = match self.net.whitening {
            Whitening::Off => "off",
            Whitening::Page { .. } => "page",
            Whitening::Airbench { .. } => "airbench",
        };
        Settings {
            arch: self.net.arch.name().into(),
            widths: self.net.widths.clone(),
            epochs: self.epochs,
            batch_size: self.batch_size,
            lr: self.optim.lr,
            momentum: self.optim.momentum,
            nesterov: self.optim.nesterov && self.optim.momentum > 0.0,
            weight_decay: self.optim.weight_decay,
            optimizer: optimizer.into(),
            muon_lr: self.optim.muon.as_ref().map(|m| m.lr),
            label_smoothing: self.loss.smoothing,
            precision,
            bn_fp32: !self.precision.bn_half,
            channels_last: self.precision.channels_last,
            averaging: averaging.into(),
            whitening: whitening.into(),
            tta_level: self.eval.tta_level,
            clock: self.clock,
            world_size: self.world_size,
            bn_batch: self.bn_batch(),
            augment: self.data.augment.ops.iter().map(AugOp::describe).collect(),
        }
    }

    /// The plan of `settings` with every trick off.
    pub fn base(s: &RunConfig) -> RunPlan {
        let net = NetConfig {
            act: Activation::Relu,
            // BnConfig's defaults, but the PyTorch ≤0.4 scale init.
            bn: BnConfig {
                weight_init_one: false,
                ..BnConfig::default()
            },
            pool_before_act: false,
            pool_before_bn: false,
            residual: false,
            logit_scale: 1.0,
            whitening: Whitening::Off,
            dirac: Dirac::Off,
            prep_bn_relu: false,
            conv_bias: true,
            ..NetConfig::default_for(s.arch).scaled(s.width_mult)
        };
        let family = match s.optimizer {
            OptimizerKind::SgdPage => Family::SgdPage,
            OptimizerKind::SgdTorch => Family::SgdTorch,
        };
        RunPlan {
            epochs: s.epochs,
            batch_size: s.batch_size,
            net,
            head_unit_std: false,
            data: DataPlan::base(s),
            precision: Precision::default(),
            loss: LossPlan {
                smoothing: 0.0,
                scale: s.batch_size as f64,
                cutmix: None,
            },
            step: StepPlan {
                accum: 1,
                clip_norm: None,
                zero_grad_none: false,
                cuda_graphs: false,
                ddp: crate::config::DdpOptions::default(),
            },
            optim: OptimPlan {
                family,
                lr: s.lr,
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.0,
                bn_bias_mult: 1.0,
                no_wd_bn_bias: false,
                muon: None,
                whiten_bias: None,
            },
            schedule: Schedule {
                shape: base_shape(s),
                warmup_epochs: None,
                warmup_start: 0.0,
                floor: None,
            },
            averaging: Averaging::None,
            eval: EvalPlan {
                every: s.eval_every.max(1),
                tta_level: 0,
                batch: s.eval_batch.max(1),
                tta_fraction: None,
                median_of_last: 0,
            },
            metrics_every: s.metrics_every as u64,
            world_size: s.world_size.max(1),
            batch_phases: Vec::new(),
            clock: s.clock,
        }
    }

    /// The plan with every setting that cannot act in it put in one canonical
    /// state, so that two plans that train identically compare equal: the
    /// matrix warnings use it to find variants that change nothing.
    pub fn effective(&self) -> RunPlan {
        let mut p = self.clone();
        // One process's batch is whole already: SyncBN is plain BN there.
        if p.world_size <= 1 {
            p.net.bn.sync = false;
        }
        let half = p.precision.half;
        if let Some(m) = p.optim.muon.as_mut() {
            // An fp16 net's Muon buffers are fp16 already.
            if half == Some(Half::F16) {
                m.half_momentum = true;
            }
            // In a bf16 net the filters' own type is bf16.
            if half == Some(Half::Bf16) {
                m.ns_dtype = NsDtype::Bf16;
            }
        }
        p
    }

    /// `ghost_bn.size` as splits of this run's micro-batch (batch ÷ world
    /// size ÷ accumulation), so BatchNorm normalises over `size` images on
    /// a rank at any world size: Goyal et al.'s n = 32 holds at world size
    /// 1 (256 splits of batch 8192), 8 (32) and 2 with accumulation 4 (32).
    /// A micro-batch the size does not divide is refused, naming both.
    pub fn resolve_bn_size(&mut self) -> Result<()> {
        let Some(size) = self.net.bn.ghost_size else {
            return Ok(());
        };
        let (world, accum) = (self.world_size.max(1), self.step.accum.max(1) as usize);
        let micro = self.batch_size / world / accum;
        if !self.batch_phases.is_empty() {
            bail!(
                "ghost_bn.size = {size} keeps one BatchNorm batch, but this run changes its batch by phase: set ghost_bn.size = 0 and use ghost_bn.splits"
            );
        }
        if micro == 0 || !micro.is_multiple_of(size as usize) {
            bail!(
                "ghost_bn.size = {size} images per BatchNorm batch does not divide the {micro} images a rank takes per micro-batch (batch_size {} / world_size {world} / accumulation {accum}): pick a batch that keeps {size}, or set ghost_bn.size to a divisor of {micro}",
                self.batch_size
            );
        }
        self.net.bn.ghost_splits = (micro / size as usize) as i64;
        Ok(())
    }

    /// The images one BatchNorm batch normalises over in training: a
    /// rank's micro-batch split by ghost BN, or every rank's share (SyncBN).
    pub fn bn_batch(&self) -> usize {
        let (world, accum) = (self.world_size.max(1), self.step.accum.max(1) as usize);
        let micro = self.batch_size / world / accum;
        if self.net.bn.sync {
            micro * world
        } else {
            micro / self.net.bn.ghost_splits.max(1) as usize
        }
    }

    /// A batch that changes by phase: only the streaming loader builds such
    /// batches, and every phase's batch must split over the ranks and the
    /// ghost-BN splits as the first does.
    fn validate_batch_phases(&self) -> Result<()> {
        let Some(&(first, _)) = self.batch_phases.first() else {
            return Ok(());
        };
        if self.data.stream.is_none() {
            bail!(
                "batch sizes by phase need the streaming loader: turn `stream` on (the in-memory pipeline keeps one batch)"
            );
        }
        if first != 0 || self.batch_phases.first().map(|p| p.1) != Some(self.batch_size) {
            bail!(
                "the first batch phase must start at epoch 0 with batch_size {}",
                self.batch_size
            );
        }
        if self.averaging != Averaging::None || self.schedule.floor.is_some() {
            bail!(
                "weight averaging and Page's EMA floor count steps in epochs of one length: turn them off with batch phases"
            );
        }
        let per = self.world_size.max(1)
            * self.step.accum.max(1) as usize
            * self.net.bn.ghost_splits.max(1) as usize;
        if let Some(&(e, b)) = self
            .batch_phases
            .iter()
            .find(|(_, b)| !b.is_multiple_of(per))
        {
            bail!(
                "the batch of {b} from epoch {e} does not split into world_size × accumulation × ghost-BN splits = {per}: pick a multiple"
            );
        }
        Ok(())
    }

    /// Checks that need the whole plan, each a one-line error with the fix.
    pub fn validate(&self) -> Result<()> {
        if self.precision.compile {
            bail!(
                "torch.compile is not available through tch/libtorch: turn that trick off (it is reported as N/A)"
            );
        }
        if !(self.epochs > 0.0 && self.epochs <= MAX_EPOCHS) {
            bail!(
                "epochs = {} is outside (0, {MAX_EPOCHS}]: a fast-training run is tens of epochs",
                self.epochs
            );
        }
        if self.optim.family == Family::SgdPage && self.optim.momentum > 0.0 && !self.optim.nesterov
        {
            bail!(
                "optimizer sgd_page is Page's Nesterov form: use `nesterov` with it, or `optimizer = sgd_torch` for heavy-ball `momentum`"
            );
        }
        self.validate_batch_phases()?;
        // Page's schedule is [0, E/5, E − floor] → [0, 1, 0.1], then the
        // floor: with a floor as long as the run it has no shape (its knots
        // go backwards), and flattening it would train a different schedule.
        if let Some((floor, _)) = self.schedule.floor
            && floor >= self.epochs
        {
            bail!(
                "the EMA floor of the schedule ({floor} epochs, `ema.floor_epochs`) is not shorter than the run ({} epochs): the schedule would have no shape; lower ema.floor_epochs below the run's epochs, or turn ema off",
                self.epochs
            );
        }
        let accum = self.step.accum.max(1) as usize;
        if !self.batch_size.is_multiple_of(accum) {
            bail!(
                "batch_size {} is not divisible by the {accum} accumulation micro-batches: pick a multiple",
                self.batch_size
            );
        }
        let world = self.world_size.max(1);
        if !self.batch_size.is_multiple_of(world * accum) {
            bail!(
                "batch_size {} is not divisible by world_size {world} × {accum} accumulation micro-batches: every rank takes an equal share of the global batch; pick a multiple of {}",
                self.batch_size,
                world * accum
            );
        }
        let micro = self.batch_size / world / accum;
        let splits = self.net.bn.ghost_splits.max(1) as usize;
        if !micro.is_multiple_of(splits) {
            bail!(
                "batch_size {} (per rank and micro-batch {micro}) is not divisible by the {splits} ghost BN splits: pick a batch that is a multiple of it",
                self.batch_size
            );
        }
        Ok(())
    }
}
