//! A matrix as decided: its header and every variant's record
//! (`crate::record`). The session writes it into manifest.json once; the
//! questions `until_decided` asks, the report, compare, merge and the TUI's
//! browser read it, and none of them parses the matrix file again.

use super::{Adaptive, Design, Kind, Matrix, UntilDecided};
use crate::config::Clock;
use crate::record::VariantRecord;
use serde::{Deserialize, Serialize};

/// The record's format: a reader refuses a later one by name.
pub const RECORD_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub name: String,
    pub description: String,
    pub kind: Kind,
    /// The recipe the variants start from.
    pub recipe: String,
    /// The convention its times are read on: its recipe's publication's.
    pub clock: Clock,
    pub data: String,
    pub target: f64,
    pub seeds: Vec<u64>,
    pub budget_s: Option<f64>,
    pub adaptive: Option<Adaptive>,
    pub until_decided: Option<UntilDecided>,
    /// (i, n): the i-th of n shards of the matrix's runs.
    pub shard: Option<(usize, usize)>,
    pub design: Option<Design>,
    pub variants: Vec<VariantRecord>,
}

impl Matrix {
    /// What this matrix decided, from the plans made when it was parsed.
    pub fn record(&self) -> Record {
        Record {
            version: RECORD_VERSION,
            name: self.name.clone(),
            description: self.description.clone(),
            kind: self.kind,
            recipe: self.recipe.clone(),
            clock: match &self.script {
                Some(s) => s.declared.clock,
                None => crate::recipe::convention(&self.recipe).unwrap_or_default(),
            },
            data: self.data.clone(),
            target: self.target,
            seeds: self.seeds.clone(),
            budget_s: self.budget.map(|b| b.as_secs_f64()),
            adaptive: self.adaptive,
            until_decided: self.until_decided,
            shard: self.shard,
            design: self.design.clone(),
            variants: (0..self.variants.len())
                .map(|i| self.variant_record(i))
                .collect(),
        }
    }

    /// Variant `index` as decided: its engine plan or its script's command.
    pub fn variant_record(&self, index: usize) -> VariantRecord {
        let v = &self.variants[index];
        match &self.script {
            Some(s) => VariantRecord {
                index,
                name: v.name.clone(),
                overrides: v.overrides.clone(),
                tricks: s.declared.tricks_on(&v.overrides),
                clock: s.declared.clock,
                reference: self.reference(index),
                runs: crate::record::Runs::Script(Box::new((*s.runs[index]).clone())),
            },
            None => {
                let (config, plan) = &self.plans[index];
                VariantRecord::engine(
                    index,
                    &v.name,
                    &v.overrides,
                    self.reference(index),
                    (config, plan),
                )
            }
        }
    }
}

impl Record {
    /// The record in a manifest's `record`; an error names what is wrong
    /// with it, `None` where the manifest has none (a folder written
    /// before records were kept: see `store::Folder`).
    pub fn from_manifest(manifest: &serde_json::Value) -> Option<anyhow::Result<Record>> {
        let v = manifest.get("record")?;
        let version = v["version"].as_u64().unwrap_or(0);
        if version > u64::from(RECORD_VERSION) {
            return Some(Err(anyhow::anyhow!(
                "its record is version {version}, newer than this tricklab reads ({RECORD_VERSION}): update tricklab"
            )));
        }
        Some(
            serde_json::from_value(v.clone()).map_err(|e| {
                anyhow::anyhow!("its record does not read ({e}): restore manifest.json")
            }),
        )
    }

    /// Variant `index`'s record, where the matrix has it.
    pub fn variant(&self, index: usize) -> Option<&VariantRecord> {
        self.variants.get(index)
    }

    /// The variant named `name`.
    pub fn variant_named(&self, name: &str) -> Option<&VariantRecord> {
        self.variants.iter().find(|v| v.name == name)
    }
}
