//! `tricklab run --headless`: the progress-bar consumer of the event stream.

#[derive(clap::Args, Debug)]
pub struct RunArgs {}

pub fn cmd_run(_args: RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab run` is not built yet")
}
