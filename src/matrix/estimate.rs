//! What a matrix will cost on a device before it is started: its runs'
//! training steps and evaluations priced by a probe of the first run's net
//! (the median of several steps at its batch, and one evaluation).
//! `matrix show --estimate`, and the scale guard of `run` and `nightly`,
//! print it.

use super::Matrix;
use anyhow::Result;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub runs: usize,
    pub device: String,
    /// Seconds a training step of the first run takes: the probe's mean at
    /// the run's batch, its median where a smaller batch was scaled.
    pub step_s: f64,
    pub batch: usize,
    pub probe_batch: usize,
    /// Timed probe steps behind `step_s`.
    pub probe_steps: usize,
    /// Seconds of one evaluation of the first run's test set, TTA included.
    pub eval_s: f64,
    /// Seconds a run spends before its first step (data on the device and
    /// preprocessed, net built, whitening fitted), as the probe paid them.
    pub overhead_s: f64,
    /// Seconds of every run's training steps, evaluations and prologue at
    /// the typical step, and of one session warm-up (a prologue and a step).
    pub total_s: f64,
    /// The same at the probe's fastest and slowest step.
    pub total_range_s: (f64, f64),
    /// Of every core's time during the probe, the share other processes
    /// used (as a run's `noisy` flag measures it); `None` where unread.
    pub other_cpu: Option<f64>,
    /// The factor the probe's step and evaluation were priced up by for a
    /// busy CPU's stalls ([`BUSY_STALLS`]); 1 on a quiet machine or a GPU.
    pub stalls: f64,
}

/// How much slower a busy CPU's runs step than its probe did. A run on
/// cores other processes hold meets stalls of tens of seconds (a step's
/// threads falling out of turn with the other processes), a few times a
/// run, which a probe of five seconds rarely sees. Calibrated (issue 64):
/// the demo ladder under two burners on 2 cores, 18 runs, stepped at 0.39
/// and 0.41 s against the probe's 0.245 s; ×1.6 brings the estimate within
/// 10% of both sessions (results/reference/benchmarks.md).
pub const BUSY_STALLS: f64 = 1.6;

/// Whether a probe on `device` that saw `other_cpu` of the cores used by
/// other processes is priced as a busy CPU's: over a quarter of the cores,
/// and a CPU (a GPU's steps other processes' CPU use barely touches).
fn busy_cpu(other_cpu: Option<f64>, device: &str) -> bool {
    other_cpu.is_some_and(|o| o > crate::util::machine::BUSY_SHARE) && device.starts_with("cpu")
}

impl Estimate {
    /// How much a busy machine slowed the probe, at least: ×1/(1 − share)
    /// when other processes took over a quarter of the cores (the share of
    /// the machine the probe did not get); `None` on a quiet machine or a
    /// GPU, whose steps other processes' CPU use barely touches. At least,
    /// because threads that wait on each other lose more than their share:
    /// two burners on 2 cores took half the cores and slowed the demo
    /// ladder ×4.3–4.8 (issue 64's calibration, results/reference/benchmarks.md).
    pub fn inflation(&self) -> Option<f64> {
        let o = self
            .other_cpu
            .filter(|_| busy_cpu(self.other_cpu, &self.device))?;
        Some(1.0 / (1.0 - o).max(0.05))
    }

    /// The most the matrix takes on an idle machine: the total with the
    /// busy machine's least inflation taken out (the scale guard's price,
    /// which so never refuses a matrix for another process's load).
    pub fn idle_total_s(&self) -> f64 {
        self.total_s / (self.inflation().unwrap_or(1.0) * self.stalls)
    }
}

/// A per-class cut of a data set: (train, test) images a class.
type Cut = (Option<usize>, Option<usize>);

/// A matrix's data as its runs will read it, opened once and only in the
/// forms its variants use: in memory, or streamed (an image folder is
/// indexed, never decoded).
pub struct DataCounts {
    spec: String,
    /// Read every streamed image's header and end as the runs will
    /// (`StreamData::precheck`): the session's pre-check, not the estimate's.
    pub precheck: bool,
    /// The cuts (per-class limits) already prechecked, and whether their
    /// runs skip bad images: once each, not once a variant.
    checked: Vec<(Cut, bool)>,
    /// What the pre-check found that runs will skip, one line each.
    pub notes: Vec<String>,
    memory: Option<crate::data::Dataset>,
    stream: Option<crate::data::stream::StreamData>,
}

