//! `matrix show --estimate` against the matrix run for real, side by side in
//! one process tree on this machine's CPU: the estimate's median and range,
//! and the wall-clock seconds `tricklab run --headless --devices cpu` took,
//! per run. The goal (issue 33): within a factor of two either way. The
//! measured side is what a user waits for, so it includes what the estimate
//! leaves out: process start, data preparation, the warm-up, whitening, and
//! the report and charts at the end.
//!
//! Both sides run the release binary, so they price and train alike.

use std::process::Command;
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_tricklab");

/// (matrix file, `--tiny`, repeats to run): small enough for a bench.
const CASES: [(&str, bool, u32); 2] = [
    ("ablations/demo-ladder.toml", false, 1),
    ("ablations/speedrun-ladder.toml", true, 1),
];

fn tricklab(args: &[&str]) -> std::process::Output {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("tricklab runs");
    assert!(
        out.status.success(),
        "tricklab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The estimate's seconds a run: (low, median, high), and its runs.
fn estimate(file: &str, tiny: bool) -> ((f64, f64, f64), f64) {
    let mut args = vec![
        "matrix",
        "show",
        file,
        "--estimate",
        "cpu",
        "--format",
        "json",
    ];
    if tiny {
        args.push("--tiny");
    }
    let out = tricklab(&args);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let e = &j["matrices"][0]["estimate"];
    let runs = e["runs"].as_f64().unwrap();
    let range = &e["total_range_s"];
    (
        (
            range[0].as_f64().unwrap() / runs,
            e["total_s"].as_f64().unwrap() / runs,
            range[1].as_f64().unwrap() / runs,
        ),
        runs,
    )
}

/// Wall-clock seconds a run of the matrix took, and how many runs it ran.
fn measured(file: &str, tiny: bool, repeats: u32) -> (f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().to_str().unwrap();
    let reps = repeats.to_string();
    let mut args = vec![
        "run",
        file,
        "--headless",
        "--results",
        results,
        "--repeats",
        &reps,
        "--devices",
        "cpu",
    ];
    if tiny {
        args.push("--tiny");
    }
    let t = Instant::now();
    tricklab(&args);
    let wall = t.elapsed().as_secs_f64();
    let runs = walk_runs(dir.path());
    assert!(runs > 0, "tricklab run {file}: no run finished");
    (wall / runs as f64, runs)
}

/// Finished runs under a results root: one row each in its runs.parquet,
/// counted by the store's own reader through `tricklab results`.
fn walk_runs(root: &std::path::Path) -> usize {
    let out = tricklab(&["results", root.to_str().unwrap(), "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    j["sessions"]
        .as_array()
        .map(|s| s.iter().filter_map(|x| x["done"].as_u64()).sum::<u64>() as usize)
        .unwrap_or(0)
}

fn main() {
    println!("## estimate (matrix show --estimate against tricklab run --headless, CPU)\n");
    println!(
        "Measured: the whole command's wall clock a run, start-up, data, warm-up and report included; the estimate prices training steps and evaluations.\n"
    );
    println!(
        "| matrix | runs timed | estimate a run: median (low–high) | measured a run (wall) | measured / estimate | within ×2 |"
    );
    println!("|---|---|---|---|---|---|");
    for (file, tiny, repeats) in CASES {
        let ((lo, med, hi), _) = estimate(file, tiny);
        let (wall, runs) = measured(file, tiny, repeats);
        let ratio = wall / med;
        println!(
            "| {file}{} | {runs} | {med:.1} s ({lo:.1}–{hi:.1}) | {wall:.1} s | {ratio:.2} | {} |",
            if tiny { " --tiny" } else { "" },
            if (0.5..=2.0).contains(&ratio) {
                "yes"
            } else {
                "NO"
            }
        );
    }
}
