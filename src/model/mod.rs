//! Network layers and architectures.
//!
//! One configurable [`Net`] covers Page's ResNet-18 variant, the plain
//! backbone, ResNet-9 and airbench's net; every trick that changes the
//! network (activation, ghost/frozen BN, pool placement, whitening, dirac
//! init, logit scale) is a field of [`NetConfig`].

mod airbench;
mod backbone;
mod bn;
mod layers;
mod resnet;
pub(crate) mod torchvision;
mod whitening;

#[cfg(test)]
pub(crate) mod tests;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor, nn};

use airbench::ConvGroup;
use backbone::PathOp;
use bn::GhostBn;
use layers::{Conv, Linear, global_max};
use resnet::{PageLayer, PreActBlock};
use torchvision::{TvBlock, TvStem};
use whitening::Whiten;
pub use whitening::whitening_filters;

pub use crate::config::Arch;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    /// CELU(x; α) = α·celu(x/α).
    Celu {
        alpha: f64,
    },
    /// Exact (erf) GELU.
    Gelu,
    /// SiLU x·σ(x) (hiverge's speedrun).
    Silu,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BnConfig {
    /// 1 = plain BN.
    pub ghost_splits: i64,
    /// `ghost_bn.size`: the images each BatchNorm batch holds on a rank,
    /// whatever the world size and accumulation; planning turns it into
    /// `ghost_splits` of the rank's micro-batch (`RunPlan::resolve_bn_size`).
    #[serde(default)]
    pub ghost_size: Option<i64>,
    pub frozen_scale: bool,
    /// PyTorch convention: running = (1 − m)·running + m·batch.
    pub momentum: f64,
    pub eps: f64,
    /// false = U[0,1] (PyTorch ≤0.4 default, Page parts 1–3).
    pub weight_init_one: bool,
    /// Batch statistics over every rank's share of the global batch
    /// (SyncBN) rather than each rank's own (ghost BN of world_size splits).
    #[serde(default)]
    pub sync: bool,
}

impl Default for BnConfig {
    fn default() -> Self {
        BnConfig {
            ghost_splits: 1,
            ghost_size: None,
            frozen_scale: false,
            momentum: 0.1,
            eps: 1e-5,
            weight_init_one: true,
            sync: false,
        }
    }
}

impl BnConfig {
    /// Ghost BN needs every training batch to split evenly.
    pub fn check_batch(&self, batch: i64) -> Result<()> {
        if self.ghost_splits < 1 {
            anyhow::bail!("ghost BN splits must be ≥ 1, got {}", self.ghost_splits);
        }
        if batch % self.ghost_splits != 0 {
            anyhow::bail!(
                "batch size {batch} is not divisible by the {} ghost BN splits; pick a batch that is a multiple of it",
                self.ghost_splits
            );
        }
        Ok(())
    }
}

/// Identity ("dirac") initialisation of the 3×3 convs (T19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dirac {
    Off,
    /// airbench: identity on the first min(C_in, C_out) filters of every
    /// trainable 3×3 conv, the others keep their random init.
    Partial,
    /// hlb-CIFAR10: each group's first conv = random init + identity, rescaled
    /// to the random init's mean and std; its second conv a pure identity.
    Hlb,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Whitening {
    Off,
    /// Frozen 3×3 conv → 27 ch (pad 1), uncentred covariance ÷(n−1), then a
    /// learnable 1×1 conv to the first width + BN + act.
    Page {
        eps: f64,
        images: usize,
    },
    /// Frozen 2×2 conv → 12 (or 24 = ±V) ch, pad 0, optional learnable bias
    /// initialised to 0 (or PyTorch's conv default); `basis` says whose
    /// eigenbasis.
    Airbench {
        eps: f64,
        images: usize,
        negate: bool,
        bias: bool,
        /// The bias starts from PyTorch's conv default U(±1/√fan_in), not 0.
        bias_uniform: bool,
        basis: Basis,
    },
}

