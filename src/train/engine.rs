//! One training run: resolve → prepare data → whitening → (warm-up) →
//! epochs → summary, with the clocks of TRICKS.md section 5 kept apart.
//!
//! Clocks (every boundary is device-synchronised):
//! - prep_s: normalise, pad and move the data (DAWNBench counts it; airbench
//!   and hlb leave data loading out).
//! - whiten_s: the whitening eigenbasis (DAWNBench/new_dawn and airbench time it, hlb does not).
//! - hlb_s: the training loop of each epoch only.
//! - eval_s: every evaluation pass (never in DAWNBench's or hlb's clock).
//! - dawn_s = prep_s + whiten_s + hlb_s.
//! - airbench_s = whiten_s + hlb_s + the final (TTA) evaluation.

use super::pipeline::{CpuLoader, augment_epoch, colour_jitter, normalise, reflect_pad, to_tensor};
use super::{Control, Flow, Outcome, Trainer};
use crate::config::{Override, RunSpec};
use crate::data::Dataset;
use crate::events::{Clocks, EpochRow, Event, RunSummary, StepRow};
use crate::model::{Net, NetConfig, Whitening};
use crate::optim::{self, Group, Optimizer};
use crate::plan::{Averaging, CutMix, EvalPlan, Family, Half, LossPlan, OptimPlan, RunPlan};
use crate::util::device::{device_label, parse_device};
use crate::util::native::{self, AutocastKind, Rng, autocast};

#[cfg(test)]
#[path = "effects.rs"]
mod effects;
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tch::{Device, Kind, Tensor, nn};

pub struct TchTrainer {
    device: Device,
    label: String,
    data: HashMap<String, Arc<Dataset>>,
    /// Loads a data set from its spec; tests swap in synthetic data.
    loader: fn(&str) -> Result<Dataset>,
}

impl TchTrainer {
    pub fn new(device: &str) -> Result<TchTrainer> {
        Ok(TchTrainer {
            device: parse_device(device)?,
            label: device_label(device),
            data: HashMap::new(),
            loader: crate::data::load,
        })
    }

    /// A trainer whose data specs resolve through `loader` (tests).
    pub fn with_loader(device: &str, loader: fn(&str) -> Result<Dataset>) -> Result<TchTrainer> {
        Ok(TchTrainer {
            loader,
            ..TchTrainer::new(device)?
        })
    }

    fn dataset(&mut self, spec: &str) -> Result<Arc<Dataset>> {
        if let Some(d) = self.data.get(spec) {
            return Ok(d.clone());
        }
        let d = Arc::new((self.loader)(spec)?);
        self.data.insert(spec.to_string(), d.clone());
        Ok(d)
    }
}

impl Trainer for TchTrainer {
    fn device_name(&self) -> String {
        self.label.clone()
    }

    fn run(
        &mut self,
        spec: &RunSpec,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let (cfg, plan) = crate::recipe::resolve_plan(&spec.recipe, &spec.overrides)?;
        let full = self.dataset(&spec.data)?;
        let per = |n: usize| (n > 0).then_some(n);
        let (train_per, test_per) = (plan.data.train_per_class, plan.data.test_per_class);
        let data = if train_per > 0 || test_per > 0 {
            Arc::new(full.subset(per(train_per), per(test_per)))
        } else {
            full
        };
        let device = match &spec.device {
            Some(d) => parse_device(d)?,
            None => self.device,
        };
        let config = cfg.to_json(spec.seed, &data.name, &data.hash);
        let src = Source::new(&data)?;
        Run {
            plan: &plan,
            spec,
            src: &src,
            device,
            label: self.label.clone(),
            layout: Layout::of(&plan),
            rng: Rng::new(device, spec.seed),
        }
        .train(config, ctl, emit)
    }

    fn warm_up(&mut self, spec: &RunSpec, ctl: &dyn Control) -> Option<String> {
        // airbench throws one run away. One step and one eval batch of the real
        // sizes pay the process's one-time costs (allocator, kernel creation,
        // lazy initialisation); more would only cost time: at full width on a
        // CPU a fifth of an epoch took about a minute.
        let (_, plan) = crate::recipe::resolve_plan(&spec.recipe, &spec.overrides).ok()?;
        let data = self.dataset(&spec.data).ok()?;
        let per = plan.data.train_per_class;
        let n = data.train_len((per > 0).then_some(per));
        let steps_per_epoch = (n / plan.batch_size.max(1)).max(1);
        let epochs = (WARM_UP_STEPS as f64 / steps_per_epoch as f64).min(WARM_UP_EPOCHS);
        let classes = data.classes.len().max(1);
        let test_per_class = plan.eval.batch.div_ceil(classes);
        let mut w = spec.clone();
        w.overrides.push(Override::Set {
            key: "epochs".into(),
            value: epochs.to_string(),
        });
        // The run itself warms its kernels for cuDNN (two steps on random
        // data); here they would only double the cost.
        if plan.precision.cudnn_benchmark {
            w.overrides.push(Override::Trick {
                key: "cudnn_benchmark".into(),
                on: false,
            });
        }
        if plan.data.test_per_class == 0 || plan.data.test_per_class > test_per_class {
            w.overrides.push(Override::Set {
                key: "test_per_class".into(),
                value: test_per_class.to_string(),
            });
        }
        let t = Instant::now();
        // A run that cannot start says why itself; its warm-up stays quiet.
        self.run(&w, ctl, &mut |_| {}).ok()?;
        Some(format!(
            "warm-up on {}: {} training step(s) and one eval of `{}` in {:.1} s, untimed and discarded",
            self.label,
            (epochs * steps_per_epoch as f64).ceil(),
            spec.id.variant,
            t.elapsed().as_secs_f64()
        ))
    }
}

