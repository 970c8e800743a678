//! The catalog against the recipes: every trick acts somewhere, and an
//! effect reads its parameters typed, with errors that name the fix.

use super::{recipe_names, resolve};
use crate::config::{RunConfig, Value};
use crate::tricks::{CATALOG, TrickSpec, build_plan, find, unchecked_plan};

/// A recipe's configuration with `key` forced on or off, its requirements on
/// and its conflicts off in both states, so that only the trick differs.
fn with_trick(recipe: &str, t: &TrickSpec, on: bool) -> RunConfig {
    let mut cfg = resolve(recipe, &[]).unwrap();
    for c in t.conflicts {
        cfg.tricks.get_mut(c.key()).unwrap().on = false;
    }
    for r in t.requires {
        cfg.tricks.get_mut(r.key()).unwrap().on = true;
    }
    cfg.tricks.get_mut(t.key).unwrap().on = on;
    cfg
}

#[test]
fn every_trick_changes_the_plan() {
    let recipes = recipe_names();
    for t in CATALOG {
        let mut acted_in = Vec::new();
        for recipe in &recipes {
            let (off, on) = (with_trick(recipe, t, false), with_trick(recipe, t, true));
            // A combination the trick refuses (say Page's whitening with negation) is
            // not a place where it acts; every trick must act somewhere.
            let (Ok(off), Ok(on)) = (unchecked_plan(&off), unchecked_plan(&on)) else {
                continue;
            };
            assert_ne!(
                off, on,
                "`{}` on leaves the plan of {recipe} unchanged",
                t.key
            );
            acted_in.push(*recipe);
        }
        assert!(!acted_in.is_empty(), "`{}` acts in no recipe", t.key);
    }
}

#[test]
fn an_effect_reads_typed_parameters_with_clear_errors() {
    let mut cfg = resolve("page-resnet9", &[]).unwrap();
    let t = find("label_smoothing").unwrap();
    let state = cfg.tricks.get_mut(t.key).unwrap();
    state.on = true;
    state.params.remove("alpha");
    let e = format!("{:#}", build_plan(&cfg).unwrap_err());
    assert!(
        e.contains("`alpha`") && e.contains("label_smoothing.alpha"),
        "{e}"
    );
    let state = cfg.tricks.get_mut(t.key).unwrap();
    state
        .params
        .insert("alpha".into(), Value::Text("lots".into()));
    let e = format!("{:#}", build_plan(&cfg).unwrap_err());
    assert!(e.contains("must be a finite number"), "{e}");
}

/// hiverge's switches carry their published values into the plan; their
/// effects are tested where they act (model, optim, train).
#[test]
fn speedrun_switches_carry_their_values_into_the_plan() {
    use crate::model::{Activation, Basis, Whitening};
    use crate::plan::{ColourJitter, NsDtype, NsVariant, Renorm};
    let plan = |tricks: &[&str]| {
        let ov: Vec<_> = tricks
            .iter()
            .map(|t| crate::config::Override::parse_trick(t).unwrap())
            .collect();
        super::resolve_plan("airbench94-muon", &ov).unwrap().1
    };
    assert!(matches!(
        plan(&["svd_whitening"]).net.whitening,
        Whitening::Airbench {
            basis: Basis::Svd,
            images: 960,
            ..
        }
    ));
    assert_eq!(
        plan(&["muon_norm_schedule"]).optim.muon.unwrap().renorm,
        Renorm::Growing {
            base: 2,
            growth: 15.0
        }
    );
    assert_eq!(
        plan(&["tta", "selective_tta"]).eval.tta_fraction,
        Some(0.25)
    );
    assert_eq!(
        plan(&["color_jitter"]).data.augment.jitter(),
        Some(ColourJitter {
            brightness: 0.1399,
            contrast: 0.1308,
        })
    );
    let muon = plan(&["batched_muon", "muon_fp16_momentum"])
        .optim
        .muon
        .unwrap();
    assert!(muon.batched && muon.half_momentum);
    // SiLU in the body, GELU kept in the stem.
    let silu = plan(&["silu"]).net;
    assert_eq!(
        (silu.act, silu.stem_act),
        (Activation::Silu, Some(Activation::Gelu))
    );
    // The record's settings.
    let r = super::resolve_plan("hiverge-speedrun", &[]).unwrap().1;
    let m = r.optim.muon.clone().unwrap();
    assert_eq!((m.ns, m.ns_dtype), (NsVariant::Speedrun, NsDtype::Filters));
    assert!((m.weight_decay - 1.0418e-6 * 1536.0).abs() < 1e-15);
    assert!((r.loss.smoothing - 0.09).abs() < 1e-12);
    assert!(r.precision.bn_half);
}

