//! The `cuda_graphs` path's CPU form (issue 48, item 2): the step through
//! static input buffers, gradients kept in place and zero-filled by the
//! step itself, a phase per shape or trainable set, run uncaptured, equals
//! the eager step bit for bit.

use super::*;
use crate::config::{Override, RunSpec};
use crate::events::{Event, RunId};
use tch::Tensor;

fn synth(_: &str) -> anyhow::Result<crate::data::Dataset> {
    Ok(crate::data::synthetic(256, 64, 10, 16, 1))
}

fn spec(recipe: &str, graphs: bool) -> RunSpec {
    let mut overrides: Vec<Override> = [
        "train_per_class=0",
        "test_per_class=0",
        "epochs=2",
        "batch_size=64",
        "whitening.images=256",
        "metrics_every=1",
    ]
    .iter()
    .map(|s| Override::parse_set(s).unwrap())
    .collect();
    if graphs {
        overrides.push(Override::parse_trick("cuda_graphs").unwrap());
    }
    RunSpec {
        id: RunId {
            matrix: "graphs".into(),
            index: 0,
            variant: recipe.into(),
            repeat: 0,
        },
        seed: 5,
        recipe: recipe.into(),
        overrides,
        data: "synthetic".into(),
        target_acc: 0.3,
        reference: None,
        device: None,
    }
}

/// Every step's loss, the final weights by name, and what the run said of
/// its graphs.
fn train(recipe: &str, graphs: bool) -> (Vec<f64>, Vec<(String, Tensor)>, Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("final.safetensors");
    let mut t = TchTrainer::with_loader("cpu", synth).unwrap();
    t.save_weights = Some(saved.clone());
    let planned = crate::recipe::plan_run(&spec(recipe, graphs)).unwrap();
    assert_eq!(planned.plan.step.cuda_graphs, graphs);
    let mut losses = Vec::new();
    let outcome = t
        .run(&planned, &NeverStop, &mut |e| {
            if let Event::Steps { rows, .. } = e {
                losses.extend(rows.iter().map(|r| r.loss));
            }
        })
        .unwrap_or_else(|e| panic!("{recipe}: {e:#}"));
    let Outcome::Finished(summary) = outcome else {
        panic!("{recipe}: did not finish")
    };
    let mut weights = Tensor::read_safetensors(&saved).unwrap();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    (losses, weights, summary.graphs)
}

#[test]
pub(crate) fn the_graph_path_uncaptured_equals_the_eager_step_bit_for_bit() {
    for recipe in [
        "tiny-airbench94",
        "tiny-airbench94-muon",
        "tiny-hiverge-speedrun",
        "tiny-hlb",
        "tiny-page-final",
    ] {
        let (eager_losses, eager_w, eager_says) = train(recipe, false);
        let (graph_losses, graph_w, graph_says) = train(recipe, true);
        assert_eq!(eager_says.as_deref(), Some("off"), "{recipe}");
        assert_eq!(
            graph_says.as_deref(),
            Some("off: not a CUDA device (the graph path ran uncaptured)"),
            "{recipe}"
        );
        assert!(
            eager_losses.len() >= 6,
            "{recipe}: {} steps",
            eager_losses.len()
        );
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&graph_losses),
            bits(&eager_losses),
            "{recipe}: the losses differ"
        );
        assert_eq!(graph_w.len(), eager_w.len(), "{recipe}");
        for ((name, g), (_, e)) in graph_w.iter().zip(&eager_w) {
            assert!(g.equal(e), "{recipe}: {name} differs after training");
        }
    }
}