/// The discarded warm-up run: this many steps, at most this much of an epoch.
pub const WARM_UP_STEPS: usize = 1;
pub const WARM_UP_EPOCHS: f64 = 0.2;

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Reads the process's peak resident memory (the CPU stand-in for device memory).
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// NHWC strides on an NCHW-shaped tensor: channels_last without a tch API for it.
fn channels_last(x: &Tensor) -> Tensor {
    x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// How tensors are laid out: the plan's precision and memory format, on any
/// device (libtorch runs fp16 and bf16 convolutions, BN on half input and
/// NHWC on a CPU too, slowly, so tests exercise the GPU path); autocast too,
/// through `util::native` where tch's covers CUDA only.
#[derive(Clone, Copy)]
struct Layout {
    half: Option<Kind>,
    /// BatchNorm cast to `half` too.
    bn_half: bool,
    /// Autocast the forward pass to this type (any device).
    amp: Option<AutocastKind>,
    channels_last: bool,
}

impl Layout {
    fn of(plan: &RunPlan) -> Layout {
        Layout {
            half: plan.precision.half.map(Half::kind),
            bn_half: plan.precision.bn_half,
            amp: plan.precision.amp.map(|h| match h {
                Half::F16 => AutocastKind::F16,
                Half::Bf16 => AutocastKind::Bf16,
            }),
            channels_last: plan.precision.channels_last,
        }
    }

    /// A network's weights in the run's precision.
    fn cast(&self, net: &Net) {
        if let Some(k) = self.half {
            net.cast_weights(k);
            if self.bn_half {
                net.cast_bn(k);
            }
        }
    }

    /// An input batch in the run's kind and memory format.
    fn input(&self, x: Tensor) -> Tensor {
        let x = match self.half {
            Some(k) => x.to_kind(k),
            None => x,
        };
        if self.channels_last {
            channels_last(&x)
        } else {
            x
        }
    }
}

/// The data set on its way into the run, from host bytes.
struct Source {
    train_u8: Tensor,
    train_y: Tensor,
    test_u8: Tensor,
    test_y: Tensor,
    classes: i64,
    h: i64,
    w: i64,
}

impl Source {
    fn new(data: &Dataset) -> Result<Source> {
        if data.train.is_empty() || data.test.is_empty() {
            bail!("data set `{}` has an empty split", data.name);
        }
        let (c, h, w) = (data.channels, data.height, data.width);
        let (train_u8, train_y) = to_tensor(&data.train, c, h, w, Device::Cpu);
        let (test_u8, test_y) = to_tensor(&data.test, c, h, w, Device::Cpu);
        Ok(Source {
            train_u8,
            train_y,
            test_u8,
            test_y,
            classes: data.classes.len() as i64,
            h: h as i64,
            w: w as i64,
        })
    }
}

/// The data after preparation (the DAWNBench clock's `prep_s`).
struct Prepared {
    /// Normalised and padded when preprocessed once, raw bytes otherwise.
    train: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    /// Where the training set lives: the run's device when resident.
    device: Device,
}

/// Stage 1: normalise, pad and move the data. Preprocessed data is kept in
/// the training precision (Page keeps it in fp16): half the memory traffic
/// of every epoch's augmentation.
fn prepare(plan: &RunPlan, src: &Source, dev: Device) -> Prepared {
    let d = &plan.data;
    let data_dev = if d.resident { dev } else { Device::Cpu };
    let train = src.train_u8.to_device(data_dev);
    let train = if d.preprocess_once {
        let x = reflect_pad(&normalise(&train), d.augment.pad);
        match plan.precision.half {
            Some(h) => x.to_kind(h.kind()),
            None => x,
        }
    } else {
        train
    };
    let prepared = Prepared {
        train,
        train_y: src.train_y.to_device(data_dev),
        test_x: normalise(&src.test_u8.to_device(dev)),
        test_y: src.test_y.to_device(dev),
        device: data_dev,
    };
    sync(dev);
    prepared
}

/// The T1 off state: a loader that builds each batch on the CPU.
fn cpu_loader(
    plan: &RunPlan,
    data: &Prepared,
    src: &Source,
    flip0: &Tensor,
    seed: u64,
) -> Option<CpuLoader> {
    (!plan.data.resident).then(|| CpuLoader {
        x: data.train.shallow_clone(),
        y: data.train_y.shallow_clone(),
        pre_normalised: plan.data.preprocess_once,
        pre_padded: plan.data.preprocess_once,
        pad: plan.data.augment.pad,
        h: src.h,
        w: src.w,
        flip0: Vec::<bool>::try_from(flip0).unwrap_or_default(),
        rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
    })
}

/// Stage 2: the network, with its whitening conv computed from the data
/// (timed apart: the `whiten_s` clock), then the plan's init and precision.
fn build_net(
    plan: &RunPlan,
    src: &Source,
    vs: &nn::VarStore,
    layout: Layout,
    clocks: &mut Clocks,
) -> Result<(Net, NetConfig)> {
    let dev = vs.device();
    let nc = NetConfig {
        num_classes: src.classes,
        ..plan.net.clone()
    };
    let net = Net::try_new(&vs.root(), &nc).context("building the network")?;
    let t = Instant::now();
    let images = match &nc.whitening {
        Whitening::Off => None,
        Whitening::Page { images, .. } | Whitening::Airbench { images, .. } => Some(*images),
    };
    if let Some(k) = images {
        let k = (k as i64).min(src.train_y.size()[0]);
        net.init_whitening(&normalise(&src.train_u8.narrow(0, 0, k).to_device(dev)))?;
    }
    sync(dev);
    clocks.whiten_s = t.elapsed().as_secs_f64();
    if plan.head_unit_std {
        net.init_head_unit_std();
    }
    layout.cast(&net);
    if layout.channels_last {
        tch::no_grad(|| {
            for mut p in net.param_groups().conv_filters {
                p.set_data(&channels_last(&p));
            }
        });
    }
    Ok((net, nc))
}

/// Stage 3: the optimisers. Muon takes the conv filters when it is on; the
/// whitening bias takes its own optimiser when it decays on its own clock.
struct Optimisers {
    main: Box<dyn Optimizer>,
    filters: Option<optim::Muon>,
    whiten_bias: Option<Box<dyn Optimizer>>,
}

impl Optimisers {
    fn new(o: &OptimPlan, net: &Net, loss_scale: f64) -> Optimisers {
        let own_bias = o.whiten_bias.as_ref().is_some_and(|b| b.own_schedule);
        let mut opt = Optimisers {
            main: build_optimizer(o, optimizer_groups(o, net)),
            filters: o.muon.as_ref().map(|m| {
                optim::Muon::with_options(
                    vec![Group::new(net.param_groups().conv_filters)],
                    optim::MuonOptions {
                        ns_coeffs: m.ns_coeffs,
                        batched: m.batched,
                        half_momentum: m.half_momentum,
                        norm_every: m.norm.every,
                        scale_update: m.norm.scales_update,
                        ..optim::MuonOptions::airbench(m.momentum, m.ns_steps)
                    },
                )
            }),
            whiten_bias: own_bias.then(|| build_optimizer(o, vec![whiten_bias_group(o, net)])),
        };
        opt.main.set_loss_scale(loss_scale);
        if let Some(f) = opt.filters.as_mut() {
            f.set_loss_scale(loss_scale);
        }
        if let Some(b) = opt.whiten_bias.as_mut() {
            b.set_loss_scale(loss_scale);
        }
        opt
    }

    /// One step of every optimiser at schedule multiplier `m`, at epoch `at`
    /// and `progress` ∈ [0, 1] of the run, then zero the grads.
    fn step(&mut self, o: &OptimPlan, m: f64, at: f64, progress: f64, zero_none: bool) {
        self.main.step(o.lr * m);
        if let (Some(f), Some(mp)) = (self.filters.as_mut(), o.muon.as_ref()) {
            f.step_to(mp.lr * m, mp.norm.magnitude(progress));
        }
        if let (Some(b), Some(wb)) = (self.whiten_bias.as_mut(), o.whiten_bias.as_ref()) {
            b.step(o.lr * wb.own_multiplier(at));
        }
        self.zero_grad(zero_none);
    }

    /// Every optimiser's gradients, so none carries into the next step.
    fn zero_grad(&mut self, set_to_none: bool) {
        self.main.zero_grad(set_to_none);
        if let Some(f) = self.filters.as_mut() {
            f.zero_grad(set_to_none);
        }
        if let Some(b) = self.whiten_bias.as_mut() {
            b.zero_grad(set_to_none);
        }
    }
}

/// Stage 3b: parameter averaging. Page evaluates a separate copy; airbench
/// copies the average back into the live weights; hlb does both, from a
/// snapshot taken when its average starts.
struct Averager {
    plan: Averaging,
    live: Vec<Tensor>,
    avg: Option<optim::Ema>,
    /// The eval-only net holding the average (Page, hlb) and its float state.
    eval: Option<(nn::VarStore, Net, Vec<Tensor>)>,
}

impl Averager {
    fn new(plan: &RunPlan, vs: &nn::VarStore, nc: &NetConfig, layout: Layout) -> Result<Averager> {
        let live = optim::float_state(vs);
        let eval = match plan.averaging {
            Averaging::PageEma { .. }
            | Averaging::Lookahead {
                eval_average: true, ..
            } => {
                let evs = nn::VarStore::new(vs.device());
                let net = Net::try_new(&evs.root(), nc)?;
                layout.cast(&net);
                let state = optim::float_state(&evs);
                Some((evs, net, state))
            }
            _ => None,
        };
        let mut averager = Averager {
            plan: plan.averaging,
            live,
            avg: None,
            eval,
        };
        averager.begin_epoch(0);
        Ok(averager)
    }

    /// The average starts from the live state at its first epoch: the initial
    /// weights, or hlb's snapshot at epoch 2.
    fn begin_epoch(&mut self, epoch: usize) {
        let start = match self.plan {
            Averaging::None => return,
            Averaging::PageEma { .. } => 0.0,
            Averaging::Lookahead { start_epoch, .. } => start_epoch,
        };
        if self.avg.is_none() && epoch as f64 >= start {
            self.avg = Some(optim::Ema::new(&self.live));
        }
    }

    fn after_step(&mut self, step: u64, total_steps: u64) {
        let Some(avg) = self.avg.as_mut() else { return };
        match self.plan {
            Averaging::PageEma { decay, every } if step.is_multiple_of(every) => {
                avg.update(&self.live, decay)
            }
            // hlb keeps BN weights and the whitening out of the copy-back;
            // both are frozen here, so averaging leaves them as they are.
            Averaging::Lookahead { every, .. } if step.is_multiple_of(every) => {
                avg.update(
                    &self.live,
                    optim::lookahead_decay(step as usize, total_steps as usize),
                );
                avg.copy_into(&self.live);
            }
            _ => {}
        }
    }

    /// airbench ends with net <- average (d = 1) at the final step; hlb
    /// evaluates its copy instead.
    fn finish(&self) {
        if let (
            Averaging::Lookahead {
                eval_average: false,
                ..
            },
            Some(avg),
        ) = (self.plan, self.avg.as_ref())
        {
            avg.copy_into(&self.live);
        }
    }

    /// The net to evaluate: Page's EMA copy, loaded with the average, or the live net.
    fn eval_net<'a>(&'a self, live: &'a Net) -> &'a Net {
        match (&self.eval, &self.avg) {
            (Some((_, net, state)), Some(avg)) => {
                avg.copy_into(state);
                net
            }
            _ => live,
        }
    }
}

/// Stage 4 (with `cudnn_benchmark`): two steps on random data outside every
/// clock, as Page's dawn.py does before its timer: kernel selection (cuDNN autotune, oneDNN
/// primitives) for this run's own shapes, which a rung that changes the net
/// or the batch would otherwise pay in its clock. The worker's discarded
/// warm-up run covers the process-wide one-time costs. BN statistics are restored.
fn warm_kernels(
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
    sync(dev);
}

/// The training loss of one micro-batch: label-smoothed cross-entropy, on
/// CutMix's soft targets when the batch was mixed.
pub(crate) fn batch_loss(
    loss: &LossPlan,
    logits: &Tensor,
    y: &Tensor,
    soft: Option<&Tensor>,
) -> Tensor {
    match soft {
        Some(soft) => optim::soft_target_ce(logits, &optim::smooth_targets(soft, loss.smoothing)),
        None => optim::label_smoothed_ce(logits, y, loss.smoothing),
    }
}

/// Where a run's step counter and metric read-backs stand.
struct Progress {
    step: u64,
    total_steps: u64,
    steps_per_epoch: u64,
    pending: Vec<(u64, f64, f64, Tensor)>,
    chunk_start: Instant,
    chunk_images: i64,
}

/// What one training epoch produced.
struct EpochTrain {
    steps: u64,
    loss: f64,
    acc: f64,
    seconds: f64,
    /// Of `seconds`, building batches on the CPU.
    loader_s: f64,
}

struct Run<'a> {
    plan: &'a RunPlan,
    spec: &'a RunSpec,
    src: &'a Source,
    device: Device,
    label: String,
    layout: Layout,
    /// Every data-side draw of the run (never libtorch's shared defaults).
    rng: Rng,
}

