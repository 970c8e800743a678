//! One optimiser step over a full-width net's parameters on this CPU, as the
//! references take it (one multi-tensor or fused kernel per group, gradients
//! dropped after the step) and as tricklab took it before (a chain of small
//! kernels per parameter, gradients zero-filled): airbench94's SGD over every
//! parameter, hiverge's speedrun SGD over its head and biases (Muon, which
//! takes its filters, is `benches/muon_step.rs`), Page's form over ResNet-9.

use std::time::Instant;
use tch::{Device, Kind, Tensor, nn};
use tricklab::model::Net;
use tricklab::optim::{Group, Optimizer, SgdPage, SgdTorch};

/// The net of a recipe at full width, and the parameters its SGD steps.
fn params(recipe: &str) -> (nn::VarStore, Vec<Tensor>) {
    let (_, plan) = tricklab::recipe::resolve_plan(recipe, &[]).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &plan.net);
    let pg = net.param_groups();
    let ps = match plan.optim.muon {
        Some(_) => {
            let mut p = pg.non_filter_weights();
            p.extend(pg.bn_biases);
            p.extend(pg.whiten_bias);
            p
        }
        None => pg.all_trainable(),
    };
    (vs, ps)
}

/// The chain of per-parameter kernels tricklab ran before (PyTorch's form,
/// Nesterov, coupled decay), with zero-filled gradients after.
fn per_parameter_step(ps: &[Tensor], bufs: &mut [Tensor], lr: f64, mu: f64, wd: f64, page: bool) {
    tch::no_grad(|| {
        for (w, buf) in ps.iter().zip(bufs.iter_mut()) {
            let g = w.grad();
            let mut w = w.shallow_clone();
            if page {
                let dw = (g + &w * wd) * (-lr);
                let _ = buf.g_mul_scalar_(mu).g_add_(&dw);
                let _ = w.g_add_(&(dw + &*buf * mu));
            } else {
                let d = g + &w * wd;
                let _ = buf.g_mul_scalar_(mu).g_add_(&d);
                let _ = w.g_add_(&((d + &*buf * mu) * (-lr)));
            }
            w.zero_grad();
        }
    });
}

fn set_grads(ps: &[Tensor], gs: &[Tensor]) {
    for (p, g) in ps.iter().zip(gs) {
        (p * g).sum(Kind::Float).backward();
    }
}

/// Median milliseconds of `step` over `n` steps after two warm-ups, the
/// gradients set before each outside the timed part.
fn median_ms(n: usize, ps: &[Tensor], gs: &[Tensor], mut step: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..n + 2)
        .map(|_| {
            set_grads(ps, gs);
            let s = Instant::now();
            step();
            s.elapsed().as_secs_f64() * 1e3
        })
        .skip(2)
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let n = 30;
    println!(
        "## optim_step (CPU, {} threads, full-width nets, one SGD step, median of {n})\n",
        tch::get_num_threads()
    );
    println!(
        "| net (parameters) | per parameter, zero-filled (before) | multi-tensor, set to none (after) |"
    );
    println!("|---|---|---|");
    for (recipe, page) in [
        ("airbench94", false),
        ("hiverge-speedrun", false),
        ("page-final", true),
    ] {
        let (_vs, ps) = params(recipe);
        let gs: Vec<Tensor> = ps.iter().map(|p| p.randn_like()).collect();
        let mut bufs: Vec<Tensor> = ps.iter().map(Tensor::zeros_like).collect();
        let before = median_ms(n, &ps, &gs, || {
            per_parameter_step(&ps, &mut bufs, 1e-3, 0.85, 1e-3, page)
        });
        let group = vec![Group::new(ps.iter().map(Tensor::shallow_clone).collect())];
        let mut opt: Box<dyn Optimizer> = if page {
            Box::new(SgdPage::new(group, 0.9, 5e-4))
        } else {
            Box::new(SgdTorch::new(group, 0.85, 1e-3, true))
        };
        let after = median_ms(n, &ps, &gs, || {
            opt.step(1e-3);
            opt.zero_grad(true);
        });
        let count: i64 = ps.iter().map(Tensor::numel).map(|n| n as i64).sum();
        println!(
            "| {recipe} ({} tensors, {:.1} k weights) | {before:.2} ms | {after:.2} ms |",
            ps.len(),
            count as f64 / 1e3
        );
    }
}
