//! The terminal workbench.

#[derive(clap::Args, Debug)]
pub struct TuiArgs {}

pub fn cmd_tui(_args: TuiArgs) -> anyhow::Result<i32> {
    anyhow::bail!("the TUI is not built yet")
}

impl TuiArgs {
    /// What `tricklab` with no arguments opens.
    pub fn default_args() -> TuiArgs {
        TuiArgs {}
    }
}
