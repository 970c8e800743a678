//! Ablation matrix files (`ablations/*.toml`) and their expansion into runs.
//! The format is documented in `ablations/README.md`.

mod estimate;
mod parse;
mod questions;
mod record;
#[cfg(test)]
mod script_tests;
mod show;

pub use estimate::{DataCounts, Estimate, estimate, human};
pub use parse::{SCRIPT, load, parse, parse_in, parse_shard, with_script_dir};
pub use questions::{
    Asked, Decision, Precision, Response, Sample, decide_all, precision_all, still_open,
};
pub use record::{RECORD_VERSION, Record};
pub use show::{matrix_files, pins_a_published_copy, resolved_variants, to_json, until_words};

use crate::config::{Override, Reference, RunConfig, RunSpec};
use crate::events::RunId;
use crate::plan::{PlannedRun, RunPlan};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Ladder,
    LeaveOneOut,
    AddOne,
    Grid,
    List,
    /// Every on/off combination of the factors (2^k variants).
    Factorial,
    /// A 2^(k−p) fraction of it, at a stated resolution.
    Fractional,
    /// Random orders of the factors, each a ladder; shared configurations run once.
    Shapley,
}

/// The factors of a factorial, fractional or Shapley matrix and where each
/// variant sits among them: what the effects analysis reads.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Design {
    /// Factor names, in the order of the words' bits: the `vary` tricks, then
    /// the `[levels]` settings.
    pub factors: Vec<String>,
    /// Each variant's configuration (bit i: factor i at its high level), in
    /// the order of `Matrix::variants`.
    pub configs: Vec<crate::stats::design::Word>,
    pub plan: DesignPlan,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesignPlan {
    /// A full factorial (no defining words) or a regular fraction of one.
    Factorial(crate::stats::design::Design),
    /// The sampled orders, each a ladder over the factors.
    Shapley { orders: Vec<Vec<usize>>, seed: u64 },
}

impl Design {
    /// The variant at configuration `w`, if the design ran it.
    pub fn variant_of(&self, w: crate::stats::design::Word) -> Option<usize> {
        self.configs.iter().position(|c| *c == w)
    }

    /// The terms an analysis of the design fits: every main effect and
    /// two-way interaction, one per alias set of a fraction (the first in
    /// order), each with the aliases of order ≤ 2 it stands for. A Shapley
    /// design fits none: its credit comes from the sampled orders.
    pub fn terms(&self) -> Vec<(crate::stats::design::Word, Vec<crate::stats::design::Word>)> {
        use crate::stats::design::{Word, order};
        let k = self.factors.len();
        let mut all: Vec<Word> = (0..k).map(|i| 1 << i).collect();
        for i in 0..k {
            for j in i + 1..k {
                all.push(1 << i | 1 << j);
            }
        }
        let DesignPlan::Factorial(d) = &self.plan else {
            return Vec::new();
        };
        let mut out: Vec<(Word, Vec<Word>)> = Vec::new();
        for w in all {
            let aliases: Vec<Word> = d
                .aliases(w)
                .into_iter()
                .filter(|a| *a != w && order(*a) <= 2)
                .collect();
            if out.iter().any(|(kept, _)| aliases.contains(kept)) {
                continue;
            }
            out.push((w, aliases));
        }
        out
    }

