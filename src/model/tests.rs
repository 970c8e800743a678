use super::bn::GhostBn;
use super::*;
use tch::{Device, Kind, Tensor, nn};

fn close(a: &Tensor, b: &Tensor, tol: f64) -> bool {
    let d = f64::try_from((a - b).abs().max()).unwrap();
    d <= tol
}

fn tiny(arch: Arch) -> NetConfig {
    NetConfig::default_for(arch).scaled(1.0 / 16.0)
}

#[test]
fn each_arch_forward_shape_small_width() {
    let _defaults = crate::native::default_generators();
    tch::manual_seed(0);
    for &(_, arch) in Arch::NAMED {
        let vs = nn::VarStore::new(Device::Cpu);
        let cfg = tiny(arch);
        let net = Net::new(&vs.root(), &cfg);
        let x = Tensor::randn([4, 3, 32, 32], (Kind::Float, Device::Cpu));
        for train in [true, false] {
            let y = net.forward_t(&x, train);
            assert_eq!(y.size(), vec![4, 10], "{arch:?} train={train}");
            assert_eq!(y.kind(), Kind::Float);
        }
    }
}

#[test]
fn canonical_widths() {
    assert_eq!(
        NetConfig::default_for(Arch::Resnet9).widths,
        vec![64, 128, 256, 512]
    );
    assert_eq!(
        NetConfig::default_for(Arch::Airbench).widths,
        vec![64, 256, 256]
    );
    assert_eq!(
        NetConfig::default_for(Arch::PageResnet18).widths,
        vec![64, 128, 256, 256]
    );
    assert_eq!(
        NetConfig::default_for(Arch::Resnet9).scaled(0.5).widths,
        vec![32, 64, 128, 256]
    );
}

#[test]
fn resnet9_full_width_weight_count() {
    let _defaults = crate::native::default_generators();
    // TRICKS 1.3: about 6.57 M conv/linear weights.
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &NetConfig::default_for(Arch::Resnet9));
    let n: i64 = net
        .param_groups()
        .weights
        .iter()
        .map(|t| t.numel() as i64)
        .sum();
    assert!((6_550_000..6_600_000).contains(&n), "{n}");
    // and airbench ≈ 1.97 M weights.
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &NetConfig::default_for(Arch::Airbench));
    let n: i64 = net
        .param_groups()
        .weights
        .iter()
        .map(|t| t.numel() as i64)
        .sum();
    assert!((1_950_000..2_000_000).contains(&n), "{n}");
}

#[test]
pub(crate) fn celu_alpha_formula() {
    let x = Tensor::from_slice(&[-2.0f32, -0.1, 0.0, 0.5, 3.0]);
    let alpha = 0.3;
    let y = Activation::Celu { alpha }.apply(&x);
    let want: Vec<f64> = [-2.0f64, -0.1, 0.0, 0.5, 3.0]
        .iter()
        .map(|&v| {
            if v > 0.0 {
                v
            } else {
                alpha * ((v / alpha).exp() - 1.0)
            }
        })
        .collect();
    let want = Tensor::from_slice(&want).to_kind(Kind::Float);
    assert!(close(&y, &want, 1e-6));
    // α matters: α = 1 gives a different value at −2.
    let y1 = Activation::Celu { alpha: 1.0 }.apply(&x);
    assert!(!close(&y1, &want, 1e-3));
}

#[test]
pub(crate) fn ghost_bn_statistics_per_split_and_eval_average() {
    let _defaults = crate::native::default_generators();
    let vs = nn::VarStore::new(Device::Cpu);
    let cfg = BnConfig {
        ghost_splits: 2,
        momentum: 1.0,
        eps: 1e-5,
        ..BnConfig::default()
    };
    let bn = GhostBn::new(&vs.root(), 3, &cfg);
    // Split j holds samples j, j+2, ...: give the splits different means.
    let x = Tensor::randn([8, 3, 4, 4], (Kind::Float, Device::Cpu));
    let offs = Tensor::from_slice(&[0.0f32, 5.0, 0.0, 5.0, 0.0, 5.0, 0.0, 5.0]).view([8, 1, 1, 1]);
    let x = x + offs;
    let y = bn.forward_t(&x, true);
    // Each split is normalised on its own statistics.
    for j in 0..2 {
        let part = y.index_select(0, &Tensor::from_slice(&[j, j + 2, j + 4, j + 6]));
        let m = part.mean_dim(&[0i64, 2, 3][..], false, None);
        assert!(
            close(&m, &Tensor::zeros([3], (Kind::Float, Device::Cpu)), 1e-4),
            "split {j}"
        );
    }
    // Momentum 1: running stats are exactly the per-split batch stats.
    let rm = bn.running_mean.view([2, 3]);
    for j in 0..2i64 {
        let part = x.index_select(0, &Tensor::from_slice(&[j, j + 2, j + 4, j + 6]));
        let m = part.mean_dim(&[0i64, 2, 3][..], false, None);
        assert!(close(&rm.get(j), &m, 1e-4));
        let v = part
            .transpose(0, 1)
            .reshape([3, -1])
            .var_dim(&[1i64][..], true, false);
        assert!(close(&bn.running_var.view([2, 3]).get(j), &v, 1e-3));
    }
    // Eval uses the split-averaged statistics.
    let avg_m = rm.mean_dim(0, false, None);
    let avg_v = bn.running_var.view([2, 3]).mean_dim(0, false, None);
    let ye = bn.forward_t(&x, false);
    let want = (&x - avg_m.view([1, 3, 1, 1])) / (avg_v.view([1, 3, 1, 1]) + 1e-5).sqrt();
    assert!(close(&ye, &want, 1e-4));
}

