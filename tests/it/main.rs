//! The integration tests, one binary (linked once): the real `tricklab`
//! binary from the outside, and the crate's public interface.
#![allow(
    clippy::too_many_lines,
    reason = "end-to-end scenarios read top to bottom, one user story each"
)]

mod cli;
mod common;
mod demo_ladder;
mod distributed;
mod docs;
mod folders;
mod fuzz;
mod interop;
mod layers;
mod plans;
mod records;
mod reliability;
mod scripts;
mod speedrun_ladder;
mod tui_e2e;