    /// What `matrix show` prints about the design: its size, the defining
    /// relation and aliases of a fraction, or what sharing saves in Shapley orders.
    pub fn describe(&self) -> Vec<String> {
        use crate::stats::design::{letters, word_label};
        let names = &self.factors;
        let mut out = vec![format!(
            "factors: {}",
            names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{}={n}", letters(1 << i)))
                .collect::<Vec<_>>()
                .join(", ")
        )];
        match &self.plan {
            DesignPlan::Factorial(d) if d.defining_relation.is_empty() => {
                out.push(format!(
                    "full factorial 2^{}: {} configurations; every main effect and interaction is estimable",
                    d.k,
                    d.n_runs()
                ));
            }
            DesignPlan::Factorial(d) => {
                let p = d.generators.len();
                out.push(format!(
                    "fractional 2^({}-{p}) = {} configurations, resolution {}; generators {}",
                    d.k,
                    d.n_runs(),
                    roman(d.resolution().unwrap_or(0)),
                    d.generators
                        .iter()
                        .map(|(f, w)| format!("{}={}", letters(1 << f), letters(*w)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                out.push(format!(
                    "defining relation: I = {}",
                    d.defining_relation
                        .iter()
                        .map(|w| letters(*w))
                        .collect::<Vec<_>>()
                        .join(" = ")
                ));
                for (term, aliases) in d.alias_table(3) {
                    if aliases.is_empty() {
                        continue;
                    }
                    out.push(format!(
                        "  {} = {}{}",
                        word_label(term, names),
                        aliases
                            .iter()
                            .map(|w| word_label(*w, names))
                            .collect::<Vec<_>>()
                            .join(" = "),
                        if d.estimable(term) {
                            ""
                        } else {
                            "  (aliased: not estimable alone)"
                        }
                    ));
                }
            }
            DesignPlan::Shapley { orders, seed } => {
                let (rungs, distinct) = crate::stats::design::runs_saved(orders);
                out.push(format!(
                    "shapley: {} random orders (seed {seed}) of {} factors = {rungs} ladder rungs; {distinct} distinct configurations run once each ({} saved)",
                    orders.len(),
                    names.len(),
                    rungs - distinct
                ));
            }
        }
        out
    }
}

/// Resolution in the textbook's Roman numerals.
fn roman(r: u32) -> &'static str {
    [
        "-", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X",
    ]
    .get(r as usize)
    .copied()
    .unwrap_or("X+")
}

impl Kind {
    /// What variant `index` of a matrix of this kind is read against: a
    /// ladder's previous rung, add-one's base, leave-one-out's all-on.
    pub fn reference(self, index: usize) -> Option<Reference> {
        let role = match self {
            Kind::Ladder if index > 0 => {
                return Some(Reference {
                    index: index - 1,
                    role: "previous rung".into(),
                });
            }
            Kind::AddOne => "base",
            Kind::LeaveOneOut => "all on",
            _ => return None,
        };
        (index > 0).then(|| Reference {
            index: 0,
            role: role.into(),
        })
    }

    /// As the matrix file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ladder => "ladder",
            Kind::LeaveOneOut => "leave-one-out",
            Kind::AddOne => "add-one",
            Kind::Grid => "grid",
            Kind::List => "list",
            Kind::Factorial => "factorial",
            Kind::Fractional => "fractional",
            Kind::Shapley => "shapley",
        }
    }
}

/// Keep adding seeds to a variant until the 95% CI of its accuracy is
/// narrower than `ci_width`, from `min` up to `max` runs.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Adaptive {
    pub ci_width: f64,
    pub min: usize,
    pub max: usize,
}

/// Keep adding seeds, one round across every variant at a time, until each
/// difference the matrix asks about (see [`Matrix::asked`]) is decided by
/// `stats::decide`: its interval excludes 0, or lies within
/// ±margin. The looks are at rounds `min` to `max`, and α is split evenly
/// over those planned looks (Bonferroni over looks). With a width asked,
/// also (or only) until every asked difference's 95% CI, and each Shapley
/// value's of a full factorial, is at most that wide: a precision stop,
/// which spends no α (see `questions::precision_all`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UntilDecided {
    /// The time margin as a fraction of the reference's mean time (of the
    /// design's mean for an effect); `None`: time is not asked.
    pub time: Option<f64>,
    /// The accuracy margin, a fraction (0.005 = 0.5 points); `None`: not asked.
    pub acc: Option<f64>,
    /// The widest 95% CI of time, full width (hi − lo, as `adaptive`'s
    /// `ci_width`), as a fraction of the reference's mean time (of the
    /// design's mean for an effect or a Shapley value); `None`: not asked.
    pub width_time: Option<f64>,
    /// The widest 95% CI of accuracy, full width, a fraction (0.01 = one
    /// point from end to end); `None`: not asked.
    pub width_acc: Option<f64>,
    /// The first look's round (seeds a variant): at least 2, for a spread.
    pub min: usize,
    /// The most rounds; the last planned look.
    pub max: usize,
    /// Family-wise error rate over all looks.
    pub alpha: f64,
}

