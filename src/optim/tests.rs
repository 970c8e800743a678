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
    (w * Tensor::from_slice(g).view(w.size().as_slice()))
        .sum(None)
        .backward();
}

fn t(v: &[f64]) -> Tensor {
    Tensor::from_slice(v).to_kind(Kind::Float)
}

#[test]
pub(crate) fn sgd_page_two_steps_by_hand() {
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
pub(crate) fn sgd_torch_nesterov_two_steps_by_hand() {
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

/// PyTorch's SGD with `nesterov=False` (the `momentum` trick): the step is
/// the buffer itself, buf = μ·buf + (g + wd·w), w -= lr·buf.
#[test]
pub(crate) fn sgd_torch_heavy_ball_two_steps_by_hand() {
    let w = param(&[1.0, -2.0]);
    let (mu, wd) = (0.9, 0.01);
    let mut opt = SgdTorch::new(vec![Group::new(vec![w.shallow_clone()])], mu, wd, false);
    let mut wh = [1.0f64, -2.0];
    let mut bh = [0.0f64; 2];
    let grads = [[0.5f32, 1.0], [-1.0, 0.25]];
    for (k, g) in grads.iter().enumerate() {
        set_grad(&w, g);
        opt.step(0.2);
        for i in 0..2 {
            let d = g[i] as f64 + wd * wh[i];
            bh[i] = if k == 0 { d } else { mu * bh[i] + d };
            wh[i] -= 0.2 * bh[i];
        }
    }
    assert!(close(&w, &t(&wh), 1e-6), "{w} vs {wh:?}");
}

/// The per-parameter chains the multi-tensor kernels replaced, kept as the
/// reference: (Page form?, params, grads per step, lrs, μ, wd, group mults).
fn per_parameter_sgd(
    page: bool,
    w: &[Tensor],
    grads: &[Vec<Tensor>],
    lrs: &[f64],
    mu: f64,
    wd: f64,
) {
    let mut bufs: Vec<Tensor> = w.iter().map(Tensor::zeros_like).collect();
    for (k, (gs, lr)) in grads.iter().zip(lrs).enumerate() {
        tch::no_grad(|| {
            for ((w, g), buf) in w.iter().zip(gs).zip(bufs.iter_mut()) {
                let mut w = w.shallow_clone();
                if page {
                    let dw = (g + &w * wd) * (-lr);
                    let _ = buf.g_mul_scalar_(mu).g_add_(&dw);
                    let _ = w.g_add_(&(dw + &*buf * mu));
                } else {
                    let d = g + &w * wd;
                    if k == 0 {
                        buf.copy_(&d);
                    } else {
                        let _ = buf.g_mul_scalar_(mu).g_add_(&d);
                    }
                    let _ = w.g_add_(&((d + &*buf * mu) * (-lr)));
                }
            }
        });
    }
}

#[test]
fn multi_tensor_sgd_equals_the_per_parameter_chain() {
    let rng = crate::native::Rng::new(Device::Cpu, 13);
    let shapes: [&[i64]; 4] = [&[16, 8, 3, 3], &[64], &[10, 32], &[8, 3, 2, 2]];
    let draw = |s: &[i64]| rng.rand(s, Device::Cpu) * 2.0 - 1.0;
    let w0: Vec<Tensor> = shapes.iter().map(|s| draw(s)).collect();
    let grads: Vec<Vec<Tensor>> = (0..4)
        .map(|_| shapes.iter().map(|s| draw(s)).collect())
        .collect();
    let lrs = [0.1, 0.2, 0.05, 0.15];
    for page in [true, false] {
        let (mu, wd) = (0.9, 5e-3);
        let want: Vec<Tensor> = w0.iter().map(Tensor::copy).collect();
        per_parameter_sgd(page, &want, &grads, &lrs, mu, wd);
        let got: Vec<Tensor> = w0
            .iter()
            .map(|w| w.copy().set_requires_grad(true))
            .collect();
        let group = || vec![Group::new(got.iter().map(Tensor::shallow_clone).collect())];
        let mut opt: Box<dyn Optimizer> = if page {
            Box::new(SgdPage::new(group(), mu, wd))
        } else {
            Box::new(SgdTorch::new(group(), mu, wd, true))
        };
        for (gs, lr) in grads.iter().zip(lrs) {
            for (w, g) in got.iter().zip(gs) {
                set_grad(w, &Vec::<f32>::try_from(g.flatten(0, -1)).unwrap());
            }
            opt.step(lr);
            opt.zero_grad(true);
        }
        for (a, b) in got.iter().zip(&want) {
            assert!(
                close(a, b, 1e-6),
                "page {page}: {}",
                f64::try_from((a - b).abs().max()).unwrap()
            );
        }
        // set_to_none dropped the gradients.
        assert!(got.iter().all(|w| !w.grad().defined()));
    }
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

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[test]
pub(crate) fn lars_one_step_formula() {
    let w0 = [3.0f64, 4.0];
    let g = [0.6f32, -0.8];
    let (lr, mu, wd, eta) = (0.5, 0.9, 0.01, 0.02);
    let w = param(&[3.0, 4.0]);
    let mut opt = Lars::new(vec![Group::new(vec![w.shallow_clone()])], mu, wd, eta, true);
    set_grad(&w, &g);
    opt.step(lr);
    let trust = eta * 5.0 / (1.0 + wd * 5.0);
    let want: Vec<f64> = (0..2)
        .map(|i| w0[i] - lr * trust * (g[i] as f64 + wd * w0[i]))
        .collect();
    assert!(close(&w, &t(&want), 1e-6), "{w} vs {want:?}");
}

#[test]
pub(crate) fn lamb_one_step_formula() {
    let w0 = [1.0f64, -2.0, 0.5];
    let g = [0.3f32, 0.1, -0.2];
    let (lr, b1, b2, eps, wd) = (0.1, 0.9, 0.999, 1e-6, 0.01);
    let w = param(&[1.0, -2.0, 0.5]);
    let mut opt = Lamb::new(vec![Group::new(vec![w.shallow_clone()])], (b1, b2), eps, wd);
    set_grad(&w, &g);
    opt.step(lr);
    // First step: m̂ = g, v̂ = g², so the Adam direction is g/(|g| + eps).
    let u: Vec<f64> = (0..3)
        .map(|i| g[i] as f64 / ((g[i] as f64).abs() + eps) + wd * w0[i])
        .collect();
    let trust = norm(&w0) / norm(&u);
    let want: Vec<f64> = (0..3).map(|i| w0[i] - lr * trust * u[i]).collect();
    assert!(close(&w, &t(&want), 1e-5), "{w} vs {want:?}");
}

#[test]
pub(crate) fn adamw_two_steps_formula() {
    let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.99, 1e-8, 0.1);
    let w = param(&[1.0, -1.0]);
    let mut opt = AdamW::new(vec![Group::new(vec![w.shallow_clone()])], (b1, b2), eps, wd);
    let grads = [[0.5f32, -0.25], [0.1, 0.3]];
    let (mut wh, mut m, mut v) = ([1.0f64, -1.0], [0.0f64; 2], [0.0f64; 2]);
    for (k, g) in grads.iter().enumerate() {
        set_grad(&w, g);
        opt.step(lr);
        let tk = (k + 1) as i32;
        for i in 0..2 {
            let gi = g[i] as f64;
            wh[i] *= 1.0 - lr * wd;
            m[i] = b1 * m[i] + (1.0 - b1) * gi;
            v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
            let (mh, vh) = (m[i] / (1.0 - b1.powi(tk)), v[i] / (1.0 - b2.powi(tk)));
            wh[i] -= lr * mh / (vh.sqrt() + eps);
        }
    }
    assert!(close(&w, &t(&wh), 1e-6), "{w} vs {wh:?}");
}

fn singular_values(x: &Tensor) -> Vec<f64> {
    // σ² are the eigenvalues of the smaller Gram matrix (svd's `driver` is CUDA-only).
    let x = x.to_kind(Kind::Double);
    let gram = if x.size()[0] <= x.size()[1] {
        x.matmul(&x.tr())
    } else {
        x.tr().matmul(&x)
    };
    let mut s: Vec<f64> = Vec::<f64>::try_from(gram.linalg_eigvalsh("L")).unwrap();
    s.iter_mut().for_each(|v| *v = v.max(0.0).sqrt());
    s.sort_by(|a, b| b.total_cmp(a));
    s
}

/// A matrix of splitmix64 uniforms on [-1, 1), the same on every machine.
fn uniform_matrix(shape: [i64; 2], seed: u64) -> Tensor {
    let mut rng = crate::util::splitmix::SplitMix64(seed);
    let values: Vec<f32> = (0..shape[0] * shape[1])
        .map(|_| (rng.unit_f64() * 2.0 - 1.0) as f32)
        .collect();
    Tensor::from_slice(&values).reshape(shape)
}

#[test]
fn newton_schulz_orthogonalises() {
    for shape in [[16i64, 40], [40, 16]] {
        // Its own generator, not torch's global one that tests running
        // beside it draw from: some draws have a spectrum five steps cannot
        // bring into the band.
        let g = uniform_matrix(shape, 3);
        let before = singular_values(&g);
        let spread = before[0] / before[before.len() - 1];
        assert!(spread > 3.0, "test matrix is already near-orthogonal");
        // Without iterations the spectrum is just rescaled, far outside the band.
        let raw = singular_values(&newton_schulz5(&g, 0));
        assert!(raw.iter().any(|&s| s < 0.5));
        let x = newton_schulz5(&g, 5);
        assert_eq!(x.size(), g.size().to_vec());
        for s in singular_values(&x) {
            // The quintic's coefficients trade exactness for speed: Jordan's
            // Muon post puts its output singular values in about [0.5, 1.5].
            assert!((0.5..=1.5).contains(&s), "{shape:?}: singular value {s}");
        }
        // Same singular vectors: Xᵀ·G is symmetric positive (polar factor).
        let p = if shape[0] <= shape[1] {
            g.matmul(&x.tr())
        } else {
            x.tr().matmul(&g)
        };
        // In bf16 (8 mantissa bits, as airbench runs it) a few 1e-2 of the
        // largest entry; a wrong factor is off by the entry itself.
        assert!(close(
            &p,
            &p.tr(),
            3e-2 * f64::try_from(p.abs().max()).unwrap()
        ));
    }
}

#[test]
pub(crate) fn muon_renormalises_weight_and_steps_orthogonally() {
    let _defaults = crate::native::default_generators();
    tch::manual_seed(4);
    let w = Tensor::randn([8, 2, 3, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let mut opt = Muon::new(
        vec![Group::new(vec![w.shallow_clone()])],
        MuonOptions::airbench(0.6, 3, 100),
    );
    let g = Tensor::randn([8, 2, 3, 3], (Kind::Float, Device::Cpu));
    (&w * &g).sum(None).backward();
    let w0 = w.detach().copy();
    opt.step(0.0);
    let n = f64::try_from(w.norm()).unwrap();
    assert!((n - 8f64.sqrt()).abs() < 1e-4, "norm {n}");
    let renormed = w.detach().copy();
    // Second step at lr 0.1: buffer = g(1 + 0.6), Nesterov g' = g + 0.6·buf,
    // airbench94_muon's Newton-Schulz in bf16.
    opt.step(0.1);
    let buf = &g * 1.6;
    let gp = &g + buf * 0.6;
    let upd = newton_schulz5(&gp.reshape([8, -1]), 3).view([8, 2, 3, 3]);
    let want = &renormed * (8f64.sqrt() / f64::try_from(renormed.norm()).unwrap()) - upd * 0.1;
    assert!(close(&w, &want, 1e-4));
    assert!(!close(&w, &w0, 1e-3));
}

/// Filters of several shapes, one of them taller than wide, with fixed gradients.
fn filters_with_grads(seed: i64) -> (Vec<Tensor>, Vec<Tensor>) {
    // Its own generator: tests run in parallel and share libtorch's.
    let rng = crate::native::Rng::new(Device::Cpu, seed as u64);
    let draw = |s: &[i64]| rng.rand(s, Device::Cpu) * 2.0 - 1.0;
    let shapes: [&[i64]; 4] = [
        &[8, 2, 3, 3],
        &[16, 8, 3, 3],
        &[16, 16, 3, 3],
        &[32, 2, 1, 1],
    ];
    let ws = shapes
        .iter()
        .map(|s| draw(s).set_requires_grad(true))
        .collect();
    let gs = shapes.iter().map(|s| draw(s)).collect();
    (ws, gs)
}

/// `lrs.len()` Muon steps over `filters_with_grads(7)`, each with the same gradients.
fn muon_steps(o: MuonOptions, lrs: &[f64]) -> Vec<Tensor> {
    let (ws, gs) = filters_with_grads(7);
    let mut opt = Muon::new(
        vec![Group::new(ws.iter().map(Tensor::shallow_clone).collect())],
        o,
    );
    for &lr in lrs {
        for (w, g) in ws.iter().zip(&gs) {
            let mut wm = w.shallow_clone();
            wm.zero_grad();
            (w * g).sum(None).backward();
        }
        opt.step(lr);
    }
    ws.iter().map(|w| w.detach().copy()).collect()
}

/// hiverge's Muon on fp32 filters: its Newton-Schulz in the filters' type.
fn speedrun_muon() -> MuonOptions {
    MuonOptions {
        ns: NsVariant::Speedrun,
        ns_dtype: NsDtype::Filters,
        ..MuonOptions::airbench(0.6, 3, 243)
    }
}

#[test]
pub(crate) fn batched_muon_matches_the_per_filter_loop() {
    let o = speedrun_muon();
    let looped = muon_steps(o, &[0.1; 3]);
    let batched = muon_steps(MuonOptions { batched: true, ..o }, &[0.1; 3]);
    for (a, b) in looped.iter().zip(&batched) {
        let d = f64::try_from((a - b).abs().max()).unwrap();
        assert!(d < 1e-5, "{:?}: {d}", a.size());
    }
    // Each padded slot gets its own matrix's orthogonalisation, and the padding stays zero.
    let (_, gs) = filters_with_grads(8);
    let mats: Vec<Tensor> = gs.iter().map(|g| g.reshape([g.size()[0], -1])).collect();
    let padded: Vec<Tensor> = mats
        .iter()
        .map(|m| m.constant_pad_nd([0, 144 - m.size()[1], 0, 32 - m.size()[0]]))
        .collect();
    let ns = |x: &Tensor| newton_schulz(x, 5, NsVariant::Speedrun, Kind::Float, 0.5);
    let x = ns(&Tensor::stack(&padded, 0));
    for (i, m) in mats.iter().enumerate() {
        let (r, c) = (m.size()[0], m.size()[1]);
        let slot = x.get(i as i64);
        let d = f64::try_from((slot.narrow(0, 0, r).narrow(1, 0, c) - ns(m)).abs().max()).unwrap();
        // bmm and mm sum in different orders, and five iterations amplify it:
        // 1.3e-5 on one CPU of this workplace, below 1e-5 on another.
        assert!(d <= 1e-4, "slot {i}: {d}");
        let pad_rows = slot.narrow(0, r, 32 - r).abs().sum(Kind::Float);
        let pad_cols = slot.narrow(1, c, 144 - c).abs().sum(Kind::Float);
        assert_eq!(f64::try_from(pad_rows + pad_cols).unwrap(), 0.0);
    }
    // Whose Newton-Schulz matters (coefficients, normalisation, dtype).
    assert!(!close(
        &looped[1],
        &muon_steps(MuonOptions::airbench(0.6, 3, 243), &[0.1; 3])[1],
        1e-4
    ));
}

#[test]
pub(crate) fn muon_renormalises_at_hivergess_growing_intervals() {
    let growing = Renorm::Growing {
        base: 2,
        growth: 15.0,
    };
    let steps = Muon::renorm_steps(growing, 243);
    // First at step 2; intervals 2 + int(15 t / 243) grow to 17: 37 in 243 steps.
    assert_eq!(&steps[..4], &[2, 4, 6, 8]);
    assert_eq!(steps.len(), 37, "{steps:?}");
    let gaps: Vec<u64> = steps.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    assert_eq!((steps[36], gaps[35]), (230, 16));
    assert_eq!(Muon::renorm_steps(Renorm::EveryStep, 5), [1, 2, 3, 4, 5]);
    // lr 0: only the renormalisation moves the filters, at steps 2 and 4 of the first 4.
    let (ws, gs) = filters_with_grads(9);
    let mut opt = Muon::new(
        vec![Group::new(ws.iter().map(Tensor::shallow_clone).collect())],
        MuonOptions {
            renorm: growing,
            ..speedrun_muon()
        },
    );
    let at_sqrt_c = |ws: &[Tensor]| {
        ws.iter().all(|w| {
            let n = f64::try_from(w.norm()).unwrap() / (w.size()[0] as f64).sqrt();
            (n - 1.0).abs() < 1e-5
        })
    };
    let mut seen = Vec::new();
    for _ in 0..2 {
        for (w, g) in ws.iter().zip(&gs) {
            (w * g).sum(None).backward();
        }
        opt.step(0.0);
        seen.push(at_sqrt_c(&ws));
    }
    assert_eq!(seen, [false, true]);
}

#[test]
fn muon_weight_decay_shrinks_the_filters_after_the_update() {
    let o = MuonOptions {
        weight_decay: 0.5,
        ..MuonOptions::airbench(0.6, 3, 100)
    };
    let (ws, gs) = filters_with_grads(11);
    let mut opt = Muon::new(
        vec![Group::new(ws.iter().map(Tensor::shallow_clone).collect())],
        o,
    );
    for (w, g) in ws.iter().zip(&gs) {
        (w * g).sum(None).backward();
    }
    let w0: Vec<Tensor> = ws.iter().map(|w| w.detach().copy()).collect();
    opt.step(0.1);
    // By hand: w = (w0 sqrt(C_out)/|w0| - 0.1 NS(1.6 g)) x (1 - 0.1 x 0.5).
    for ((w, g), w0) in ws.iter().zip(&gs).zip(&w0) {
        let rows = w.size()[0];
        let upd = newton_schulz5(&(g * 1.6).reshape([rows, -1]), 3).reshape(w.size());
        let renormed = w0 * ((rows as f64).sqrt() / f64::try_from(w0.norm()).unwrap());
        assert!(close(w, &((renormed - upd * 0.1) * 0.95), 1e-5));
    }
}

#[test]
pub(crate) fn muon_fp16_momentum_rounds_the_buffer_to_half() {
    // Newton-Schulz in fp32, so that the buffer's rounding shows.
    let o = speedrun_muon();
    let half = muon_steps(
        MuonOptions {
            half_momentum: true,
            ..o
        },
        &[0.1],
    );
    let full = muon_steps(o, &[0.1]);
    // One step by hand: buf = fp16(g); g' = g + 0.6 buf; w = renorm(w) - 0.1 NS(g').
    let (ws, gs) = filters_with_grads(7);
    for ((w, g), got) in ws.iter().zip(&gs).zip(&half) {
        let rows = w.size()[0];
        let buf = g.to_kind(Kind::Half).to_kind(Kind::Float);
        let gp = g + buf * 0.6;
        let upd = newton_schulz(
            &gp.reshape([rows, -1]),
            3,
            NsVariant::Speedrun,
            Kind::Float,
            1.0 / 243.0,
        )
        .reshape(w.size());
        let renormed = w.detach() * ((rows as f64).sqrt() / f64::try_from(w.norm()).unwrap());
        assert!(close(got, &(renormed - upd * 0.1), 1e-5));
    }
    assert!(half.iter().zip(&full).any(|(a, b)| !a.equal(b)));
    assert!(half.iter().zip(&full).all(|(a, b)| close(a, b, 1e-2)));
}

#[test]
fn schedule_values_at_knots() {
    // np.interp semantics: linear between knots, held outside them.
    let p = Piecewise::new(vec![(0.0, 0.0), (5.0, 0.4), (24.0, 0.0)]).unwrap();
    assert_eq!(p.at(0.0), 0.0);
    assert!((p.at(5.0) - 0.4).abs() < 1e-12);
    assert!((p.at(2.5) - 0.2).abs() < 1e-12);
    assert_eq!(p.at(24.0), 0.0);
    assert_eq!(p.at(30.0), 0.0);
    assert_eq!(p.at(-1.0), 0.0);
    // Page's final: [0, 2, 8] → [0, 1, 0.1], held at 0.1 to epoch 10.
    let f = Piecewise::new(vec![(0.0, 0.0), (2.0, 1.0), (10.0, 0.0)])
        .unwrap()
        .with_floor(2.0, 0.1);
    assert_eq!(
        f.knots,
        vec![(0.0, 0.0), (2.0, 1.0), (8.0, 0.1), (10.0, 0.1)]
    );
    assert!((f.at(9.5) - 0.1).abs() < 1e-12);
    assert!((f.at(5.0) - 0.55).abs() < 1e-12);
    assert!(Piecewise::new(vec![(1.0, 0.0), (0.5, 1.0)]).is_err());
    assert!(Piecewise::new(vec![]).is_err());
    assert!(Piecewise::new(vec![(0.0, f64::NAN)]).is_err());
}

#[test]
pub(crate) fn ema_and_lookahead_follow_the_formula() {
    let live = vec![
        Tensor::from_slice(&[1.0f32, 2.0]),
        Tensor::from_slice(&[10.0f32]),
    ];
    let mut ema = Ema::new(&live);
    tch::no_grad(|| {
        live[0]
            .shallow_clone()
            .copy_(&Tensor::from_slice(&[3.0f32, 6.0]));
        live[1]
            .shallow_clone()
            .copy_(&Tensor::from_slice(&[0.0f32]));
    });
    let d = page_ema_decay(0.99, 5);
    assert!((d - 0.99f64.powi(5)).abs() < 1e-15);
    ema.update(&live, d);
    let want0 = t(&[d * 1.0 + (1.0 - d) * 3.0, d * 2.0 + (1.0 - d) * 6.0]);
    assert!(close(&ema.tensors()[0], &want0, 1e-6));
    assert!(close(&ema.tensors()[1], &t(&[d * 10.0]), 1e-5));
    // Lookahead: decay 0.95⁵·(t/T)³, then copy back.
    assert!((lookahead_decay(476, 476) - 0.95f64.powi(5)).abs() < 1e-12);
    assert!((lookahead_decay(238, 476) - 0.95f64.powi(5) / 8.0).abs() < 1e-12);
    ema.copy_into(&live);
    assert!(close(&live[0], &want0, 1e-6));
    assert!(is_update_step(10, 5) && !is_update_step(11, 5));
}

#[test]
fn label_smoothing_matches_hand_formula() {
    let logits = Tensor::from_slice(&[2.0f32, 0.5, -1.0, 0.0, 1.0, 3.0]).view([2, 3]);
    let targets = Tensor::from_slice(&[0i64, 2]);
    let alpha = 0.2;
    let rows = [[2.0f64, 0.5, -1.0], [0.0, 1.0, 3.0]];
    let mut want = 0.0;
    for (r, &y) in rows.iter().zip(&[0usize, 2]) {
        let lse = r.iter().map(|v| v.exp()).sum::<f64>().ln();
        let nll: Vec<f64> = r.iter().map(|v| lse - v).collect();
        want += (1.0 - alpha) * nll[y] + alpha * nll.iter().sum::<f64>() / 3.0;
    }
    want /= 2.0;
    let got = f64::try_from(label_smoothed_ce(&logits, &targets, alpha)).unwrap();
    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    let plain = f64::try_from(label_smoothed_ce(&logits, &targets, 0.0)).unwrap();
    assert!((plain - got).abs() > 1e-3);
    // Soft targets: smoothed one-hot gives the same loss.
    let onehot = targets.one_hot(3).to_kind(Kind::Float);
    let soft = f64::try_from(soft_target_ce(&logits, &smooth_targets(&onehot, alpha))).unwrap();
    assert!((soft - want).abs() < 1e-5);
}

#[test]
pub(crate) fn selective_tta_gives_the_views_to_the_least_confident_only() {
    // A "network" whose confidence grows with the image's first pixel.
    let f = |x: &Tensor| -> Tensor {
        let p = x.flatten(1, -1).narrow(1, 0, 1);
        Tensor::cat(
            &[&p, &(p.zeros_like() - x.flatten(1, -1).narrow(1, 1, 1))],
            1,
        )
    };
    let x = Tensor::arange(8 * 16, (Kind::Float, Device::Cpu)).view([8, 1, 4, 4]) / 16.0;
    // Scramble the order so that the least confident are not the first rows.
    let order = Tensor::from_slice(&[5i64, 2, 7, 0, 3, 6, 1, 4]);
    let x = x.index_select(0, &order);
    let plain = f(&x);
    // hiverge's views: the image, its two shifts and the three mirrors, averaged equally.
    let full = equal_views(&f, &x, 2);
    let picked = Vec::<i64>::try_from(least_confident(&plain, 0.25)).unwrap();
    let margin = Vec::<f32>::try_from((plain.select(1, 0) - plain.select(1, 1)).abs()).unwrap();
    let mut by_margin: Vec<i64> = (0..8).collect();
    by_margin.sort_by(|&a, &b| margin[a as usize].total_cmp(&margin[b as usize]));
    let mut want = by_margin[..2].to_vec();
    let mut got = picked.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    for batch in [1, 3, 8] {
        let sel = selective_tta(&f, &x, &plain, 2, 0.25, batch);
        for i in 0..8 {
            let row = if picked.contains(&i) {
                full.get(i)
            } else {
                plain.get(i)
            };
            assert!(close(&sel.get(i), &row, 1e-6), "row {i}, batch {batch}");
        }
    }
    assert!(!close(&full, &plain, 1e-3));
    // Equal views: (f(x) + f(t1 x) + f(t2 x) + their three mirrors) / 6.
    let padded = x.reflection_pad2d([1, 1, 1, 1]);
    let views = [
        x.shallow_clone(),
        padded.narrow(2, 0, 4).narrow(3, 0, 4),
        padded.narrow(2, 2, 4).narrow(3, 2, 4),
    ];
    let sum = views
        .iter()
        .map(|v| f(v) + f(&v.flip([3])))
        .reduce(|a, b| a + b)
        .unwrap();
    assert!(close(&full, &(sum / 6.0), 1e-6));
    assert!(close(
        &selective_tta(&f, &x, &plain, 2, 1.0, 4),
        &full,
        1e-6
    ));
    assert!(close(
        &selective_tta(&f, &x, &plain, 2, 0.0, 4),
        &plain,
        0.0
    ));
}

#[test]
pub(crate) fn tta_averages_flipped_and_shifted_views() {
    // A "network" that reads two pixels of row 1: not flip or shift invariant.
    let f = |x: &Tensor| -> Tensor { x.select(1, 0).select(1, 1).narrow(1, 0, 2) };
    let x = Tensor::arange(16, (Kind::Float, Device::Cpu)).view([1, 1, 4, 4]);
    let px = |r: i64, c: i64| (4 * r + c) as f64;
    assert!(close(
        &tta_logits(&f, &x, 0),
        &t(&[px(1, 0), px(1, 1)]).view([1, 2]),
        0.0
    ));
    // Mirror: columns 0,1 of the flipped image are columns 3,2.
    let m = |r: i64| [(px(r, 0) + px(r, 3)) / 2.0, (px(r, 1) + px(r, 2)) / 2.0];
    let l1 = tta_logits(&f, &x, 1);
    assert!(close(&l1, &t(&m(1)).view([1, 2]), 1e-6));
    // t1 = crop (0,0) of the reflect-padded image: its row 1 is row 0 shifted
    // right by one with a reflected column; t2 = crop (2,2): row 2 shifted left.
    let refl = |c: i64| {
        if c < 0 {
            -c
        } else if c > 3 {
            6 - c
        } else {
            c
        }
    };
    let view = |dr: i64, dc: i64| {
        let r = refl(1 + dr);
        let g = |c: i64| px(r, refl(c + dc));
        [(g(0) + g(3)) / 2.0, (g(1) + g(2)) / 2.0]
    };
    let (a, b) = (view(-1, -1), view(1, 1));
    let mm = m(1);
    let want: Vec<f64> = (0..2).map(|i| 0.5 * mm[i] + 0.25 * (a[i] + b[i])).collect();
    let l2 = tta_logits(&f, &x, 2);
    assert!(close(&l2, &t(&want).view([1, 2]), 1e-6), "{l2} vs {want:?}");
    assert_eq!(tta_passes(2), 6);
}

#[test]
fn converters_match_tricks_numbers() {
    // Page: lr 0.4/512 and wd 5e-4·512 on a summed loss.
    let (lr, wd) = from_page(0.4 / 512.0, 5e-4 * 512.0, 512);
    assert!((lr - 0.4).abs() < 1e-12 && (wd - 5e-4).abs() < 1e-15);
    // airbench94: mean-loss lr 1.5, per-step decay 1.9957e-3.
    let (lr, wd) = from_airbench(11.5, 0.0153, 0.85, 1024);
    assert!((lr - 1.5).abs() < 1e-3, "{lr}");
    assert!((lr * wd - 1.9957e-3).abs() < 1e-6, "{}", lr * wd);
    // raw PyTorch values: lr 1.4648e-3 and weight_decay 1.36237.
    assert!((lr / 1024.0 - 1.4648e-3).abs() < 1e-7);
    assert!((lr * wd / (lr / 1024.0) - 1.36237).abs() < 1e-4);
    // airbench bias group: lr ×64 with the same absolute decay as the rest.
    let (lm, wm) = bias_group_mults(64.0);
    assert!(((lr * lm) * (wd * wm) - lr * wd).abs() < 1e-15 && lr * lm / lr == 64.0);
    // hlb: mean-loss lr 1.525, per-step decay 2.04e-3.
    let (lr, wd) = from_hlb(1.525 / 512.0, 6.687e-4 * 1024.0, 1024, 0.5);
    assert!((lr - 1.525).abs() < 1e-12);
    assert!((lr * wd - 2.04e-3).abs() < 1e-5, "{}", lr * wd);
}

type Make = fn(Vec<Group>) -> Box<dyn Optimizer>;

/// One optimiser of each family, with decay on, for the loss-scale tests.
fn every_family() -> [(&'static str, Make); 6] {
    [
        ("sgd_page", |g| Box::new(SgdPage::new(g, 0.9, 5e-4))),
        ("sgd_torch", |g| {
            Box::new(SgdTorch::new(g, 0.85, 5e-4, true))
        }),
        ("lars", |g| Box::new(Lars::new(g, 0.9, 5e-4, 0.001, false))),
        ("lamb", |g| Box::new(Lamb::new(g, (0.9, 0.999), 1e-6, 0.01))),
        ("adamw", |g| {
            Box::new(AdamW::new(g, (0.9, 0.999), 1e-8, 0.01))
        }),
        ("muon", |g| {
            Box::new(Muon::new(g, MuonOptions::airbench(0.6, 3, 10)))
        }),
    ]
}

#[test]
fn a_loss_scale_in_the_gradients_leaves_every_optimiser_step_unchanged() {
    // Two steps on gradients g (scale 1) and on 512·g with set_loss_scale(512):
    // the weights must agree, for every family, with weight decay on.
    let makers = every_family();
    let s = 512.0;
    for (name, make) in makers {
        let w0 = [0.3f32, -0.2, 0.5, 0.1, -0.4, 0.25];
        let mat = || Tensor::from_slice(&w0).view([2, 3]).set_requires_grad(true);
        let (a, b) = (mat(), mat());
        let bias = (param(&[0.1, -0.1]), param(&[0.1, -0.1]));
        let mut oa = make(vec![Group::new(vec![
            a.shallow_clone(),
            bias.0.shallow_clone(),
        ])]);
        let mut ob = make(vec![Group::new(vec![
            b.shallow_clone(),
            bias.1.shallow_clone(),
        ])]);
        ob.set_loss_scale(s);
        for step in 0..2 {
            let g = [0.02f32, -0.01, 0.03, 0.005, -0.02, 0.01];
            let gb = [0.001f32 * (step + 1) as f32, -0.002];
            set_grad(&a, &g);
            set_grad(&bias.0, &gb);
            set_grad(&b, &g.map(|x| x * s as f32));
            set_grad(&bias.1, &gb.map(|x| x * s as f32));
            oa.step(0.1);
            ob.step(0.1);
        }
        assert!(close(&a, &b, 1e-6), "{name}: {a} vs {b}");
        // Muon takes conv filters only (its Newton-Schulz epsilon shows on a 1-D vector).
        assert!(
            name == "muon" || close(&bias.0, &bias.1, 1e-6),
            "{name} (1-D)"
        );
        assert!(!close(&a, &mat(), 1e-4), "{name} did not move");
    }
}

#[test]
fn a_loss_scale_that_changes_between_steps_leaves_every_optimiser_on_the_mean_loss_path() {
    // fast.ai's phases change the batch, and the summed loss's scale with it
    // (×½, ×2, ...): six steps at scales 512, 512, 256, 256, 1024, 1024 against
    // the same mean-loss gradients at scale 1 throughout. Without the
    // histories rescaled, SGD's buffer, Adam's moments and Muon's momentum
    // would weigh the old steps by the old scale (issue 49, item 3).
    let makers = every_family();
    // Powers of two, so that only the epsilons differ in rounding (as in
    // the test above, whose tolerance this keeps).
    let scales = [512.0f32, 512.0, 256.0, 256.0, 1024.0, 1024.0];
    for (name, make) in makers {
        let w0 = [0.3f32, -0.2, 0.5, 0.1, -0.4, 0.25];
        let mat = || Tensor::from_slice(&w0).view([2, 3]).set_requires_grad(true);
        let (a, b) = (mat(), mat());
        let mut oa = make(vec![Group::new(vec![a.shallow_clone()])]);
        let mut ob = make(vec![Group::new(vec![b.shallow_clone()])]);
        for (step, &s) in scales.iter().enumerate() {
            // Gradients that turn, so that the history matters.
            let k = step as f32;
            let g = [0.02f32, -0.01 * k, 0.03, 0.005 * k, -0.02, 0.01 + 0.01 * k];
            ob.set_loss_scale(f64::from(s));
            set_grad(&a, &g);
            set_grad(&b, &g.map(|x| x * s));
            oa.step(0.1);
            ob.step(0.1);
        }
        assert!(close(&a, &b, 1e-6), "{name}: {a} vs {b}");
        assert!(!close(&a, &mat(), 1e-4), "{name} did not move");
    }
}

#[test]
fn tta_reuses_the_plain_logits_it_is_given() {
    let _defaults = crate::native::default_generators();
    let calls = std::cell::Cell::new(0);
    let f = |x: &Tensor| -> Tensor {
        calls.set(calls.get() + 1);
        x.sum_dim_intlist([1, 2, 3].as_slice(), false, Kind::Float)
            .view([-1, 1])
    };
    let x = Tensor::randn([2, 1, 4, 4], (Kind::Float, Device::Cpu));
    let plain = f(&x);
    for (level, extra) in [(0u8, 0), (1, 1), (2, 5)] {
        calls.set(0);
        let got = tta_from_plain(&f, &x, &plain, level);
        assert_eq!(
            calls.get(),
            extra,
            "level {level}: passes beyond the plain one"
        );
        assert_eq!(tta_passes(level), extra + 1);
        assert!(close(&got, &tta_logits(&f, &x, level), 1e-5));
    }
}

/// Every optimiser that keeps state, stepped through two batch changes as
/// the engine steps it (the loss summed over each batch, the optimiser told
/// the batch as its loss scale), against the same run on the batch's mean
/// loss by the reference (`tests/golden/optimisers.json`, from
/// `make_golden.py --only optimisers`): torch.optim.SGD, its Nesterov form
/// and torch.optim.AdamW as PyTorch runs them, LARS and LAMB as their
/// papers write them. Float64, so only the order of sums differs.
#[test]
fn through_two_batch_changes_every_stateful_optimiser_steps_as_its_reference_on_the_mean_loss() {
    let path = format!(
        "{}/tests/golden/optimisers.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let ints = |v: &serde_json::Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    let [n, d, k] = ints(&doc["shape"])[..] else {
        panic!("shape")
    };
    let x = Tensor::from_slice(&floats(&doc["x"])).view([n, d]);
    let y = Tensor::from_slice(&ints(&doc["y"]));
    let (batches, lrs) = (ints(&doc["batches"]), floats(&doc["lr"]));
    type Make = fn(Vec<Group>) -> Box<dyn Optimizer>;
    let families: [(&str, Make); 5] = [
        ("sgd", |g| Box::new(SgdTorch::new(g, 0.9, 5e-4, false))),
        ("nesterov", |g| Box::new(SgdTorch::new(g, 0.9, 5e-4, true))),
        ("adamw", |g| {
            Box::new(AdamW::new(g, (0.9, 0.999), 1e-8, 0.01))
        }),
        ("lars", |g| Box::new(Lars::new(g, 0.9, 5e-4, 0.001, false))),
        ("lamb", |g| Box::new(Lamb::new(g, (0.9, 0.999), 1e-6, 0.01))),
    ];
    for (name, make) in families {
        let w = Tensor::from_slice(&floats(&doc["weight0"]))
            .view([k, d])
            .set_requires_grad(true);
        let b = Tensor::from_slice(&floats(&doc["bias0"])).set_requires_grad(true);
        let mut opt = make(vec![Group::new(vec![w.shallow_clone(), b.shallow_clone()])]);
        let mut at = 0;
        let steps = doc["steps"][name].as_array().unwrap();
        assert_eq!(steps.len(), batches.len(), "{name}");
        for (i, ((&size, &lr), want)) in batches.iter().zip(&lrs).zip(steps).enumerate() {
            let (xb, yb) = (x.narrow(0, at, size), y.narrow(0, at, size));
            at += size;
            // As `Trainee::forward_backward`: the engine's mean loss (in
            // float64 here) times the batch.
            let logits = xb.matmul(&w.tr()) + &b;
            (label_smoothed_ce(&logits, &yb, 0.0) * size as f64).backward();
            opt.set_loss_scale(size as f64);
            opt.step(lr);
            opt.zero_grad(true);
            for (t, key) in [(&w, "weight"), (&b, "bias")] {
                let got = Vec::<f64>::try_from(t.detach().reshape([-1])).unwrap();
                let want = floats(&want[key]);
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0, f64::max);
                assert!(
                    worst < 1e-12,
                    "{name}: the {key} after step {} (batch {size}) is {worst:e} from the reference",
                    i + 1
                );
            }
        }
    }
}