/// How the 2×2 whitening basis is computed, each as its reference does it
/// (float32, the same operations in the same order, so libtorch's LAPACK
/// gives the reference's eigenvectors, signs included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Basis {
    /// airbench94: eigh ('U') of the uncentred second moment ÷ n, largest
    /// eigenvalue first.
    Eigh,
    /// airbench94_muon: the same, in eigh's own ascending order (its
    /// `init_whiten` does not flip).
    EighAscending,
    /// hiverge's speedrun: SVD of the same second moment, largest first.
    Svd,
    /// hlb-CIFAR10: `torch.cov` (centred, ÷(n−1)) of each chunk of this many
    /// images, eigenvalues and eigenvectors averaged over the chunks (the
    /// average depends on each chunk's arbitrary signs, as hlb's does).
    HlbChunks { chunk: usize },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetConfig {
    pub arch: Arch,
    /// Output channels per stage, already scaled. Backbone/ResNet-9: prep then
    /// one per layer; ResNet-18: one per layer (the prep uses the first);
    /// airbench: one per ConvGroup.
    pub widths: Vec<i64>,
    pub act: Activation,
    /// The stem's own activation, where it differs from the body's (hiverge
    /// keeps GELU after the whitening conv and uses SiLU in the ConvGroups).
    #[serde(default)]
    pub stem_act: Option<Activation>,
    pub bn: BnConfig,
    pub pool_before_act: bool,
    pub pool_before_bn: bool,
    /// Backbone/ResNet-9 only: residual branches on layers 1 and 3.
    pub residual: bool,
    pub logit_scale: f64,
    pub whitening: Whitening,
    pub dirac: Dirac,
    /// BN + act after the prep conv (when there is no whitening).
    pub prep_bn_relu: bool,
    /// A bias on every trainable conv (PyTorch's `nn.Conv2d` default). Every
    /// such conv here feeds a BatchNorm, whose mean subtraction cancels it.
    #[serde(default)]
    pub conv_bias: bool,
    pub num_classes: i64,
    /// torchvision ResNets: each residual block's last BN scale starts at 0.
    #[serde(default)]
    pub zero_init_residual: bool,
    /// torchvision ResNets: a [1 2 1]x[1 2 1]/16 blur before every strided
    /// conv of 16 or more input channels (FFCV's BlurPoolConv2d).
    #[serde(default)]
    pub blurpool: bool,
    /// The head's weights drawn from N(0, std²) (Goyal et al. §5.1, fast.ai's
    /// imagenet18) instead of the layer's default init; its bias keeps its own.
    #[serde(default)]
    pub head_init_std: Option<f64>,
}

impl NetConfig {
    /// The canonical configuration each architecture was published with.
    #[allow(clippy::too_many_lines, reason = "one arm per architecture")]
    pub fn default_for(arch: Arch) -> NetConfig {
        let page = NetConfig {
            arch,
            widths: vec![64, 128, 256, 512],
            act: Activation::Relu,
            stem_act: None,
            bn: BnConfig::default(),
            pool_before_act: false,
            pool_before_bn: false,
            residual: false,
            logit_scale: 0.125,
            whitening: Whitening::Off,
            dirac: Dirac::Off,
            prep_bn_relu: true,
            conv_bias: false,
            num_classes: 10,
            zero_init_residual: false,
            blurpool: false,
            head_init_std: None,
        };
        match arch {
            Arch::PageResnet18 => NetConfig {
                widths: vec![64, 128, 256, 256],
                bn: BnConfig {
                    weight_init_one: false,
                    ..BnConfig::default()
                },
                logit_scale: 1.0,
                prep_bn_relu: false,
                ..page
            },
            // Part 4 before P4f: the ResNet-18's widths, init and unscaled logits.
            Arch::P4aPath | Arch::P4bConv1x1 | Arch::P4cConv3x3 | Arch::P4dMaxpool => NetConfig {
                widths: vec![64, 128, 256, 256],
                bn: BnConfig {
                    weight_init_one: false,
                    ..BnConfig::default()
                },
                logit_scale: 1.0,
                prep_bn_relu: arch != Arch::P4aPath,
                ..page
            },
            Arch::P4eMaxHead => NetConfig {
                bn: BnConfig {
                    weight_init_one: false,
                    ..BnConfig::default()
                },
                logit_scale: 1.0,
                ..page
            },
            Arch::Backbone => page,
            Arch::Resnet9 => NetConfig {
                residual: true,
                ..page
            },
            Arch::Hlb => NetConfig {
                widths: vec![64, 256, 512],
                dirac: Dirac::Hlb,
                ..NetConfig::default_for(Arch::Airbench)
            },
            Arch::TvResnet18 | Arch::TvResnet50 => NetConfig {
                widths: vec![64, 128, 256, 512],
                act: Activation::Relu,
                logit_scale: 1.0,
                ..page
            },
            Arch::Airbench => NetConfig {
                widths: vec![64, 256, 256],
                act: Activation::Gelu,
                bn: BnConfig {
                    frozen_scale: true,
                    momentum: 0.4,
                    eps: 1e-12,
                    ..BnConfig::default()
                },
                pool_before_bn: true,
                logit_scale: 1.0 / 9.0,
                whitening: Whitening::Airbench {
                    eps: 5e-4,
                    images: 5000,
                    negate: true,
                    bias: true,
                    bias_uniform: false,
                    basis: Basis::Eigh,
                },
                dirac: Dirac::Partial,
                prep_bn_relu: false,
                ..page
            },
        }
    }

