//! Page's architectures: the DAWN pre-activation ResNet-18 variant (P1–P3)
//! and the plain backbone / ResNet-9 family (P4f, P4i onwards).

use tch::{Tensor, nn};

use super::bn::GhostBn;
use super::layers::{Conv, max_pool2};
use super::{Activation, NetConfig, Registry};

/// Where the 2×2 max-pool sits in a conv block (T7, T8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolAt {
    None,
    BeforeBn,
    BeforeAct,
    AfterAct,
}

impl PoolAt {
    pub fn for_cfg(cfg: &NetConfig) -> PoolAt {
        if cfg.pool_before_bn {
            PoolAt::BeforeBn
        } else if cfg.pool_before_act {
            PoolAt::BeforeAct
        } else {
            PoolAt::AfterAct
        }
    }
}

/// conv3×3 → BN → act with an optional max-pool at a configurable point.
pub(crate) struct ConvBn {
    pub(crate) conv: Conv,
    bn: GhostBn,
    pool: PoolAt,
}

impl ConvBn {
    pub fn new(p: &nn::Path, reg: &mut Registry, cin: i64, cout: i64, pool: PoolAt) -> ConvBn {
        let conv = reg.conv(&(p / "conv"), cin, cout, 3, 1, 1);
        let bn = reg.bn(&(p / "bn"), cout);
        ConvBn { conv, bn, pool }
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let mut h = self.conv.forward(x);
        if self.pool == PoolAt::BeforeBn {
            h = max_pool2(&h);
        }
        h = self.bn.forward_t(&h, train);
        if self.pool == PoolAt::BeforeAct {
            h = max_pool2(&h);
        }
        h = act.apply(&h);
        if self.pool == PoolAt::AfterAct {
            h = max_pool2(&h);
        }
        h
    }
}

/// One ResNet-9 / backbone layer: a pooled conv block and, optionally,
/// x + (conv_bn → conv_bn)(x) with no activation after the add.
pub(crate) struct PageLayer {
    down: ConvBn,
    res: Option<(ConvBn, ConvBn)>,
}

impl PageLayer {
    pub fn build(p: &nn::Path, reg: &mut Registry, cfg: &NetConfig) -> Vec<PageLayer> {
        let pool = PoolAt::for_cfg(cfg);
        cfg.widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let lp = p / format!("layer{}", i + 1);
                let down = ConvBn::new(&(&lp / "down"), reg, w[0], w[1], pool);
                // Page's res_layers = (layer1, layer3): every other layer.
                let res = (cfg.residual && i % 2 == 0).then(|| {
                    (
                        ConvBn::new(&(&lp / "res1"), reg, w[1], w[1], PoolAt::None),
                        ConvBn::new(&(&lp / "res2"), reg, w[1], w[1], PoolAt::None),
                    )
                });
                PageLayer { down, res }
            })
            .collect()
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let h = self.down.forward_t(x, train, act);
        match &self.res {
            Some((a, b)) => {
                let r = b.forward_t(&a.forward_t(&h, train, act), train, act);
                h + r
            }
            None => h,
        }
    }
}

/// Pre-activation block: BN → act → [conv(stride) → BN → act → conv] + shortcut,
/// the shortcut being a 1×1 strided conv on the BN-act output when the shape changes.
pub(crate) struct PreActBlock {
    bn1: GhostBn,
    conv1: Conv,
    bn2: GhostBn,
    conv2: Conv,
    shortcut: Option<Conv>,
}

impl PreActBlock {
    pub fn build(p: &nn::Path, reg: &mut Registry, cfg: &NetConfig) -> Vec<PreActBlock> {
        let mut blocks = Vec::new();
        let mut cin = cfg.widths[0];
        for (i, &w) in cfg.widths.iter().enumerate() {
            let stride = if i == 0 { 1 } else { 2 };
            for b in 0..2 {
                let bp = p / format!("layer{}", i + 1) / format!("block{b}");
                let s = if b == 0 { stride } else { 1 };
                let bn1 = reg.bn(&(&bp / "bn1"), cin);
                let conv1 = reg.conv(&(&bp / "conv1"), cin, w, 3, s, 1);
                let bn2 = reg.bn(&(&bp / "bn2"), w);
                let conv2 = reg.conv(&(&bp / "conv2"), w, w, 3, 1, 1);
                let shortcut =
                    (s != 1 || cin != w).then(|| reg.conv(&(&bp / "shortcut"), cin, w, 1, s, 0));
                blocks.push(PreActBlock {
                    bn1,
                    conv1,
                    bn2,
                    conv2,
                    shortcut,
                });
                cin = w;
            }
        }
        blocks
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        let o = act.apply(&self.bn1.forward_t(x, train));
        let h = self.conv1.forward(&o);
        let h = act.apply(&self.bn2.forward_t(&h, train));
        let h = self.conv2.forward(&h);
        // Page's res_block adds `relu1`, the BN-ReLU output, on both paths.
        match &self.shortcut {
            Some(c) => h + c.forward(&o),
            None => h + o,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BnConfig, ParamGroups};
    use tch::{Device, Kind};

    #[test]
    fn the_identity_shortcut_adds_the_bn_relu_output() {
        let _defaults = crate::native::default_generators();
        let vs = nn::VarStore::new(Device::Cpu);
        let mut reg = Registry {
            groups: ParamGroups::empty(),
            bns: vec![],
            castable: vec![],
            bn_state: vec![],
            bn_cfg: BnConfig::default(),
            dirac: crate::model::Dirac::Off,
            conv_bias: false,
        };
        let cfg = NetConfig::default_for(crate::config::Arch::PageResnet18).scaled(1.0 / 16.0);
        let blocks = PreActBlock::build(&vs.root(), &mut reg, &cfg);
        // The second block of layer 1 keeps its shape: an identity shortcut.
        let b = &blocks[1];
        assert!(b.shortcut.is_none());
        tch::no_grad(|| {
            let _ = b.conv2.weight.shallow_clone().zero_();
        });
        let x = Tensor::randn([4, cfg.widths[0], 8, 8], (Kind::Float, Device::Cpu)) * 3.0 - 1.0;
        let out = b.forward_t(&x, false, &Activation::Relu);
        let relu1 = b.bn1.forward_t(&x, false).relu();
        assert!(out.allclose(&relu1, 1e-6, 1e-6, false));
        assert!(!out.allclose(&x, 1e-3, 1e-3, false));
    }
}
