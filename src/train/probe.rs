//! The probe step that prices a matrix before it is started: a few training
//! steps and one evaluation of the run's net on this device, outside every
//! clock.

use super::build::{Optimisers, build_net};
use super::engine::{TchTrainer, sync};
use super::eval::{Shard, evaluate};
use super::prepare::{Layout, preprocess, upload};
use crate::native::Rng;
use crate::plan::{PlannedRun, RunPlan};
use anyhow::Result;
use std::time::Instant;
use tch::{Tensor, nn};

/// What a probe measured of one run's net on this device: a training step's
/// seconds (mean and range over several steps), one evaluation's, and what
/// a run pays before its first step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Probe {
    /// Seconds a training step at the run's batch takes: low, typical, high.
    /// Typical is the mean at the run's own batch (a run's steps add up, so
    /// a busy machine's stalls count as often as they come) and the median
    /// where a smaller batch is scaled up (one stall scaled ×32 would price
    /// the run, issue 64).
    pub step_s: [f64; 3],
    /// The batch the steps were timed at (the run's own, unless a step at
    /// it would cost more than [`TchTrainer::PROBE_STEP_BUDGET_S`]).
    pub probe_batch: usize,
    /// Training steps timed (after an untimed one): [`TchTrainer::PROBE_STEPS`],
    /// fewer where a step is slow.
    pub steps: usize,
    /// Seconds one evaluation of the run's test set takes, TTA included.
    pub eval_s: f64,
    /// Seconds a run spends before its first step, as a run spends them:
    /// its data on the device and preprocessed, its net built and its
    /// whitening fitted (`prep_s`, `build_s` and `whiten_s` of a run).
    pub overhead_s: f64,
}

impl TchTrainer {
    /// Images of the first, small probe steps, which decide the batch the
    /// others run at.
    pub const PROBE_BATCH: usize = 16;
    /// Small steps timed to decide the batch: the fastest decides, so one
    /// stalled step on a busy machine does not shrink the probe's batch.
    pub const PROBE_SMALL_STEPS: usize = 3;
    /// The longest a timed probe step may take: below it the run's own batch
    /// is probed; above it a smaller one is, and scaled.
    pub const PROBE_STEP_BUDGET_S: f64 = 1.0;
    /// Timed steps at most. On a busy machine a step's time swings with the
    /// other processes' turns: five steps (1.5 s) priced a loaded run at
    /// 64% of its time, issue 64's calibration; as many as fit the time
    /// budget, up to this many, sample the swing.
    pub const PROBE_STEPS: usize = 40;
    /// Seconds the timed steps may take together (one is always timed).
    pub const PROBE_TIME_BUDGET_S: f64 = 5.0;

    /// Probes what a run of `run`'s net costs on this device, on random
    /// images: its prologue (data, build, whitening) as a run pays it, small
    /// steps, then as many timed steps at the run's batch as fit
    /// [`Self::PROBE_TIME_BUDGET_S`] where a step fits the step budget, and
    /// one evaluation. A probe for what a matrix will cost, not a
    /// measurement.
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
        let overhead_s = timed_s(self.device, || {
            drop(preprocess(plan, upload(plan, &src, self.device)));
        });
        // Seeded and under the default generators' lock, as a run's build:
        // a probe beside a running worker must not draw inside its init.
        let started = Instant::now();
        let (net, _) = crate::native::with_seeded_inits(self.device, run.spec.seed, || {
            build_net(plan, &src, &vs, layout, &rng)
        })?;
        sync(self.device);
        let overhead_s = overhead_s + started.elapsed().as_secs_f64();
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
        // The first step pays one-time costs; the fastest of the next few
        // says what a small step costs.
        let small = full.min(Self::PROBE_BATCH);
        let (x, y) = images(small);
        step(&x, &y);
        let small_s = (0..Self::PROBE_SMALL_STEPS)
            .map(|_| step(&x, &y))
            .fold(f64::INFINITY, f64::min);
        // Each larger batch warmed by one step (new shapes pay once), then
        // timed by the faster of the two.
        let probe_batch = batch_within(full, small, small_s, Self::PROBE_STEP_BUDGET_S, |b| {
            let (x, y) = images(b);
            step(&x, &y).min(step(&x, &y))
        });
        let (x, y) = images(probe_batch);
        let mut times = Vec::new();
        if probe_batch == small {
            times.push(small_s);
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
            overhead_s,
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

/// The batch to time steps at: doubled from `small` towards the run's
/// `full` batch while the next step, projected along the line through the
/// last two timed (`step(b)` times one of `b` images), fits `budget_s`.
///
/// Measured, not projected from the small step alone: on a CPU whose
/// cores other processes hold, a step's threads wait on each other's turns
/// and a step of 16 images took as long as one of 128 (1.3 s). Projected
/// in proportion to the images, that priced the demo ladder at 2.6 h where
/// it took 6 min (issue 64's calibration).
fn batch_within(
    full: usize,
    small: usize,
    small_s: f64,
    budget_s: f64,
    mut step: impl FnMut(usize) -> f64,
) -> usize {
    let (mut b, mut t) = (small, small_s);
    // Before a second point, no fixed cost is assumed.
    let mut per_image = small_s / small.max(1) as f64;
    while b < full {
        let next = (2 * b).min(full);
        // The first doubling is tried even over budget (a second point is
        // what tells a fixed cost from a per-image one), unless the small
        // step alone is already twice the budget.
        let first = b == small && small_s <= 2.0 * budget_s;
        if !first && t + per_image * (next - b) as f64 > budget_s {
            break;
        }
        let tn = step(next);
        per_image = ((tn - t) / (next - b) as f64).max(0.0);
        (b, t) = (next, tn);
    }
    b
}

/// Low, typical and high seconds of a step at `full` images from steps
/// timed at `probe` images (sorted). At the run's own batch: the fastest,
/// the mean and the slowest step. From a smaller batch: a step's time is about a + b·batch
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
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        return [lo, mean, hi];
    }
    let ratio = full as f64 / probe as f64;
    // Two points give the line; one (the small step alone) gives only a
    // proportion, which leaves out any fixed cost.
    let per_image = (probe > small).then(|| ((med - small_s) / (probe - small) as f64).max(0.0));
    let line = |t: f64| match per_image {
        Some(b) => t + b * (full - probe) as f64,
        None => t * ratio,
    };
    [line(lo), line(med), (hi * ratio).max(line(med))]
}

