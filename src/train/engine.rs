//! One training run, decided before its first step and then a short loop:
//! prepare the data → build the net (whitening), optimisers and averager →
//! warm kernels → epochs of steps, each epoch evaluated when due → summary.
//!
//! Clocks (TRICKS.md section 5): each stage's stopwatch writes its own clock,
//! every boundary device-synchronised; the conventions are sums of them:
//! - prep_s: move the data to the device, then normalise and pad it (the
//!   second part alone: preprocess_s);
//! - build_s: building and initialising the net, the whitening fit left
//!   out (Page's new_dawn.py builds its net inside its timer, airbench and
//!   hlb theirs before theirs);
//! - whiten_s: the whitening basis;
//! - hlb_s: the training loop of each epoch (hlb's clock);
//! - eval_s: every evaluation pass;
//! - dawn_s = prep_s + build_s + whiten_s + hlb_s (DAWNBench, as Page's
//!   new_dawn.py times it);
//! - airbench_s = preprocess_s + whiten_s + hlb_s + the final (TTA)
//!   evaluation: airbench's first epoch normalises, flips and pads the
//!   uploaded set inside its timer, and its loader uploaded before it.
//!
//! `Clock::stages` (config.rs) lists each convention's stages and
//! `eval::time_on` sums them; the golden trajectories record which stages
//! the references' own timers cover, and a test compares the two.
//!
//! A run of world size N is one of N rank processes, each with its own
//! device and this same loop (data-parallel, as DDP runs it): every rank
//! draws the same global batch and trains its 1/N slice of it, the
//! gradients are averaged through c10d before the optimiser, and each stage
//! boundary is a barrier, so rank 0's clocks time the whole gang.

use super::build::{Averager, Optimisers, finish_net, fit_whitening, new_net, warm_kernels};
use super::eval::{evaluate, over_ranks, time_on};
use super::graph::StepGraphs;
use super::prepare::{Batches, Layout, Prepared, Source, preprocess, upload};
use super::replay::{Injection, Named, inject_weights};
use super::stages::{Stage, StageClock};
use super::step::{Mix, StepMetrics, Trainee};
use super::stream::{Fed, StreamFeed, check_trained, evaluate_stream};
use super::warm::warm_up_run;
use super::{Control, Flow, Outcome, Trainer};
use crate::config::{Clock, DdpTimes};
use crate::data::Dataset;
use crate::data::stream::StreamData;
use crate::dist::group::Collective;
use crate::dist::group::GradSync;
use crate::events::LogLevel;
use crate::events::{Clocks, EpochRow, Event, RunSummary};
use crate::model::{Net, NetConfig};
use crate::native::{self, Rng};
use crate::plan::{PlannedRun, RunPlan, StepRates};
use crate::util::device::{device_label, parse_device};
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tch::{Device, Tensor, nn};

pub struct TchTrainer {
    pub(super) device: Device,
    label: String,
    data: HashMap<String, Arc<Dataset>>,
    /// Streaming sources by spec: an image folder is indexed once a process.
    streams: HashMap<String, StreamData>,
    /// Loads a data set from its spec; tests swap in synthetic data.
    loader: fn(&str) -> Result<Dataset>,
    /// Where a finished run's weights go (safetensors), if anywhere.
    pub save_weights: Option<std::path::PathBuf>,
    /// A golden trajectory's starting weights and draws, replayed instead
    /// of the run's own (tests; `None` in every real run).
    pub inject: Option<Injection>,
}

impl TchTrainer {
    pub fn new(device: &str) -> Result<TchTrainer> {
        Ok(TchTrainer {
            device: parse_device(device)?,
            label: device_label(device),
            data: HashMap::new(),
            streams: HashMap::new(),
            loader: crate::data::load,
            save_weights: None,
            inject: None,
        })
    }

    /// A trainer whose data specs resolve through `loader` (tests).
    pub fn with_loader(device: &str, loader: fn(&str) -> Result<Dataset>) -> Result<TchTrainer> {
        Ok(TchTrainer {
            loader,
            ..TchTrainer::new(device)?
        })
    }

    pub(super) fn dataset(&mut self, spec: &str) -> Result<Arc<Dataset>> {
        if let Some(d) = self.data.get(spec) {
            return Ok(d.clone());
        }
        let d = Arc::new((self.loader)(spec)?);
        self.data.insert(spec.to_string(), d.clone());
        Ok(d)
    }

    /// A spec's streaming source (a store, an image folder, or an in-memory
    /// set served through the loader), opened once a process.
    pub(super) fn stream_source(&mut self, spec: &str) -> Result<StreamData> {
        if let Some(d) = self.streams.get(spec) {
            return Ok(d.clone());
        }
        let loader = self.loader;
        let d = StreamData::open(spec, loader)?;
        self.streams.insert(spec.to_string(), d.clone());
        Ok(d)
    }

    /// The number of classes of a run's data, without decoding a streaming
    /// source.
    pub(super) fn classes_of(&mut self, run: &PlannedRun) -> Result<usize> {
        Ok(match run.plan.data.stream {
            Some(_) => self.stream_source(&run.spec.data)?.classes.len(),
            None => self.dataset(&run.spec.data)?.classes.len(),
        })
    }

