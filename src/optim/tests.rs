use super::*;
use tch::{Device, Kind, Tensor};

pub(super) fn close(a: &Tensor, b: &Tensor, tol: f64) -> bool {
    f64::try_from((a - b).abs().max()).unwrap() <= tol
}

pub(super) fn param(v: &[f32]) -> Tensor {
    Tensor::from_slice(v).set_requires_grad(true)
}

/// Sets w.grad to `g` by backpropagating Σ g·w.
pub(super) fn set_grad(w: &Tensor, g: &[f32]) {
    let mut wm = w.shallow_clone();
    wm.zero_grad();
    (w * Tensor::from_slice(g)).sum(None).backward();
}

fn t(v: &[f64]) -> Tensor {
    Tensor::from_slice(v).to_kind(Kind::Float)
}

#[test]
fn sgd_page_two_steps_by_hand() {
    let w = param(&[1.0, -2.0]);
    let (mu, wd) = (0.9, 0.1);
    let mut opt = SgdPage::new(
        vec![Group::with_mults(vec![w.shallow_clone()], 2.0, 0.5)],
        mu,
        wd,
    );
    // Hand computation, per element: lr·2, wd·0.5.
    let mut wh = [1.0f64, -2.0];
    let mut vh = [0.0f64; 2];
    let grads = [[0.5f32, 1.0], [-1.0, 0.25]];
    let lrs = [0.1, 0.05];
    for (g, lr) in grads.iter().zip(lrs) {
        set_grad(&w, g);
        opt.step(lr);
        for i in 0..2 {
            let dw = -(lr * 2.0) * (g[i] as f64 + wd * 0.5 * wh[i]);
            vh[i] = mu * vh[i] + dw;
            wh[i] += dw + mu * vh[i];
        }
    }
    assert!(close(&w, &t(&wh), 1e-6), "{w} vs {wh:?}");
    assert!(close(opt.momentum_buffer(0, 0), &t(&vh), 1e-6));
}

#[test]
fn sgd_torch_nesterov_two_steps_by_hand() {
    let w = param(&[1.0, -2.0]);
    let (mu, wd) = (0.85, 0.01);
    let mut opt = SgdTorch::new(vec![Group::new(vec![w.shallow_clone()])], mu, wd, true);
    let mut wh = [1.0f64, -2.0];
    let mut bh = [0.0f64; 2];
    let grads = [[0.5f32, 1.0], [-1.0, 0.25]];
    for (k, g) in grads.iter().enumerate() {
        set_grad(&w, g);
        opt.step(0.2);
        for i in 0..2 {
            let d = g[i] as f64 + wd * wh[i];
            bh[i] = if k == 0 { d } else { mu * bh[i] + d };
            wh[i] -= 0.2 * (d + mu * bh[i]);
        }
    }
    assert!(close(&w, &t(&wh), 1e-6), "{w} vs {wh:?}");
}

#[test]
fn frozen_params_are_skipped() {
    let w = param(&[1.0, 2.0]);
    let mut opt = SgdPage::new(vec![Group::new(vec![w.shallow_clone()])], 0.9, 0.0);
    set_grad(&w, &[1.0, 1.0]);
    let _ = w.set_requires_grad(false);
    opt.step(1.0);
    let _ = w.set_requires_grad(true);
    assert!(close(&w, &t(&[1.0, 2.0]), 0.0));
    let _ = Device::Cpu;
}