#[test]
pub(crate) fn frozen_bn_scale_stays_one_and_out_of_groups() {
    let _defaults = crate::native::default_generators();
    // On a GPU machine this runs CUDA's BatchNorm backward, which failed when
    // the frozen scale went in as no weight at all (the CPU kernels accept it).
    let device = Device::cuda_if_available();
    let vs = nn::VarStore::new(device);
    let mut cfg = tiny(Arch::Resnet9);
    cfg.bn.frozen_scale = true;
    let net = Net::new(&vs.root(), &cfg);
    let groups = net.param_groups();
    assert!(groups.bn_weights.is_empty());
    let x = Tensor::randn([4, 3, 32, 32], (Kind::Float, device));
    net.forward_t(&x, true).sum(None).backward();
    for (w, b) in net.bn_params() {
        assert!(!w.requires_grad());
        assert!(close(&w, &w.ones_like(), 0.0));
        assert!(b.requires_grad());
        assert_eq!(
            b.grad().size(),
            b.size(),
            "the BN bias gets a whole gradient"
        );
    }
    // Not frozen: the BN weights are trainable and grouped.
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &tiny(Arch::Resnet9));
    assert_eq!(net.param_groups().bn_weights.len(), net.bn_params().len());
}

fn ptrs(ts: &[Tensor]) -> Vec<usize> {
    let mut v: Vec<usize> = ts.iter().map(|t| t.data_ptr() as usize).collect();
    v.sort();
    v
}

#[test]
fn param_groups_partition_trainable_parameters() {
    let _defaults = crate::native::default_generators();
    for &(_, arch) in Arch::NAMED {
        for (frozen, conv_bias) in [(false, false), (true, false), (false, true)] {
            let vs = nn::VarStore::new(Device::Cpu);
            let mut cfg = tiny(arch);
            cfg.bn.frozen_scale = frozen;
            cfg.conv_bias = conv_bias;
            let net = Net::new(&vs.root(), &cfg);
            let g = net.param_groups();
            let all = ptrs(&g.all_trainable());
            let mut dedup = all.clone();
            dedup.dedup();
            assert_eq!(all, dedup, "{arch:?}: a tensor is in two groups");
            assert_eq!(
                all,
                ptrs(&vs.trainable_variables()),
                "{arch:?} frozen={frozen}"
            );
            let w = ptrs(&g.weights);
            for t in g.conv_filters.iter().chain(&g.head) {
                assert!(w.contains(&(t.data_ptr() as usize)));
            }
            assert!(g.conv_filters.iter().all(|t| t.dim() == 4));
            let rest = g.non_filter_weights();
            assert_eq!(rest.len() + g.conv_filters.len(), g.weights.len());
            assert_eq!(
                ptrs(&rest),
                ptrs(&g.head),
                "{arch:?}: only the head is off Muon"
            );
            if arch == Arch::Airbench {
                assert_eq!(g.whiten_bias.len(), 1);
            }
            let n_bias = if conv_bias { g.conv_filters.len() } else { 0 };
            assert_eq!(g.conv_biases.len(), n_bias, "{arch:?}: a bias per conv");
        }
    }
}

#[test]
pub(crate) fn conv_bias_before_bn_changes_nothing_in_training_mode() {
    let _defaults = crate::native::default_generators();
    // The claim behind `no_bias_before_bn`: BN subtracts the batch mean, so a
    // bias on the conv that feeds it cannot change the output (or get a gradient).
    tch::manual_seed(3);
    for arch in [Arch::Resnet9, Arch::Airbench] {
        let vs = nn::VarStore::new(Device::Cpu);
        let mut cfg = tiny(arch);
        cfg.conv_bias = true;
        let net = Net::new(&vs.root(), &cfg);
        let x = Tensor::randn([8, 3, 32, 32], (Kind::Float, Device::Cpu));
        // Before its data pass the whitening conv is zero: every BN would see a constant.
        net.init_whitening(&x).unwrap();
        let g = net.param_groups();
        assert!(!g.conv_biases.is_empty());
        tch::no_grad(|| {
            for b in &g.conv_biases {
                let _ = b.shallow_clone().zero_();
            }
        });
        let y0 = net.forward_t(&x, true);
        tch::no_grad(|| {
            for b in &g.conv_biases {
                let _ = b.shallow_clone().uniform_(-3.0, 3.0);
            }
        });
        let y1 = net.forward_t(&x, true);
        let d = f64::try_from((&y0 - &y1).abs().max()).unwrap();
        let m = f64::try_from(y0.abs().max()).unwrap();
        assert!(
            d <= 1e-3 * m.max(1.0),
            "{arch:?}: the bias leaked through BN ({d} of {m})"
        );
        y1.sum(Kind::Float).backward();
        for b in &g.conv_biases {
            let gmax = f64::try_from(b.grad().abs().max()).unwrap();
            assert!(gmax < 1e-4, "{arch:?}: conv bias gradient {gmax}");
        }
    }
}

