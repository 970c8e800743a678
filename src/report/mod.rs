//! Aggregation of results folders with polars: time-to-target tables.

#[derive(clap::Args, Debug)]
pub struct ReportArgs {}

pub fn cmd_report(_args: ReportArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab report` is not built yet")
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {}

pub fn cmd_compare(_args: CompareArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab compare` is not built yet")
}
