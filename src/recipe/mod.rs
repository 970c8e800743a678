//! Named base recipes and their resolution, with overrides, into a full run
//! configuration. A recipe = architecture + data pipeline + optimiser +
//! schedule + the set of tricks that are on, with their parameters.
//! Hyperparameters that TRICKS.md treats as knobs rather than switches
//! (T9 architecture, T20 batch size, T21 schedule shape, T30 epochs) are
//! fields here, settable with `--set`.

#[cfg(test)]
mod plan_tests;
mod recipes;

pub use recipes::{Recipe, convention, recipe_names, recipes, tiny_settings};

pub use crate::config::arithmetic;
use crate::config::{Override, RunConfig, RunSpec, SETTINGS, TrickState, Value};
use crate::plan::{PlannedRun, RunPlan};
use crate::tricks::{self, ParamValue};
use anyhow::{Result, bail};

/// Sets a run setting through its entry in the settings table; an
/// optimiser named as a setting is a trick, and says so.
fn set_hyper(cfg: &mut RunConfig, key: &str, value: &str) -> Result<()> {
    if key == "optimizer" && tricks::optimiser_tricks().iter().any(|t| t.key() == value) {
        bail!(
            "`optimizer={value}`: {value} is a trick; use `--trick {value}` (or `{value} = \"on\"`)"
        );
    }
    let s = crate::config::setting(key).expect("checked by is_hyper");
    (s.set)(cfg, key, value)
}

fn is_hyper(key: &str) -> bool {
    crate::config::setting(key).is_some()
}

fn default_state(t: &tricks::TrickSpec) -> TrickState {
    TrickState {
        on: false,
        params: t
            .params
            .iter()
            .map(|p| {
                let v = match p.default {
                    ParamValue::Float(v) => Value::Num(v),
                    ParamValue::Int(v) => Value::Num(v as f64),
                    ParamValue::Choice(c) => Value::Text(c.to_string()),
                };
                (p.name.to_string(), v)
            })
            .collect(),
    }
}

/// Sets `trick.param = value`, checking the name, type and range.
fn set_param(cfg: &mut RunConfig, key: &str, value: &str) -> Result<()> {
    let (trick, param) = key.split_once('.').unwrap_or((key, ""));
    let spec = tricks::find(trick).ok_or_else(|| {
        let names = tricks::CATALOG.iter().map(|t| t.key).chain(SETTINGS.iter().map(|s| s.key));
        match tricks::nearest(trick, names) {
            Some(s) => anyhow::anyhow!("unknown setting `{key}` (did you mean `{s}`? `tricklab tricks` and `tricklab recipe show` list them)"),
            None => anyhow::anyhow!("unknown setting `{key}` (`tricklab tricks` and `tricklab recipe show` list them)"),
        }
    })?;
    let Some(p) = spec.param(param) else {
        let names: Vec<&str> = spec.params.iter().map(|p| p.name).collect();
        let hint = match tricks::nearest(param, names.iter().copied()) {
            Some(s) => format!("did you mean `{}.{s}`?", spec.key),
            None if names.is_empty() => format!("`{}` has no parameters", spec.key),
            None => format!("its parameters: {}", names.join(", ")),
        };
        bail!("unknown parameter `{key}` ({hint})");
    };
    let v = match p.default {
        ParamValue::Choice(_) => {
            if !p.choices.contains(&value) {
                bail!("`{key}={value}`: expected one of {}", p.choices.join(", "));
            }
            Value::Text(value.to_string())
        }
        ParamValue::Int(_) => {
            let v = crate::config::number(key, value)?;
            if v.fract() != 0.0 {
                bail!("`{key}={value}`: must be a whole number");
            }
            Value::Num(v)
        }
        ParamValue::Float(_) => Value::Num(crate::config::number(key, value)?),
    };
    if let (Some((lo, hi)), Value::Num(x)) = (p.range, &v)
        && !(lo..=hi).contains(x)
    {
        bail!("`{key}={value}`: out of range [{lo}, {hi}]");
    }
    cfg.tricks
        .get_mut(spec.key)
        .expect("every catalog key has a state")
        .params
        .insert(p.name.to_string(), v);
    Ok(())
}

/// Applies one override to a configuration.
pub fn apply_override(cfg: &mut RunConfig, o: &Override) -> Result<()> {
    match o {
        Override::Trick { key, on } => {
            let spec = tricks::find(key)
                .ok_or_else(|| anyhow::anyhow!(tricks::unknown_trick_message(key)))?;
            cfg.tricks
                .get_mut(spec.key)
                .expect("every catalog key has a state")
                .on = *on;
        }
        Override::Set { key, value } if is_hyper(key) => set_hyper(cfg, key, value)?,
        Override::Set { key, value } => set_param(cfg, key, value)?,
    }
    cfg.overrides.push(o.to_string());
    Ok(())
}