#[test]
pub(crate) fn whitening_output_covariance_is_identity() {
    let _defaults = crate::native::default_generators();
    tch::manual_seed(1);
    // Correlated channels so that whitening has work to do.
    let base = Tensor::randn([64, 3, 12, 12], (Kind::Float, Device::Cpu));
    let mix = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 0.8, 0.6, 0.0, 0.5, 0.5, 0.7]).view([3, 3]);
    let imgs = base
        .permute([0, 2, 3, 1])
        .matmul(&mix.tr())
        .permute([0, 3, 1, 2])
        .contiguous();
    for whitening in [
        Whitening::Page {
            eps: 1e-8,
            images: 64,
        },
        airbench_whitening(1e-8, Basis::Eigh),
        airbench_whitening(1e-8, Basis::EighAscending),
        airbench_whitening(1e-8, Basis::Svd),
        // One chunk: hlb's average over chunks is then its one covariance.
        airbench_whitening(1e-8, Basis::HlbChunks { chunk: 64 }),
    ] {
        let centred = matches!(
            whitening,
            Whitening::Airbench {
                basis: Basis::HlbChunks { .. },
                ..
            }
        );
        // Off-centre images for hlb's style: only a centred covariance whitens them.
        let imgs = if centred {
            &imgs + 0.7
        } else {
            imgs.shallow_clone()
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let mut cfg = tiny(Arch::Airbench);
        cfg.whitening = whitening.clone();
        let net = Net::new(&vs.root(), &cfg);
        net.init_whitening(&imgs).unwrap();
        let w = net.stem.whiten.as_ref().unwrap();
        let mut out = w.forward(&imgs);
        if matches!(whitening, Whitening::Page { .. }) {
            // Drop the zero-padded border: the covariance was fitted on valid patches.
            let s = out.size();
            out = out.narrow(2, 1, s[2] - 2).narrow(3, 1, s[3] - 2);
        }
        let c = out.size()[1];
        let mut flat = out.transpose(0, 1).reshape([c, -1]);
        if centred {
            flat = &flat - flat.mean_dim(1, true, Kind::Float);
        }
        let n = flat.size()[1] as f64;
        let denom = if matches!(whitening, Whitening::Page { .. }) || centred {
            n - 1.0
        } else {
            n
        };
        let cov = flat.matmul(&flat.tr()) / denom;
        let eye = Tensor::eye(c, (Kind::Float, Device::Cpu));
        assert!(close(&cov, &eye, 2e-3), "{whitening:?}: {cov}");
    }
}

#[test]
pub(crate) fn svd_whitening_gives_the_eigen_filters_from_the_first_images() {
    let _defaults = crate::native::default_generators();
    tch::manual_seed(3);
    let imgs = Tensor::randn([48, 3, 10, 10], (Kind::Float, Device::Cpu))
        * Tensor::from_slice(&[1.0f32, 0.5, 2.0]).view([1, 3, 1, 1]);
    let filters = |svd: bool, x: &Tensor| {
        let vs = nn::VarStore::new(Device::Cpu);
        let mut cfg = tiny(Arch::Airbench);
        cfg.whitening = airbench_whitening(5e-4, if svd { Basis::Svd } else { Basis::Eigh });
        let net = Net::new(&vs.root(), &cfg);
        net.init_whitening(x).unwrap();
        net.stem
            .whiten
            .as_ref()
            .unwrap()
            .conv
            .weight
            .reshape([12, -1])
    };
    // Same basis as the eigendecomposition, filter by filter up to its sign.
    let (e, s) = (filters(false, &imgs), filters(true, &imgs));
    let dots = (&e * &s).sum_dim_intlist(1, false, Kind::Float).abs();
    let norms = e.norm_scalaropt_dim(2, [1], false) * s.norm_scalaropt_dim(2, [1], false);
    assert!(close(
        &(dots / norms),
        &Tensor::ones([12], (Kind::Float, Device::Cpu)),
        1e-3
    ));
    // Eigh in airbench94_muon's ascending order: the same filters, reversed.
    let vs = nn::VarStore::new(Device::Cpu);
    let mut cfg = tiny(Arch::Airbench);
    cfg.whitening = airbench_whitening(5e-4, Basis::EighAscending);
    let net = Net::new(&vs.root(), &cfg);
    net.init_whitening(&imgs).unwrap();
    let asc = net
        .stem
        .whiten
        .as_ref()
        .unwrap()
        .conv
        .weight
        .reshape([12, -1]);
    assert!(close(&asc.flip([0]).abs(), &e.abs(), 1e-5));
}

/// A 2x2 whitening of airbench's kind with `basis`, 12 filters, no bias.
fn airbench_whitening(eps: f64, basis: Basis) -> Whitening {
    Whitening::Airbench {
        eps,
        images: 64,
        negate: false,
        bias: false,
        bias_uniform: false,
        basis,
    }
}

#[test]
fn whitening_rejects_bad_images() {
    let _defaults = crate::native::default_generators();
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &tiny(Arch::Airbench));
    let bad = Tensor::zeros([2, 1, 8, 8], (Kind::Float, Device::Cpu));
    assert!(net.init_whitening(&bad).is_err());
}

