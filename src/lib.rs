//! tricklab: a workbench for fast-training ablations.
//!
//! Data flows one way: matrix TOML → expanded runs → queue → worker thread
//! (owns the device) → event stream → consumers (results store, TUI or
//! progress bars) → report (polars) → charts (plotters).

pub mod charts;
pub mod cli;
pub mod config;
pub mod data;
pub mod doctor;
pub mod events;
pub mod export;
pub mod gang;
pub mod headless;
pub mod matrix;
pub mod model;
pub mod optim;
pub mod plan;
pub mod queue;
pub mod recipe;
pub mod report;
pub mod session;
pub mod store;
pub mod train;
pub mod tricks;
pub mod tui;
pub mod util;
pub mod worker;
pub mod writeup;
