//! One training run, decided before its first step and then a short loop:
//! prepare the data → build the net (whitening), optimisers and averager →
//! warm kernels → epochs of steps, each epoch evaluated when due → summary.
//!
//! Clocks (TRICKS.md section 5): each stage's stopwatch writes its own clock,
//! every boundary device-synchronised; the conventions are sums of them:
//! - prep_s: normalise, pad and move the data;
//! - whiten_s: the whitening basis;
//! - hlb_s: the training loop of each epoch (hlb's clock);
//! - eval_s: every evaluation pass;
//! - dawn_s = prep_s + whiten_s + hlb_s (DAWNBench, as Page times it);
//! - airbench_s = whiten_s + hlb_s + the final (TTA) evaluation.

use super::build::{Averager, Optimisers, build_net, warm_kernels};
use super::eval::{evaluate, time_on};
use super::prepare::{Batches, Layout, Source, prepare};
use super::step::{StepMetrics, Trainee};
use super::{Control, Flow, Outcome, Trainer};
use crate::data::Dataset;
use crate::events::{Clocks, EpochRow, Event, RunSummary};
use crate::model::Net;
use crate::plan::{PlannedRun, RunPlan, StepRates};
use crate::util::device::{device_label, parse_device};
use crate::util::native::{self, Rng};
use anyhow::{Result, bail};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tch::{Device, nn};

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

    /// The run's data: the plan's per-class subset of the spec's data set.
    fn data_of(&mut self, run: &PlannedRun) -> Result<Arc<Dataset>> {
        let full = self.dataset(&run.spec.data)?;
        let per = |n: usize| (n > 0).then_some(n);
        let (train, test) = (run.plan.data.train_per_class, run.plan.data.test_per_class);
        Ok(if train > 0 || test > 0 {
            Arc::new(full.subset(per(train), per(test)))
        } else {
            full
        })
    }
}

impl Trainer for TchTrainer {
    fn device_name(&self) -> String {
        self.label.clone()
    }

    fn run(
        &mut self,
        run: &PlannedRun,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let data = self.data_of(run)?;
        let device = match &run.spec.device {
            Some(d) => parse_device(d)?,
            None => self.device,
        };
        let src = Source::new(&data)?;
        let n = src.train_len();
        let bs = run.plan.batch_size as i64;
        if bs > n {
            bail!(
                "batch_size {bs} is larger than the {n} training images: lower batch_size or use more data"
            );
        }
        Run {
            plan: &run.plan,
            run,
            src: &src,
            device,
            label: self.label.clone(),
            layout: Layout::of(&run.plan),
            rng: Rng::new(device, run.spec.seed),
            rates: run.plan.rates(n as u64),
        }
        .train(
            run.config.to_json(run.spec.seed, &data.name, &data.hash),
            ctl,
            emit,
        )
    }

    fn warm_up(&mut self, run: &PlannedRun, ctl: &dyn Control) -> Option<String> {
        let warm = warm_up_run(run, self.dataset(&run.spec.data).ok()?.classes.len());
        let t = Instant::now();
        // A run that cannot start says why itself; its warm-up stays quiet.
        self.run(&warm, ctl, &mut |_| {}).ok()?;
        Some(format!(
            "warm-up on {}: one training step of {} images and one eval batch of `{}`, {:.2} s, untimed and discarded",
            self.label,
            warm.plan.batch_size,
            run.spec.id.variant,
            t.elapsed().as_secs_f64()
        ))
    }
}

/// Images per class the discarded warm-up trains and evaluates on.
const WARM_UP_PER_CLASS: usize = 8;

/// The discarded warm-up: one step and one eval batch of a small batch of
/// the run's own net, precision and layout. It pays the process's one-time
/// costs (threads, allocator, library initialisation), which do not depend
/// on the batch; the run's own kernel selection is `cudnn_benchmark`'s
/// warm-up inside it. At full width on a CPU a full-size step would cost
/// seconds (26 s of a 103 s airbench94 run on 5,120 images) and buy nothing more.
pub fn warm_up_run(run: &PlannedRun, classes: usize) -> PlannedRun {
    let mut w = run.clone();
    let p: &mut RunPlan = &mut w.plan;
    let per = WARM_UP_PER_CLASS;
    let images = per * classes.max(1);
    let splits = p.net.bn.ghost_splits.max(1) as usize * p.step.accum.max(1) as usize;
    // The largest multiple of the ghost-BN splits that fits the images.
    p.batch_size = (images / splits).max(1) * splits;
    p.epochs = 1.0;
    p.data.train_per_class = per.max(p.batch_size.div_ceil(classes.max(1)));
    p.data.test_per_class = per;
    p.eval.batch = images;
    p.precision.cudnn_benchmark = false;
    if let crate::model::Whitening::Page { images, .. }
    | crate::model::Whitening::Airbench { images, .. } = &mut p.net.whitening
    {
        *images = (*images).min(images_for_whitening(per, classes));
    }
    w
}

