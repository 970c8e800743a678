//! A streaming run's data on its way in (the `stream` trick): each epoch's
//! batches come from the loader of `data::stream` (decode, random-resized
//! crop and flip on a pool of threads, ahead of the step), already this
//! rank's share of the global batch; they are copied to the device and
//! normalised there with ImageNet's statistics, as FFCV's pipeline ends
//! (`ToDevice`, `NormalizeImage`). Evaluation streams the validation split
//! through a centre crop the same way.

use super::eval::{Counts, Shard, forward_eval, tta_of};
use super::prepare::Layout;
use crate::data::stream::rect::{self, RectPlan};
use crate::data::stream::{Crop, Images, Loader, LoaderOptions, OnBadImage, Pipeline, Subset};
use crate::model::Net;
use crate::native::pin_memory;
use crate::plan::{AugOp, Augment, EvalPlan, RunPlan, StreamPhase, StreamPlan};
use anyhow::bail;
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// ImageNet's channel statistics on the 0-255 scale (torchvision's
/// `Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])`, FFCV's
/// `IMAGENET_MEAN`/`IMAGENET_STD`).
pub const IMAGENET_MEAN: [f64; 3] = [0.485 * 255.0, 0.456 * 255.0, 0.406 * 255.0];
pub const IMAGENET_STD: [f64; 3] = [0.229 * 255.0, 0.224 * 255.0, 0.225 * 255.0];

/// ImageNet's statistics on the device, made once a feed or an evaluation:
/// a batch is normalised there with no copy of them from the host.
pub(super) struct Normaliser {
    mean: Tensor,
    std: Tensor,
}

impl Normaliser {
    pub fn new(device: Device) -> Normaliser {
        let stat = |v: &[f64; 3]| {
            Tensor::from_slice(v)
                .to_kind(Kind::Float)
                .to_device(device)
                .view([1, 3, 1, 1])
        };
        Normaliser {
            mean: stat(&IMAGENET_MEAN),
            std: stat(&IMAGENET_STD),
        }
    }

    /// uint8 N×3×H×W on the device → normalised float.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        (x.to_kind(Kind::Float) - &self.mean) / &self.std
    }
}

/// The streaming executor's reading of the augmentation list: the
/// random-resized crop (its smallest area share raised by a phase that
/// says so) and the flip, in the loader's own order, which is theirs. An op
/// it has no form for is refused by name (the `stream` trick's conflicts
/// keep recipes from asking).
fn train_pipeline(aug: &Augment, phase: &StreamPhase, plain: bool) -> Result<Pipeline> {
    if plain {
        // Fujitsu's last epochs: resize and centre crop as validation does.
        return Ok(Pipeline {
            size: phase.size,
            crop: Crop::Centre {
                ratio: phase.eval_ratio,
            },
            flip: false,
        });
    }
    let mut crop = None;
    let mut flip = false;
    for op in &aug.ops {
        match *op {
            AugOp::ResizedCrop { scale, ratio } => {
                crop = Some(Crop::RandomResized {
                    scale: (phase.min_scale.unwrap_or(scale.0), scale.1),
                    ratio,
                });
            }
            AugOp::Flip { alternating: false } => flip = true,
            other => bail!(
                "the streaming loader cannot apply `{}`: turn that trick off for streamed data",
                other.describe()
            ),
        }
    }
    Ok(Pipeline {
        size: phase.size,
        crop: crop.context(
            "a streamed run's augmentation has no resized crop: the `stream` trick sets one; this is a bug in tricklab, please report it",
        )?,
        flip,
    })
}

