//! What runs outside the clocks before a run: the discarded warm-up that
//! pays a process's one-time costs, and the probe step that prices a matrix
//! before it is started.

use super::build::{Optimisers, build_net};
use super::engine::{TchTrainer, sync};
use super::prepare::{Layout, Source};
use crate::plan::{PlannedRun, RunPlan};
use crate::util::native::Rng;
use anyhow::Result;
use std::time::Instant;
use tch::nn;

impl TchTrainer {
    /// Images a probe step trains on: a CPU's step time grows about
    /// linearly with the batch, and a full batch of a full-size net in fp16
    /// takes minutes there.
    pub const PROBE_BATCH: usize = 16;

    /// Seconds one training step of `run` takes on this device, estimated:
    /// its net in its precision on random images, the second of two steps
    /// at [`Self::PROBE_BATCH`] images timed and scaled to its batch size. A
    /// probe for what a matrix will cost, not a measurement.
    pub fn probe_step_s(&mut self, run: &PlannedRun) -> Result<f64> {
        let plan = &run.plan;
        let data = self.dataset(&run.spec.data)?;
        let src = Source::new(&data)?;
        let layout = Layout::of(plan);
        let rng = Rng::new(self.device, run.spec.seed);
        let vs = nn::VarStore::new(self.device);
        let (net, _) = build_net(plan, &src, &vs, layout, &rng)?;
        let rates = plan.rates(2 * plan.batch_size as u64);
        let mut opt = Optimisers::new(plan, &net, &rates);
        let batch = plan.batch_size.min(Self::PROBE_BATCH);
        let shape = [batch as i64, 3, src.h, src.w];
        let x = layout.input(rng.rand(&shape, self.device) * 2.0 - 1.0);
        let y = rng.randint(src.classes, &[shape[0]], self.device);
        let mut seconds = 0.0;
        for s in 0..2 {
            sync(self.device);
            let t = Instant::now();
            let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y);
            (loss * plan.loss.scale).backward();
            opt.step(plan, s, &rates, true);
            sync(self.device);
            seconds = t.elapsed().as_secs_f64();
        }
        Ok(seconds * plan.batch_size as f64 / batch as f64)
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
