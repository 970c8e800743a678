//! Each trick's effect where the engine applies it, from a resolved plan:
//! the data preparation, the batch layout, CutMix, clipping, accumulation,
//! the schedule, the parameter groups. Model and optimiser maths have their
//! own tests beside them; `tricks::tests` lists where every trick's lives.

use super::*;
use crate::config::Override;

fn plan(recipe: &str, ov: &[&str]) -> RunPlan {
    let ov: Vec<Override> = ov
        .iter()
        .map(|s| match s.split_once('=') {
            Some((_, v)) if v != "on" && v != "off" => Override::parse_set(s),
            _ => Override::parse_trick(s),
        })
        .map(Result::unwrap)
        .collect();
    crate::recipe::resolve_plan(recipe, &ov).unwrap().1
}

/// A run spec for tests that drive the engine's stages directly (the plan is given).
fn bare_spec() -> crate::config::RunSpec {
    crate::config::RunSpec {
        id: crate::config::RunId {
            matrix: "t".into(),
            index: 0,
            variant: "v".into(),
            repeat: 0,
        },
        seed: 0,
        recipe: String::new(),
        overrides: Vec::new(),
        data: String::new(),
        target_acc: 0.5,
        reference: None,
        device: None,
    }
}

fn source() -> Source {
    Source::new(&crate::data::synthetic(40, 20, 10, 16, 1)).unwrap()
}

#[test]
fn preprocess_once_normalises_and_pads_before_training() {
    let src = source();
    let once = prepare(
        &plan(
            "tiny-page-resnet9",
            &["preprocess_once", "random_crop.pad=4"],
        ),
        &src,
        Device::Cpu,
    );
    assert_eq!(once.train.kind(), Kind::Float);
    assert_eq!(once.train.size()[2..], [24, 24]);
    let raw = prepare(
        &plan("tiny-page-resnet9", &["preprocess_once=off"]),
        &src,
        Device::Cpu,
    );
    assert_eq!(raw.train.kind(), Kind::Uint8);
    assert_eq!(raw.train.size()[2..], [16, 16]);
    // Normalised with Page's statistics: byte 0 of channel 0 becomes -125.31/62.99.
    let zero = Tensor::zeros([1, 3, 1, 1], (Kind::Uint8, Device::Cpu));
    let n = super::super::pipeline::normalise(&zero);
    assert!((n.double_value(&[0, 0, 0, 0]) + 125.31 / 62.99).abs() < 1e-5);
}

#[test]
fn gpu_data_augments_on_the_device_instead_of_a_cpu_loader() {
    let src = source();
    for (on, want_loader) in [("gpu_data=on", false), ("gpu_data=off", true)] {
        let p = plan("tiny-page-resnet9", &[on]);
        let data = prepare(&p, &src, Device::Cpu);
        let flip0 = Tensor::zeros([40], (Kind::Bool, Device::Cpu));
        assert_eq!(
            cpu_loader(&p, &data, &src, &flip0, 1).is_some(),
            want_loader,
            "{on}"
        );
    }
}

#[test]
fn precision_tricks_set_the_layout_on_any_device() {
    let p = plan("airbench94", &["amp", "fp16=off"]);
    let layout = Layout::of(&p);
    assert!(layout.channels_last && layout.half.is_none());
    assert_eq!(layout.amp, Some(AutocastKind::F16));
    let p = plan("airbench94", &["amp", "amp.dtype=bf16", "fp16=off"]);
    assert_eq!(Layout::of(&p).amp, Some(AutocastKind::Bf16));
    // airbench evaluates (and TTAs) at batch 2000, Page at his batch of 512.
    assert_eq!(p.eval.batch, 2000);
    assert_eq!(plan("page-final", &[]).eval.batch, 512);
    let p = plan("airbench94", &["fp16.dtype=bf16"]);
    let cpu = Layout::of(&p);
    assert_eq!(cpu.half, Some(Kind::BFloat16));
    // The layout applied to a batch: half kind, NHWC strides.
    let x = cpu.input(Tensor::randn([2, 3, 4, 4], (Kind::Float, Device::Cpu)));
    assert_eq!(x.kind(), Kind::BFloat16);
    assert_eq!(x.stride(), [48, 1, 12, 3]);
    // Preprocessed training data is kept in the training precision.
    let src = source();
    assert_eq!(prepare(&p, &src, Device::Cpu).train.kind(), Kind::BFloat16);
    assert!(p.precision.cudnn_benchmark);
    // BN stays fp32 and takes the half input; with bn=fp16 it is cast too.
    for (bn, want) in [("fp16.bn=fp32", Kind::Float), ("fp16.bn=fp16", Kind::Half)] {
        let p = plan("tiny-page-resnet9", &["fp16", bn]);
        let vs = nn::VarStore::new(Device::Cpu);
        let layout = Layout::of(&p);
        let (net, _) = build_net(&p, &src, &vs, layout, &mut Clocks::default()).unwrap();
        assert_eq!(net.param_groups().conv_filters[0].kind(), Kind::Half);
        let running: Vec<Kind> = vs
            .variables()
            .iter()
            .filter(|(k, _)| k.contains("running"))
            .map(|(_, t)| t.kind())
            .collect();
        assert!(
            !running.is_empty() && running.iter().all(|k| *k == want),
            "{bn}"
        );
        assert_eq!(net.bn_params()[0].1.kind(), want);
    }
}

