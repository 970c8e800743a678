//! Named base recipes and their resolution, with overrides, into a full run configuration.

use crate::config::Override;
use serde::{Deserialize, Serialize};

/// A fully resolved run configuration (the engine helper replaces this placeholder).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub recipe: String,
}

/// Resolves a recipe name plus overrides, validating every name and value.
pub fn resolve(recipe: &str, overrides: &[Override]) -> anyhow::Result<RunConfig> {
    let _ = overrides;
    anyhow::bail!("unknown recipe `{recipe}`")
}

#[derive(clap::Args, Debug)]
pub struct RecipesArgs {}

pub fn cmd_recipes(_args: RecipesArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab recipes` is not built yet")
}

#[derive(clap::Args, Debug)]
pub struct RecipeShowArgs {}

pub fn cmd_recipe_show(_args: RecipeShowArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab recipe show` is not built yet")
}
