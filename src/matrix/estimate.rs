//! What a matrix will cost on a device before it is started: its runs'
//! training steps times one step's seconds, measured by a probe step of the
//! first run's net. `matrix show --estimate`, and the scale guard of `run`
//! and `nightly`, print it.

use super::Matrix;
use crate::train::{TchTrainer, Trainer};
use anyhow::Result;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub runs: usize,
    pub device: String,
    /// Seconds a training step of the first run takes, scaled from the probe.
    pub step_s: f64,
    pub batch: usize,
    pub probe_batch: usize,
    /// Training seconds of every run (evaluation not counted).
    pub total_s: f64,
}

/// Probes the first run's net on `device` and prices every run's steps.
pub fn estimate(m: &Matrix, device: &str) -> Result<Estimate> {
    let runs = m.runs();
    let Some(first) = runs.first() else {
        anyhow::bail!("{}: no runs to estimate", m.name);
    };
    let data = crate::data::load(&m.data)?;
    let planned = crate::recipe::plan_run(first)?;
    let mut trainer = TchTrainer::new(device)?;
    let step_s = trainer.probe_step_s(&planned)?;
    let mut total_s = 0.0;
    for r in &runs {
        let plan = crate::recipe::plan_run(r)?.plan;
        let per = plan.data.train_per_class;
        let n = data.train_len((per > 0).then_some(per)) as u64;
        total_s += plan.rates(n).total as f64 * step_s;
    }
    Ok(Estimate {
        runs: runs.len(),
        device: trainer.device_name(),
        step_s,
        batch: planned.plan.batch_size,
        probe_batch: planned.plan.batch_size.min(TchTrainer::PROBE_BATCH),
        total_s,
    })
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
        format!(
            "{origin}: {} runs, about {} in all on {} ({:.2} s a training step at batch {}, scaled from a probe step at batch {}; evaluation not counted)",
            self.runs,
            human(self.total_s),
            self.device,
            self.step_s,
            self.batch,
            self.probe_batch
        )
    }
}
