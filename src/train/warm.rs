//! The discarded warm-up that pays a process's one-time costs before its
//! first timed run, outside every clock.

use crate::plan::{PlannedRun, RunPlan};

/// Images per class the discarded warm-up trains and evaluates on.
const WARM_UP_PER_CLASS: usize = 8;
/// The most images a streaming run's warm-up reads.
const WARM_UP_STREAM_IMAGES: usize = 64;

/// The discarded warm-up: one step and one eval batch of a small batch of
/// the run's own net, precision and layout. It pays the process's one-time
/// costs (threads, allocator, library initialisation), which do not depend
/// on the batch; the run's own kernel selection is `cudnn_benchmark`'s
/// warm-up inside it. At full width on a CPU a full-size step would cost
/// seconds (26 s of a 103 s airbench94 run on 5,120 images) and buy nothing more.
/// `held`: the training images of the data set, in memory or streamed,
/// which a small one (`synthetic:64`, a tiny folder) may hold fewer of than
/// the warm-up's share: the warm-up takes at most those.
pub fn warm_up_run(run: &PlannedRun, classes: usize, held: usize) -> PlannedRun {
    let mut w = run.clone();
    let p: &mut RunPlan = &mut w.plan;
    let per = WARM_UP_PER_CLASS;
    let streamed = p.data.stream.is_some();
    // A streaming source may have a thousand classes: its warm-up takes the
    // first images, whatever their class.
    let images = match streamed {
        true => (per * classes.max(1)).min(WARM_UP_STREAM_IMAGES),
        false => per * classes.max(1),
    }
    .min(held);
    let splits =
        p.net.bn.ghost_splits.max(1) as usize * p.step.accum.max(1) as usize * p.world_size.max(1);
    // The largest multiple of the ghost-BN splits (of every rank's share)
    // that fits the images.
    p.batch_size = (images / splits).max(1) * splits;
    // One small batch: not the phases' batches.
    p.batch_phases.clear();
    p.epochs = 1.0;
    if streamed {
        p.data.train_per_class = 0;
        p.data.test_per_class = 0;
        p.data.max_images = Some((p.batch_size, images));
    } else {
        p.data.train_per_class = per.max(p.batch_size.div_ceil(classes.max(1)));
        p.data.test_per_class = per;
    }
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