#[test]
fn cutmix_pastes_a_square_and_mixes_labels_by_area() {
    tch::manual_seed(4);
    let n = 6;
    // Image i is constant i: a pasted pixel shows which image it came from.
    let x = Tensor::arange(n, (Kind::Float, Device::Cpu))
        .view([n, 1, 1, 1])
        .expand([n, 1, 8, 8], true)
        .contiguous();
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu));
    let (mixed, soft) = cutmix_batch(&Rng::new(Device::Cpu, 4), &x, &y, 3, n);
    let share = 9.0 / 64.0;
    for i in 0..n {
        let img = mixed.get(i);
        let foreign = img.ne(i as f64).sum(Kind::Int64).int64_value(&[]);
        let row = soft.get(i);
        assert!((row.sum(Kind::Float).double_value(&[]) - 1.0).abs() < 1e-6);
        if foreign == 0 {
            // Pasted from itself: the label stays whole.
            assert!((row.double_value(&[i]) - 1.0).abs() < 1e-6);
        } else {
            assert_eq!(foreign, 9);
            assert!((row.double_value(&[i]) - (1.0 - share)).abs() < 1e-6);
        }
    }
    let c = plan(
        "tiny-page-resnet9",
        &["cutmix", "cutmix.last_epochs=2", "epochs=5"],
    )
    .loss
    .cutmix
    .unwrap();
    assert_eq!(
        (0..5).map(|e| c.active_at(e, 5.0)).collect::<Vec<_>>(),
        [false, false, false, true, true]
    );
}