impl DataCounts {
    pub fn new(spec: &str) -> DataCounts {
        DataCounts {
            spec: spec.to_string(),
            precheck: false,
            checked: Vec::new(),
            notes: Vec::new(),
            memory: None,
            stream: None,
        }
    }

    /// The training images a run of `plan` trains on (its per-class cut
    /// applied); a streaming source must also have validation images.
    pub fn train_images(&mut self, plan: &crate::plan::RunPlan) -> anyhow::Result<usize> {
        let per = |n: usize| (n > 0).then_some(n);
        let d = &plan.data;
        if d.stream.is_some() {
            let s = match &mut self.stream {
                Some(s) => s,
                slot => slot.insert(crate::data::stream::StreamData::open(
                    &self.spec,
                    crate::data::load,
                )?),
            };
            let cut = s.subset(per(d.train_per_class), per(d.test_per_class));
            let key = (per(d.train_per_class), per(d.test_per_class));
            // A run that skips unreadable images (`stream.on_bad_image =
            // skip`) is not refused: the session says what it will skip.
            let skips = d.stream.as_ref().is_some_and(|st| st.skip_bad);
            if self.precheck && !self.checked.contains(&(key, skips)) {
                self.notes.extend(cut.precheck(&self.spec, skips)?);
                self.checked.push((key, skips));
            }
            // A run on no training image would be stored as done at chance
            // accuracy in no time: refused before it starts.
            if cut.train.count() == 0 {
                anyhow::bail!(
                    "data set `{}` has no training images: put each class's images in train/<class>/ (.jpg, .jpeg or .png)",
                    self.spec
                );
            }
            if cut.val.count() == 0 {
                anyhow::bail!(
                    "data set `{}` has no validation images: add val/<class>/ (or test/) images, or ImageNet's flat val/ with LOC_val_solution.csv",
                    self.spec
                );
            }
            return Ok(cut.train.count());
        }
        let m = match &mut self.memory {
            Some(m) => m,
            slot => slot.insert(crate::data::load(&self.spec)?),
        };
        Ok(m.train_len(per(d.train_per_class)))
    }
}

/// Probes the first run's net on `device` and prices every run's steps and
/// evaluations.
pub fn estimate(m: &Matrix, device: &str) -> Result<Estimate> {
    let runs = m.runs();
    let Some(first) = runs.first() else {
        anyhow::bail!("{}: no runs to estimate", m.name);
    };
    if m.script.is_some() {
        anyhow::bail!(
            "{}: a script matrix is priced by its earlier runs (the picker and `report` show them), not by a probe: tricklab cannot time one step of a script",
            m.name
        );
    }
    let mut data = super::DataCounts::new(&m.data);
    let planned = m.planned(first)?;
    let mut trainer = crate::train::new_trainer(device)?;
    // A probe taken while other processes hold the cores prices their load,
    // not the matrix: read the machine as a run does, and probe once more if
    // it was busy. A quiet reading wins; of two busy ones the faster does,
    // as BUSY_STALLS is calibrated on a probe outside a stall (one probe in
    // five, under two burners, fell in one and priced the demo ladder at
    // 40 min where it took 6).
    let mut best: Option<(crate::train::Probe, Option<f64>)> = None;
    for _ in 0..2 {
        let start = crate::util::machine::probe(None);
        let p = trainer.probe(&planned)?;
        let other = crate::util::machine::between(&start, &crate::util::machine::probe(None), None)
            .other_cpu;
        let keep = match &best {
            None => true,
            Some((b, o)) => better((&p, other), (b, *o)),
        };
        if keep {
            best = Some((p, other));
        }
        if best
            .as_ref()
            .is_some_and(|(_, o)| o.is_none_or(|o| o <= crate::util::machine::BUSY_SHARE))
        {
            break;
        }
    }
    let (probe, other_cpu) = best.expect("one probe at least");
    let busy = busy_cpu(other_cpu, &trainer.device_name());
    let stalls = if busy { BUSY_STALLS } else { 1.0 };
    let [lo, med, hi] = probe.step_s.map(|s| s * stalls);
    let eval_s = probe.eval_s * stalls;
    // A session warms each worker once, untimed: one run's prologue and a
    // step (`Trainer::warm_up`).
    let mut totals = [lo, med, hi].map(|step| probe.overhead_s + step);
    for r in &runs {
        let plan = &m.plans[r.id.index].1;
        let rates = plan.rates(data.train_images(plan)? as u64);
        let planned_epochs = plan.epochs.ceil() as usize;
        let evals = evaluations(rates.total, &rates.epoch_steps, &plan.eval, planned_epochs) as f64
            * eval_s;
        for (t, step) in totals.iter_mut().zip([lo, med, hi]) {
            *t += probe.overhead_s + rates.total as f64 * step + evals;
        }
    }
    Ok(Estimate {
        runs: runs.len(),
        device: trainer.device_name(),
        step_s: med,
        batch: planned.plan.batch_size,
        probe_batch: probe.probe_batch,
        probe_steps: probe.steps,
        eval_s,
        overhead_s: probe.overhead_s,
        stalls,
        total_s: totals[1],
        total_range_s: (totals[0], totals[2]),
        other_cpu,
    })
}

