//! What the unit tests of several rooms build alike: run ids, run
//! summaries, and the record a run starts with. Test-only.

use crate::config::{Override, RunSpec};
use crate::events::{Clocks, RunId, RunSummary};
use crate::record::{DataId, RunRecord};
use std::sync::Arc;

/// Run `repeat` of variant `variant` (at `index`) of matrix `m`.
pub fn rid(variant: &str, index: usize, repeat: usize) -> RunId {
    RunId {
        matrix: "m".into(),
        index,
        variant: variant.into(),
        repeat,
    }
}

/// A finished run at accuracy `acc` (`acc` + 0.01 with TTA), `dawn`
/// seconds on Page's clock (the others scaled from it) and `ttt` to target.
pub fn summary(acc: f64, dawn: f64, ttt: Option<f64>) -> RunSummary {
    RunSummary {
        acc,
        acc_tta: acc + 0.01,
        clocks: Clocks {
            dawn_s: dawn,
            airbench_s: dawn * 0.9,
            hlb_s: dawn * 0.8,
            eval_s: 1.0,
            prep_s: 0.1,
            preprocess_s: 0.0,
            whiten_s: 0.0,
            build_s: 0.0,
            loader_s: 0.0,
            wall_s: dawn + 2.0,
            paused_s: 0.0,
        },
        time_to_target_s: ttt,
        epoch_to_target: ttt.map(|_| 2),
        epochs: 3.0,
        steps: 30,
        peak_mem_bytes: Some(1 << 20),
        final_train_loss: 1.0,
        device: "cpu".into(),
        machine: None,
        throughput_cv: None,
        noise: None,
        ranks: Vec::new(),
        graphs: None,
        stages: None,
        clock: None,
    }
}

/// The record run `run` starts with: tiny-page-resnet9 with flip and CELU
/// on, data `d` (hash `h`), as a session would decide it.
pub fn record(run: &RunId) -> Arc<RunRecord> {
    record_with(run, &["flip", "celu"])
}

/// [`record`] with the trick overrides `tricks` (`--trick` syntax: `tta`,
/// `tta=off`) on the recipe's own.
pub fn record_with(run: &RunId, tricks: &[&str]) -> Arc<RunRecord> {
    let spec = RunSpec {
        id: run.clone(),
        seed: run.repeat as u64,
        recipe: "tiny-page-resnet9".into(),
        overrides: tricks
            .iter()
            .map(|t| Override::parse_trick(t).expect("--trick syntax"))
            .collect(),
        data: "embedded".into(),
        target_acc: 0.5,
        device: None,
        reference: None,
    };
    let data = DataId {
        name: "d".into(),
        hash: "h".into(),
    };
    Arc::new(crate::record::of_spec(&spec, data).expect("the tiny recipe plans"))
}

/// The record a session writes for the matrix `text` (parsed, then decided).
pub fn matrix_record(text: &str) -> crate::matrix::Record {
    crate::matrix::parse(text, "m.toml")
        .expect("a test matrix parses")
        .record()
}