/// Resolves a recipe name plus overrides, validating every name and value.
pub fn resolve(recipe: &str, overrides: &[Override]) -> Result<RunConfig> {
    Ok(resolve_plan(recipe, overrides)?.0)
}

/// A recipe plus overrides, resolved once: the configuration the manifest
/// records and the plan the engine runs.
pub fn resolve_plan(recipe: &str, overrides: &[Override]) -> Result<(RunConfig, RunPlan)> {
    let cfg = configure(recipe, overrides)?;
    refuse_ignored_splits(&cfg, overrides)?;
    let plan = tricks::build_plan(&cfg)?;
    Ok((cfg, plan))
}

/// The settings `overrides` set, each as `trick.param` with the trick's
/// catalog key (`T25.floor_epochs` is `ema.floor_epochs`), or as the setting.
fn set_keys(overrides: &[Override]) -> Vec<String> {
    overrides
        .iter()
        .filter_map(|o| match o {
            Override::Set { key, .. } => Some(match key.split_once('.') {
                Some((t, p)) => match tricks::find(t) {
                    Some(spec) => format!("{}.{p}", spec.key),
                    None => key.clone(),
                },
                None => key.clone(),
            }),
            Override::Trick { .. } => None,
        })
        .collect()
}

/// `ghost_bn.splits` set while `ghost_bn.size` fixes the images a batch
/// instead (goyal-rn50, fujitsu-rn50): the splits would be ignored, so the
/// run is refused, saying how to count splits again.
fn refuse_ignored_splits(cfg: &RunConfig, overrides: &[Override]) -> Result<()> {
    let Some(g) = cfg.tricks.get("ghost_bn").filter(|s| s.on) else {
        return Ok(());
    };
    let num = |k: &str| match g.params.get(k) {
        Some(Value::Num(v)) => *v,
        _ => 0.0,
    };
    if num("size") > 0.0 && set_keys(overrides).iter().any(|k| k == "ghost_bn.splits") {
        bail!(
            "ghost_bn.splits = {} has no effect while ghost_bn.size = {} (images per BatchNorm batch) is set: set ghost_bn.size = 0 to count splits, or change the size",
            num("splits"),
            num("size")
        );
    }
    Ok(())
}

/// The settings counted in absolute epochs that keep their value when
/// `overrides` change the run's length from the recipe's: `--set epochs=88`
/// on ffcv-rn18 leaves its resolution ramp at epochs 11-13, where FFCV's own
/// 88-epoch config ramps over 65-76 (the peak, a fraction of the run, does
/// scale). One line naming each, or `None` where the length is the
/// recipe's, or every such setting is set too.
pub fn unscaled_epoch_settings(recipe: &str, overrides: &[Override]) -> Result<Option<String>> {
    let (base, cfg) = (configure(recipe, &[])?, configure(recipe, overrides)?);
    if cfg.epochs == base.epochs {
        return Ok(None);
    }
    let set = set_keys(overrides);
    let mut kept = Vec::new();
    for t in tricks::CATALOG {
        let Some(state) = cfg.tricks.get(t.key).filter(|s| s.on) else {
            continue;
        };
        for p in t.params.iter().filter(|p| p.in_epochs) {
            let key = format!("{}.{}", t.key, p.name);
            // 0 scales to 0: such a setting is the same at any length.
            match state.params.get(p.name) {
                Some(Value::Num(v)) if *v != 0.0 && !set.contains(&key) => {
                    kept.push(format!("{key} = {v}"));
                }
                _ => {}
            }
        }
    }
    Ok((!kept.is_empty()).then(|| {
        format!(
            "epochs = {} (the recipe's {}) leaves these settings, counted in epochs, as they are: {}; scale them with the run (× {:.4}) or set them",
            cfg.epochs,
            base.epochs,
            kept.join(", "),
            cfg.epochs / base.epochs
        )
    }))
}

/// A queued run with its plan: what a worker hands its trainer.
pub fn plan_run(spec: &RunSpec) -> Result<PlannedRun> {
    let (config, plan) = resolve_plan(&spec.recipe, &spec.overrides)?;
    Ok(PlannedRun {
        spec: spec.clone(),
        config,
        plan,
    })
}

