//! Aggregation of a synthetic results store: 10,000 runs × 1,000 steps
//! (runs.parquet with 10,000 rows, 100 per-run step files of 100 runs each).
//! Target: the run table aggregates in under 2 s on the 2-core build machine.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark's setup, measurement and record read top to bottom"
)]

use polars::prelude::*;
use std::time::Instant;
use tricklab::report::{ReportOptions, aggregate};
use tricklab::store::{RunRow, write_runs};

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bench/20260101-000000");
    std::fs::create_dir_all(dir.join("steps")).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        "{\"matrix\": \"bench\", \"data_sets\": [], \"devices\": []}",
    )
    .unwrap();
    let (runs, steps, variants) = (10_000usize, 1_000usize, 50usize);
    let t = Instant::now();
    let rows: Vec<RunRow> = (0..runs)
        .map(|i| {
            let v = i % variants;
            let acc = 0.9 + 0.0005 * v as f64 + 0.001 * ((i * 7919) % 13) as f64;
            RunRow {
                matrix: "bench".into(),
                index: v as u32,
                variant: format!("rung {v}"),
                repeat: (i / variants) as u32,
                seed: i as u64,
                status: if i % 97 == 0 {
                    tricklab::store::Ended::Failed
                } else {
                    tricklab::store::Ended::Done
                },
                reason: None,
                recipe: "page-final".into(),
                tricks: vec!["flip".into(), "ema".into()],
                overrides: String::new(),
                target_acc: 0.94,
                acc: Some(acc),
                acc_tta: Some(acc + 0.003),
                dawn_s: Some(30.0 - 0.3 * v as f64 + 0.01 * (i % 11) as f64),
                airbench_s: Some(25.0),
                hlb_s: Some(20.0),
                eval_s: Some(2.0),
                prep_s: Some(1.0),
                whiten_s: Some(0.5),
                loader_s: None,
                wall_s: Some(35.0),
                time_to_target_s: (acc > 0.93).then_some(20.0),
                epoch_to_target: (acc > 0.93).then_some(9),
                epochs: Some(10.0),
                steps: Some(steps as u64),
                peak_mem_bytes: Some(1 << 30),
                final_train_loss: Some(0.5),
                device: "cpu".into(),
                data_hash: "h".into(),
                ..Default::default()
            }
        })
        .collect();
    write_runs(&dir.join("runs.parquet"), &rows).unwrap();
    // Step metrics in 100 files of 100 runs × 1,000 steps (10 M rows in all).
    for f in 0..100 {
        let n = 100 * steps;
        let run = |k: usize| f * 100 + k / steps;
        let mut df = DataFrame::new(
            n,
            vec![
                Column::new("matrix".into(), vec!["bench"; n]),
                Column::new(
                    "index".into(),
                    (0..n)
                        .map(|k| (run(k) % variants) as u32)
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "variant".into(),
                    (0..n)
                        .map(|k| format!("rung {}", run(k) % variants))
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "step".into(),
                    (0..n).map(|k| (k % steps) as u64 + 1).collect::<Vec<_>>(),
                ),
                Column::new(
                    "epoch".into(),
                    (0..n)
                        .map(|k| (k % steps) as f64 / 100.0)
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "loss".into(),
                    (0..n)
                        .map(|k| 2.3 / (1.0 + (k % steps) as f64 / 100.0))
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "lr".into(),
                    (0..n)
                        .map(|k| (k % steps) as f64 / 1000.0)
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "bn_scale_mean".into(),
                    (0..n).map(|_| Some(1.0f64)).collect::<Vec<_>>(),
                ),
            ],
        )
        .unwrap();
        tricklab::store::write_parquet(
            &dir.join("steps").join(format!("part{f}.parquet")),
            &mut df,
        )
        .unwrap();
    }
    let build = t.elapsed().as_secs_f64();
    println!(
        "## report_aggregate (synthetic store: {runs} runs × {steps} steps, {variants} variants)\n"
    );
    println!("| step | seconds |");
    println!("|---|---|");
    println!("| build the store (not part of the target) | {build:.2} |");
    let best = (0..3)
        .map(|_| {
            let t = Instant::now();
            let r = aggregate(std::slice::from_ref(&dir), &ReportOptions::default()).unwrap();
            assert_eq!(r.rows.len(), variants);
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    println!(
        "| aggregate runs.parquet: n, mean ± CI, P(target), clocks, speedups (best of 3; target < 2 s) | {best:.3} |"
    );
    let t = Instant::now();
    let cs = tricklab::report::curves::curves(std::slice::from_ref(&dir)).unwrap();
    assert_eq!(cs.len(), variants);
    println!(
        "| aggregate 10 M step rows into per-variant curves | {:.3} |",
        t.elapsed().as_secs_f64()
    );
}
