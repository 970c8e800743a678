//! The trick registry: the one place where a trick's name, help text, source,
//! off and on states, parameters, dependencies and effect are written down.
//! The TOML parser, the CLI, the TUI and the docs read it from here, and the
//! engine sees only what the effects wrote into the `RunPlan`.

/// The catalog and the enum naming its tricks, from one list: each entry's
/// variant is how code names the trick (`TrickId::Muon`), its `key` how TOML
/// and the command line do. An exhaustive `match` on `TrickId` (the effect
/// tests) is checked by the compiler against the catalog.
macro_rules! catalog {
    ($($id:ident => TrickSpec { $($body:tt)* },)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum TrickId { $($id,)* }

        pub static CATALOG: &[TrickSpec] = &[$(TrickSpec { id: TrickId::$id, $($body)* },)*];
    };
}

mod catalog;
pub mod fastai;
#[cfg(test)]
mod tests;

pub use catalog::{CATALOG, TrickId, optimiser_tricks};

use crate::config::{RunConfig, Value};
use crate::plan::RunPlan;
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// A parameter value as the registry states it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    Float(f64),
    Int(i64),
    Choice(&'static str),
}

#[derive(Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub default: ParamValue,
    /// Inclusive numeric range, where one applies.
    pub range: Option<(f64, f64)>,
    /// Allowed values of a `Choice` parameter.
    pub choices: &'static [&'static str],
    /// A count of epochs, absolute: it keeps its value when the run's
    /// `epochs` changes (`recipe::unscaled_epoch_settings` says so).
    pub in_epochs: bool,
}

/// Where a trick sits in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Data,
    Systems,
    Architecture,
    Normalisation,
    Optimiser,
    Schedule,
    Regularisation,
    Averaging,
    Eval,
}

pub struct TrickSpec {
    /// How code names it; `CATALOG[id as usize]` is this entry.
    pub id: TrickId,
    /// Machine name used in TOML and on the command line (`label_smoothing`).
    pub key: &'static str,
    /// Catalog ids this entry covers (`T24`, `B3`).
    pub ids: &'static [&'static str],
    pub name: &'static str,
    pub help: &'static str,
    /// Article and rung it comes from.
    pub source: &'static str,
    pub category: Category,
    pub off: &'static str,
    pub on: &'static str,
    pub params: &'static [ParamSpec],
    /// Tricks that must be on when this one is on.
    pub requires: &'static [TrickId],
    /// Tricks that cannot be on together with this one.
    pub conflicts: &'static [TrickId],
    /// The trick's whole effect: the plan fields it changes when it is on.
    pub apply: fn(&mut RunPlan, &Args) -> Result<()>,
}

impl TrickId {
    pub fn spec(self) -> &'static TrickSpec {
        &CATALOG[self as usize]
    }

    pub fn key(self) -> &'static str {
        self.spec().key
    }
}

/// Trick keys as one comma-separated line (requires, conflicts).
pub fn keys(ids: &[TrickId]) -> String {
    ids.iter().map(|t| t.key()).collect::<Vec<_>>().join(", ")
}

impl std::fmt::Debug for TrickSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrickSpec").field("key", &self.key).finish()
    }
}

/// What an effect reads: its own parameters, typed, and the run's settings.
pub struct Args<'a> {
    pub key: &'static str,
    params: &'a BTreeMap<String, Value>,
    pub settings: &'a RunConfig,
}

impl Args<'_> {
    fn value(&self, name: &str) -> Result<&Value> {
        self.params.get(name).ok_or_else(|| {
            anyhow::anyhow!(
                "trick `{}` has no value for its parameter `{name}`: set `{}.{name}`",
                self.key,
                self.key
            )
        })
    }

    pub fn num(&self, name: &str) -> Result<f64> {
        match self.value(name)? {
            Value::Num(v) if v.is_finite() => Ok(*v),
            other => bail!(
                "`{}.{name}` must be a finite number, not {other:?}",
                self.key
            ),
        }
    }

    pub fn int(&self, name: &str) -> Result<i64> {
        let v = self.num(name)?;
        if v.fract() != 0.0 {
            bail!("`{}.{name}` must be a whole number, not {v}", self.key);
        }
        Ok(v as i64)
    }

    pub fn text(&self, name: &str) -> Result<&str> {
        match self.value(name)? {
            Value::Text(s) => Ok(s),
            Value::Num(v) => bail!("`{}.{name}` must be one of its choices, not {v}", self.key),
        }
    }
}

/// Checks that every trick on has what it requires and nothing it conflicts with.
pub fn check_combination(cfg: &RunConfig) -> Result<()> {
    let on = |k: &str| cfg.tricks.get(k).is_some_and(|t| t.on);
    for t in CATALOG.iter().filter(|t| on(t.key)) {
        if let Some(r) = t.requires.iter().map(|r| r.key()).find(|r| !on(r)) {
            bail!(
                "trick `{}` needs `{r}` on: add `--trick {r}` or turn `{}` off",
                t.key,
                t.key
            );
        }
        if let Some(c) = t.conflicts.iter().map(|c| c.key()).find(|c| on(c)) {
            bail!(
                "tricks `{}` and `{c}` cannot both be on: turn one off",
                t.key
            );
        }
    }
    Ok(())
}

