//! The catalog's own consistency, and every trick proven to act.

use super::*;

#[test]
fn catalog_is_consistent() {
    let mut keys: Vec<&str> = CATALOG.iter().map(|t| t.key).collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(n, keys.len(), "duplicate trick keys");
    for t in CATALOG {
        for r in t.requires.iter().chain(t.conflicts) {
            assert!(find(r).is_some(), "{} names unknown trick {r}", t.key);
        }
        for p in t.params {
            if let (Some((lo, hi)), ParamValue::Float(v)) = (p.range, p.default) {
                assert!(
                    lo <= v && v <= hi,
                    "{}.{} default out of range",
                    t.key,
                    p.name
                );
            }
        }
    }
    // Every row of TRICKS.md section 4 is a switch or a recipe setting,
    // and every part-8 rung has an entry.
    for id in (1..=32).map(|i| format!("T{i}")) {
        match (find(&id), setting_row(&id)) {
            (Some(_), None) => {}
            (None, Some((_, key, help))) => {
                assert!(!help.is_empty(), "{key} is not a recipe setting");
                assert!(unknown_trick_message(&id).contains(&format!("--set {key}=")));
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    for id in [
        "B1", "B2a", "B2b", "B3", "B4", "B5", "B6", "B7", "B8", "B9a",
    ] {
        assert!(find(id).is_some(), "no entry for {id}");
    }
    assert_eq!(find("t24").unwrap().key, "label_smoothing");
}

#[test]
fn nearest_finds_typos_only() {
    assert_eq!(
        nearest("lable_smoothing", ["label_smoothing", "celu"]),
        Some("label_smoothing")
    );
    assert_eq!(nearest("zzzzzzzz", ["label_smoothing", "celu"]), None);
}

/// Where each trick's effect is tested at the level where it acts (a loss
/// value, a batch, a parameter group, a schedule value, a layer's output).
/// A new catalog entry needs a row here, and the row's test must exist.
const EFFECT_TESTS: &[(&str, &str, &str)] = &[
    (
        "gpu_data",
        EFFECTS,
        "gpu_data_augments_on_the_device_instead_of_a_cpu_loader",
    ),
    (
        "group_aug",
        PIPELINE,
        "page_groups_share_one_option_and_options_are_distinct",
    ),
    (
        "preprocess_once",
        EFFECTS,
        "preprocess_once_normalises_and_pads_before_training",
    ),
    ("fp16", EFFECTS, CUDA_LAYOUT),
    (
        "amp",
        EFFECTS,
        "amp_autocasts_the_training_forward_pass_on_a_cpu",
    ),
    ("channels_last", EFFECTS, CUDA_LAYOUT),
    ("cudnn_benchmark", EFFECTS, CUDA_LAYOUT),
    ("compile", RECIPE, "errors_name_the_fix"),
    ("pool_before_act", MODEL, POOLS),
    ("pool_before_bn", MODEL, POOLS),
    (
        "residual",
        MODEL,
        "residual_adds_the_layer_1_and_3_branches",
    ),
    ("logit_scale", MODEL, "logit_scale_multiplies_the_logits"),
    (
        "bn_weight_init_one",
        MODEL,
        "bn_weight_init_one_or_pytorch_0_4_uniform",
    ),
    ("celu", MODEL, "celu_alpha_formula"),
    ("gelu", MODEL, "gelu_is_the_exact_erf_form"),
    ("silu", MODEL, "silu_is_x_times_its_sigmoid"),
    (
        "ghost_bn",
        MODEL,
        "ghost_bn_statistics_per_split_and_eval_average",
    ),
    (
        "frozen_bn_scale",
        MODEL,
        "frozen_bn_scale_stays_one_and_out_of_groups",
    ),
    (
        "bn_bias_lr_scale",
        TRAIN,
        "every_sgd_group_decays_by_the_recipe_weight_decay_per_step",
    ),
    (
        "bn_stats",
        MODEL,
        "bn_stats_momentum_moves_the_running_mean",
    ),
    (
        "whitening",
        MODEL,
        "whitening_output_covariance_is_identity",
    ),
    (
        "whitening_negate",
        MODEL,
        "whitening_negate_doubles_the_filters_with_their_negations",
    ),
    (
        "svd_whitening",
        MODEL,
        "svd_whitening_gives_the_eigen_filters_from_the_first_images",
    ),
    (
        "whitening_bias",
        TRAIN,
        "muon_whitening_bias_starts_uniform_and_decays_on_its_own_clock",
    ),
    (
        "dirac_init",
        MODEL,
        "dirac_init_is_identity_on_first_filters",
    ),
    ("nesterov", OPTIM, "sgd_torch_nesterov_two_steps_by_hand"),
    ("weight_decay_on", OPTIM, "sgd_page_two_steps_by_hand"),
    (
        "label_smoothing",
        TRAIN,
        "label_smoothing_reaches_the_training_loss_through_the_plan",
    ),
    ("ema", OPTIM, "ema_and_lookahead_follow_the_formula"),
    (
        "lookahead",
        EFFECTS,
        "lookahead_starts_from_a_snapshot_and_hlb_evaluates_the_average",
    ),
    (
        "muon",
        OPTIM,
        "muon_renormalises_weight_and_steps_orthogonally",
    ),
    (
        "batched_muon",
        OPTIM,
        "batched_muon_matches_the_per_filter_loop",
    ),
    (
        "muon_norm_schedule",
        OPTIM,
        "muon_renormalises_every_n_steps_to_the_scheduled_magnitude",
    ),
    (
        "muon_fp16_momentum",
        OPTIM,
        "muon_fp16_momentum_rounds_the_buffer_to_half",
    ),
    ("random_crop", PIPELINE, "crop_takes_each_images_own_window"),
    ("flip", PIPELINE, "flip_mirrors_each_image_or_leaves_it"),
    (
        "alternating_flip",
        PIPELINE,
        "alternating_flip_alternates_and_groups_share_options",
    ),
    ("cutout", PIPELINE, "cutout_zeroes_exactly_the_square"),
    (
        "color_jitter",
        PIPELINE,
        "colour_jitter_shifts_and_scales_each_image_within_its_bounds",
    ),
    (
        "cutmix",
        EFFECTS,
        "cutmix_pastes_a_square_and_mixes_labels_by_area",
    ),
    ("tta", OPTIM, "tta_averages_flipped_and_shifted_views"),
    (
        "selective_tta",
        OPTIM,
        "selective_tta_gives_the_views_to_the_least_confident_only",
    ),
    (
        "prep_bn_relu",
        MODEL,
        "prep_bn_relu_adds_a_batch_norm_after_the_prep_conv",
    ),
    (
        "zero_grad_none",
        EFFECTS,
        "zero_grad_none_and_zero_fill_both_leave_no_gradient",
    ),
    (
        "no_bias_before_bn",
        MODEL,
        "conv_bias_before_bn_changes_nothing_in_training_mode",
    ),
    (
        "no_wd_bn_bias",
        EFFECTS,
        "no_wd_bn_bias_takes_bn_and_conv_biases_out_of_weight_decay",
    ),
    ("grad_clip", EFFECTS, "grad_clip_rescales_to_the_max_norm"),
    (
        "grad_accum",
        EFFECTS,
        "grad_accum_equals_one_pass_with_ghost_batches_of_the_same_size",
    ),
    ("warmup", EFFECTS, "warmup_ramps_the_schedule_linearly"),
    ("lars", OPTIM, "lars_one_step_formula"),
    ("lamb", OPTIM, "lamb_one_step_formula"),
    ("adamw", OPTIM, "adamw_two_steps_formula"),
    ("progressive_resize", EFFECTS, PROGRESSIVE),
    ("full_size_val", EFFECTS, PROGRESSIVE),
];
const CUDA_LAYOUT: &str = "precision_tricks_set_the_layout_on_any_device";
const POOLS: &str = "pool_before_act_is_exact_for_relu_but_pool_before_bn_is_not";
const PROGRESSIVE: &str = "progressive_resize_trains_small_first_and_full_size_val_evaluates_full";
const EFFECTS: &str = include_str!("../train/effects.rs");
const PIPELINE: &str = include_str!("../train/pipeline.rs");
const TRAIN: &str = include_str!("../train/tests.rs");
const MODEL: &str = include_str!("../model/tests.rs");
const OPTIM: &str = include_str!("../optim/tests.rs");
const RECIPE: &str = include_str!("../recipe/mod.rs");

#[test]
fn every_trick_has_an_effect_test() {
    for t in CATALOG {
        let rows: Vec<_> = EFFECT_TESTS.iter().filter(|r| r.0 == t.key).collect();
        assert_eq!(rows.len(), 1, "`{}` needs one row in EFFECT_TESTS", t.key);
        let (_, source, name) = rows[0];
        let decl = format!("#[test]\nfn {name}()");
        let indented = format!("#[test]\n    fn {name}()");
        assert!(
            source.contains(&decl) || source.contains(&indented),
            "`{}`: no test named {name}",
            t.key
        );
    }
    assert_eq!(EFFECT_TESTS.len(), CATALOG.len());
}
