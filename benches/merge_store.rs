//! Planning figures for large sweeps: a synthetic store of 100,000 runs in
//! 100 shard folders (1,000 runs each, one small per-run step file each, as a
//! full recipe that reads metrics back once per epoch writes), merged into one
//! folder and reported. Prints files, sizes and times; README quotes them.
//! `TRICKLAB_BENCH_RUNS` and `TRICKLAB_BENCH_SHARDS` change the size.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark's setup, measurement and record read top to bottom"
)]

use polars::prelude::*;
use std::path::Path;
use std::time::Instant;
use tricklab::report::{ReportOptions, aggregate};
use tricklab::store::{Ended, RunRow, merge, write_runs};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn du(dir: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            let (f, b) = du(&p);
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += e.metadata().unwrap().len();
        }
    }
    (files, bytes)
}

fn main() {
    let (runs, shards, variants) = (
        env("TRICKLAB_BENCH_RUNS", 100_000),
        env("TRICKLAB_BENCH_SHARDS", 100),
        20usize,
    );
    let tmp = tempfile::tempdir().unwrap();
    let seeds = runs / variants;
    let matrix = format!(
        "name = 'sweep'\nrecipe = 'tiny-page-resnet9'\nkind = 'grid'\nseeds = [{}]\n[grid]\nepochs = [{}]\n",
        (0..seeds)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
        (1..=variants)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let parsed = tricklab::matrix::parse(&matrix, "sweep.toml").unwrap();
    let t = Instant::now();
    let mut folders = Vec::new();
    for s in 1..=shards {
        let m = parsed.clone().with_shard(s, shards).unwrap();
        let w = tricklab::store::ResultsWriter::create_labelled(
            tmp.path(),
            "sweep",
            &m.text,
            Some(&format!("shard-{s}-of-{shards}")),
        )
        .unwrap();
        let dir = w.dir().to_path_buf();
        std::fs::create_dir_all(dir.join("steps")).unwrap();
        let mut rows = Vec::new();
        for spec in m.runs() {
            let (v, r) = (spec.id.index, spec.id.repeat);
            let acc = 0.9 + 0.001 * v as f64 + 0.0001 * (r % 13) as f64;
            rows.push(RunRow {
                matrix: "sweep".into(),
                index: v as u32,
                variant: spec.id.variant.clone(),
                repeat: r as u32,
                seed: spec.seed,
                status: Ended::Done,
                reason: None,
                recipe: "tiny-page-resnet9".into(),
                tricks: Vec::new(),
                overrides: String::new(),
                target_acc: 0.94,
                acc: Some(acc),
                acc_tta: Some(acc),
                dawn_s: Some(10.0 + v as f64),
                airbench_s: Some(9.0),
                hlb_s: Some(8.0),
                eval_s: Some(1.0),
                prep_s: Some(0.1),
                whiten_s: Some(0.0),
                loader_s: None,
                wall_s: Some(12.0),
                time_to_target_s: None,
                epoch_to_target: None,
                epochs: Some(10.0),
                steps: Some(970),
                peak_mem_bytes: None,
                final_train_loss: Some(0.5),
                device: "cuda:0".into(),
                data_hash: "h".into(),
                ..Default::default()
            });
            // Ten per-epoch read-backs: one small step file per run.
            let mut df = df!(
                "matrix" => vec!["sweep"; 10],
                "index" => vec![v as u32; 10],
                "variant" => vec![spec.id.variant.as_str(); 10],
                "repeat" => vec![r as u32; 10],
                "step" => (1..=10u64).map(|k| k * 97).collect::<Vec<_>>(),
                "epoch" => (1..=10).map(f64::from).collect::<Vec<_>>(),
                "loss" => (1..=10).map(|k| 2.0 / f64::from(k)).collect::<Vec<_>>(),
                "lr" => vec![0.1f64; 10],
            )
            .unwrap();
            let key = spec.id.key();
            tricklab::store::write_parquet(
                &dir.join("steps").join(format!("{key}.parquet")),
                &mut df,
            )
            .unwrap();
        }
        write_runs(&dir.join("runs.parquet"), &rows).unwrap();
        folders.push(dir);
    }
    let build_s = t.elapsed().as_secs_f64();
    let (f_in, b_in) = du(tmp.path());
    let into = tmp.path().join("merged");
    let t = Instant::now();
    let s = merge(&folders, &into).unwrap();
    let merge_s = t.elapsed().as_secs_f64();
    assert_eq!((s.runs, s.duplicates.len(), s.missing.len()), (runs, 0, 0));
    let (f_out, b_out) = du(&into);
    let t = Instant::now();
    let r = aggregate(std::slice::from_ref(&into), &ReportOptions::default()).unwrap();
    let report_s = t.elapsed().as_secs_f64();
    assert_eq!(r.rows.len(), variants);
    let t = Instant::now();
    let r2 = aggregate(&folders, &ReportOptions::default()).unwrap();
    let report_shards_s = t.elapsed().as_secs_f64();
    assert_eq!(r2.rows.iter().map(|x| x.n).sum::<usize>(), runs);
    println!(
        "merge_store: {runs} runs in {shards} shards ({variants} variants): built in {build_s:.1} s, {f_in} files, {:.1} MiB; \
         merge {merge_s:.1} s -> {f_out} files, {:.1} MiB (runs.parquet {:.0} KiB); report of the merged folder {report_s:.2} s, \
         of the {shards} shard folders directly {report_shards_s:.2} s",
        b_in as f64 / 1048576.0,
        b_out as f64 / 1048576.0,
        std::fs::metadata(into.join("runs.parquet")).unwrap().len() as f64 / 1024.0,
    );
}
