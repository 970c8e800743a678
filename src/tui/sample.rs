//! A deterministic state with a bit of everything, for the snapshot tests
//! and the render benchmark.

use super::state::*;
use super::update::apply;
use crate::events::*;

pub fn rid(variant: &str, index: usize, repeat: usize) -> RunId {
    RunId {
        matrix: "demo".into(),
        index,
        variant: variant.into(),
        repeat,
    }
}

/// What run `run` of the sample decided: a tiny recipe with its variant's name.
pub fn record(run: &RunId) -> crate::record::RunRecord {
    let spec = crate::config::RunSpec {
        id: run.clone(),
        seed: run.repeat as u64,
        recipe: "tiny-page-resnet9".into(),
        overrides: Vec::new(),
        data: "embedded".into(),
        target_acc: 0.6,
        device: None,
        reference: None,
    };
    let data = crate::record::DataId {
        name: "embedded".into(),
        hash: "sample".into(),
    };
    crate::record::of_spec(&spec, data).expect("the tiny recipe plans")
}

/// A state with a bit of everything, deterministic (no clocks): the snapshot
/// tests and the render benchmark draw it.
#[allow(
    clippy::too_many_lines,
    reason = "a sample state with a bit of everything, built in one place"
)]
pub fn sample_state(no_color: bool) -> AppState {
    let mut s = AppState::new(no_color);
    let variants = ["baseline", "+ label smoothing", "+ celu"];
    let mut queue = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        for r in 0..2 {
            let status = match (i, r) {
                (0, _) | (1, 0) | (2, 0) => RunStatus::Done,
                (1, 1) => RunStatus::Failed,
                (2, 1) => RunStatus::Running,
                _ => RunStatus::Queued,
            };
            queue.push(QueueItem {
                run: rid(v, i, r),
                seed: r as u64,
                status,
                reason: None,
            });
        }
    }
    apply(&mut s, Event::Queue(queue));
    // Every rung's first seed has finished; the last rung's second is running,
    // read against the previous rung and its own first seed.
    let runs = [(0, 0), (1, 0), (2, 0), (2, 1)];
    for (k, &(i, r)) in runs.iter().enumerate() {
        let v = variants[i];
        let run = rid(v, i, r);
        apply(
            &mut s,
            Event::RunStarted {
                run: run.clone(),
                seed: r as u64,
                record: std::sync::Arc::new(record(&run)),
                total_steps: 100,
                total_epochs: 4.0,
                target_acc: 0.6,
                device: "cpu".into(),
                reference: (i > 0).then(|| crate::config::Reference {
                    index: i - 1,
                    role: "previous rung".into(),
                }),
            },
        );
        let last = k + 1 == runs.len();
        let (steps, evals) = if last { (60, 2) } else { (100, 4) };
        let rows = (1..=steps)
            .map(|k| StepRow {
                step: k,
                epoch: k as f64 / 25.0,
                loss: 2.3 * (-(k as f64) / (30.0 + 10.0 * i as f64 - 5.0 * r as f64)).exp() + 0.3,
                lr: 0.4 * (k as f64 / 60.0).min(1.0),
                bn_scale: vec![1.0 - k as f32 * 0.002, 1.0 + k as f32 * 0.001],
                bn_bias: vec![0.0, 0.01],
                loader_s: 0.0,
            })
            .collect();
        apply(
            &mut s,
            Event::Steps {
                run: run.clone(),
                rows,
                images_per_s: 1234.0,
                loader_share: 0.0,
            },
        );
        for e in 1..=evals {
            apply(
                &mut s,
                Event::Epoch {
                    run: run.clone(),
                    row: EpochRow {
                        epoch: e,
                        steps: 25 * e as u64,
                        train_loss: 1.0,
                        train_acc: 0.5,
                        test_acc: 0.3 + 0.1 * e as f64 + 0.02 * i as f64 + 0.01 * r as f64,
                        test_acc_tta: None,
                        train_s: 2.0,
                        eval_s: 0.5,
                        images_per_s: 1234.0,
                        peak_mem_bytes: Some(64 << 20),
                        loader_s: 0.0,
                        loader_images_per_s: None,
                        ddp: None,
                    },
                },
            );
        }
        let series = s.runs.get_mut(&run).unwrap();
        series.started = None;
        series.finished = !last;
        series.final_acc = (!last).then(|| series.acc.last().map_or(0.0, |a| a.1));
    }
    s.results = variants
        .iter()
        .enumerate()
        .map(|(i, v)| ResultRow {
            matrix: "demo".into(),
            index: i,
            variant: v.to_string(),
            tricks: ["label_smoothing", "celu"][..i]
                .iter()
                .map(|t| t.to_string())
                .collect(),
            delta_vs: (i > 0).then(|| variants[i - 1].to_string()),
            // One seed of the second rung failed: n = 1, no CI.
            n: if i == 1 { 1 } else { 2 },
            noisy: usize::from(i == 2),
            data_bound: None,
            clock: "dawn",
            delta_time: (i > 0).then_some(crate::report::delta::Delta {
                mean: -5.0,
                lo: -6.1,
                hi: -3.9,
                n: 2,
                paired: true,
            }),
            delta_acc: None,
            acc_mean: 0.55 + 0.03 * i as f64,
            acc_ci95: 0.01,
            p_target: 0.5 * i as f64,
            ttt_mean: (i > 0).then_some(20.0 - 3.0 * i as f64),
            time_mean: 30.0 - 5.0 * i as f64,
            time_ci95: 0.8,
            speedup_prev: (i > 0)
                .then(|| (30.0 - 5.0 * (i as f64 - 1.0)) / (30.0 - 5.0 * i as f64)),
            speedup_first: (i > 0).then_some(30.0 / (30.0 - 5.0 * i as f64)),
            finished: Some("2026-11-25".into()),
        })
        .collect();
    s.log(
        LogLevel::Error,
        "demo/+ label smoothing#1 failed: loss became NaN at step 40",
    );
    s.status = String::new();
    s
}
