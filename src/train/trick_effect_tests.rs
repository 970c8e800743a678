//! Each trick's effect where the engine applies it, from a resolved plan:
//! the data preparation, the batch layout, CutMix, clipping, accumulation,
//! the schedule, the parameter groups. Model and optimiser maths have their
//! own tests beside them; `tricks::tests` lists where every trick's lives.

use super::build::{Averager, Optimisers, build_net, optimizer_groups, warm_kernels};
use super::pipeline::{cutmix_batch, normalise};
use super::prepare::{Batches, Layout, Source, prepare};
use super::step::Trainee;
use crate::config::Override;
use crate::model::Net;
use crate::native::{AutocastKind, Rng};
use crate::optim::{self, clip_grad_norm};
use crate::plan::RunPlan;
use crate::tricks::TrickId;
use tch::{Device, Kind, Tensor, nn};

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

fn source() -> Source {
    Source::new(&crate::data::synthetic(40, 20, 10, 16, 1)).unwrap()
}

/// The net of `plan` on `src`, its whitening fitted, in the plan's layout.
fn net_of(plan: &RunPlan, src: &Source, vs: &nn::VarStore) -> Net {
    let _defaults = crate::native::default_generators();
    build_net(plan, src, vs, Layout::of(plan), &Rng::new(Device::Cpu, 0))
        .unwrap()
        .0
}

/// One forward and backward of `plan`'s step on `x`, `y`: the mean loss.
fn step_loss(plan: &RunPlan, net: &Net, src: &Source, x: &Tensor, y: &Tensor) -> f64 {
    let rng = Rng::new(Device::Cpu, 0);
    let trainee = Trainee {
        plan,
        net,
        rng: &rng,
        layout: Layout::of(plan),
        classes: src.classes,
        loss_scale: plan.loss.scale,
        forward_done: None,
        sync: None,
        failed: Default::default(),
    };
    f64::try_from(trainee.forward_backward(x, y, super::step::Mix::None).0).unwrap()
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
    let n = normalise(
        &zero,
        &plan("tiny-page-resnet9", &[]).data.norm,
        Kind::Float,
    );
    assert!((n.double_value(&[0, 0, 0, 0]) + 125.31 / 62.99).abs() < 1e-5);
}

/// airbench's constants reach every place a run normalises: the preprocessed
/// training set and the test set hold (v/255 − CIFAR_MEAN) / CIFAR_STD.
#[test]
fn airbench_norm_normalises_with_airbench_constants() {
    let src = source();
    let (mean, std) = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]);
    for (on, page) in [("airbench_norm=on", false), ("airbench_norm=off", true)] {
        let p = plan("tiny-page-resnet9", &["preprocess_once", on]);
        let d = prepare(&p, &src, Device::Cpu);
        let v = src.test_u8.double_value(&[0, 2, 3, 5]);
        let got = d.test_x.double_value(&[0, 2, 3, 5]);
        let want = if page {
            (v - 113.87) / 66.70
        } else {
            (v / 255.0 - mean[2]) / std[2]
        };
        assert!((got - want).abs() < 1e-5, "{on}: {got} against {want}");
        let v = src.train_u8.double_value(&[1, 0, 0, 0]);
        let want = if page {
            (v - 125.31) / 62.99
        } else {
            (v / 255.0 - mean[0]) / std[0]
        };
        // Training images are preprocessed once and padded: pixel (0, 0) sits at (pad, pad).
        let pad = p.data.augment.pad();
        let got = d.train.double_value(&[1, 0, pad, pad]);
        assert!((got - want).abs() < 1e-5, "{on}: {got} against {want}");
    }
}

#[test]
fn gpu_data_augments_on_the_device_instead_of_a_cpu_loader() {
    let src = source();
    for (on, want_loader) in [("gpu_data=on", false), ("gpu_data=off", true)] {
        let p = plan("tiny-page-resnet9", &[on, "batch_size=8"]);
        let data = prepare(&p, &src, Device::Cpu);
        let rng = Rng::new(Device::Cpu, 1);
        let mut batches = Batches::new(&p, &data, &src, &rng, Layout::of(&p), Device::Cpu, 1);
        assert_eq!(batches.uses_loader(), want_loader, "{on}");
        batches.begin_epoch(0).unwrap();
        let (x, y, loader_s) = batches.batch(0);
        assert_eq!((x.size()[0], y.size()[0]), (8, 8));
        assert_eq!(
            loader_s > 0.0,
            want_loader,
            "{on}: the loader's own seconds"
        );
    }
}

