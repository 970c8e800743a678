//! The probe step that prices a matrix before it is started: a few training
//! steps and one evaluation of the run's net on this device, outside every
//! clock.

use super::build::{Optimisers, build_net};
use super::engine::{TchTrainer, sync};
use super::eval::{Shard, evaluate};
use super::prepare::Layout;
use crate::native::Rng;
use crate::plan::{PlannedRun, RunPlan};
use anyhow::Result;
use std::time::Instant;
use tch::{Tensor, nn};

/// What a probe measured of one run's net on this device: a training step's
/// seconds (median and range over several steps) and one evaluation's.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Probe {
    /// Seconds a training step at the run's batch takes: low, median, high.
    pub step_s: [f64; 3],
    /// The batch the steps were timed at (the run's own, unless a step at
    /// it would cost more than [`TchTrainer::PROBE_STEP_BUDGET_S`]).
    pub probe_batch: usize,
    /// Training steps timed (after an untimed one): [`TchTrainer::PROBE_STEPS`],
    /// fewer where a step is slow.
    pub steps: usize,
    /// Seconds one evaluation of the run's test set takes, TTA included.
    pub eval_s: f64,
}

impl TchTrainer {
    /// Images of the first, small probe step, which decides the batch the
    /// others run at.
    pub const PROBE_BATCH: usize = 16;
    /// The longest a timed probe step may take: below it the run's own batch
    /// is probed; above it a smaller one is, and scaled.
    pub const PROBE_STEP_BUDGET_S: f64 = 1.0;
    /// Timed steps at most; their median prices the run, their spread is
    /// the range.
    pub const PROBE_STEPS: usize = 5;
    /// Seconds the timed steps may take together (one is always timed).
    pub const PROBE_TIME_BUDGET_S: f64 = 5.0;

    /// Probes what a run of `run`'s net costs on this device, on random
    /// images: a small step, then up to [`Self::PROBE_STEPS`] timed steps at
    /// the run's batch where a step fits the budget, and one evaluation. A
    /// probe for what a matrix will cost, not a measurement.
    ///
    /// One step of 16 images scaled ×32 to a batch of 512 magnified any
    /// stall in it ×32 (the same matrix priced at 30 min and at 2 days): the
    /// median of several steps at the real batch is not moved by one stall.
    pub fn probe_net(&mut self, run: &PlannedRun) -> Result<Probe> {
        let plan = &run.plan;
        let (src, ..) = self.source_of(run)?;
        let layout = Layout::of(plan);
        let rng = Rng::new(self.device, run.spec.seed);
        let vs = nn::VarStore::new(self.device);
        // Seeded and under the default generators' lock, as a run's build:
        // a probe beside a running worker must not draw inside its init.
        let (net, _) = crate::native::with_seeded_inits(self.device, run.spec.seed, || {
            build_net(plan, &src, &vs, layout, &rng)
        })?;
        let rates = plan.rates(2 * plan.batch_size as u64);
        let mut opt = Optimisers::new(plan, &net, &rates);
        let images_at = |b: usize, side: (i64, i64)| {
            let shape = [b as i64, 3, side.0, side.1];
            let x = layout.input(rng.rand(&shape, self.device) * 2.0 - 1.0);
            (x, rng.randint(src.classes, &[shape[0]], self.device))
        };
        let images = |b: usize| images_at(b, (src.h, src.w));
        // A streaming run evaluates at its own validation side.
        let eval_side = plan
            .data
            .stream
            .as_ref()
            .map_or((src.h, src.w), |s| (s.eval_size as i64, s.eval_size as i64));
        let eval_images = |b: usize| images_at(b, eval_side);
        let mut step = |x: &Tensor, y: &Tensor| {
            timed_s(self.device, || {
                let loss = net.forward_t(x, true).cross_entropy_for_logits(y);
                (loss * plan.loss.scale).backward();
                opt.step(plan, 0, &rates, true);
            })
        };
        let full = plan.batch_size;
        // The first step pays one-time costs; the second says what a step
        // of this net costs per image.
        let small = full.min(Self::PROBE_BATCH);
        let (x, y) = images(small);
        step(&x, &y);
        let small_s = step(&x, &y);
        let probe_batch = batch_within(full, small, small_s, Self::PROBE_STEP_BUDGET_S);
        let (x, y) = images(probe_batch);
        let mut times = Vec::new();
        if probe_batch == small {
            times.push(small_s);
        } else {
            step(&x, &y);
        }
        // Up to PROBE_STEPS, as long as the next fits the probe's time: a
        // net that takes a minute a step here (fp16 on a CPU) is priced
        // from the one step already timed rather than five more minutes.
        let started = Instant::now();
        let mut last = times.last().copied().unwrap_or(0.0);
        while times.len() < Self::PROBE_STEPS
            && (times.is_empty()
                || started.elapsed().as_secs_f64() + last <= Self::PROBE_TIME_BUDGET_S)
        {
            last = step(&x, &y);
            times.push(last);
        }
        times.sort_by(f64::total_cmp);
        let step_s = scale_steps(&times, (small, small_s), probe_batch, full);
        let eval_s = self.probe_eval(
            plan,
            &net,
            layout,
            &eval_images,
            probe_batch,
            src.test_len(),
        )?;
        Ok(Probe {
            step_s,
            probe_batch,
            steps: times.len(),
            eval_s,
        })
    }

