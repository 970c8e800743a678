//! Training scripts under the workbench (issue 62): the event protocol a
//! script reports through and the runner of one run. The `[script]` matrix
//! and the tricks a script declares come next; docs/scripts.md says what
//! works.

pub mod protocol;
pub mod run;

pub use run::{ScriptRun, run};