    /// The run's data as this process holds it: its name and content hash
    /// (a store's header and index, a folder index's paths, labels and
    /// sizes, an in-memory set's bytes), read once a process. The ranks of
    /// a gang compare it before they train.
    pub fn data_identity(&mut self, run: &PlannedRun) -> Result<crate::record::DataId> {
        Ok(match run.plan.data.stream {
            Some(_) => {
                let d = self.stream_source(&run.spec.data)?;
                crate::record::DataId::new(&d.name, &d.hash)
            }
            None => {
                let d = self.dataset(&run.spec.data)?;
                crate::record::DataId::new(&d.name, &d.hash)
            }
        })
    }

    /// The training images the run's data set holds, in memory or
    /// streamed: a small set (`synthetic:64`, a tiny folder) may hold
    /// fewer than the warm-up's share.
    fn held_train_images(&mut self, run: &PlannedRun) -> Result<usize> {
        Ok(match run.plan.data.stream {
            Some(_) => self.stream_source(&run.spec.data)?.train.count(),
            None => self.dataset(&run.spec.data)?.train.len(),
        })
    }

    /// The run's source: the plan's per-class subset of the spec's data set,
    /// in memory or streamed; with its name and hash for the manifest.
    /// The run's images, their name and hash, and for a streamed run what
    /// its loader decodes where (`cpu decode from a JPEG folder`).
    pub(super) fn source_of(
        &mut self,
        run: &PlannedRun,
    ) -> Result<(Source, String, String, Option<String>)> {
        let per = |n: usize| (n > 0).then_some(n);
        let d = &run.plan.data;
        if let Some(sp) = &d.stream {
            let full = self.stream_source(&run.spec.data)?;
            let mut data = full.subset(per(d.train_per_class), per(d.test_per_class));
            if let Some((train, val)) = d.max_images {
                data = data.first(train, val);
            }
            let (name, hash) = (data.name.clone(), data.hash.clone());
            // Every decode is on the host's cores today (no GPU decoder).
            let loader = format!("cpu decode from {}", data.format);
            return Ok((
                Source::streamed(data, sp.at(0).size)?,
                name,
                hash,
                Some(loader),
            ));
        }
        let data = self.data_of(run)?;
        Ok((
            Source::new(&data)?,
            data.name.clone(),
            data.hash.clone(),
            None,
        ))
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
        self.run_in(run, None, ctl, emit)
    }

    fn warm_up(&mut self, run: &PlannedRun, ctl: &dyn Control) -> Option<String> {
        self.warm_up_in(run, None, ctl).ok()
    }

    fn probe(&mut self, run: &PlannedRun) -> Result<super::Probe> {
        self.probe_net(run)
    }
}

impl TchTrainer {
    /// The run as one rank of its gang: `dist` joined with the other ranks.
    pub fn run_rank(
        &mut self,
        run: &PlannedRun,
        dist: &Collective,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        self.run_in(run, Some(dist), ctl, emit)
    }

    /// The untimed, discarded warm-up of a rank: the gang warms together
    /// (its kernels and its connections).
    pub fn warm_up_rank(&mut self, run: &PlannedRun, dist: &Collective) -> Result<String> {
        self.warm_up_in(run, Some(dist), &super::NeverStop)
    }

    fn run_in(
        &mut self,
        run: &PlannedRun,
        dist: Option<&Collective>,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let world = dist.map_or(1, |d| d.world);
        if run.plan.world_size != world {
            bail!(
                "the run asks for world_size {} but this process is one of {world} rank(s): start it with `tricklab run` (which launches the ranks) or under a launcher with WORLD_SIZE={}",
                run.plan.world_size,
                run.plan.world_size
            );
        }
        let (src, data_name, data_hash, loader) = self.source_of(run)?;
        let device = match &run.spec.device {
            Some(d) => parse_device(d)?,
            None => self.device,
        };
        let n = src.train_len();
        let bs = run
            .plan
            .batch_phases
            .iter()
            .map(|p| p.1)
            .fold(run.plan.batch_size, usize::max) as i64;
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
            rng: match &self.inject {
                Some(i) => Rng::replaying(device, i.draws.clone()),
                None => Rng::new(device, run.spec.seed),
            },
            rates: run.plan.rates(n as u64),
            dist,
            save: self.save_weights.as_deref(),
            inject: self.inject.as_ref(),
            rect_cache: Default::default(),
        }
        .train(
            {
                run.record(
                    crate::record::DataId {
                        name: data_name,
                        hash: data_hash,
                    },
                    loader,
                )
            },
            ctl,
            emit,
        )
    }

    fn warm_up_in(
        &mut self,
        run: &PlannedRun,
        dist: Option<&Collective>,
        ctl: &dyn Control,
    ) -> Result<String> {
        let held = self.held_train_images(run)?;
        let warm = warm_up_run(run, self.classes_of(run)?, held);
        let t = Instant::now();
        // A run that cannot start says why itself; its warm-up stays quiet.
        self.run_in(&warm, dist, ctl, &mut |_| {})?;
        Ok(format!(
            "warm-up on {}: one training step of {} images and one eval batch of `{}`, {:.2} s, untimed and discarded",
            self.label,
            warm.plan.batch_size,
            run.spec.id.variant,
            t.elapsed().as_secs_f64()
        ))
    }
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
    /// The gang, when the run is one rank of several.
    dist: Option<&'a Collective>,
    /// Where the trained weights go.
    save: Option<&'a std::path::Path>,
    /// Injected starting weights and draws (golden trajectories).
    inject: Option<&'a Injection>,
    /// fast.ai's validation rectangles, made at the first rectangular eval.
    rect_cache: super::stream::RectCache,
}

