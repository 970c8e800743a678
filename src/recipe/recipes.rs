//! The base recipes, with the numbers of TRICKS.md (1.2, 1.4, 1.5, 2.1, 2.2).
//! `tiny-*` variants keep every trick and shrink width, epochs, batch and data
//! so that a run takes seconds on two CPU cores.

use super::{OptimizerKind, RunConfig, ScheduleKind};
use crate::config::Override;
use crate::model::Arch;
use std::collections::BTreeMap;

pub struct Recipe {
    pub name: &'static str,
    pub help: &'static str,
    pub base: fn() -> RunConfig,
    /// Tricks and trick parameters on top of the catalog's off states.
    pub tricks: fn() -> Vec<Override>,
}

fn on(keys: &[&str]) -> Vec<Override> {
    keys.iter()
        .map(|k| Override::Trick {
            key: k.to_string(),
            on: true,
        })
        .collect()
}

fn set(pairs: &[(&str, &str)]) -> Vec<Override> {
    pairs
        .iter()
        .map(|(k, v)| Override::Set {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect()
}

fn page_base(arch: Arch, epochs: f64, batch: usize, lr: f64) -> RunConfig {
    RunConfig {
        recipe: String::new(),
        arch,
        width_mult: 1.0,
        epochs,
        batch_size: batch,
        lr,
        momentum: 0.9,
        weight_decay: 5e-4,
        optimizer: OptimizerKind::SgdPage,
        schedule: ScheduleKind::Page,
        peak_epoch: 5.0 / 24.0,
        final_lr_frac: 0.0,
        train_per_class: 0,
        test_per_class: 0,
        eval_every: 1,
        metrics_every: 10,
        tricks: BTreeMap::new(),
        overrides: Vec::new(),
    }
}

/// Page part 1 (P1d): the DAWNBench ResNet-18 variant, batch 128, 35 epochs.
fn page_resnet18() -> RunConfig {
    RunConfig {
        schedule: ScheduleKind::Dawn,
        peak_epoch: 15.0 / 35.0,
        ..page_base(Arch::PageResnet18, 35.0, 128, 0.1)
    }
}

fn page_resnet18_tricks() -> Vec<Override> {
    [
        on(&[
            "random_crop",
            "flip",
            "preprocess_once",
            "nesterov",
            "weight_decay_on",
            "no_bias_before_bn",
        ]),
        set(&[("random_crop.pad", "4")]),
    ]
    .concat()
}

/// Page part 4 (P4j): ResNet-9, 24 epochs, cutout 8, the 79 s net.
fn page_resnet9() -> RunConfig {
    page_base(Arch::Resnet9, 24.0, 512, 0.4)
}

fn page_resnet9_tricks() -> Vec<Override> {
    [
        on(&[
            "random_crop",
            "flip",
            "cutout",
            "preprocess_once",
            "nesterov",
            "weight_decay_on",
            "residual",
            "prep_bn_relu",
            "bn_weight_init_one",
            "logit_scale",
            "fp16",
            "no_bias_before_bn",
        ]),
        set(&[
            ("random_crop.pad", "4"),
            ("cutout.size", "8"),
            ("logit_scale.scale", "0.125"),
        ]),
    ]
    .concat()
}

/// Page part 8, the final 26 s configuration (TRICKS.md 1.5).
fn page_final() -> RunConfig {
    RunConfig {
        peak_epoch: 0.2,
        final_lr_frac: 0.1,
        ..page_base(Arch::Resnet9, 10.0, 512, 1.0)
    }
}

fn page_final_tricks() -> Vec<Override> {
    [
        page_resnet9_tricks()
            .into_iter()
            .filter(|o| !matches!(o, Override::Trick { key, .. } if key == "cutout"))
            .collect(),
        on(&[
            "gpu_data",
            "group_aug",
            "pool_before_act",
            "pool_before_bn",
            "label_smoothing",
            "celu",
            "ghost_bn",
            "frozen_bn_scale",
            "bn_bias_lr_scale",
            "whitening",
            "ema",
            "tta",
        ]),
        set(&[
            ("celu.alpha", "0.3"),
            ("logit_scale.scale", "1/16"),
            ("ghost_bn.splits", "16"),
            ("bn_bias_lr_scale.mult", "64"),
            ("whitening.style", "page"),
            ("whitening.eps", "0.01"),
            ("whitening.images", "10000"),
            ("tta.level", "1"),
        ]),
    ]
    .concat()
}

/// airbench94 (TRICKS.md 2.1): lr 11.5 per 1024 decoupled = mean-loss 1.5;
/// per-step decay 1.9957e-3 = lr * wd.
fn airbench94() -> RunConfig {
    RunConfig {
        recipe: String::new(),
        arch: Arch::Airbench,
        width_mult: 1.0,
        epochs: 9.9,
        batch_size: 1024,
        lr: 1.5,
        momentum: 0.85,
        weight_decay: 1.9957e-3 / 1.5,
        optimizer: OptimizerKind::SgdTorch,
        schedule: ScheduleKind::Airbench,
        peak_epoch: 0.23,
        final_lr_frac: 0.07,
        train_per_class: 0,
        test_per_class: 0,
        eval_every: 1,
        metrics_every: 10,
        tricks: BTreeMap::new(),
        overrides: Vec::new(),
    }
}

fn airbench94_tricks() -> Vec<Override> {
    [
        on(&[
            "gpu_data",
            "preprocess_once",
            "fp16",
            "channels_last",
            "cudnn_benchmark",
            "pool_before_bn",
            "gelu",
            "frozen_bn_scale",
            "bn_bias_lr_scale",
            "bn_stats",
            "whitening",
            "whitening_negate",
            "whitening_bias",
            "dirac_init",
            "nesterov",
            "weight_decay_on",
            "label_smoothing",
            "lookahead",
            "random_crop",
            "flip",
            "alternating_flip",
            "tta",
            "logit_scale",
            "bn_weight_init_one",
            "no_bias_before_bn",
        ]),
        set(&[
            ("logit_scale.scale", "1/9"),
            ("whitening.style", "airbench"),
            ("whitening.eps", "5e-4"),
            ("whitening.images", "5000"),
            ("whitening_bias.epochs", "3"),
            ("random_crop.pad", "2"),
            ("tta.level", "2"),
            ("bn_bias_lr_scale.mult", "64"),
        ]),
    ]
    .concat()
}

/// airbench94_muon (TRICKS.md 2.2): batch 2000, 8 epochs, Muon on the filters,
/// SGD (lr 0.053 summed = 106 mean-loss) on biases, head lr x 0.67/0.053.
fn airbench94_muon() -> RunConfig {
    RunConfig {
        epochs: 8.0,
        batch_size: 2000,
        lr: 0.053 * 2000.0,
        momentum: 0.85,
        weight_decay: 0.004 / (0.053 * 2000.0),
        schedule: ScheduleKind::Linear,
        final_lr_frac: 0.0,
        ..airbench94()
    }
}

fn airbench94_muon_tricks() -> Vec<Override> {
    let mut v: Vec<Override> = airbench94_tricks()
        .into_iter()
        .filter(|o| !matches!(o, Override::Trick { key, .. } if key == "lookahead" || key == "bn_bias_lr_scale"))
        .filter(|o| !matches!(o, Override::Set { key, .. } if key.starts_with("bn_bias_lr_scale")))
        .collect();
    v.extend(on(&["muon"]));
    v.extend(set(&[
        ("muon.lr", "0.24"),
        ("muon.momentum", "0.6"),
        ("muon.ns_steps", "3"),
        ("muon.head_lr_mult", "12.64"),
        ("logit_scale.scale", "1/256"),
        ("whitening_bias.init", "uniform"),
        ("whitening_bias.schedule", "own"),
    ]));
    v
}

/// Tiny: 1/8 width, the embedded data (400 + 100 images per class), batch
/// 128, few epochs. The mean-loss lr is kept: at 1/8 width and 31 steps per
/// epoch the published peaks still train (measured on the embedded data).
fn tiny(mut c: RunConfig, epochs: f64, batch: usize) -> RunConfig {
    c.width_mult = 0.125;
    c.epochs = epochs;
    c.batch_size = batch;
    c.train_per_class = 400;
    c.test_per_class = 100;
    c.metrics_every = 4;
    c
}

fn tiny_tricks(mut v: Vec<Override>) -> Vec<Override> {
    // Absolute-epoch knobs shrink with the run, and 0.99 every 5 steps needs
    // Page's 970 steps: over ~100 steps that EMA would still be the init.
    v.extend(set(&[
        ("whitening.images", "1000"),
        ("ema.floor_epochs", "1"),
        ("ema.momentum", "0.9"),
        ("whitening_bias.epochs", "1"),
        ("cutmix.last_epochs", "1"),
    ]));
    v
}

pub static RECIPES: &[Recipe] = &[
    Recipe {
        name: "page-resnet18",
        help: "Page part 1 DAWNBench baseline (P1d): ResNet-18 variant, bs 128, 35 epochs, 297 s on a V100",
        base: page_resnet18,
        tricks: page_resnet18_tricks,
    },
    Recipe {
        name: "page-resnet9",
        help: "Page part 4 (P4j): ResNet-9, bs 512, 24 epochs, cutout 8: 79 s, 94.1%",
        base: page_resnet9,
        tricks: page_resnet9_tricks,
    },
    Recipe {
        name: "page-final",
        help: "Page part 8 final (TRICKS 1.5): whitening, ghost BN, frozen BN scale, CELU, EMA, TTA, 10 epochs: 26 s, 94.1%",
        base: page_final,
        tricks: page_final_tricks,
    },
    Recipe {
        name: "airbench94",
        help: "airbench94 (TRICKS 2.1): 9.9 epochs, bs 1024, whitening, Lookahead, alternating flip, TTA 2: 3.83 s on an A100",
        base: airbench94,
        tricks: airbench94_tricks,
    },
    Recipe {
        name: "airbench94-muon",
        help: "airbench94_muon (TRICKS 2.2): Muon on the filters, bs 2000, 8 epochs: 2.59 s on an A100",
        base: airbench94_muon,
        tricks: airbench94_muon_tricks,
    },
    Recipe {
        name: "tiny-page-resnet18",
        help: "page-resnet18 at 1/8 width, embedded data, bs 128, 3 epochs (CPU)",
        base: || tiny(page_resnet18(), 3.0, 128),
        tricks: || tiny_tricks(page_resnet18_tricks()),
    },
    Recipe {
        name: "tiny-page-resnet9",
        help: "page-resnet9 at 1/8 width, embedded data, bs 128, 3 epochs (CPU)",
        base: || tiny(page_resnet9(), 3.0, 128),
        tricks: || tiny_tricks(page_resnet9_tricks()),
    },
    Recipe {
        name: "tiny-page-final",
        help: "page-final at 1/8 width, embedded data, bs 128, 3 epochs (CPU)",
        base: || tiny(page_final(), 3.0, 128),
        tricks: || tiny_tricks(page_final_tricks()),
    },
    Recipe {
        name: "tiny-airbench94",
        help: "airbench94 at 1/8 width, embedded data, bs 128, 3 epochs (CPU)",
        base: || tiny(airbench94(), 3.0, 128),
        tricks: || tiny_tricks(airbench94_tricks()),
    },
    Recipe {
        name: "tiny-airbench94-muon",
        help: "airbench94-muon at 1/8 width, embedded data, bs 250, 3 epochs (CPU)",
        base: || tiny(airbench94_muon(), 3.0, 250),
        // The published 1/256 stays: dividing by this net's own feature
        // width (1/32) left it at chance (loss ln 10) on the embedded data.
        tricks: || tiny_tricks(airbench94_muon_tricks()),
    },
];

pub fn recipe_names() -> Vec<&'static str> {
    RECIPES.iter().map(|r| r.name).collect()
}