/// The recipe's settings and tricks with `overrides` applied, unvalidated.
fn configure(recipe: &str, overrides: &[Override]) -> Result<RunConfig> {
    let r = recipes().iter().find(|r| r.name == recipe).ok_or_else(|| {
        match tricks::nearest(recipe, recipe_names()) {
            Some(s) => anyhow::anyhow!(
                "unknown recipe `{recipe}` (did you mean `{s}`? `tricklab recipes` lists them)"
            ),
            None => anyhow::anyhow!("unknown recipe `{recipe}` (`tricklab recipes` lists them)"),
        }
    })?;
    let mut cfg = recipes::blank();
    cfg.recipe = recipe.to_string();
    cfg.clock = r.clock;
    cfg.tricks = tricks::CATALOG
        .iter()
        .map(|t| (t.key.to_string(), default_state(t)))
        .collect();
    for o in &r.overrides {
        apply_override(&mut cfg, o).map_err(|e| anyhow::anyhow!("recipe `{recipe}`: {e:#}"))?;
    }
    cfg.overrides.clear();
    for o in overrides {
        apply_override(&mut cfg, o)?;
    }
    Ok(cfg)
}

/// Checks one override's name, type and range against a recipe, without the
/// cross-trick validation (which needs the whole variant).
pub fn check_override(recipe: &str, o: &Override) -> Result<()> {
    let mut cfg = configure(recipe, &[])?;
    apply_override(&mut cfg, o)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn err(recipe: &str, o: &[&str]) -> String {
        let ov: Vec<Override> = o
            .iter()
            .map(|s| {
                let set = s.contains('=') && !s.ends_with("=on") && !s.ends_with("=off");
                if set {
                    Override::parse_set(s)
                } else {
                    Override::parse_trick(s)
                }
                .unwrap()
            })
            .collect();
        format!("{:#}", resolve(recipe, &ov).unwrap_err())
    }

    #[test]
    fn every_recipe_resolves() {
        for name in recipe_names() {
            let c = resolve(name, &[]).unwrap();
            assert_eq!(c.recipe, name);
            assert!(c.epochs > 0.0 && c.batch_size > 0);
        }
        let (f, p) = resolve_plan("page-final", &[]).unwrap();
        let on = f.tricks_on();
        for k in ["ema", "tta", "whitening", "ghost_bn"] {
            assert!(on.iter().any(|t| t == k), "{k}");
        }
        assert!(
            !p.data
                .augment
                .ops
                .iter()
                .any(|o| matches!(o, crate::plan::AugOp::Cutout { .. }))
        );
        assert!(matches!(
            p.averaging,
            crate::plan::Averaging::PageEma { .. }
        ));
        assert_eq!(p.net.act, crate::model::Activation::Celu { alpha: 0.3 });
        assert_eq!(p.net.logit_scale, 1.0 / 16.0);
        assert_eq!((p.epochs, p.batch_size, p.optim.lr), (10.0, 512, 1.0));
    }

    #[test]
    fn overrides_apply_and_validate() {
        let (c, p) = resolve_plan(
            "page-resnet9",
            &[
                Override::parse_trick("label_smoothing").unwrap(),
                Override::parse_set("label_smoothing.alpha=0.1").unwrap(),
                Override::parse_set("epochs=23").unwrap(),
            ],
        )
        .unwrap();
        assert_eq!((p.loss.smoothing, p.epochs), (0.1, 23.0));
        assert_eq!(
            c.overrides,
            vec![
                "label_smoothing=on",
                "label_smoothing.alpha=0.1",
                "epochs=23"
            ]
        );
        let j = c.to_json(3, "embedded", "abc");
        assert_eq!(j["seed"], 3);
        assert!(
            j["tricks_on"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "label_smoothing")
        );
    }

    #[test]
    pub(crate) fn errors_name_the_fix() {
        assert!(
            err("page-resnet9", &["lable_smoothing"]).contains("did you mean `label_smoothing`")
        );
        assert!(
            err("page-resnet9", &["label_smoothing.alfa=0.1"])
                .contains("did you mean `label_smoothing.alpha`")
        );
        assert!(err("page-resnet9", &["label_smoothing.alpha=3"]).contains("out of range"));
        assert!(err("page-resnet9", &["epoch=3"]).contains("did you mean `epochs`"));
        assert!(err("page-resnet9", &["celu", "gelu"]).contains("cannot both be on"));
        assert!(err("page-resnet9", &["bn_bias_lr_scale"]).contains("needs `frozen_bn_scale`"));
        assert!(
            err("page-resnet9", &["ghost_bn", "ghost_bn.splits=7"])
                .contains("not divisible by the 7 ghost BN splits")
        );
        assert!(err("page-resnet9", &["compile"]).contains("not available"));
        assert!(err("page-resnet", &[]).contains("did you mean `page-resnet9`"));
        assert!(err("page-resnet9", &["lr=-1"]).contains("must be > 0"));
    }
}
