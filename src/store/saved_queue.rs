//! A results folder's saved queue (`DIR/queue.json`): each run as planned,
//! with the status it had when last written. The session's live queue
//! writes it; resume, merge, `results` and the cluster commands read it.

use crate::config::RunSpec;
use crate::events::RunStatus;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    pub spec: RunSpec,
    pub status: RunStatus,
    pub reason: Option<String>,
}

/// A results folder's saved queue: its runs as planned, with the status
/// each had when it was last written.
pub fn load_saved(dir: &Path) -> Result<Vec<Entry>> {
    let path = dir.join("queue.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is damaged ({e})", path.display()))
}

/// Writes `entries` to `path` atomically, into the results folder as it is:
/// never recreating one deleted meanwhile.
pub fn save(path: &Path, entries: &[&Entry]) -> Result<()> {
    let text = serde_json::to_string_pretty(entries)?;
    crate::util::write_atomic_into(path, |f| {
        std::io::Write::write_all(f, text.as_bytes()).map_err(Into::into)
    })
}