#[test]
pub(crate) fn dirac_init_is_identity_on_first_filters() {
    let _defaults = crate::native::default_generators();
    let vs = nn::VarStore::new(Device::Cpu);
    let cfg = tiny(Arch::Airbench);
    let net = Net::new(&vs.root(), &cfg);
    // group1 conv a: C_in = 24 whitening channels → 4 outputs (64/16).
    let w = &net.param_groups().conv_filters[0];
    assert_eq!(w.size(), vec![4, 24, 3, 3]);
    let x = Tensor::randn([2, 24, 5, 5], (Kind::Float, Device::Cpu));
    let y = x.conv2d(w, None::<&Tensor>, [1, 1], [1, 1], [1, 1], 1);
    assert!(close(&y, &x.narrow(1, 0, 4), 1e-6));

    // hlb: each group's second conv is a pure identity; its first is the
    // random init plus the identity, moved back to the random init's mean/std.
    let filters = Net::new(&nn::VarStore::new(Device::Cpu).root(), &tiny(Arch::Hlb))
        .param_groups()
        .conv_filters;
    assert_eq!(filters.len(), 6);
    for b in filters.iter().skip(1).step_by(2) {
        let c = b.size()[1];
        let x = Tensor::randn([2, c, 5, 5], (Kind::Float, Device::Cpu));
        let y = x.conv2d(b, None::<&Tensor>, [1, 1], [1, 1], [1, 1], 1);
        assert!(close(&y, &x, 1e-6), "second conv is not the identity");
    }
    tch::manual_seed(4);
    let vs = nn::VarStore::new(Device::Cpu);
    let conv = layers::Conv::new(&vs.root(), 8, 16, 3, 1, 1, false, true);
    let w0 = conv.weight.detach().copy();
    conv.dirac_mixed_init();
    let mut id = Tensor::zeros([16, 8, 3, 3], (Kind::Float, Device::Cpu));
    for i in 0..8 {
        let _ = id.get(i).get(i).get(1).get(1).fill_(1.0);
    }
    id = &w0 + id;
    let want = (&id - id.mean(None)) / id.std(true) * w0.std(true) + w0.mean(None);
    assert!(close(&conv.weight, &want, 1e-6));
    assert!(!close(&conv.weight, &w0, 1e-3));
}

#[test]
fn whiten_bias_toggle_and_cast() {
    let _defaults = crate::native::default_generators();
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::new(&vs.root(), &tiny(Arch::Airbench));
    net.set_whiten_bias_trainable(false);
    assert!(!net.param_groups().whiten_bias[0].requires_grad());
    net.set_whiten_bias_trainable(true);
    assert!(net.param_groups().whiten_bias[0].requires_grad());
    net.cast_weights(Kind::BFloat16);
    assert_eq!(net.param_groups().weights[0].kind(), Kind::BFloat16);
    assert_eq!(net.bn_params()[0].1.kind(), Kind::Float);
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    assert_eq!(net.forward_t(&x, true).size(), vec![2, 10]);
}

fn build(cfg: &NetConfig, seed: i64) -> (nn::VarStore, Net) {
    // Under the inits' lock: tests run in parallel and share libtorch's generator.
    let vs = nn::VarStore::new(Device::Cpu);
    let net =
        crate::native::with_seeded_inits(Device::Cpu, seed as u64, || Net::new(&vs.root(), cfg));
    (vs, net)
}

#[test]
pub(crate) fn pool_before_act_is_exact_for_relu_but_pool_before_bn_is_not() {
    let _defaults = crate::native::default_generators();
    let base = tiny(Arch::Backbone);
    let x = Tensor::randn([4, 3, 16, 16], (Kind::Float, Device::Cpu));
    let (v0, n0) = build(&base, 7);
    let (mut v1, n1) = build(
        &NetConfig {
            pool_before_act: true,
            ..base.clone()
        },
        7,
    );
    let (mut v2, n2) = build(
        &NetConfig {
            pool_before_bn: true,
            ..base.clone()
        },
        7,
    );
    // The same weights in all three: tch's RNG is global and other tests run
    // in parallel threads, so a shared seed alone does not guarantee them.
    v1.copy(&v0).unwrap();
    v2.copy(&v0).unwrap();
    let (y0, y1, y2) = (
        n0.forward_t(&x, true),
        n1.forward_t(&x, true),
        n2.forward_t(&x, true),
    );
    assert!(close(&y0, &y1, 1e-5));
    assert!(!close(&y0, &y2, 1e-3));
}

#[test]
fn try_new_rejects_bad_configs() {
    let _defaults = crate::native::default_generators();
    let vs = nn::VarStore::new(Device::Cpu);
    let mut cfg = tiny(Arch::Resnet9);
    cfg.widths = vec![8];
    assert!(Net::try_new(&vs.root(), &cfg).is_err());
    let mut cfg = tiny(Arch::Resnet9);
    cfg.act = Activation::Celu { alpha: 0.0 };
    assert!(Net::try_new(&vs.root(), &cfg).is_err());
    assert!(
        BnConfig {
            ghost_splits: 16,
            ..BnConfig::default()
        }
        .check_batch(500)
        .is_err()
    );
    assert!(
        BnConfig {
            ghost_splits: 16,
            ..BnConfig::default()
        }
        .check_batch(512)
        .is_ok()
    );
}

