//! Distributed training's one home. A run of world size N is N rank
//! processes: a launcher only sets the environment (`env`, one contract read
//! and written by the same type), each rank joins c10d's process group
//! (`group`) and trains its share (`rank`), and tricklab's own launcher
//! (`gang`) starts the ranks on this machine or through srun and reports
//! rank 0's run to the session as one run.
//!
//! `env` and `group` sit low (the model's SyncBN and the train step reduce
//! through them); `rank` and `gang` sit above `train`, which they drive.
//! tests/it/layers.rs places each part on its own floor.

pub mod env;
pub mod gang;
pub mod group;
pub mod rank;
