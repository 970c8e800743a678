//! A planted trainer: the engine's events with planted seconds and
//! accuracies, and no libtorch work. Chosen by the hidden `TRICKLAB_PLANTED`
//! setting, so that the scenarios about sessions, stores and reports (resume,
//! kill -9, shards and merge, nightly, a full disk, compare) drive the real
//! binary end to end in a fraction of a second a run, with numbers they can
//! check exactly; the scenarios about training keep the real engine.
//!
//! `TRICKLAB_PLANTED` is a `;`-separated list (empty: every default):
//! - `step_ms=N`: wall milliseconds slept a step (default 2), so that a
//!   signal or a kill can land inside a run;
//! - `steps_per_epoch=N` (default 4);
//! - `probe_image_s=S`: a probe's seconds an image of a training step
//!   (default 0.01), priced as the engine's probe reports it;
//! - `steps_every=N`: a run's step rows are sent every N steps and at
//!   an epoch's end, as the engine's `metrics_every` sends them (default 0:
//!   once an epoch), so that a pause or a cancel is seen within N steps;
//! - `fail=VARIANT`: that variant's runs fail as a diverged run does;
//! - `panic=VARIANT`: that variant's runs panic, as a bug in the engine
//!   would (the worker reports it as an internal error), in the warm-up too;
//! - `warm_up=true`: before a worker's first run, the run once with its
//!   events discarded, as the engine warms up (default false: no warm-up);
//! - `acc_spread=P`: a seed moves a run's accuracy by up to ±P points
//!   (default 0.1); a tiny net's repeats spread by tens of points, which
//!   leaves an accuracy question open where a scenario needs one;
//! - `time_spread=P`: a seed moves a run's time by up to ±P% (default 1);
//!   0 with `acc_spread=0` gives every run of a variant its planted numbers
//!   exactly, so that two variants planted alike are decided the same at once;
//! - `VARIANT@SECONDS/ACC`: a variant's planted time on its clock and final
//!   accuracy (0-1). A variant not named gets `10 s × 0.9^rung` and
//!   `0.90 + 0.005 × rung`.
//!
//! Each run's time moves by up to ±1% (or `time_spread`) and its accuracy
//! by up to ±0.1 points (or `acc_spread`) with its seed (splitmix64 of the variant and the
//! seed), as repeats do, so that intervals and seeds-needed have a spread
//! to read. [`Planted::planted_at`] gives a scenario the same numbers (a
//! stored run's `dawn_s` and `acc`), to check a folder or a report exactly.

use super::{Control, Flow, Outcome, Probe, Trainer};
use crate::events::{Clocks, EpochRow, Event, RunSummary, StepRow};
use crate::plan::PlannedRun;
use crate::record::DataId;
use crate::util::splitmix::SplitMix64;
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment variable that turns the planted trainer on.
pub const PLANTED_ENV: &str = "TRICKLAB_PLANTED";

#[derive(Clone, Debug, PartialEq)]
pub struct Planted {
    step_ms: u64,
    steps_per_epoch: u64,
    probe_image_s: f64,
    /// Step rows sent every this many steps (0: once an epoch).
    steps_every: u64,
    fail: Vec<String>,
    panic: Vec<String>,
    warm_up: bool,
    /// How far a seed moves a run's accuracy, as a share (0.001: 0.1 points).
    acc_spread: f64,
    /// How far a seed moves a run's time, as a share (0.01: 1%).
    time_spread: f64,
    /// (variant, seconds, accuracy)
    variants: Vec<(String, f64, f64)>,
}

impl Planted {
    /// The planted trainer the environment asks for, if it asks for one.
    pub fn from_env() -> Result<Option<Planted>> {
        match std::env::var(PLANTED_ENV) {
            Ok(v) => Planted::parse(&v).map(Some),
            Err(_) => Ok(None),
        }
    }