#[cfg(test)]
mod tests {
    use super::{batch_within, scale_steps};

    #[test]
    fn the_run_batch_is_probed_when_a_step_at_it_fits_the_budget() {
        // A step's seconds: `fixed` plus `per` an image; the batches timed.
        let run = |full: usize, small_s: f64, fixed: f64, per: f64| {
            let mut timed = Vec::new();
            let b = batch_within(full, full.min(16), small_s, 1.0, |b| {
                timed.push(b);
                fixed + per * b as f64
            });
            (b, timed)
        };
        // 16 images in 0.01 s: doubled up to 512, each size timed once.
        let (b, timed) = run(512, 0.01, 0.0, 0.01 / 16.0);
        assert_eq!((b, timed), (512, vec![32, 64, 128, 256, 512]));
        // 16 images in 0.1 s: 128 would take 0.8 s, 256 1.6 s.
        assert_eq!(run(512, 0.1, 0.0, 0.1 / 16.0).0, 128);
        // A busy CPU: 16 images in 1.3 s, and 32 too (threads waiting on
        // each other's turns, not images, take the time). The second point
        // shows no cost an image; the next is over budget all the same.
        assert_eq!(run(128, 1.3, 1.3, 0.0), (32, vec![32]));
        // A small step over twice the budget is not doubled.
        assert_eq!(run(512, 5.0, 0.0, 5.0 / 16.0), (16, vec![]));
        // The first doubling is tried; its slope says the next is too slow.
        assert_eq!(run(512, 1.5, 0.0, 1.5 / 16.0), (32, vec![32]));
        assert_eq!(run(8, 5.0, 0.0, 0.1).0, 8);
    }

    #[test]
    fn steps_at_the_run_batch_give_fastest_mean_slowest() {
        // A run's steps add up: the mean prices it, the slow one included.
        let s = scale_steps(&[1.0, 1.1, 1.2, 1.3, 9.0], (16, 0.1), 512, 512);
        assert_eq!((s[0], s[2]), (1.0, 9.0));
        assert!((s[1] - 2.72).abs() < 1e-9, "{s:?}");
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
        // A busy CPU's flat line (16 and 32 images in 1.3 s each) prices
        // 128 at 1.3 s, not ×4 (issue 64's calibration: 2.6 h for 6 min).
        let s = scale_steps(&[1.3, 1.3, 1.3], (16, 1.3), 32, 128);
        assert!((s[1] - 1.3).abs() < 1e-9, "{s:?}");
        // From the small step alone, in proportion.
        let s = scale_steps(&[0.2], (16, 0.2), 16, 128);
        assert!((s[1] - 1.6).abs() < 1e-9, "{s:?}");
    }
}
