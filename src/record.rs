//! What was decided for each variant and run, typed. The session decides it
//! once (from the matrix's plans); manifest.json records it, `RunStarted`
//! carries it, and the store, the report and the TUI read its fields. No
//! reader after the session decides it again, so a folder keeps its meaning
//! when a later version renames a trick or changes a recipe.
//!
//! A variant's common part (name, overrides, tricks, clock, reference)
//! assumes no engine: what it runs is [`Runs`], today the engine's plan.

use crate::config::{Clock, Override, Reference, RunConfig, RunSpec};
use crate::plan::{PlannedRun, RunPlan, Settings};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One variant of a matrix as decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantRecord {
    /// Its position in the matrix.
    pub index: usize,
    pub name: String,
    /// Its changes to the matrix's base, in the order written.
    pub overrides: Vec<Override>,
    /// The tricks it has on, by catalog key.
    pub tricks: Vec<String>,
    /// The convention its seconds are read on.
    pub clock: Clock,
    /// The variant its Δ is read against, where its matrix's kind names one.
    pub reference: Option<Reference>,
    /// What a run of it executes.
    pub runs: Runs,
}

/// What a variant's runs execute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "with", rename_all = "snake_case")]
pub enum Runs {
    /// tricklab's engine on a recipe: the settings and trick states as the
    /// recipe and overrides make them (absent from a folder of the version
    /// before records, read from what it kept), and the values the run
    /// trains with.
    Engine {
        config: Option<Box<RunConfig>>,
        settings: Box<Settings>,
    },
    /// The user's own training script (docs/scripts.md): its command,
    /// environment and patches as the variant's tricks make them.
    Script(Box<ScriptRecord>),
}

/// What a script variant's runs execute, decided when its matrix is parsed,
/// with where its sources stood then (the provenance `compare` reads).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScriptRecord {
    /// The command as an argv, the variant's trick arguments appended and
    /// their parameters filled in; the run's own placeholders (`{seed}`,
    /// `{out}`, `{device}`, `{world_size}`) are filled when it starts.
    pub argv: Vec<String>,
    /// The folder the command runs in (absolute): copied for a run with
    /// patches, never changed in place.
    pub dir: PathBuf,
    /// The environment the command gets on top of tricklab's own.
    pub env: BTreeMap<String, String>,
    /// Source patches, in the order applied.
    pub patches: Vec<Patch>,
    /// Processes a run spreads over (`torchrun --nproc-per-node`), 1: none.
    pub world_size: usize,
    /// The longest a run may take, in seconds.
    pub timeout_s: Option<f64>,
    /// Regular expressions with named captures read from the script's
    /// printed lines, for scripts that cannot be edited.
    pub parse: Vec<String>,
    /// Where the sources stood when the matrix was read.
    pub provenance: Provenance,
    /// The data set exported for the script (`{data}`), where it asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ScriptData>,
}

/// `[script.data]`: a tricklab data set a script reads as raw bytes
/// (`tricklab data export`'s layout), exported once per results folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScriptData {
    /// A data set spec (`tricklab data list`).
    pub name: String,
    pub train_per_class: Option<usize>,
    pub test_per_class: Option<usize>,
}

/// One exact-text replacement in a file of the script's folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    /// Relative to the script's folder.
    pub file: String,
    pub find: String,
    pub replace: String,
    /// How many times `find` occurs (and is replaced).
    pub count: usize,
    /// The trick that makes it.
    pub trick: String,
}

/// The sources a script variant ran from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// sha256 of each file a patch touches or the command names, by path
    /// relative to the script's folder.
    pub files: BTreeMap<String, String>,
    /// The folder's git commit, where it is a work tree.
    pub git_commit: Option<String>,
    /// sha256 of `git diff HEAD` (the uncommitted changes), where there are any.
    pub git_diff: Option<String>,
    /// The interpreter the command starts and torch's version under it,
    /// where they answer.
    pub interpreter: Option<String>,
    pub torch: Option<String>,
    /// The published repository and commit the folder is a checked copy
    /// of (`[script.source]`), for a published script.
    #[serde(default)]
    pub source: Option<Pinned>,
}