    /// Widths × `width_mult`, rounded, at least 1 channel (whitening channels
    /// are fixed by the patch size and not scaled).
    pub fn scaled(mut self, width_mult: f64) -> NetConfig {
        for w in &mut self.widths {
            *w = ((*w as f64) * width_mult).round().max(1.0) as i64;
        }
        self
    }

    fn validate(&self) -> Result<()> {
        let min = match self.arch {
            Arch::PageResnet18 | Arch::Airbench | Arch::Hlb => 1,
            Arch::TvResnet18 | Arch::TvResnet50 => 4,
            _ => 2,
        };
        if self.blurpool && !self.arch.torchvision() {
            anyhow::bail!(
                "blurpool blurs before strided convs: only the torchvision ResNets have them, not {}",
                self.arch.name()
            );
        }
        if self.arch.torchvision() {
            if self.widths.len() != 4 {
                anyhow::bail!(
                    "{} has 4 stages: give 4 widths, got {:?}",
                    self.arch.name(),
                    self.widths
                );
            }
            if self.whitening != Whitening::Off {
                anyhow::bail!(
                    "{} has its own 7x7 stem: turn whitening off",
                    self.arch.name()
                );
            }
            if self.zero_init_residual && self.bn.frozen_scale {
                anyhow::bail!(
                    "zero_init_residual starts BN scales at 0, which a frozen BN scale keeps at 1: turn one off"
                );
            }
        } else if self.zero_init_residual {
            anyhow::bail!(
                "zero_init_residual needs a torchvision ResNet (arch torchvision-resnet18 or -50), not {}",
                self.arch.name()
            );
        }
        if self.widths.len() < min || self.widths.iter().any(|&w| w < 1) {
            anyhow::bail!(
                "{:?} needs at least {min} positive widths, got {:?}",
                self.arch,
                self.widths
            );
        }
        if self.num_classes < 1 {
            anyhow::bail!("num_classes must be ≥ 1, got {}", self.num_classes);
        }
        if self.bn.ghost_splits < 1 {
            anyhow::bail!("ghost BN splits must be ≥ 1, got {}", self.bn.ghost_splits);
        }
        if let Activation::Celu { alpha } = self.act
            && alpha <= 0.0
        {
            anyhow::bail!("CELU alpha must be > 0, got {alpha}");
        }
        Ok(())
    }
}

/// Trainable tensors by optimiser role. Every trainable tensor is in exactly
/// one of `weights`, `bn_weights`, `bn_biases`, `whiten_bias`, `conv_biases`; `conv_filters`
/// and `head` are subsets of `weights` (shallow clones of the same tensors).
pub struct ParamGroups {
    /// Conv and linear weights (and the ResNet-18 head's linear bias).
    pub weights: Vec<Tensor>,
    /// Trainable 4-D conv weights (Muon's share).
    pub conv_filters: Vec<Tensor>,
    /// The classifier's linear parameters.
    pub head: Vec<Tensor>,
    /// Empty when the BN scale is frozen.
    pub bn_weights: Vec<Tensor>,
    pub bn_biases: Vec<Tensor>,
    /// airbench's whitening bias (or the bias of its learnable stand-in conv).
    pub whiten_bias: Vec<Tensor>,
    /// Biases of convs that feed a BN (empty unless `NetConfig::conv_bias`).
    pub conv_biases: Vec<Tensor>,
}

