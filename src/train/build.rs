//! Stage 3 of a run: the network (with its whitening fitted to the data),
//! the optimisers and the averager, and the kernel warm-up.

use super::pipeline::normalise;
use super::prepare::{Layout, Source, channels_last};
use crate::model::{Basis, Net, NetConfig, Whitening};
use crate::native::Rng;
use crate::optim::{self, Group, Optimizer};
use crate::plan::{Averaging, AvgAction, Family, OptimPlan, ParamGroup, RunPlan, StepRates};
use anyhow::{Context, Result};
use tch::{Tensor, nn};

/// The network, its whitening conv computed from the first training images
/// (hlb: a random permutation of them) as the run's data type holds them,
/// then the plan's head init, precision and memory format.
pub(super) fn build_net(
    plan: &RunPlan,
    src: &Source,
    vs: &nn::VarStore,
    layout: Layout,
    rng: &Rng,
) -> Result<(Net, NetConfig)> {
    let (net, nc) = new_net(plan, src, vs)?;
    let norm = (&plan.data.norm, plan.precision.data_kind());
    fit_whitening(&net, &nc, norm, src, vs.device(), layout, rng)?;
    finish_net(plan, &net, layout);
    Ok((net, nc))
}

/// The network as built, its weights at their inits (outside every clock:
/// the references build their nets before their timers).
pub(super) fn new_net(plan: &RunPlan, src: &Source, vs: &nn::VarStore) -> Result<(Net, NetConfig)> {
    let nc = NetConfig {
        num_classes: src.classes,
        ..plan.net.clone()
    };
    let net = Net::try_new(&vs.root(), &nc).context("building the network")?;
    Ok((net, nc))
}

/// The whitening conv fitted to the training images (the whitening clock,
/// `whiten_s`); nothing without whitening.
pub(super) fn fit_whitening(
    net: &Net,
    nc: &NetConfig,
    (norm, kind): (&crate::plan::Norm, tch::Kind),
    src: &Source,
    dev: tch::Device,
    layout: Layout,
    rng: &Rng,
) -> Result<()> {
    let images = match &nc.whitening {
        Whitening::Off => None,
        Whitening::Page { images, .. } | Whitening::Airbench { images, .. } => Some(*images),
    };
    if let (Some(_), Some(_)) = (images, &src.stream) {
        anyhow::bail!(
            "whitening is fitted to images held in memory: a streaming run (`stream`) has none; turn whitening off"
        );
    }
    if let Some(k) = images {
        let n = src.train_len();
        let k = (k as i64).min(n);
        let train = src.train_u8.to_device(dev);
        let picked = match nc.whitening {
            Whitening::Airbench {
                basis: Basis::HlbChunks { .. },
                ..
            } => train.index_select(0, &rng.randperm(n, dev).narrow(0, 0, k)),
            _ => train.narrow(0, 0, k),
        };
        let x = layout.data(normalise(&picked, norm, kind));
        net.init_whitening(&x.to_kind(tch::Kind::Float))?;
    }
    Ok(())
}

/// The plan's head init, precision and memory format, after the whitening.
pub(super) fn finish_net(plan: &RunPlan, net: &Net, layout: Layout) {
    if plan.head_unit_std {
        net.init_head_unit_std();
    }
    if let Some(k) = layout.half {
        net.cast_weights(k);
        if layout.bn_half {
            net.cast_bn(k);
        }
    }
    if layout.channels_last {
        tch::no_grad(|| {
            for mut p in net.param_groups().conv_filters {
                p.set_data(&channels_last(&p));
            }
        });
    }
}

/// The parameter groups of everything but Muon's filters, with the plan's
/// multipliers (BN-bias lr scaling, no wd on BN and biases, Muon's head lr).
pub(crate) fn optimizer_groups(o: &OptimPlan, net: &Net) -> Vec<Group> {
    let pg = net.param_groups();
    let group = |params: Vec<Tensor>, g: ParamGroup| {
        let (lr, wd) = o.mults(g);
        Group::with_mults(params, lr, wd)
    };
    let weights = match &o.muon {
        Some(_) => pg.non_filter_weights(),
        None => pg.weights.iter().map(Tensor::shallow_clone).collect(),
    };
    let mut groups = vec![
        group(weights, ParamGroup::Weights),
        group(pg.bn_weights, ParamGroup::BnWeights),
        group(pg.bn_biases, ParamGroup::BnBiases),
    ];
    if !o.whiten_bias.as_ref().is_some_and(|b| b.own_schedule) {
        groups.push(group(pg.whiten_bias, ParamGroup::WhitenBias));
    }
    groups.push(group(pg.conv_biases, ParamGroup::ConvBiases));
    groups.retain(|g| !g.params.is_empty());
    groups
}