#[test]
fn ghost_bn_net_trains_and_evaluates() {
    let _defaults = crate::native::default_generators();
    // Page's final net at 1/16 width: whitening, ghost BN, frozen scale, CELU.
    let mut cfg = tiny(Arch::Resnet9);
    cfg.bn = BnConfig {
        ghost_splits: 4,
        frozen_scale: true,
        ..BnConfig::default()
    };
    cfg.act = Activation::Celu { alpha: 0.3 };
    cfg.pool_before_bn = true;
    cfg.logit_scale = 1.0 / 16.0;
    cfg.whitening = Whitening::Page {
        eps: 1e-2,
        images: 16,
    };
    let (_vs, net) = build(&cfg, 11);
    let x = Tensor::randn([16, 3, 16, 16], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 3]).repeat([4]);
    net.init_whitening(&x).unwrap();
    let g = net.param_groups();
    let mut opt = crate::optim::SgdPage::new(
        vec![
            crate::optim::Group::new(g.weights),
            crate::optim::Group::with_mults(g.bn_biases, 64.0, 1.0 / 64.0),
        ],
        0.9,
        5e-4,
    );
    use crate::optim::Optimizer;
    let loss = |net: &Net| crate::optim::label_smoothed_ce(&net.forward_t(&x, true), &y, 0.2);
    let first = f64::try_from(loss(&net)).unwrap();
    for _ in 0..15 {
        opt.zero_grad(true);
        loss(&net).backward();
        opt.step(0.2);
    }
    let last = f64::try_from(loss(&net)).unwrap();
    assert!(last < first - 0.05, "loss {first} → {last}");
    let eval = net.forward_t(&x, false);
    assert_eq!(eval.size(), vec![16, 10]);
    assert!(bool::try_from(eval.isfinite().all()).unwrap());
}

#[test]
fn lookahead_over_var_store_includes_bn_running_stats() {
    let _defaults = crate::native::default_generators();
    let (vs, net) = build(&tiny(Arch::Airbench), 5);
    let state = crate::optim::float_state(&vs);
    let names = vs.variables();
    assert_eq!(state.len(), names.len());
    assert!(names.keys().any(|k| k.ends_with("running_var")));
    let mut ema = crate::optim::Ema::new(&state);
    let x = Tensor::randn([8, 3, 32, 32], (Kind::Float, Device::Cpu));
    let _ = net.forward_t(&x, true); // moves the running stats
    let rv = names
        .iter()
        .find(|(k, _)| k.ends_with("running_var"))
        .unwrap()
        .1;
    let moved = rv.copy();
    ema.update(&state, 1.0); // decay 1: the average stays at the start
    ema.copy_into(&state);
    assert!(close(rv, &rv.ones_like(), 0.0));
    assert!(!close(&moved, &rv.ones_like(), 1e-3));
}

/// The same network twice from the same seed, differing only in `change`.
fn pair(
    base: &NetConfig,
    change: impl Fn(&mut NetConfig),
) -> ((nn::VarStore, Net), (nn::VarStore, Net)) {
    let mut other = base.clone();
    change(&mut other);
    (build(base, 5), build(&other, 5))
}

#[test]
pub(crate) fn logit_scale_multiplies_the_logits() {
    let _defaults = crate::native::default_generators();
    let x = Tensor::randn([3, 3, 32, 32], (Kind::Float, Device::Cpu));
    let base = NetConfig {
        logit_scale: 1.0,
        ..tiny(Arch::Resnet9)
    };
    let ((_a, one), (_b, eighth)) = pair(&base, |c| c.logit_scale = 0.125);
    let (y1, y8) = (one.forward_t(&x, false), eighth.forward_t(&x, false));
    assert!(close(&(y1 * 0.125), &y8, 1e-6));
}

#[test]
pub(crate) fn bn_weight_init_one_or_pytorch_0_4_uniform() {
    for one in [true, false] {
        let mut cfg = tiny(Arch::Resnet9);
        cfg.bn.weight_init_one = one;
        let (_vs, net) = build(&cfg, 2);
        let w = Tensor::cat(
            &net.bn_params()
                .iter()
                .map(|p| p.0.shallow_clone())
                .collect::<Vec<_>>(),
            0,
        );
        let (lo, hi) = (
            f64::try_from(w.min()).unwrap(),
            f64::try_from(w.max()).unwrap(),
        );
        if one {
            assert_eq!((lo, hi), (1.0, 1.0));
        } else {
            assert!(
                lo >= 0.0 && hi <= 1.0 && hi - lo > 0.5,
                "U[0,1]: {lo}..{hi}"
            );
        }
    }
}

#[test]
pub(crate) fn gelu_is_the_exact_erf_form() {
    let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 1.0, 3.0]);
    let by_hand: Vec<f32> = [-2.0f64, -0.5, 0.0, 1.0, 3.0]
        .iter()
        .map(|&v| (v * 0.5 * (1.0 + libm_erf(v / 2f64.sqrt()))) as f32)
        .collect();
    assert!(close(
        &Activation::Gelu.apply(&x),
        &Tensor::from_slice(&by_hand),
        1e-6
    ));
    assert!(close(&Activation::Relu.apply(&x), &x.clamp_min(0.0), 0.0));
}

#[test]
pub(crate) fn silu_is_x_times_its_sigmoid() {
    let v = [-3.0f64, -0.5, 0.0, 1.0, 4.0];
    let by_hand: Vec<f32> = v.iter().map(|&v| (v / (1.0 + (-v).exp())) as f32).collect();
    let x = Tensor::from_slice(&v.map(|v| v as f32));
    assert!(close(
        &Activation::Silu.apply(&x),
        &Tensor::from_slice(&by_hand),
        1e-6
    ));
    assert!(!close(
        &Activation::Silu.apply(&x),
        &Activation::Gelu.apply(&x),
        1e-3
    ));
}

