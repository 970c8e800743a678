//! Every trick, once. Facts from ../shared/TRICKS.md (section 4, the part-8
//! ladder of section 1.4, airbench in section 2, hlb in section 3) and from
//! the single-GPU performance and large-batch literature.

use super::*;
use crate::config::{Arch, CommHook, DdpOptions, ScheduleKind};
use crate::model::{Activation, Basis, Dirac, Whitening};
use crate::optim::{Piecewise, page_ema_decay};
use crate::plan::{
    AugOp, Averaging, AvgStart, ColourJitter, CutMix, Family, Half, MuonPlan, NsDtype, NsVariant,
    Progressive, Renorm, Resolution, RunPlan, Shape, StreamPlan, WhitenBias,
};
use anyhow::bail;

const fn f(name: &'static str, help: &'static str, default: f64, lo: f64, hi: f64) -> ParamSpec {
    ParamSpec {
        name,
        help,
        default: ParamValue::Float(default),
        range: Some((lo, hi)),
        choices: &[],
        in_epochs: false,
    }
}

const fn i(name: &'static str, help: &'static str, default: i64, lo: f64, hi: f64) -> ParamSpec {
    ParamSpec {
        name,
        help,
        default: ParamValue::Int(default),
        range: Some((lo, hi)),
        choices: &[],
        in_epochs: false,
    }
}

/// A float parameter counted in absolute epochs.
const fn e(name: &'static str, help: &'static str, default: f64, lo: f64, hi: f64) -> ParamSpec {
    ParamSpec {
        in_epochs: true,
        ..f(name, help, default, lo, hi)
    }
}

const fn c(
    name: &'static str,
    help: &'static str,
    default: &'static str,
    choices: &'static [&'static str],
) -> ParamSpec {
    ParamSpec {
        name,
        help,
        default: ParamValue::Choice(default),
        range: None,
        choices,
        in_epochs: false,
    }
}

use Category::*;

/// The `dtype` choice of the half-precision tricks.
fn half(a: &Args) -> anyhow::Result<Half> {
    Ok(match a.text("dtype")? {
        "bf16" => Half::Bf16,
        _ => Half::F16,
    })
}

const OPTIMISERS: &[TrickId] = &[TrickId::Lars, TrickId::Lamb, TrickId::Adamw, TrickId::Muon];

/// The Muon plan a Muon option modifies (`requires` has put `muon` first).
fn muon_of<'a>(p: &'a mut RunPlan, key: &str) -> anyhow::Result<&'a mut MuonPlan> {
    p.optim
        .muon
        .as_mut()
        .ok_or_else(|| anyhow::anyhow!("`{key}` needs `muon` on"))
}