fn images_for_whitening(per: usize, classes: usize) -> usize {
    (per * classes).max(2)
}

/// The run being trained, and everything decided for it up front.
struct Run<'a> {
    plan: &'a RunPlan,
    run: &'a PlannedRun,
    src: &'a Source,
    device: Device,
    label: String,
    layout: Layout,
    /// Every data-side draw of the run (never libtorch's shared defaults).
    rng: Rng,
    /// Every step's learning rates.
    rates: StepRates,
}

/// Seconds of a stage, device-synchronised at both ends.
fn timed<T>(dev: Device, f: impl FnOnce() -> T) -> (T, f64) {
    sync(dev);
    let t = Instant::now();
    let out = f();
    sync(dev);
    (out, t.elapsed().as_secs_f64())
}

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

/// What one epoch of training steps produced.
struct EpochTrain {
    steps: u64,
    loss: f64,
    acc: f64,
    loader_s: f64,
}

impl Run<'_> {
    fn train(
        &self,
        config: serde_json::Value,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let (plan, spec, dev) = (self.plan, &self.run.spec, self.device);
        let wall = Instant::now();
        if dev.is_cuda() {
            tch::Cuda::cudnn_set_benchmark(plan.precision.cudnn_benchmark);
        }
        let total = self.rates.total;
        emit(Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            config: Arc::new(config),
            total_steps: total,
            total_epochs: plan.epochs,
            target_acc: spec.target_acc,
            device: self.label.clone(),
            reference: spec.reference.clone(),
        });

        let mut clocks = Clocks::default();
        let (data, prep_s) = timed(dev, || prepare(plan, self.src, dev));
        clocks.prep_s = prep_s;
        let vs = nn::VarStore::new(dev);
        let (built, whiten_s) = timed(dev, || {
            native::with_seeded_inits(dev, spec.seed, || {
                build_net(plan, self.src, &vs, self.layout, &self.rng)
            })
        });
        let (net, nc) = built?;
        clocks.whiten_s = whiten_s;
        let mut opt = Optimisers::new(plan, &net, &self.rates);
        let mut avg = Averager::new(plan, &vs, &nc, self.layout)?;
        if plan.precision.cudnn_benchmark {
            let shape = [plan.batch_size as i64, 3, self.src.h, self.src.w];
            let (live, classes) = (&avg.live, self.src.classes);
            timed(dev, || {
                warm_kernels(&self.rng, &net, &mut opt, live, shape, classes, self.layout)
            });
        }
        let mut batches = Batches::new(
            plan,
            &data,
            self.src,
            &self.rng,
            self.layout,
            dev,
            spec.seed,
        );
        let mut metrics = StepMetrics::new(dev);
        let (mut step, mut to_target, mut last_acc) = (0u64, None, (0.0, 0.0));
        let mut final_train_loss = f64::NAN;
        let epochs = plan.epochs.ceil() as usize;

        for epoch in 0..epochs {
            batches.begin_epoch(epoch)?;
            let steps_now = (total - step).min(self.rates.per_epoch);
            let (tr, secs) = timed(dev, || {
                self.train_epoch(
                    epoch,
                    steps_now,
                    &mut step,
                    &mut batches,
                    &net,
                    &mut opt,
                    &mut avg,
                    &mut metrics,
                    ctl,
                    emit,
                )
            });
            let Some(tr) = tr? else {
                return Ok(Outcome::Cancelled);
            };
            if tr.steps == 0 {
                break;
            }
            clocks.hlb_s += secs;
            clocks.loader_s += tr.loader_s;
            final_train_loss = tr.loss;
            let last = epoch + 1 == epochs || step >= total;
            if last {
                avg.finish();
            }
            let due = last || (epoch + 1).is_multiple_of(plan.eval.every);
            let (accs, eval_s) = if due {
                let size = batches
                    .small()
                    .and(plan.data.progressive.as_ref())
                    .and_then(|p| p.eval_size());
                let net = avg.eval_net(&net);
                timed(dev, || {
                    evaluate(
                        net,
                        &data.test_x,
                        &data.test_y,
                        &plan.eval,
                        self.layout,
                        size,
                    )
                })
            } else {
                ((f64::NAN, f64::NAN), 0.0)
            };
            clocks.eval_s += eval_s;
            if due {
                last_acc = accs;
                if last {
                    clocks.airbench_s = clocks.whiten_s + clocks.hlb_s + eval_s;
                }
                let headline = if plan.eval.tta_level > 0 {
                    accs.1
                } else {
                    accs.0
                };
                if to_target.is_none() && headline >= spec.target_acc {
                    let secs = time_on(plan.clock, &clocks, eval_s, wall.elapsed().as_secs_f64());
                    to_target = Some((secs, epoch + 1));
                }
            }
            emit(Event::Epoch {
                run: spec.id.clone(),
                row: EpochRow {
                    epoch: epoch + 1,
                    steps: step,
                    train_loss: tr.loss,
                    train_acc: tr.acc,
                    test_acc: accs.0,
                    test_acc_tta: (due && plan.eval.tta_level > 0).then_some(accs.1),
                    train_s: secs,
                    eval_s,
                    images_per_s: tr.steps as f64 * plan.batch_size as f64 / secs.max(1e-9),
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
            time_to_target_s: to_target.map(|t| t.0),
            epoch_to_target: to_target.map(|t| t.1),
            epochs: plan.epochs,
            steps: step,
            peak_mem_bytes: peak_rss(),
            final_train_loss,
            device: self.label.clone(),
        }))
    }

    /// One epoch of `steps` training steps; `None` when the run was cancelled.
    #[allow(clippy::too_many_arguments)] // the loop's state, each owned by the caller across epochs
    fn train_epoch(
        &self,
        epoch: usize,
        steps: u64,
        step: &mut u64,
        batches: &mut Batches,
        net: &Net,
        opt: &mut Optimisers,
        avg: &mut Averager,
        metrics: &mut StepMetrics,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Option<EpochTrain>> {
        let plan = self.plan;
        let r = &self.rates;
        let trainee = Trainee {
            plan,
            net,
            rng: &self.rng,
            layout: self.layout,
            classes: self.src.classes,
        };
        let cutmix = plan
            .loss
            .cutmix
            .as_ref()
            .filter(|c| c.active_at(epoch, plan.epochs));
        let bn = net.bn_params();
        let (mut loader_s, mut chunk) = (0.0, (Instant::now(), 0i64));
        metrics.reset_epoch();
        for i in 0..steps {
            if ctl.poll() == Flow::Cancel {
                return Ok(None);
            }
            let s = *step;
            if r.whiten_bias_steps == Some(s) {
                // The references detach the bias from this step on.
                net.set_whiten_bias_trainable(false);
            }
            let (x, y, secs) = batches.batch(i as i64);
            loader_s += secs;
            let (loss, correct) = trainee.forward_backward(&x, &y, cutmix);
            if let Some(max_norm) = plan.step.clip_norm {
                // The gradients carry the loss scale; the limit is in mean-loss units.
                let params = net.param_groups().all_trainable();
                crate::optim::clip_grad_norm(&params, max_norm * plan.loss.scale);
            }
            opt.step(plan, s, r, plan.step.zero_grad_none);
            *step += 1;
            avg.after_step(*step, i, epoch, r.total);
            let at = epoch as f64 + (i + 1) as f64 / r.per_epoch as f64;
            metrics.push(
                *step,
                at,
                plan.optim.lr * r.main[s as usize],
                loss,
                &correct,
            );
            chunk.1 += plan.batch_size as i64;
            let every = plan.metrics_every;
            if (every > 0 && step.is_multiple_of(every)) || i + 1 == steps {
                let rows = metrics.read_back(&bn)?;
                let secs = chunk.0.elapsed().as_secs_f64().max(1e-9);
                emit(Event::Steps {
                    run: self.run.spec.id.clone(),
                    rows,
                    images_per_s: chunk.1 as f64 / secs,
                });
                chunk = (Instant::now(), 0);
            }
        }
        let images = steps as f64 * plan.batch_size as f64;
        Ok(Some(EpochTrain {
            steps,
            loss: metrics.loss_sum.double_value(&[]) / steps.max(1) as f64,
            acc: metrics.correct.double_value(&[]) / images.max(1.0),
            loader_s,
        }))
    }
}