/// erf by its series (enough terms for |x| ≤ 3), to keep the expected values independent of libtorch.
fn libm_erf(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..80 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
pub(crate) fn bn_stats_momentum_moves_the_running_mean() {
    let _defaults = crate::native::default_generators();
    // One training pass from running_mean = 0: the new value is momentum x the batch mean.
    let x = Tensor::randn([8, 3, 32, 32], (Kind::Float, Device::Cpu)) + 2.0;
    let first_mean = |vs: &nn::VarStore| {
        vs.variables()
            .into_iter()
            .filter(|(k, _)| k.ends_with("running_mean"))
            .min_by_key(|(k, _)| k.clone())
            .unwrap()
            .1
    };
    for m in [0.1, 0.4] {
        let mut cfg = tiny(Arch::Resnet9);
        cfg.bn.momentum = m;
        // The same batch through momentum 1 gives the batch mean itself. The
        // second net takes the first's weights: other tests draw from
        // libtorch's shared generator while these build, so two seeded
        // builds need not agree.
        let mut full = cfg.clone();
        full.bn.momentum = 1.0;
        let (vs, net) = build(&cfg, 3);
        let (mut vs1, net1) = build(&full, 3);
        vs1.copy(&vs).unwrap();
        let _ = net.forward_t(&x, true);
        let _ = net1.forward_t(&x, true);
        let (first, batch) = (first_mean(&vs), first_mean(&vs1));
        let mean = f64::try_from(first.abs().mean(Kind::Float)).unwrap();
        assert!(mean > 0.0, "{m}");
        let expected = batch * m;
        assert!(
            close(&first, &expected, 1e-5),
            "momentum {m}: {first:?} vs {expected:?}"
        );
    }
}

#[test]
pub(crate) fn residual_adds_the_layer_1_and_3_branches() {
    let base = NetConfig {
        residual: false,
        ..tiny(Arch::Backbone)
    };
    let ((a, _), (b, _)) = pair(&base, |c| c.residual = true);
    let count = |vs: &nn::VarStore| {
        vs.trainable_variables()
            .iter()
            .map(|t| t.numel())
            .sum::<usize>()
    };
    // Two conv_bn per branch, on layer 1 (w1 -> w1) and layer 3 (w3 -> w3).
    let w = &base.widths;
    let extra: usize = [w[1], w[3]]
        .iter()
        .map(|&c| 2 * (c * c * 9 + 2 * c) as usize)
        .sum();
    assert_eq!(count(&b) - count(&a), extra);
}

#[test]
pub(crate) fn prep_bn_relu_adds_a_batch_norm_after_the_prep_conv() {
    let base = NetConfig {
        prep_bn_relu: false,
        ..tiny(Arch::PageResnet18)
    };
    let ((_a, off), (_b, on)) = pair(&base, |c| c.prep_bn_relu = true);
    assert_eq!(on.bn_params().len(), off.bn_params().len() + 1);
}

#[test]
pub(crate) fn whitening_negate_doubles_the_filters_with_their_negations() {
    let _defaults = crate::native::default_generators();
    let cfg = |negate| NetConfig {
        whitening: Whitening::Airbench {
            eps: 5e-4,
            images: 16,
            negate,
            bias: false,
            bias_uniform: false,
            basis: Basis::Eigh,
        },
        ..tiny(Arch::Airbench)
    };
    let imgs = Tensor::randn([16, 3, 32, 32], (Kind::Float, Device::Cpu));
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    let mut outs = Vec::new();
    for negate in [false, true] {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = super::whitening::Whiten::new(&vs.root(), &cfg(negate).whitening).unwrap();
        w.init(&imgs).unwrap();
        outs.push(tch::no_grad(|| w.forward(&x)));
    }
    assert_eq!(outs[0].size()[1], 12);
    assert_eq!(outs[1].size()[1], 24);
    assert!(close(&outs[1].narrow(1, 0, 12), &outs[0], 1e-5));
    assert!(close(&outs[1].narrow(1, 12, 12), &(-&outs[0]), 1e-5));
}

#[test]
fn part4_backbones_are_pages_rungs() {
    let _defaults = crate::native::default_generators();
    // (arch, BN layers, conv kernel sizes after the stem, head input, head bias)
    let want: [(Arch, usize, &[i64], i64, bool); 6] = [
        // ResNet-18's shortest path: 2 BN-ReLUs of layer 1, then per layer
        // BN-ReLU → 1×1 s2 shortcut → the next block's BN-ReLU.
        (Arch::P4aPath, 8, &[1, 1, 1], 512, true),
        (Arch::P4bConv1x1, 4, &[1, 1, 1], 512, true),
        (Arch::P4cConv3x3, 4, &[3, 3, 3], 512, true),
        (Arch::P4dMaxpool, 4, &[3, 3, 3], 512, true),
        (Arch::P4eMaxHead, 4, &[3, 3, 3], 512, true),
        (Arch::Backbone, 4, &[3, 3, 3], 512, false),
    ];
    for (arch, bns, kernels, feat, bias) in want {
        let vs = nn::VarStore::new(Device::Cpu);
        let cfg = NetConfig::default_for(arch);
        let net = Net::new(&vs.root(), &cfg);
        let g = net.param_groups();
        assert_eq!(g.bn_biases.len(), bns, "{arch:?}: BN layers");
        let k: Vec<i64> = g.conv_filters[1..].iter().map(|w| w.size()[3]).collect();
        assert_eq!(k, kernels, "{arch:?}: downsampling convs");
        assert_eq!(
            g.conv_filters[0].size(),
            [64, 3, 3, 3],
            "{arch:?}: prep conv"
        );
        assert_eq!(g.head[0].size(), [10, feat], "{arch:?}: head");
        assert_eq!(g.head.len(), 1 + usize::from(bias), "{arch:?}: head bias");
        // 32 → 4 through three halvings, whatever does the halving.
        let y = net.forward_t(
            &Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu)),
            true,
        );
        assert_eq!(y.size(), [2, 10]);
    }
    assert_eq!(
        NetConfig::default_for(Arch::P4dMaxpool).widths,
        [64, 128, 256, 256]
    );
    assert_eq!(
        NetConfig::default_for(Arch::P4eMaxHead).widths,
        [64, 128, 256, 512]
    );
    assert!(!NetConfig::default_for(Arch::P4aPath).prep_bn_relu);
    assert!(NetConfig::default_for(Arch::P4bConv1x1).prep_bn_relu);
}

