//! Named base recipes and their resolution, with overrides, into a full run
//! configuration. A recipe = architecture + data pipeline + optimiser +
//! schedule + the set of tricks that are on, with their parameters.
//! Hyperparameters that TRICKS.md treats as knobs rather than switches
//! (T9 architecture, T20 batch size, T21 schedule shape, T30 epochs) are
//! fields here, settable with `--set`.

mod cli;
mod recipes;

pub use cli::{RecipeShowArgs, RecipesArgs, cmd_recipe_show, cmd_recipes};
pub use recipes::{RECIPES, Recipe, recipe_names};

use crate::config::Override;
use crate::model::Arch;
use crate::tricks::{self, ParamValue};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A trick parameter's resolved value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Num(f64),
    Text(String),
}

impl Value {
    pub fn num(&self) -> f64 {
        match self {
            Value::Num(v) => *v,
            Value::Text(_) => f64::NAN,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrickState {
    pub on: bool,
    pub params: BTreeMap<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Page's Nesterov form: lr inside the momentum buffer.
    SgdPage,
    /// PyTorch's SGD form (airbench, hlb).
    SgdTorch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// [0, peak_epoch*E, E] -> [0, 1, final_lr_frac]: Page's triangle.
    Page,
    /// Page part 1-3: [0, 15, 30, 35]/35 -> [0, 1, 0.05, 0].
    Dawn,
    /// airbench: 0.2 -> 1 over the first peak_epoch, then linear to final_lr_frac.
    Airbench,
    /// hlb OneCycle: 0 -> 1 at peak_epoch, then to final_lr_frac.
    Onecycle,
    /// 1 -> 0 linearly (airbench94_muon).
    Linear,
    Constant,
}

/// Everything one run needs, fully resolved. Serialised into the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub recipe: String,
    pub arch: Arch,
    pub width_mult: f64,
    pub epochs: f64,
    pub batch_size: usize,
    /// Peak learning rate, mean-loss convention (TRICKS.md interaction 7).
    pub lr: f64,
    pub momentum: f64,
    /// Coupled: the per-step decay is lr * weight_decay.
    pub weight_decay: f64,
    pub optimizer: OptimizerKind,
    pub schedule: ScheduleKind,
    /// Fraction of the epochs at which the schedule peaks.
    pub peak_epoch: f64,
    pub final_lr_frac: f64,
    /// Images per class kept from the data set (0 = all).
    pub train_per_class: usize,
    pub test_per_class: usize,
    pub eval_every: usize,
    /// Steps between device read-backs of the step metrics.
    pub metrics_every: usize,
    pub tricks: BTreeMap<String, TrickState>,
    /// The overrides as written, in order.
    pub overrides: Vec<String>,
}

impl RunConfig {
    pub fn on(&self, key: &str) -> bool {
        self.tricks.get(key).is_some_and(|t| t.on)
    }

    /// A numeric trick parameter (its default when not set).
    pub fn num(&self, key: &str, param: &str) -> f64 {
        self.tricks
            .get(key)
            .and_then(|t| t.params.get(param))
            .map(Value::num)
            .unwrap_or(f64::NAN)
    }

    pub fn text(&self, key: &str, param: &str) -> String {
        match self.tricks.get(key).and_then(|t| t.params.get(param)) {
            Some(Value::Text(s)) => s.clone(),
            Some(Value::Num(v)) => v.to_string(),
            None => String::new(),
        }
    }

    pub fn tricks_on(&self) -> Vec<String> {
        self.tricks
            .iter()
            .filter(|(_, t)| t.on)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// JSON for events and the manifest, with the fields every consumer relies on.
    pub fn to_json(&self, seed: u64, data_name: &str, data_hash: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("tricks_on".into(), serde_json::json!(self.tricks_on()));
            o.insert("seed".into(), serde_json::json!(seed));
            o.insert("data_name".into(), serde_json::json!(data_name));
            o.insert("data_hash".into(), serde_json::json!(data_hash));
        }
        v
    }
}

/// Hyperparameters settable with `--set KEY=VALUE`.
pub const HYPERPARAMETERS: &[(&str, &str)] = &[
    ("arch", "page-resnet18 | backbone | resnet9 | airbench"),
    ("width_mult", "width multiplier of every layer"),
    ("epochs", "training epochs (fractional allowed)"),
    (
        "batch_size",
        "images per step; scale lr with it (Page: linearly, in mean-loss units)",
    ),
    ("lr", "peak learning rate, mean-loss convention"),
    ("momentum", "optimiser momentum"),
    (
        "weight_decay",
        "coupled weight decay (per-step decay lr*wd)",
    ),
    (
        "optimizer",
        "sgd_page | sgd_torch (lars/lamb/adamw/muon are tricks)",
    ),
    (
        "schedule",
        "page | dawn | airbench | onecycle | linear | constant",
    ),
    (
        "peak_epoch",
        "fraction of the epochs at the schedule's peak",
    ),
    (
        "final_lr_frac",
        "schedule value at the end, as a fraction of the peak",
    ),
    (
        "train_per_class",
        "training images kept per class (0 = all)",
    ),
    ("test_per_class", "test images kept per class (0 = all)"),
    (
        "eval_every",
        "evaluate every N epochs (the last epoch always)",
    ),
    (
        "metrics_every",
        "steps between device read-backs of step metrics",
    ),
];

fn parse_num(key: &str, value: &str) -> Result<f64> {
    let v: f64 = match value.split_once('/') {
        // Fractions such as 1/16 read naturally for logit scales.
        Some((a, b)) => a
            .trim()
            .parse::<f64>()
            .ok()
            .zip(b.trim().parse::<f64>().ok())
            .map(|(a, b)| a / b),
        None => value.parse().ok(),
    }
    .ok_or_else(|| anyhow::anyhow!("`{key}={value}`: `{value}` is not a number"))?;
    if !v.is_finite() {
        bail!("`{key}={value}`: not a finite number");
    }
    Ok(v)
}

fn set_hyper(cfg: &mut RunConfig, key: &str, value: &str) -> Result<()> {
    let pos = |v: f64| -> Result<f64> {
        if v <= 0.0 {
            bail!("`{key}={value}`: must be > 0");
        }
        Ok(v)
    };
    let count = |v: f64| -> Result<usize> {
        if v < 0.0 || v.fract() != 0.0 {
            bail!("`{key}={value}`: must be a whole number ≥ 0");
        }
        Ok(v as usize)
    };
    match key {
        "arch" => {
            cfg.arch = match value {
                "page-resnet18" | "resnet18" => Arch::PageResnet18,
                "backbone" => Arch::Backbone,
                "resnet9" => Arch::Resnet9,
                "airbench" => Arch::Airbench,
                _ => bail!("`arch={value}`: expected page-resnet18, backbone, resnet9 or airbench"),
            }
        }
        "optimizer" => {
            cfg.optimizer = match value {
                "sgd_page" => OptimizerKind::SgdPage,
                "sgd_torch" => OptimizerKind::SgdTorch,
                "lars" | "lamb" | "adamw" | "muon" => {
                    bail!(
                        "`optimizer={value}`: {value} is a trick; use `--trick {value}` (or `{value} = \"on\"`)"
                    )
                }
                _ => bail!("`optimizer={value}`: expected sgd_page or sgd_torch"),
            }
        }
        "schedule" => {
            cfg.schedule = match value {
                "page" => ScheduleKind::Page,
                "dawn" => ScheduleKind::Dawn,
                "airbench" => ScheduleKind::Airbench,
                "onecycle" => ScheduleKind::Onecycle,
                "linear" => ScheduleKind::Linear,
                "constant" => ScheduleKind::Constant,
                _ => bail!(
                    "`schedule={value}`: expected page, dawn, airbench, onecycle, linear or constant"
                ),
            }
        }
        "width_mult" => cfg.width_mult = pos(parse_num(key, value)?)?,
        "epochs" => cfg.epochs = pos(parse_num(key, value)?)?,
        "batch_size" => cfg.batch_size = count(pos(parse_num(key, value)?)?)?,
        "lr" => cfg.lr = pos(parse_num(key, value)?)?,
        "momentum" => {
            let v = parse_num(key, value)?;
            if !(0.0..1.0).contains(&v) {
                bail!("`momentum={value}`: must be in [0, 1)");
            }
            cfg.momentum = v;
        }
        "weight_decay" => {
            let v = parse_num(key, value)?;
            if v < 0.0 {
                bail!("`weight_decay={value}`: must be ≥ 0");
            }
            cfg.weight_decay = v;
        }
        "peak_epoch" | "final_lr_frac" => {
            let v = parse_num(key, value)?;
            if !(0.0..=1.0).contains(&v) {
                bail!("`{key}={value}`: must be in [0, 1]");
            }
            if key == "peak_epoch" {
                cfg.peak_epoch = v
            } else {
                cfg.final_lr_frac = v
            }
        }
        "train_per_class" => cfg.train_per_class = count(parse_num(key, value)?)?,
        "test_per_class" => cfg.test_per_class = count(parse_num(key, value)?)?,
        "eval_every" => cfg.eval_every = count(pos(parse_num(key, value)?)?)?,
        "metrics_every" => cfg.metrics_every = count(pos(parse_num(key, value)?)?)?,
        _ => unreachable!("checked by is_hyper"),
    }
    Ok(())
}

fn is_hyper(key: &str) -> bool {
    HYPERPARAMETERS.iter().any(|(k, _)| *k == key)
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
                    ParamValue::Bool(v) => Value::Num(f64::from(u8::from(v))),
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
        let names = tricks::CATALOG.iter().map(|t| t.key).chain(HYPERPARAMETERS.iter().map(|(k, _)| *k));
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
            let v = parse_num(key, value)?;
            if v.fract() != 0.0 {
                bail!("`{key}={value}`: must be a whole number");
            }
            Value::Num(v)
        }
        ParamValue::Float(_) | ParamValue::Bool(_) => Value::Num(parse_num(key, value)?),
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
    let r = RECIPES.iter().find(|r| r.name == recipe).ok_or_else(|| {
        match tricks::nearest(recipe, recipe_names()) {
            Some(s) => anyhow::anyhow!(
                "unknown recipe `{recipe}` (did you mean `{s}`? `tricklab recipes` lists them)"
            ),
            None => anyhow::anyhow!("unknown recipe `{recipe}` (`tricklab recipes` lists them)"),
        }
    })?;
    let mut cfg = (r.base)();
    cfg.recipe = recipe.to_string();
    cfg.tricks = tricks::CATALOG
        .iter()
        .map(|t| (t.key.to_string(), default_state(t)))
        .collect();
    let base_overrides = (r.tricks)();
    for o in &base_overrides {
        apply_override(&mut cfg, o)?;
    }
    cfg.overrides.clear();
    for o in overrides {
        apply_override(&mut cfg, o)?;
    }
    validate(&cfg)?;
    Ok(cfg)
}

/// Checks one override's name, type and range against a recipe, without the
/// cross-trick validation (which needs the whole variant).
pub fn check_override(recipe: &str, o: &Override) -> Result<()> {
    let mut cfg = resolve(recipe, &[])?;
    apply_override(&mut cfg, o)
}

fn validate(cfg: &RunConfig) -> Result<()> {
    for t in tricks::CATALOG.iter().filter(|t| cfg.on(t.key)) {
        if let Some(r) = t.requires.iter().find(|r| !cfg.on(r)) {
            bail!(
                "trick `{}` needs `{r}` on: add `--trick {r}` or turn `{}` off",
                t.key,
                t.key
            );
        }
        if let Some(c) = t.conflicts.iter().find(|c| cfg.on(c)) {
            bail!(
                "tricks `{}` and `{c}` cannot both be on: turn one off",
                t.key
            );
        }
    }
    if cfg.on("compile") {
        bail!(
            "trick `compile` (torch.compile) is not available through tch/libtorch: turn it off (it is reported as N/A)"
        );
    }
    let splits = if cfg.on("ghost_bn") {
        cfg.num("ghost_bn", "splits") as usize
    } else {
        1
    };
    let accum = if cfg.on("grad_accum") {
        cfg.num("grad_accum", "steps") as usize
    } else {
        1
    };
    if !cfg.batch_size.is_multiple_of(accum) {
        bail!(
            "batch_size {} is not divisible by grad_accum.steps {accum}: pick a multiple",
            cfg.batch_size
        );
    }
    if !(cfg.batch_size / accum).is_multiple_of(splits) {
        bail!(
            "batch_size {} (per micro-batch {}) is not divisible by ghost_bn.splits {splits}: pick a batch that is a multiple of it",
            cfg.batch_size,
            cfg.batch_size / accum
        );
    }
    if cfg.on("whitening") && cfg.text("whitening", "style") == "page" && cfg.arch == Arch::Airbench
    {
        bail!(
            "whitening.style=page needs a Page net (resnet9/backbone); the airbench net takes whitening.style=airbench"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        let f = resolve("page-final", &[]).unwrap();
        assert!(
            f.on("ema") && f.on("tta") && f.on("whitening") && f.on("ghost_bn") && !f.on("cutout")
        );
        assert_eq!(f.num("celu", "alpha"), 0.3);
        assert_eq!(f.num("logit_scale", "scale"), 1.0 / 16.0);
        assert_eq!((f.epochs, f.batch_size, f.lr), (10.0, 512, 1.0));
    }

    #[test]
    fn overrides_apply_and_validate() {
        let c = resolve(
            "page-resnet9",
            &[
                Override::parse_trick("label_smoothing").unwrap(),
                Override::parse_set("label_smoothing.alpha=0.1").unwrap(),
                Override::parse_set("epochs=23").unwrap(),
            ],
        )
        .unwrap();
        assert!(c.on("label_smoothing"));
        assert_eq!((c.num("label_smoothing", "alpha"), c.epochs), (0.1, 23.0));
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
    fn errors_name_the_fix() {
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
                .contains("not divisible by ghost_bn.splits 7")
        );
        assert!(err("page-resnet9", &["compile"]).contains("not available"));
        assert!(err("page-resnet", &[]).contains("did you mean `page-resnet9`"));
        assert!(err("page-resnet9", &["lr=-1"]).contains("must be > 0"));
    }
}
