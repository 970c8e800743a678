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
//! - `fail=VARIANT`: that variant's runs fail as a diverged run does;
//! - `VARIANT@SECONDS/ACC`: a variant's planted time on its clock and final
//!   accuracy (0-1). A variant not named gets `10 s × 0.9^rung` and
//!   `0.90 + 0.005 × rung`.
//!
//! Each run's time moves by up to ±1% and its accuracy by up to ±0.1 points
//! with its seed (splitmix64 of the variant and the seed), as repeats do,
//! so that intervals and seeds-needed have a spread to read.

use super::{Control, Flow, Outcome, Probe, Trainer};
use crate::events::{Clocks, EpochRow, Event, RunSummary, StepRow};
use crate::plan::PlannedRun;
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
    fail: Vec<String>,
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
            fail: Vec::new(),
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
                Some(("fail", v)) => p.fail.push(v.to_string()),
                _ => bail!(
                    "{}: step_ms=, steps_per_epoch=, probe_image_s=, fail= or VARIANT@SECONDS/ACC",
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
        let (t, a) = self
            .variants
            .iter()
            .find(|(v, ..)| *v == id.variant)
            .map(|&(_, t, a)| (t, a))
            .unwrap_or_else(|| {
                let rung = id.index as f64;
                (10.0 * 0.9f64.powf(rung), 0.90 + 0.005 * rung)
            });
        let mut h = SplitMix64(id.variant.bytes().fold(run.spec.seed ^ 0x5EED, |h, b| {
            h.rotate_left(5) ^ u64::from(b)
        }));
        let (u, v) = (2.0 * h.unit_f64() - 1.0, 2.0 * h.unit_f64() - 1.0);
        (t * (1.0 + 0.01 * u), (a + 0.001 * v).clamp(0.0, 1.0))
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
        emit(Event::RunStarted {
            run: spec.id.clone(),
            seed: spec.seed,
            config: Arc::new(run.config_json("planted", "planted")),
            total_steps: rates.total,
            total_epochs: plan.epochs,
            target_acc: spec.target_acc,
            device: self.device_name(),
            reference: spec.reference.clone(),
        });
        let epochs = rates.epoch_steps.len().max(1);
        let mut step = 0u64;
        let mut to_target = None;
        for e in 1..=epochs {
            let n = rates.epoch_steps[e - 1].min(rates.total - step);
            let mut rows = Vec::new();
            for _ in 0..n {
                if ctl.poll() == Flow::Cancel {
                    return Ok(Outcome::Cancelled);
                }
                std::thread::sleep(Duration::from_millis(self.step_ms));
                let done = step as f64 / rates.total.max(1) as f64;
                rows.push(StepRow {
                    step: step + 1,
                    epoch: (e - 1) as f64 + rows.len() as f64 / n.max(1) as f64,
                    loss: 2.3 * (1.0 - 0.8 * done),
                    lr: plan.optim.lr * rates.main.get(step as usize).copied().unwrap_or(1.0),
                    bn_scale: vec![1.0],
                    bn_bias: vec![0.0],
                    loader_s: 0.0,
                });
                step += 1;
            }
            if self.fail.contains(&spec.id.variant) && e == 1 {
                bail!("loss became NaN at step {step} (planted): lower lr or turn fp16 off");
            }
            let share = e as f64 / epochs as f64;
            let test_acc = acc * (0.5 + 0.5 * share);
            if to_target.is_none() && test_acc >= spec.target_acc {
                to_target = Some((secs * share, e));
            }
            emit(Event::Steps {
                run: spec.id.clone(),
                rows,
                images_per_s: (n as usize * plan.batch_size) as f64 / (secs / epochs as f64),
                loader_share: 0.0,
            });
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
                    images_per_s: (n as usize * plan.batch_size) as f64 / (secs / epochs as f64),
                    peak_mem_bytes: None,
                    loader_s: 0.0,
                    loader_images_per_s: None,
                    ddp: None,
                },
            });
        }
        let end = (secs, acc, step, to_target, started.elapsed().as_secs_f64());
        Ok(Outcome::Finished(self.summary(plan.epochs, end)))
    }

    fn probe(&mut self, run: &PlannedRun) -> Result<Probe> {
        let batch = run.plan.batch_size.max(1);
        let step = self.probe_image_s * batch as f64;
        Ok(Probe {
            step_s: [0.95 * step, step, 1.05 * step],
            probe_batch: batch.min(super::TchTrainer::PROBE_BATCH),
            steps: 5,
            eval_s: step,
        })
    }
}

impl Planted {
    /// A finished run's summary: every clock reads the planted seconds (the
    /// stages outside training are planted as zero). `end` is (seconds,
    /// accuracy, steps, (seconds, epoch) to the target, wall seconds).
    fn summary(
        &self,
        epochs: f64,
        (secs, acc, steps, to_target, wall): (f64, f64, u64, Option<(f64, usize)>, f64),
    ) -> RunSummary {
        RunSummary {
            acc,
            acc_tta: acc,
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
                wall_s: wall.max(secs),
                paused_s: 0.0,
            },
            time_to_target_s: to_target.map(|t| t.0),
            epoch_to_target: to_target.map(|t| t.1),
            epochs,
            steps,
            peak_mem_bytes: None,
            final_train_loss: 2.3 * 0.2,
            device: self.device_name(),
            machine: None,
            throughput_cv: None,
            noise: None,
            ranks: Vec::new(),
            graphs: None,
            stages: None,
        }
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
        let e = Planted::parse("steps=3").unwrap_err().to_string();
        assert!(e.contains("TRICKLAB_PLANTED: cannot read `steps=3`"), "{e}");
        assert!(Planted::parse("x@1").is_err());
    }
}