/// The plan of a resolved configuration: the settings with every trick off,
/// then each trick that is on applied in catalog order, then validated.
pub fn build_plan(cfg: &RunConfig) -> Result<RunPlan> {
    check_combination(cfg)?;
    let plan = unchecked_plan(cfg)?;
    plan.validate()?;
    Ok(plan)
}

/// `build_plan` without the cross-trick and whole-plan checks (tests compare
/// a trick's on and off plans even where the combination would be refused).
pub(crate) fn unchecked_plan(cfg: &RunConfig) -> Result<RunPlan> {
    let mut plan = RunPlan::base(cfg);
    for t in CATALOG {
        let Some(state) = cfg.tricks.get(t.key).filter(|s| s.on) else {
            continue;
        };
        let args = Args {
            key: t.key,
            params: &state.params,
            settings: cfg,
        };
        (t.apply)(&mut plan, &args)?;
    }
    plan.optim
        .at_batch(cfg.batch_size, cfg.lr_batch, cfg.wd_batch);
    // After every trick: the size needs the batch, world size and accumulation.
    plan.resolve_bn_size()?;
    Ok(plan)
}

impl TrickSpec {
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

pub fn find(key: &str) -> Option<&'static TrickSpec> {
    CATALOG
        .iter()
        .find(|t| t.key == key || t.ids.iter().any(|id| id.eq_ignore_ascii_case(key)))
}

/// Every trick `name` names: the one with that key, else every entry that
/// covers that catalog id (T13 is both `celu` and `gelu`).
pub fn find_all(name: &str) -> Vec<&'static TrickSpec> {
    if let Some(t) = CATALOG.iter().find(|t| t.key == name) {
        return vec![t];
    }
    CATALOG
        .iter()
        .filter(|t| t.ids.iter().any(|id| id.eq_ignore_ascii_case(name)))
        .collect()
}

/// One trick in full, as `tricklab tricks KEY` prints it.
pub fn describe(t: &TrickSpec) -> String {
    use std::fmt::Write;
    let ids = if t.ids.is_empty() {
        String::new()
    } else {
        format!(" ({})", t.ids.join(", "))
    };
    let mut out = format!(
        "{}{ids} [{}]\n{}\nsource: {}\noff: {}\non:  {}\n",
        t.key, t.name, t.help, t.source, t.off, t.on
    );
    for p in t.params {
        let _ = writeln!(out, "  {}.{} = {}  {}", t.key, p.name, p.default, p.help);
    }
    if !t.requires.is_empty() {
        let _ = writeln!(out, "requires: {}", keys(t.requires));
    }
    if !t.conflicts.is_empty() {
        let _ = writeln!(out, "conflicts: {}", keys(t.conflicts));
    }
    out
}

/// The candidate nearest to `name` by edit distance, if it is close enough to
/// be a plausible typo.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let best = candidates
        .into_iter()
        .map(|c| (edit_distance(&name.to_lowercase(), &c.to_lowercase()), c))
        .min_by_key(|(d, _)| *d)?;
    let limit = (name.chars().count() / 2).max(2);
    (best.0 <= limit).then_some(best.1)
}

/// Rows of TRICKS.md section 4 that are not on/off switches but recipe
/// settings (`--set KEY=VALUE`, or `set = { KEY = ... }` in a matrix); their
/// help text is the setting's own, in `config::SETTINGS`.
pub const SETTING_ROWS: &[(&str, &str)] = &[
    ("T9", "arch"),
    ("T20", "batch_size"),
    ("T21", "schedule"),
    ("T30", "epochs"),
];

/// The recipe setting behind a TRICKS.md row id such as `T20`: (id, key, help).
pub fn setting_row(id: &str) -> Option<(&'static str, &'static str, &'static str)> {
    let (id, key) = *SETTING_ROWS.iter().find(|r| r.0.eq_ignore_ascii_case(id))?;
    let help = crate::config::setting(key).map_or("", |s| s.help);
    Some((id, key, help))
}

/// "unknown trick `x`" with the nearest valid name, for one-line errors.
pub fn unknown_trick_message(name: &str) -> String {
    if let Some((id, key, _)) = setting_row(name) {
        return format!(
            "{id} is the recipe setting `{key}`, not a switch: use `--set {key}=VALUE` (or `set = {{ {key} = ... }}` in a matrix)"
        );
    }
    match nearest(name, CATALOG.iter().map(|t| t.key)) {
        Some(s) => {
            format!("unknown trick `{name}` (did you mean `{s}`? `tricklab tricks` lists them)")
        }
        None => format!("unknown trick `{name}` (`tricklab tricks` lists them)"),
    }
}

pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

impl ParamValue {
    pub fn to_json(self) -> serde_json::Value {
        match self {
            ParamValue::Float(v) => serde_json::json!(v),
            ParamValue::Int(v) => serde_json::json!(v),
            ParamValue::Choice(v) => serde_json::json!(v),
        }
    }
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Float(v) => write!(f, "{v}"),
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Choice(v) => write!(f, "{v}"),
        }
    }
}