impl UntilDecided {
    /// Planned looks: one after each round from `min` to `max`.
    pub fn looks(&self) -> usize {
        self.max + 1 - self.min
    }

    /// Whether it asks for verdicts (`time` or `acc`), not only widths.
    pub fn decides(&self) -> bool {
        self.time.is_some() || self.acc.is_some()
    }

    /// Whether it asks for a widest interval (`width_time` or `width_acc`).
    pub fn widths(&self) -> bool {
        self.width_time.is_some() || self.width_acc.is_some()
    }

    /// What a run of it stops on, for the log and the report:
    /// `every asked difference is decided`.
    pub fn goal(&self) -> &'static str {
        match (self.decides(), self.widths()) {
            (true, true) => {
                "every asked difference is decided and every asked interval is as narrow as asked"
            }
            (false, true) => "every asked interval is as narrow as asked",
            _ => "every asked difference is decided",
        }
    }

    /// The look after `rounds` complete rounds (1-based), `None` before `min`.
    pub fn look_at(&self, rounds: usize) -> Option<usize> {
        (rounds >= self.min).then(|| (rounds + 1 - self.min).min(self.looks()))
    }
}

/// What a worker runs for one run of a matrix.
#[derive(Clone, Debug)]
// One a run, handed to the worker and unpacked at once.
#[allow(clippy::large_enum_variant)]
pub enum Job {
    /// tricklab's engine, on the run's plan.
    Engine(PlannedRun),
    /// The user's script, with the record its run starts with.
    Script {
        spec: RunSpec,
        record: std::sync::Arc<crate::record::RunRecord>,
    },
}

