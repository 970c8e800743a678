//! The integration tests, one binary (linked once): the real `tricklab`
//! binary from the outside, and the crate's public interface.

mod cli;
mod demo_ladder;
mod fuzz;
mod interop;
mod layers;
mod plans;
mod reliability;
mod speedrun_ladder;
mod tui_e2e;