/// Decoding threads for one rank: the plan's, or this host's cores shared
/// among the ranks on it (torchrun's LOCAL_WORLD_SIZE).
fn workers(sp: &StreamPlan) -> usize {
    if sp.workers > 0 {
        return sp.workers;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let local = std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    (cores / local).max(1)
}

/// The least share of its planned steps a run must train to be stored as
/// done. A run that trained fewer (its batches' images skipped as
/// unreadable, `stream.on_bad_image = skip`) saw a different data set and
/// schedule than its siblings: its accuracy and its time to the target are
/// not the recipe's, and a report would rank it beside them (a run that
/// trained nothing at all reads as chance accuracy reached in no time).
/// Half: a few bad files cost a few steps, a broken folder most of them.
pub(super) const MIN_TRAINED_SHARE: f64 = 0.5;

/// Refuses a run that trained under [`MIN_TRAINED_SHARE`] of the steps its
/// epochs planned (over the whole run), naming what happened and the fix:
/// `empty` of its batches held no readable image, from data set `data`.
pub(super) fn check_trained(trained: u64, planned: u64, empty: u64, data: &str) -> Result<()> {
    if planned == 0 || trained as f64 >= MIN_TRAINED_SHARE * planned as f64 {
        return Ok(());
    }
    let what = if trained == 0 {
        "every training batch".to_string()
    } else {
        format!("{empty} of its batches")
    };
    anyhow::bail!(
        "trained {trained} of {planned} planned steps (a run must train {:.0}% of them): {what} held no readable image, each skipped as unreadable (stream.on_bad_image = skip); `tricklab data check {data}` lists the files: remove or replace them, or set stream.on_bad_image = fail to stop at the first",
        100.0 * MIN_TRAINED_SHARE
    )
}

/// A training run's way to leave unreadable files out.
const SKIP_SETTING: &str = "set stream.on_bad_image=skip";

fn on_bad(sp: &StreamPlan) -> OnBadImage {
    if sp.skip_bad {
        OnBadImage::Skip
    } else {
        OnBadImage::Fail
    }
}

/// A loader batch on the device: uint8 bytes, copied without a host sync
/// (pinned, non-blocking, as a DataLoader with `pin_memory` and
/// `non_blocking=True` copies), then normalised.
fn to_device(
    b: &crate::data::stream::Batch,
    norm: &Normaliser,
    device: Device,
) -> Result<(Tensor, Tensor)> {
    if !b.whole.is_empty() {
        // Whole images (`stream.crop_on = device`): each copied up as it
        // is, then the batch cut and resized there in one pass.
        let up = |t: &Tensor| match device {
            Device::Cuda(_) => pin_memory(t).to_device_(device, t.kind(), true, false),
            _ => t.shallow_clone(),
        };
        let images: Vec<Tensor> = b
            .whole
            .iter()
            .map(|w| up(&w.hwc()).permute([2, 0, 1]))
            .collect();
        let geometry: Vec<_> = b.whole.iter().map(|w| (w.crop, w.flip)).collect();
        let x = crate::data::stream::on_device::crop_resize_flip(
            &images,
            &geometry,
            (b.height, b.width),
        )?;
        let y = up(&Tensor::from_slice(&b.labels));
        return Ok((norm.apply(&x), y));
    }
    let n = b.len() as i64;
    // The loader's rows as they come (N×H×W×3), viewed as N×3×H×W on the
    // device: no transpose on the host.
    let x = Tensor::from_slice(&b.images).view([n, b.height as i64, b.width as i64, 3]);
    let y = Tensor::from_slice(&b.labels);
    let (x, y) = match device {
        Device::Cuda(_) => (
            pin_memory(&x).to_device_(device, Kind::Uint8, true, false),
            pin_memory(&y).to_device_(device, Kind::Int64, true, false),
        ),
        _ => (x, y),
    };
    Ok((norm.apply(&x.permute([0, 3, 1, 2])), y))
}

#[cfg(test)]
impl Fed {
    /// The images and labels of a batch that trains.
    pub fn trained(self) -> (Tensor, Tensor) {
        match self {
            Fed::Train(x, y) => (x, y),
            _ => panic!("a batch with no readable image"),
        }
    }
}

/// Each epoch's training batches from the streaming loader.
pub(super) struct StreamFeed<'a> {
    plan: &'a RunPlan,
    sp: &'a StreamPlan,
    train: Arc<dyn Images>,
    layout: Layout,
    device: Device,
    seed: u64,
    rank: usize,
    world: usize,
    loader: Option<Loader>,
    norm: Normaliser,
    /// Lines naming the files left out since the last drain.
    skipped: Vec<String>,
    /// Lines naming the batches left empty by them since the last drain.
    empty: Vec<String>,
    /// Images in this rank's share of the epoch's batch.
    share: usize,
}

