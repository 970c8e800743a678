//! Page part 4's intermediate backbones (P4a–P4c, TRICKS.md 1.2): the
//! ResNet-18's shortest path and its first simplifications, before the
//! max-pool downsampling of P4d (a `PageLayer` body) and the plain net of P4f.

use tch::{Tensor, nn};

use super::bn::GhostBn;
use super::layers::Conv;
use super::{Activation, Arch, NetConfig, Registry};

/// One operation of a straight-line body.
pub(crate) enum PathOp {
    BnAct(GhostBn),
    Conv(Conv),
}

impl PathOp {
    /// The body after the stem's conv, for widths `[prep, layer2, layer3, layer4]`.
    pub fn build(p: &nn::Path, reg: &mut Registry, cfg: &NetConfig) -> Vec<PathOp> {
        let mut ops = Vec::new();
        let mut n = 0;
        let mut bn_act = |ops: &mut Vec<PathOp>, reg: &mut Registry, c: i64| {
            n += 1;
            ops.push(PathOp::BnAct(reg.bn(&(p / format!("bn{n}")), c)));
        };
        let c0 = cfg.widths[0];
        if cfg.arch == Arch::P4aPath {
            // Layer 1's two identity blocks: on the shortest path, each adds its
            // BN-ReLU output (Page's res_block), so only the BN-ReLUs remain.
            bn_act(&mut ops, reg, c0);
            bn_act(&mut ops, reg, c0);
        }
        let mut cin = c0;
        for (i, &w) in cfg.widths[1..].iter().enumerate() {
            let cp = p / format!("down{}", i + 1);
            match cfg.arch {
                // The downsampling block: BN-ReLU, its 1×1 stride-2 shortcut conv,
                // then the next block's BN-ReLU.
                Arch::P4aPath => {
                    bn_act(&mut ops, reg, cin);
                    ops.push(PathOp::Conv(reg.conv(&cp, cin, w, 1, 2, 0)));
                }
                Arch::P4bConv1x1 => ops.push(PathOp::Conv(reg.conv(&cp, cin, w, 1, 2, 0))),
                _ => ops.push(PathOp::Conv(reg.conv(&cp, cin, w, 3, 2, 1))),
            }
            bn_act(&mut ops, reg, w);
            cin = w;
        }
        ops
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        match self {
            PathOp::BnAct(bn) => act.apply(&bn.forward_t(x, train)),
            PathOp::Conv(c) => c.forward(x),
        }
    }
}