    pub fn parse(spec: &str) -> Result<Planted> {
        let mut p = Planted {
            step_ms: 2,
            steps_per_epoch: 4,
            probe_image_s: 0.01,
            steps_every: 0,
            fail: Vec::new(),
            panic: Vec::new(),
            warm_up: false,
            acc_spread: 0.001,
            time_spread: 0.01,
            variants: Vec::new(),
        };
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || format!("{PLANTED_ENV}: cannot read `{entry}`");
            if let Some((variant, planted)) = entry.rsplit_once('@') {
                let (t, a) = planted.split_once('/').with_context(bad)?;
                p.variants.push((
                    variant.to_string(),
                    t.parse().with_context(bad)?,
                    a.parse().with_context(bad)?,
                ));
                continue;
            }
            match entry.split_once('=') {
                Some(("step_ms", v)) => p.step_ms = v.parse().with_context(bad)?,
                Some(("steps_per_epoch", v)) => {
                    p.steps_per_epoch = v.parse::<u64>().with_context(bad)?.max(1)
                }
                Some(("probe_image_s", v)) => p.probe_image_s = v.parse().with_context(bad)?,
                Some(("steps_every", v)) => p.steps_every = v.parse().with_context(bad)?,
                Some(("fail", v)) => p.fail.push(v.to_string()),
                Some(("panic", v)) => p.panic.push(v.to_string()),
                Some(("warm_up", v)) => p.warm_up = v.parse().with_context(bad)?,
                Some(("acc_spread", v)) => {
                    p.acc_spread = v.parse::<f64>().with_context(bad)? / 100.0
                }
                Some(("time_spread", v)) => {
                    p.time_spread = v.parse::<f64>().with_context(bad)? / 100.0
                }
                _ => bail!(
                    "{}: step_ms=, steps_per_epoch=, probe_image_s=, steps_every=, fail=, panic=, warm_up=, acc_spread=, time_spread= or VARIANT@SECONDS/ACC",
                    bad()
                ),
            }
        }
        Ok(p)
    }

    /// The run's planted seconds and final accuracy: the variant's own,
    /// moved a little by its seed.
    pub fn planted(&self, run: &PlannedRun) -> (f64, f64) {
        let id = &run.spec.id;
        self.planted_at(&id.variant, id.index, run.spec.seed)
    }

    /// The planted seconds and final accuracy of a run of `variant` at
    /// position `rung` of its matrix with `seed`: what a stored run of the
    /// planted trainer holds (its `dawn_s`, `acc` and `acc_tta`), so that a
    /// scenario can check its folder's and its report's numbers exactly.
    pub fn planted_at(&self, variant: &str, rung: usize, seed: u64) -> (f64, f64) {
        let (t, a) = self
            .variants
            .iter()
            .find(|(v, ..)| v == variant)
            .map(|&(_, t, a)| (t, a))
            .unwrap_or_else(|| {
                let rung = rung as f64;
                (10.0 * 0.9f64.powf(rung), 0.90 + 0.005 * rung)
            });
        let mut h = SplitMix64(
            variant
                .bytes()
                .fold(seed ^ 0x5EED, |h, b| h.rotate_left(5) ^ u64::from(b)),
        );
        let (u, v) = (2.0 * h.unit_f64() - 1.0, 2.0 * h.unit_f64() - 1.0);
        (
            t * (1.0 + self.time_spread * u),
            (a + self.acc_spread * v).clamp(0.0, 1.0),
        )
    }
}

impl Planted {
    /// The end of a run's first epoch for a variant planted to fail (as a
    /// diverged run does) or to panic (as a bug in the engine would).
    fn diverge(&self, variant: &str, step: u64) -> Result<()> {
        if self.panic.iter().any(|v| v == variant) {
            panic!("planted panic in `{variant}` at step {step}");
        }
        if self.fail.iter().any(|v| v == variant) {
            bail!("loss became NaN at step {step} (planted): lower lr or turn fp16 off");
        }
        Ok(())
    }

    /// A run's start of `total_steps` steps, as the engine announces it.
    fn started(&self, run: &PlannedRun, total_steps: u64) -> Event {
        let spec = &run.spec;
        Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            record: Arc::new(run.record(DataId::new("planted", "planted"), None)),
            total_steps,
            total_epochs: run.plan.epochs,
            target_acc: spec.target_acc,
            device: self.device_name(),
            reference: spec.reference.clone(),
        }
    }

    /// A finished run's summary at the planted seconds and accuracy, before
    /// its steps and time to target are filled in.
    fn summary(&self, secs: f64, acc: f64, wall_s: f64) -> RunSummary {
        RunSummary {
            acc,
            acc_tta: acc,
            // Every clock reads the planted seconds: the stages outside
            // training are planted as zero.
            clocks: Clocks {
                dawn_s: secs,
                airbench_s: secs,
                hlb_s: secs,
                eval_s: 0.0,
                prep_s: 0.0,
                preprocess_s: 0.0,
                whiten_s: 0.0,
                build_s: 0.0,
                loader_s: 0.0,
                wall_s,
                paused_s: 0.0,
            },
            time_to_target_s: None,
            epoch_to_target: None,
            epochs: 0.0,
            steps: 0,
            peak_mem_bytes: None,
            final_train_loss: 2.3 * 0.2,
            device: self.device_name(),
            machine: None,
            throughput_cv: None,
            noise: None,
            ranks: Vec::new(),
            graphs: None,
            stages: None,
            clock: None,
        }
    }
}

