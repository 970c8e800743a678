//! `tricklab merge FOLDER... --into DIR`: shard folders (from `run --shard`
//! or a Slurm array) joined into one results folder that `report`, `compare`
//! and the charts read like any other. Folders of another matrix, code
//! version or data set are refused; duplicates and missing runs are reported.

use super::{Ended, RunRow, read_manifest, read_runs, write_runs};
use anyhow::{Context, Result, bail};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// What a merge found, for the user.
#[derive(Debug, Default, PartialEq)]
pub struct MergeSummary {
    pub folders: usize,
    /// Runs in the merged folder (one row each).
    pub runs: usize,
    /// Runs finished in more than one folder (the first is kept).
    pub duplicates: Vec<String>,
    /// Runs the shards' plans hold that no folder finished.
    pub missing: Vec<String>,
}

/// The matrix a folder ran, without its shard: what all shards share.
fn unsharded(manifest: &serde_json::Value, dir: &Path) -> Result<toml::Table> {
    let text = manifest["matrix_file"]
        .as_str()
        .with_context(|| format!("{}: the manifest has no matrix_file", dir.display()))?;
    let mut t: toml::Table = toml::from_str(text)
        .with_context(|| format!("{}: its recorded matrix does not parse", dir.display()))?;
    t.remove("shard");
    Ok(t)
}

