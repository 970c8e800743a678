//! The run plan: every decision the engine acts on, typed, made before the
//! first step. `RunPlan::base` turns a run's settings into the plan with every
//! trick off; each catalog entry's `apply` then changes the fields it owns
//! (`tricks::build_plan`). The engine reads nothing else, so two runs whose
//! plans are equal train identically, and a trick that leaves the plan alone
//! does nothing.

use crate::config::{OptimizerKind, RunConfig, ScheduleKind};
use crate::model::{Activation, BnConfig, Dirac, NetConfig, Whitening};
use crate::optim::Piecewise;
use anyhow::{Result, bail};
use tch::Kind;

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
}

#[derive(Clone, Debug, PartialEq)]
pub struct DataPlan {
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
}

/// What to do to the training images each epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct Augment {
    /// Reflect padding the crop takes its window from (0 = no crop).
    pub pad: i64,
    pub flip: bool,
    pub alternating: bool,
    pub cutout: Option<i64>,
    /// Page's group-wise sampling: at most this many groups per transform.
    pub groups: Option<i64>,
    /// Brightness and contrast jitter of every batch.
    pub jitter: Option<ColourJitter>,
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
    /// Nesterov momentum (0 = plain SGD).
    pub momentum: f64,
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
    /// Newton–Schulz coefficients (a, b, c).
    pub ns_coeffs: (f64, f64, f64),
    /// One batched Newton–Schulz over every filter, zero-padded.
    pub batched: bool,
    /// Momentum buffers in fp16.
    pub half_momentum: bool,
    pub norm: MuonNorm,
}

/// When Muon renormalises its filters, and the scheduled magnitude: of the
/// filters' norm (× √C_out), or with `scales_update` of the update.
#[derive(Clone, Debug, PartialEq)]
pub struct MuonNorm {
    pub every: u64,
    pub start: f64,
    pub end: f64,
    pub scales_update: bool,
}

impl MuonNorm {
    /// airbench94_muon: every step, to √C_out.
    pub const AIRBENCH: MuonNorm = MuonNorm {
        every: 1,
        start: 1.0,
        end: 1.0,
        scales_update: false,
    };