/// A step's batch from the streaming loader.
pub(super) enum Fed {
    /// Images and labels to train on.
    Train(Tensor, Tensor),
    /// Every image unreadable, in a run of one process: no step.
    Skip,
    /// Every image unreadable, in a gang: a stand-in of zero images for a
    /// step with zero gradients, so that the gang's collectives still meet.
    Shadow(Tensor, Tensor),
}

impl<'a> StreamFeed<'a> {
    #[allow(clippy::too_many_arguments, reason = "the run's decisions, once")]
    pub fn new(
        plan: &'a RunPlan,
        sp: &'a StreamPlan,
        train: Arc<dyn Images>,
        layout: Layout,
        device: Device,
        seed: u64,
        (rank, world): (usize, usize),
    ) -> StreamFeed<'a> {
        StreamFeed {
            plan,
            sp,
            train,
            layout,
            device,
            seed,
            rank,
            world,
            loader: None,
            norm: Normaliser::new(device),
            skipped: Vec::new(),
            empty: Vec::new(),
            share: 0,
        }
    }

    /// Starts the epoch's loader at the epoch's side: its order, crops and
    /// flips drawn from (seed, epoch, image).
    pub fn begin_epoch(&mut self, epoch: usize) -> Result<()> {
        self.end_epoch();
        let phase = self.sp.at(epoch);
        let opts = LoaderOptions {
            batch: self.plan.batch_at(epoch),
            workers: workers(self.sp),
            prefetch: self.sp.prefetch,
            seed: self.seed,
            epoch: epoch as u64,
            shuffle: true,
            drop_last: true,
            rank: self.rank,
            world: self.world,
            on_bad: on_bad(self.sp),
            rect: None,
            skip_hint: SKIP_SETTING,
            whole: self.sp.crop_on_device,
        };
        self.share = opts.batch.div_ceil(self.world);
        let plain = self.sp.plain_at(epoch, self.plan.epochs);
        let pipeline = train_pipeline(&self.plan.data.augment, &phase, plain)?;
        self.loader = Some(Loader::new(Arc::clone(&self.train), pipeline, &opts)?);
        Ok(())
    }

    /// The next batch (ready for the net), and the seconds the step waited
    /// for it and spent queueing its copy.
    ///
    /// A batch whose every image was unreadable (`on_bad_image = skip`)
    /// would reach the net empty, as a NaN loss. In a run of one process
    /// it takes no step ([`Fed::Skip`]). In a gang every rank must take
    /// every step (DDP's collectives), so this rank joins the step with a
    /// stand-in whose gradients are zero ([`Fed::Shadow`]), as DDP's `Join`
    /// shadows a rank out of data with zeros: no agreement among the ranks,
    /// so no host sync, is needed. Both are counted for the epoch's line.
    pub fn batch(&mut self) -> Result<(Fed, f64)> {
        let t = Instant::now();
        let loader = self.loader.as_mut().context("begin_epoch before batch")?;
        let b = loader.next().context(
            "the loader ran out of batches before the epoch's steps: this is a bug in tricklab, please report it",
        )??;
        self.skipped.extend(b.skipped.iter().cloned());
        if b.labels.is_empty() {
            let first = b.skipped.first().map_or("?", String::as_str);
            if self.world == 1 {
                self.empty.push(format!("batch {} took no step", b.index));
                return Ok((Fed::Skip, t.elapsed().as_secs_f64()));
            }
            // SyncBN's forward gathers every rank's batch statistics: a
            // stand-in would enter them.
            if self.plan.net.bn.sync {
                anyhow::bail!(
                    "batch {} of this rank: all {} of its images were unreadable and skipped (the first: {first}), and with sync_bn every rank's batch enters the others' statistics; `tricklab data check` lists such files: remove or replace them",
                    b.index,
                    b.skipped.len(),
                );
            }
            self.empty.push(format!(
                "batch {} joined its step with zero gradients",
                b.index
            ));
            // A rank's share of zero images: what a batch of its size would
            // be, so every layer (ghost BN's splits too) sees its shapes.
            let share = self.share.max(1);
            let stand_in = crate::data::stream::Batch {
                images: vec![0; share * b.height * b.width * 3],
                labels: vec![0; share],
                whole: Vec::new(),
                ..b
            };
            let (x, y) = self.ready(&stand_in)?;
            return Ok((Fed::Shadow(x, y), t.elapsed().as_secs_f64()));
        }
        let (x, y) = self.ready(&b)?;
        Ok((Fed::Train(x, y), t.elapsed().as_secs_f64()))
    }

    /// A loader batch on the device, normalised, in the run's layout.
    fn ready(&self, b: &crate::data::stream::Batch) -> Result<(Tensor, Tensor)> {
        let (x, y) = to_device(b, &self.norm, self.device)?;
        let x = if self.layout.channels_last {
            x
        } else {
            x.contiguous()
        };
        Ok((self.layout.input(x), y))
    }

    /// The epoch's batches that trained nothing because every image in
    /// them was unreadable, one line each, since the last call.
    pub fn drain_empty(&mut self) -> Vec<String> {
        std::mem::take(&mut self.empty)
    }

    /// Lines naming the files left out since the last call.
    pub fn drain_skipped(&mut self) -> Vec<String> {
        std::mem::take(&mut self.skipped)
    }

    /// Ends the epoch's loader (a short last epoch leaves batches unread);
    /// what it delivered and how fast.
    pub fn end_epoch(&mut self) -> Option<crate::data::stream::LoaderStats> {
        self.loader.take().map(|l| l.stats())
    }
}