#[test]
fn precision_tricks_set_the_layout_on_any_device() {
    let _defaults = crate::native::default_generators();
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
        let net = net_of(&p, &src, &vs);
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
    let _defaults = crate::native::default_generators();
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
    let mut init = None;
    let mut grads = |ov: &[&str], order: &[i64]| {
        let p = plan(
            "tiny-page-resnet9",
            &[&["batch_size=8", "cutout=off"], ov].concat(),
        );
        let vs = nn::VarStore::new(Device::Cpu);
        let net = net_from(&p, &src, &vs, &mut init);
        let idx = Tensor::from_slice(order);
        let x = normalise(
            &src.train_u8.index_select(0, &idx),
            &p.data.norm,
            Kind::Float,
        );
        let y = src.train_y.index_select(0, &idx);
        let loss = step_loss(&p, &net, &src, &x, &y);
        let g: Vec<Tensor> = net
            .param_groups()
            .all_trainable()
            .iter()
            .map(|t| t.grad().copy())
            .collect();
        (loss, g)
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
    // 4 steps an epoch: epoch e starts at step 4e.
    let (w, b) = (
        warm.schedule.multipliers(12, 4),
        base.schedule.multipliers(12, 4),
    );
    for (s, f) in [(0, 0.0), (2, 0.25), (4, 0.5), (8, 1.0), (10, 1.0)] {
        assert!((w[s] - f * b[s]).abs() < 1e-12, "step {s}");
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
fn zero_grad_none_drops_the_gradients_and_zero_fill_zeroes_them() {
    let _defaults = crate::native::default_generators();
    for (on, none) in [("zero_grad_none=on", true), ("zero_grad_none=off", false)] {
        let p = plan("tiny-page-resnet9", &[on]);
        let vs = nn::VarStore::new(Device::Cpu);
        let net = net_of(&p, &source(), &vs);
        let rates = p.rates(40);
        let mut opt = Optimisers::new(&p, &net, &rates);
        let x = Tensor::randn([4, 3, 16, 16], (Kind::Float, Device::Cpu));
        net.forward_t(&x, true).sum(Kind::Float).backward();
        opt.step(&p, 0, &rates, p.step.zero_grad_none);
        for t in net.param_groups().all_trainable() {
            let g = t.grad();
            assert_eq!(!g.defined(), none, "{on}");
            if !none {
                assert_eq!(g.abs().sum(Kind::Float).double_value(&[]), 0.0, "{on}");
            }
        }
    }
}

#[test]
fn no_wd_bn_bias_takes_bn_and_conv_biases_out_of_weight_decay() {
    for (on, want) in [("no_wd_bn_bias=on", 0.0), ("no_wd_bn_bias=off", 1.0)] {
        let p = plan("tiny-page-resnet9", &[on, "no_bias_before_bn=off"]);
        let vs = nn::VarStore::new(Device::Cpu);
        let net = net_of(&p, &source(), &vs);
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

/// Initial weights by name, to start nets of other settings from.
type Weights = std::collections::HashMap<String, Tensor>;

/// `plan`'s net, started from `init`'s weights where given (each in its own
/// dtype), else from its own draw, which `init` then keeps: torch's global
/// generator is shared with the tests running beside this one, so a seed
/// alone does not give two nets the same weights.
fn net_from(plan: &RunPlan, src: &Source, vs: &nn::VarStore, init: &mut Option<Weights>) -> Net {
    let net = net_of(plan, src, vs);
    let vars = vs.variables();
    match init {
        Some(w) => tch::no_grad(|| {
            for (name, v) in &vars {
                match w.get(name) {
                    Some(w) if w.size() == v.size() => {
                        v.shallow_clone().copy_(w);
                    }
                    // Ghost BN keeps running statistics per split: buffers
                    // start from constants, so only parameters must match.
                    _ => assert!(!v.requires_grad(), "{name}: not in the first net"),
                }
            }
        }),
        None => {
            *init = Some(
                vars.iter()
                    .map(|(k, v)| (k.clone(), v.detach().copy()))
                    .collect(),
            );
        }
    }
    net
}

/// The first trainable conv's gradient in mean-loss units, after one
/// forward/backward of `plan` on a fixed batch, from `init` (see [`net_from`]).
fn first_conv_grad(plan: &RunPlan, src: &Source, n: i64, init: &mut Option<Weights>) -> Tensor {
    let vs = nn::VarStore::new(Device::Cpu);
    let net = net_from(plan, src, &vs, init);
    let x = Layout::of(plan).input(normalise(
        &src.train_u8.narrow(0, 0, n),
        &plan.data.norm,
        Kind::Float,
    ));
    let y = src.train_y.narrow(0, 0, n);
    let _ = step_loss(plan, &net, src, &x, &y);
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
    let mut init = None;
    let fp32 = first_conv_grad(&plan("tiny-airbench94-muon", &base), &src, 256, &mut init);
    let fp16 = plan("tiny-airbench94-muon", &[&base[..2], &["fp16"]].concat());
    assert_eq!(fp16.loss.scale, 256.0);
    let summed = first_conv_grad(&fp16, &src, 256, &mut init);
    let mut mean_plan = fp16.clone();
    mean_plan.loss.scale = 1.0;
    let mean = first_conv_grad(&mean_plan, &src, 256, &mut init);
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
    let _defaults = crate::native::default_generators();
    // airbench94-muon: the filters are Muon's and the whitening bias has its own
    // optimiser; a gradient left on either would join the first real step.
    let p = plan(
        "tiny-airbench94-muon",
        &["batch_size=8", "whitening.images=40"],
    );
    let src = Source::new(&crate::data::synthetic(40, 20, 10, 32, 1)).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let layout = Layout::of(&p);
    let (net, nc) = build_net(&p, &src, &vs, layout, &Rng::new(Device::Cpu, 0)).unwrap();
    let mut opt = Optimisers::new(&p, &net, &p.rates(40));
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
    let mut init = None;
    let mut loss = |ov: &[&str]| {
        let p = plan("tiny-page-resnet9", ov);
        let vs = nn::VarStore::new(Device::Cpu);
        let net = net_from(&p, &src, &vs, &mut init);
        let idx = Tensor::arange(16, (Kind::Int64, Device::Cpu));
        let x = normalise(
            &src.train_u8.index_select(0, &idx),
            &p.data.norm,
            Kind::Float,
        );
        let y = src.train_y.index_select(0, &idx);
        let l = step_loss(&p, &net, &src, &x, &y);
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
    let _defaults = crate::native::default_generators();
    let src = source();
    // From epoch 1 on, every step: the first due step snapshots, the next averages.
    let p = plan(
        "tiny-hlb",
        &[
            "fp16=off",
            "lookahead.last_epochs=0",
            "lookahead.start_epoch=1",
            "lookahead.every=1",
        ],
    );
    // hlb's own: the last 10 full epochs, from epoch floor(12.1) - 10 = 2; a
    // 3-epoch run starts from a snapshot in epoch 0, as hlb's formula gives.
    let start = |p: &RunPlan| match p.averaging {
        crate::plan::Averaging::Lookahead { start, .. } => start,
        _ => panic!("no lookahead"),
    };
    use crate::plan::AvgStart;
    assert_eq!(start(&plan("hlb", &[])), AvgStart::Epoch(2.0));
    assert_eq!(start(&plan("tiny-hlb", &[])), AvgStart::Epoch(0.0));
    assert_eq!(start(&plan("airbench94", &[])), AvgStart::Init);
    tch::manual_seed(2);
    let vs = nn::VarStore::new(Device::Cpu);
    let (net, nc) = build_net(&p, &src, &vs, Layout::of(&p), &Rng::new(Device::Cpu, 0)).unwrap();
    let mut avg = Averager::new(&p, &vs, &nc, Layout::of(&p)).unwrap();
    let first = |t: &[Tensor]| t[0].detach().copy();
    // Before its start epoch there is no average: steps leave the net alone.
    let w = avg.live[0].shallow_clone();
    tch::no_grad(|| w.shallow_clone().copy_(&(&w + 1.0)));
    avg.after_step(1, 0, 0, 10);
    assert!(!avg.started());
    assert!(
        std::ptr::eq(avg.eval_net(&net), &net),
        "evaluates the live net until then"
    );
    // The first due step of the start epoch takes the live net as it is then.
    avg.after_step(5, 0, 1, 10);
    let snapshot = first(&avg.live);
    assert!(avg.started());
    tch::no_grad(|| w.shallow_clone().copy_(&(&w + 1.0)));
    avg.after_step(6, 1, 1, 10);
    let d = optim::lookahead_decay(6, 10);
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
    let (net, nc) = build_net(&p, &src, &vs, Layout::of(&p), &Rng::new(Device::Cpu, 0)).unwrap();
    let avg = Averager::new(&p, &vs, &nc, Layout::of(&p)).unwrap();
    assert!(avg.started());
    assert!(std::ptr::eq(avg.eval_net(&net), &net));
}

/// Where each trick's effect is tested, at the level where it acts (a loss
/// value, a batch, a parameter group, a schedule value, a layer's output).
/// The match is exhaustive: a trick added to the catalog without an effect
/// test here does not compile, and each named test must exist.
#[allow(
    dead_code,
    reason = "never called: the compiler checking this match is the test"
)]
#[allow(clippy::too_many_lines, reason = "one arm per trick in the catalog")]
fn effect_test(trick: TrickId) -> fn() {
    match trick {
        TrickId::GpuData => gpu_data_augments_on_the_device_instead_of_a_cpu_loader,
        TrickId::GroupAug => {
            super::pipeline::tests::page_groups_share_one_option_and_options_are_distinct
        }
        TrickId::PreprocessOnce => preprocess_once_normalises_and_pads_before_training,
        TrickId::AirbenchNorm => airbench_norm_normalises_with_airbench_constants,
        TrickId::Fp16 => precision_tricks_set_the_layout_on_any_device,
        TrickId::Amp => amp_autocasts_the_training_forward_pass_on_a_cpu,
        TrickId::ChannelsLast => precision_tricks_set_the_layout_on_any_device,
        TrickId::CudnnBenchmark => precision_tricks_set_the_layout_on_any_device,
        TrickId::Compile => crate::recipe::tests::errors_name_the_fix,
        TrickId::PoolBeforeAct => {
            crate::model::tests::pool_before_act_is_exact_for_relu_but_pool_before_bn_is_not
        }
        TrickId::PoolBeforeBn => {
            crate::model::tests::pool_before_act_is_exact_for_relu_but_pool_before_bn_is_not
        }
        TrickId::Residual => crate::model::tests::residual_adds_the_layer_1_and_3_branches,
        TrickId::LogitScale => crate::model::tests::logit_scale_multiplies_the_logits,
        TrickId::BnWeightInitOne => crate::model::tests::bn_weight_init_one_or_pytorch_0_4_uniform,
        TrickId::ZeroInitResidual => {
            crate::model::tests::zero_init_residual_makes_every_torchvision_block_start_as_the_identity
        }
        TrickId::HeadInitNormal => crate::model::tests::head_init_normal_draws_the_head_weights_from_n_0_std,
        TrickId::Celu => crate::model::tests::celu_alpha_formula,
        TrickId::Gelu => crate::model::tests::gelu_is_the_exact_erf_form,
        TrickId::Silu => crate::model::tests::silu_is_x_times_its_sigmoid,
        TrickId::GhostBn => crate::model::tests::ghost_bn_statistics_per_split_and_eval_average,
        TrickId::SyncBn => crate::model::tests::sync_bn_over_two_ranks_is_bn_over_their_whole_batch,
        TrickId::FrozenBnScale => crate::model::tests::frozen_bn_scale_stays_one_and_out_of_groups,
        TrickId::BnBiasLrScale => {
            super::tests::every_sgd_group_decays_by_the_recipe_weight_decay_per_step
        }
        TrickId::BnStats => crate::model::tests::bn_stats_momentum_moves_the_running_mean,
        TrickId::Whitening => crate::model::tests::whitening_output_covariance_is_identity,
        TrickId::WhiteningNegate => {
            crate::model::tests::whitening_negate_doubles_the_filters_with_their_negations
        }
        TrickId::SvdWhitening => {
            crate::model::tests::svd_whitening_gives_the_eigen_filters_from_the_first_images
        }
        TrickId::WhiteningBias => {
            super::tests::muon_whitening_bias_starts_uniform_and_decays_on_its_own_clock
        }
        TrickId::DiracInit => crate::model::tests::dirac_init_is_identity_on_first_filters,
        TrickId::Nesterov => crate::optim::tests::sgd_torch_nesterov_two_steps_by_hand,
        TrickId::WeightDecayOn => crate::optim::tests::sgd_page_two_steps_by_hand,
        TrickId::LabelSmoothing => {
            super::tests::label_smoothing_reaches_the_training_loss_through_the_plan
        }
        TrickId::Ema => crate::optim::tests::ema_and_lookahead_follow_the_formula,
        TrickId::Lookahead => lookahead_starts_from_a_snapshot_and_hlb_evaluates_the_average,
        TrickId::Muon => crate::optim::tests::muon_renormalises_weight_and_steps_orthogonally,
        TrickId::BatchedMuon => crate::optim::tests::batched_muon_matches_the_per_filter_loop,
        TrickId::MuonNormSchedule => {
            crate::optim::tests::muon_renormalises_at_hivergess_growing_intervals
        }
        TrickId::MuonFp16Momentum => {
            crate::optim::tests::muon_fp16_momentum_rounds_the_buffer_to_half
        }
        TrickId::RandomCrop => super::pipeline::tests::crop_takes_each_images_own_window,
        TrickId::Flip => super::pipeline::tests::flip_mirrors_each_image_or_leaves_it,
        TrickId::AlternatingFlip => {
            super::pipeline::tests::alternating_flip_alternates_and_groups_share_options
        }
        TrickId::Cutout => super::pipeline::tests::cutout_zeroes_exactly_the_square,
        TrickId::ColorJitter => {
            super::pipeline::tests::colour_jitter_shifts_then_scales_each_image_within_its_bounds
        }
        TrickId::Cutmix => cutmix_pastes_a_square_and_mixes_labels_by_area,
        TrickId::Tta => crate::optim::tests::tta_averages_flipped_and_shifted_views,
        TrickId::MedianReadout => super::tests::median_readout_reports_the_median_of_the_last_epochs,
        TrickId::SelectiveTta => {
            crate::optim::tests::selective_tta_gives_the_views_to_the_least_confident_only
        }
        TrickId::PrepBnRelu => {
            crate::model::tests::prep_bn_relu_adds_a_batch_norm_after_the_prep_conv
        }
        TrickId::ZeroGradNone => zero_grad_none_drops_the_gradients_and_zero_fill_zeroes_them,
        TrickId::Ddp => {
            crate::dist::group::tests::ddp_averages_the_gradients_in_buckets_and_its_hooks_round_them
        }
        TrickId::CudaGraphs => {
            super::graph_tests::the_graph_path_uncaptured_equals_the_eager_step_bit_for_bit
        }
        TrickId::NoBiasBeforeBn => {
            crate::model::tests::conv_bias_before_bn_changes_nothing_in_training_mode
        }
        TrickId::NoWdBnBias => no_wd_bn_bias_takes_bn_and_conv_biases_out_of_weight_decay,
        TrickId::GradClip => grad_clip_rescales_to_the_max_norm,
        TrickId::GradAccum => grad_accum_equals_one_pass_with_ghost_batches_of_the_same_size,
        TrickId::Warmup => warmup_ramps_the_schedule_linearly,
        TrickId::Lars => crate::optim::tests::lars_one_step_formula,
        TrickId::Lamb => crate::optim::tests::lamb_one_step_formula,
        TrickId::Adamw => crate::optim::tests::adamw_two_steps_formula,
        TrickId::ProgressiveResize => {
            progressive_resize_trains_small_first_and_full_size_val_evaluates_full
        }
        TrickId::FullSizeVal => {
            progressive_resize_trains_small_first_and_full_size_val_evaluates_full
        }
        TrickId::Stream => stream_feeds_imagenet_normalised_crops_at_each_epochs_side,
        TrickId::ResRamp => stream_feeds_imagenet_normalised_crops_at_each_epochs_side,
        TrickId::Blurpool => {
            crate::model::tests::blurpool_blurs_before_each_strided_conv_and_keeps_a_flat_image_flat
        }
        TrickId::Momentum => momentum_is_the_heavy_ball_and_nesterov_looks_ahead,
        TrickId::LrSteps => goyal_warms_up_from_eta_and_divides_by_ten_at_30_60_80,
        TrickId::PolyLr => poly_lr_warms_up_from_zero_then_decays_by_its_power,
        TrickId::FastaiPhases => fastai_phases_change_the_batch_the_side_and_the_lr_by_phase,
    }
}

/// `fastai_phases` (tiny: the 1-machine schedule at a quarter of the sides,
/// 1/32 of the batches and a tenth of the epochs): each epoch's batch, side,
/// crop scale and validation follow the phase in force, the loader builds
/// batches of that size and side, and the steps of an epoch follow the batch
/// (the full schedules are checked against the reference in `golden`).
#[test]
fn fastai_phases_change_the_batch_the_side_and_the_lr_by_phase() {
    use super::stream::StreamFeed;
    use crate::data::stream::StreamData;
    let p = plan("tiny-fastai-rn50", &[]);
    let sp = p.data.stream.as_ref().unwrap();
    // 1 machine: 512, 224 and 128 a GPU on 8 GPUs, / 32; sides 128, 224, 288 / 4.
    let by_epoch: Vec<(usize, usize, Option<f64>, bool)> = (0..4)
        .map(|e| {
            let ph = sp.at(e);
            (p.batch_at(e), ph.size, ph.min_scale, ph.rect_val)
        })
        .collect();
    assert_eq!(
        by_epoch,
        [
            (128, 32, Some(0.08), false),
            (56, 56, Some(0.08), false),
            (56, 56, Some(0.08), false),
            (32, 72, Some(0.5), true)
        ]
    );
    assert_eq!(p.epochs, 3.5);
    let r = p.rates(4000);
    assert_eq!(r.epoch_steps, [31, 71, 71, 125]);
    assert_eq!(r.total, 31 + 71 + 71 + 63);
    // lr (its phases also at whole epochs): 1 -> 2 over epoch 0, read after
    // each step; epoch 1 the 224 px phase's 224/512 (its phases at 5 and 14
    // both round to 1: the later one holds); epoch 3 the last phase's.
    assert!((r.main[0] - (1.0 + 1.0 / 31.0)).abs() < 1e-12);
    assert!((r.main[30] - 2.0).abs() < 1e-12);
    assert!((r.main[31] - 224.0 / 512.0).abs() < 1e-12);
    let last = r.main[r.total as usize - 1];
    assert!(
        (last - 1.0 / 1000.0 * (128.0 / 512.0)).abs() < 1e-15,
        "{last}"
    );
    let data = StreamData::open("synthetic:600", crate::data::load).unwrap();
    let mut feed = StreamFeed::new(&p, sp, data.train, Layout::of(&p), Device::Cpu, 1, (0, 1));
    for (epoch, batch, side) in [(0, 128, 32), (1, 56, 56), (3, 32, 72)] {
        feed.begin_epoch(epoch).unwrap();
        let (x, y) = feed.batch().unwrap().0.trained();
        assert_eq!((x.size(), y.size()[0]), (vec![batch, 3, side, side], batch));
    }
    // Off: one batch, one side, the recipe's schedule.
    let off = plan("tiny-fastai-rn50", &["fastai_phases=off"]);
    assert!(off.batch_phases.is_empty() && off.data.stream.unwrap().phases.is_empty());
}

/// `lr_steps` and `warmup.start` through goyal-rn50's plan, against the
/// paper's rule (§2.2, §5.1) written out here: at ImageNet's 1,281,167
/// images and batch 8192, 156 steps an epoch; step t of the first 5 epochs
/// has η + (kη − η)·t/780 with η = 0.1, kη = 3.2; then 3.2 to epoch 30,
/// 0.32 to 60, 0.032 to 80, 0.0032 to 90.
#[test]
fn goyal_warms_up_from_eta_and_divides_by_ten_at_30_60_80() {
    let p = plan("goyal-rn50", &[]);
    let r = p.rates(1_281_167);
    assert_eq!((r.per_epoch, r.total), (156, 90 * 156));
    let lr = |s: u64| p.group_rate(crate::plan::ParamGroup::Weights, s, &r).0;
    let by_hand = |t: u64| {
        let epoch = t / 156;
        match epoch {
            0..5 => 0.1 + (3.2 - 0.1) * t as f64 / 780.0,
            5..30 => 3.2,
            30..60 => 0.32,
            60..80 => 0.032,
            _ => 0.0032,
        }
    };
    for t in [
        0, 1, 155, 156, 779, 780, 4679, 4680, 9359, 9360, 12480, 14039,
    ] {
        assert!(
            (lr(t) - by_hand(t)).abs() < 1e-12 * 3.2,
            "step {t}: {} against {}",
            lr(t),
            by_hand(t)
        );
    }
    // Off, the recipe's constant schedule: no step.
    let flat = plan("goyal-rn50", &["lr_steps=off", "warmup=off"]);
    let r = flat.rates(1_281_167);
    assert!(
        (flat
            .group_rate(crate::plan::ParamGroup::Weights, 14039, &r)
            .0
            - 3.2)
            .abs()
            < 1e-12
    );
}

/// `poly_lr`: on Goyal's recipe (156 steps an epoch), the lr of step t is
/// 3.2·(t + 1)/(36·156) through the warm-up, then 3.2·((1 − 0.0025)(1 −
/// p)^2.2 + 0.0025) with p = (t − 36·156)/(52·156), then 0.0025·3.2: the
/// rule written out here; the golden check against Fujitsu's own code is
/// `golden_tests::fujitsu_lr_matches_the_reference`.
#[test]
fn poly_lr_warms_up_from_zero_then_decays_by_its_power() {
    let p = plan("goyal-rn50", &["poly_lr=on", "lr_steps=off", "warmup=off"]);
    let r = p.rates(1_281_167);
    let lr = |s: u64| p.group_rate(crate::plan::ParamGroup::Weights, s, &r).0;
    let (w, d) = (36.0 * 156.0, 52.0 * 156.0);
    let by_hand = |t: u64| {
        let t = t as f64;
        let warm = if t + 1.0 < w { (t + 1.0) / w } else { 1.0 };
        let q = ((t - w).max(0.0) / d).min(1.0);
        3.2 * warm * (0.9975 * (1.0 - q).powf(2.2) + 0.0025)
    };
    for t in [0, 1, 5614, 5615, 5616, 5617, 8000, 13727, 13728, 14039] {
        assert!(
            (lr(t) - by_hand(t)).abs() < 1e-12 * 3.2,
            "step {t}: {} against {}",
            lr(t),
            by_hand(t)
        );
    }
    assert!((lr(0) - 3.2 / w).abs() < 1e-15);
    assert!((lr(14039) - 0.0025 * 3.2).abs() < 1e-12);
    // Off: the recipe's constant schedule.
    let flat = plan("goyal-rn50", &["lr_steps=off", "warmup=off"]);
    let r = flat.rates(1_281_167);
    assert_eq!(
        flat.group_rate(crate::plan::ParamGroup::Weights, 8000, &r)
            .0,
        3.2
    );
}

/// `stream`: batches come from the loader (random-resized crops of the
/// source's images, normalised with ImageNet's statistics), at the side
/// `res_ramp` gives each epoch; off, the in-memory pipeline feeds the run.
#[test]
fn stream_feeds_imagenet_normalised_crops_at_each_epochs_side() {
    use super::stream::{IMAGENET_MEAN, IMAGENET_STD, StreamFeed};
    use crate::data::stream::StreamData;
    let p = plan("tiny-ffcv-rn18", &["batch_size=16"]);
    let sp = p.data.stream.as_ref().expect("ffcv streams");
    // tiny: 24 px for epochs 0-1, 32 px from epoch 2 (res_ramp 1 -> 2).
    let sides: Vec<usize> = (0..3).map(|e| sp.res.at(e)).collect();
    assert_eq!(sides, [24, 24, 32]);
    let data = StreamData::open("synthetic:64", crate::data::load).unwrap();
    let mut feed = StreamFeed::new(
        &p,
        sp,
        data.train.clone(),
        Layout::of(&p),
        Device::Cpu,
        7,
        (0, 1),
    );
    for (epoch, side) in [(0, 24), (2, 32)] {
        feed.begin_epoch(epoch).unwrap();
        let (x, y) = feed.batch().unwrap().0.trained();
        assert_eq!(x.size(), [16, 3, side, side], "epoch {epoch}");
        assert_eq!(y.size(), [16]);
        // Normalised bytes: every value within ImageNet's normalised range.
        let ends = |v: f64| (0..3).map(move |c| (v - IMAGENET_MEAN[c]) / IMAGENET_STD[c]);
        let lo = ends(0.0).fold(f64::INFINITY, f64::min);
        let hi = ends(255.0).fold(f64::NEG_INFINITY, f64::max);
        assert!(x.min().double_value(&[]) >= lo - 1e-4);
        assert!(x.max().double_value(&[]) <= hi + 1e-4);
    }
    // The same seed and epoch: the same crops.
    feed.begin_epoch(0).unwrap();
    let a = feed.batch().unwrap().0.trained().0;
    feed.begin_epoch(0).unwrap();
    assert!(a.equal(&feed.batch().unwrap().0.trained().0));
    assert!(
        plan("tiny-ffcv-rn18", &["stream=off", "res_ramp=off"])
            .data
            .stream
            .is_none()
    );
    // Whitening needs images in memory: the catalog refuses it with a stream.
    let ov = [Override::Trick {
        key: "whitening".into(),
        on: true,
    }];
    let err = crate::recipe::resolve_plan("tiny-ffcv-rn18", &ov).unwrap_err();
    assert!(format!("{err:#}").contains("stream"), "{err:#}");
}

/// `momentum`: PyTorch SGD's heavy ball (FFCV, fast.ai, Goyal); `nesterov`
/// Page's and airbench's look-ahead; one excludes the other.
#[test]
fn momentum_is_the_heavy_ball_and_nesterov_looks_ahead() {
    let p = plan("tiny-ffcv-rn18", &[]);
    assert_eq!((p.optim.momentum, p.optim.nesterov), (0.9, false));
    let p = plan("tiny-airbench94", &[]);
    assert!(p.optim.nesterov && p.optim.momentum > 0.0);
    let ov = [Override::Trick {
        key: "nesterov".into(),
        on: true,
    }];
    assert!(crate::recipe::resolve_plan("tiny-ffcv-rn18", &ov).is_err());
    crate::optim::tests::sgd_torch_heavy_ball_two_steps_by_hand();
    crate::optim::tests::sgd_torch_nesterov_two_steps_by_hand();
}

/// A gang rank's stand-in step for a batch with no readable image: every
/// gradient it leaves is zero (its part of the all-reduce adds nothing),
/// its loss and correct count are zero, and the BN running statistics its
/// training-mode forward moved are put back.
#[test]
fn a_shadow_step_leaves_zero_gradients_and_the_running_statistics_alone() {
    let src = source();
    let p = plan("tiny-page-resnet9", &["preprocess_once=off"]);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = net_of(&p, &src, &vs);
    // By name: `variables()` is a map, in no fixed order.
    let running = || {
        let mut r: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(k, _)| k.contains("running_"))
            .collect();
        r.sort_by(|a, b| a.0.cmp(&b.0));
        r
    };
    let before: Vec<Tensor> = running().into_iter().map(|(_, t)| t.copy()).collect();
    assert!(!before.is_empty());
    let rng = Rng::new(Device::Cpu, 0);
    let trainee = Trainee {
        plan: &p,
        net: &net,
        rng: &rng,
        layout: Layout::of(&p),
        classes: src.classes,
        loss_scale: p.loss.scale,
        forward_done: None,
        sync: None,
        failed: Default::default(),
    };
    let x = Tensor::zeros([4, 3, 16, 16], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([4], (Kind::Int64, Device::Cpu));
    let (loss, correct) = trainee.shadow(&x, &y);
    trainee.check().unwrap();
    assert_eq!((loss.double_value(&[]), correct.int64_value(&[])), (0.0, 0));
    let params = net.param_groups().all_trainable();
    let with_grad = params.iter().filter(|t| t.grad().defined()).count();
    assert!(with_grad > 0, "no gradient reached the parameters");
    for t in params.iter().filter(|t| t.grad().defined()) {
        assert_eq!(t.grad().abs().max().double_value(&[]), 0.0);
    }
    for (a, (name, b)) in before.iter().zip(running()) {
        assert!(a.equal(&b), "{name} moved");
    }
}