fn data_hashes(m: &serde_json::Value) -> BTreeSet<String> {
    m["data_sets"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["hash"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The runs a folder's saved queue planned: (variant, repeat).
fn planned(dir: &Path) -> Vec<(String, u32)> {
    crate::store::saved_queue::load_saved(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.spec.id.variant, e.spec.id.repeat as u32))
        .collect()
}

/// Every run of the whole (unsharded) matrix as its record says: each
/// variant at each seed's position, (variant, repeat). Folders from before
/// the typed record say it in `matrix_resolved`.
fn whole_matrix(manifest: &serde_json::Value) -> Option<Vec<(String, u32)>> {
    let (seeds, names) = match crate::matrix::Record::from_manifest(manifest) {
        Some(r) => {
            let r = r.ok()?;
            let names = r.variants.into_iter().map(|v| v.name).collect();
            (r.seeds.len() as u32, names)
        }
        None => {
            let m = &manifest["matrix_resolved"];
            let names: Vec<String> = m["variants"]
                .as_array()?
                .iter()
                .map(|v| v["name"].as_str().map(String::from))
                .collect::<Option<_>>()?;
            (m["seeds"].as_array()?.len() as u32, names)
        }
    };
    Some(
        (0..seeds)
            .flat_map(|r| names.iter().map(move |n| (n.clone(), r)))
            .collect(),
    )
}

#[allow(
    clippy::too_many_lines,
    reason = "merge in order: read, check compatible, dedupe, write atomically"
)]
pub fn merge(folders: &[PathBuf], into: &Path) -> Result<MergeSummary> {
    if folders.is_empty() {
        bail!("name the shard folders to merge (results/<matrix>/<timestamp>-shard-i-of-N ...)");
    }
    if into.exists() && std::fs::read_dir(into).map_or(true, |mut d| d.next().is_some()) {
        bail!(
            "{} already exists and is not empty: pass a new folder to --into",
            into.display()
        );
    }
    let first = read_manifest(&folders[0])?;
    // The binary's identity: the commit it was built from (older folders: the
    // working tree's HEAD when they ran).
    let code = |m: &serde_json::Value| {
        let commit = if m["build_commit"].is_string() {
            &m["build_commit"]
        } else {
            &m["git_commit"]
        };
        (m["tricklab_version"].clone(), commit.clone())
    };
    let (matrix, version, data) = (
        unsharded(&first, &folders[0])?,
        code(&first),
        data_hashes(&first),
    );
    for d in &folders[1..] {
        let m = read_manifest(d)?;
        let why = if unsharded(&m, d)? != matrix {
            Some("it ran another matrix file")
        } else if code(&m) != version {
            Some("it was made by another version of tricklab")
        } else if !data_hashes(&m).is_empty() && !data.is_empty() && data_hashes(&m) != data {
            Some("it trained on other data")
        } else {
            None
        };
        if let Some(why) = why {
            bail!(
                "{}: not a shard of {} ({why}); merge only the shards of one run",
                d.display(),
                folders[0].display()
            );
        }
    }

    let mut kept: Vec<(RunRow, PathBuf)> = Vec::new();
    let mut at: HashMap<(String, u32), usize> = HashMap::new();
    let mut summary = MergeSummary {
        folders: folders.len(),
        ..Default::default()
    };
    let mut expected: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut devices: BTreeSet<String> = BTreeSet::new();
    let mut data_sets: Vec<serde_json::Value> = Vec::new();
    for d in folders {
        let m = read_manifest(d)?;
        for v in m["devices"].as_array().into_iter().flatten() {
            devices.insert(v.as_str().unwrap_or_default().to_string());
        }
        for v in m["data_sets"].as_array().into_iter().flatten() {
            if !data_sets.contains(v) {
                data_sets.push(v.clone());
            }
        }
        expected.extend(planned(d));
        // Every shard records the whole matrix: the runs no folder planned (a
        // shard that never started) are expected too. Folders from before
        // `matrix_resolved` are upgraded from their matrix file.
        if let Some(all) = whole_matrix(&m) {
            expected.extend(all);
        } else if let Ok(r) = super::folder::upgrade_text(&toml::to_string(&unsharded(&m, d)?)?) {
            let names: Vec<String> = r.variants.into_iter().map(|v| v.name).collect();
            expected.extend(
                (0..r.seeds.len() as u32).flat_map(|k| names.iter().map(move |n| (n.clone(), k))),
            );
        }
        let rows = match d.join("runs.parquet") {
            p if p.is_file() => read_runs(&p)?,
            _ => Vec::new(),
        };
        for r in rows {
            let id = (r.variant.clone(), r.repeat);
            match at.get(&id) {
                None => {
                    at.insert(id, kept.len());
                    kept.push((r, d.clone()));
                }
                Some(&i) => {
                    let done = |x: &RunRow| x.status == Ended::Done;
                    if done(&kept[i].0) && done(&r) {
                        summary.duplicates.push(format!(
                            "{}#{} (in {} and {})",
                            r.variant,
                            r.repeat,
                            kept[i].1.display(),
                            d.display()
                        ));
                    } else if !done(&kept[i].0) && done(&r) {
                        kept[i] = (r, d.clone());
                    }
                }
            }
        }
    }
    for (v, rep) in &expected {
        let finished = at
            .get(&(v.clone(), *rep))
            .is_some_and(|&i| kept[i].0.status == Ended::Done);
        if !finished {
            summary.missing.push(format!("{v}#{rep}"));
        }
    }

    std::fs::create_dir_all(into)
        .with_context(|| format!("cannot create {}; pass a writable --into", into.display()))?;
    let _lock = crate::util::lock::FolderLock::acquire(into, "merging")?;
    // Checked again under the lock: another merge may have filled it meanwhile.
    let others = std::fs::read_dir(into)?
        .flatten()
        .any(|e| e.file_name() != crate::util::lock::LOCK_FILE);
    if others {
        bail!(
            "{} was filled by another merge meanwhile: pass a new folder to --into",
            into.display()
        );
    }
    for sub in ["steps", "epochs"] {
        std::fs::create_dir_all(into.join(sub))
            .with_context(|| format!("cannot create {}", into.join(sub).display()))?;
    }
    for (r, d) in &kept {
        for sub in ["steps", "epochs"] {
            // Under its key, whichever key its shard wrote it under.
            if let Some(f) = super::run_file(d, sub, r) {
                let key = r.id().key();
                std::fs::copy(&f, into.join(sub).join(format!("{key}.parquet"))).with_context(
                    || format!("cannot copy {} into {}", f.display(), into.display()),
                )?;
            }
        }
    }
    let mut rows: Vec<RunRow> = kept.into_iter().map(|(r, _)| r).collect();
    rows.sort_by_key(|r| (r.repeat, r.index));
    summary.runs = rows.len();
    write_runs(&into.join("runs.parquet"), &rows)?;
    let mut manifest = first.clone();
    manifest["matrix_file"] = serde_json::json!(toml::to_string(&matrix)?);
    manifest["devices"] = serde_json::json!(devices);
    manifest["data_sets"] = serde_json::json!(data_sets);
    manifest["merged_from"] = serde_json::json!(
        folders
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
    );
    manifest["merged_at"] = serde_json::json!(chrono::Local::now().to_rfc3339());
    crate::util::write_atomic(
        &into.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?.as_bytes(),
    )?;
    Ok(summary)
}
