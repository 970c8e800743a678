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

use super::pipeline::{Augment, CpuLoader, augment_epoch, normalise, reflect_pad, to_tensor};
use super::{Control, Flow, Outcome, Trainer};
use crate::config::{Override, RunSpec};
use crate::data::Dataset;
use crate::events::{Clocks, EpochRow, Event, RunSummary, StepRow};
use crate::model::{Activation, Net, NetConfig, Whitening};
use crate::optim::{self, Group, Optimizer};
use crate::recipe::{OptimizerKind, RunConfig, ScheduleKind};
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

/// A device name's syntax only: `matrix show` of a GPU matrix works on a CPU machine.
pub fn parse_device_name(s: &str) -> Result<Device> {
    Ok(match s {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => match other
            .strip_prefix("cuda:")
            .and_then(|i| i.parse::<usize>().ok())
        {
            Some(i) => Device::Cuda(i),
            None => bail!("unknown device `{s}`: use cpu, cuda or cuda:N"),
        },
    })
}

/// A device this machine has.
pub fn parse_device(s: &str) -> Result<Device> {
    let d = parse_device_name(s)?;
    if let Device::Cuda(i) = d {
        if !tch::Cuda::is_available() {
            bail!(
                "device `{s}` requested but CUDA is not available here (`tricklab doctor` shows why); use cpu instead"
            );
        }
        let n = tch::Cuda::device_count() as usize;
        if i >= n {
            bail!("device `{s}` requested but only {n} CUDA device(s) exist");
        }
    }
    Ok(d)
}