/// The catalog as JSON, for `tricklab tricks --json` and the docs.
pub fn catalog_json() -> serde_json::Value {
    serde_json::Value::Array(
        CATALOG
            .iter()
            .map(|t| {
                serde_json::json!({
                    "key": t.key, "ids": t.ids, "name": t.name, "help": t.help, "source": t.source,
                    "category": format!("{:?}", t.category), "off": t.off, "on": t.on,
                    "params": t.params.iter().map(|p| serde_json::json!({
                        "name": p.name, "help": p.help, "default": p.default.to_json(),
                        "range": p.range, "choices": p.choices,
                    })).collect::<Vec<_>>(),
                    "requires": t.requires.iter().map(|r| r.key()).collect::<Vec<_>>(),
                    "conflicts": t.conflicts.iter().map(|c| c.key()).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The catalog as the Markdown reference shipped in `docs/TRICKS.md`
/// (`tricklab tricks --markdown`; a test keeps the file current).
pub fn catalog_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut md = String::from(
        "# Trick reference\n\n\
         Generated from the catalog in `src/tricks/catalog.rs` by `tricklab tricks --markdown`\n\
         (`make docs`); `make test` fails when this file and the catalog differ. Each entry:\n\
         what the trick does, where it comes from, its off and on states, its parameters\n\
         (`--set key.param=value`, or `set = { \"key.param\" = value }` in a matrix), and the tricks\n\
         it needs or excludes.\n",
    );
    let mut category = None;
    for t in CATALOG {
        if category != Some(t.category) {
            category = Some(t.category);
            md += &format!("\n## {:?}\n", t.category);
        }
        let ids = if t.ids.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.ids.join(", "))
        };
        md += &format!(
            "\n### `{}`{ids}: {}\n\n{}\n\n- source: {}\n- off: {}\n- on: {}\n",
            t.key, t.name, t.help, t.source, t.off, t.on
        );
        if !t.requires.is_empty() {
            md += &format!("- requires: {}\n", keys(t.requires));
        }
        if !t.conflicts.is_empty() {
            md += &format!("- conflicts: {}\n", keys(t.conflicts));
        }
        if !t.params.is_empty() {
            md += "\n| parameter | default | allowed | meaning |\n|---|---|---|---|\n";
            for p in t.params {
                let allowed = match (p.range, p.choices) {
                    (Some((lo, hi)), _) => format!("{lo} to {hi}"),
                    (None, c) if !c.is_empty() => c.join(", "),
                    _ => "-".into(),
                };
                md += &format!(
                    "| `{}.{}` | {} | {} | {} |\n",
                    t.key,
                    p.name,
                    cell(&p.default.to_string()),
                    cell(&allowed),
                    cell(p.help)
                );
            }
        }
    }
    md
}

#[derive(clap::Args, Debug)]
pub struct TricksArgs {
    /// Print the whole catalog as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the catalog as the Markdown reference (docs/TRICKS.md).
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Show one trick in full (key or catalog id such as T24).
    pub trick: Option<String>,
}

pub fn cmd_tricks(args: TricksArgs) -> anyhow::Result<i32> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&catalog_json())?);
        return Ok(0);
    }
    if args.markdown {
        print!("{}", catalog_markdown());
        return Ok(0);
    }
    if let Some(name) = args.trick {
        if let (None, Some((id, key, help))) = (find(&name), setting_row(&name)) {
            println!(
                "{id}: the recipe setting `{key}`: {help}\nchange it with `--set {key}=VALUE`, or `set = {{ {key} = ... }}` in a matrix"
            );
            return Ok(0);
        }
        let found = find_all(&name);
        if found.is_empty() {
            anyhow::bail!(unknown_trick_message(&name));
        }
        let shown: Vec<String> = found.into_iter().map(describe).collect();
        // Several tricks sharing a catalog id (T13: celu and gelu) are all shown.
        print!("{}", shown.join("\n"));
        return Ok(0);
    }
    println!(
        "{:<20} {:<10} {:<14} name / parameters",
        "key", "ids", "category"
    );
    for t in CATALOG {
        let params: Vec<String> = t
            .params
            .iter()
            .map(|p| format!("{}={}", p.name, p.default))
            .collect();
        println!(
            "{:<20} {:<10} {:<14} {}{}",
            t.key,
            t.ids.join(","),
            format!("{:?}", t.category),
            t.name,
            if params.is_empty() {
                String::new()
            } else {
                format!(" ({})", params.join(", "))
            }
        );
    }
    for (id, key, help) in SETTING_ROWS.iter().filter_map(|(id, _)| setting_row(id)) {
        println!(
            "{:<20} {:<10} {:<14} {help} (a setting: --set {key}=VALUE)",
            key, id, "Setting"
        );
    }
    println!(
        "\n{} tricks and {} settings; `tricklab tricks KEY` shows one in full",
        CATALOG.len(),
        SETTING_ROWS.len()
    );
    Ok(0)
}
