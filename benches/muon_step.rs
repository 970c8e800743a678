//! One Muon step over airbench's six full-width conv filters (24->64, 64->64,
//! 64->256, 256->256 x 3; 3x3), as airbench94_muon runs it (one Newton-Schulz
//! per filter) and as hiverge's speedrun does (all filters zero-padded into one
//! batched Newton-Schulz, fp16 momentum). The batched form trades extra FLOPs
//! on the padding for fewer, larger kernels: a GPU's launch-bound step gains,
//! a CPU, compute-bound, need not. This bench says what it does on the CPU it
//! runs on; GPU numbers belong to the GPU runs.

use std::time::Instant;
use tch::{Device, Kind, Tensor};
use tricklab::optim::{Group, Muon, MuonOptions, NsDtype, NsVariant, Optimizer};

const SHAPES: [[i64; 4]; 6] = [
    [64, 24, 3, 3],
    [64, 64, 3, 3],
    [256, 64, 3, 3],
    [256, 256, 3, 3],
    [256, 256, 3, 3],
    [256, 256, 3, 3],
];

/// Milliseconds per step, median of `steps` after two warm-up steps.
fn ms_per_step(o: MuonOptions, steps: usize) -> f64 {
    tch::manual_seed(0);
    let ws: Vec<Tensor> = SHAPES
        .iter()
        .map(|s| Tensor::randn(s, (Kind::Float, Device::Cpu)).set_requires_grad(true))
        .collect();
    let gs: Vec<Tensor> = SHAPES
        .iter()
        .map(|s| Tensor::randn(s, (Kind::Float, Device::Cpu)))
        .collect();
    let mut opt = Muon::new(
        vec![Group::new(ws.iter().map(Tensor::shallow_clone).collect())],
        o,
    );
    let mut times = Vec::new();
    for i in 0..steps + 2 {
        for (w, g) in ws.iter().zip(&gs) {
            let mut w = w.shallow_clone();
            w.zero_grad();
            (&w * g).sum(None).backward();
        }
        let t = Instant::now();
        opt.step(0.2);
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let steps = 20;
    println!(
        "## muon_step (CPU, {} threads, airbench's six filters, 3 NS iterations, median of {steps} steps)\n",
        tch::get_num_threads()
    );
    println!("| Muon | ms per step |");
    println!("|---|---|");
    // hiverge's Newton-Schulz in the filters' fp32: a CPU has no fast bf16 matmul.
    let base = MuonOptions {
        ns: NsVariant::Speedrun,
        ns_dtype: NsDtype::Filters,
        ..MuonOptions::airbench(0.655, 3, 1000)
    };
    for (label, o) in [
        ("one Newton-Schulz per filter (airbench94_muon)", base),
        (
            "one batched Newton-Schulz, padded (batched_muon)",
            MuonOptions {
                batched: true,
                ..base
            },
        ),
        (
            "batched, fp16 momentum (muon_fp16_momentum)",
            MuonOptions {
                batched: true,
                half_momentum: true,
                ..base
            },
        ),
    ] {
        println!("| {label} | {:.1} |", ms_per_step(o, steps));
    }
}
