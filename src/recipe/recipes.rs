//! The base recipes, read from `recipes.toml` (embedded): data in the matrix
//! files' vocabulary, so that a recipe names its tricks the way a user does
//! and every name is checked by the same resolution.

use crate::config::{Arch, Clock, OptimizerKind, Override, RunConfig, ScheduleKind};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const RECIPES_TOML: &str = include_str!("recipes.toml");

pub struct Recipe {
    pub name: String,
    pub help: String,
    /// The paper or repository (and commit) the recipe reproduces.
    pub source: String,
    /// The result its source published, with the clock and hardware.
    pub published: String,
    /// Where it is known to differ from its source (empty: none known).
    pub differs: Vec<String>,
    /// The timing convention its publication used.
    pub clock: Clock,
    /// Settings, tricks and trick parameters, applied in order to `blank()`.
    pub overrides: Vec<Override>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tiny: Tiny,
    recipe: Vec<Raw>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tiny {
    help: String,
    #[serde(default)]
    off: Vec<String>,
    set: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    help: String,
    /// Every recipe names its source, its published result and its known
    /// differences (`recipe show` prints them): none is inherited with `from`.
    source: String,
    published: String,
    differs: Vec<String>,
    from: Option<String>,
    /// The timing convention (inherited with `from`).
    clock: Option<String>,
    #[serde(default)]
    set: toml::Table,
    #[serde(default)]
    on: Vec<String>,
    #[serde(default)]
    off: Vec<String>,
    /// Settings of this recipe's tiny version on top of `[tiny]`.
    #[serde(default)]
    tiny: toml::Table,
}

fn sets(t: &toml::Table) -> impl Iterator<Item = Override> + '_ {
    t.iter().map(|(k, v)| Override::Set {
        key: k.clone(),
        value: Override::toml_text(v),
    })
}

fn tricks(keys: &[String], on: bool) -> impl Iterator<Item = Override> + '_ {
    keys.iter()
        .map(move |k| Override::Trick { key: k.clone(), on })
}

/// Settings of a `RunConfig` before a recipe sets them; a test checks that
/// every recipe without `from` sets them all, so none of these is implied.
pub(super) fn blank() -> RunConfig {
    RunConfig {
        recipe: String::new(),
        clock: Clock::Dawn,
        arch: Arch::Resnet9,
        width_mult: 1.0,
        epochs: 1.0,
        batch_size: 1,
        lr: 0.0,
        momentum: 0.0,
        weight_decay: 0.0,
        lr_batch: 0,
        wd_batch: 0,
        optimizer: OptimizerKind::SgdTorch,
        schedule: ScheduleKind::Constant,
        peak_epoch: 0.0,
        final_lr_frac: 0.0,
        train_per_class: 0,
        test_per_class: 0,
        eval_every: 1,
        eval_batch: 1,
        metrics_every: 1,
        world_size: 1,
        tricks: BTreeMap::new(),
        overrides: Vec::new(),
    }
}

fn load() -> Vec<Recipe> {
    // The file ships inside the binary and a test parses it: a failure here is a build defect.
    let file: File = toml::from_str(RECIPES_TOML).expect("src/recipe/recipes.toml parses");
    let mut out: Vec<Recipe> = Vec::new();
    for r in &file.recipe {
        let parent = r.from.as_ref().map(|parent| {
            out.iter().find(|p| &p.name == parent).unwrap_or_else(|| {
                panic!("recipes.toml: `{}` comes from unknown `{parent}`", r.name)
            })
        });
        let mut overrides = parent.map(|p| p.overrides.clone()).unwrap_or_default();
        let clock = match &r.clock {
            Some(c) => Clock::parse(c)
                .unwrap_or_else(|| panic!("recipes.toml: `{}` has unknown clock `{c}`", r.name)),
            None => parent
                .map(|p| p.clock)
                .unwrap_or_else(|| panic!("recipes.toml: `{}` names no clock", r.name)),
        };
        overrides.extend(tricks(&r.off, false));
        overrides.extend(tricks(&r.on, true));
        overrides.extend(sets(&r.set));
        out.push(Recipe {
            name: r.name.clone(),
            help: r.help.clone(),
            source: r.source.clone(),
            published: r.published.clone(),
            differs: r.differs.clone(),
            clock,
            overrides,
        });
    }
    let tiny: Vec<Recipe> = file
        .recipe
        .iter()
        .zip(&out)
        .map(|(raw, full)| {
            let mut overrides = full.overrides.clone();
            overrides.extend(tricks(&file.tiny.off, false));
            overrides.extend(sets(&file.tiny.set));
            overrides.extend(sets(&raw.tiny));
            let batch = raw
                .tiny
                .get("batch_size")
                .or_else(|| file.tiny.set.get("batch_size"))
                .map(Override::toml_text)
                .unwrap_or_default();
            Recipe {
                name: format!("tiny-{}", full.name),
                help: file
                    .tiny
                    .help
                    .replace("{name}", &full.name)
                    .replace("{batch_size}", &batch),
                source: full.source.clone(),
                published: full.published.clone(),
                differs: full.differs.clone(),
                clock: full.clock,
                overrides,
            }
        })
        .collect();
    out.extend(tiny);
    out
}

/// The settings that make `recipe` tiny: those the `[tiny]` block fixes
/// (width, data, batch, length and the knobs counted in absolute epochs),
/// and those the recipe's own `tiny` table fixes (a streaming recipe's image
/// sides, the lr of its tiny batch).
pub fn tiny_settings(recipe: &str) -> Vec<String> {
    let file: File = toml::from_str(RECIPES_TOML).expect("src/recipe/recipes.toml parses");
    let mut keys: Vec<String> = file.tiny.set.keys().cloned().collect();
    if let Some(r) = file.recipe.iter().find(|r| r.name == recipe) {
        let own: Vec<String> = r
            .tiny
            .keys()
            .filter(|k| !keys.contains(k))
            .cloned()
            .collect();
        keys.extend(own);
    }
    keys
}

pub fn recipes() -> &'static [Recipe] {
    static RECIPES: OnceLock<Vec<Recipe>> = OnceLock::new();
    RECIPES.get_or_init(load)
}

/// The timing convention of a recipe's publication, if the recipe is known.
pub fn convention(recipe: &str) -> Option<Clock> {
    recipes().iter().find(|r| r.name == recipe).map(|r| r.clock)
}

pub fn recipe_names() -> Vec<&'static str> {
    recipes().iter().map(|r| r.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SETTINGS;

    #[test]
    fn every_root_recipe_sets_every_setting() {
        let file: File = toml::from_str(RECIPES_TOML).unwrap();
        for r in file.recipe.iter().filter(|r| r.from.is_none()) {
            for key in SETTINGS.iter().map(|s| s.key) {
                assert!(r.set.contains_key(key), "{} does not set `{key}`", r.name);
            }
        }
        assert_eq!(recipes().len(), 2 * file.recipe.len());
        let tiny_hlb = recipes().iter().find(|r| r.name == "tiny-hlb").unwrap();
        assert_eq!(
            tiny_hlb.help,
            "hlb at 1/8 width, embedded data, bs 128, 3 epochs (CPU)"
        );
    }
}