impl Run<'_> {
    fn train(
        &self,
        config: serde_json::Value,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let (plan, spec, src, dev) = (self.plan, self.spec, self.src, self.device);
        let wall = Instant::now();
        if dev.is_cuda() {
            tch::Cuda::cudnn_set_benchmark(plan.precision.cudnn_benchmark);
        }
        let n = src.train_y.size()[0];
        let bs = plan.batch_size as i64;
        if bs > n {
            bail!(
                "batch_size {bs} is larger than the {n} training images: lower batch_size or use more data"
            );
        }
        let steps_per_epoch = (n / bs) as u64; // drop_last, as Page and airbench do
        let total_steps = (plan.epochs * steps_per_epoch as f64).ceil() as u64;
        let n_epochs = plan.epochs.ceil() as usize;
        emit(Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            config: Arc::new(config),
            total_steps,
            total_epochs: plan.epochs,
            target_acc: spec.target_acc,
            device: self.label.clone(),
            reference: spec.reference.clone(),
        });

        let t = Instant::now();
        let data = prepare(plan, src, dev);
        let mut clocks = Clocks {
            prep_s: t.elapsed().as_secs_f64(),
            ..Clocks::default()
        };
        let vs = nn::VarStore::new(dev);
        let (net, nc) = native::with_seeded_inits(dev, spec.seed, || {
            build_net(plan, src, &vs, self.layout, &mut clocks)
        })?;
        let mut opt = Optimisers::new(&plan.optim, &net, plan.loss.scale);
        let mut avg = Averager::new(plan, &vs, &nc, self.layout)?;
        warm_kernels(
            &self.rng,
            &net,
            &mut opt,
            &avg.live,
            [bs, 3, src.h, src.w],
            src.classes,
            self.layout,
        );

        // Alternating flip keeps the epoch-0 draw.
        let flip0 = self.rng.randint(2, &[n], data.device).eq(1);
        let mut loader = cpu_loader(plan, &data, src, &flip0, spec.seed);
        let bn = net.bn_params();
        let mut progress = Progress {
            step: 0,
            total_steps,
            steps_per_epoch,
            pending: Vec::new(),
            chunk_start: Instant::now(),
            chunk_images: 0,
        };
        let mut time_to_target = None;
        let mut epoch_to_target = None;
        let mut last_acc = (0.0, 0.0);
        let mut final_train_loss = f64::NAN;

        for epoch in 0..n_epochs {
            avg.begin_epoch(epoch);
            if let Some(wb) = &plan.optim.whiten_bias
                && epoch as f64 >= wb.epochs
            {
                net.set_whiten_bias_trainable(false);
            }
            let small = plan
                .data
                .progressive
                .as_ref()
                .filter(|p| p.small_at(epoch, plan.epochs));
            let Some(tr) = self.train_epoch(
                epoch,
                &data,
                &flip0,
                loader.as_mut(),
                small.map(|p| p.size),
                &net,
                &mut opt,
                &mut avg,
                &bn,
                &mut progress,
                ctl,
                emit,
            )?
            else {
                return Ok(Outcome::Cancelled);
            };
            if tr.steps == 0 {
                break;
            }
            clocks.hlb_s += tr.seconds;
            clocks.loader_s += tr.loader_s;
            final_train_loss = tr.loss;

            let last = epoch + 1 == n_epochs || progress.step >= total_steps;
            if last {
                avg.finish();
            }
            let mut test_acc = f64::NAN;
            let mut test_acc_tta = None;
            let mut eval_s = 0.0;
            if last || (epoch + 1).is_multiple_of(plan.eval.every) {
                let t = Instant::now();
                let size = small.and_then(|p| p.eval_size());
                let (plain, tta) = evaluate(
                    avg.eval_net(&net),
                    &data.test_x,
                    &data.test_y,
                    &plan.eval,
                    self.layout,
                    size,
                );
                sync(dev);
                eval_s = t.elapsed().as_secs_f64();
                clocks.eval_s += eval_s;
                test_acc = plain;
                test_acc_tta = (plan.eval.tta_level > 0).then_some(tta);
                last_acc = (plain, tta);
                if last {
                    clocks.airbench_s = clocks.whiten_s + clocks.hlb_s + eval_s;
                }
                if time_to_target.is_none() && test_acc_tta.unwrap_or(test_acc) >= spec.target_acc {
                    time_to_target = Some(clocks.prep_s + clocks.whiten_s + clocks.hlb_s);
                    epoch_to_target = Some(epoch + 1);
                }
            }
            emit(Event::Epoch {
                run: spec.id.clone(),
                row: EpochRow {
                    epoch: epoch + 1,
                    steps: progress.step,
                    train_loss: tr.loss,
                    train_acc: tr.acc,
                    test_acc,
                    test_acc_tta,
                    train_s: tr.seconds,
                    eval_s,
                    images_per_s: tr.steps as f64 * bs as f64 / tr.seconds.max(1e-9),
                    peak_mem_bytes: peak_rss(),
                },
            });
            if last {
                break;
            }
        }
        clocks.dawn_s = clocks.prep_s + clocks.whiten_s + clocks.hlb_s;
        clocks.wall_s = wall.elapsed().as_secs_f64();
        Ok(Outcome::Finished(RunSummary {
            acc: last_acc.0,
            acc_tta: if plan.eval.tta_level > 0 {
                last_acc.1
            } else {
                last_acc.0
            },
            clocks,
            time_to_target_s: time_to_target,
            epoch_to_target,
            epochs: plan.epochs,
            steps: progress.step,
            peak_mem_bytes: peak_rss(),
            final_train_loss,
            device: self.label.clone(),
        }))
    }

    /// Stage 5: one epoch of training steps. `None` when the run was cancelled.
    #[allow(clippy::too_many_arguments)]
    fn train_epoch(
        &self,
        epoch: usize,
        data: &Prepared,
        flip0: &Tensor,
        loader: Option<&mut CpuLoader>,
        small: Option<i64>,
        net: &Net,
        opt: &mut Optimisers,
        avg: &mut Averager,
        bn: &[(Tensor, Tensor)],
        pr: &mut Progress,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Option<EpochTrain>> {
        let (plan, dev) = (self.plan, self.device);
        let bs = plan.batch_size as i64;
        let steps_now = (pr.total_steps - pr.step).min(pr.steps_per_epoch);
        if steps_now == 0 {
            return Ok(Some(EpochTrain {
                steps: 0,
                loss: f64::NAN,
                acc: f64::NAN,
                seconds: 0.0,
                loader_s: 0.0,
            }));
        }
        let cutmix = plan
            .loss
            .cutmix
            .as_ref()
            .filter(|c| c.active_at(epoch, plan.epochs));
        let aug = &plan.data.augment;
        let t_epoch = Instant::now();
        let n = data.train_y.size()[0];
        // Resident data: the whole epoch augmented on the device at once.
        let (epoch_x, perm) = if plan.data.resident {
            let src = if plan.data.preprocess_once {
                data.train.shallow_clone()
            } else {
                reflect_pad(&normalise(&data.train), aug.pad)
            };
            (
                Some(augment_epoch(
                    &self.rng, &src, self.src.h, self.src.w, aug, epoch, flip0,
                )),
                self.rng.randperm(n, dev),
            )
        } else {
            (None, self.rng.randperm(n, Device::Cpu))
        };
        let perm_host: Vec<i64> = if plan.data.resident {
            Vec::new()
        } else {
            Vec::<i64>::try_from(&perm)?
        };
        let mut loader = loader;
        let mut loader_s = 0.0;
        let mut loss_sum = Tensor::zeros([], (Kind::Float, dev));
        let mut correct = Tensor::zeros([], (Kind::Int64, dev));
        for s in 0..steps_now as i64 {
            if ctl.poll() == Flow::Cancel {
                return Ok(None);
            }
            let (x, y) = match (&epoch_x, loader.as_deref_mut()) {
                (Some(ex), _) => {
                    let idx = perm.narrow(0, s * bs, bs);
                    (ex.index_select(0, &idx), data.train_y.index_select(0, &idx))
                }
                (None, Some(l)) => {
                    let idx = &perm_host[(s * bs) as usize..((s + 1) * bs) as usize];
                    let t = Instant::now();
                    let b = l.batch(idx, aug, epoch, dev);
                    loader_s += t.elapsed().as_secs_f64();
                    b
                }
                (None, None) => unreachable!("a CPU loader exists when the data is not resident"),
            };
            let x = match &aug.jitter {
                Some(j) => colour_jitter(&self.rng, &x, j),
                None => x,
            };
            let x = match small {
                Some(sz) => x.upsample_bilinear2d([sz, sz], false, None, None),
                None => x,
            };
            let x = self.layout.input(x);
            let frac = epoch as f64 + (s + 1) as f64 / pr.steps_per_epoch as f64;
            let at = epoch as f64 + s as f64 / pr.steps_per_epoch as f64;
            let m = plan.schedule.at_step(epoch, s as u64, pr.steps_per_epoch);
            let step_loss = self.forward_backward(&x, &y, cutmix, net, &mut correct);
            if let Some(max_norm) = plan.step.clip_norm {
                // The gradients carry the loss scale; the limit is in mean-loss units.
                clip_grad_norm(
                    &net.param_groups().all_trainable(),
                    max_norm * plan.loss.scale,
                );
            }
            let progress = pr.step as f64 / pr.total_steps.max(1) as f64;
            opt.step(&plan.optim, m, at, progress, plan.step.zero_grad_none);
            pr.step += 1;
            avg.after_step(pr.step, pr.total_steps);
            let _ = loss_sum.g_add_(&step_loss);
            pr.chunk_images += bs;
            pr.pending
                .push((pr.step, frac, plan.optim.lr * m, step_loss));
            let every = plan.metrics_every;
            if (every > 0 && pr.step.is_multiple_of(every)) || s as u64 + 1 == steps_now {
                let rows = read_back(&mut pr.pending, bn)?;
                let secs = pr.chunk_start.elapsed().as_secs_f64().max(1e-9);
                emit(Event::Steps {
                    run: self.spec.id.clone(),
                    rows,
                    images_per_s: pr.chunk_images as f64 / secs,
                });
                pr.chunk_start = Instant::now();
                pr.chunk_images = 0;
            }
        }
        sync(dev);
        Ok(Some(EpochTrain {
            steps: steps_now,
            loss: loss_sum.double_value(&[]) / steps_now as f64,
            acc: correct.double_value(&[]) / (steps_now as f64 * bs as f64),
            seconds: t_epoch.elapsed().as_secs_f64(),
            loader_s,
        }))
    }

    /// Forward and backward over the step's micro-batches; returns the step's
    /// mean loss on the device and adds the correct predictions to `correct`.
    fn forward_backward(
        &self,
        x: &Tensor,
        y: &Tensor,
        cutmix: Option<&CutMix>,
        net: &Net,
        correct: &mut Tensor,
    ) -> Tensor {
        let plan = self.plan;
        let accum = plan.step.accum;
        let mut step_loss = Tensor::zeros([], (Kind::Float, self.device));
        for (xm, ym) in x.chunk(accum, 0).iter().zip(y.chunk(accum, 0)) {
            // With CutMix the mixed batch is the only forward pass (one BN update per step).
            let (input, soft) = match cutmix {
                Some(c) => {
                    let (xc, soft) = cutmix_batch(&self.rng, xm, &ym, c.size, self.src.classes);
                    (xc, Some(soft))
                }
                None => (xm.shallow_clone(), None),
            };
            let logits = autocast(self.device, self.layout.amp, || net.forward_t(&input, true))
                .to_kind(Kind::Float);
            let loss = batch_loss(&plan.loss, &logits, &ym, soft.as_ref());
            // Summed over the batch (the micro-batch mean x the batch / accum).
            (&loss * (plan.loss.scale / accum as f64)).backward();
            let _ = correct.g_add_(&logits.argmax(-1, false).eq_tensor(&ym).sum(Kind::Int64));
            step_loss += loss.detach() / accum as f64;
        }
        step_loss
    }
}

