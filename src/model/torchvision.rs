//! ResNet-18 and ResNet-50 in torchvision's layout (He et al. 2016, as
//! `torchvision.models.resnet18/50` build them): a 7x7 stride-2 stem conv, BN,
//! ReLU and a 3x3 stride-2 max-pool; four stages of basic blocks (18) or
//! bottlenecks (50, the stride on the 3x3 conv as in torchvision's "v1.5");
//! a 1x1 conv + BN shortcut where the shape changes; global average pooling
//! and a linear layer with a bias. The ImageNet recipes (fast.ai, Goyal et
//! al., FFCV) train these.
//!
//! Convs start from torchvision's `kaiming_normal_(mode="fan_out",
//! nonlinearity="relu")`; with `zero_init_residual` each block's last BN
//! scale starts at 0, so every residual block begins as the identity (Goyal
//! et al. 2017, section 5.1).

use tch::{Tensor, nn};

use super::bn::GhostBn;
use super::layers::Conv;
use super::{Activation, Registry};

/// torchvision's conv init: N(0, 2 / fan_out), fan_out = cout·k·k.
fn kaiming_fan_out(conv: &Conv) {
    let s = conv.weight.size();
    let std = (2.0 / (s[0] * s[2] * s[3]) as f64).sqrt();
    tch::no_grad(|| {
        let _ = conv.weight.shallow_clone().normal_(0.0, std);
    });
}

pub(crate) struct ConvBnT {
    conv: Conv,
    bn: GhostBn,
    /// BlurPool's depthwise filter before a strided conv: C x 1 x 3 x 3.
    blur: Option<Tensor>,
}

/// FFCV's `BlurPoolConv2d` filter for `c` channels: [[1,2,1],[2,4,2],[1,2,1]]/16
/// on each channel alone, a fixed buffer (no gradient, no decay).
pub(crate) fn blur_filter(c: i64, device: tch::Device) -> Tensor {
    let k: [f32; 9] = [1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0];
    (Tensor::from_slice(&k).view([1, 1, 3, 3]) / 16.0)
        .repeat([c, 1, 1, 1])
        .to_device(device)
}

impl ConvBnT {
    #[allow(
        clippy::too_many_arguments,
        reason = "a conv's shape and its BN's start"
    )]
    fn new(
        p: &nn::Path,
        reg: &mut Registry,
        cin: i64,
        cout: i64,
        k: i64,
        stride: i64,
        (zero_gamma, blurpool): (bool, bool),
    ) -> ConvBnT {
        let conv = reg.conv(&(p / "conv"), cin, cout, k, stride, k / 2);
        kaiming_fan_out(&conv);
        let bn = reg.bn(&(p / "bn"), cout);
        if zero_gamma {
            tch::no_grad(|| {
                let _ = bn.weight.shallow_clone().zero_();
            });
        }
        // FFCV blurs before every conv with a stride above 1 and at least 16
        // input channels (so not the 3-channel stem).
        let blur = (blurpool && stride > 1 && cin >= 16).then(|| blur_filter(cin, p.device()));
        ConvBnT { conv, bn, blur }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let blurred = self.blur.as_ref().map(|f| {
            let c = f.size()[0];
            x.conv2d(
                &f.to_kind(x.kind()),
                None::<Tensor>,
                [1, 1],
                [1, 1],
                [1, 1],
                c,
            )
        });
        self.bn
            .forward_t(&self.conv.forward(blurred.as_ref().unwrap_or(x)), train)
    }

    /// Whether a blur runs before this conv.
    #[cfg(test)]
    pub fn blurred(&self) -> bool {
        self.blur.is_some()
    }
}

/// torchvision's stem: conv 7x7/2 → BN → act → max-pool 3x3/2 (pad 1).
pub(crate) struct TvStem {
    conv: ConvBnT,
}

impl TvStem {
    pub fn new(p: &nn::Path, reg: &mut Registry, width: i64) -> TvStem {
        TvStem {
            conv: ConvBnT::new(p, reg, 3, width, 7, 2, (false, false)),
        }
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let h = act.apply(&self.conv.forward_t(x, train));
        h.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false)
    }
}

/// A basic block (two 3x3 convs) or a bottleneck (1x1 → 3x3 → 1x1, four
/// times wider out), with its shortcut.
pub(crate) struct TvBlock {
    convs: Vec<ConvBnT>,
    shortcut: Option<ConvBnT>,
}

impl TvBlock {
    /// Every block of a ResNet of `depth` 18 or 50 over `widths` (the four
    /// stages' base widths, 64..512 in torchvision); returns the blocks and
    /// the features they end with.
    pub fn build(
        p: &nn::Path,
        reg: &mut Registry,
        depth: u32,
        widths: &[i64],
        stem_width: i64,
        (zero_init_residual, blurpool): (bool, bool),
    ) -> (Vec<TvBlock>, i64) {
        let (counts, bottleneck): (&[usize], bool) = match depth {
            50 => (&[3, 4, 6, 3], true),
            _ => (&[2, 2, 2, 2], false),
        };
        let expansion = if bottleneck { 4 } else { 1 };
        let mut cin = stem_width;
        let mut blocks = Vec::new();
        for (stage, (&n, &w)) in counts.iter().zip(widths).enumerate() {
            for b in 0..n {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                let bp = p / format!("layer{}", stage + 1) / b.to_string();
                let cout = w * expansion;
                let (plain, last) = ((false, blurpool), (zero_init_residual, blurpool));
                let convs = if bottleneck {
                    vec![
                        ConvBnT::new(&(&bp / "1"), reg, cin, w, 1, 1, plain),
                        ConvBnT::new(&(&bp / "2"), reg, w, w, 3, stride, plain),
                        ConvBnT::new(&(&bp / "3"), reg, w, cout, 1, 1, last),
                    ]
                } else {
                    vec![
                        ConvBnT::new(&(&bp / "1"), reg, cin, w, 3, stride, plain),
                        ConvBnT::new(&(&bp / "2"), reg, w, cout, 3, 1, last),
                    ]
                };
                let shortcut = (stride != 1 || cin != cout)
                    .then(|| ConvBnT::new(&(&bp / "down"), reg, cin, cout, 1, stride, plain));
                blocks.push(TvBlock { convs, shortcut });
                cin = cout;
            }
        }
        (blocks, cin)
    }

    /// A block whose shortcut is the identity (no 1x1 conv).
    #[cfg(test)]
    pub fn shortcut_free(&self) -> bool {
        self.shortcut.is_none()
    }

    /// How many of the block's convs (its shortcut's included) blur first.
    #[cfg(test)]
    pub fn blurred_convs(&self) -> usize {
        self.convs
            .iter()
            .chain(&self.shortcut)
            .filter(|c| c.blurred())
            .count()
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let mut h = x.shallow_clone();
        let last = self.convs.len() - 1;
        for (i, c) in self.convs.iter().enumerate() {
            h = c.forward_t(&h, train);
            if i < last {
                h = act.apply(&h);
            }
        }
        let skip = match &self.shortcut {
            Some(s) => s.forward_t(x, train),
            None => x.shallow_clone(),
        };
        act.apply(&(h + skip))
    }
}