#[test]
fn settings_take_arithmetic_as_the_sources_write_it() {
    use super::arithmetic;
    let kilostep = 1.0 + 1.0 / (1.0 - 0.85);
    assert_eq!(
        arithmetic("0.0153 / (1 + 1/(1 - 0.85))"),
        Ok(0.0153 / kilostep)
    );
    assert_eq!(arithmetic("1.0418e-6 * 1536"), Ok(1.0418e-6 * 1536.0));
    assert_eq!(arithmetic(" 1/16 "), Ok(0.0625));
    assert_eq!(arithmetic("2 - 3 - 4"), Ok(-5.0));
    assert_eq!(arithmetic("-(2e+1)"), Ok(-20.0));
    assert!(arithmetic("1/(2").unwrap_err().contains("not closed"));
    assert!(arithmetic("2 3").unwrap_err().contains("unexpected `3`"));
    assert!(
        arithmetic("abc")
            .unwrap_err()
            .contains("`abc` is not a number")
    );
    assert!(arithmetic("").unwrap_err().contains("expected a number"));
    let bad = crate::config::Override::Set {
        key: "lr".into(),
        value: "1/(2".into(),
    };
    let e = super::resolve_plan("airbench94", &[bad]).unwrap_err();
    assert!(format!("{e:#}").contains("`lr=1/(2`"), "{e:#}");
}

/// `epochs` may name itself, read as its value before the change: the
/// speedrun's retuning take-back (7.59 epochs to 8) keeps its proportion
/// under `run --set epochs=1`, as the script matrix's patch does.
#[test]
fn epochs_may_scale_the_value_before_the_change() {
    use crate::config::Override;
    let set = |k: &str, v: &str| Override::Set {
        key: k.into(),
        value: v.into(),
    };
    let scaled = set("epochs", "epochs * 8 / 7.59");
    let full = super::resolve_plan("hiverge-speedrun", std::slice::from_ref(&scaled))
        .unwrap()
        .1;
    assert!((full.epochs - 8.0).abs() < 1e-12, "{}", full.epochs);
    let short = super::resolve_plan("hiverge-speedrun", &[set("epochs", "1"), scaled])
        .unwrap()
        .1;
    assert!(
        (short.epochs - 8.0 / 7.59).abs() < 1e-12,
        "{}",
        short.epochs
    );
    let e = super::resolve_plan("hiverge-speedrun", &[set("epochs", "epochs - 8")]).unwrap_err();
    assert!(format!("{e:#}").contains("must be > 0"), "{e:#}");
}

/// A run no longer than the EMA's lr floor has no Page schedule (its knots
/// [0, E/5, E − floor] would run backwards): refused in one line naming the
/// setting, never flattened to the floor.
#[test]
fn a_run_no_longer_than_the_ema_floor_is_refused_not_flattened() {
    let set = |s: &str| crate::config::Override::parse_set(s).unwrap();
    let e = format!(
        "{:#}",
        super::resolve_plan("page-final", &[set("epochs=1")]).unwrap_err()
    );
    assert!(
        e.contains("ema.floor_epochs") && e.contains("whole run of 1") && !e.contains('\n'),
        "{e}"
    );
    // Shorter than the run, it keeps its shape: up to the peak, down to the floor.
    let (_, p) = super::resolve_plan(
        "page-final",
        &[set("epochs=1"), set("ema.floor_epochs=0.2")],
    )
    .unwrap();
    let m = p.schedule.multipliers(100, 100);
    assert!(
        m[10] > 0.4 && m[19] > 0.9 && (m[99] - 0.1).abs() < 1e-9,
        "{m:?}"
    );
}