/// fast.ai's validation order and rectangles for a split, made once a run
/// from the images' headers (a store's index): (batch, side, plan).
pub(super) type RectCache = std::cell::RefCell<Option<(usize, usize, Arc<RectPlan>)>>;

fn rect_plan(
    val: &Arc<dyn Images>,
    batch: usize,
    size: usize,
    cache: &RectCache,
) -> Result<Arc<RectPlan>> {
    if let Some((b, s, p)) = cache.borrow().as_ref()
        && (*b, *s) == (batch, size)
    {
        return Ok(Arc::clone(p));
    }
    let dims = (0..val.count())
        .map(|i| val.dims(i).with_context(|| val.name(i)))
        .collect::<Result<Vec<_>>>()?;
    let p = Arc::new(rect::plan(&dims, batch, size));
    *cache.borrow_mut() = Some((batch, size, Arc::clone(&p)));
    Ok(p)
}

/// The validation pass's images, pipeline and options at epoch `epoch`'s
/// phase: a centre crop, or fast.ai's rectangles over the images in their
/// aspect-ratio order.
/// Each validation batch's (height, width) with fast.ai's rectangles.
type Rects = Vec<(usize, usize)>;

fn val_loader(
    val: &Arc<dyn Images>,
    sp: &StreamPlan,
    eval: &EvalPlan,
    (epoch, shard): (usize, Shard),
    rect_cache: &RectCache,
) -> Result<(Arc<dyn Images>, Pipeline, LoaderOptions)> {
    let phase = sp.at(epoch);
    let batch = eval.batch.max(1);
    // The validation order, and each batch's rectangle with fast.ai's.
    let (order, crop, rects): (Vec<usize>, Crop, Option<Rects>) = if phase.rect_val {
        let p = rect_plan(val, batch, phase.eval_size, rect_cache)?;
        (p.order.clone(), Crop::Rect, Some(p.sizes.clone()))
    } else {
        let crop = Crop::Centre {
            ratio: phase.eval_ratio,
        };
        ((0..val.count()).collect(), crop, None)
    };
    let (batches, ids) = deal_batches(&order, batch, shard);
    let rects = rects.map(|r| Arc::new(batches.iter().map(|&b| r[b]).collect::<Vec<_>>()));
    let images: Arc<dyn Images> = if shard == Shard::WHOLE && !phase.rect_val {
        Arc::clone(val)
    } else {
        Arc::new(Subset {
            inner: Arc::clone(val),
            ids,
        })
    };
    let opts = LoaderOptions {
        batch,
        workers: workers(sp),
        prefetch: sp.prefetch,
        seed: 0,
        epoch: 0,
        shuffle: false,
        drop_last: false,
        rank: 0,
        world: 1,
        on_bad: on_bad(sp),
        rect: rects,
        skip_hint: SKIP_SETTING,
        whole: sp.crop_on_device,
    };
    let pipeline = Pipeline {
        size: phase.eval_size,
        crop,
        flip: false,
    };
    Ok((images, pipeline, opts))
}