/// One BN pass in training mode with a fixed upstream gradient: the output,
/// the input's gradient, the scale's and bias's gradients, the running mean.
fn bn_pass(cfg: &BnConfig, x: &Tensor, dy: &Tensor) -> [Tensor; 5] {
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = GhostBn::new(&vs.root(), x.size()[1], cfg);
    tch::no_grad(|| {
        bn.weight
            .shallow_clone()
            .copy_(&Tensor::from_slice(&[0.5f32, 2.0, 1.5]));
    });
    let x = x.detach().set_requires_grad(true);
    let y = bn.forward_t(&x, true);
    (&y * dy).sum(Kind::Float).backward();
    [
        y.detach(),
        x.grad(),
        bn.weight.grad(),
        bn.bias.grad(),
        bn.running_mean.copy(),
    ]
}

/// SyncBN (the `sync_bn` trick): two ranks, each with every other image of
/// a batch of 8 (two Gloo ranks on threads of this process), normalise and
/// differentiate exactly as plain BN over all 8 in one process: outputs and
/// input gradients agree image by image, the scale and bias gradients sum to
/// the one-process ones (data-parallel training then averages them), and the
/// running statistics are the whole batch's on both ranks.
#[test]
pub(crate) fn sync_bn_over_two_ranks_is_bn_over_their_whole_batch() {
    let _defaults = crate::native::default_generators();
    use crate::dist::env::Launch;
    use crate::dist::group::Collective;
    let x = Tensor::randn([8, 3, 4, 4], (Kind::Float, Device::Cpu)) * 3.0 + 1.0;
    let dy = Tensor::randn([8, 3, 4, 4], (Kind::Float, Device::Cpu));
    let whole = bn_pass(&BnConfig::default(), &x, &dy);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let (x, dy) = (
                x.slice(0, rank, 8, 2).copy(),
                dy.slice(0, rank, 8, 2).copy(),
            );
            std::thread::spawn(move || {
                let launch = Launch::on_this_machine(rank as usize, 2, port);
                let c = Collective::join(&launch, false, &[], std::time::Duration::from_secs(20))
                    .unwrap();
                let _on = c.install();
                let sync = BnConfig {
                    sync: true,
                    ..BnConfig::default()
                };
                bn_pass(&sync, &x, &dy)
            })
        })
        .collect();
    let ranks: Vec<[Tensor; 5]> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    for (r, got) in ranks.iter().enumerate() {
        let mine = |t: &Tensor| t.slice(0, r as i64, 8, 2);
        assert!(close(&got[0], &mine(&whole[0]), 1e-5), "rank {r}: output");
        assert!(
            close(&got[1], &mine(&whole[1]), 1e-5),
            "rank {r}: input gradient"
        );
        assert!(close(&got[4], &whole[4], 1e-5), "rank {r}: running mean");
    }
    for (i, what) in [(2, "scale"), (3, "bias")] {
        let summed = &ranks[0][i] + &ranks[1][i];
        assert!(close(&summed, &whole[i], 1e-4), "{what} gradient");
    }
    // Without a group installed (one process) it is plain BN.
    let alone = bn_pass(
        &BnConfig {
            sync: true,
            ..BnConfig::default()
        },
        &x,
        &dy,
    );
    assert!(close(&alone[0], &whole[0], 0.0) && close(&alone[1], &whole[1], 0.0));
}

#[test]
fn torchvision_resnets_have_torchvisions_parameter_counts_and_shapes() {
    let _defaults = crate::native::default_generators();
    // torchvision.models.resnet18() / resnet50(): sum(p.numel() for p in
    // model.parameters()) = 11,689,512 and 25,557,032 with 1000 classes.
    for (arch, want) in [
        (Arch::TvResnet18, 11_689_512),
        (Arch::TvResnet50, 25_557_032),
    ] {
        let cfg = NetConfig {
            num_classes: 1000,
            ..NetConfig::default_for(arch)
        };
        let (vs, net) = build(&cfg, 0);
        let n: i64 = vs
            .trainable_variables()
            .iter()
            .map(Tensor::numel)
            .map(|n| n as i64)
            .sum();
        assert_eq!(n, want, "{arch:?}");
        let y = net.forward_t(
            &Tensor::randn([2, 3, 64, 64], (Kind::Float, Device::Cpu)),
            false,
        );
        assert_eq!(y.size(), [2, 1000]);
        // The stem's 7x7 conv and torchvision's fan-out init: std √(2/(64·49)).
        let w = net.param_groups().conv_filters[0].shallow_clone();
        assert_eq!(w.size(), [64, 3, 7, 7]);
        let std = f64::try_from(w.std(true)).unwrap();
        assert!(
            (std / (2.0f64 / (64.0 * 49.0)).sqrt() - 1.0).abs() < 0.1,
            "{std}"
        );
    }
    // Bad combinations are refused with the fix.
    let mut bad = NetConfig::default_for(Arch::TvResnet18);
    bad.widths.pop();
    assert!(Net::try_new(&nn::VarStore::new(Device::Cpu).root(), &bad).is_err());
    let mut bad = NetConfig::default_for(Arch::Resnet9);
    bad.zero_init_residual = true;
    let e = Net::try_new(&nn::VarStore::new(Device::Cpu).root(), &bad)
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("torchvision-resnet18"), "{e:#}");
}

