//! A results folder opened once for reading: its manifest, the record of
//! what its session decided, and its runs. The report, its effects and
//! seeds, and the TUI's browser read a folder through this, and none of them
//! decides again what the session decided.

use super::{RunRow, folder_runs, read_manifest};
use crate::matrix::Record;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub struct Folder {
    pub dir: PathBuf,
    pub manifest: serde_json::Value,
    /// The matrix as its session decided it, where it reads.
    pub record: Option<Record>,
    /// One line naming the folder where the record does not read whole:
    /// what of the report it lacks, and why. The report then shows what
    /// the runs alone support.
    pub note: Option<String>,
    /// The runs table, each run once (a requeued run's last row).
    pub runs: Vec<RunRow>,
}

impl Folder {
    /// Reads `dir`'s manifest, record and runs; an error names the folder
    /// and the fix (not a results folder, a broken manifest or runs table).
    pub fn open(dir: &Path) -> Result<Folder> {
        // The runs first: a damaged table is what a user must be told of
        // before anything else the folder lacks.
        let mut runs = folder_runs(dir)?;
        let manifest = read_manifest(dir)?;
        let (record, note) = match record_of(dir, &manifest) {
            Ok(Upgraded::Whole(r)) => (Some(r), None),
            Ok(Upgraded::Partly(r, why)) => (Some(r), Some(why)),
            Err(why) => (None, Some(why)),
        };
        // Each run once: a run requeued, or merged in from two shards,
        // counts as its last row.
        let mut seen = std::collections::HashSet::new();
        runs.reverse();
        runs.retain(|r| seen.insert((r.variant.clone(), r.repeat)));
        runs.reverse();
        Ok(Folder {
            dir: dir.to_path_buf(),
            runs,
            manifest,
            record,
            note,
        })
    }

    /// Every folder of `dirs`, each read once.
    pub fn open_all(dirs: &[PathBuf]) -> Result<Vec<Folder>> {
        dirs.iter().map(|d| Folder::open(d)).collect()
    }

    /// The decided matrix, where it reads.
    pub fn record(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    /// Why the decided matrix does not read whole, where it does not.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
}

/// A record as read: whole, or (a folder of the version before records,
/// whose matrix file no longer parses) the part its `matrix_resolved`
/// kept, with the line saying what is missing.
pub enum Upgraded {
    Whole(Record),
    Partly(Record, String),
}

impl Upgraded {
    pub fn record(self) -> Record {
        match self {
            Upgraded::Whole(r) | Upgraded::Partly(r, _) => r,
        }
    }
}

/// The record a folder's manifest holds; for a folder written before
/// records were kept, its upgrade ([`upgrade`]). One line naming the folder
/// (as the report names it) where it reads only in part, or not at all.
pub fn record_of(
    dir: &Path,
    manifest: &serde_json::Value,
) -> std::result::Result<Upgraded, String> {
    let name = super::session_label(dir);
    if let Some(r) = Record::from_manifest(manifest) {
        return r
            .map(Upgraded::Whole)
            .map_err(|e| format!("{name}: {}", crate::util::one_line(&e)));
    }
    match upgrade(manifest) {
        Ok(r) => Ok(Upgraded::Whole(r)),
        Err(e) => {
            let why = format!("{name}: {}", crate::util::one_line(&e));
            match from_resolved(manifest) {
                Some(r) => Ok(Upgraded::Partly(
                    r,
                    format!(
                        "{why}; its kind, target and variants are read from what it recorded, without its design or until_decided"
                    ),
                )),
                None => Err(why),
            }
        }
    }
}

/// The part of a record a folder of the version before kept in
/// `matrix_resolved`: its header and each variant's name, overrides,
/// tricks, clock and resolved settings (the design and stopping rules it
/// did not keep).
fn from_resolved(manifest: &serde_json::Value) -> Option<Record> {
    use crate::record::{Runs, VariantRecord};
    let m = manifest.get("matrix_resolved")?;
    let kind: crate::matrix::Kind = serde_json::from_value(m.get("kind")?.clone()).ok()?;
    let variants: Vec<VariantRecord> = m["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| VariantRecord {
            index: i,
            name: v["name"].as_str().unwrap_or_default().into(),
            overrides: words(&v["overrides"])
                .iter()
                .filter_map(|o| crate::config::Override::parse_word(o))
                .collect(),
            tricks: words(&v["tricks"]),
            clock: serde_json::from_value(v["clock"].clone()).unwrap_or_default(),
            reference: kind.reference(i),
            runs: Runs::Engine {
                config: None,
                settings: Box::new(
                    serde_json::from_value(v["resolved"].clone()).unwrap_or_default(),
                ),
            },
        })
        .collect();
    Some(Record {
        version: 0,
        name: m["name"].as_str()?.into(),
        description: String::new(),
        kind,
        recipe: m["recipe"].as_str().unwrap_or_default().into(),
        clock: variants.first().map(|v| v.clock).unwrap_or_default(),
        data: m["data"].as_str().unwrap_or_default().into(),
        target: m["target"].as_f64().unwrap_or(f64::NAN),
        seeds: m["seeds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_u64)
            .collect(),
        budget_s: None,
        adaptive: None,
        until_decided: None,
        shard: None,
        design: None,
        variants,
    })
}

fn words(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(String::from))
        .collect()
}

/// The one upgrade of a folder written before its manifest held a record:
/// its matrix file decided again with this version's parser, the only
/// call of the parser after a session. It fails where a trick or recipe it
/// names has changed since.
fn upgrade(manifest: &serde_json::Value) -> Result<Record> {
    let text = manifest["matrix_file"].as_str().ok_or_else(|| {
        anyhow::anyhow!(
            "its manifest.json records no matrix: the report shows what the runs alone support"
        )
    })?;
    upgrade_text(text)
}

/// [`upgrade`] of a recorded matrix text (merge's, its shard taken out).
pub(super) fn upgrade_text(text: &str) -> Result<Record> {
    let m = crate::matrix::parse(text, "manifest.json").map_err(|e| {
        anyhow::anyhow!(
            "written before tricklab kept its record, and its matrix no longer reads ({}): the report shows what the runs alone support",
            crate::util::one_line(&e)
        )
    })?;
    Ok(m.record())
}