/// A `batch_size` edit steps as the edited script would: airbench's lr and
/// decay are per example (the summed loss under `lr / kilostep_scale`, the
/// decay `wd * batch_size`), hlb's gradient step is per batch (its loss is
/// scaled by 512/batchsize) but its decay per example, Muon's own lr per
/// step, and Page's and FFCV's everything per batch.
#[test]
fn a_batch_edit_scales_the_step_as_each_reference_does() {
    use crate::plan::{ParamGroup, RunPlan};
    let set = |s: &str| crate::config::Override::parse_set(s).unwrap();
    let at = |recipe: &str, batch: &str| -> RunPlan {
        super::resolve_plan(recipe, &[set(&format!("batch_size={batch}"))])
            .unwrap()
            .1
    };
    // A group's (lr, decay) at the schedule's peak.
    let first = |p: &RunPlan, g: ParamGroup| {
        let peak = crate::plan::StepRates {
            total: 1,
            per_epoch: 1,
            epoch_steps: vec![1],
            main: vec![1.0],
            whiten_bias_steps: None,
        };
        p.group_rate(g, 0, &peak)
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-30);
    let halved = |recipe: &str, g: ParamGroup, want: (f64, f64)| {
        let (full, half) = (first(&at(recipe, "1024"), g), first(&at(recipe, "512"), g));
        assert!(
            close(half.0, want.0 * full.0) && close(half.1, want.1 * full.1),
            "{recipe} {g:?} at half the batch: (lr, decay) {half:?} against {full:?}, want × {} and × {}",
            want.0,
            want.1
        );
    };
    for (recipe, group, want) in [
        ("airbench94", ParamGroup::Weights, (0.5, 0.5)),
        ("airbench94", ParamGroup::BnBiases, (0.5, 0.5)),
        ("airbench94-muon", ParamGroup::BnBiases, (0.5, 0.5)),
        ("airbench94-muon", ParamGroup::Weights, (0.5, 0.5)),
        ("airbench94-muon", ParamGroup::Filters, (1.0, 1.0)),
        ("hiverge-speedrun", ParamGroup::Filters, (1.0, 0.5)),
        ("hlb", ParamGroup::Weights, (1.0, 0.5)),
        ("page-final", ParamGroup::Weights, (1.0, 1.0)),
        ("ffcv-rn18", ParamGroup::Weights, (1.0, 1.0)),
    ] {
        halved(recipe, group, want);
    }
    // At the written batch, the values as the recipes state them: airbench94's
    // mean-loss lr 11.5 / kilostep and per-step decay 0.0153 / kilostep.
    let kilostep = 1.0 + 1.0 / (1.0 - 0.85);
    let (lr, decay) = first(&at("airbench94", "1024"), ParamGroup::Weights);
    assert!(close(lr, 11.5 / kilostep) && close(decay, 0.0153 / kilostep));
    // The script's own batch, 2000, against airbench94-muon's: 0.053 a summed
    // example, so 0.053 × 1000 at batch 1000, the decay 2e-6 × 1000.
    let (lr, decay) = first(&at("airbench94-muon", "1000"), ParamGroup::BnBiases);
    assert!(close(lr, 53.0) && close(decay, 2e-3), "{lr} {decay}");
    // The tiny forms keep the measured per-batch peaks.
    let tiny = super::resolve_plan("tiny-airbench94", &[]).unwrap().1;
    assert!(close(tiny.optim.lr, 11.5 / kilostep));
}

/// cifar10_speedrun.py holds CIFAR_MEAN and CIFAR_STD in fp16 and the
/// airbench scripts in float32: each recipe normalises with its own
/// script's rounding, the written-out fp16 values being libtorch's.
#[test]
fn each_airbench_recipe_normalises_with_its_scripts_rounding() {
    use crate::plan::Norm;
    let rounded = |v: f64, k: tch::Kind| {
        tch::Tensor::from(v)
            .to_kind(k)
            .to_kind(tch::Kind::Double)
            .double_value(&[])
            * 255.0
    };
    let published = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]);
    for (norm, kind) in [
        (Norm::AIRBENCH, tch::Kind::Float),
        (Norm::AIRBENCH_FP16, tch::Kind::Half),
    ] {
        for c in 0..3 {
            assert_eq!(norm.mean[c], rounded(published.0[c], kind), "{kind:?}");
            assert_eq!(norm.std[c], rounded(published.1[c], kind), "{kind:?}");
        }
    }
    let norm = |r: &str| super::resolve_plan(r, &[]).unwrap().1.data.norm;
    assert_eq!(norm("hiverge-speedrun"), Norm::AIRBENCH_FP16);
    assert_eq!(norm("airbench94-muon"), Norm::AIRBENCH);
    assert_eq!(norm("airbench94"), Norm::AIRBENCH);
}

/// Each recipe's augmentation is the ordered list its script applies, in
/// that order whatever order the tricks were switched on in.
#[test]
fn augmentation_is_each_scripts_ordered_list() {
    use crate::plan::{AugOp, Augment, ColourJitter};
    let ops = |recipe: &str| super::resolve_plan(recipe, &[]).unwrap().1.data.augment;
    let flip = |alternating| AugOp::Flip { alternating };
    assert_eq!(
        ops("airbench94").ops,
        [AugOp::PadCrop { pad: 2 }, flip(true)]
    );
    assert_eq!(
        ops("page-resnet9").ops,
        [
            AugOp::PadCrop { pad: 4 },
            flip(false),
            AugOp::Cutout { size: 8 }
        ]
    );
    let speedrun = ops("hiverge-speedrun");
    assert_eq!(speedrun.ops[0], AugOp::PadCrop { pad: 2 });
    assert!(matches!(speedrun.ops.last(), Some(AugOp::Jitter(_))));
    assert_eq!(
        ops("ffcv-rn18").ops,
        [
            AugOp::ResizedCrop {
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0)
            },
            flip(false)
        ]
    );
    assert_eq!(
        ops("ffcv-rn18").describe(),
        "resized_crop(area 0.080–1.000, ratio 0.750–1.333) → flip(p 0.5)"
    );
    // Set backwards, kept in the pipeline's order; a second of a kind replaces.
    let mut a = Augment::default();
    let j = ColourJitter {
        brightness: 0.1,
        contrast: 0.2,
    };
    for op in [
        AugOp::Jitter(j),
        AugOp::Cutout { size: 3 },
        flip(false),
        AugOp::PadCrop { pad: 4 },
        flip(true),
    ] {
        a.set(op);
    }
    assert_eq!(
        a.ops,
        [
            AugOp::PadCrop { pad: 4 },
            flip(true),
            AugOp::Cutout { size: 3 },
            AugOp::Jitter(j)
        ]
    );
    assert_eq!(
        a.describe(),
        "crop(reflect pad 4) → flip(alternating) → cutout(3×3) → colour_jitter(brightness ±0.1, contrast ±0.2)"
    );
}