catalog! {
    GpuData => TrickSpec {
        key: "gpu_data",
        ids: &["T1", "B1"],
        name: "GPU-resident data and augmentation",
        category: Data,
        help: "Keep the whole data set on the device and augment whole batches there instead of a per-sample CPU loader.",
        source: "Page part 8 B1 (75 s -> <70 s); airbench, hlb",
        off: "CPU loader: per-sample augmentation, host-to-device copy per batch",
        on: "data set resident on the device, batched crop/flip/cutout on the device",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.data.resident = true;
            Ok(())
        },
    },
    GroupAug => TrickSpec {
        key: "group_aug",
        ids: &["T1b"],
        name: "Page group-wise augmentation sampling",
        category: Data,
        help: "Shuffle, cut the data set into at most max_options equal groups per transform, one random option per group.",
        source: "Page part 8 (CF:bot#19-20, new_dawn max_options=200)",
        off: "an independent draw per sample",
        on: "<= 200 groups per transform per epoch",
        params: &[i(
            "max_options",
            "groups per transform per epoch",
            200,
            1.0,
            100000.0,
        )],
        requires: &[TrickId::GpuData],
        conflicts: &[],
        apply: |p, a| {
            p.data.augment.groups = Some(a.int("max_options")?);
            Ok(())
        },
    },
    PreprocessOnce => TrickSpec {
        key: "preprocess_once",
        ids: &["T2"],
        name: "Preprocess once",
        category: Data,
        help: "Normalise and pad the data set once before training instead of every epoch.",
        source: "Page part 1 P1c (301 s), part 8 B1",
        off: "normalise and pad every epoch",
        on: "once, before the first epoch (counted in the DAWNBench clock)",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.data.preprocess_once = true;
            Ok(())
        },
    },
    AirbenchNorm => TrickSpec {
        key: "airbench_norm",
        ids: &["T2b"],
        name: "airbench's normalisation constants",
        category: Data,
        help: "Normalise with airbench's CIFAR_MEAN (0.4914, 0.4822, 0.4465) and CIFAR_STD (0.2470, 0.2435, 0.2616) instead of Page's (125.31, 122.95, 113.87) / (62.99, 62.09, 66.70) on 0-255.",
        source: "airbench94.py, airbench94_muon.py, cifar10_speedrun.py (CIFAR_MEAN, CIFAR_STD); found by the golden trajectory",
        off: "Page's constants",
        on: "airbench's constants (inputs differ by about 1e-4 of a unit)",
        params: &[c(
            "dtype",
            "the type the script holds the constants in: fp32 (airbench94, airbench94_muon) or fp16 (cifar10_speedrun.py, whose blue std 0.2616 becomes 0.26171875)",
            "fp32",
            &["fp32", "fp16"],
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.data.norm = match a.text("dtype")? {
                "fp16" => crate::plan::Norm::AIRBENCH_FP16,
                _ => crate::plan::Norm::AIRBENCH,
            };
            Ok(())
        },
    },
    Fp16 => TrickSpec {
        key: "fp16",
        ids: &["T3", "P3a"],
        name: "Half precision",
        category: Systems,
        help: "fp16 (or bf16) weights, activations and resident training data, BatchNorm parameters kept in fp32 and fed the half input directly (no fp32 master copy, as Page and airbench). Runs on a CPU too, slowly: the tests train with it.",
        source: "Page part 3 P3a (256 s -> 186 s with BN in fp32); airbench, hlb",
        off: "fp32",
        on: "half-precision weights and activations, BatchNorm fp32 (or fp16 with bn=fp16)",
        params: &[
            c("dtype", "half-precision dtype", "fp16", &["fp16", "bf16"]),
            c(
                "bn",
                "fp32: BN parameters and statistics stay fp32 (Page part 3 on, airbench); fp16: BN in the half type too (Page parts 1-2, whose P3a rung moved it back)",
                "fp32",
                &["fp32", "fp16"],
            ),
        ],
        requires: &[],
        conflicts: &[TrickId::Amp],
        apply: |p, a| {
            p.precision.half = Some(half(a)?);
            p.precision.bn_half = a.text("bn")? == "fp16";
            Ok(())
        },
    },
    Amp => TrickSpec {
        key: "amp",
        ids: &[],
        name: "Automatic mixed precision",
        category: Systems,
        help: "Autocast the forward pass (convolutions and matmuls in fp16 or bf16) with fp32 master weights; on the CPU too (through our own ATen shim: tch autocasts CUDA only).",
        source: "PyTorch performance tuning guide; Page notes proper mixed precision 'adds about a second' (CF:bot#30)",
        off: "fp32",
        on: "fp16 autocast, fp32 weights",
        params: &[c("dtype", "autocast dtype", "fp16", &["fp16", "bf16"])],
        requires: &[],
        conflicts: &[TrickId::Fp16],
        apply: |p, a| {
            p.precision.amp = Some(half(a)?);
            Ok(())
        },
    },
    ChannelsLast => TrickSpec {
        key: "channels_last",
        ids: &["T4"],
        name: "channels_last memory format",
        category: Systems,
        help: "Store activations and conv filters NHWC so tensor-core convolutions avoid layout transposes. Pays off on CUDA; runs on a CPU too.",
        source: "airbench, hlb; PyTorch performance tuning guide",
        off: "NCHW contiguous",
        on: "NHWC (channels_last)",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.precision.channels_last = true;
            Ok(())
        },
    },
    CudnnBenchmark => TrickSpec {
        key: "cudnn_benchmark",
        ids: &["T5"],
        name: "cuDNN benchmark and warm-up",
        category: Systems,
        help: "Let cuDNN time its convolution algorithms for each shape and keep the fastest (CUDA), after two steps on random data outside the clocks that select the run's kernels (any device), as Page's dawn.py does before its timer.",
        source: "Page dawn.py; airbench",
        off: "cudnn.benchmark=False and no warm-up: kernel selection lands in the first epoch's clock",
        on: "cudnn.benchmark=True, kernels warmed outside the clocks",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.precision.cudnn_benchmark = true;
            Ok(())
        },
    },
    Compile => TrickSpec {
        key: "compile",
        ids: &["T6"],
        name: "torch.compile",
        category: Systems,
        help: "Graph compilation (max-autotune). libtorch has no compiler: a run with it on is refused with a one-line error; it is listed for completeness (T6).",
        source: "airbench94_compiled, airbench94_muon",
        off: "eager",
        on: "torch.compile(mode='max-autotune') - not available in tch",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.precision.compile = true;
            Ok(())
        },
    },
    PoolBeforeAct => TrickSpec {
        key: "pool_before_act",
        ids: &["T7", "B2a"],
        name: "Pool before activation",
        category: Architecture,
        help: "conv -> BN -> pool -> act instead of conv -> BN -> act -> pool: the same maths for a monotonic activation, on 4x fewer pixels.",
        source: "Page part 8 B2a (-3 s)",
        off: "conv -> BN -> act -> pool",
        on: "conv -> BN -> pool -> act",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.pool_before_act = true;
            Ok(())
        },
    },
    PoolBeforeBn => TrickSpec {
        key: "pool_before_bn",
        ids: &["T8", "B2b"],
        name: "Max-pool before BatchNorm",
        category: Architecture,
        help: "conv -> pool -> BN -> act: BN runs on pooled maps, which changes its statistics.",
        source: "Page part 8 B2b (64 s, +1 epoch); airbench, hlb",
        off: "conv -> BN -> (pool) -> act",
        on: "conv -> pool -> BN -> act",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.pool_before_bn = true;
            Ok(())
        },
    },
    Residual => TrickSpec {
        key: "residual",
        ids: &["T10", "P4i"],
        name: "Residual branches",
        category: Architecture,
        help: "Residual blocks after layer 1 and layer 3 of the ResNet-9 backbone.",
        source: "Page part 4 P4i (ResNet-9)",
        off: "res_layers=() (plain 4-conv backbone)",
        on: "residuals on layer 1 and layer 3",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            if !matches!(a.settings.arch, Arch::Backbone | Arch::Resnet9) {
                bail!(
                    "`residual` adds Page's layer-1 and layer-3 branches to the backbone/resnet9 nets; arch {:?} has its own shape: turn it off or --set arch=resnet9",
                    a.settings.arch
                );
            }
            p.net.residual = true;
            Ok(())
        },
    },
    LogitScale => TrickSpec {
        key: "logit_scale",
        ids: &["T11", "P4f"],
        name: "Logit scale",
        category: Architecture,
        help: "Multiply the logits by a constant: a temperature that matters with fixed-scale BatchNorm.",
        source: "Page P4f (0.125), B6 (1/16); airbench and hlb (1/9)",
        off: "1.0",
        on: "x scale",
        params: &[f(
            "scale",
            "multiplier applied to the logits",
            0.125,
            1e-4,
            10.0,
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.net.logit_scale = a.num("scale")?;
            Ok(())
        },
    },
    BnWeightInitOne => TrickSpec {
        key: "bn_weight_init_one",
        ids: &["T12", "P4f"],
        name: "BatchNorm weight init 1",
        category: Normalisation,
        help: "Initialise BN weights to 1 instead of PyTorch 0.4's U[0,1].",
        source: "Page part 4 P4f",
        off: "weight ~ U[0,1]",
        on: "weight = 1 (modern default)",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.bn.weight_init_one = true;
            Ok(())
        },
    },
    ZeroInitResidual => TrickSpec {
        key: "zero_init_residual",
        ids: &[],
        name: "Zero-initialised last BN scale in each residual block",
        category: Normalisation,
        help: "Start the last BatchNorm scale of every residual block at 0, so each block begins as the identity and the deep net trains like a shallow one early on (torchvision ResNets only).",
        source: "Goyal et al. 2017, 'Accurate, Large Minibatch SGD', section 5.1; torchvision's zero_init_residual",
        off: "every BN scale starts at 1",
        on: "each block's last BN scale starts at 0",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::FrozenBnScale],
        apply: |p, _| {
            p.net.zero_init_residual = true;
            Ok(())
        },
    },
    HeadInitNormal => TrickSpec {
        key: "head_init_normal",
        ids: &[],
        name: "Head initialised from N(0, std)",
        category: Architecture,
        help: "Draw the final linear layer's weights from a normal of standard deviation `std` instead of the layer's default uniform init; the bias keeps its own.",
        source: "Goyal et al. 2017, section 5.1 (N(0, 0.01)); fast.ai's imagenet18 (training/resnet.py, init_dist_weights under --init-bn0)",
        off: "the linear layer's default init",
        on: "weights ~ N(0, std)",
        params: &[f("std", "standard deviation of the head's weights", 0.01, 1e-6, 1.0)],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.net.head_init_std = Some(a.num("std")?);
            Ok(())
        },
    },
    Blurpool => TrickSpec {
        key: "blurpool",
        ids: &[],
        name: "BlurPool before strided convs",
        category: Architecture,
        help: "Low-pass filter ([1 2 1]x[1 2 1]/16, per channel) before every conv with a stride above 1 and at least 16 input channels, so downsampling does not alias (torchvision ResNets only).",
        source: "Zhang 2019, 'Making Convolutional Networks Shift-Invariant Again'; FFCV ImageNet (use_blurpool: 1)",
        off: "strided convs sample directly",
        on: "a fixed blur before each strided conv",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.blurpool = true;
            Ok(())
        },
    },
    Celu => TrickSpec {
        key: "celu",
        ids: &["T13", "B4"],
        name: "CELU activation",
        category: Architecture,
        help: "Replace ReLU by a smoothed CELU(x; a) = max(0, x) + min(0, a*(exp(x/a) - 1)), one fused kernel each way.",
        source: "Page part 8 B4 (52 s, a = 0.075); a = 0.3 with the frozen BN scale (B6)",
        off: "ReLU",
        on: "CELU(a)",
        params: &[f("alpha", "CELU smoothing a", 0.075, 1e-4, 10.0)],
        requires: &[],
        conflicts: &[TrickId::Gelu, TrickId::Silu],
        apply: |p, a| {
            p.net.act = Activation::Celu {
                alpha: a.num("alpha")?,
            };
            Ok(())
        },
    },
    Gelu => TrickSpec {
        key: "gelu",
        ids: &["T13"],
        name: "GELU activation",
        category: Architecture,
        help: "Replace ReLU by the exact GELU.",
        source: "airbench, hlb",
        off: "ReLU",
        on: "GELU",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Celu],
        apply: |p, _| {
            p.net.act = Activation::Gelu;
            Ok(())
        },
    },
    Silu => TrickSpec {
        key: "silu",
        ids: &["S1"],
        name: "SiLU activation",
        category: Architecture,
        help: "SiLU x*sigmoid(x) in the body, cheaper than the exact GELU; the activation right after the whitening conv (the stem) keeps the recipe's own, as hiverge keeps GELU there.",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :407 and :430; 2.015 s)",
        off: "the recipe's activation everywhere (GELU in airbench94_muon)",
        on: "SiLU in the ConvGroups, the stem's activation unchanged",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Celu],
        apply: |p, _| {
            p.net.stem_act = Some(p.net.stem_act.unwrap_or(p.net.act));
            p.net.act = Activation::Silu;
            Ok(())
        },
    },
    GhostBn => TrickSpec {
        key: "ghost_bn",
        ids: &["T14", "B5"],
        name: "Ghost BatchNorm",
        category: Normalisation,
        help: "Normalise over splits of the batch, keep running statistics per split and average them for eval. `size` (Goyal et al.'s n) fixes the images per split instead of their count, whatever the world size and accumulation.",
        source: "Page part 8 B5 (46 s, 16 splits, peak lr 0.4 -> 0.6); Goyal et al. 2017 §5.1 (n = 32 images per worker's BN)",
        off: "num_splits 1",
        on: "16 splits (32 examples each at batch 512)",
        params: &[
            i(
                "splits",
                "number of splits; the batch must divide by it (ignored when size is set)",
                16,
                1.0,
                4096.0,
            ),
            i(
                "size",
                "images per BatchNorm batch on a rank, kept at any world size and accumulation (0: use splits)",
                0,
                0.0,
                1_000_000.0,
            ),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.net.bn.ghost_splits = a.int("splits")?;
            let size = a.int("size")?;
            p.net.bn.ghost_size = (size > 0).then_some(size);
            Ok(())
        },
    },
    SyncBn => TrickSpec {
        key: "sync_bn",
        ids: &[],
        name: "Synchronised BatchNorm",
        category: Normalisation,
        help: "In a run over several ranks, take BN's batch statistics over the whole global batch (every rank's share) instead of each rank's own; changes nothing at world_size 1.",
        source: "torch.nn.SyncBatchNorm; the published multi-GPU runs (Goyal et al., fast.ai) keep BN per GPU",
        off: "statistics per rank (ghost BN of world_size splits)",
        on: "statistics over the global batch, reduced through c10d in forward and backward",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::GhostBn],
        apply: |p, _| {
            p.net.bn.sync = true;
            Ok(())
        },
    },
    FrozenBnScale => TrickSpec {
        key: "frozen_bn_scale",
        ids: &["T15", "B6"],
        name: "Frozen BN scale",
        category: Normalisation,
        help: "Fix every BN weight at 1 (no gradient, no weight decay). Alone it changes only this; Page's B6 rung also sets celu.alpha 0.075 -> 0.3, logit_scale 1/8 -> 1/16 and bn_bias_lr_scale x64 - the ladder sets those together.",
        source: "Page part 8 B6 (43 s); airbench, hlb",
        off: "BN weight trained (with wd)",
        on: "weight = 1, out of the optimiser",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::ZeroInitResidual],
        apply: |p, _| {
            p.net.bn.frozen_scale = true;
            Ok(())
        },
    },
    BnBiasLrScale => TrickSpec {
        key: "bn_bias_lr_scale",
        ids: &["T16", "B6"],
        name: "BN-bias learning-rate scaling",
        category: Optimiser,
        help: "A separate optimiser group for BN biases with lr x mult and weight decay / mult (same lr*wd product).",
        source: "Page part 8 B6 (x16, then x64); hlb x64; airbench bias_scaler 64",
        off: "x1",
        on: "lr x64, wd /64",
        params: &[f(
            "mult",
            "lr multiplier of the BN-bias group",
            64.0,
            1.0,
            1024.0,
        )],
        requires: &[TrickId::FrozenBnScale],
        conflicts: &[],
        apply: |p, a| {
            p.optim.bn_bias_mult = a.num("mult")?;
            Ok(())
        },
    },
    BnStats => TrickSpec {
        key: "bn_stats",
        ids: &["T17"],
        name: "BN statistics momentum and eps",
        category: Normalisation,
        help: "Faster running-statistics updates and a tiny eps, which matters for eval after short runs.",
        source: "airbench, hlb (momentum 0.4 in PyTorch's convention, eps 1e-12)",
        off: "momentum 0.1, eps 1e-5",
        on: "momentum 0.4, eps 1e-12",
        params: &[
            f(
                "momentum",
                "PyTorch-convention running-stat momentum",
                0.4,
                0.0,
                1.0,
            ),
            f("eps", "BN epsilon", 1e-12, 0.0, 1.0),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.net.bn.momentum = a.num("momentum")?;
            p.net.bn.eps = a.num("eps")?;
            Ok(())
        },
    },
    Whitening => TrickSpec {
        key: "whitening",
        ids: &["T18", "B7"],
        name: "Input patch whitening",
        category: Architecture,
        help: "Replace the first conv by a frozen PCA-whitening conv computed from a pass over training images (plus, Page style, a learnable 1x1 conv).",
        source: "Page part 8 B7 (36 s @ 14 epochs); airbench94 (2x2, eps 5e-4, 5000 images); airbench94_muon (the same, eigh's ascending order); hlb (2x2, centred, eps 1e-2, all images in chunks of 5000)",
        off: "learnable first conv",
        on: "frozen 3x3 -> 27 channels + 1x1 27 -> 64 (page) or frozen 2x2 -> 12/24 channels (airbench, hlb)",
        params: &[
            c(
                "style",
                "page (3x3, 27 ch), airbench (2x2, 12 ch, uncentred, largest eigenvalue first), muon (airbench94_muon: the same in ascending order) or hlb (2x2, centred covariance of each 5000-image chunk of a random permutation, averaged)",
                "page",
                &["page", "airbench", "muon", "hlb"],
            ),
            f("eps", "added to the eigenvalues", 1e-2, 0.0, 10.0),
            i(
                "images",
                "training images used for the eigenbasis",
                10000,
                10.0,
                1e7,
            ),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            let (eps, images) = (a.num("eps")?, a.int("images")? as usize);
            p.net.whitening = match a.text("style")? {
                "page" if a.settings.arch.conv_groups() => bail!(
                    "whitening.style=page needs a Page net (resnet9/backbone); the airbench net takes whitening.style=airbench"
                ),
                "page" => Whitening::Page { eps, images },
                style => Whitening::Airbench {
                    eps,
                    images,
                    negate: false,
                    bias: false,
                    bias_uniform: false,
                    basis: match style {
                        "hlb" => Basis::HlbChunks { chunk: 5000 },
                        "muon" => Basis::EighAscending,
                        _ => Basis::Eigh,
                    },
                },
            };
            Ok(())
        },
    },
    WhiteningNegate => TrickSpec {
        key: "whitening_negate",
        ids: &["T18b"],
        name: "Whitening negation",
        category: Architecture,
        help: "Use both the eigen-filters and their negations (24 channels), so the following GELU sees both signs.",
        source: "airbench, hlb",
        off: "12 filters",
        on: "24 = [V, -V]",
        params: &[],
        requires: &[TrickId::Whitening],
        conflicts: &[],
        apply: |p, _| match &mut p.net.whitening {
            Whitening::Airbench { negate, .. } => {
                *negate = true;
                Ok(())
            }
            _ => bail!(
                "`whitening_negate` needs whitening.style=airbench or hlb: Page's whitening has no negated filters"
            ),
        },
    },
    SvdWhitening => TrickSpec {
        key: "svd_whitening",
        ids: &["S2"],
        name: "SVD whitening basis from few images",
        category: Architecture,
        help: "Take the whitening basis from an SVD of the patch second moment of the first `images` training images, instead of an eigendecomposition over 5000.",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4): SVD, eps 5e-4, the first 960 training images",
        off: "eigendecomposition, whitening.images (5000 in airbench)",
        on: "SVD of the second moment of the first 960 images",
        params: &[i(
            "images",
            "training images the basis is computed from",
            960,
            10.0,
            1e7,
        )],
        requires: &[TrickId::Whitening],
        conflicts: &[],
        apply: |p, a| match &mut p.net.whitening {
            Whitening::Airbench { basis, images, .. } => {
                *basis = Basis::Svd;
                *images = a.int("images")? as usize;
                Ok(())
            }
            _ => bail!(
                "`svd_whitening` needs whitening.style=airbench or hlb: Page's whitening keeps its eigendecomposition"
            ),
        },
    },
    WhiteningBias => TrickSpec {
        key: "whitening_bias",
        ids: &["T18c"],
        name: "Trained whitening bias",
        category: Architecture,
        help: "A learnable bias on the whitening conv, trained for its first ceil(epochs x steps per epoch) steps, then no gradient reaches it (mid-epoch where that falls mid-epoch, as the references detach it).",
        source: "airbench94 (3 epochs; cuts steps to 94% by 5-10%); airbench94_muon (75 steps); hiverge speedrun (ceil(0.19 x 32) = 7 steps)",
        off: "no bias",
        on: "bias init 0 (muon: PyTorch's uniform), trained for 3 epochs, then frozen",
        params: &[
            e(
                "epochs",
                "epochs during which the bias trains",
                3.0,
                0.0,
                1000.0,
            ),
            c(
                "init",
                "zero (airbench94) or uniform (PyTorch's conv default, airbench94_muon)",
                "zero",
                &["zero", "uniform"],
            ),
            c(
                "schedule",
                "shared: the run's lr schedule (airbench94); own: lr x (1 - s/S) over its S steps, its own optimiser (airbench94_muon, the speedrun)",
                "shared",
                &["shared", "own"],
            ),
        ],
        requires: &[TrickId::Whitening],
        conflicts: &[],
        apply: |p, a| {
            let uniform = a.text("init")? == "uniform";
            match &mut p.net.whitening {
                Whitening::Airbench {
                    bias, bias_uniform, ..
                } => (*bias, *bias_uniform) = (true, uniform),
                _ => bail!(
                    "`whitening_bias` needs whitening.style=airbench or hlb: Page's whitening is followed by a learnable 1x1 conv instead"
                ),
            }
            p.optim.whiten_bias = Some(WhitenBias {
                epochs: a.num("epochs")?,
                own_schedule: a.text("schedule")? == "own",
            });
            Ok(())
        },
    },
    DiracInit => TrickSpec {
        key: "dirac_init",
        ids: &["T19"],
        name: "Dirac (identity) init",
        category: Architecture,
        help: "Start the 3x3 convs near the identity, so a deep plain net starts near a shallow one: airbench sets the first C_in filters of each to the identity; hlb adds the identity to each group's first conv (rescaled to its random init's mean and std) and makes the second a pure identity.",
        source: "airbench (partial identity init); hlb-CIFAR10 v0.7 (mixed and pure)",
        off: "PyTorch default (kaiming-uniform)",
        on: "identity on the first C_in filters (airbench) or hlb's mixed/pure identity",
        params: &[c(
            "style",
            "airbench (partial identity, every 3x3 conv) or hlb (needs the airbench or hlb net)",
            "airbench",
            &["airbench", "hlb"],
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.net.dirac = match a.text("style")? {
                "hlb" if !a.settings.arch.conv_groups() => bail!(
                    "dirac_init.style=hlb initialises the ConvGroups of the airbench/hlb nets: use style=airbench on arch {:?}",
                    a.settings.arch
                ),
                "hlb" => Dirac::Hlb,
                _ => Dirac::Partial,
            };
            Ok(())
        },
    },
    Nesterov => TrickSpec {
        key: "nesterov",
        ids: &["T22"],
        name: "Nesterov momentum",
        category: Optimiser,
        help: "Nesterov momentum in the optimiser (Page's lr-in-buffer form for sgd_page).",
        source: "Page (0.9), airbench and hlb (0.85), Goyal et al. §5.1 (0.9)",
        off: "plain SGD (momentum 0)",
        on: "Nesterov with the recipe's momentum",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Momentum],
        apply: |p, a| {
            p.optim.momentum = a.settings.momentum;
            p.optim.nesterov = true;
            Ok(())
        },
    },
    Momentum => TrickSpec {
        key: "momentum",
        ids: &[],
        name: "Heavy-ball momentum",
        category: Optimiser,
        help: "Plain (heavy-ball) momentum, PyTorch SGD's default: the buffer's step itself, no look-ahead.",
        source: "fast.ai imagenet-fast and FFCV (torch SGD, nesterov=False); Goyal et al. §5.1 find it as effective as their Nesterov",
        off: "plain SGD (momentum 0)",
        on: "heavy-ball momentum with the recipe's momentum",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Nesterov],
        apply: |p, a| {
            p.optim.momentum = a.settings.momentum;
            p.optim.nesterov = false;
            Ok(())
        },
    },
    WeightDecayOn => TrickSpec {
        key: "weight_decay_on",
        ids: &["T23"],
        name: "Weight decay",
        category: Regularisation,
        help: "Coupled L2 weight decay (per-step decay lr*wd) with the recipe's wd.",
        source: "Page 5e-4; airbench 0.0153 per 1024 (decoupled, converted); hlb",
        off: "wd = 0",
        on: "the recipe's weight_decay",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.optim.weight_decay = a.settings.weight_decay;
            Ok(())
        },
    },
    LabelSmoothing => TrickSpec {
        key: "label_smoothing",
        ids: &["T24", "B3"],
        name: "Label smoothing",
        category: Regularisation,
        help: "Mix the one-hot target with the uniform distribution: (1-a)*CE + a*mean_c(-log p_c).",
        source: "Page part 8 B3 (59 s); airbench and hlb use the same 0.2",
        off: "a = 0 (plain cross-entropy)",
        on: "a = 0.2",
        params: &[f("alpha", "smoothing weight", 0.2, 0.0, 1.0)],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.loss.smoothing = a.num("alpha")?;
            Ok(())
        },
    },
    Ema => TrickSpec {
        key: "ema",
        ids: &["T25", "B8"],
        name: "EMA of the weights (Page)",
        category: Averaging,
        help: "Evaluate an exponential moving average of all float state (BN statistics included) kept in a separate copy, with the LR floored for the last epochs.",
        source: "Page part 8 B8 (33.5 s): 0.99 every 5 steps, LR floor 0.1 for the last 2 epochs",
        off: "none",
        on: "eval-only EMA copy + LR floor",
        params: &[
            f("momentum", "per-step EMA momentum", 0.99, 0.0, 1.0),
            i("every", "update every N steps", 5, 1.0, 1000.0),
            f("floor", "LR floor as a fraction of the peak", 0.1, 0.0, 1.0),
            e("floor_epochs", "epochs at the floor", 2.0, 0.0, 1000.0),
        ],
        requires: &[],
        conflicts: &[TrickId::Lookahead, TrickId::PolyLr],
        apply: |p, a| {
            let every = a.int("every")? as u64;
            p.averaging = Averaging::PageEma {
                decay: page_ema_decay(a.num("momentum")?, every as usize),
                every,
            };
            // Page B8: [0, ep/5, ep-2] -> [0, 1, floor], flat at the floor after.
            let (floor, floor_epochs) = (a.num("floor")?, a.num("floor_epochs")?);
            let s = a.settings;
            let (e, peak) = (s.epochs, s.peak_epoch * s.epochs);
            if floor_epochs > 0.0 && floor_epochs >= e {
                // Page's knots [0, E/5, E − floor] would run backwards, and a
                // schedule flattened to the floor trains something else.
                bail!(
                    "ema: its lr floor lasts {floor_epochs} epochs (`ema.floor_epochs`), the whole run of {e}: the schedule would have no shape; lower ema.floor_epochs below the run's epochs, or turn ema off"
                );
            }
            match &mut p.schedule.shape {
                Shape::EpochKnots(k) if s.schedule == ScheduleKind::Page && floor_epochs < e => {
                    let end = (e - floor_epochs).max(peak + 1e-9);
                    *k = Piecewise {
                        knots: vec![(0.0, 0.0), (peak, 1.0), (end, floor), (e, floor)],
                    };
                }
                Shape::EpochKnots(k) => *k = k.clone().with_floor(floor_epochs, floor),
                _ => p.schedule.floor = Some((floor_epochs, floor)),
            }
            Ok(())
        },
    },
    Lookahead => TrickSpec {
        key: "lookahead",
        ids: &["T25"],
        name: "Lookahead (airbench/hlb EMA with copy-back)",
        category: Averaging,
        help: "Every N steps average the live weights into a slow copy with d = 0.95^5*(t/T)^3 and copy it back: changes the trajectory. hlb starts it late from a snapshot of the live net and evaluates the average.",
        source: "airbench94 (every 5 steps, from the initial weights); hlb-CIFAR10 v0.7 (the last 10 full epochs, from epoch floor(12.1) - 10 = 2; eval on the average)",
        off: "none",
        on: "copy-back averaging every 5 steps",
        params: &[
            i("every", "update every N steps", 5, 1.0, 1000.0),
            e(
                "start_epoch",
                "epoch at which the average starts, from a snapshot of the live net at its first due step (0: the initial weights)",
                0.0,
                0.0,
                10000.0,
            ),
            e(
                "last_epochs",
                "instead of start_epoch: average the last N full epochs, from epoch floor(epochs) - N (hlb: 10; a shorter run starts from a snapshot in epoch 0)",
                0.0,
                0.0,
                10000.0,
            ),
            c(
                "eval",
                "live: evaluate the live net (airbench); average: a separate copy holding the average (hlb)",
                "live",
                &["live", "average"],
            ),
        ],
        requires: &[],
        conflicts: &[TrickId::Ema],
        apply: |p, a| {
            let (first, last) = (a.num("start_epoch")?, a.num("last_epochs")?);
            let start = if last > 0.0 {
                AvgStart::Epoch((a.settings.epochs.floor() - last).max(0.0))
            } else if first > 0.0 {
                AvgStart::Epoch(first)
            } else {
                AvgStart::Init
            };
            p.averaging = Averaging::Lookahead {
                every: a.int("every")?.max(1) as u64,
                start,
                eval_average: a.text("eval")? == "average",
            };
            Ok(())
        },
    },
    Muon => TrickSpec {
        key: "muon",
        ids: &["T26"],
        name: "Muon for conv filters",
        category: Optimiser,
        help: "Orthogonalised momentum (Newton-Schulz) for every trainable conv filter, each rescaled to Frobenius norm sqrt(C_out) before its update; SGD-Nesterov for the rest.",
        source: "airbench94_muon (2.59 s): lr 0.24, momentum 0.6, 3 NS iterations in bf16, weight renorm every step",
        off: "SGD-Nesterov on the filters",
        on: "Muon on the filters",
        params: &[
            f("lr", "Muon learning rate (absolute)", 0.24, 0.0, 10.0),
            f("momentum", "Muon momentum", 0.6, 0.0, 1.0),
            i("ns_steps", "Newton-Schulz iterations", 3, 1.0, 20.0),
            f(
                "head_lr_mult",
                "lr multiplier of the head's SGD group",
                1.0,
                0.0,
                1e4,
            ),
            c(
                "ns",
                "whose Newton-Schulz: airbench (3.4445, -4.7750, 2.0315; X / (|X| + 1e-7)) or speedrun (3.4576, -4.7391, 2.0843; X scaled to a magnitude 0.5012 -> 0.0786, then to unit norm, eps 1e-5 each: the magnitude cancels, the update is lr*NS(g))",
                "airbench",
                &["airbench", "speedrun"],
            ),
            c(
                "ns_dtype",
                "bf16 (airbench94_muon) or filters: the gradients' own type, fp16 in an fp16 net (the speedrun)",
                "bf16",
                &["bf16", "filters"],
            ),
            f(
                "weight_decay",
                "decoupled decay after each update, w *= 1 - lr(t)*wd (airbench94_muon: 0; the speedrun: 1.6002e-3)",
                0.0,
                0.0,
                1.0,
            ),
        ],
        requires: &[],
        conflicts: &[TrickId::Lars, TrickId::Lamb, TrickId::Adamw],
        apply: |p, a| {
            p.optim.muon = Some(MuonPlan {
                lr: a.num("lr")?,
                momentum: a.num("momentum")?,
                ns_steps: a.int("ns_steps")?,
                head_lr_mult: a.num("head_lr_mult")?,
                ns: match a.text("ns")? {
                    "speedrun" => NsVariant::Speedrun,
                    _ => NsVariant::Airbench,
                },
                ns_dtype: match a.text("ns_dtype")? {
                    "filters" => NsDtype::Filters,
                    _ => NsDtype::Bf16,
                },
                batched: false,
                half_momentum: false,
                renorm: Renorm::EveryStep,
                weight_decay: a.num("weight_decay")?,
            });
            // The rest of the net takes airbench's PyTorch-form SGD.
            if p.optim.family == Family::SgdPage {
                p.optim.family = Family::SgdTorch;
            }
            p.head_unit_std = a.settings.arch.conv_groups();
            Ok(())
        },
    },
    BatchedMuon => TrickSpec {
        key: "batched_muon",
        ids: &["S3"],
        name: "Batched Muon",
        category: Systems,
        help: "Zero-pad every conv filter's gradient into one (n, max C_out, max C_in*k*k rounded up to 16) tensor and orthogonalise all of them with one batched Newton-Schulz: fewer, larger kernels, the same result (zero padding stays zero).",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :25-86)",
        off: "one Newton-Schulz per filter (airbench94_muon's loop)",
        on: "one batched Newton-Schulz over the padded filters",
        params: &[],
        requires: &[TrickId::Muon],
        conflicts: &[],
        apply: |p, _| {
            muon_of(p, "batched_muon")?.batched = true;
            Ok(())
        },
    },
    MuonNormSchedule => TrickSpec {
        key: "muon_norm_schedule",
        ids: &["S4"],
        name: "Muon renormalisation schedule",
        category: Optimiser,
        help: "Rescale the filters to sqrt(C_out) only at 1-based step t when t - (the last rescaled step) >= base + int(growth * t / T): first at step 2, then at intervals growing from 2 to 17 (37 times in the record's 243 steps).",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :151-152, :193-199): norm_freq = 2 + int(15 * step / total)",
        off: "before every update (airbench94_muon)",
        on: "at intervals growing from 2 to 17 steps",
        params: &[
            i("base", "the interval at the start", 2, 1.0, 1e6),
            f(
                "growth",
                "added to the interval by the end of training",
                15.0,
                0.0,
                1e6,
            ),
        ],
        requires: &[TrickId::Muon],
        conflicts: &[],
        apply: |p, a| {
            let renorm = Renorm::Growing {
                base: a.int("base")? as u64,
                growth: a.num("growth")?,
            };
            muon_of(p, "muon_norm_schedule")?.renorm = renorm;
            Ok(())
        },
    },
    MuonFp16Momentum => TrickSpec {
        key: "muon_fp16_momentum",
        ids: &["S5"],
        name: "Muon momentum in fp16",
        category: Systems,
        help: "Keep Muon's momentum buffers in fp16: half the optimiser-state traffic. A no-op in an fp16 net, whose buffers are fp16 already (the record's case): it acts on fp32 and bf16 nets only.",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :653)",
        off: "buffers in the filters' type",
        on: "fp16 buffers",
        params: &[],
        requires: &[TrickId::Muon],
        conflicts: &[],
        apply: |p, _| {
            muon_of(p, "muon_fp16_momentum")?.half_momentum = true;
            Ok(())
        },
    },
    RandomCrop => TrickSpec {
        key: "random_crop",
        ids: &["T27"],
        name: "Random crop (translate)",
        category: Data,
        help: "Reflect-pad and take a random 32x32 crop.",
        source: "Page (pad 4); airbench, hlb (pad 2)",
        off: "none",
        on: "reflect pad and random crop",
        params: &[i("pad", "padding in pixels", 4, 0.0, 16.0)],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.data.augment.set(AugOp::PadCrop { pad: a.int("pad")? });
            Ok(())
        },
    },
    Flip => TrickSpec {
        key: "flip",
        ids: &["T28"],
        name: "Horizontal flip",
        category: Data,
        help: "Mirror each image with p = 0.5.",
        source: "Page, hlb",
        off: "none",
        on: "random left-right flip",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            // Alternating flip (applied after, as it requires flip) turns
            // its rule.
            if !p.data.augment.flips() {
                p.data.augment.set(AugOp::Flip { alternating: false });
            }
            Ok(())
        },
    },
    AlternatingFlip => TrickSpec {
        key: "alternating_flip",
        ids: &["T28b"],
        name: "Alternating flip",
        category: Data,
        help: "Flip a random half at epoch 0, then alternate every image's orientation each epoch.",
        source: "airbench (cuts steps to 94% by about 10%)",
        off: "random flip",
        on: "derandomised alternating flip",
        params: &[],
        requires: &[TrickId::Flip],
        conflicts: &[],
        apply: |p, _| {
            // It turns the flip's rule; without a flip there is none to turn.
            if p.data.augment.flips() {
                p.data.augment.set(AugOp::Flip { alternating: true });
            }
            Ok(())
        },
    },
    Cutout => TrickSpec {
        key: "cutout",
        ids: &["T29", "P3b"],
        name: "Cutout",
        category: Regularisation,
        help: "Zero a random square (after normalisation, so it takes the mean colour), fully inside the image.",
        source: "Page P3b (8x8), B7 (5x5)",
        off: "none",
        on: "8x8 square",
        params: &[i("size", "square side in pixels", 8, 1.0, 32.0)],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.data.augment.set(AugOp::Cutout { size: a.int("size")? });
            Ok(())
        },
    },
    ColorJitter => TrickSpec {
        key: "color_jitter",
        ids: &["S6"],
        name: "Colour jitter",
        category: Data,
        help: "Once per epoch, every training image x <- (x + b) * c on the normalised pixels, b ~ U(+-brightness) and c ~ U(1 +- contrast) drawn per image: the contrast acts about 0, the data set's mean.",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :252-264, :363-367): brightness 0.1399, contrast 0.1308",
        off: "no colour augmentation",
        on: "x <- (x + b) * c per image, once per epoch",
        params: &[
            f(
                "brightness",
                "largest brightness shift (normalised units)",
                0.1399,
                0.0,
                10.0,
            ),
            f(
                "contrast",
                "largest relative contrast change",
                0.1308,
                0.0,
                1.0,
            ),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.data.augment.set(AugOp::Jitter(ColourJitter {
                brightness: a.num("brightness")?,
                contrast: a.num("contrast")?,
            }));
            Ok(())
        },
    },
    Cutmix => TrickSpec {
        key: "cutmix",
        ids: &["T31"],
        name: "CutMix",
        category: Regularisation,
        help: "Paste a square from another image of the batch, mixing the labels by area, in the last epochs.",
        source: "hlb v0.7.0 (size 3, last 6 of 12.1 epochs)",
        off: "none",
        on: "size-3 CutMix in the last epochs",
        params: &[
            i("size", "square side in pixels", 3, 1.0, 32.0),
            e(
                "last_epochs",
                "apply in the last N epochs",
                6.0,
                0.0,
                1000.0,
            ),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.loss.cutmix = Some(CutMix {
                size: a.int("size")?,
                last_epochs: a.num("last_epochs")?,
            });
            Ok(())
        },
    },
    Tta => TrickSpec {
        key: "tta",
        ids: &["T32", "B9a"],
        name: "Test-time augmentation",
        category: Eval,
        help: "Average the logits over views: level 1 = image + mirror, level 2 = also two 1-px translations (6 passes).",
        source: "Page part 8 B9a (flip); airbench (level 2); hlb (flip)",
        off: "a single view",
        on: "mirror (level 1)",
        params: &[i(
            "level",
            "1: mirror, 2: mirror + translations",
            1,
            1.0,
            2.0,
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.eval.tta_level = a.int("level")? as u8;
            Ok(())
        },
    },
    MedianReadout => TrickSpec {
        key: "median_readout",
        ids: &[],
        name: "Median of the last epochs' accuracies",
        category: Eval,
        help: "Evaluate each of the last `last` epochs and report the median of their accuracies instead of the final one: Goyal et al.'s readout (the median top-1 error of the last 5 epochs), steadier than one evaluation.",
        source: "Goyal et al. 2017 §5.1 (\"the median error of the final 5 epochs\", of 5 runs)",
        off: "the final evaluation's accuracy",
        on: "the median over the last 5 epochs' evaluations",
        params: &[i(
            "last",
            "epochs whose evaluations the median takes (each of them is evaluated)",
            5,
            1.0,
            1000.0,
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.eval.median_of_last = a.int("last")? as usize;
            Ok(())
        },
    },
    SelectiveTta => TrickSpec {
        key: "selective_tta",
        ids: &["S7"],
        name: "Selective TTA",
        category: Eval,
        help: "One plain pass over the test set; for the int(fraction * n) images it is least sure of (lowest top softmax probability), the mean of the views' logits, every view weighted equally (level 2: the image, its two 1-pixel shifts and the three mirrors); the rest keep their plain logits.",
        source: "hiverge cifar10-speedrun (TRICKS.md 2.4, :510-573): the least confident 25%, 6 views averaged equally",
        off: "the TTA views for every test image, weighted as the level says (level 2: 0.5 / 0.25 / 0.25)",
        on: "6 equal views for the least confident 25%",
        params: &[f(
            "fraction",
            "share of the test images that get the TTA views",
            0.25,
            0.0,
            1.0,
        )],
        requires: &[TrickId::Tta],
        conflicts: &[],
        apply: |p, a| {
            p.eval.tta_fraction = Some(a.num("fraction")?);
            Ok(())
        },
    },
    PrepBnRelu => TrickSpec {
        key: "prep_bn_relu",
        ids: &["P1b"],
        name: "BN-ReLU after the prep conv",
        category: Architecture,
        help: "Keep a BN-ReLU after the first conv; Page removed it as redundant in the ResNet-18 (P1b) and reinstated it in the part-4 nets.",
        source: "Page part 1 P1b, part 4 P4b",
        off: "prep = conv only",
        on: "prep = conv -> BN -> act",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.prep_bn_relu = true;
            Ok(())
        },
    },
    ZeroGradNone => TrickSpec {
        key: "zero_grad_none",
        ids: &[],
        name: "Zero grad by setting to none",
        category: Systems,
        help: "Drop the gradients after each step instead of zero-filling them: no fill kernel, the next backward writes them afresh, and a parameter that gets no gradient is skipped by the optimiser (no momentum, no decay) as in PyTorch.",
        source: "PyTorch performance tuning guide; airbench, hlb and the speedrun call zero_grad(set_to_none=True)",
        off: "zero-fill",
        on: "set to none",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.step.zero_grad_none = true;
            Ok(())
        },
    },
    CudaGraphs => TrickSpec {
        key: "cuda_graphs",
        ids: &[],
        name: "CUDA graphs",
        category: Systems,
        help: "Capture the step's forward, loss and backward once as a CUDA graph and replay it every step (one launch instead of hundreds), a graph per phase (an input shape, the whitening bias stopping, a batch change) in one memory pool; the optimisers still run eagerly after each replay. What torch.compile's mode=\"reduce-overhead\" and max-autotune add to fusion. On a CPU the same path runs uncaptured; CutMix (its draws are inside the step) runs eagerly; runs.parquet's `graphs` says on or why not.",
        source: "PyTorch's CUDA graphs (at::cuda::CUDAGraph; the C++ tutorial's whole-step capture); airbench94_muon and hiverge compile with mode=max-autotune, which replays CUDA graphs",
        off: "eager launches",
        on: "the step replayed as a CUDA graph",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.step.cuda_graphs = true;
            Ok(())
        },
    },
    Ddp => TrickSpec {
        key: "ddp",
        ids: &[],
        name: "DDP's buckets and communication hook",
        category: Systems,
        help: "How a data-parallel run's gradients travel through PyTorch's DDP Reducer: buckets of `bucket_mb` after a first of `first_bucket_mb` (DDP's bucket_cap_mb and first bucket), each all-reduced as soon as the backward has filled it, sent through `hook`: DDP's fp16 compression (its built-in C++ hook) or bf16 compression (its Python hook's arithmetic) halve the bytes each all-reduce moves, as the large-batch records' fp16 all-reduce did. Only a run with world_size > 1 has a Reducer.",
        source: "PyTorch DistributedDataParallel (torch/nn/parallel/distributed.py: bucket_cap_mb, _DEFAULT_FIRST_BUCKET_BYTES; ddp_comm_hooks.default_hooks fp16_compress_hook, bf16_compress_hook); Fujitsu's 74.7 s (gradients in groups of a few MB)",
        off: "DDP's defaults: buckets of 25 MiB after a first of 1 MiB, gradients all-reduced in their own type",
        on: "buckets of `bucket_mb` MiB after a first of `first_bucket_mb`, through `hook`",
        params: &[
            f("bucket_mb", "MiB a bucket holds (DDP's bucket_cap_mb)", 25.0, 0.001, 4096.0),
            f("first_bucket_mb", "MiB the first bucket holds (the last layers' gradients, ready first)", 1.0, 0.001, 4096.0),
            c("hook", "how a bucket travels: summed in its own type, or compressed to fp16 or bf16 and back", "fp16", &["allreduce", "fp16", "bf16"]),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            const MIB: f64 = (1u64 << 20) as f64;
            p.step.ddp = DdpOptions {
                first_bucket_bytes: (a.num("first_bucket_mb")? * MIB).round() as usize,
                bucket_bytes: (a.num("bucket_mb")? * MIB).round() as usize,
                hook: match a.text("hook")? {
                    "fp16" => CommHook::Fp16,
                    "bf16" => CommHook::Bf16,
                    _ => CommHook::AllReduce,
                },
                ..DdpOptions::default()
            };
            Ok(())
        },
    },
    NoBiasBeforeBn => TrickSpec {
        key: "no_bias_before_bn",
        ids: &[],
        name: "No bias before BN",
        category: Systems,
        help: "Build the convs that feed a BatchNorm without a bias: BN subtracts the batch mean, which cancels it, so it only costs memory traffic and optimiser work. Off adds one to every trainable conv (PyTorch's nn.Conv2d default).",
        source: "PyTorch performance tuning guide; Page's, airbench's and hlb's nets have none",
        off: "bias on every conv",
        on: "no bias on convs before BN",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.net.conv_bias = false;
            Ok(())
        },
    },
    NoWdBnBias => TrickSpec {
        key: "no_wd_bn_bias",
        ids: &[],
        name: "No weight decay on BN and biases",
        category: Regularisation,
        help: "Exclude BN weights and biases, the whitening bias and the biases of convolutions from weight decay; the head's weight and bias keep it (as fast.ai's --no-bn-wd and FFCV's rule do).",
        source: "Goyal et al. large-minibatch SGD; Jia et al. (ImageNet in 4 minutes)",
        off: "wd on every parameter",
        on: "wd 0 on BN weights and biases and conv biases",
        params: &[],
        requires: &[],
        conflicts: &[],
        apply: |p, _| {
            p.optim.no_wd_bn_bias = true;
            Ok(())
        },
    },
    GradClip => TrickSpec {
        key: "grad_clip",
        ids: &[],
        name: "Gradient clipping",
        category: Optimiser,
        help: "Rescale the gradient to a maximum global norm (computed on the device, no host sync).",
        source: "common large-batch practice",
        off: "none",
        on: "clip the global norm",
        params: &[f(
            "max_norm",
            "maximum global gradient norm",
            1.0,
            1e-6,
            1e6,
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.step.clip_norm = Some(a.num("max_norm")?);
            Ok(())
        },
    },
    GradAccum => TrickSpec {
        key: "grad_accum",
        ids: &[],
        name: "Gradient accumulation",
        category: Optimiser,
        help: "Split each batch into micro-batches and accumulate their gradients before one step (same batch, less memory).",
        source: "common practice",
        off: "one pass per batch",
        on: "k micro-batches per step",
        params: &[i(
            "steps",
            "micro-batches per step; the batch must divide by it",
            2,
            1.0,
            1024.0,
        )],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.step.accum = a.int("steps")?;
            Ok(())
        },
    },
    Warmup => TrickSpec {
        key: "warmup",
        ids: &[],
        name: "Linear LR warm-up",
        category: Schedule,
        help: "Multiply the schedule by a ramp from 0 to 1 over the first epochs.",
        source: "Goyal et al. (gradual warm-up)",
        off: "none",
        on: "linear ramp over the first epochs",
        params: &[
            e("epochs", "warm-up length in epochs", 1.0, 0.0, 1000.0),
            f(
                "start",
                "the multiplier at the first step (Goyal: 1/k, the small-batch lr)",
                0.0,
                0.0,
                1.0,
            ),
        ],
        requires: &[],
        conflicts: &[TrickId::FastaiPhases, TrickId::PolyLr],
        apply: |p, a| {
            p.schedule.warmup_epochs = Some(a.num("epochs")?);
            p.schedule.warmup_start = a.num("start")?;
            Ok(())
        },
    },
    LrSteps => TrickSpec {
        key: "lr_steps",
        ids: &[],
        name: "Step decay of the learning rate",
        category: Schedule,
        help: "Multiply the lr by `factor` at each of up to three epochs (0 leaves one out), at epoch boundaries: the ImageNet schedule of He et al. and Goyal et al. (÷10 at 30, 60, 80 of 90).",
        source: "Goyal et al. 2017 §5.1 (÷10 at epochs 30, 60, 80); torchvision's ImageNet reference (MultiStepLR)",
        off: "the recipe's schedule shape",
        on: "constant, × factor at each listed epoch",
        params: &[
            f("factor", "multiplier at each step", 0.1, 0.0, 1.0),
            e("at1", "epoch of the first step (0: none)", 30.0, 0.0, 10000.0),
            e("at2", "epoch of the second step (0: none)", 60.0, 0.0, 10000.0),
            e("at3", "epoch of the third step (0: none)", 80.0, 0.0, 10000.0),
        ],
        requires: &[],
        conflicts: &[TrickId::FastaiPhases, TrickId::PolyLr],
        apply: |p, a| {
            p.schedule.shape = Shape::Steps {
                at: vec![a.num("at1")?, a.num("at2")?, a.num("at3")?],
                factor: a.num("factor")?,
            };
            Ok(())
        },
    },
    PolyLr => TrickSpec {
        key: "poly_lr",
        ids: &[],
        name: "Polynomial decay after a linear warm-up",
        category: Schedule,
        help: "A linear warm-up from 0 over `warmup` epochs, then the lr × ((1 − end)(1 − p)^power + end) as p goes 0 → 1 over `decay` epochs, held at `end` after: Fujitsu's schedule for ResNet-50 at batch 86k (TensorFlow's polynomial_decay after the warm-up).",
        source: "Fujitsu's MLPerf v0.6 ResNet-50 on ABCI (mlcommons/training_results_v0.6 Fujitsu/benchmarks/resnet: JobScripts/parameters, common/fit.py, mxnet/explorer/explorer.py `decay_power`)",
        off: "the recipe's schedule shape",
        on: "0 → peak over 36 epochs, then (peak)(1 − p)^2.2 down to 0.0025 of it over 52",
        params: &[
            e("warmup", "epochs of the linear warm-up from 0", 36.0, 0.0, 10000.0),
            e("decay", "epochs of the polynomial decay after it", 52.0, 0.001, 10000.0),
            f("power", "the decay's power", 2.2, 0.0, 100.0),
            f("end", "the lr at the end of the decay, as a share of the peak", 0.0025, 0.0, 1.0),
        ],
        requires: &[],
        // Page's EMA floor is written into the shape this one replaces.
        conflicts: &[
            TrickId::FastaiPhases,
            TrickId::LrSteps,
            TrickId::Warmup,
            TrickId::Ema,
        ],
        apply: |p, a| {
            p.schedule.shape = Shape::Poly {
                warmup: a.num("warmup")?,
                decay: a.num("decay")?,
                power: a.num("power")?,
                end: a.num("end")?,
            };
            Ok(())
        },
    },
    Lars => TrickSpec {
        key: "lars",
        ids: &[],
        name: "LARS",
        category: Optimiser,
        help: "Layer-wise adaptive rate scaling on top of momentum SGD.",
        source: "You et al. (large-batch training)",
        off: "the recipe's optimiser",
        on: "LARS",
        params: &[f("trust", "trust coefficient", 0.001, 1e-6, 1.0)],
        requires: &[],
        conflicts: &[TrickId::Lamb, TrickId::Adamw, TrickId::Muon],
        apply: |p, a| {
            p.optim.family = Family::Lars {
                trust: a.num("trust")?,
            };
            Ok(())
        },
    },
    Lamb => TrickSpec {
        key: "lamb",
        ids: &[],
        name: "LAMB",
        category: Optimiser,
        help: "Layer-wise adaptive Adam.",
        source: "You et al. (LAMB)",
        off: "the recipe's optimiser",
        on: "LAMB",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Lars, TrickId::Adamw, TrickId::Muon],
        apply: |p, _| {
            p.optim.family = Family::Lamb;
            Ok(())
        },
    },
    Adamw => TrickSpec {
        key: "adamw",
        ids: &[],
        name: "AdamW",
        category: Optimiser,
        help: "Adam with decoupled weight decay.",
        source: "Loshchilov and Hutter",
        off: "the recipe's optimiser",
        on: "AdamW",
        params: &[],
        requires: &[],
        conflicts: &[TrickId::Lars, TrickId::Lamb, TrickId::Muon],
        apply: |p, _| {
            p.optim.family = Family::AdamW;
            Ok(())
        },
    },
    ProgressiveResize => TrickSpec {
        key: "progressive_resize",
        ids: &[],
        name: "Progressive resizing",
        category: Data,
        help: "Train on downscaled images first and at full size for the rest.",
        source: "fast.ai DAWNBench ImageNet entry",
        off: "full size throughout",
        on: "start small, full size after a fraction of the epochs",
        params: &[
            i("start_size", "side of the first images", 24, 8.0, 32.0),
            f(
                "until",
                "fraction of the epochs at the small size",
                0.5,
                0.0,
                1.0,
            ),
        ],
        requires: &[],
        conflicts: &[],
        apply: |p, a| {
            p.data.progressive = Some(Progressive {
                size: a.int("start_size")?,
                until: a.num("until")?,
                eval_full_size: false,
            });
            Ok(())
        },
    },
    FullSizeVal => TrickSpec {
        key: "full_size_val",
        ids: &[],
        name: "Full-size validation",
        category: Eval,
        help: "While progressive resizing trains on small images, evaluate the full image instead of the small size.",
        source: "fast.ai DAWNBench ImageNet entry (rectangular/full-size validation)",
        off: "evaluate at the small size while training small",
        on: "always evaluate the full 32x32 image",
        params: &[],
        requires: &[TrickId::ProgressiveResize],
        conflicts: &[],
        apply: |p, _| {
            if let Some(pr) = p.data.progressive.as_mut() {
                pr.eval_full_size = true;
            }
            Ok(())
        },
    },
    Stream => TrickSpec {
        key: "stream",
        ids: &[],
        name: "Streaming loader with random-resized crops",
        category: Data,
        help: "Decode every image every epoch on a pool of threads: torchvision's RandomResizedCrop (and flip) for training, a centre crop for validation, ImageNet's normalisation on the device. What ImageNet-sized data needs instead of the in-memory cache.",
        source: "torchvision's ImageNet reference; FFCV (ffcv-imagenet train_imagenet.py); fast.ai imagenet-fast",
        off: "the in-memory cache: the whole set decoded once at its own size",
        on: "decode, random-resized crop to `size` px and flip every epoch; validation: centre crop of `eval_ratio` of the short side at `eval_size` px",
        params: &[
            i("size", "side of the training crops (res_ramp changes it by epoch)", 224, 8.0, 1024.0),
            f("min_scale", "smallest share of the image's area a crop takes", 0.08, 0.001, 1.0),
            f("max_scale", "largest share of the image's area a crop takes", 1.0, 0.001, 1.0),
            f("min_ratio", "narrowest aspect ratio (width/height) of a crop", 0.75, 0.01, 100.0),
            f("max_ratio", "widest aspect ratio (width/height) of a crop", 4.0 / 3.0, 0.01, 100.0),
            i("eval_size", "side of the validation images", 224, 8.0, 1024.0),
            f("eval_ratio", "the validation crop's share of the short side (224/256 = 0.875)", 0.875, 0.1, 1.0),
            i("workers", "decoding threads (0: every core)", 0, 0.0, 1024.0),
            i("prefetch", "finished batches waiting at most", 4, 1.0, 1024.0),
            c("on_bad_image", "an unreadable image stops the run (fail) or is left out, named (skip)", "fail", &["fail", "skip"]),
            e("plain_last", "the last N epochs train on the validation's centre crop at the training side, unflipped (Fujitsu's no_augument_epoch)", 0.0, 0.0, 10000.0),
            c("crop_on", "where the crop, resize and flip run: the loader's threads (host), or the run's device after each image is decoded whole (device: one batched resample, the same boxes and pixels to within a rounding)", "host", &["host", "device"]),
        ],
        requires: &[],
        conflicts: &[
            TrickId::GpuData,
            TrickId::PreprocessOnce,
            TrickId::RandomCrop,
            TrickId::AlternatingFlip,
            TrickId::Cutout,
            TrickId::ColorJitter,
            TrickId::Whitening,
            TrickId::ProgressiveResize,
            TrickId::SelectiveTta,
        ],
        apply: |p, a| {
            let (lo, hi) = (a.num("min_scale")?, a.num("max_scale")?);
            if lo > hi {
                bail!("stream: min_scale {lo} is above max_scale {hi}: swap them");
            }
            let ratio = (a.num("min_ratio")?, a.num("max_ratio")?);
            if ratio.0 > ratio.1 {
                bail!(
                    "stream: min_ratio {} is above max_ratio {}: swap them",
                    ratio.0,
                    ratio.1
                );
            }
            p.data.augment.set(AugOp::ResizedCrop {
                scale: (lo, hi),
                ratio,
            });
            p.data.stream = Some(StreamPlan {
                res: Resolution::Fixed(a.int("size")? as usize),
                eval_size: a.int("eval_size")? as usize,
                eval_ratio: a.num("eval_ratio")?,
                workers: a.int("workers")? as usize,
                prefetch: a.int("prefetch")? as usize,
                skip_bad: a.text("on_bad_image")? == "skip",
                phases: Vec::new(),
                plain_last: a.num("plain_last")?.round() as usize,
                crop_on_device: a.text("crop_on")? == "device",
            });
            Ok(())
        },
    },
    FastaiPhases => TrickSpec {
        key: "fastai_phases",
        ids: &[],
        name: "fast.ai's phases (progressive resizing with the batch and lr by phase)",
        category: Data,
        help: "fast.ai's DAWNBench ImageNet schedule: 128 px crops with a warm-up from lr to 2·lr, then 224 px, then 288 px with crops of at least half the image and rectangular validation, the batch and the lr changing by phase as the image side does; the run lasts the schedule's epochs. Set `lr` to the schedule's: 1.0 (1 machine), 2.0 (4), 1.88 (8 and 16).",
        source: "fast.ai + DIU, ImageNet in 18 minutes (cybertronai/imagenet18 train.py at 25dad42; its train_imagenet_nv.py Scheduler and DataManager)",
        off: "one side, one batch, the recipe's schedule",
        on: "the phases of `machines` machines of 8 GPUs (16: 50 epochs, global batch 8192 -> 16384 -> 8192 -> 24576 -> 16384)",
        params: &[
            c(
                "machines",
                "which of train.py's schedules (each machine 8 GPUs)",
                "16",
                super::fastai::MACHINES,
            ),
            f("side_scale", "every image side × this (a rehearsal's small images)", 1.0, 0.01, 1.0),
            f("batch_scale", "every global batch × this (a rehearsal's small batches)", 1.0, 0.0001, 1.0),
            f("epoch_scale", "every phase's epoch and the length × this (a rehearsal)", 1.0, 0.01, 1.0),
            i(
                "fixed_side",
                "0: the phases' sides; else every phase trains and validates at this side × side_scale (no progressive resizing)",
                0,
                0.0,
                1024.0,
            ),
            c(
                "rect_val",
                "the last phase's rectangular validation (off: its centre crop)",
                "on",
                &["on", "off"],
            ),
        ],
        requires: &[TrickId::Stream],
        conflicts: &[TrickId::ResRamp, TrickId::Warmup, TrickId::LrSteps, TrickId::PolyLr],
        apply: |p, a| {
            let machines: usize = a.text("machines")?.parse()?;
            let k = super::fastai::Scale {
                side: a.num("side_scale")?,
                batch: a.num("batch_scale")?,
                epochs: a.num("epoch_scale")?,
            };
            let ph = super::fastai::phases(machines, k).ok_or_else(|| {
                anyhow::anyhow!("fastai_phases: no schedule for {machines} machines")
            })?;
            let s = p
                .data
                .stream
                .as_mut()
                .ok_or_else(|| anyhow::anyhow!("`fastai_phases` needs `stream` on"))?;
            s.phases = ph.stream;
            let fixed = (a.int("fixed_side")? as f64 * k.side).round() as usize;
            let rect = a.text("rect_val")? == "on";
            for phase in &mut s.phases {
                if fixed > 0 {
                    phase.size = fixed;
                    phase.eval_size = fixed;
                    phase.eval_ratio = fixed as f64 / (fixed as f64 * 1.14).floor();
                }
                phase.rect_val &= rect;
            }
            // The phases decide the batch and the length: the first phase's
            // batch is the run's, which the summed loss is scaled by.
            p.batch_size = ph.batches[0].1;
            p.loss.scale = p.batch_size as f64;
            p.batch_phases = ph.batches;
            p.epochs = ph.epochs;
            p.schedule.shape = Shape::Phases(ph.lr_phases);
            Ok(())
        },
    },
    ResRamp => TrickSpec {
        key: "res_ramp",
        ids: &[],
        name: "Progressive resizing (FFCV's ramp)",
        category: Data,
        help: "Train small first: min_res up to epoch start_ramp, max_res from end_ramp, linearly between (rounded to a multiple of 32), as FFCV's get_resolution does.",
        source: "FFCV ImageNet (rn18/rn50 configs: 160 -> 192 px, ramp over epochs 11-13 of 16)",
        off: "the stream's one size throughout",
        on: "min_res until start_ramp, max_res from end_ramp",
        params: &[
            i("min_res", "side of the first epochs", 160, 8.0, 1024.0),
            i("max_res", "side of the last epochs", 192, 8.0, 1024.0),
            e("start_ramp", "last epoch at min_res (0-based, as FFCV counts)", 11.0, 0.0, 10000.0),
            e("end_ramp", "first epoch at max_res", 13.0, 0.0, 10000.0),
        ],
        requires: &[TrickId::Stream],
        conflicts: &[TrickId::FastaiPhases],
        apply: |p, a| {
            let (min, max) = (a.int("min_res")? as usize, a.int("max_res")? as usize);
            let (start, end) = (a.num("start_ramp")?, a.num("end_ramp")?);
            if min > max || start > end {
                bail!("res_ramp: min_res {min} > max_res {max} or start_ramp {start} > end_ramp {end}: FFCV ramps up");
            }
            let s = p
                .data
                .stream
                .as_mut()
                .ok_or_else(|| anyhow::anyhow!("`res_ramp` needs `stream` on"))?;
            s.res = Resolution::Ramp { min, max, start, end };
            Ok(())
        },
    },
}

/// Optimiser tricks replace the recipe's optimiser; at most one may be on.
pub fn optimiser_tricks() -> &'static [TrickId] {
    OPTIMISERS
}