    /// The target at `progress` ∈ [0, 1] of training, linear from start to end.
    pub fn magnitude(&self, progress: f64) -> f64 {
        self.start + (self.end - self.start) * progress.clamp(0.0, 1.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct WhitenBias {
    /// Epochs during which the whitening bias trains; frozen after.
    pub epochs: f64,
    /// Its own lr decay (1 → 0 over `epochs`) and optimiser, instead of the run's schedule.
    pub own_schedule: bool,
}

impl WhitenBias {
    /// The lr multiplier under its own schedule at a fractional epoch.
    pub fn own_multiplier(&self, epoch: f64) -> f64 {
        if self.epochs <= 0.0 {
            0.0
        } else {
            (1.0 - epoch / self.epochs).max(0.0)
        }
    }
}

/// The lr multiplier per fractional epoch, built once.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub knots: Piecewise,
    /// A linear ramp from 0 over the first this-many epochs, on top.
    pub warmup_epochs: Option<f64>,
    /// Page reads his schedule after counting the step, so his first step
    /// already has a non-zero lr; airbench's LambdaLR reads step 0 first.
    pub count_first: bool,
}

impl Schedule {
    /// The multiplier for step `step` (0-based) of epoch `epoch`.
    pub fn at_step(&self, epoch: usize, step: u64, steps_per_epoch: u64) -> f64 {
        let s = step + u64::from(self.count_first);
        self.at(epoch as f64 + s as f64 / steps_per_epoch as f64)
    }

    pub fn at(&self, epoch: f64) -> f64 {
        let m = self.knots.at(epoch);
        match self.warmup_epochs {
            Some(w) if w > 0.0 && epoch < w => m * epoch / w,
            _ => m,
        }
    }
}

/// Page's DAWNBench schedule ends on this lr (mean-loss units) at epoch 30 of 35.
pub const DAWN_TAIL_LR: f64 = 0.005;

/// The schedule's knots from the settings alone.
pub fn base_knots(s: &RunConfig) -> Piecewise {
    let e = s.epochs;
    let p = s.peak_epoch * e;
    let knots = match s.schedule {
        ScheduleKind::Page | ScheduleKind::Onecycle => {
            vec![(0.0, 0.0), (p, 1.0), (e, s.final_lr_frac)]
        }
        // Page parts 1-3: the knot at epoch 30 of 35 is an absolute lr (0.005 at
        // both bs 128 / lr 0.1 and bs 512 / lr 0.44), not a fraction of the peak.
        ScheduleKind::Dawn => vec![
            (0.0, 0.0),
            (p, 1.0),
            (e * 30.0 / 35.0, (DAWN_TAIL_LR / s.lr).min(1.0)),
            (e, 0.0),
        ],
        ScheduleKind::Airbench => vec![(0.0, 0.2), (p, 1.0), (e, s.final_lr_frac)],
        ScheduleKind::Linear => vec![(0.0, 1.0), (e, 0.0)],
        ScheduleKind::Constant => vec![(0.0, 1.0), (e, 1.0)],
    };
    Piecewise::new(knots).unwrap_or_else(|_| Piecewise {
        knots: vec![(0.0, 1.0)],
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Averaging {
    None,
    /// Page: an eval-only copy, `decay` applied every `every` steps.
    PageEma {
        decay: f64,
        every: u64,
    },
    /// airbench: average every `every` steps with 0.95⁵·(t/T)³ and copy back.
    /// hlb: the same from `start_epoch` on (a snapshot of the live net then),
    /// evaluating a separate copy holding the average.
    Lookahead {
        every: u64,
        start_epoch: f64,
        eval_average: bool,
    },
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
}

/// The widest sane run: a typo of an extra zero or two, not a plan.
pub const MAX_EPOCHS: f64 = 10_000.0;

impl RunPlan {
    /// The plan of `settings` with every trick off.
    pub fn base(s: &RunConfig) -> RunPlan {
        let net = NetConfig {
            act: Activation::Relu,
            bn: BnConfig {
                ghost_splits: 1,
                frozen_scale: false,
                momentum: 0.1,
                eps: 1e-5,
                weight_init_one: false,
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
            data: DataPlan {
                train_per_class: s.train_per_class,
                test_per_class: s.test_per_class,
                resident: false,
                preprocess_once: false,
                augment: Augment {
                    pad: 0,
                    flip: false,
                    alternating: false,
                    cutout: None,
                    groups: None,
                    jitter: None,
                },
                progressive: None,
            },
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
            },
            optim: OptimPlan {
                family,
                lr: s.lr,
                momentum: 0.0,
                weight_decay: 0.0,
                bn_bias_mult: 1.0,
                no_wd_bn_bias: false,
                muon: None,
                whiten_bias: None,
            },
            schedule: Schedule {
                knots: base_knots(s),
                warmup_epochs: None,
                count_first: matches!(s.schedule, ScheduleKind::Page | ScheduleKind::Dawn),
            },
            averaging: Averaging::None,
            eval: EvalPlan {
                every: s.eval_every.max(1),
                tta_level: 0,
                batch: s.eval_batch.max(1),
                tta_fraction: None,
            },
            metrics_every: s.metrics_every as u64,
        }
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
        let accum = self.step.accum.max(1) as usize;
        if !self.batch_size.is_multiple_of(accum) {
            bail!(
                "batch_size {} is not divisible by the {accum} accumulation micro-batches: pick a multiple",
                self.batch_size
            );
        }
        let micro = self.batch_size / accum;
        let splits = self.net.bn.ghost_splits.max(1) as usize;
        if !micro.is_multiple_of(splits) {
            bail!(
                "batch_size {} (per micro-batch {micro}) is not divisible by the {splits} ghost BN splits: pick a batch that is a multiple of it",
                self.batch_size
            );
        }
        Ok(())
    }
}