    /// One evaluation of the run's test set, timed on as many random images
    /// as a probe step used (or the eval batch, if smaller) and scaled.
    fn probe_eval(
        &self,
        plan: &RunPlan,
        net: &crate::model::Net,
        layout: Layout,
        images: &dyn Fn(usize) -> (Tensor, Tensor),
        probe_batch: usize,
        test: usize,
    ) -> Result<f64> {
        let test = test.max(1);
        let n = probe_batch.min(plan.eval.batch.max(1)).min(test);
        let (x, y) = images(n);
        let once = || {
            timed_s(self.device, || {
                evaluate(net, (&x, &y), &plan.eval, layout, None, Shard::WHOLE);
            })
        };
        once();
        Ok(once() * test as f64 / n as f64)
    }
}

/// Seconds `f` takes on `device`, its queued work included.
fn timed_s(device: tch::Device, f: impl FnOnce()) -> f64 {
    sync(device);
    let t = Instant::now();
    f();
    sync(device);
    t.elapsed().as_secs_f64()
}

/// The batch to time steps at: the run's own where a step at it is
/// projected (linearly from a small step) within `budget_s`, else the
/// largest multiple of `small` that is.
fn batch_within(full: usize, small: usize, small_s: f64, budget_s: f64) -> usize {
    let per_image = small_s / small.max(1) as f64;
    if per_image * full as f64 <= budget_s || small >= full {
        return full;
    }
    let fits = (budget_s / per_image / small as f64).floor() as usize;
    (fits.max(1) * small).min(full)
}

/// Low, median and high seconds of a step at `full` images from steps timed
/// at `probe` images (sorted). At the run's own batch: the fastest, median
/// and slowest step. From a smaller batch: a step's time is about a + b·batch
/// (a fixed launch and bookkeeping cost, b per image), so the line through
/// the small step and the median extrapolates the median and the low end,
/// and scaling in proportion (no fixed cost) bounds the high end.
fn scale_steps(
    sorted: &[f64],
    (small, small_s): (usize, f64),
    probe: usize,
    full: usize,
) -> [f64; 3] {
    let (lo, med, hi) = (
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    if probe >= full {
        return [lo, med, hi];
    }
    let ratio = full as f64 / probe as f64;
    let per_image = if probe > small {
        ((med - small_s) / (probe - small) as f64).max(0.0)
    } else {
        0.0
    };
    let line = |t: f64| {
        if per_image > 0.0 {
            t + per_image * (full - probe) as f64
        } else {
            t * ratio
        }
    };
    [line(lo), line(med), (hi * ratio).max(line(med))]
}

#[cfg(test)]
mod tests {
    use super::{batch_within, scale_steps};

    #[test]
    fn the_run_batch_is_probed_when_a_step_at_it_fits_the_budget() {
        // 16 images in 0.01 s: 512 in about 0.32 s.
        assert_eq!(batch_within(512, 16, 0.01, 1.0), 512);
        // 16 images in 0.1 s: 512 would take 3.2 s; 160 fit in 1 s.
        assert_eq!(batch_within(512, 16, 0.1, 1.0), 160);
        // Even a small step over budget probes at the small batch.
        assert_eq!(batch_within(512, 16, 5.0, 1.0), 16);
        assert_eq!(batch_within(8, 8, 5.0, 1.0), 8);
    }

    #[test]
    fn steps_at_the_run_batch_give_fastest_median_slowest() {
        let s = scale_steps(&[1.0, 1.1, 1.2, 1.3, 9.0], (16, 0.1), 512, 512);
        assert_eq!(s, [1.0, 1.2, 9.0]);
    }

    #[test]
    fn steps_at_a_smaller_batch_extrapolate_by_the_line_through_the_small_step() {
        // 0.05 s fixed + 0.01 s an image: 16 → 0.21 s, 160 → 1.65 s, 512 → 5.17 s.
        let s = scale_steps(&[1.6, 1.65, 1.7], (16, 0.21), 160, 512);
        assert!((s[1] - 5.17).abs() < 1e-9, "{s:?}");
        assert!((s[0] - (1.6 + 0.01 * 352.0)).abs() < 1e-9);
        // No fixed cost assumed for the high end: 1.7 × 3.2.
        assert!((s[2] - 1.7 * 3.2).abs() < 1e-9);
        assert!(s[0] <= s[1] && s[1] <= s[2]);
    }
}