impl Run<'_> {
    /// A stage boundary: this device is done, and in a gang every rank is
    /// (a barrier), so rank 0's clock times the slowest rank.
    fn boundary(&self) -> Result<()> {
        sync(self.device);
        match self.dist {
            Some(d) => d.barrier(),
            None => Ok(()),
        }
    }

    /// Seconds of a stage between two boundaries.
    fn timed<T>(&self, f: impl FnOnce() -> T) -> Result<(T, f64)> {
        self.boundary()?;
        let t = Instant::now();
        let out = f();
        self.boundary()?;
        Ok((out, t.elapsed().as_secs_f64()))
    }

    fn rank(&self) -> usize {
        self.dist.map_or(0, |d| d.rank)
    }

    /// Batch `i` of the epoch as this rank trains it (its images, labels
    /// and the soft targets of a set mixed as a whole this epoch), or a
    /// streamed batch with no readable image, and the seconds the loader took.
    fn rank_batch(&self, feed: &mut Feed, i: i64) -> Result<(Fed, Option<Tensor>, f64)> {
        let (fed, secs) = feed.batch(i)?;
        let (fed, soft) = match (feed, self.dist, fed) {
            // The streaming loader decodes only this rank's share.
            (Feed::Stream(_), _, fed) => (fed, None),
            (Feed::Memory(b), None, fed) => (fed, b.soft(i)),
            (Feed::Memory(b), Some(d), Fed::Train(x, y)) => (
                Fed::Train(d.share(x), d.share(y)),
                b.soft(i).map(|s| d.share(s)),
            ),
            (Feed::Memory(_), Some(_), fed) => (fed, None),
        };
        Ok((fed, soft, secs))
    }

    /// The gang's loss and correct count for the step (its gradients were
    /// averaged inside the backward, by DDP's Reducer), and the seconds
    /// this waits on the collective.
    /// `took`: this rank trained on images (not a stand-in for a batch
    /// with none readable), so its loss counts in the gang's mean.
    fn reduce_metrics(
        &self,
        out: (Tensor, Tensor),
        took: bool,
        spent: &mut f64,
    ) -> Result<(Tensor, Tensor)> {
        let Some(d) = self.dist.filter(|d| d.world > 1) else {
            return Ok(out);
        };
        let t = Instant::now();
        let reduced = d.reduce_metrics(&out.0, &out.1, took)?;
        *spent += t.elapsed().as_secs_f64();
        Ok(reduced)
    }
}

/// The run's variables as safetensors, by name, written atomically (through
/// a link to the file it names; a FIFO or device refused, not replaced).
/// Contiguous copies: channels_last filters are strided, and safetensors
/// stores only dense row-major data.
fn save_weights(vs: &nn::VarStore, path: &std::path::Path) -> Result<()> {
    let mut named: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .map(|(k, t)| (k, t.contiguous()))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    crate::util::write_atomic_path(path, |tmp| {
        Tensor::write_safetensors(&named, tmp).map_err(Into::into)
    })
    .with_context(|| format!("cannot save the weights to {}", path.display()))
}

pub(super) fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Reads the process's peak resident memory (the CPU stand-in for device memory).
fn peak_rss() -> Option<u64> {
    crate::util::machine::proc_bytes("/proc/self/status", "VmHWM")
}

/// What one epoch of training steps produced.
struct EpochTrain {
    steps: u64,
    /// Images a step (the global batch of the epoch).
    batch: usize,
    loss: f64,
    acc: f64,
    seconds: f64,
    loader_s: f64,
    /// The streaming loader's images a second over the epoch.
    loader_images_per_s: Option<f64>,
}

/// What the run trains: the net and what steps and averages it.
struct Model {
    net: Net,
    opt: Optimisers,
    avg: Averager,
    /// A gang's gradients: DDP's Reducer (none in a run of one process).
    sync: Option<GradSync>,
}

/// The loop's state across epochs.
struct Loop<'a> {
    feed: Feed<'a>,
    metrics: StepMetrics,
    /// Optimiser steps taken.
    step: u64,
    /// The steps the epochs so far planned, and the batches of them that
    /// took none (every image unreadable): what `check_trained` weighs.
    planned: u64,
    empty_batches: u64,
    /// The variables a golden trajectory copies at its steps (`Injection::at_steps`).
    snapshot_of: Option<Vec<(String, Tensor)>>,
    clocks: Clocks,
    /// (seconds on the run's clock, epoch) at the first evaluation at the target.
    to_target: Option<(f64, usize)>,
    /// The last evaluation's (plain, TTA) accuracy.
    acc: (f64, f64),
    /// The evaluations of the last epochs the median readout takes.
    readout: Vec<(f64, f64)>,
    final_train_loss: f64,
    wall: Instant,
    /// Each epoch's training throughput, for the run's noise flag.
    images_per_s: Vec<f64>,
    /// The machine when the run started.
    machine: crate::util::machine::Probe,
    /// On a GPU, its extremes while the run trains.
    gpu_watch: Option<crate::util::machine::GpuWatch>,
    /// Seconds this rank spent in gradient all-reduces.
    allreduce_s: f64,
    /// The step's CUDA graphs (the `cuda_graphs` trick).
    graphs: StepGraphs,
    /// Where the steps' seconds go.
    stages: StageClock,
}