#[test]
pub(crate) fn zero_init_residual_makes_every_torchvision_block_start_as_the_identity() {
    let _defaults = crate::native::default_generators();
    for arch in [Arch::TvResnet18, Arch::TvResnet50] {
        let mut cfg = tiny(arch);
        cfg.zero_init_residual = true;
        let (_vs, net) = build(&cfg, 1);
        let Body::Torchvision(stem, blocks) = &net.body else {
            panic!("{arch:?} builds a torchvision body");
        };
        let x = stem.forward_t(
            &Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu)),
            true,
            &cfg.act,
        );
        let mut h = x;
        let mut identities = 0;
        for b in blocks {
            let out = b.forward_t(&h, true, &cfg.act);
            if b.shortcut_free() {
                // relu(0 + h) = h: h is already a ReLU's output.
                assert!(
                    close(&out, &h, 1e-6),
                    "{arch:?}: a block did not start as the identity"
                );
                identities += 1;
            }
            h = out;
        }
        assert!(identities >= 4, "{arch:?}: {identities}");
        // Off: the same blocks change their input.
        let (_vs, net) = build(&tiny(arch), 1);
        let Body::Torchvision(stem, blocks) = &net.body else {
            unreachable!()
        };
        let h = stem.forward_t(
            &Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu)),
            true,
            &cfg.act,
        );
        let h = blocks[0].forward_t(&h, true, &cfg.act);
        assert!(!close(&blocks[1].forward_t(&h, true, &cfg.act), &h, 1e-3));
    }
}

#[test]
pub(crate) fn blurpool_blurs_before_each_strided_conv_and_keeps_a_flat_image_flat() {
    let _defaults = crate::native::default_generators();
    // Layers 2-4 each open with a strided conv and a strided 1x1 shortcut (on
    // the 3x3 conv in ResNet-50's bottleneck): six blurred convs; the stem's
    // 3-channel conv is not blurred (FFCV's in_channels >= 16).
    for arch in [Arch::TvResnet18, Arch::TvResnet50] {
        let x = Tensor::randn([2, 3, 64, 64], (Kind::Float, Device::Cpu));
        let mut outs = Vec::new();
        for blurpool in [true, false] {
            let mut cfg = NetConfig::default_for(arch).scaled(0.25);
            cfg.blurpool = blurpool;
            let (_vs, net) = build(&cfg, 3);
            let Body::Torchvision(_, blocks) = &net.body else {
                panic!("{arch:?} builds a torchvision body");
            };
            let blurred: usize = blocks.iter().map(TvBlock::blurred_convs).sum();
            assert_eq!(blurred, if blurpool { 6 } else { 0 }, "{arch:?}");
            outs.push(net.forward_t(&x, false));
        }
        // The same seeded weights (the blur has none): only the blur differs.
        assert!(
            !close(&outs[0], &outs[1], 1e-4),
            "{arch:?}: the blur changed nothing"
        );
    }
    // The filter: [1 2 1]x[1 2 1]/16 on each channel alone, summing to 1, so
    // a flat image stays flat away from the zero-padded border.
    let f = torchvision::blur_filter(4, Device::Cpu);
    assert_eq!(f.size(), [4, 1, 3, 3]);
    assert!((f.double_value(&[2, 0, 1, 1]) - 0.25).abs() < 1e-7);
    assert!((f.double_value(&[2, 0, 0, 0]) - 1.0 / 16.0).abs() < 1e-7);
    let flat = Tensor::full([1, 4, 8, 8], 3.0, (Kind::Float, Device::Cpu));
    let y = flat.conv2d(&f, None::<Tensor>, [1, 1], [1, 1], [1, 1], 4);
    let inner = y.narrow(2, 1, 6).narrow(3, 1, 6);
    assert!(close(&inner, &Tensor::full_like(&inner, 3.0), 1e-6));
}

#[test]
pub(crate) fn head_init_normal_draws_the_head_weights_from_n_0_std() {
    let mut cfg = tiny(Arch::TvResnet50);
    let (_vs, plain) = build(&cfg, 1);
    cfg.head_init_std = Some(0.01);
    let (_vs2, drawn) = build(&cfg, 1);
    let std = |t: &Tensor| f64::try_from(t.std(true)).unwrap();
    let (w, b) = (&drawn.head.weight, drawn.head.bias.as_ref().unwrap());
    // Thousands of draws: the sample sd within 10% of 0.01.
    assert!(w.numel() > 1000, "{}", w.numel());
    assert!((std(w) - 0.01).abs() < 1e-3, "sd {}", std(w));
    // The default init (uniform within 1/sqrt(fan_in)) is another spread;
    // the bias, drawn before the redraw, is the plain net's.
    let (pw, pb) = (&plain.head.weight, plain.head.bias.as_ref().unwrap());
    assert!((std(pw) - 0.01).abs() > 2e-3, "sd {}", std(pw));
    assert!(b.equal(pb));
}