fn shallow(ts: &[Tensor]) -> Vec<Tensor> {
    ts.iter().map(Tensor::shallow_clone).collect()
}

impl ParamGroups {
    fn empty() -> ParamGroups {
        ParamGroups {
            weights: vec![],
            conv_filters: vec![],
            head: vec![],
            bn_weights: vec![],
            bn_biases: vec![],
            whiten_bias: vec![],
            conv_biases: vec![],
        }
    }

    fn shallow_clone(&self) -> ParamGroups {
        ParamGroups {
            weights: shallow(&self.weights),
            conv_filters: shallow(&self.conv_filters),
            head: shallow(&self.head),
            bn_weights: shallow(&self.bn_weights),
            bn_biases: shallow(&self.bn_biases),
            whiten_bias: shallow(&self.whiten_bias),
            conv_biases: shallow(&self.conv_biases),
        }
    }

    /// `weights` minus `conv_filters` (the head, and the ResNet-18 head bias):
    /// what stays on SGD when Muon takes the filters.
    pub fn non_filter_weights(&self) -> Vec<Tensor> {
        let filters: Vec<usize> = self
            .conv_filters
            .iter()
            .map(|t| t.data_ptr() as usize)
            .collect();
        self.weights
            .iter()
            .filter(|t| !filters.contains(&(t.data_ptr() as usize)))
            .map(Tensor::shallow_clone)
            .collect()
    }

    /// The partition: every trainable tensor once.
    pub fn all_trainable(&self) -> Vec<Tensor> {
        let mut all = shallow(&self.weights);
        all.extend(shallow(&self.bn_weights));
        all.extend(shallow(&self.bn_biases));
        all.extend(shallow(&self.whiten_bias));
        all.extend(shallow(&self.conv_biases));
        all
    }
}

/// Collects tensors into their roles while the layers are built.
pub(crate) struct Registry {
    groups: ParamGroups,
    bns: Vec<(Tensor, Tensor)>,
    /// Non-BN float tensors: what `Net::cast_weights` converts.
    castable: Vec<Tensor>,
    /// Every BN tensor (weight, bias, running statistics): what `Net::cast_bn` converts.
    bn_state: Vec<Tensor>,
    bn_cfg: BnConfig,
    dirac: Dirac,
    conv_bias: bool,
}

impl Registry {
    fn conv(&mut self, p: &nn::Path, cin: i64, cout: i64, k: i64, stride: i64, pad: i64) -> Conv {
        let conv = Conv::new(p, cin, cout, k, stride, pad, self.conv_bias, true);
        if self.dirac == Dirac::Partial && k == 3 {
            conv.dirac_init();
        }
        self.groups.weights.push(conv.weight.shallow_clone());
        self.groups.conv_filters.push(conv.weight.shallow_clone());
        self.castable.push(conv.weight.shallow_clone());
        if let Some(b) = &conv.bias {
            self.groups.conv_biases.push(b.shallow_clone());
            self.castable.push(b.shallow_clone());
        }
        conv
    }

    fn bn(&mut self, p: &nn::Path, channels: i64) -> GhostBn {
        let bn = GhostBn::new(p, channels, &self.bn_cfg);
        if !self.bn_cfg.frozen_scale {
            self.groups.bn_weights.push(bn.weight.shallow_clone());
        }
        self.groups.bn_biases.push(bn.bias.shallow_clone());
        self.bns
            .push((bn.weight.shallow_clone(), bn.bias.shallow_clone()));
        for t in [&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var] {
            self.bn_state.push(t.shallow_clone());
        }
        bn
    }

    fn linear(&mut self, p: &nn::Path, cin: i64, cout: i64, bias: bool) -> Linear {
        let lin = Linear::new(p, cin, cout, bias);
        for t in std::iter::once(&lin.weight).chain(lin.bias.as_ref()) {
            self.groups.weights.push(t.shallow_clone());
            self.groups.head.push(t.shallow_clone());
            self.castable.push(t.shallow_clone());
        }
        lin
    }
}