/// Where each step's batch comes from.
enum Feed<'a> {
    /// The in-memory set: augmented on the device, or by the CPU loader.
    Memory(Batches<'a>),
    /// The streaming loader: decoded every epoch, this rank's share only.
    Stream(StreamFeed<'a>),
}

impl Feed<'_> {
    fn begin_epoch(&mut self, epoch: usize) -> Result<()> {
        match self {
            Feed::Memory(b) => b.begin_epoch(epoch),
            Feed::Stream(f) => f.begin_epoch(epoch),
        }
    }

    /// Step `i`'s batch, ready for the net, and the seconds spent getting it.
    fn batch(&mut self, i: i64) -> Result<(Fed, f64)> {
        match self {
            Feed::Memory(b) => {
                let (x, y, secs) = b.batch(i);
                Ok((Fed::Train(x, y), secs))
            }
            Feed::Stream(f) => f.batch(),
        }
    }

    /// The side of progressive resizing's small epochs (in-memory sets).
    fn small(&self) -> Option<i64> {
        match self {
            Feed::Memory(b) => b.small(),
            Feed::Stream(_) => None,
        }
    }
}

impl Loop<'_> {
    /// The epoch's sums, read back once, into the clocks and the epoch's row
    /// (`paused`: seconds of it spent paused, kept out of the clocks).
    fn end_epoch(
        &mut self,
        steps: u64,
        batch: usize,
        start: Instant,
        (loader_s, paused): (f64, f64),
    ) -> EpochTrain {
        let images = (steps as f64 * batch as f64).max(1.0);
        let tr = EpochTrain {
            steps,
            batch,
            loss: self.metrics.loss_sum.double_value(&[]) / steps.max(1) as f64,
            acc: self.metrics.correct.double_value(&[]) / images,
            seconds: (start.elapsed().as_secs_f64() - paused).max(0.0),
            loader_s,
            loader_images_per_s: None,
        };
        self.clocks.paused_s += paused;
        self.clocks.hlb_s += tr.seconds;
        self.clocks.loader_s += tr.loader_s;
        self.final_train_loss = tr.loss;
        tr
    }

    /// Seconds since the run started, pauses excluded.
    fn wall_s(&self) -> f64 {
        self.wall.elapsed().as_secs_f64() - self.clocks.paused_s
    }
}

