//! airbench's body: ConvGroups of conv → pool → BN → act → conv → BN → act,
//! no residuals (the dirac init stands in for them).

use tch::{Tensor, nn};

use super::resnet::{ConvBn, PoolAt};
use super::{Activation, Dirac, NetConfig, Registry};

pub(crate) struct ConvGroup {
    a: ConvBn,
    b: ConvBn,
}

impl ConvGroup {
    pub fn build(p: &nn::Path, reg: &mut Registry, cfg: &NetConfig, cin: i64) -> Vec<ConvGroup> {
        let pool = PoolAt::for_cfg(cfg);
        let mut cin = cin;
        cfg.widths
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let gp = p / format!("group{}", i + 1);
                let a = ConvBn::new(&(&gp / "a"), reg, cin, w, pool);
                let b = ConvBn::new(&(&gp / "b"), reg, w, w, PoolAt::None);
                if cfg.dirac == Dirac::Hlb {
                    a.conv.dirac_mixed_init();
                    b.conv.dirac_init();
                }
                cin = w;
                ConvGroup { a, b }
            })
            .collect()
    }

    pub fn forward_t(&self, x: &Tensor, train: bool, act: &Activation) -> Tensor {
        self.b
            .forward_t(&self.a.forward_t(x, train, act), train, act)
    }
}