/// Input stem: optional frozen whitening, optional learnable conv, optional BN,
/// then the activation when `act` is set.
struct Stem {
    whiten: Option<Whiten>,
    conv: Option<Conv>,
    bn: Option<GhostBn>,
    act: bool,
}

impl Stem {
    fn build(p: &nn::Path, reg: &mut Registry, cfg: &NetConfig) -> (Stem, i64) {
        let whiten = Whiten::new(&(p / "whiten"), &cfg.whitening);
        if let Some(w) = &whiten {
            reg.castable.push(w.conv.weight.shallow_clone());
            if let Some(b) = &w.conv.bias {
                reg.groups.whiten_bias.push(b.shallow_clone());
                reg.castable.push(b.shallow_clone());
            }
        }
        match (cfg.arch, whiten) {
            // The body builds torchvision's own stem.
            (arch, _) if arch.torchvision() => (
                Stem {
                    whiten: None,
                    conv: None,
                    bn: None,
                    act: false,
                },
                3,
            ),
            (arch, Some(w)) if arch.conv_groups() => {
                let c = w.out_channels();
                (
                    Stem {
                        whiten: Some(w),
                        conv: None,
                        bn: None,
                        act: true,
                    },
                    c,
                )
            }
            (arch, None) if arch.conv_groups() => {
                // Off state of T18: a learnable conv of the same shape.
                let conv = Conv::new(&(p / "conv"), 3, 24, 2, 1, 0, true, true);
                reg.groups.weights.push(conv.weight.shallow_clone());
                reg.groups.conv_filters.push(conv.weight.shallow_clone());
                reg.castable.push(conv.weight.shallow_clone());
                let bias = conv.bias.as_ref().expect("conv built with a bias");
                reg.groups.whiten_bias.push(bias.shallow_clone());
                reg.castable.push(bias.shallow_clone());
                (
                    Stem {
                        whiten: None,
                        conv: Some(conv),
                        bn: None,
                        act: true,
                    },
                    24,
                )
            }
            (_, Some(w)) => {
                let c0 = cfg.widths[0];
                let conv = reg.conv(&(p / "proj"), w.out_channels(), c0, 1, 1, 0);
                let bn = reg.bn(&(p / "bn"), c0);
                (
                    Stem {
                        whiten: Some(w),
                        conv: Some(conv),
                        bn: Some(bn),
                        act: true,
                    },
                    c0,
                )
            }
            (_, None) => {
                let c0 = cfg.widths[0];
                let conv = reg.conv(&(p / "conv"), 3, c0, 3, 1, 1);
                let bn = cfg.prep_bn_relu.then(|| reg.bn(&(p / "bn"), c0));
                (
                    Stem {
                        whiten: None,
                        conv: Some(conv),
                        bn,
                        act: cfg.prep_bn_relu,
                    },
                    c0,
                )
            }
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let mut h = match &self.whiten {
            Some(w) => w.forward(x),
            None => x.shallow_clone(),
        };
        if let Some(c) = &self.conv {
            h = c.forward(&h);
        }
        if let Some(bn) = &self.bn {
            h = bn.forward_t(&h, train);
        }
        if self.act { act.apply(&h) } else { h }
    }
}

enum Body {
    PreAct(Vec<PreActBlock>),
    Path(Vec<PathOp>),
    Page(Vec<PageLayer>),
    Airbench(Vec<ConvGroup>),
    Torchvision(TvStem, Vec<TvBlock>),
}

/// How the last feature map becomes one vector per image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    /// Global max (Page's ResNet-9, airbench, hlb).
    Max,
    /// Global average (torchvision's ResNets).
    Avg,
    /// Max and average concatenated (Page's ResNet-18 variant, P4a-d).
    Concat,
}

pub struct Net {
    cfg: NetConfig,
    stem: Stem,
    body: Body,
    head: Linear,
    pool: Pool,
    groups: ParamGroups,
    bns: Vec<(Tensor, Tensor)>,
    castable: Vec<Tensor>,
    bn_state: Vec<Tensor>,
}