impl Job {
    pub fn spec(&self) -> &RunSpec {
        match self {
            Job::Engine(p) => &p.spec,
            Job::Script { spec, .. } => spec,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub name: String,
    /// Applied in order on top of the recipe.
    pub overrides: Vec<Override>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub name: String,
    pub description: String,
    pub path: Option<PathBuf>,
    /// The file as run (goes into the manifest).
    pub text: String,
    pub recipe: String,
    pub kind: Kind,
    pub data: String,
    /// The file (or `--data`) names the data; otherwise `data` is the
    /// embedded subset by default, which a full-size recipe must not train
    /// on unawares.
    pub data_named: bool,
    pub device: Option<String>,
    pub target: f64,
    pub budget: Option<Duration>,
    /// Seeds of the fixed repeats (with `adaptive`, the first `min` of them).
    pub seeds: Vec<u64>,
    pub adaptive: Option<Adaptive>,
    /// Seeds added a round at a time until every asked Δ is decided.
    pub until_decided: Option<UntilDecided>,
    /// (i, N): only the i-th (1-based) of N shares of the runs.
    pub shard: Option<(usize, usize)>,
    pub variants: Vec<Variant>,
    /// The factors and each variant's place among them (factorial,
    /// fractional and Shapley matrices).
    pub design: Option<Design>,
    /// Found by comparing the variants' plans: identical variants, settings of
    /// tricks that are never on. Shown by `matrix show` and at the start of a run.
    pub warnings: Vec<String>,
    /// Each variant's configuration and plan (index-aligned with
    /// `variants`), decided once when the matrix is parsed: the preflight,
    /// the scale guard, the gangs, the manifest and the workers read these.
    pub plans: Vec<(RunConfig, RunPlan)>,
    /// A script matrix's command and tricks, and what each variant runs
    /// (index-aligned with `variants`); `None` for the engine's, whose
    /// variants are in `plans`.
    pub script: Option<std::sync::Arc<ScriptMatrix>>,
}

/// A script matrix as decided when it was read.
#[derive(Debug)]
pub struct ScriptMatrix {
    pub declared: crate::script::declare::Declared,
    pub runs: Vec<std::sync::Arc<crate::record::ScriptRecord>>,
}

impl PartialEq for ScriptMatrix {
    /// Two script matrices are alike when their variants run alike.
    fn eq(&self, other: &ScriptMatrix) -> bool {
        self.runs == other.runs
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Loads matrix files; `repeats` replaces each one's seeds with 0..N.
/// Every matrix on data set `data` where one is given (`--data`).
pub fn on_data(matrices: Vec<Matrix>, data: Option<&str>) -> anyhow::Result<Vec<Matrix>> {
    let Some(d) = data else {
        return Ok(matrices);
    };
    matrices
        .into_iter()
        .map(|m| {
            m.with_data(d)
                .map_err(|e| anyhow::anyhow!("--data {d}: {e:#}"))
        })
        .collect()
}

pub fn load_all(paths: &[PathBuf], repeats: Option<usize>) -> anyhow::Result<Vec<Matrix>> {
    paths
        .iter()
        .map(|p| {
            let mut m = load(p)?;
            if let Some(n) = repeats {
                if n == 0 || n > parse::MAX_REPEATS {
                    anyhow::bail!("--repeats {n}: give 1 to {}", parse::MAX_REPEATS);
                }
                m.seeds = (0..n as u64).collect();
            }
            Ok(m)
        })
        .collect()
}

/// The target of a matrix's `--tiny` form: what the tiny recipes reach in
/// 3 epochs on the embedded data (40–49% measured, demo ladder and speedrun
/// ladder rehearsals).
pub const TINY_TARGET: f64 = 0.40;

impl Matrix {
    /// How errors name the matrix: its file, or its name when it has none.
    pub fn origin(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| self.name.clone(), |p| p.display().to_string())
    }

    /// The same matrix on another data set (`run --data`). The recorded text
    /// says so too, so the manifest and a `--resume` follow the override.
    pub fn with_data(mut self, data: &str) -> anyhow::Result<Matrix> {
        if self.script.is_some() {
            anyhow::bail!(
                "{}: --data is the engine's; a script reads its own data (pass it in [script] command)",
                self.origin()
            );
        }
        crate::data::locate(data)?;
        self.text = self.text_with("data", data, &format!("--data {data}"))?;
        self.data = data.into();
        self.data_named = true;
        Ok(self)
    }

    /// The same matrix at CPU scale (`run --tiny`): every variant on its
    /// recipe's `tiny-` form and the embedded data, under the name
    /// `<name>-tiny` so that its results never mix with full-size runs. The
    /// matrix's own settings of what the tiny form fixes (batch, epochs, the
    /// knobs counted in epochs: `tiny_settings`) are dropped; a grid over them
    /// is kept. A GPU matrix can so be rehearsed on a laptop before it is queued.
    pub fn tiny(self) -> anyhow::Result<Matrix> {
        if self.script.is_some() {
            anyhow::bail!(
                "{}: --tiny is the engine's recipes' small form; a script's size is its own (a [script] params value and `set`)",
                self.origin()
            );
        }
        if self.recipe.starts_with("tiny-") {
            return Ok(self);
        }
        let mut table: toml::Table = toml::from_str(&self.text)?;
        let set = |t: &mut toml::Table, k: &str, v: String| {
            t.insert(k.into(), toml::Value::String(v));
        };
        set(&mut table, "recipe", format!("tiny-{}", self.recipe));
        set(&mut table, "name", format!("{}-tiny", self.name));
        set(&mut table, "data", "embedded".into());
        // The full-size target (94%) is out of a tiny run's reach: the tiny
        // form is judged against what tiny runs reach.
        if self.target > TINY_TARGET {
            table.insert("target".into(), toml::Value::Float(TINY_TARGET));
        }
        table.remove("device");
        // The tiny recipe fixes the scale: a rung's full-size batch or length
        // (1536 images, 7.59 epochs) would be 2 steps an epoch on 4000 images.
        let fixed = crate::recipe::tiny_settings(&self.recipe);
        let mut sets: Vec<&mut toml::Value> = Vec::new();
        for (k, v) in table.iter_mut() {
            match (k.as_str(), v) {
                ("set", v) => sets.push(v),
                ("rung" | "variant", toml::Value::Array(items)) => sets.extend(
                    items
                        .iter_mut()
                        .filter_map(|t| t.as_table_mut()?.get_mut("set")),
                ),
                _ => {}
            }
        }
        for s in sets.into_iter().filter_map(|s| s.as_table_mut()) {
            s.retain(|k, _| !fixed.iter().any(|f| f == k));
        }
        let origin = self
            .path
            .as_ref()
            .map_or_else(|| self.name.clone(), |p| p.display().to_string());
        let text = format!(
            "# {origin} with --tiny (comments of the original file dropped)\n{}",
            toml::to_string(&table)?
        );
        let mut m = parse(&text, &format!("{origin} (--tiny)"))?;
        m.path = self.path;
        m.seeds = self.seeds;
        Ok(m)
    }

    /// The same matrix with `sets` (`run --set KEY=VALUE`, each `(key,
    /// TOML value text)`) added to its base `set`, which every variant
    /// starts from: a variant's own setting of a key still wins. Recorded
    /// in its text, so that the manifest, a resume and a report read the
    /// settings it ran with.
    pub fn with_sets(self, sets: &[(String, String)]) -> anyhow::Result<Matrix> {
        self.with_entries("set", "--set", sets)
    }

    /// The same matrix with `forced` (`run --force KEY=VALUE`: a trick's
    /// on/off or a setting) added to its `force` table, applied to every
    /// variant after its own changes: `--force fp16=off` runs a GPU
    /// leave-one-out in fp32 on a CPU, where every variant but one turns
    /// fp16 on. Recorded in its text, as `with_sets`.
    pub fn with_forced(self, forced: &[(String, String)]) -> anyhow::Result<Matrix> {
        self.with_entries("force", "--force", forced)
    }

    /// `entries` written into the top-level table `key` of the matrix's
    /// text, which is parsed again; `flag` names them in its origin.
    fn with_entries(
        self,
        key: &str,
        flag: &str,
        entries: &[(String, String)],
    ) -> anyhow::Result<Matrix> {
        if entries.is_empty() {
            return Ok(self);
        }
        let mut table: toml::Table = toml::from_str(&self.text)?;
        let base = table
            .entry(key)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(base) = base else {
            anyhow::bail!("{}: its `{key}` is not a table", self.origin());
        };
        let mut said = Vec::new();
        for (k, v) in entries {
            // A number, a boolean or a quoted string as TOML reads it; any
            // other text as a string.
            let value = toml::from_str::<toml::Table>(&format!("v = {v}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(v.clone()));
            base.insert(k.clone(), value);
            said.push(format!("{flag} {k}={v}"));
        }
        let origin = self.origin();
        let text = format!(
            "# {origin} with {} (comments of the original file dropped)\n{}",
            said.join(" "),
            toml::to_string(&table)?
        );
        let mut m = parse(&text, &format!("{origin} ({})", said.join(" ")))?;
        m.path = self.path;
        m.seeds = self.seeds;
        Ok(m)
    }

    /// The same matrix restricted to shard `i` of `n` (`run --shard i/N`),
    /// recorded in its text so that the manifest and a resume keep it.
    pub fn with_shard(mut self, i: usize, n: usize) -> anyhow::Result<Matrix> {
        let s = format!("{i}/{n}");
        parse_shard(&s).map_err(anyhow::Error::msg)?;
        if self.adaptive.is_some() || self.until_decided.is_some() {
            anyhow::bail!(
                "{}: a matrix with adaptive repeats or until_decided cannot be sharded (each shard would add its own seeds)",
                self.name
            );
        }
        // The seeds go into the text too (a --repeats override included), so
        // that every shard's record says which runs the whole matrix has.
        let mut table: toml::Table = toml::from_str(&self.text)?;
        for k in ["repeats", "base_seed", "seeds"] {
            table.remove(k);
        }
        table.insert(
            "seeds".into(),
            toml::Value::Array(
                self.seeds
                    .iter()
                    .map(|&x| toml::Value::Integer(x as i64))
                    .collect(),
            ),
        );
        self.text = toml::to_string(&table)?;
        self.text = self.text_with("shard", &s, &format!("--shard {s}"))?;
        self.shard = Some((i, n));
        Ok(self)
    }

    /// The file's text with one top-level key set, saying which option did it.
    fn text_with(&self, key: &str, value: &str, option: &str) -> anyhow::Result<String> {
        let mut table: toml::Table = toml::from_str(&self.text)?;
        table.insert(key.into(), toml::Value::String(value.into()));
        let body = toml::to_string(&table)?;
        Ok(format!(
            "# {} with {option} (comments of the original file dropped)\n{body}",
            self.path
                .as_ref()
                .map_or_else(|| self.name.clone(), |p| p.display().to_string()),
        ))
    }

    pub fn spec(&self, index: usize, repeat: usize, seed: u64) -> RunSpec {
        let v = &self.variants[index];
        RunSpec {
            id: RunId {
                matrix: self.name.clone(),
                index,
                variant: v.name.clone(),
                repeat,
            },
            seed,
            recipe: self.recipe.clone(),
            overrides: v.overrides.clone(),
            data: self.data.clone(),
            target_acc: self.target,
            device: self.device.clone(),
            reference: self.reference(index),
        }
    }

    /// What a worker runs for `spec`: the engine's plan or the script's
    /// command, as decided at parse.
    pub fn job(&self, spec: &RunSpec) -> anyhow::Result<Job> {
        if self.script.is_none() {
            return self.planned(spec).map(Job::Engine);
        }
        let i = spec.id.index;
        if spec.id.matrix != self.name
            || self
                .variants
                .get(i)
                .is_none_or(|v| v.overrides != spec.overrides)
        {
            anyhow::bail!("{}: run {} is not one of its runs", self.origin(), spec.id);
        }
        Ok(Job::Script {
            spec: spec.clone(),
            record: std::sync::Arc::new(crate::record::RunRecord {
                variant: self.variant_record(i),
                data: crate::record::DataId::new(SCRIPT, ""),
                loader: None,
            }),
        })
    }

    /// Processes a run of variant `index` spreads over.
    pub fn world_size(&self, index: usize) -> usize {
        match &self.script {
            Some(s) => s.runs[index].world_size,
            None => self.plans[index].1.world_size,
        }
    }

    /// Run `spec` of this matrix with its variant's plan, as decided at parse.
    pub fn planned(&self, spec: &RunSpec) -> anyhow::Result<PlannedRun> {
        let i = spec.id.index;
        let (config, plan) = self
            .plans
            .get(i)
            .filter(|_| {
                spec.id.matrix == self.name
                    && spec.recipe == self.recipe
                    && self
                        .variants
                        .get(i)
                        .is_some_and(|v| v.overrides == spec.overrides)
            })
            .ok_or_else(|| {
                anyhow::anyhow!("{}: run {} is not one of its runs", self.origin(), spec.id)
            })?;
        Ok(PlannedRun {
            spec: spec.clone(),
            config: config.clone(),
            plan: plan.clone(),
        })
    }

    /// What variant `index` is read against (see [`Reference`]).
    pub fn reference(&self, index: usize) -> Option<Reference> {
        self.kind.reference(index)
    }

    /// Every run, repeats interleaved round-robin across variants so a queue
    /// stopped early still has balanced data.
    pub fn runs(&self) -> Vec<RunSpec> {
        let mut out = Vec::new();
        for (r, &seed) in self.seeds.iter().enumerate() {
            for i in 0..self.variants.len() {
                if self.in_shard(i, r) {
                    out.push(self.spec(i, r, seed));
                }
            }
        }
        out
    }

    /// Shards deal the runs out round-robin in queue order (sizes differ by
    /// at most one run), shifted by one shard each time the pattern would
    /// repeat, so that a shard does not get the same variants every repeat (a
    /// plain `k mod N` gives each of two shards of a two-rung ladder one rung).
    fn in_shard(&self, variant: usize, repeat: usize) -> bool {
        let v = self.variants.len().max(1);
        self.shard.is_none_or(|(i, n)| {
            let k = repeat * v + variant;
            let cycle = v / gcd(v, n) * n;
            (k + k / cycle) % n == i - 1
        })
    }

    /// The seed of repeat `r` (adaptive repeats continue the sequence).
    pub fn seed_for(&self, r: usize) -> u64 {
        match self.seeds.get(r) {
            Some(s) => *s,
            None => self
                .seeds
                .last()
                .copied()
                .unwrap_or(0)
                .saturating_add((r + 1 - self.seeds.len()) as u64),
        }
    }
}