impl TchTrainer {
    pub fn new(device: &str) -> Result<TchTrainer> {
        Ok(TchTrainer {
            device: parse_device(device)?,
            label: crate::doctor::device_label(device),
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
        let cfg = crate::recipe::resolve(&spec.recipe, &spec.overrides)?;
        let full = self.dataset(&spec.data)?;
        let per = |n: usize| (n > 0).then_some(n);
        let data = if cfg.train_per_class > 0 || cfg.test_per_class > 0 {
            Arc::new(full.subset(per(cfg.train_per_class), per(cfg.test_per_class)))
        } else {
            full
        };
        let device = match &spec.device {
            Some(d) => parse_device(d)?,
            None => self.device,
        };
        Run::new(cfg, spec, &data, device, self.label.clone())?.train(spec, ctl, emit)
    }

    fn warm_up(&mut self, spec: &RunSpec, ctl: &dyn Control) -> Option<String> {
        // airbench throws one run away; a fifth of an epoch reaches every kernel
        // a full run uses (train step, optimiser, augmentation, TTA eval).
        let mut w = spec.clone();
        w.overrides.push(Override::Set {
            key: "epochs".into(),
            value: WARM_UP_EPOCHS.to_string(),
        });
        let t = Instant::now();
        // A run that cannot start says why itself; its warm-up stays quiet.
        self.run(&w, ctl, &mut |_| {}).ok()?;
        Some(format!(
            "warm-up on {}: {WARM_UP_EPOCHS} epoch of `{}` in {:.1} s, untimed and discarded",
            self.label,
            spec.id.variant,
            t.elapsed().as_secs_f64()
        ))
    }
}

/// Length of the discarded warm-up run, in epochs.
pub const WARM_UP_EPOCHS: f64 = 0.2;

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Page's DAWNBench schedule ends on this lr (mean-loss units) at epoch 30 of 35.
pub const DAWN_TAIL_LR: f64 = 0.005;

/// The learning-rate multiplier at a fractional epoch.
pub fn lr_multiplier(cfg: &RunConfig, epoch: f64) -> f64 {
    let e = cfg.epochs;
    let p = cfg.peak_epoch * e;
    let knots: Vec<(f64, f64)> = match cfg.schedule {
        ScheduleKind::Page => vec![(0.0, 0.0), (p, 1.0), (e, cfg.final_lr_frac)],
        // Page parts 1-3: the knot at epoch 30 of 35 is an absolute lr (0.005 at
        // both bs 128 / lr 0.1 and bs 512 / lr 0.44), not a fraction of the peak.
        ScheduleKind::Dawn => vec![
            (0.0, 0.0),
            (p, 1.0),
            (e * 30.0 / 35.0, (DAWN_TAIL_LR / cfg.lr).min(1.0)),
            (e, 0.0),
        ],
        ScheduleKind::Airbench => vec![(0.0, 0.2), (p, 1.0), (e, cfg.final_lr_frac)],
        ScheduleKind::Onecycle => vec![(0.0, 0.0), (p, 1.0), (e, cfg.final_lr_frac)],
        ScheduleKind::Linear => vec![(0.0, 1.0), (e, 0.0)],
        ScheduleKind::Constant => vec![(0.0, 1.0), (e, 1.0)],
    };
    let mut sched = optim::Piecewise::new(knots).unwrap_or_else(|_| optim::Piecewise {
        knots: vec![(0.0, 1.0)],
    });
    if cfg.on("ema") {
        // Page B8: [0, ep/5, ep-2] -> [0, 1, floor], flat at the floor after.
        let floor_epochs = cfg.num("ema", "floor_epochs");
        let floor = cfg.num("ema", "floor");
        if cfg.schedule == ScheduleKind::Page && floor_epochs < e {
            let end = (e - floor_epochs).max(p + 1e-9);
            sched = optim::Piecewise {
                knots: vec![(0.0, 0.0), (p, 1.0), (end, floor), (e, floor)],
            };
        } else {
            sched = sched.with_floor(floor_epochs, floor);
        }
    }
    let mut m = sched.at(epoch);
    if cfg.on("warmup") {
        let w = cfg.num("warmup", "epochs");
        if w > 0.0 && epoch < w {
            m *= epoch / w;
        }
    }
    m
}

pub fn net_config(cfg: &RunConfig, classes: i64) -> NetConfig {
    let mut nc = NetConfig::default_for(cfg.arch).scaled(cfg.width_mult);
    nc.act = if cfg.on("celu") {
        Activation::Celu {
            alpha: cfg.num("celu", "alpha"),
        }
    } else if cfg.on("gelu") {
        Activation::Gelu
    } else {
        Activation::Relu
    };
    nc.bn.ghost_splits = if cfg.on("ghost_bn") {
        cfg.num("ghost_bn", "splits") as i64
    } else {
        1
    };
    nc.bn.frozen_scale = cfg.on("frozen_bn_scale");
    (nc.bn.momentum, nc.bn.eps) = if cfg.on("bn_stats") {
        (cfg.num("bn_stats", "momentum"), cfg.num("bn_stats", "eps"))
    } else {
        (0.1, 1e-5)
    };
    nc.bn.weight_init_one = cfg.on("bn_weight_init_one");
    nc.pool_before_act = cfg.on("pool_before_act");
    nc.pool_before_bn = cfg.on("pool_before_bn");
    nc.residual = cfg.on("residual");
    nc.logit_scale = if cfg.on("logit_scale") {
        cfg.num("logit_scale", "scale")
    } else {
        1.0
    };
    nc.whitening = if !cfg.on("whitening") {
        Whitening::Off
    } else {
        let (eps, images) = (
            cfg.num("whitening", "eps"),
            cfg.num("whitening", "images") as usize,
        );
        if cfg.text("whitening", "style") == "page" {
            Whitening::Page { eps, images }
        } else {
            Whitening::Airbench {
                eps,
                images,
                negate: cfg.on("whitening_negate"),
                bias: cfg.on("whitening_bias"),
                centred: cfg.text("whitening", "style") == "hlb",
                bias_uniform: cfg.on("whitening_bias")
                    && cfg.text("whitening_bias", "init") == "uniform",
            }
        }
    };
    nc.dirac_init = cfg.on("dirac_init");
    nc.prep_bn_relu = cfg.on("prep_bn_relu");
    nc.conv_bias = !cfg.on("no_bias_before_bn");
    nc.num_classes = classes;
    nc
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

struct Run {
    cfg: RunConfig,
    device: Device,
    label: String,
    data_name: String,
    data_hash: String,
    classes: i64,
    train_u8: Tensor,
    train_y: Tensor,
    test_u8: Tensor,
    test_y: Tensor,
    h: i64,
    w: i64,
}

impl Run {
    fn new(
        cfg: RunConfig,
        _spec: &RunSpec,
        data: &Dataset,
        device: Device,
        label: String,
    ) -> Result<Run> {
        if data.train.is_empty() || data.test.is_empty() {
            bail!("data set `{}` has an empty split", data.name);
        }
        let (c, h, w) = (data.channels, data.height, data.width);
        let (train_u8, train_y) = to_tensor(&data.train, c, h, w, Device::Cpu);
        let (test_u8, test_y) = to_tensor(&data.test, c, h, w, Device::Cpu);
        Ok(Run {
            cfg,
            device,
            label,
            data_name: data.name.clone(),
            data_hash: data.hash.clone(),
            classes: data.classes.len() as i64,
            train_u8,
            train_y,
            test_u8,
            test_y,
            h: h as i64,
            w: w as i64,
        })
    }

    /// Half-precision weights and activations (BN stays fp32): CUDA only.
    fn half(&self) -> Option<Kind> {
        let kind = if self.cfg.text("fp16", "dtype") == "bf16" {
            Kind::BFloat16
        } else {
            Kind::Half
        };
        (self.cfg.on("fp16") && self.device.is_cuda()).then_some(kind)
    }

    fn train(
        &self,
        spec: &RunSpec,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let cfg = &self.cfg;
        let dev = self.device;
        let wall = Instant::now();
        tch::manual_seed(spec.seed as i64);
        if dev.is_cuda() {
            tch::Cuda::manual_seed_all(spec.seed);
            tch::Cuda::cudnn_set_benchmark(cfg.on("cudnn_benchmark"));
        }
        let n = self.train_y.size()[0];
        let bs = cfg.batch_size as i64;
        if bs > n {
            bail!(
                "batch_size {bs} is larger than the {n} training images: lower batch_size or use more data"
            );
        }
        let steps_per_epoch = (n / bs) as u64; // drop_last, as Page and airbench do
        let total_steps = (cfg.epochs * steps_per_epoch as f64).ceil() as u64;
        let n_epochs = cfg.epochs.ceil() as usize;
        let mut config = cfg.to_json(spec.seed, &self.data_name, &self.data_hash);
        if !dev.is_cuda() {
            // These change nothing on a CPU; the manifest says so instead of implying a speedup.
            let inert: Vec<&str> = ["fp16", "amp", "channels_last", "cudnn_benchmark"]
                .into_iter()
                .filter(|t| cfg.on(t))
                .collect();
            config["not_applied_on_device"] = serde_json::json!(inert);
        }
        emit(Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            config: Arc::new(config),
            total_steps,
            total_epochs: cfg.epochs,
            target_acc: spec.target_acc,
            device: self.label.clone(),
        });

        // Data preparation.
        let t = Instant::now();
        let pad = if cfg.on("random_crop") {
            cfg.num("random_crop", "pad") as i64
        } else {
            0
        };
        let resident = cfg.on("gpu_data");
        let once = cfg.on("preprocess_once");
        let data_dev = if resident { dev } else { Device::Cpu };
        let train_src = self.train_u8.to_device(data_dev);
        let train_ready = if once {
            reflect_pad(&normalise(&train_src), pad)
        } else {
            train_src.shallow_clone()
        };
        let train_y = self.train_y.to_device(data_dev);
        let test_x = normalise(&self.test_u8.to_device(dev));
        let test_y = self.test_y.to_device(dev);
        sync(dev);
        let prep_s = t.elapsed().as_secs_f64();

        // Model, whitening, precision, optimiser.
        let vs = nn::VarStore::new(dev);
        let nc = net_config(cfg, self.classes);
        let net = Net::try_new(&vs.root(), &nc).context("building the network")?;
        let t = Instant::now();
        if cfg.on("whitening") {
            let k = (cfg.num("whitening", "images") as i64).min(n);
            let imgs = normalise(&self.train_u8.narrow(0, 0, k).to_device(dev));
            net.init_whitening(&imgs)?;
        }
        sync(dev);
        let whiten_s = t.elapsed().as_secs_f64();
        if cfg.on("muon") && cfg.arch == crate::model::Arch::Airbench {
            net.init_head_unit_std();
        }
        let kind = self.half().unwrap_or(Kind::Float);
        if let Some(k) = self.half() {
            net.cast_weights(k);
        }
        let cl = cfg.on("channels_last") && dev.is_cuda();
        if cl {
            tch::no_grad(|| {
                for p in net.param_groups().conv_filters {
                    let mut p = p;
                    p.set_data(&channels_last(&p));
                }
            });
        }
        let mut opt = build_optimizer(cfg, optimizer_groups(cfg, &net));
        let mut bias_opt = whiten_bias_own_schedule(cfg)
            .then(|| build_optimizer(cfg, vec![whiten_bias_group(cfg, &net)]));
        let muon_lr = cfg.num("muon", "lr");
        let mut filter_opt = if cfg.on("muon") {
            Some(optim::Muon::new(
                vec![Group::new(net.param_groups().conv_filters)],
                cfg.num("muon", "momentum"),
                true,
                cfg.num("muon", "ns_steps") as i64,
            ))
        } else {
            None
        };

        // Averaging: Page's eval-only EMA copy, or airbench's Lookahead.
        let live = optim::float_state(&vs);
        let ema_vs = cfg.on("ema").then(|| nn::VarStore::new(dev));
        let ema_net = match &ema_vs {
            Some(v) => Some(Net::try_new(&v.root(), &nc)?),
            None => None,
        };
        if let (Some(en), Some(k)) = (&ema_net, self.half()) {
            en.cast_weights(k);
        }
        let mut averager = (cfg.on("ema") || cfg.on("lookahead")).then(|| optim::Ema::new(&live));
        let ema_live = ema_vs.as_ref().map(optim::float_state);

        // Two steps on random data outside every clock, as Page's dawn.py does
        // before its timer: kernel selection (cuDNN autotune, oneDNN primitives)
        // for this run's own shapes, which a rung that changes the net or the
        // batch would otherwise pay in its clock. The worker's discarded warm-up
        // run covers the process-wide one-time costs. BN statistics are restored.
        {
            let saved = optim::Ema::new(&live);
            let x = Tensor::randn([bs, 3, self.h, self.w], (kind, dev));
            let x = if cl { channels_last(&x) } else { x };
            let y = Tensor::randint(self.classes, [bs], (Kind::Int64, dev));
            for _ in 0..2 {
                let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y);
                loss.backward();
                opt.zero_grad(true);
            }
            saved.copy_into(&live);
            sync(dev);
        }

        let augment = Augment {
            pad,
            flip: cfg.on("flip"),
            alternating: cfg.on("alternating_flip"),
            cutout: cfg.on("cutout").then(|| cfg.num("cutout", "size") as i64),
            groups: cfg
                .on("group_aug")
                .then(|| cfg.num("group_aug", "max_options") as i64),
        };
        let flip0 = Tensor::randint(2, [n], (Kind::Int64, data_dev)).eq(1);
        let flip0_host: Vec<bool> = if resident {
            Vec::new()
        } else {
            Vec::<bool>::try_from(&flip0).unwrap_or_default()
        };
        let cpu_loader = (!resident).then(|| CpuLoader {
            x: train_ready.shallow_clone(),
            y: train_y.shallow_clone(),
            pre_normalised: once,
            pre_padded: once,
            pad,
            h: self.h,
            w: self.w,
        });
        let mut rng = spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let smoothing = if cfg.on("label_smoothing") {
            cfg.num("label_smoothing", "alpha")
        } else {
            0.0
        };
        let accum = if cfg.on("grad_accum") {
            cfg.num("grad_accum", "steps") as i64
        } else {
            1
        };
        let every = if cfg.on("ema") {
            cfg.num("ema", "every") as u64
        } else {
            cfg.num("lookahead", "every").max(1.0) as u64
        };
        let ema_decay = optim::page_ema_decay(cfg.num("ema", "momentum"), every as usize);
        let metrics_every = cfg.metrics_every.max(1) as u64;
        let bn = net.bn_params();

        let mut clocks = Clocks {
            prep_s,
            whiten_s,
            ..Clocks::default()
        };
        let mut step: u64 = 0;
        let mut pending: Vec<(u64, f64, f64, Tensor)> = Vec::new();
        let mut chunk_start = Instant::now();
        let mut chunk_images = 0i64;
        let mut time_to_target = None;
        let mut epoch_to_target = None;
        let mut last_acc = (0.0, 0.0);
        let mut final_train_loss = f64::NAN;
        let mut whiten_bias_frozen = false;

        for epoch in 0..n_epochs {
            let steps_now = (total_steps - step).min(steps_per_epoch);
            if steps_now == 0 {
                break;
            }
            if cfg.on("whitening_bias")
                && !whiten_bias_frozen
                && epoch as f64 >= cfg.num("whitening_bias", "epochs")
            {
                net.set_whiten_bias_trainable(false);
                whiten_bias_frozen = true;
            }
            let small = cfg.on("progressive_resize")
                && (epoch as f64) < cfg.num("progressive_resize", "until") * cfg.epochs;
            let t_epoch = Instant::now();
            let (epoch_x, perm) = if resident {
                let src = if once {
                    train_ready.shallow_clone()
                } else {
                    reflect_pad(&normalise(&train_ready), pad)
                };
                (
                    Some(augment_epoch(&src, self.h, self.w, &augment, epoch, &flip0)),
                    Tensor::randperm(n, (Kind::Int64, dev)),
                )
            } else {
                (None, Tensor::randperm(n, (Kind::Int64, Device::Cpu)))
            };
            let perm_host: Vec<i64> = if resident {
                Vec::new()
            } else {
                Vec::<i64>::try_from(&perm)?
            };
            let mut loss_sum = Tensor::zeros([], (Kind::Float, dev));
            let mut correct = Tensor::zeros([], (Kind::Int64, dev));
            for s in 0..steps_now as i64 {
                if ctl.poll() == Flow::Cancel {
                    return Ok(Outcome::Cancelled);
                }
                let (x, y) = match &epoch_x {
                    Some(ex) => {
                        let idx = perm.narrow(0, s * bs, bs);
                        (ex.index_select(0, &idx), train_y.index_select(0, &idx))
                    }
                    None => {
                        let idx = &perm_host[(s * bs) as usize..((s + 1) * bs) as usize];
                        cpu_loader.as_ref().expect("cpu loader").batch(
                            idx,
                            &augment,
                            epoch,
                            &flip0_host,
                            &mut rng,
                            dev,
                        )
                    }
                };
                let mut x = if small {
                    let sz = cfg.num("progressive_resize", "start_size") as i64;
                    x.upsample_bilinear2d([sz, sz], false, None, None)
                } else {
                    x
                };
                if let Some(k) = self.half() {
                    x = x.to_kind(k);
                }
                if cl {
                    x = channels_last(&x);
                }
                let frac = epoch as f64 + (s + 1) as f64 / steps_per_epoch as f64;
                let at = epoch as f64 + s as f64 / steps_per_epoch as f64;
                let m = lr_multiplier(cfg, at);
                let lr = cfg.lr * m;
                let cutmix = cfg.on("cutmix")
                    && (epoch as f64) >= cfg.epochs - cfg.num("cutmix", "last_epochs");
                let mut step_loss = Tensor::zeros([], (Kind::Float, dev));
                for (xm, ym) in x.chunk(accum, 0).iter().zip(y.chunk(accum, 0)) {
                    let amp = cfg.on("amp") && dev.is_cuda();
                    // With CutMix the mixed batch is the only forward pass (one BN update per step).
                    let (input, soft) = if cutmix {
                        let (xc, soft) =
                            cutmix_batch(xm, &ym, cfg.num("cutmix", "size") as i64, self.classes);
                        (xc, Some(soft))
                    } else {
                        (xm.shallow_clone(), None)
                    };
                    let logits =
                        tch::autocast(amp, || net.forward_t(&input, true)).to_kind(Kind::Float);
                    let loss = match &soft {
                        Some(soft) => {
                            optim::soft_target_ce(&logits, &optim::smooth_targets(soft, smoothing))
                        }
                        None => optim::label_smoothed_ce(&logits, &ym, smoothing),
                    };
                    (&loss / accum as f64).backward();
                    let _ =
                        correct.g_add_(&logits.argmax(-1, false).eq_tensor(&ym).sum(Kind::Int64));
                    step_loss += loss.detach() / accum as f64;
                }
                if cfg.on("grad_clip") {
                    clip_grad_norm(
                        &net.param_groups().all_trainable(),
                        cfg.num("grad_clip", "max_norm"),
                    );
                }
                opt.step(lr);
                if let Some(f) = filter_opt.as_mut() {
                    f.step(muon_lr * m);
                    f.zero_grad(cfg.on("zero_grad_none"));
                }
                if let Some(b) = bias_opt.as_mut() {
                    b.step(cfg.lr * whiten_bias_lr_multiplier(cfg, at));
                    b.zero_grad(cfg.on("zero_grad_none"));
                }
                opt.zero_grad(cfg.on("zero_grad_none"));
                step += 1;
                if let Some(avg) = averager.as_mut()
                    && step.is_multiple_of(every)
                {
                    if cfg.on("ema") {
                        avg.update(&live, ema_decay);
                    } else {
                        avg.update(
                            &live,
                            optim::lookahead_decay(step as usize, total_steps as usize),
                        );
                        avg.copy_into(&live);
                    }
                }
                let _ = loss_sum.g_add_(&step_loss);
                chunk_images += bs;
                pending.push((step, frac, lr, step_loss));
                if step.is_multiple_of(metrics_every) || s as u64 + 1 == steps_now {
                    let rows = read_back(&mut pending, &bn)?;
                    let secs = chunk_start.elapsed().as_secs_f64().max(1e-9);
                    emit(Event::Steps {
                        run: spec.id.clone(),
                        rows,
                        images_per_s: chunk_images as f64 / secs,
                    });
                    chunk_start = Instant::now();
                    chunk_images = 0;
                }
            }
            sync(dev);
            let train_s = t_epoch.elapsed().as_secs_f64();
            clocks.hlb_s += train_s;
            let train_loss = loss_sum.double_value(&[]) / steps_now as f64;
            let train_acc = correct.double_value(&[]) / (steps_now as f64 * bs as f64);
            final_train_loss = train_loss;

            let last = epoch + 1 == n_epochs || step >= total_steps;
            if cfg.on("lookahead")
                && last
                && let Some(avg) = averager.as_ref()
            {
                // airbench: net <- ema (d = 1) at the final step.
                avg.copy_into(&live);
            }
            let eval_now = last || (epoch + 1) % cfg.eval_every.max(1) == 0;
            let mut test_acc = f64::NAN;
            let mut test_acc_tta = None;
            let mut eval_s = 0.0;
            if eval_now {
                let t = Instant::now();
                let eval_net = match (&ema_net, &averager, &ema_live) {
                    (Some(en), Some(avg), Some(el)) => {
                        avg.copy_into(el);
                        en
                    }
                    _ => &net,
                };
                let level = if cfg.on("tta") {
                    cfg.num("tta", "level") as u8
                } else {
                    0
                };
                let size = if small && !cfg.on("full_size_val") {
                    Some(cfg.num("progressive_resize", "start_size") as i64)
                } else {
                    None
                };
                let (plain, tta) =
                    evaluate(eval_net, &test_x, &test_y, level, self.half(), cl, size);
                sync(dev);
                eval_s = t.elapsed().as_secs_f64();
                clocks.eval_s += eval_s;
                test_acc = plain;
                test_acc_tta = (level > 0).then_some(tta);
                last_acc = (plain, tta);
                if last {
                    clocks.airbench_s = clocks.whiten_s + clocks.hlb_s + eval_s;
                }
                let reached = test_acc_tta.unwrap_or(test_acc);
                if time_to_target.is_none() && reached >= spec.target_acc {
                    time_to_target = Some(clocks.prep_s + clocks.whiten_s + clocks.hlb_s);
                    epoch_to_target = Some(epoch + 1);
                }
            }
            emit(Event::Epoch {
                run: spec.id.clone(),
                row: EpochRow {
                    epoch: epoch + 1,
                    steps: step,
                    train_loss,
                    train_acc,
                    test_acc,
                    test_acc_tta,
                    train_s,
                    eval_s,
                    images_per_s: steps_now as f64 * bs as f64 / train_s.max(1e-9),
                    peak_mem_bytes: peak_rss(),
                },
            });
            if last {
                break;
            }
        }
        clocks.dawn_s = clocks.prep_s + clocks.whiten_s + clocks.hlb_s;
        clocks.wall_s = wall.elapsed().as_secs_f64();
        let level = cfg.on("tta");
        Ok(Outcome::Finished(RunSummary {
            acc: last_acc.0,
            acc_tta: if level { last_acc.1 } else { last_acc.0 },
            clocks,
            time_to_target_s: time_to_target,
            epoch_to_target,
            epochs: cfg.epochs,
            steps: step,
            peak_mem_bytes: peak_rss(),
            final_train_loss,
            device: self.label.clone(),
        }))
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

/// Accuracy without and with TTA at `level`, summed on the device, read once.
fn evaluate(
    net: &Net,
    x: &Tensor,
    y: &Tensor,
    level: u8,
    half: Option<Kind>,
    cl: bool,
    size: Option<i64>,
) -> (f64, f64) {
    tch::no_grad(|| {
        let n = x.size()[0];
        let bs = 500;
        let mut plain = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut tta = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut i = 0;
        while i < n {
            let k = bs.min(n - i);
            let mut xb = x.narrow(0, i, k);
            if let Some(s) = size {
                xb = xb.upsample_bilinear2d([s, s], false, None, None);
            }
            if let Some(h) = half {
                xb = xb.to_kind(h);
            }
            if cl {
                xb = channels_last(&xb);
            }
            let yb = y.narrow(0, i, k);
            let fwd = |t: &Tensor| net.forward_t(t, false).to_kind(Kind::Float);
            let logits = fwd(&xb);
            let _ = plain.g_add_(&logits.argmax(-1, false).eq_tensor(&yb).sum(Kind::Int64));
            if level > 0 {
                let l = optim::tta_logits(&fwd, &xb, level);
                let _ = tta.g_add_(&l.argmax(-1, false).eq_tensor(&yb).sum(Kind::Int64));
            }
            i += k;
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
fn cutmix_batch(x: &Tensor, y: &Tensor, size: i64, classes: i64) -> (Tensor, Tensor) {
    let (n, _, h, w) = x.size4().expect("NCHW");
    let dev = x.device();
    let perm = Tensor::randperm(n, (Kind::Int64, dev));
    let y0 = Tensor::randint(h - size + 1, [n], (Kind::Int64, dev));
    let x0 = Tensor::randint(w - size + 1, [n], (Kind::Int64, dev));
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

/// The parameter groups of everything but Muon's filters, with the tricks'
/// multipliers (BN-bias lr scaling, no wd on BN and biases, Muon's head lr).
pub(crate) fn optimizer_groups(cfg: &RunConfig, net: &Net) -> Vec<Group> {
    let pg = net.param_groups();
    let bias_mult = if cfg.on("bn_bias_lr_scale") {
        cfg.num("bn_bias_lr_scale", "mult")
    } else {
        1.0
    };
    let no_bn_wd = cfg.on("no_wd_bn_bias");
    let mut groups = Vec::new();
    if cfg.on("muon") {
        // airbench passes weight_decay = wd / lr to every SGD group, so each
        // decays by the same wd per step whatever its lr: the head included.
        let head_mult = cfg.num("muon", "head_lr_mult");
        groups.push(Group::with_mults(
            pg.non_filter_weights(),
            head_mult,
            1.0 / head_mult,
        ));
    } else {
        groups.push(Group::new(
            pg.weights.iter().map(Tensor::shallow_clone).collect(),
        ));
    }
    groups.push(Group::with_mults(
        pg.bn_weights.iter().map(Tensor::shallow_clone).collect(),
        1.0,
        if no_bn_wd { 0.0 } else { 1.0 },
    ));
    groups.push(Group::with_mults(
        pg.bn_biases.iter().map(Tensor::shallow_clone).collect(),
        bias_mult,
        if no_bn_wd { 0.0 } else { 1.0 / bias_mult },
    ));
    if !whiten_bias_own_schedule(cfg) {
        groups.push(whiten_bias_group(cfg, net));
    }
    groups.push(Group::with_mults(
        pg.conv_biases.iter().map(Tensor::shallow_clone).collect(),
        1.0,
        if no_bn_wd { 0.0 } else { 1.0 },
    ));
    groups.retain(|g| !g.params.is_empty());
    groups
}

/// airbench94_muon decays the whitening bias's lr on its own clock.
fn whiten_bias_own_schedule(cfg: &RunConfig) -> bool {
    cfg.on("whitening_bias") && cfg.text("whitening_bias", "schedule") == "own"
}

pub(crate) fn whiten_bias_group(cfg: &RunConfig, net: &Net) -> Group {
    let wd = if cfg.on("no_wd_bn_bias") { 0.0 } else { 1.0 };
    Group::with_mults(net.param_groups().whiten_bias, 1.0, wd)
}

/// The whitening bias's lr multiplier under its own schedule: 1 → 0 linearly
/// over its training epochs (airbench94_muon: × (1 − step/75)).
pub fn whiten_bias_lr_multiplier(cfg: &RunConfig, epoch: f64) -> f64 {
    let e = cfg.num("whitening_bias", "epochs");
    if e <= 0.0 {
        0.0
    } else {
        (1.0 - epoch / e).max(0.0)
    }
}

/// The optimiser for `groups`, of the run's optimiser family.
fn build_optimizer(cfg: &RunConfig, groups: Vec<Group>) -> Box<dyn Optimizer> {
    let wd = if cfg.on("weight_decay_on") {
        cfg.weight_decay
    } else {
        0.0
    };
    let mu = if cfg.on("nesterov") {
        cfg.momentum
    } else {
        0.0
    };
    if cfg.on("lars") {
        Box::new(optim::Lars::new(
            groups,
            mu,
            wd,
            cfg.num("lars", "trust"),
            false,
        ))
    } else if cfg.on("lamb") {
        Box::new(optim::Lamb::new(groups, (0.9, 0.999), 1e-6, wd))
    } else if cfg.on("adamw") {
        Box::new(optim::AdamW::new(groups, (0.9, 0.999), 1e-8, wd))
    } else {
        match cfg.optimizer {
            OptimizerKind::SgdPage if !cfg.on("muon") => {
                Box::new(optim::SgdPage::new(groups, mu, wd))
            }
            _ => Box::new(optim::SgdTorch::new(groups, mu, wd, mu > 0.0)),
        }
    }
}