impl Net {
    /// Builds the network; panics only on a config that `validate` rejects,
    /// use [`Net::try_new`] to get that as an error.
    pub fn new(vs: &nn::Path, cfg: &NetConfig) -> Net {
        Net::try_new(vs, cfg).unwrap_or_else(|e| panic!("invalid network config: {e:#}"))
    }

    #[allow(clippy::too_many_lines, reason = "one arm per architecture's body")]
    pub fn try_new(vs: &nn::Path, cfg: &NetConfig) -> Result<Net> {
        cfg.validate()?;
        let mut reg = Registry {
            groups: ParamGroups::empty(),
            bns: vec![],
            castable: vec![],
            bn_state: vec![],
            bn_cfg: cfg.bn.clone(),
            dirac: cfg.dirac,
            conv_bias: cfg.conv_bias,
        };
        let (stem, c) = Stem::build(&(vs / "stem"), &mut reg, cfg);
        let body_p = vs / "body";
        let (body, feat, pool) = match cfg.arch {
            Arch::PageResnet18 => {
                let blocks = PreActBlock::build(&body_p, &mut reg, cfg);
                (
                    Body::PreAct(blocks),
                    2 * cfg.widths[cfg.widths.len() - 1],
                    Pool::Concat,
                )
            }
            Arch::P4aPath | Arch::P4bConv1x1 | Arch::P4cConv3x3 => {
                let ops = PathOp::build(&body_p, &mut reg, cfg);
                (
                    Body::Path(ops),
                    2 * cfg.widths[cfg.widths.len() - 1],
                    Pool::Concat,
                )
            }
            Arch::P4dMaxpool => {
                let layers = PageLayer::build(&body_p, &mut reg, cfg);
                (
                    Body::Page(layers),
                    2 * cfg.widths[cfg.widths.len() - 1],
                    Pool::Concat,
                )
            }
            Arch::P4eMaxHead | Arch::Backbone | Arch::Resnet9 => {
                let layers = PageLayer::build(&body_p, &mut reg, cfg);
                (
                    Body::Page(layers),
                    cfg.widths[cfg.widths.len() - 1],
                    Pool::Max,
                )
            }
            Arch::Airbench | Arch::Hlb => {
                let groups = ConvGroup::build(&body_p, &mut reg, cfg, c);
                (
                    Body::Airbench(groups),
                    cfg.widths[cfg.widths.len() - 1],
                    Pool::Max,
                )
            }
            Arch::TvResnet18 | Arch::TvResnet50 => {
                let stem = TvStem::new(&(&body_p / "stem"), &mut reg, cfg.widths[0]);
                let depth = if cfg.arch == Arch::TvResnet50 { 50 } else { 18 };
                let (blocks, feat) = TvBlock::build(
                    &body_p,
                    &mut reg,
                    depth,
                    &cfg.widths,
                    cfg.widths[0],
                    (cfg.zero_init_residual, cfg.blurpool),
                );
                (Body::Torchvision(stem, blocks), feat, Pool::Avg)
            }
        };
        // The ResNet-18 variant's linear layer has a bias, and so has every
        // part-4 backbone until P4f removes it.
        let head_bias = matches!(
            cfg.arch,
            Arch::PageResnet18
                | Arch::P4aPath
                | Arch::P4bConv1x1
                | Arch::P4cConv3x3
                | Arch::P4dMaxpool
                | Arch::P4eMaxHead
                | Arch::TvResnet18
                | Arch::TvResnet50
        );
        let head = reg.linear(&(vs / "head"), feat, cfg.num_classes, head_bias);
        if let Some(std) = cfg.head_init_std {
            // fast.ai's init_dist_weights redraws the weight alone; Goyal et
            // al. name only the weights' Gaussian.
            tch::no_grad(|| {
                let _ = head.weight.shallow_clone().normal_(0.0, std);
            });
        }
        Ok(Net {
            cfg: cfg.clone(),
            stem,
            body,
            head,
            pool,
            groups: reg.groups,
            bns: reg.bns,
            castable: reg.castable,
            bn_state: reg.bn_state,
        })
    }

    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    /// Logits (already × logit_scale), always f32 whatever the weight kind.
    pub fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let kind = self.head.weight.kind();
        let x = if x.kind() == kind {
            x.shallow_clone()
        } else {
            x.to_kind(kind)
        };
        let act = &self.cfg.act;
        let mut h = self
            .stem
            .forward_t(&x, train, self.cfg.stem_act.as_ref().unwrap_or(act));
        match &self.body {
            Body::PreAct(blocks) => {
                for b in blocks {
                    h = b.forward_t(&h, train, act);
                }
            }
            Body::Path(ops) => {
                for op in ops {
                    h = op.forward_t(&h, train, act);
                }
            }
            Body::Page(layers) => {
                for l in layers {
                    h = l.forward_t(&h, train, act);
                }
            }
            Body::Airbench(groups) => {
                for g in groups {
                    h = g.forward_t(&h, train, act);
                }
            }
            Body::Torchvision(stem, blocks) => {
                h = stem.forward_t(&h, train, act);
                for b in blocks {
                    h = b.forward_t(&h, train, act);
                }
            }
        }
        let avg = |h: &Tensor| h.mean_dim(&[2i64, 3][..], false, None);
        let feat = match self.pool {
            Pool::Concat => Tensor::cat(&[global_max(&h), avg(&h)], 1),
            Pool::Avg => avg(&h),
            Pool::Max => global_max(&h),
        };
        let logits = self.head.forward(&feat) * self.cfg.logit_scale;
        // float32 logits from a half net; a float64 net (a golden
        // trajectory's replay) keeps float64.
        match logits.kind() {
            Kind::Double => logits,
            _ => logits.to_kind(Kind::Float),
        }
    }

    /// Fits the frozen whitening conv to `images` (normalised float NCHW,
    /// unaugmented, unpadded). A no-op without whitening.
    pub fn init_whitening(&self, images: &Tensor) -> Result<()> {
        match &self.stem.whiten {
            Some(w) => w.init(images),
            None => Ok(()),
        }
    }

    /// Every BN layer's running mean and variance, in network order: what
    /// a gang makes rank 0's before it evaluates.
    pub fn bn_running_stats(&self) -> Vec<Tensor> {
        // The registry keeps each layer's (weight, bias, mean, variance).
        self.bn_state
            .chunks(4)
            .flat_map(|l| [l[2].shallow_clone(), l[3].shallow_clone()])
            .collect()
    }

    /// (weight, bias) of every BN layer in network order.
    pub fn bn_params(&self) -> Vec<(Tensor, Tensor)> {
        self.bns
            .iter()
            .map(|(w, b)| (w.shallow_clone(), b.shallow_clone()))
            .collect()
    }

    pub fn param_groups(&self) -> ParamGroups {
        self.groups.shallow_clone()
    }

    /// airbench trains the whitening bias for the first epochs only. Optimisers
    /// skip tensors that do not require grad, so freezing stops its updates.
    pub fn set_whiten_bias_trainable(&self, on: bool) {
        for b in &self.groups.whiten_bias {
            let _ = b.set_requires_grad(on);
        }
    }

    /// Casts conv/linear/whitening tensors to `kind` (Half/BFloat16 on CUDA);
    /// BN parameters and running statistics stay f32. Use this instead of
    /// `VarStore::half()`, which would cast BN too. Create optimisers after
    /// this so their state has the weights' kind.
    pub fn cast_weights(&self, kind: Kind) {
        tch::no_grad(|| {
            for t in &self.castable {
                if t.kind() != kind {
                    let mut t = t.shallow_clone();
                    t.set_data(&t.to_kind(kind));
                }
            }
        });
    }

    /// BatchNorm entirely in `kind`, running statistics included: Page's
    /// parts 1-2 (`Network.half()` before part 3 kept BN out of it).
    pub fn cast_bn(&self, kind: Kind) {
        tch::no_grad(|| {
            for t in &self.bn_state {
                let mut t = t.shallow_clone();
                t.set_data(&t.to_kind(kind));
            }
        });
    }

    /// airbench-muon head init: weight rescaled to unit std (pair it with
    /// `logit_scale = 1/feature_width`).
    pub fn init_head_unit_std(&self) {
        let w = &self.head.weight;
        tch::no_grad(|| {
            let std = w.std(true);
            let scaled = w / std;
            w.shallow_clone().copy_(&scaled);
        });
    }
}