/// Whether probe `a` (with the share of the cores other processes used
/// during it) prices the matrix better than `b`: a quiet machine's over a
/// busy one's, else the quieter; of two busy ones, the faster step.
fn better(
    (a, a_other): (&crate::train::Probe, Option<f64>),
    (b, b_other): (&crate::train::Probe, Option<f64>),
) -> bool {
    let busy = |o: Option<f64>| o.is_some_and(|o| o > crate::util::machine::BUSY_SHARE);
    match (busy(a_other), busy(b_other)) {
        (true, true) => a.step_s[1] < b.step_s[1],
        (false, false) => a_other.unwrap_or(1.0) < b_other.unwrap_or(1.0),
        (a_busy, _) => !a_busy,
    }
}

/// Evaluations a run of `steps` makes, epoch by epoch as the engine's
/// `evaluate_epoch` decides (`EvalPlan::due`: every `every` epochs, after
/// the last, possibly partial, and each the median readout takes) of the
/// plan's `planned` epochs; `epoch_steps` are each epoch's steps.
fn evaluations(
    steps: u64,
    epoch_steps: &[u64],
    eval: &crate::plan::EvalPlan,
    planned: usize,
) -> u64 {
    let mut left = steps;
    let mut epochs = 0usize;
    for &n in epoch_steps {
        if left == 0 {
            break;
        }
        left = left.saturating_sub(n.max(1));
        epochs += 1;
    }
    (0..epochs)
        .filter(|&e| eval.due(e, planned, e + 1 == epochs).0)
        .count() as u64
}

/// Seconds as a person reads a duration.
pub fn human(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} days", s / 86_400.0),
    }
}

