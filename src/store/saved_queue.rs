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

/// The reason a queued run was skipped for: its matrix's `budget` was spent
/// before it started. `results` and the report count the runs marked so.
pub const BUDGET_SPENT: &str = "matrix time budget spent";

/// How a matrix's budget stopped its session, from its saved queue: the
/// runs planned that were handed out, of all it planned; `None` where the
/// budget skipped none.
pub fn budget_stop(entries: &[Entry]) -> Option<(usize, usize)> {
    let skipped = entries
        .iter()
        .filter(|e| e.status == RunStatus::Skipped && e.reason.as_deref() == Some(BUDGET_SPENT))
        .count();
    (skipped > 0).then(|| (entries.len() - skipped, entries.len()))
}

/// A budget as a matrix writes one: `90s`, `30m`, `2h`.
pub fn budget_words(secs: f64) -> String {
    if secs.fract() != 0.0 {
        return format!("{secs}s");
    }
    match secs as u64 {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