/// One host sync for a whole chunk of steps: losses, and the BN scale/bias
/// means at the chunk's last step.
fn read_back(
    pending: &mut Vec<(u64, f64, f64, Tensor)>,
    bn: &[(Tensor, Tensor)],
) -> Result<Vec<StepRow>> {
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let losses: Vec<Tensor> = pending.iter().map(|p| p.3.shallow_clone()).collect();
    let values = Vec::<f64>::try_from(
        &Tensor::stack(&losses, 0)
            .to_kind(Kind::Double)
            .to_device(Device::Cpu),
    )?;
    let (scale, bias) = if bn.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let s: Vec<Tensor> = bn.iter().map(|(w, _)| w.abs().mean(Kind::Float)).collect();
        let b: Vec<Tensor> = bn.iter().map(|(_, b)| b.mean(Kind::Float)).collect();
        (
            Vec::<f32>::try_from(&Tensor::stack(&s, 0).to_device(Device::Cpu))?,
            Vec::<f32>::try_from(&Tensor::stack(&b, 0).to_device(Device::Cpu))?,
        )
    };
    let n = pending.len();
    let mut rows = Vec::with_capacity(n);
    for (i, ((step, epoch, lr, _), loss)) in pending.drain(..).zip(values).enumerate() {
        if !loss.is_finite() {
            bail!(
                "loss became {loss} at step {step}: lower lr (or turn off the trick you just added) and run again"
            );
        }
        let last = i + 1 == n;
        rows.push(StepRow {
            step,
            epoch,
            loss,
            lr,
            bn_scale: if last { scale.clone() } else { Vec::new() },
            bn_bias: if last { bias.clone() } else { Vec::new() },
        });
    }
    Ok(rows)
}