#[test]
fn grad_clip_rescales_to_the_max_norm() {
    let w = Tensor::zeros([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    (&w * Tensor::from_slice(&[3.0f32, 4.0]))
        .sum(Kind::Float)
        .backward();
    assert_eq!(
        plan("tiny-page-resnet9", &["grad_clip", "grad_clip.max_norm=1"])
            .step
            .clip_norm,
        Some(1.0)
    );
    clip_grad_norm(&[w.shallow_clone()], 1.0);
    let g = Vec::<f32>::try_from(w.grad()).unwrap();
    assert!(
        (g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5,
        "{g:?}"
    );
    // Under the limit: unchanged.
    clip_grad_norm(&[w.shallow_clone()], 10.0);
    assert!((Vec::<f32>::try_from(w.grad()).unwrap()[1] - 0.8).abs() < 1e-5);
}

#[test]
fn grad_accum_equals_one_pass_with_ghost_batches_of_the_same_size() {
    // Two micro-batches of 4 with plain BN see the same statistics as one
    // batch of 8 in ghost BN with 2 splits, whose splits are strided (images
    // j, j+2, ...): fed in that order, the gradients must agree.
    let src = source();
    let grads = |ov: &[&str], order: &[i64]| {
        let p = plan(
            "tiny-page-resnet9",
            &[&["batch_size=8", "cutout=off"], ov].concat(),
        );
        tch::manual_seed(9);
        let vs = nn::VarStore::new(Device::Cpu);
        let mut clocks = Clocks::default();
        let (net, _) = build_net(&p, &src, &vs, Layout::of(&p), &mut clocks).unwrap();
        let spec = bare_spec();
        let run = Run {
            plan: &p,
            spec: &spec,
            src: &src,
            device: Device::Cpu,
            label: String::new(),
            layout: Layout::of(&p),
            rng: Rng::new(Device::Cpu, 0),
        };
        let idx = Tensor::from_slice(order);
        let x = normalise(&src.train_u8.index_select(0, &idx));
        let y = src.train_y.index_select(0, &idx);
        let mut correct = Tensor::zeros([], (Kind::Int64, Device::Cpu));
        let loss = run.forward_backward(&x, &y, None, &net, &mut correct);
        let g: Vec<Tensor> = net
            .param_groups()
            .all_trainable()
            .iter()
            .map(|t| t.grad().copy())
            .collect();
        (f64::try_from(loss).unwrap(), g)
    };
    let (la, ga) = grads(
        &["grad_accum", "grad_accum.steps=2"],
        &[0, 2, 4, 6, 1, 3, 5, 7],
    );
    let (lb, gb) = grads(
        &["ghost_bn", "ghost_bn.splits=2"],
        &[0, 1, 2, 3, 4, 5, 6, 7],
    );
    let (lc, _) = grads(&[], &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(
        (la - lc).abs() > 1e-4,
        "one batch of 8 is not the same as two of 4"
    );
    assert!((la - lb).abs() < 1e-5, "{la} vs {lb}");
    for (a, b) in ga.iter().zip(&gb) {
        assert!(a.allclose(b, 1e-4, 1e-5, false));
    }
}

#[test]
fn warmup_ramps_the_schedule_linearly() {
    let base = plan("tiny-page-resnet9", &["schedule=constant"]);
    let warm = plan(
        "tiny-page-resnet9",
        &["schedule=constant", "warmup", "warmup.epochs=2"],
    );
    for (e, f) in [(0.0, 0.0), (0.5, 0.25), (1.0, 0.5), (2.0, 1.0), (2.5, 1.0)] {
        assert!(
            (warm.schedule.at(e) - f * base.schedule.at(e)).abs() < 1e-12,
            "{e}"
        );
    }
}

#[test]
fn progressive_resize_trains_small_first_and_full_size_val_evaluates_full() {
    let p = plan(
        "tiny-page-resnet9",
        &[
            "progressive_resize",
            "progressive_resize.start_size=24",
            "progressive_resize.until=0.5",
            "epochs=4",
        ],
    );
    let pr = p.data.progressive.clone().unwrap();
    assert_eq!(
        (0..4).map(|e| pr.small_at(e, 4.0)).collect::<Vec<_>>(),
        [true, true, false, false]
    );
    assert_eq!(pr.eval_size(), Some(24));
    let full = plan(
        "tiny-page-resnet9",
        &["progressive_resize", "full_size_val"],
    );
    assert_eq!(full.data.progressive.unwrap().eval_size(), None);
}

#[test]
fn zero_grad_none_and_zero_fill_both_leave_no_gradient() {
    // tch cannot drop a gradient: set-to-none zeroes like zero-fill (same maths).
    for on in ["zero_grad_none=on", "zero_grad_none=off"] {
        let p = plan("tiny-page-resnet9", &[on]);
        let vs = nn::VarStore::new(Device::Cpu);
        let (net, _) =
            build_net(&p, &source(), &vs, Layout::of(&p), &mut Clocks::default()).unwrap();
        let mut opt = Optimisers::new(&p.optim, &net, p.loss.scale);
        let x = Tensor::randn([4, 3, 16, 16], (Kind::Float, Device::Cpu));
        net.forward_t(&x, true).sum(Kind::Float).backward();
        opt.step(&p.optim, 1.0, 0.0, 0.0, p.step.zero_grad_none);
        for t in net.param_groups().all_trainable() {
            assert_eq!(
                t.grad().abs().sum(Kind::Float).double_value(&[]),
                0.0,
                "{on}"
            );
        }
    }
}

#[test]
fn no_wd_bn_bias_takes_bn_and_conv_biases_out_of_weight_decay() {
    for (on, want) in [("no_wd_bn_bias=on", 0.0), ("no_wd_bn_bias=off", 1.0)] {
        let p = plan("tiny-page-resnet9", &[on, "no_bias_before_bn=off"]);
        let vs = nn::VarStore::new(Device::Cpu);
        let (net, _) =
            build_net(&p, &source(), &vs, Layout::of(&p), &mut Clocks::default()).unwrap();
        let groups = optimizer_groups(&p.optim, &net);
        let pg = net.param_groups();
        let weights = groups
            .iter()
            .find(|g| g.params.len() == pg.weights.len())
            .unwrap();
        assert_eq!(weights.wd_mult, 1.0);
        let others: Vec<f64> = groups
            .iter()
            .filter(|g| g.params.len() != pg.weights.len())
            .map(|g| g.wd_mult)
            .collect();
        assert_eq!(others.len(), 3, "{on}: BN weights, BN biases, conv biases");
        assert!(others.iter().all(|m| *m == want), "{on}: {others:?}");
    }
}

/// The first trainable conv's gradient in mean-loss units, after one
/// forward/backward of `plan` on a fixed batch, from weights seeded alike.
fn first_conv_grad(plan: &RunPlan, src: &Source, n: i64) -> Tensor {
    tch::manual_seed(21);
    let vs = nn::VarStore::new(Device::Cpu);
    let layout = Layout::of(plan);
    let (net, _) = build_net(plan, src, &vs, layout, &mut Clocks::default()).unwrap();
    let spec = bare_spec();
    let run = Run {
        plan,
        spec: &spec,
        src,
        device: Device::Cpu,
        label: String::new(),
        layout,
        rng: Rng::new(Device::Cpu, 0),
    };
    let x = layout.input(normalise(&src.train_u8.narrow(0, 0, n)));
    let y = src.train_y.narrow(0, 0, n);
    let mut correct = Tensor::zeros([], (Kind::Int64, Device::Cpu));
    let _ = run.forward_backward(&x, &y, None, &net, &mut correct);
    let w = &net.param_groups().conv_filters[0];
    w.grad().to_kind(Kind::Double) / plan.loss.scale
}

fn cosine(a: &Tensor, b: &Tensor) -> f64 {
    let dot = (a * b).sum(Kind::Double).double_value(&[]);
    dot / (a.norm().double_value(&[]) * b.norm().double_value(&[]))
}

#[test]
fn fp16_gradients_of_the_early_layers_survive_with_the_summed_loss() {
    // airbench94_muon's logit scale 1/256 at batch 256: with a mean loss the
    // gradient entering the fp16 logits is ~1e-5, below fp16's smallest normal
    // (6.1e-5), and the layers below lose it; summed, it keeps its precision.
    let src = Source::new(&crate::data::synthetic(256, 20, 10, 32, 3)).unwrap();
    let base = ["batch_size=256", "whitening.images=256", "fp16=off"];
    let fp32 = first_conv_grad(&plan("tiny-airbench94-muon", &base), &src, 256);
    let fp16 = plan("tiny-airbench94-muon", &[&base[..2], &["fp16"]].concat());
    assert_eq!(fp16.loss.scale, 256.0);
    let summed = first_conv_grad(&fp16, &src, 256);
    let mut mean_plan = fp16.clone();
    mean_plan.loss.scale = 1.0;
    let mean = first_conv_grad(&mean_plan, &src, 256);
    let rel = |g: &Tensor| (g - &fp32).norm().double_value(&[]) / fp32.norm().double_value(&[]);
    let zeros = |g: &Tensor| {
        g.eq(0.0)
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[])
    };
    let (r_sum, r_mean) = (rel(&summed), rel(&mean));
    assert!(r_sum < 0.1, "summed fp16 vs fp32: relative error {r_sum}");
    assert!(zeros(&summed) <= zeros(&fp32) + 0.01 && cosine(&summed, &fp32) > 0.999);
    assert!(
        r_mean > 3.0 * r_sum,
        "the mean loss should lose the gradient: {r_mean}"
    );
}

#[test]
fn the_kernel_warm_up_leaves_no_gradient_and_no_bn_statistics_behind() {
    // airbench94-muon: the filters are Muon's and the whitening bias has its own
    // optimiser; a gradient left on either would join the first real step.
    let p = plan(
        "tiny-airbench94-muon",
        &["batch_size=8", "whitening.images=40"],
    );
    let src = Source::new(&crate::data::synthetic(40, 20, 10, 32, 1)).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let layout = Layout::of(&p);
    let (net, nc) = build_net(&p, &src, &vs, layout, &mut Clocks::default()).unwrap();
    let mut opt = Optimisers::new(&p.optim, &net, p.loss.scale);
    let avg = Averager::new(&p, &vs, &nc, layout).unwrap();
    let before: Vec<Tensor> = avg.live.iter().map(Tensor::copy).collect();
    warm_kernels(
        &Rng::new(Device::Cpu, 0),
        &net,
        &mut opt,
        &avg.live,
        [8, 3, 32, 32],
        10,
        layout,
    );
    let pg = net.param_groups();
    assert!(!pg.whiten_bias.is_empty() && !pg.conv_filters.is_empty());
    for t in pg.all_trainable() {
        let g = t.grad();
        assert!(!g.defined() || g.abs().sum(Kind::Float).double_value(&[]) == 0.0);
    }
    for (a, b) in before.iter().zip(&avg.live) {
        assert!(a.equal(b), "the warm-up changed the net's state");
    }
}

#[test]
fn amp_autocasts_the_training_forward_pass_on_a_cpu() {
    // The same init and batch with and without autocast: fp16 convolutions
    // round, so the loss moves a little, and the weights stay fp32.
    let src = source();
    let loss = |ov: &[&str]| {
        let p = plan("tiny-page-resnet9", ov);
        tch::manual_seed(3);
        let vs = nn::VarStore::new(Device::Cpu);
        let mut clocks = Clocks::default();
        let (net, _) = build_net(&p, &src, &vs, Layout::of(&p), &mut clocks).unwrap();
        let spec = bare_spec();
        let run = Run {
            plan: &p,
            spec: &spec,
            src: &src,
            device: Device::Cpu,
            label: String::new(),
            layout: Layout::of(&p),
            rng: Rng::new(Device::Cpu, 0),
        };
        let idx = Tensor::arange(16, (Kind::Int64, Device::Cpu));
        let x = normalise(&src.train_u8.index_select(0, &idx));
        let y = src.train_y.index_select(0, &idx);
        let mut correct = Tensor::zeros([], (Kind::Int64, Device::Cpu));
        let l = f64::try_from(run.forward_backward(&x, &y, None, &net, &mut correct)).unwrap();
        let w = &net.param_groups().weights[0];
        (l, w.kind(), w.grad().kind())
    };
    let (fp32, _, _) = loss(&["amp=off"]);
    for ov in [&["amp"][..], &["amp", "amp.dtype=bf16"]] {
        let (l, wk, gk) = loss(ov);
        assert_ne!(l, fp32, "{ov:?} left the forward pass in fp32");
        assert!((l - fp32).abs() < 0.05 * fp32, "{ov:?}: {l} vs {fp32}");
        assert_eq!(
            (wk, gk),
            (Kind::Float, Kind::Float),
            "{ov:?}: master weights"
        );
    }
}

#[test]
fn lookahead_starts_from_a_snapshot_and_hlb_evaluates_the_average() {
    let src = source();
    let p = plan(
        "tiny-hlb",
        &["fp16=off", "lookahead.start_epoch=1", "lookahead.every=1"],
    );
    tch::manual_seed(2);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut clocks = Clocks::default();
    let (net, nc) = build_net(&p, &src, &vs, Layout::of(&p), &mut clocks).unwrap();
    let mut avg = Averager::new(&p, &vs, &nc, Layout::of(&p)).unwrap();
    let first = |t: &[Tensor]| t[0].detach().copy();
    // Before its start epoch there is no average: steps leave the net alone.
    let w = avg.live[0].shallow_clone();
    tch::no_grad(|| w.shallow_clone().copy_(&(&w + 1.0)));
    avg.after_step(1, 10);
    assert!(avg.avg.is_none());
    assert!(
        std::ptr::eq(avg.eval_net(&net), &net),
        "evaluates the live net until then"
    );
    // At the start epoch the average begins from the live net as it is then.
    avg.begin_epoch(1);
    let snapshot = first(&avg.live);
    assert!(avg.avg.as_ref().unwrap().tensors()[0].equal(&snapshot));
    tch::no_grad(|| w.shallow_clone().copy_(&(&w + 1.0)));
    avg.after_step(5, 10);
    let d = optim::lookahead_decay(5, 10);
    let want = &snapshot * d + (&snapshot + 1.0) * (1.0 - d);
    assert!(
        avg.live[0].allclose(&want, 1e-6, 1e-6, false),
        "copied back"
    );
    // hlb evaluates its own copy, holding the average.
    let eval = avg.eval_net(&net);
    assert!(!std::ptr::eq(eval, &net));
    tch::no_grad(|| w.shallow_clone().copy_(&(&w + 1.0)));
    avg.finish();
    assert!(
        !avg.live[0].allclose(&want, 1e-6, 1e-6, false),
        "no final copy-back"
    );
    // airbench: from the initial weights, and the live net is what it evaluates.
    let p = plan("tiny-airbench94", &["fp16=off"]);
    let vs = nn::VarStore::new(Device::Cpu);
    let (net, nc) = build_net(&p, &src, &vs, Layout::of(&p), &mut clocks).unwrap();
    let avg = Averager::new(&p, &vs, &nc, Layout::of(&p)).unwrap();
    assert!(avg.avg.is_some());
    assert!(std::ptr::eq(avg.eval_net(&net), &net));
}
