//! Ghost BatchNorm (Page B5) with optional frozen scale (B6), always in f32.

use tch::{Kind, Tensor, nn};

use super::BnConfig;

/// BatchNorm over `splits` interleaved sub-batches. With `splits = 1` this is
/// plain BN. Running statistics are kept per split (C·k buffers, registered
/// as non-trainable VarStore variables so EMA/Lookahead average them) and
/// averaged over the splits in eval mode.
pub(crate) struct GhostBn {
    pub weight: Tensor,
    pub bias: Tensor,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    cfg: BnConfig,
}

impl GhostBn {
    pub fn new(p: &nn::Path, channels: i64, cfg: &BnConfig) -> GhostBn {
        let k = cfg.ghost_splits.max(1);
        let weight = if cfg.frozen_scale {
            p.ones_no_train("weight", &[channels])
        } else if cfg.weight_init_one {
            p.ones("weight", &[channels])
        } else {
            // PyTorch ≤0.4 default (Page parts 1–3).
            p.var(
                "weight",
                &[channels],
                nn::Init::Uniform { lo: 0.0, up: 1.0 },
            )
        };
        let bias = p.zeros("bias", &[channels]);
        let running_mean = p.zeros_no_train("running_mean", &[channels * k]);
        let running_var = p.ones_no_train("running_var", &[channels * k]);
        // VarStores created with a non-float default kind would hand us other
        // kinds; BN statistics must stay f32.
        for t in [&weight, &bias, &running_mean, &running_var] {
            if t.kind() != Kind::Float {
                let mut t = t.shallow_clone();
                tch::no_grad(|| t.set_data(&t.to_kind(Kind::Float)));
            }
        }
        GhostBn {
            weight,
            bias,
            running_mean,
            running_var,
            cfg: cfg.clone(),
        }
    }

    pub fn splits(&self) -> i64 {
        self.cfg.ghost_splits.max(1)
    }

    fn scale(&self) -> Option<&Tensor> {
        // A frozen scale (ones, never trained) still goes in as a tensor:
        // CUDA's BatchNorm backward shapes the bias gradient after the weight,
        // so a missing weight beside a trained bias fails there ("tensor does
        // not have a device"; cuDNN returns an empty bias gradient), though
        // the CPU kernels accept it. Multiplying by exactly 1 changes no value.
        Some(&self.weight)
    }

    /// Training-mode SyncBN over the installed group, where on and installed.
    fn synced(&self, x: &Tensor) -> Option<Tensor> {
        if !self.cfg.sync {
            return None;
        }
        crate::dist::group::sync_batch_norm(
            x,
            self.scale(),
            &self.bias,
            (&self.running_mean, &self.running_var),
            self.cfg.momentum,
            self.cfg.eps,
        )
    }

    /// Half input goes in as it is, with fp32 parameters and statistics (as
    /// cuDNN takes it in Page's and airbench's nets): no cast either way.
    pub fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let xf = x;
        let k = self.splits();
        let size = xf.size();
        let (n, c) = (size[0], size[1]);
        let (mom, eps) = (self.cfg.momentum, self.cfg.eps);
        if !train {
            let (rm, rv) = if k == 1 {
                (
                    self.running_mean.shallow_clone(),
                    self.running_var.shallow_clone(),
                )
            } else {
                (
                    self.running_mean.view([k, c]).mean_dim(0, false, None),
                    self.running_var.view([k, c]).mean_dim(0, false, None),
                )
            };
            xf.batch_norm(
                self.scale(),
                Some(&self.bias),
                Some(&rm),
                Some(&rv),
                false,
                mom,
                eps,
                true,
            )
        } else if let Some(y) = self.synced(xf) {
            // SyncBN: the whole global batch's statistics, across the ranks.
            y
        } else if k == 1 {
            xf.batch_norm(
                self.scale(),
                Some(&self.bias),
                Some(&self.running_mean),
                Some(&self.running_var),
                true,
                mom,
                eps,
                true,
            )
        } else if n % k == 0 {
            // Sample i·k + j lands in split j: its channel c becomes j·C + c.
            let mut ghost = size.clone();
            ghost[0] = n / k;
            ghost[1] = c * k;
            let w = self.scale().map(|w| w.repeat([k]));
            let b = self.bias.repeat([k]);
            xf.reshape(ghost.as_slice())
                .batch_norm(
                    w.as_ref(),
                    Some(&b),
                    Some(&self.running_mean),
                    Some(&self.running_var),
                    true,
                    mom,
                    eps,
                    true,
                )
                .reshape(size.as_slice())
        } else {
            // A batch that does not split evenly (only possible when the
            // caller keeps a ragged last batch): normalise over the whole
            // batch and leave the per-split running statistics untouched.
            xf.batch_norm(
                self.scale(),
                Some(&self.bias),
                None::<&Tensor>,
                None,
                true,
                mom,
                eps,
                true,
            )
        }
    }
}