impl Trainer for Planted {
    fn device_name(&self) -> String {
        "cpu (planted)".into()
    }

    fn run(
        &mut self,
        run: &PlannedRun,
        ctl: &dyn Control,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Outcome> {
        let started = Instant::now();
        let (plan, spec) = (&run.plan, &run.spec);
        let (secs, acc) = self.planted(run);
        let rates = plan.rates(self.steps_per_epoch * plan.batch_size.max(1) as u64);
        emit(self.started(run, rates.total));
        let epochs = rates.epoch_steps.len().max(1);
        let mut step = 0u64;
        let mut to_target = None;
        for e in 1..=epochs {
            let n = rates.epoch_steps[e - 1].min(rates.total - step);
            let images_per_s = (n as usize * plan.batch_size) as f64 / (secs / epochs as f64);
            let steps = |rows| Event::Steps {
                run: spec.id.clone(),
                rows,
                images_per_s,
                loader_share: 0.0,
            };
            let mut rows = Vec::new();
            for i in 0..n {
                if ctl.poll() == Flow::Cancel {
                    return Ok(Outcome::Cancelled);
                }
                std::thread::sleep(Duration::from_millis(self.step_ms));
                let done = step as f64 / rates.total.max(1) as f64;
                rows.push(StepRow {
                    step: step + 1,
                    epoch: (e - 1) as f64 + i as f64 / n.max(1) as f64,
                    loss: 2.3 * (1.0 - 0.8 * done),
                    lr: plan.optim.lr * rates.main.get(step as usize).copied().unwrap_or(1.0),
                    bn_scale: vec![1.0],
                    bn_bias: vec![0.0],
                    loader_s: 0.0,
                });
                step += 1;
                // The epoch's last rows go with its end, below.
                if self.steps_every > 0 && step.is_multiple_of(self.steps_every) && i + 1 < n {
                    emit(steps(std::mem::take(&mut rows)));
                }
            }
            if e == 1 {
                self.diverge(&spec.id.variant, step)?;
            }
            let share = e as f64 / epochs as f64;
            let test_acc = acc * (0.5 + 0.5 * share);
            if to_target.is_none() && test_acc >= spec.target_acc {
                to_target = Some((secs * share, e));
            }
            emit(steps(rows));
            emit(Event::Epoch {
                run: spec.id.clone(),
                row: EpochRow {
                    epoch: e,
                    steps: n,
                    train_loss: 2.3 * (1.0 - 0.8 * share),
                    train_acc: test_acc,
                    test_acc,
                    test_acc_tta: None,
                    train_s: secs / epochs as f64,
                    eval_s: 0.0,
                    images_per_s,
                    peak_mem_bytes: None,
                    loader_s: 0.0,
                    loader_images_per_s: None,
                    ddp: None,
                },
            });
        }
        let wall_s = started.elapsed().as_secs_f64().max(secs);
        Ok(Outcome::Finished(RunSummary {
            time_to_target_s: to_target.map(|t| t.0),
            epoch_to_target: to_target.map(|t| t.1),
            epochs: plan.epochs,
            steps: step,
            ..self.summary(secs, acc, wall_s)
        }))
    }

    /// With `warm_up=true`: the run once, its events discarded. A planted
    /// panic panics here too; a planted failure is its run's to report.
    fn warm_up(&mut self, run: &PlannedRun, ctl: &dyn Control) -> Option<String> {
        if !self.warm_up {
            return None;
        }
        let t = Instant::now();
        let _ = self.run(run, ctl, &mut |_| {});
        Some(format!(
            "warm-up on {}: one discarded run of `{}`, {:.2} s, untimed",
            self.device_name(),
            run.spec.id.variant,
            t.elapsed().as_secs_f64()
        ))
    }

    fn probe(&mut self, run: &PlannedRun) -> Result<Probe> {
        let batch = run.plan.batch_size.max(1);
        let step = self.probe_image_s * batch as f64;
        Ok(Probe {
            step_s: [0.95 * step, step, 1.05 * step],
            probe_batch: batch.min(super::TchTrainer::PROBE_BATCH),
            steps: 5,
            eval_s: step,
            overhead_s: 0.0,
        })
    }
}

/// The trainer a worker or a probe on `device` uses: the engine, or the
/// planted one where `TRICKLAB_PLANTED` asks for it.
pub fn new_trainer(device: &str) -> Result<Box<dyn Trainer>> {
    Ok(match Planted::from_env()? {
        Some(p) => Box::new(p),
        None => Box::new(super::TchTrainer::new(device)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planted_setting_reads_variants_and_refuses_what_it_cannot() {
        let p = Planted::parse("step_ms=0; B1 + flip@7.5/0.93; fail=+ celu").unwrap();
        assert_eq!(p.step_ms, 0);
        assert_eq!(p.variants, vec![("B1 + flip".to_string(), 7.5, 0.93)]);
        assert_eq!(p.fail, vec!["+ celu".to_string()]);
        assert_eq!((p.steps_every, p.warm_up), (0, false));
        assert!(p.panic.is_empty());
        let p = Planted::parse("panic=+ celu; steps_every=1; warm_up=true").unwrap();
        assert_eq!(p.panic, vec!["+ celu".to_string()]);
        assert_eq!((p.steps_every, p.warm_up), (1, true));
        assert!(Planted::parse("warm_up=yes").is_err());
        let e = Planted::parse("steps=3").unwrap_err().to_string();
        assert!(e.contains("TRICKLAB_PLANTED: cannot read `steps=3`"), "{e}");
        assert!(Planted::parse("x@1").is_err());
    }

    #[test]
    fn planted_numbers_are_the_variants_own_moved_a_little_by_the_seed() {
        let p = Planted::parse("B1 + flip@7.5/0.93").unwrap();
        // A named variant: its own, wherever it stands.
        let (t, a) = p.planted_at("B1 + flip", 4, 3);
        assert!(
            (t - 7.5).abs() <= 0.075 + 1e-12 && (a - 0.93).abs() <= 0.001 + 1e-12,
            "{t} {a}"
        );
        // Unnamed: 10 s × 0.9^rung and 0.90 + 0.005 × rung.
        for rung in 0..4 {
            for seed in 0..20 {
                let (t, a) = p.planted_at("other", rung, seed);
                let (t0, a0) = (10.0 * 0.9f64.powi(rung as i32), 0.90 + 0.005 * rung as f64);
                assert!((t / t0 - 1.0).abs() <= 0.01 + 1e-12, "{rung} {seed}: {t}");
                assert!((a - a0).abs() <= 0.001 + 1e-12, "{rung} {seed}: {a}");
            }
        }
        // The same run the same numbers; another seed or variant others.
        assert_eq!(p.planted_at("v", 1, 5), p.planted_at("v", 1, 5));
        assert_ne!(p.planted_at("v", 1, 5), p.planted_at("v", 1, 6));
        assert_ne!(p.planted_at("v", 1, 5).0, p.planted_at("w", 1, 5).0);
        // An accuracy stays a share.
        let top = Planted::parse("top@1/1.0").unwrap();
        assert!((0..20).all(|s| top.planted_at("top", 0, s).1 <= 1.0));
        // acc_spread: the seed's move of accuracy, in points; time's is kept.
        let wide = Planted::parse("v@10/0.5; acc_spread=20").unwrap();
        let accs: Vec<f64> = (0..20).map(|s| wide.planted_at("v", 0, s).1).collect();
        assert!(
            accs.iter().all(|a| (a - 0.5).abs() <= 0.2 + 1e-12),
            "{accs:?}"
        );
        assert!(accs.iter().any(|a| (a - 0.5).abs() > 0.05), "{accs:?}");
        let narrow = Planted::parse("v@10/0.5").unwrap();
        assert_eq!(wide.planted_at("v", 0, 3).0, narrow.planted_at("v", 0, 3).0);
        assert!(Planted::parse("acc_spread=lots").is_err());
        // time_spread: the seed's move of time, in percent; 0 with
        // acc_spread=0: every seed the planted numbers exactly.
        let exact = Planted::parse("v@10/0.5; acc_spread=0; time_spread=0").unwrap();
        assert!((0..20).all(|s| exact.planted_at("v", 0, s) == (10.0, 0.5)));
        let wide = Planted::parse("v@10/0.5; time_spread=20").unwrap();
        let times: Vec<f64> = (0..20).map(|s| wide.planted_at("v", 0, s).0).collect();
        assert!(
            times.iter().all(|t| (t - 10.0).abs() <= 2.0 + 1e-9),
            "{times:?}"
        );
        assert!(times.iter().any(|t| (t - 10.0).abs() > 0.5), "{times:?}");
    }
}