/// `ghost_bn.size` keeps Goyal's n = 32 images per BatchNorm batch at any
/// world size and accumulation, and refuses a micro-batch it does not
/// divide, naming both numbers.
#[test]
fn goyal_normalises_over_32_images_at_any_world_size() {
    use crate::config::Override;
    let plan = |sets: &[&str], tricks: &[&str]| {
        let ov: Vec<Override> = sets
            .iter()
            .map(|s| Override::parse_set(s).unwrap())
            .chain(tricks.iter().map(|t| Override::parse_trick(t).unwrap()))
            .collect();
        super::resolve_plan("goyal-rn50", &ov).map(|(_, p)| p)
    };
    let at = |sets: &[&str], tricks: &[&str]| {
        let p = plan(sets, tricks).unwrap();
        (p.net.bn.ghost_splits, p.bn_batch())
    };
    assert_eq!(at(&[], &[]), (32, 32), "world size 8");
    assert_eq!(at(&["world_size=1"], &[]), (256, 32));
    assert_eq!(
        at(&["world_size=2", "grad_accum.steps=4"], &["grad_accum"]),
        (32, 32)
    );
    // The resolved values `matrix show --format json` prints.
    assert_eq!(plan(&[], &[]).unwrap().resolved().bn_batch, 32);
    let e = plan(&["batch_size=8000"], &[]).unwrap_err().to_string();
    assert!(
        e.contains("ghost_bn.size = 32") && e.contains("the 1000 images a rank takes"),
        "{e}"
    );
    // Splits set while the size decides: refused, not ignored.
    let e = plan(&["ghost_bn.splits=16"], &[]).unwrap_err().to_string();
    assert!(
        e.contains("ghost_bn.splits = 16 has no effect while ghost_bn.size = 32"),
        "{e}"
    );
    // The size off: the count of splits, as before.
    assert_eq!(
        at(
            &["ghost_bn.size=0", "ghost_bn.splits=8", "world_size=1"],
            &[]
        ),
        (8, 1024)
    );
}

/// `--set epochs=N` names the settings counted in absolute epochs that keep
/// their value (FFCV's resolution ramp, Goyal's warm-up and steps), and says
/// nothing where the length is the recipe's or those settings are set too.
#[test]
fn a_changed_length_names_the_settings_in_epochs_it_leaves() {
    use crate::config::Override;
    let note = |recipe: &str, sets: &[&str]| {
        let ov: Vec<Override> = sets
            .iter()
            .map(|s| Override::parse_set(s).unwrap())
            .collect();
        super::unscaled_epoch_settings(recipe, &ov).unwrap()
    };
    let ffcv = note("ffcv-rn18", &["epochs=88"]).expect("a note");
    assert!(
        ffcv.contains("epochs = 88 (the recipe's 16)")
            && ffcv.contains("res_ramp.start_ramp = 11, res_ramp.end_ramp = 13")
            && ffcv.contains("× 5.5000"),
        "{ffcv}"
    );
    let goyal = note("goyal-rn50", &["epochs=45"]).expect("a note");
    assert!(
        goyal.contains("warmup.epochs = 5") && goyal.contains("lr_steps.at3 = 80"),
        "{goyal}"
    );
    assert_eq!(note("ffcv-rn18", &["epochs=16"]), None);
    assert_eq!(note("ffcv-rn18", &["lr=0.4"]), None);
    assert_eq!(
        note(
            "ffcv-rn18",
            &[
                "epochs=88",
                "res_ramp.start_ramp=65",
                "res_ramp.end_ramp=76"
            ]
        ),
        None
    );
    // A recipe with nothing counted in epochs.
    assert_eq!(note("page-resnet9", &["epochs=30"]), None);
}