/// Stage 6: accuracy without and with TTA at `level`, summed on the device, read once.
fn evaluate(
    net: &Net,
    x: &Tensor,
    y: &Tensor,
    eval: &EvalPlan,
    layout: Layout,
    size: Option<i64>,
) -> (f64, f64) {
    let level = eval.tta_level;
    tch::no_grad(|| {
        let n = x.size()[0];
        let bs = eval.batch as i64;
        let mut plain = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut tta = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut all_plain = Vec::new();
        let mut i = 0;
        while i < n {
            let k = bs.min(n - i);
            let mut xb = x.narrow(0, i, k);
            if let Some(s) = size {
                xb = xb.upsample_bilinear2d([s, s], false, None, None);
            }
            let xb = layout.input(xb);
            let yb = y.narrow(0, i, k);
            let fwd = |t: &Tensor| net.forward_t(t, false).to_kind(Kind::Float);
            let logits = fwd(&xb);
            let _ = plain.g_add_(&logits.argmax(-1, false).eq_tensor(&yb).sum(Kind::Int64));
            if level > 0 && eval.tta_fraction.is_none() {
                let l = optim::tta_from_plain(&fwd, &xb, &logits, level);
                let _ = tta.g_add_(&l.argmax(-1, false).eq_tensor(&yb).sum(Kind::Int64));
            }
            if eval.tta_fraction.is_some() {
                all_plain.push(logits);
            }
            i += k;
        }
        if let (Some(frac), true) = (eval.tta_fraction, level > 0) {
            // Which images get the views is decided over the whole test set; the
            // views are taken of the images as the plain pass saw them.
            let seen = match size {
                Some(s) => x.upsample_bilinear2d([s, s], false, None, None),
                None => x.shallow_clone(),
            };
            let fwd = |t: &Tensor| {
                net.forward_t(&layout.input(t.shallow_clone()), false)
                    .to_kind(Kind::Float)
            };
            let plain_all = Tensor::cat(&all_plain, 0);
            let l = optim::selective_tta(&fwd, &seen, &plain_all, level, frac, bs);
            let _ = tta.g_add_(&l.argmax(-1, false).eq_tensor(y).sum(Kind::Int64));
        }
        let n = n as f64;
        (
            plain.double_value(&[]) / n,
            if level > 0 {
                tta.double_value(&[]) / n
            } else {
                plain.double_value(&[]) / n
            },
        )
    })
}