impl Estimate {
    pub fn line(&self, origin: &str) -> String {
        let (lo, hi) = self.total_range_s;
        // One probe step has no median, and a range whose ends read alike
        // is one value (issue 64: "29.4 days–29.4 days … median of 1 probe steps").
        let scaled = self.probe_batch != self.batch;
        let steps = match (self.probe_steps, scaled) {
            (1, _) => "one probe step".to_string(),
            (n, false) => format!("the mean of {n} probe steps"),
            (n, true) => format!("the median of {n} probe steps"),
        };
        let at = if scaled {
            format!("scaled from {steps} at batch {}", self.probe_batch)
        } else {
            format!("{steps} at that batch")
        };
        let range = if human(lo) == human(hi) {
            String::new()
        } else {
            format!(" ({}–{})", human(lo), human(hi))
        };
        let busy = self.inflation().map_or(String::new(), |x| {
            format!(
                "; the machine is busy: other processes used {:.0}% of the cores during the probe, and this prices the machine as busy as that, steps and evaluations ×{:.1} for the stalls a busy CPU's runs meet (idle, it would take ×{x:.1} less at least: {} or less)",
                100.0 * self.other_cpu.unwrap_or(0.0),
                self.stalls,
                human(self.idle_total_s())
            )
        });
        format!(
            "{origin}: {} runs, about {}{range} in all on {} ({:.2} s a training step at batch {}, {at}; {:.2} s an evaluation; {:.1} s a run before its first step, and one warm-up){busy}",
            self.runs,
            human(self.total_s),
            self.device,
            self.step_s,
            self.batch,
            self.eval_s,
            self.overhead_s,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Estimate, better, evaluations};

    #[test]
    fn a_quiet_probe_wins_and_of_two_busy_ones_the_faster() {
        let at = |step: f64| crate::train::Probe {
            step_s: [step; 3],
            probe_batch: 128,
            steps: 20,
            eval_s: 1.0,
            overhead_s: 0.1,
        };
        let (fast, slow) = (at(0.3), at(2.2));
        // Two busy probes: the one outside a stall.
        assert!(better((&fast, Some(0.5)), (&slow, Some(0.5))));
        assert!(!better((&slow, Some(0.5)), (&fast, Some(0.5))));
        // A quiet one over a busy one, however fast the busy one was.
        assert!(better((&slow, Some(0.1)), (&fast, Some(0.5))));
        assert!(!better((&fast, Some(0.5)), (&slow, Some(0.1))));
        // Two quiet ones: the quieter.
        assert!(better((&slow, Some(0.05)), (&fast, Some(0.2))));
    }

    #[test]
    fn a_busy_probe_says_so_and_prices_the_idle_machine_too() {
        let mut e = Estimate {
            runs: 4,
            device: "cpu".into(),
            step_s: 0.5,
            batch: 64,
            probe_batch: 64,
            probe_steps: 3,
            eval_s: 1.0,
            overhead_s: 2.0,
            total_s: 7200.0,
            total_range_s: (6000.0, 8000.0),
            other_cpu: Some(0.1),
            stalls: 1.0,
        };
        assert_eq!(e.inflation(), None);
        assert!(!e.line("m").contains("busy"));
        e.other_cpu = Some(0.6);
        e.stalls = 1.6;
        assert!((e.inflation().unwrap() - 2.5).abs() < 1e-9);
        assert!((e.idle_total_s() - 1800.0).abs() < 1e-6);
        let l = e.line("m");
        assert!(
            l.contains("the machine is busy: other processes used 60% of the cores")
                && l.contains("as busy as that, steps and evaluations ×1.6 for the stalls")
                && l.contains("(idle, it would take ×2.5 less at least: 30 min or less)")
                && l.contains("2.0 s a run before its first step, and one warm-up"),
            "{l}"
        );
        // A GPU's steps are not priced by the CPU's load.
        e.device = "cuda:0".into();
        assert_eq!(e.inflation(), None);
        assert!(
            e.line("m").contains("about 2.0 h (100 min–2.2 h)"),
            "{}",
            e.line("m")
        );
    }

    /// One probe step is no median, and a range whose ends read alike is
    /// one value (issue 64: "29.4 days–29.4 days … median of 1 probe steps").
    #[test]
    fn one_probe_step_and_an_empty_range_read_plainly() {
        let e = Estimate {
            runs: 4,
            device: "cuda:0".into(),
            step_s: 0.5,
            batch: 64,
            probe_batch: 32,
            probe_steps: 1,
            eval_s: 1.0,
            overhead_s: 2.0,
            total_s: 2_540_160.0,
            total_range_s: (2_540_160.0, 2_540_170.0),
            other_cpu: None,
            stalls: 1.0,
        };
        let l = e.line("m");
        assert!(
            l.contains("about 29.4 days in all") && !l.contains("–"),
            "{l}"
        );
        assert!(l.contains("scaled from one probe step at batch 32"), "{l}");
    }
    use crate::plan::EvalPlan;

    fn every(n: usize, median_of_last: usize) -> EvalPlan {
        EvalPlan {
            every: n,
            tta_level: 0,
            batch: 1,
            tta_fraction: None,
            median_of_last,
        }
    }

    #[test]
    fn evaluations_follow_the_engine_every_n_epochs_and_after_the_last() {
        // 10 steps an epoch: 25 steps are 3 epochs, the last partial.
        assert_eq!(evaluations(25, &[10; 3], &every(1, 0), 3), 3);
        // After epochs 2 and 3 (the last).
        assert_eq!(evaluations(30, &[10; 3], &every(2, 0), 3), 2);
        assert_eq!(evaluations(40, &[10; 4], &every(2, 0), 4), 2);
        assert_eq!(evaluations(5, &[10], &every(4, 0), 1), 1);
        // Epochs of different lengths (a batch that changes by phase).
        assert_eq!(evaluations(30, &[5, 5, 10, 10], &every(1, 0), 4), 4);
        // Goyal's readout: 90 epochs evaluated at the end and in each of the last 5.
        assert_eq!(evaluations(900, &[10; 90], &every(90, 5), 90), 5);
        assert_eq!(evaluations(900, &[10; 90], &every(30, 5), 90), 7);
    }
}
