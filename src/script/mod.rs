//! Training scripts under the workbench (issue 62): the event protocol a
//! script reports through. Its runner, the `[script]` matrix and the
//! tricks a script declares come next; docs/scripts.md says what works.

pub mod declare;
pub mod program;
pub mod protocol;

pub use program::preflight;