/// hlb's CutMix: a square from a permuted copy of the batch, labels mixed by area.
fn cutmix_batch(rng: &Rng, x: &Tensor, y: &Tensor, size: i64, classes: i64) -> (Tensor, Tensor) {
    let (n, _, h, w) = x.size4().expect("NCHW");
    let dev = x.device();
    let perm = rng.randperm(n, dev);
    let y0 = rng.randint(h - size + 1, &[n], dev);
    let x0 = rng.randint(w - size + 1, &[n], dev);
    let r = Tensor::arange(h, (Kind::Int64, dev)).view([1, h]);
    let c = Tensor::arange(w, (Kind::Int64, dev)).view([1, w]);
    let (y0v, x0v) = (y0.view([n, 1]), x0.view([n, 1]));
    let mr = r.ge_tensor(&y0v).logical_and(&r.lt_tensor(&(&y0v + size)));
    let mc = c.ge_tensor(&x0v).logical_and(&c.lt_tensor(&(&x0v + size)));
    let mask = mr.view([n, 1, h, 1]).logical_and(&mc.view([n, 1, 1, w]));
    let mixed = x.index_select(0, &perm).where_self(&mask, x);
    let share = (size * size) as f64 / (h * w) as f64;
    let one = y.one_hot(classes).to_kind(Kind::Float);
    let soft = &one * (1.0 - share) + one.index_select(0, &perm) * share;
    (mixed, soft)
}