impl Run<'_> {
    /// Prepare → build → warm → epochs (train, evaluate when due) → summary.
    fn train(
        &self,
        record: crate::record::RunRecord,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let (plan, dev) = (self.plan, self.device);
        let wall = Instant::now();
        // SyncBN layers (the `sync_bn` trick) reduce over the gang.
        let _sync_bn = self.dist.map(Collective::install);
        self.announce(record, emit);
        // Loading to the device, then preprocessing: airbench times only the
        // second (its loader uploads before its timer), DAWNBench both.
        let (uploaded, load_s) = self.timed(|| upload(plan, self.src, dev))?;
        let (data, preprocess_s) = self.timed(|| preprocess(plan, uploaded))?;
        let vs = nn::VarStore::new(dev);
        let (net, nc, whiten_s, build_s) = self.build(&vs)?;
        if let Some(d) = self.dist {
            // Every rank built the same seeded net, but a GPU's whitening
            // basis (an eigendecomposition) need not agree to the last bit
            // across devices: rank 0's weights are everyone's, as DDP does.
            // By name: a VarStore's map iterates in a per-process order,
            // and the flat buckets must line up rank to rank.
            let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            let vars: Vec<Tensor> = named.into_iter().map(|(_, t)| t).collect();
            tch::no_grad(|| d.broadcast(&vars, 0))?;
        }
        let mut m = self.model(net, &nc, &vs)?;
        let snapshot_of = self.snapshot_vars(&vs);
        let feed = self.feed(&data);
        let mut lp = Loop {
            feed,
            metrics: StepMetrics::new(dev),
            step: 0,
            planned: 0,
            empty_batches: 0,
            clocks: Clocks {
                prep_s: load_s + preprocess_s,
                preprocess_s,
                whiten_s,
                build_s,
                ..Clocks::default()
            },
            to_target: None,
            acc: (0.0, 0.0),
            readout: Vec::new(),
            final_train_loss: f64::NAN,
            wall,
            images_per_s: Vec::new(),
            machine: crate::util::machine::probe(self.gpu_index()),
            gpu_watch: self
                .gpu_index()
                .map(crate::util::machine::GpuWatch::nvidia_smi),
            allreduce_s: 0.0,
            graphs: self.step_graphs(&m.net),
            stages: StageClock::new(dev),
            snapshot_of,
        };
        let epochs = plan.epochs.ceil() as usize;
        for epoch in 0..epochs {
            let Some(tr) = self.train_epoch(epoch, &mut lp, &mut m, ctl, emit)? else {
                return Ok(Outcome::Cancelled);
            };
            if tr.steps == 0 {
                break;
            }
            let last = epoch + 1 == epochs || lp.step >= self.rates.total;
            if last {
                m.avg.finish();
            }
            self.evaluate_epoch(epoch, last, &tr, &data, &m, &mut lp, emit)?;
            if last {
                break;
            }
        }
        // Before the weights are saved or the run stored as done: a run
        // that trained too few of its steps is no measurement of its recipe.
        check_trained(lp.step, lp.planned, lp.empty_batches, &self.run.spec.data)?;
        if let Some(path) = self.save {
            save_weights(&vs, path)?;
        }
        let ddp_times = match &m.sync {
            Some(sync) => sync.times()?,
            None => None,
        };
        Ok(Outcome::Finished(self.summary(lp, ddp_times)?))
    }

    /// Where the run's batches come from: the streaming loader, or the
    /// prepared in-memory set.
    fn feed<'a>(&'a self, data: &'a Prepared) -> Feed<'a> {
        let (plan, dev) = (self.plan, self.device);
        match (&self.src.stream, &plan.data.stream) {
            (Some(sd), Some(sp)) => Feed::Stream(StreamFeed::new(
                plan,
                sp,
                Arc::clone(&sd.train),
                self.layout,
                dev,
                self.run.spec.seed,
                (self.rank(), self.dist.map_or(1, |d| d.world)),
            )),
            _ => Feed::Memory(Batches::new(
                plan,
                data,
                self.src,
                &self.rng,
                self.layout,
                dev,
                self.run.spec.seed,
            )),
        }
    }

    /// Sets the device up for the plan and tells the listeners the run started.
    fn announce(&self, record: crate::record::RunRecord, emit: &mut dyn FnMut(Event)) {
        let (plan, spec) = (self.plan, &self.run.spec);
        if self.device.is_cuda() {
            tch::Cuda::cudnn_set_benchmark(plan.precision.cudnn_benchmark);
        }
        emit(Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            record: Arc::new(record),
            total_steps: self.rates.total,
            total_epochs: plan.epochs,
            target_acc: spec.target_acc,
            device: self.label.clone(),
            reference: spec.reference.clone(),
        });
    }

    /// The optimisers and the averager of the built net, with the kernels
    /// warmed outside every clock when `cudnn_benchmark` is on.
    /// The net, built and initialised, its whitening fitted, and the
    /// seconds of each (whitening, then build): airbench and hlb build their
    /// nets before their timers, Page's new_dawn.py inside its own
    /// (`Clock::stages`). One seeded scope for both, as one build_net had.
    fn build(&self, vs: &nn::VarStore) -> Result<(Net, NetConfig, f64, f64)> {
        let (plan, dev) = (self.plan, self.device);
        native::with_seeded_inits(dev, self.run.spec.seed, || -> Result<_> {
            let (built, mut build_s) = self.timed(|| new_net(plan, self.src, vs))?;
            let (net, nc) = built?;
            let (fit, whiten_s) = self.timed(|| {
                fit_whitening(
                    &net,
                    &nc,
                    (&plan.data.norm, plan.precision.data_kind()),
                    self.src,
                    dev,
                    self.layout,
                    &self.rng,
                )
            })?;
            fit?;
            build_s += self.timed(|| finish_net(plan, &net, self.layout))?.1;
            // After every init, the head's unit-std rescale included, as
            // the references' weights are final once reset() and the
            // whitening fit are done (`copy_` keeps each variable's type
            // and memory format).
            if let Some(i) = self.inject {
                inject_weights(vs, &i.weights)?;
            }
            Ok((net, nc, whiten_s, build_s))
        })
    }

    fn model(&self, net: Net, nc: &NetConfig, vs: &nn::VarStore) -> Result<Model> {
        let plan = self.plan;
        let mut m = Model {
            opt: Optimisers::new(plan, &net, &self.rates),
            avg: Averager::new(plan, vs, nc, self.layout)?,
            net,
            sync: self
                .dist
                .filter(|d| d.world > 1)
                .map(|_| GradSync::new(self.device.is_cuda(), plan.step.ddp)),
        };
        if plan.precision.cudnn_benchmark {
            let shape = [plan.batch_size as i64, 3, self.src.h, self.src.w];
            let (rng, classes, layout) = (&self.rng, self.src.classes, self.layout);
            self.timed(|| {
                warm_kernels(rng, &m.net, &mut m.opt, &m.avg.live, shape, classes, layout)
            })?;
        }
        Ok(m)
    }

    /// One epoch of training steps; `None` when the run was cancelled.
    #[allow(
        clippy::too_many_lines,
        reason = "one epoch's steps in order: batch, forward and backward (or their graph), reduce, optimiser, metrics, each stage marked"
    )]
    fn train_epoch(
        &self,
        epoch: usize,
        lp: &mut Loop,
        m: &mut Model,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Option<EpochTrain>> {
        let (plan, r) = (self.plan, &self.rates);
        // The epoch's augmentation is part of its training time, as in the references.
        self.boundary()?;
        let start = Instant::now();
        lp.stages.begin();
        lp.feed.begin_epoch(epoch)?;
        let per_epoch = r.epoch_steps.get(epoch).copied().unwrap_or(r.per_epoch);
        let steps = (r.total - lp.step).min(per_epoch);
        lp.planned += steps;
        let (batch, loss_scale) = self.epoch_batch(epoch, m);
        let stages = &lp.stages;
        let forward_done = || stages.mark(Stage::Forward);
        let trainee = Trainee {
            plan,
            net: &m.net,
            rng: &self.rng,
            layout: self.layout,
            classes: self.src.classes,
            loss_scale,
            // No event inside a capture: a graph's forward and backward are one replay.
            forward_done: (!lp.graphs.keeps_grads()).then_some(&forward_done as &dyn Fn()),
            sync: m.sync.as_ref(),
            failed: Default::default(),
        };
        let cutmix = plan
            .loss
            .cutmix
            .as_ref()
            .filter(|c| c.active_at(epoch, plan.epochs));
        let bn = m.net.bn_params();
        let (mut loader_s, mut paused) = (0.0, 0.0);
        lp.metrics.reset_epoch();
        for i in 0..steps {
            let flow = if ctl.pausing() {
                // The pause waits with the device idle, and outside the clocks.
                sync(self.device);
                let t = Instant::now();
                let flow = ctl.poll();
                paused += t.elapsed().as_secs_f64();
                flow
            } else {
                ctl.poll()
            };
            if flow == Flow::Cancel {
                return Ok(None);
            }
            let s = lp.step;
            if r.whiten_bias_steps == Some(s) {
                // The references detach the bias from this step on.
                m.net.set_whiten_bias_trainable(false);
            }
            // The Reducer over what trains: built at the first step, built
            // again where the trainable set changes (not every step).
            if let (Some(sync), Some(d), true) =
                (&m.sync, self.dist, s == 0 || r.whiten_bias_steps == Some(s))
            {
                sync.follow(d, &m.net.param_groups().all_trainable())?;
            }
            let (fed, soft, secs) = self.rank_batch(&mut lp.feed, i as i64)?;
            loader_s += secs;
            lp.stages.mark(Stage::Data);
            let (took, out) = match fed {
                Fed::Train(x, y) => {
                    let inputs: Vec<&Tensor> = [Some(&x), Some(&y), soft.as_ref()]
                        .into_iter()
                        .flatten()
                        .collect();
                    // A batch CutMix mixes inside the step draws there: not capturable.
                    let drawn = (soft.is_none() && cutmix.is_some())
                        .then_some("CutMix draws inside the step");
                    let out = lp.graphs.step(&inputs, loss_scale, drawn, |t| {
                        let mix = match (t.get(2), cutmix) {
                            (Some(s), _) => Mix::Given(s),
                            (None, Some(c)) => Mix::Batch(c),
                            (None, None) => Mix::None,
                        };
                        trainee.forward_backward(&t[0], &t[1], mix)
                    })?;
                    (true, out)
                }
                // Every image unreadable: this rank's part of the gang's step
                // is zero (its gradients and its share of the loss).
                Fed::Shadow(x, y) => (false, trainee.shadow(&x, &y)),
                // Alone: the batch takes no step (the schedule goes on from
                // the next batch, at the same step).
                Fed::Skip => {
                    lp.empty_batches += 1;
                    self.emit_steps(&mut lp.metrics, &bn, i + 1 == steps, emit)?;
                    continue;
                }
            };
            trainee.check()?;
            let out = self.reduce_metrics(out, took, &mut lp.allreduce_s)?;
            if let Some(max_norm) = plan.step.clip_norm {
                // The gradients carry the loss scale; the limit is in mean-loss units.
                let params = m.net.param_groups().all_trainable();
                crate::optim::clip_grad_norm(&params, max_norm * loss_scale);
            }
            // The backward's stage holds the all-reduce (DDP overlaps them) and clipping.
            lp.stages.mark(Stage::Backward);
            if lp.graphs.keeps_grads() {
                // The graph zero-fills them itself, where it wrote them.
                m.opt.step_keeping_grads(plan, s, r);
            } else {
                m.opt.step(plan, s, r, plan.step.zero_grad_none);
            }
            lp.step += 1;
            m.avg.after_step(lp.step, i, epoch, r.total);
            lp.stages.mark(Stage::Optimiser);
            self.snapshot(lp);
            let at = epoch as f64 + (i + 1) as f64 / per_epoch as f64;
            let lr = plan.optim.lr * r.main[s as usize];
            lp.metrics.push((lp.step, at, lr), batch, secs, out);
            let due = plan.metrics_every > 0 && lp.step.is_multiple_of(plan.metrics_every);
            self.emit_steps(&mut lp.metrics, &bn, due || i + 1 == steps, emit)?;
        }
        self.boundary()?;
        lp.stages.settle();
        let rate = self.end_stream_epoch(&mut lp.feed, emit);
        let mut tr = lp.end_epoch(steps, batch, start, (loader_s, paused));
        tr.loader_images_per_s = rate;
        Ok(Some(tr))
    }

    /// The steps' rows since the last read-back, sent when `due` (one host
    /// sync, at `metrics_every` steps and the epoch's last).
    fn emit_steps(
        &self,
        metrics: &mut StepMetrics,
        bn: &[(Tensor, Tensor)],
        due: bool,
        emit: &mut dyn FnMut(Event),
    ) -> Result<()> {
        if due {
            let (rows, images_per_s, loader_share) = metrics.drain(bn)?;
            emit(Event::Steps {
                run: self.run.spec.id.clone(),
                rows,
                images_per_s,
                loader_share,
            });
        }
        Ok(())
    }

    /// The run's step graphs: on a GPU when `cuda_graphs` asks, on a CPU
    /// the same path uncaptured.
    fn step_graphs(&self, net: &Net) -> StepGraphs {
        let params = net.param_groups().all_trainable();
        let graphs = StepGraphs::new(self.plan.step.cuda_graphs, self.device, params);
        match self.dist {
            // DDP's hooks start collectives from inside the backward.
            Some(d) if d.world > 1 => graphs.eager_because("data-parallel (DDP's Reducer)"),
            _ => graphs,
        }
    }

    /// The variables a golden trajectory copies at its checkpoints, if it asks.
    fn snapshot_vars(&self, vs: &nn::VarStore) -> Option<Named> {
        self.inject.and_then(|i| i.vars_to_copy(vs))
    }

    /// A golden trajectory's copy of every variable after this step, when it asks for one.
    fn snapshot(&self, lp: &Loop) {
        if let (Some(inj), Some(vars)) = (self.inject, &lp.snapshot_of) {
            inj.copy_at(lp.step, vars);
        }
    }

    /// The global batch of epoch `epoch` and the loss's multiplier for it:
    /// fast.ai's phases change the batch, and the summed loss and the
    /// optimisers' units follow it.
    fn epoch_batch(&self, epoch: usize, m: &mut Model) -> (usize, f64) {
        let plan = self.plan;
        let batch = plan.batch_at(epoch);
        let loss_scale = plan.loss.scale * batch as f64 / plan.batch_size.max(1) as f64;
        if !plan.batch_phases.is_empty() {
            m.opt.set_loss_scale(loss_scale);
        }
        (batch, loss_scale)
    }

    /// A streaming epoch's end: its loader stopped, the files it left out
    /// named; the loader's images a second.
    fn end_stream_epoch(&self, feed: &mut Feed, emit: &mut dyn FnMut(Event)) -> Option<f64> {
        let Feed::Stream(f) = feed else {
            return None;
        };
        let rate = f.end_epoch().map(|s| s.images_per_s());
        self.say_skipped(f.drain_skipped(), emit);
        self.say_empty(f.drain_empty(), emit);
        rate
    }

    /// Evaluates when due (the `eval_s` stage), notes the first time the
    /// target is reached on the run's clock, and reports the epoch.
    #[allow(clippy::too_many_arguments)] // the epoch's outcome and the loop's state it updates
    fn evaluate_epoch(
        &self,
        epoch: usize,
        last: bool,
        tr: &EpochTrain,
        data: &Prepared,
        m: &Model,
        lp: &mut Loop,
        emit: &mut dyn FnMut(Event),
    ) -> Result<()> {
        let (plan, spec) = (self.plan, &self.run.spec);
        let (due, in_readout) = plan.eval.due(epoch, plan.epochs.ceil() as usize, last);
        let (accs, eval_s) = if due {
            let size = lp
                .feed
                .small()
                .and(plan.data.progressive.as_ref())
                .and_then(|p| p.eval_size());
            let net = m.avg.eval_net(&m.net);
            let (accs, eval_s) =
                self.timed(|| self.evaluate_net(net, data, (epoch, size), emit))?;
            (accs?, eval_s)
        } else {
            ((f64::NAN, f64::NAN), 0.0)
        };
        lp.clocks.eval_s += eval_s;
        if due {
            lp.acc = accs;
            if in_readout {
                lp.readout.push(accs);
            }
            if last {
                let c = &mut lp.clocks;
                c.airbench_s = time_on(Clock::Airbench, c, eval_s, f64::NAN);
            }
            let headline = if plan.eval.tta_level > 0 {
                accs.1
            } else {
                accs.0
            };
            if lp.to_target.is_none() && headline >= spec.target_acc {
                let secs = time_on(plan.clock, &lp.clocks, eval_s, lp.wall_s());
                lp.to_target = Some((secs, epoch + 1));
            }
        }
        lp.images_per_s
            .push(tr.steps as f64 * tr.batch as f64 / tr.seconds.max(1e-9));
        emit(Event::Epoch {
            run: spec.id.clone(),
            row: EpochRow {
                epoch: epoch + 1,
                steps: lp.step,
                train_loss: tr.loss,
                train_acc: tr.acc,
                test_acc: accs.0,
                test_acc_tta: (due && plan.eval.tta_level > 0).then_some(accs.1),
                train_s: tr.seconds,
                eval_s,
                images_per_s: tr.steps as f64 * tr.batch as f64 / tr.seconds.max(1e-9),
                peak_mem_bytes: peak_rss(),
                loader_s: tr.loader_s,
                loader_images_per_s: tr.loader_images_per_s,
                ddp: match &m.sync {
                    Some(sync) => sync.times()?,
                    None => None,
                },
            },
        });
        Ok(())
    }

    /// (plain, TTA) accuracy of `net` on the validation set at `epoch`,
    /// over every rank of a gang (`eval::over_ranks`).
    fn evaluate_net(
        &self,
        net: &Net,
        data: &Prepared,
        (epoch, size): (usize, Option<i64>),
        emit: &mut dyn FnMut(Event),
    ) -> Result<(f64, f64)> {
        let plan = self.plan;
        over_ranks(self.dist, net, &plan.eval, |shard| {
            match (&self.src.stream, &plan.data.stream) {
                (Some(sd), Some(sp)) => {
                    let (counts, skipped) = evaluate_stream(
                        net,
                        &sd.val,
                        sp,
                        &plan.eval,
                        self.layout,
                        self.device,
                        (epoch, shard),
                        &self.rect_cache,
                    )?;
                    self.say_skipped(skipped, emit);
                    Ok(counts)
                }
                _ => Ok(evaluate(
                    net,
                    (&data.test_x, &data.test_y),
                    &plan.eval,
                    self.layout,
                    size,
                    shard,
                )),
            }
        })
    }

    /// One warning line for the images a streaming pass left out
    /// (`on_bad_image = "skip"`), naming the first few.
    fn say_skipped(&self, skipped: Vec<String>, emit: &mut dyn FnMut(Event)) {
        if skipped.is_empty() {
            return;
        }
        const NAMED: usize = 3;
        let more = skipped.len().saturating_sub(NAMED);
        let mut message = format!(
            "{}: {} unreadable image(s) left out: {}",
            self.run.spec.id,
            skipped.len(),
            skipped[..skipped.len().min(NAMED)].join("; ")
        );
        if more > 0 {
            message += &format!(" (and {more} more)");
        }
        emit(Event::Log {
            level: LogLevel::Warn,
            message,
        });
    }

    /// One warning line for the epoch's batches with no readable image:
    /// how many, and what each did instead of training.
    fn say_empty(&self, empty: Vec<String>, emit: &mut dyn FnMut(Event)) {
        if empty.is_empty() {
            return;
        }
        let rank = match self.dist {
            Some(d) if d.world > 1 => format!(" of rank {}", d.rank),
            _ => String::new(),
        };
        emit(Event::Log {
            level: LogLevel::Warn,
            message: format!(
                "{}: {} batch(es){rank} had no readable image: {}",
                self.run.spec.id,
                empty.len(),
                empty.join("; ")
            ),
        });
    }

    /// The CUDA index the run trains on, if any.
    fn gpu_index(&self) -> Option<usize> {
        match self.device {
            Device::Cuda(i) => Some(i),
            _ => None,
        }
    }

    fn summary(&self, lp: Loop, ddp_times: Option<DdpTimes>) -> Result<RunSummary> {
        use crate::util::machine;
        let plan = self.plan;
        let wall_s = lp.wall_s();
        let peak = lp.gpu_watch.and_then(machine::GpuWatch::finish);
        let machine = machine::between(&lp.machine, &machine::probe(self.gpu_index()), peak);
        let throughput_cv = machine::throughput_cv(&lp.images_per_s);
        let mut noise = machine::noise_reason(&machine, throughput_cv);
        let mut machine = machine;
        let ranks = match self.dist {
            Some(d) => {
                let (cpu_s, wall_s) = lp.machine.since();
                let mine = crate::events::RankEnd {
                    rank: d.rank,
                    host: crate::util::machine::hostname(),
                    device: self.label.clone(),
                    allreduce_s: lp.allreduce_s,
                    throughput_cv,
                    machine: machine.clone(),
                    cpu_s,
                    wall_s,
                    ddp: ddp_times,
                };
                let mut ranks = d.gather("end", &mine)?;
                crate::events::RankEnd::own_gang(&mut ranks);
                // The gang's seconds are as trustworthy as its noisiest rank's.
                noise = ranks.iter().find_map(|r| {
                    let why = machine::noise_reason(&r.machine, r.throughput_cv)?;
                    Some(if r.rank == 0 {
                        why
                    } else {
                        format!("rank {}: {why}", r.rank)
                    })
                });
                machine = ranks[0].machine.clone();
                ranks
            }
            None => Vec::new(),
        };
        let mut clocks = lp.clocks;
        let stages = lp.stages.seconds(clocks.eval_s);
        clocks.dawn_s = time_on(Clock::Dawn, &clocks, 0.0, f64::NAN);
        clocks.wall_s = wall_s;
        let acc = match plan.eval.median_of_last {
            0 => lp.acc,
            _ => median_readout(&lp.readout).unwrap_or(lp.acc),
        };
        Ok(RunSummary {
            acc: acc.0,
            acc_tta: if plan.eval.tta_level > 0 {
                acc.1
            } else {
                acc.0
            },
            clocks,
            time_to_target_s: lp.to_target.map(|t| t.0),
            epoch_to_target: lp.to_target.map(|t| t.1),
            epochs: plan.epochs,
            steps: lp.step,
            peak_mem_bytes: peak_rss(),
            final_train_loss: lp.final_train_loss,
            device: self.label.clone(),
            noise,
            machine: Some(Box::new(machine)),
            throughput_cv,
            ranks,
            graphs: Some(lp.graphs.status().to_string()),
            stages: Some(Box::new(stages)),
            clock: None,
        })
    }
}

/// The median of the readout's (plain, TTA) accuracies, each on its own:
/// numpy's `median`, the middle value, or the mean of the two middle ones
/// for an even count (Goyal et al. report the median of 5 epochs).
fn median_readout(accs: &[(f64, f64)]) -> Option<(f64, f64)> {
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    (!accs.is_empty()).then(|| {
        (
            median(accs.iter().map(|a| a.0).collect()),
            median(accs.iter().map(|a| a.1).collect()),
        )
    })
}
