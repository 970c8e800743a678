//! Steps per second of the tiny recipes on CPU with the embedded data, and
//! the cost of streaming step metrics (read back every step vs once per epoch).

use tricklab::config::{Override, RunSpec};
use tricklab::events::{Event, RunId};
use tricklab::train::{NeverStop, Outcome, TchTrainer, Trainer};

fn spec(recipe: &str, sets: &[&str]) -> RunSpec {
    RunSpec {
        id: RunId {
            matrix: "bench".into(),
            index: 0,
            variant: recipe.into(),
            repeat: 0,
        },
        seed: 0,
        recipe: recipe.into(),
        overrides: sets
            .iter()
            .map(|s| Override::parse_set(s).unwrap())
            .collect(),
        data: "embedded".into(),
        target_acc: 0.4,
        reference: None,
        device: None,
    }
}

/// Returns (train steps per second from the hlb clock, accuracy with TTA, DAWNBench seconds).
fn run(t: &mut TchTrainer, s: &RunSpec) -> (f64, f64, f64) {
    let mut steps = 0;
    let planned = tricklab::recipe::plan_run(s).unwrap();
    let out = t.run(&planned, &NeverStop, &mut |e| {
        if let Event::Steps { rows, .. } = e {
            steps += rows.len();
        }
    });
    match out {
        Ok(Outcome::Finished(sum)) => (
            steps as f64 / sum.clocks.hlb_s,
            sum.acc_tta,
            sum.clocks.dawn_s,
        ),
        other => panic!("{}: {other:?}", s.recipe),
    }
}

fn main() {
    let mut t = TchTrainer::new("cpu").unwrap();
    println!(
        "## train_engine (CPU, {} threads, embedded data: 4000 train / 1000 test images)\n",
        tch::get_num_threads()
    );
    println!(
        "| recipe | steps/s | accuracy (TTA) | DAWNBench-style s | accuracy per DAWNBench second |"
    );
    println!("|---|---|---|---|---|");
    for r in [
        "tiny-page-resnet18",
        "tiny-page-resnet9",
        "tiny-page-final",
        "tiny-airbench94",
        "tiny-airbench94-muon",
        "tiny-hiverge-speedrun",
    ] {
        // Each recipe warmed up first, as a session's worker does before its first run.
        let s = spec(r, &[]);
        let _ = t.warm_up(&tricklab::recipe::plan_run(&s).unwrap(), &NeverStop);
        let (sps, acc, dawn) = run(&mut t, &s);
        println!(
            "| {r} | {sps:.1} | {:.2}% | {dawn:.2} | {:.2} %/s |",
            100.0 * acc,
            100.0 * acc / dawn
        );
    }
    println!("\n| metrics streaming (tiny-page-resnet9, 1 epoch, best of 3) | steps/s |");
    println!("|---|---|");
    for (label, every) in [
        ("read back every step", "1"),
        ("read back once per epoch", "1000"),
    ] {
        let best = (0..3)
            .map(|_| {
                run(
                    &mut t,
                    &spec(
                        "tiny-page-resnet9",
                        &["epochs=1", &format!("metrics_every={every}")],
                    ),
                )
                .0
            })
            .fold(0.0, f64::max);
        println!("| {label} | {best:.1} |");
    }
}
