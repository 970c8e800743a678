//! The user's own training scripts under the workbench (docs/scripts.md):
//! the `[script]` and `[tricks.NAME]` tables a matrix declares them in, the
//! program a command starts, the event protocol a script reports through,
//! and the runner of one run.

pub mod declare;
pub mod keeper;
pub mod program;
pub mod protocol;
pub mod run;

pub use program::preflight;
pub use run::{ScriptRun, run};