/// A rank's share of the validation batches of `order`: whole batches,
/// every world-th from its rank on, as fast.ai's DistValSampler deals them
/// (so each keeps its rectangle). Returns the batches and their images.
fn deal_batches(order: &[usize], batch: usize, shard: Shard) -> (Vec<usize>, Vec<usize>) {
    let batches: Vec<usize> = (0..order.len().div_ceil(batch))
        .filter(|b| b % shard.world == shard.rank)
        .collect();
    let ids = batches
        .iter()
        .flat_map(|&b| {
            order[b * batch..((b + 1) * batch).min(order.len())]
                .iter()
                .copied()
        })
        .collect();
    (batches, ids)
}

/// Correct predictions without and with TTA over `shard` of the
/// validation split at epoch `epoch`'s phase, streamed through a centre
/// crop (or fast.ai's rectangles); counted on the device and read once.
/// Also returns lines naming the images left out.
#[allow(clippy::too_many_arguments, reason = "the run's decisions, once")]
pub(super) fn evaluate_stream(
    net: &Net,
    val: &Arc<dyn Images>,
    sp: &StreamPlan,
    eval: &EvalPlan,
    layout: Layout,
    device: Device,
    (epoch, shard): (usize, Shard),
    rect_cache: &RectCache,
) -> Result<(Counts, Vec<String>)> {
    let (images, pipeline, opts) = val_loader(val, sp, eval, (epoch, shard), rect_cache)?;
    let level = eval.tta_level;
    let mut skipped = Vec::new();
    let counts = tch::no_grad(|| -> Result<Counts> {
        let fwd = |t: &Tensor| forward_eval(net, t, layout);
        let hits =
            |logits: &Tensor, y: &Tensor| logits.argmax(-1, false).eq_tensor(y).sum(Kind::Int64);
        let mut plain = Tensor::zeros([], (Kind::Int64, device));
        let mut tta = Tensor::zeros([], (Kind::Int64, device));
        let norm = Normaliser::new(device);
        let mut n = 0usize;
        for b in Loader::new(images, pipeline, &opts)? {
            let b = b?;
            skipped.extend(b.skipped.iter().cloned());
            if b.is_empty() {
                continue;
            }
            n += b.len();
            let (x, y) = to_device(&b, &norm, device)?;
            let x = x.contiguous();
            let logits = fwd(&x);
            let _ = plain.g_add_(&hits(&logits, &y));
            if level > 0 {
                let l = tta_of(eval, &fwd, &x, &logits);
                let _ = tta.g_add_(&hits(&l, &y));
            }
        }
        // A rank may be dealt no batch of a small split; the gang's sum is
        // checked for images by the caller.
        Ok(Counts::read(&plain, &tta, level, n as f64))
    })?;
    Ok((counts, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that trained no step, or under half its planned steps, is
    /// refused by name; one that lost a few batches, or planned none, is not.
    #[test]
    fn a_run_that_trained_too_few_of_its_planned_steps_fails_by_name() {
        let err = |t, p, e| format!("{:#}", check_trained(t, p, e, "broken").unwrap_err());
        let none = err(0, 30, 30);
        assert!(
            none.starts_with("trained 0 of 30 planned steps")
                && none.contains("every training batch held no readable image")
                && none.contains("stream.on_bad_image = skip")
                && none.contains("`tricklab data check broken`")
                && none.contains("stream.on_bad_image = fail")
                && none.lines().count() == 1,
            "{none}"
        );
        let few = err(14, 30, 16);
        assert!(
            few.starts_with("trained 14 of 30") && few.contains("16 of its batches"),
            "{few}"
        );
        assert!(check_trained(15, 30, 15, "d").is_ok());
        assert!(check_trained(28, 30, 2, "d").is_ok());
        assert!(check_trained(0, 0, 0, "d").is_ok());
    }

    #[test]
    fn validation_batches_are_dealt_whole_to_the_ranks_in_turn() {
        let order: Vec<usize> = (0..10).rev().collect();
        let deal = |rank| deal_batches(&order, 4, Shard { rank, world: 2 });
        assert_eq!(deal(0), (vec![0, 2], vec![9, 8, 7, 6, 1, 0]));
        assert_eq!(deal(1), (vec![1], vec![5, 4, 3, 2]));
        assert_eq!(deal_batches(&order, 4, Shard::WHOLE).1, order);
    }

    /// The streaming executor reads the list: the crop with a phase's
    /// smallest share over the crop's own, the flip, and a refusal naming an
    /// op it has no form for.
    #[test]
    fn the_stream_reads_the_augmentation_list_and_refuses_what_it_cannot_apply() {
        let crop = AugOp::ResizedCrop {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        };
        let phase = |min_scale| StreamPhase {
            from: 0,
            size: 64,
            min_scale,
            eval_size: 64,
            eval_ratio: 0.875,
            rect_val: false,
        };
        let mut a = Augment::default();
        a.set(crop);
        let p = train_pipeline(&a, &phase(None), false).unwrap();
        assert_eq!((p.size, p.flip), (64, false));
        assert_eq!(
            p.crop,
            Crop::RandomResized {
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0)
            }
        );
        a.set(AugOp::Flip { alternating: false });
        let p = train_pipeline(&a, &phase(Some(0.5)), false).unwrap();
        assert!(p.flip);
        assert!(matches!(
            p.crop,
            Crop::RandomResized {
                scale: (0.5, 1.0),
                ..
            }
        ));
        // Fujitsu's last epochs: validation's centre crop at the training
        // side, unflipped, whatever the list says.
        let p = train_pipeline(&a, &phase(Some(0.5)), true).unwrap();
        assert_eq!((p.size, p.flip), (64, false));
        assert_eq!(p.crop, Crop::Centre { ratio: 0.875 });
        let sp = |plain_last| StreamPlan {
            res: crate::plan::Resolution::Fixed(64),
            eval_size: 64,
            eval_ratio: 0.875,
            workers: 1,
            prefetch: 1,
            skip_bad: false,
            phases: Vec::new(),
            plain_last,
            crop_on_device: false,
        };
        let plain: Vec<usize> = (0..90).filter(|&e| sp(5).plain_at(e, 90.0)).collect();
        assert_eq!(plain, vec![85, 86, 87, 88, 89]);
        assert!((0..90).all(|e| !sp(0).plain_at(e, 90.0)));
        a.set(AugOp::Cutout { size: 8 });
        let e = train_pipeline(&a, &phase(None), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot apply `cutout(8×8)`"), "{e}");
        let e = train_pipeline(&Augment::default(), &phase(None), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no resized crop"), "{e}");
    }
}