/// The lr handed at step `s` to the optimiser that trains `group` (each
/// group's own multiplier is applied inside it): the run's, Muon's own for
/// its filters, the whitening bias's own decay when it has one.
pub(super) fn base_lr(plan: &RunPlan, group: ParamGroup, s: u64, rates: &StepRates) -> f64 {
    let o = &plan.optim;
    let m = rates.main[s as usize];
    match (group, &o.muon, &o.whiten_bias, rates.whiten_bias_steps) {
        (ParamGroup::Filters, Some(mu), _, _) => mu.lr * m,
        (ParamGroup::WhitenBias, _, Some(wb), Some(steps)) if wb.own_schedule => {
            o.lr * (1.0 - s as f64 / steps.max(1) as f64)
        }
        _ => o.lr * m,
    }
}

/// The optimiser for `groups`, of the plan's family.
pub(super) fn build_optimizer(o: &OptimPlan, groups: Vec<Group>) -> Box<dyn Optimizer> {
    let (mu, wd) = (o.momentum, o.weight_decay);
    match o.family {
        Family::Lars { trust } => Box::new(optim::Lars::new(groups, mu, wd, trust, false)),
        Family::Lamb => Box::new(optim::Lamb::new(groups, (0.9, 0.999), 1e-6, wd)),
        Family::AdamW => Box::new(optim::AdamW::new(groups, (0.9, 0.999), 1e-8, wd)),
        Family::SgdPage => Box::new(optim::SgdPage::new(groups, mu, wd)),
        Family::SgdTorch => Box::new(optim::SgdTorch::new(groups, mu, wd, o.nesterov && mu > 0.0)),
    }
}

/// Every optimiser of the run: the main one, Muon on the filters when it is
/// on, and the whitening bias's own when it decays on its own clock.
pub(super) struct Optimisers {
    main: Box<dyn Optimizer>,
    filters: Option<optim::Muon>,
    whiten_bias: Option<Box<dyn Optimizer>>,
}

impl Optimisers {
    pub fn new(plan: &RunPlan, net: &Net, rates: &StepRates) -> Optimisers {
        let o = &plan.optim;
        let own_bias = o.whiten_bias.as_ref().is_some_and(|b| b.own_schedule);
        let mut opt = Optimisers {
            main: build_optimizer(o, optimizer_groups(o, net)),
            filters: o.muon.as_ref().map(|m| {
                optim::Muon::new(
                    vec![Group::new(net.param_groups().conv_filters)],
                    m.options(rates.total),
                )
            }),
            whiten_bias: own_bias.then(|| {
                let (lr, wd) = o.mults(ParamGroup::WhitenBias);
                let bias = Group::with_mults(net.param_groups().whiten_bias, lr, wd);
                build_optimizer(o, vec![bias])
            }),
        };
        opt.set_loss_scale(plan.loss.scale);
        opt
    }

    /// The loss's multiplier every optimiser divides its gradients by (it
    /// follows the batch when the batch changes by phase).
    pub fn set_loss_scale(&mut self, scale: f64) {
        self.main.set_loss_scale(scale);
        if let Some(f) = self.filters.as_mut() {
            f.set_loss_scale(scale);
        }
        if let Some(b) = self.whiten_bias.as_mut() {
            b.set_loss_scale(scale);
        }
    }

    /// Step `s` (0-based) of every optimiser at its rate, then zero the grads.
    pub fn step(&mut self, plan: &RunPlan, s: u64, rates: &StepRates, zero_none: bool) {
        self.step_keeping_grads(plan, s, rates);
        self.zero_grad(zero_none);
    }

    /// Step `s` of every optimiser, the gradients left where they are (a
    /// CUDA graph's step zero-fills them itself).
    pub fn step_keeping_grads(&mut self, plan: &RunPlan, s: u64, rates: &StepRates) {
        self.main.step(base_lr(plan, ParamGroup::Weights, s, rates));
        if let Some(f) = self.filters.as_mut() {
            f.step(base_lr(plan, ParamGroup::Filters, s, rates));
        }
        if let Some(b) = self.whiten_bias.as_mut() {
            b.step(base_lr(plan, ParamGroup::WhitenBias, s, rates));
        }
    }

