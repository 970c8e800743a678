//! Ablation matrix files (`ablations/*.toml`) and their expansion into runs.

#[derive(clap::Args, Debug)]
pub struct MatrixArgs {}

pub fn cmd_matrix(_args: MatrixArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab matrix` is not built yet")
}