/// Rescales gradients to a global norm on the device (no host sync).
fn clip_grad_norm(params: &[Tensor], max_norm: f64) {
    tch::no_grad(|| {
        let grads: Vec<Tensor> = params
            .iter()
            .map(|p| p.grad())
            .filter(|g| g.defined())
            .collect();
        if grads.is_empty() {
            return;
        }
        let sq: Vec<Tensor> = grads
            .iter()
            .map(|g| g.to_kind(Kind::Float).pow_tensor_scalar(2).sum(Kind::Float))
            .collect();
        let norm = Tensor::stack(&sq, 0).sum(Kind::Float).sqrt();
        let coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
        for g in &grads {
            let _ = g.shallow_clone().g_mul_(&coef.to_kind(g.kind()));
        }
    });
}

/// The parameter groups of everything but Muon's filters, with the plan's
/// multipliers (BN-bias lr scaling, no wd on BN and biases, Muon's head lr).
pub(crate) fn optimizer_groups(o: &OptimPlan, net: &Net) -> Vec<Group> {
    let pg = net.param_groups();
    let wd_mult = if o.no_wd_bn_bias { 0.0 } else { 1.0 };
    let mut groups = Vec::new();
    match &o.muon {
        // airbench passes weight_decay = wd / lr to every SGD group, so each
        // decays by the same wd per step whatever its lr: the head included.
        Some(m) => groups.push(Group::with_mults(
            pg.non_filter_weights(),
            m.head_lr_mult,
            1.0 / m.head_lr_mult,
        )),
        None => groups.push(Group::new(
            pg.weights.iter().map(Tensor::shallow_clone).collect(),
        )),
    }
    groups.push(Group::with_mults(pg.bn_weights, 1.0, wd_mult));
    groups.push(Group::with_mults(
        pg.bn_biases,
        o.bn_bias_mult,
        wd_mult / o.bn_bias_mult,
    ));
    if !o.whiten_bias.as_ref().is_some_and(|b| b.own_schedule) {
        groups.push(whiten_bias_group(o, net));
    }
    groups.push(Group::with_mults(pg.conv_biases, 1.0, wd_mult));
    groups.retain(|g| !g.params.is_empty());
    groups
}

pub(crate) fn whiten_bias_group(o: &OptimPlan, net: &Net) -> Group {
    let wd = if o.no_wd_bn_bias { 0.0 } else { 1.0 };
    Group::with_mults(net.param_groups().whiten_bias, 1.0, wd)
}

/// The optimiser for `groups`, of the plan's family.
fn build_optimizer(o: &OptimPlan, groups: Vec<Group>) -> Box<dyn Optimizer> {
    let (mu, wd) = (o.momentum, o.weight_decay);
    match o.family {
        Family::Lars { trust } => Box::new(optim::Lars::new(groups, mu, wd, trust, false)),
        Family::Lamb => Box::new(optim::Lamb::new(groups, (0.9, 0.999), 1e-6, wd)),
        Family::AdamW => Box::new(optim::AdamW::new(groups, (0.9, 0.999), 1e-8, wd)),
        Family::SgdPage => Box::new(optim::SgdPage::new(groups, mu, wd)),
        Family::SgdTorch => Box::new(optim::SgdTorch::new(groups, mu, wd, mu > 0.0)),
    }
}