    /// Every optimiser's gradients, so none carries into the next step.
    pub fn zero_grad(&mut self, set_to_none: bool) {
        self.main.zero_grad(set_to_none);
        if let Some(f) = self.filters.as_mut() {
            f.zero_grad(set_to_none);
        }
        if let Some(b) = self.whiten_bias.as_mut() {
            b.zero_grad(set_to_none);
        }
    }
}

/// Parameter averaging. Page evaluates a separate copy; airbench copies the
/// average back into the live weights; hlb does both, from a snapshot taken
/// when its average starts.
pub(super) struct Averager {
    plan: Averaging,
    pub live: Vec<Tensor>,
    avg: Option<optim::Ema>,
    /// The eval-only net holding the average (Page, hlb) and its float state.
    eval: Option<(nn::VarStore, Net, Vec<Tensor>)>,
}

impl Averager {
    pub fn new(plan: &RunPlan, vs: &nn::VarStore, nc: &NetConfig, layout: Layout) -> Result<Self> {
        let live = optim::float_state(vs);
        let eval = match plan.averaging {
            Averaging::PageEma { .. }
            | Averaging::Lookahead {
                eval_average: true, ..
            } => {
                let evs = nn::VarStore::new(vs.device());
                // Its inits are overwritten by the average, but they draw from
                // the default generators: under their lock, so they cannot land
                // inside another worker's seeded init.
                let net = {
                    let _defaults = crate::native::default_generators();
                    Net::try_new(&evs.root(), nc)?
                };
                if let Some(k) = layout.half {
                    net.cast_weights(k);
                    if layout.bn_half {
                        net.cast_bn(k);
                    }
                }
                let state = optim::float_state(&evs);
                Some((evs, net, state))
            }
            _ => None,
        };
        let avg = plan
            .averaging
            .starts_at_init()
            .then(|| optim::Ema::new(&live));
        Ok(Averager {
            plan: plan.averaging,
            live,
            avg,
            eval,
        })
    }

    /// Whether the average exists yet (hlb's starts at a later snapshot).
    #[cfg(test)]
    pub fn started(&self) -> bool {
        self.avg.is_some()
    }

    /// After 1-based step `t` of `total`, the `i`-th step of epoch `epoch`.
    pub fn after_step(&mut self, t: u64, i: u64, epoch: usize, total: u64) {
        match self.plan.action(t, i, epoch, total, self.avg.is_some()) {
            AvgAction::Skip => {}
            AvgAction::Snapshot => self.avg = Some(optim::Ema::new(&self.live)),
            AvgAction::Update { decay, copy_back } => {
                if let Some(avg) = self.avg.as_mut() {
                    avg.update(&self.live, decay);
                    // hlb keeps BN weights and the whitening out of the
                    // copy-back; both are frozen here, so it leaves them as they are.
                    if copy_back {
                        avg.copy_into(&self.live);
                    }
                }
            }
        }
    }

    /// airbench ends with net ← average (d = 1) at the final step; hlb
    /// evaluates its copy instead.
    pub fn finish(&self) {
        // d = 1 leaves the average as it is: only the copy-back remains.
        if let (
            Some(AvgAction::Update {
                copy_back: true, ..
            }),
            Some(avg),
        ) = (self.plan.at_end(), self.avg.as_ref())
        {
            avg.copy_into(&self.live);
        }
    }

    /// The net to evaluate: the copy loaded with the average, or the live net.
    pub fn eval_net<'a>(&'a self, live: &'a Net) -> &'a Net {
        match (&self.eval, &self.avg) {
            (Some((_, net, state)), Some(avg)) => {
                avg.copy_into(state);
                net
            }
            _ => live,
        }
    }
}

/// With `cudnn_benchmark` (as Page's dawn.py does before its timer): two
/// steps on random data outside every clock, so kernel selection (cuDNN
/// autotune, oneDNN primitives) for this run's own shapes lands in no
/// clock. BN statistics are restored and no gradient is left behind.
pub(super) fn warm_kernels(
    rng: &Rng,
    net: &Net,
    opt: &mut Optimisers,
    live: &[Tensor],
    shape: [i64; 4],
    classes: i64,
    layout: Layout,
) {
    let dev = rng.device();
    let saved = optim::Ema::new(live);
    let x = layout.input(rng.rand(&shape, dev) * 2.0 - 1.0);
    let y = rng.randint(classes, &[shape[0]], dev);
    for _ in 0..2 {
        let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y);
        loss.backward();
        // All of them: Muon's filters and an own-clock whitening bias are
        // outside the main optimiser, and a leftover gradient would join step 1.
        opt.zero_grad(true);
    }
    saved.copy_into(live);
}