/// A published script's repository and commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pinned {
    /// GitHub's `owner/name`, or a git URL.
    pub repo: String,
    pub commit: String,
}

impl VariantRecord {
    /// The record of variant `index` (named `name`, changing its base by
    /// `overrides`) run on the engine with `config` resolved to `plan`.
    pub fn engine(
        index: usize,
        name: &str,
        overrides: &[Override],
        reference: Option<Reference>,
        (config, plan): (&RunConfig, &RunPlan),
    ) -> VariantRecord {
        VariantRecord {
            index,
            name: name.into(),
            overrides: overrides.to_vec(),
            tricks: config.tricks_on(),
            clock: plan.clock,
            reference,
            runs: Runs::Engine {
                config: Some(Box::new(config.clone())),
                settings: Box::new(plan.resolved()),
            },
        }
    }

    /// The recipe an engine variant starts from, where recorded.
    pub fn recipe(&self) -> Option<&str> {
        match &self.runs {
            Runs::Engine { config, .. } => config.as_ref().map(|c| c.recipe.as_str()),
            Runs::Script(_) => None,
        }
    }

    /// What a script variant runs.
    pub fn script(&self) -> Option<&ScriptRecord> {
        match &self.runs {
            Runs::Script(s) => Some(s),
            Runs::Engine { .. } => None,
        }
    }

    /// The settings and trick states an engine variant was made from.
    pub fn engine_config(&self) -> Option<&RunConfig> {
        match &self.runs {
            Runs::Engine { config, .. } => config.as_deref(),
            Runs::Script(_) => None,
        }
    }

    /// The values an engine variant trains with.
    pub fn settings(&self) -> Option<&Settings> {
        match &self.runs {
            Runs::Engine { settings, .. } => Some(settings),
            Runs::Script(_) => None,
        }
    }

    /// The overrides as written (`+label_smoothing`, `lr=0.2`).
    pub fn override_words(&self) -> Vec<String> {
        self.overrides.iter().map(ToString::to_string).collect()
    }
}

/// The data set a run read: its name and the hash of its images.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataId {
    pub name: String,
    pub hash: String,
}

impl DataId {
    pub fn new(name: &str, hash: &str) -> DataId {
        DataId {
            name: name.into(),
            hash: hash.into(),
        }
    }
}

/// One run as it started: its variant's record, the data it read and the
/// loader that fed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub variant: VariantRecord,
    pub data: DataId,
    /// The loader feeding a streaming run, where one does (its decoder and
    /// threads), for the log and the Live tab.
    pub loader: Option<String>,
}

impl RunRecord {
    /// The clock the run's seconds are read on.
    pub fn clock(&self) -> Clock {
        self.variant.clock
    }

    /// Whether the run evaluates with TTA (its resolved level above 0).
    pub fn uses_tta(&self) -> bool {
        self.variant.settings().is_some_and(|s| s.tta_level > 0)
    }
}

impl PlannedRun {
    /// The record of this run, as `RunStarted` carries it.
    pub fn record(&self, data: DataId, loader: Option<String>) -> RunRecord {
        let s: &RunSpec = &self.spec;
        RunRecord {
            variant: VariantRecord::engine(
                s.id.index,
                &s.id.variant,
                &s.overrides,
                s.reference.clone(),
                (&self.config, &self.plan),
            ),
            data,
            loader,
        }
    }
}

/// The record of `spec` planned from its recipe, for a run made outside a
/// matrix's session: the TUI's sample state, and tests that feed events.
pub fn of_spec(spec: &RunSpec, data: DataId) -> anyhow::Result<RunRecord> {
    Ok(crate::recipe::plan_run(spec)?.record(data, None))
}
