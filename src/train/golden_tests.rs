//! tricklab's maths against numbers the published code computed
//! (`tests/golden/<recipe>.json`, written by `scripts/golden/make_golden.py`
//! from fetched copies of the references; `scripts/golden/SOURCES.md` says
//! which function each value comes from). Every value here is reached
//! through the recipe's own plan, as a run reaches it: the schedule, the
//! averaging, the optimiser built for the group, the whitening, the jitter,
//! the TTA and the loss.

use super::build::{base_lr, build_optimizer};
use super::eval::tta_of;
use super::step::batch_loss;
use crate::optim::{Group, Muon, Optimizer, newton_schulz, orthogonalise};
use crate::plan::{AvgAction, ParamGroup, RunPlan};
use serde_json::Value;
use tch::{Kind, Tensor};

const RECIPES: [&str; 5] = [
    "page-final",
    "airbench94",
    "airbench94-muon",
    "hiverge-speedrun",
    "hlb",
];

fn golden(recipe: &str) -> Value {
    let path = format!("{}/tests/golden/{recipe}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn plan(recipe: &str) -> RunPlan {
    crate::recipe::resolve_plan(recipe, &[])
        .unwrap_or_else(|e| panic!("{recipe}: {e:#}"))
        .1
}

/// Each reference's names for its parameter groups.
fn group_of(recipe: &str, name: &str) -> ParamGroup {
    match (recipe, name) {
        (_, "weights" | "other" | "non_bias" | "head") => ParamGroup::Weights,
        (_, "bn_biases" | "norm_biases" | "bias") => ParamGroup::BnBiases,
        (_, "whiten_bias") => ParamGroup::WhitenBias,
        (_, "filters") => ParamGroup::Filters,
        _ => panic!("{recipe}: no tricklab group for the reference's `{name}`"),
    }
}

/// The generator's inputs: splitmix64 uniforms on [lo, hi), built in f64 and
/// rounded to f32, row-major.
pub(super) fn input(spec: &Value) -> Tensor {
    let seed = spec["seed"].as_u64().expect("seed");
    let shape: Vec<i64> = spec["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_i64().expect("dim"))
        .collect();
    let (lo, hi) = (f(&spec["lo"]), f(&spec["hi"]));
    let n: i64 = shape.iter().product();
    let mut rng = crate::util::splitmix::SplitMix64(seed);
    let vals: Vec<f32> = (0..n)
        .map(|_| (lo + (hi - lo) * rng.unit_f64()) as f32)
        .collect();
    Tensor::from_slice(&vals).reshape(shape)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("array").iter().map(f).collect()
}

/// A JSON list of things or a single thing, as a list.
fn list(v: &Value) -> Vec<&Value> {
    match v.as_array() {
        Some(a) => a.iter().collect(),
        None => vec![v],
    }
}

/// `got` against an output `{shape, values}`: same shape, and the largest
/// difference within `tol` times the output's largest magnitude.
fn assert_tensor(what: &str, got: &Tensor, want: &Value, tol: f64) {
    let shape: Vec<i64> = want["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_i64().expect("dim"))
        .collect();
    assert_eq!(got.size(), shape, "{what}: shape");
    let want = floats(&want["values"]);
    let got: Vec<f64> = Vec::<f64>::try_from(got.to_kind(Kind::Double).flatten(0, -1)).unwrap();
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    let (i, worst) = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .enumerate()
        .fold((0, 0.0), |b, (i, d)| if d > b.1 { (i, d) } else { b });
    assert!(
        worst <= tol * scale,
        "{what}: element {i} is {} where the reference has {} (difference {worst:.3e}, allowed {:.3e})",
        got[i],
        want[i],
        tol * scale
    );
}

fn assert_rel(what: &str, got: f64, want: f64, tol: f64, scale: f64) {
    assert!(
        (got - want).abs() <= tol * scale.max(want.abs()),
        "{what}: tricklab {got}, reference {want}"
    );
}

/// Every step's lr and decay of every group, in mean-loss units.
#[test]
fn schedules_match_the_references_step_by_step() {
    for recipe in RECIPES {
        let g = golden(recipe);
        let sch = &g["schedule"];
        let p = plan(recipe);
        let r = p.rates(sch["train_images"].as_u64().unwrap());
        assert_eq!(
            p.batch_size as u64,
            sch["batch_size"].as_u64().unwrap(),
            "{recipe}: batch"
        );
        assert_eq!(
            r.per_epoch,
            sch["steps_per_epoch"].as_u64().unwrap(),
            "{recipe}: steps an epoch"
        );
        assert_eq!(
            r.total,
            sch["total_steps"].as_u64().unwrap(),
            "{recipe}: steps"
        );
        for (name, want) in sch["groups"].as_object().unwrap() {
            let group = group_of(recipe, name);
            let (lr, decay) = (floats(&want["lr"]), floats(&want["decay"]));
            let lr_scale = lr.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let decay_scale = decay.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for s in 0..r.total {
                let (l, d) = p.group_rate(group, s, &r);
                let at = format!("{recipe} {name} step {s}");
                assert_rel(
                    &format!("{at} lr"),
                    l,
                    lr[s as usize],
                    1e-9,
                    lr_scale * 1e-6,
                );
                assert_rel(
                    &format!("{at} decay"),
                    d,
                    decay[s as usize],
                    1e-9,
                    decay_scale * 1e-6,
                );
            }
        }
        if let Some(steps) = g["whiten_bias_steps"].as_u64() {
            assert_eq!(
                r.whiten_bias_steps,
                Some(steps),
                "{recipe}: whitening bias steps"
            );
        }
    }
}

/// FFCV's ImageNet lr, step by step, and its training side, epoch by epoch
/// (`ffcv.json`, from `get_cyclic_lr`, `train_loop`'s interpolation and
/// `get_resolution` of train_imagenet.py), for each of its 12 configs
/// (rn18 and rn50 at 16, 24, 32, 40, 56 and 88 epochs) through the plan of
/// the recipe that is that config, as shipped: ffcv-rn18, ffcv-rn18-24, …
#[test]
fn ffcv_lr_and_resolution_match_the_reference() {
    let g = golden("ffcv");
    let n = g["imagenet_train_images"].as_u64().unwrap();
    let configs = g["configs"].as_object().unwrap();
    assert_eq!(configs.len(), 12);
    for (name, c) in configs {
        let epochs = c["epochs"].as_u64().unwrap();
        let arch = &name[..4];
        let recipe = match epochs {
            16 => format!("ffcv-{arch}"),
            e => format!("ffcv-{arch}-{e}"),
        };
        let p = crate::recipe::resolve_plan(&recipe, &[]).unwrap().1;
        assert_eq!(p.epochs, epochs as f64, "{name}");
        let r = p.rates(n);
        assert_eq!(
            p.batch_size as u64,
            c["batch_size"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            r.per_epoch,
            c["steps_per_epoch"].as_u64().unwrap(),
            "{name}"
        );
        let lr = |s: u64| p.group_rate(ParamGroup::Weights, s, &r).0;
        let peak = f(&c["lr"]);
        for (e, want) in floats(&c["lr_at_epoch"]).into_iter().enumerate() {
            let s = e as u64 * r.per_epoch;
            if s < r.total {
                assert_rel(
                    &format!("{name} lr at epoch {e}"),
                    lr(s),
                    want,
                    1e-9,
                    peak * 1e-9,
                );
            }
        }
        for (e, want) in c["lr_steps_of_epoch"].as_object().unwrap() {
            let e: u64 = e.parse().unwrap();
            for (i, want) in floats(want).into_iter().enumerate() {
                let s = e * r.per_epoch + i as u64;
                let at = format!("{name} epoch {e} step {i}");
                assert_rel(&at, lr(s), want, 1e-9, peak * 1e-9);
            }
        }
        let sp = p.data.stream.as_ref().expect("the ffcv recipes stream");
        let sides: Vec<u64> = (0..epochs as usize).map(|e| sp.res.at(e) as u64).collect();
        let want: Vec<u64> = c["resolution"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(sides, want, "{name}: side by epoch");
        assert_eq!(
            sp.eval_size as u64,
            c["val_res"].as_u64().unwrap(),
            "{name}"
        );
    }
}

/// Fujitsu's ResNet-50 schedule (`fujitsu.json`, from its MLPerf v0.6 code:
/// fit.py's own parser over JobScripts/parameters, MXNet's
/// MultiFactorScheduler warm-up at the update count and the explorer's power
/// decay as `mlperf_fit` drives it): every one of the 1,350 steps' lr through
/// fujitsu-rn50's plan at the code's 15 steps an epoch, and the values the
/// recipe takes from the same file.
#[test]
fn fujitsu_lr_matches_the_reference() {
    let g = golden("fujitsu");
    let p = plan("fujitsu-rn50");
    let per = g["steps_per_epoch"].as_u64().unwrap();
    let batch = g["global_batch"].as_u64().unwrap();
    assert_eq!(p.batch_size as u64, batch);
    assert_eq!(p.world_size as u64, g["gpus"].as_u64().unwrap());
    assert_eq!(p.bn_batch() as u64, g["batch_per_gpu"].as_u64().unwrap());
    assert_eq!(p.epochs, f(&g["epochs"]));
    assert_eq!(p.optim.momentum, f(&g["momentum"]));
    assert_eq!(p.optim.weight_decay, f(&g["wd"]));
    assert_eq!(p.loss.smoothing, f(&g["label_smoothing"]));
    // An epoch of the code's 15 steps (its last batch padded; ImageNet's
    // 1,281,167 images give tricklab 14 at drop_last, a listed difference).
    let r = p.rates(per * batch);
    assert_eq!((r.per_epoch, r.total), (per, per * 90));
    let want = floats(&g["lr"]);
    assert_eq!(want.len() as u64, r.total);
    let peak = f(&g["lr_peak"]);
    for (s, &w) in want.iter().enumerate() {
        let got = p.group_rate(ParamGroup::Weights, s as u64, &r).0;
        assert_rel(&format!("lr of step {s}"), got, w, 1e-12, peak);
    }
}

/// fast.ai's ImageNet phases (`fastai.json`, from train.py's four schedules
/// through train_imagenet_nv.py's own `Scheduler.get_lr`, and its
/// DataManager's reading of the data phases): through fastai-rn50's plan at
/// each machine count, every epoch's steps, global batch, side, crop scale
/// and validation, and the lr of every step of the epochs where a phase
/// starts (and the first step of every epoch).
#[test]
fn fastai_phases_match_the_reference() {
    let g = golden("fastai");
    let n = g["imagenet_train_images"].as_u64().unwrap();
    for (machines, sch) in g["schedules"].as_object().unwrap() {
        let over: Vec<crate::config::Override> = [
            format!("fastai_phases.machines={machines}"),
            format!("lr={}", f(&sch["lr"])),
        ]
        .iter()
        .map(|s| crate::config::Override::parse_set(s).unwrap())
        .collect();
        let p = crate::recipe::resolve_plan("fastai-rn50", &over).unwrap().1;
        let r = p.rates(n);
        let sp = p.data.stream.as_ref().unwrap();
        assert_eq!(p.epochs, f(&sch["epochs"]), "{machines} machines: epochs");
        let mut starts = vec![0u64];
        for e in sch["per_epoch"].as_array().unwrap() {
            let epoch = e["epoch"].as_u64().unwrap() as usize;
            let at = format!("{machines} machines, epoch {epoch}");
            assert_eq!(
                p.batch_at(epoch) as u64,
                e["batch"].as_u64().unwrap(),
                "{at}"
            );
            assert_eq!(r.epoch_steps[epoch], e["steps"].as_u64().unwrap(), "{at}");
            let ph = sp.at(epoch);
            assert_eq!(ph.size as u64, e["side"].as_u64().unwrap(), "{at}");
            assert_eq!(ph.min_scale, Some(f(&e["min_scale"])), "{at}");
            assert_eq!(ph.rect_val, e["rect_val"].as_bool().unwrap(), "{at}");
            let resize = e["val_resize"].as_u64().unwrap() as f64;
            assert!(
                (ph.eval_ratio - ph.size as f64 / resize).abs() < 1e-12,
                "{at}"
            );
            starts.push(starts[epoch] + r.epoch_steps[epoch]);
        }
        assert_eq!(
            r.total,
            *starts.last().unwrap(),
            "{machines} machines: steps"
        );
        let lr = |s: u64| p.group_rate(ParamGroup::Weights, s, &r).0;
        for (e, want) in floats(&sch["lr_first_step"]).into_iter().enumerate() {
            let at = format!("{machines} machines, epoch {e} step 0");
            assert_rel(&at, lr(starts[e]), want, 1e-12, 1.0);
        }
        for (e, want) in sch["lr_steps_of_epoch"].as_object().unwrap() {
            let e: usize = e.parse().unwrap();
            for (i, want) in floats(want).into_iter().enumerate() {
                let at = format!("{machines} machines, epoch {e} step {i}");
                assert_rel(&at, lr(starts[e] + i as u64), want, 1e-12, 1.0);
            }
        }
    }
}

/// When the average starts, when it updates and by how much.
#[test]
fn averaging_fires_when_and_as_the_references_do() {
    for recipe in ["page-final", "airbench94", "hlb"] {
        let g = golden(recipe);
        let p = plan(recipe);
        let r = p.rates(g["schedule"]["train_images"].as_u64().unwrap());
        let actions = p.averaging.schedule(r.total, r.per_epoch);
        let snapshot = actions
            .iter()
            .find(|(_, a)| *a == AvgAction::Snapshot)
            .map(|(t, _)| *t);
        assert_eq!(
            snapshot,
            g["averaging"]["snapshot_step"].as_u64(),
            "{recipe}: snapshot"
        );
        let got: Vec<(u64, f64)> = actions
            .iter()
            .filter_map(|(t, a)| match a {
                AvgAction::Update { decay, .. } => Some((*t, *decay)),
                _ => None,
            })
            .collect();
        let want: Vec<(u64, f64)> = g["averaging"]["updates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u[0].as_u64().unwrap(), f(&u[1])))
            .collect();
        let steps = |v: &[(u64, f64)]| v.iter().map(|u| u.0).collect::<Vec<_>>();
        assert_eq!(steps(&got), steps(&want), "{recipe}: update steps");
        for ((t, d), (_, w)) in got.iter().zip(&want) {
            // airbench's decay is computed in float32.
            assert_rel(&format!("{recipe} decay after step {t}"), *d, *w, 1e-6, 0.0);
        }
    }
}

/// hiverge's growing renormalisation interval (37 of 243 steps) and
/// airbench94_muon's every step.
#[test]
fn muon_renormalises_at_the_references_steps() {
    for recipe in ["airbench94-muon", "hiverge-speedrun"] {
        let g = golden(recipe);
        let p = plan(recipe);
        let r = p.rates(g["schedule"]["train_images"].as_u64().unwrap());
        let renorm = p.optim.muon.as_ref().expect("muon").renorm;
        let want: Vec<u64> = g["renorm_steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(Muon::renorm_steps(renorm, r.total), want, "{recipe}");
    }
}

/// The reference optimiser's first steps from the same weights and
/// gradients: the group's optimiser as a run builds it, stepped at the lr
/// the run hands it.
#[test]
fn optimiser_steps_match_the_references_weights() {
    for recipe in RECIPES {
        let g = golden(recipe);
        let p = plan(recipe);
        let sch = &g["schedule"];
        let r = p.rates(sch["train_images"].as_u64().unwrap());
        // The references' gradients are of their summed loss (hlb's halved).
        let scale = p.batch_size as f64 * f(&sch["loss_per_example"]);
        for os in g["optimizer_steps"].as_array().unwrap() {
            let name = os["group"].as_str().unwrap();
            let group = group_of(recipe, name);
            let ws: Vec<Tensor> = list(&os["w0"])
                .into_iter()
                .map(|s| input(s).set_requires_grad(true))
                .collect();
            let params: Vec<Tensor> = ws.iter().map(Tensor::shallow_clone).collect();
            let mut opt: Box<dyn Optimizer> = match (&p.optim.muon, group) {
                (Some(m), ParamGroup::Filters) => {
                    Box::new(Muon::new(vec![Group::new(params)], m.options(r.total)))
                }
                _ => {
                    let (lr, wd) = p.optim.mults(group);
                    build_optimizer(&p.optim, vec![Group::with_mults(params, lr, wd)])
                }
            };
            opt.set_loss_scale(scale);
            // Measured: SGD agrees to the last bit, Muon to ~3e-7 (its
            // Newton–Schulz). hiverge's fp16 momentum buffer rounds the
            // momentum scalar to fp16 on the CPU (0.655 → 0.65479) on both
            // sides here; on CUDA both multiply in fp32.
            let tol = match group {
                ParamGroup::Filters => 2e-6,
                _ => 1e-6,
            };
            let grads = os["grads"].as_array().unwrap();
            for (k, step_grads) in grads.iter().enumerate() {
                for (w, spec) in ws.iter().zip(list(step_grads)) {
                    let mut gw = w.grad();
                    if !gw.defined() {
                        // A first backward leaves the gradient tensor behind.
                        (w * 0.0).sum(Kind::Float).backward();
                        gw = w.grad();
                    }
                    tch::no_grad(|| gw.copy_(&input(spec)));
                }
                opt.step(base_lr(&p, group, k as u64, &r));
                for (i, (w, want)) in ws.iter().zip(list(&os["w"][k])).enumerate() {
                    let what = format!("{recipe} {name}[{i}] after step {k}");
                    assert_tensor(&what, w, want, tol);
                }
            }
        }
    }
}

/// Newton–Schulz as airbench94_muon (bf16, one matrix) and hiverge (fp32,
/// every filter batched, the magnitude at the step) compute it.
#[test]
fn newton_schulz_matches_the_references() {
    let g = golden("airbench94-muon");
    let m = plan("airbench94-muon").optim.muon.unwrap();
    for case in g["newton_schulz"].as_array().unwrap() {
        let x = input(&case["inputs"][0]);
        let out = newton_schulz(&x, m.ns_steps, m.ns, Kind::BFloat16, 1.0);
        // Bit-exact when the rounding order is airbench's; one bf16 ulp allowed.
        assert_tensor("airbench94-muon NS", &out, list(&case["output"])[0], 4e-3);
    }
    let g = golden("hiverge-speedrun");
    let p = plan("hiverge-speedrun");
    let case = &g["newton_schulz"][0];
    let params = &case["params"];
    let o = p
        .optim
        .muon
        .unwrap()
        .options(params["total_steps"].as_u64().unwrap());
    let grads: Vec<Tensor> = list(&case["inputs"]).into_iter().map(input).collect();
    let progress = f(&params["current_step"]) / f(&params["total_steps"]);
    let out = orthogonalise(&grads, &o, progress);
    for (i, (got, want)) in out.iter().zip(list(&case["output"])).enumerate() {
        assert_tensor(&format!("hiverge NS[{i}]"), got, want, 1e-5);
    }
}

/// The frozen whitening filters from the same images.
#[test]
fn whitening_filters_match_the_references() {
    for recipe in RECIPES {
        let g = golden(recipe);
        let w = &g["whitening"];
        let mut whitening = plan(recipe).net.whitening;
        if let crate::model::Whitening::Airbench {
            basis: crate::model::Basis::HlbChunks { chunk },
            ..
        } = &mut whitening
        {
            // hlb splits its 5000 images in chunks of `whiten_splits`.
            *chunk = w["params"]["whiten_splits"].as_u64().unwrap() as usize;
        }
        let got = crate::model::whitening_filters(&whitening, &input(&w["images"]))
            .unwrap()
            .expect("the recipe whitens");
        // An eigenvector's sign is LAPACK's choice and differs between CPUs
        // (AVX2 against AVX-512 kernels): a filter and its negative whiten
        // alike, so each filter takes the sign of the reference's.
        let want = Tensor::from_slice(
            &floats(&w["weight"]["values"])
                .iter()
                .map(|v| *v as f32)
                .collect::<Vec<_>>(),
        )
        .reshape(got.size());
        let dims: Vec<i64> = (1..got.dim() as i64).collect();
        let agree = (&got * &want).sum_dim_intlist(&dims[..], true, Kind::Float);
        let got = &got * (agree.ge(0.0).to_kind(Kind::Float) * 2.0 - 1.0);
        // Eigenvectors of a 27x27 (or 12x12) patch covariance in float32: its
        // smallest eigenvalues are ill-conditioned, so the BLAS kernel's
        // summation order (AVX2 against AVX-512) moves filters by up to ~6e-4
        // of their largest value; a wrong eps, scale or basis moves them by
        // far more than 2e-3.
        assert_tensor(&format!("{recipe} whitening"), &got, &w["weight"], 2e-3);
    }
}

/// hiverge's colour jitter from the same uniforms.
#[test]
fn colour_jitter_matches_the_reference() {
    let g = golden("hiverge-speedrun");
    let j = &g["jitter"];
    let jitter = plan("hiverge-speedrun")
        .data
        .augment
        .jitter()
        .expect("jitter on");
    assert_rel(
        "brightness",
        jitter.brightness,
        f(&j["brightness_range"]),
        1e-12,
        0.0,
    );
    assert_rel(
        "contrast",
        jitter.contrast,
        f(&j["contrast_range"]),
        1e-12,
        0.0,
    );
    let out = super::jitter_with(
        &input(&j["x"]),
        &input(&j["u_brightness"]),
        &input(&j["u_contrast"]),
        &jitter,
    );
    assert_tensor("hiverge jitter", &out, &j["output"], 1e-6);
}

/// Test-time augmentation of a linear net: which views, their weights and
/// (hiverge) which images get them.
#[test]
fn tta_matches_the_references() {
    for recipe in RECIPES {
        let g = golden(recipe);
        let t = &g["tta"];
        let p = plan(recipe);
        assert_eq!(
            p.eval.tta_level as u64,
            t["level"].as_u64().unwrap(),
            "{recipe}: level"
        );
        assert_eq!(
            p.eval.tta_fraction,
            t["selective_fraction"].as_f64(),
            "{recipe}: fraction"
        );
        let w = input(&t["W"]).flatten(1, -1);
        let forward = |x: &Tensor| x.flatten(1, -1).matmul(&w.tr());
        let x = input(&t["images"]);
        let got = tta_of(&p.eval, &forward, &x, &forward(&x));
        assert_tensor(&format!("{recipe} TTA"), &got, &t["logits"], 1e-6);
    }
}

/// The training loss, label smoothing included, in the reference's units.
#[test]
fn loss_matches_the_references() {
    for recipe in RECIPES {
        let g = golden(recipe);
        let l = &g["loss"];
        let p = plan(recipe);
        assert_rel(
            &format!("{recipe} smoothing"),
            p.loss.smoothing,
            f(&l["smoothing"]),
            1e-12,
            0.0,
        );
        let logits = input(&l["logits"]);
        let labels: Vec<i64> = l["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let mean = batch_loss(&p.loss, &logits, &Tensor::from_slice(&labels), None);
        let n = labels.len() as f64;
        let got = mean.double_value(&[]) * n * f(&l["loss_per_example"]);
        assert_rel(&format!("{recipe} loss"), got, f(&l["value"]), 1e-6, 0.0);
    }
}
