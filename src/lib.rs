//! tricklab: a workbench for fast-training ablations.
//!
//! Data flows one way: matrix TOML → expanded runs → queue → worker thread
//! (owns the device) → event stream → consumers (results store, TUI or
//! progress bars) → report (polars) → charts (plotters).
//!
//! The rooms, bottom up (tests/it/layers.rs keeps every import pointing down):
//! util, stats, native, config, dist (its environment contract and process
//! group), optim, data, model, plan, tricks, recipe, events, train, dist (the
//! rank and its launcher), matrix, store, session, report, charts, export,
//! headless, tui, cli.

pub mod charts;
pub mod cli;
pub mod config;
pub mod data;
pub mod dist;
pub mod events;
pub mod export;
pub mod headless;
pub mod matrix;
pub mod model;
pub mod native;
pub mod optim;
pub mod plan;
pub mod recipe;
pub mod record;
pub mod report;
pub mod script;
pub mod session;
pub mod stats;
pub mod store;
#[cfg(test)]
pub mod testkit;
pub mod train;
pub mod tricks;
pub mod tui;
pub mod util;
