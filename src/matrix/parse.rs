//! TOML → [`Matrix`], with `FILE:LINE:COL` errors and nearest-name hints:
//! the header (names, recipe, target, budget, seeds, sharding), then one
//! expansion per matrix kind, then every variant resolved against its recipe.

use super::{Adaptive, Kind, Matrix, UntilDecided, Variant};
use crate::config::{Override, RunConfig, check_matrix_name, check_variant_name};
use crate::plan::RunPlan;
use crate::recipe;
use crate::record::ScriptRecord;
use crate::script::declare::Declared;
use crate::tricks;
use anyhow::{Result, anyhow};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

type Names = Option<Vec<Spanned<String>>>;
type Grid = Option<Spanned<BTreeMap<Spanned<String>, Spanned<Vec<toml::Value>>>>>;
type Sets = Option<BTreeMap<Spanned<String>, Spanned<toml::Value>>>;
/// Overrides with the place in the file each came from.
type Placed = Vec<(Override, Range<usize>)>;
/// A variant with the place in the file it came from.
type PlacedVariant = (Variant, Range<usize>);
/// A kind's variants: name, overrides, where in the file.
type Expanded = Vec<(String, Placed, Range<usize>)>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Option<Spanned<String>>,
    on: Names,
    off: Names,
    set: Sets,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdaptive {
    ci_width: f64,
    min: Option<usize>,
    max: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUntil {
    time: Option<f64>,
    acc: Option<f64>,
    width_time: Option<f64>,
    width_acc: Option<f64>,
    min: Option<usize>,
    max: usize,
    alpha: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatrix {
    name: Spanned<String>,
    description: Option<String>,
    /// The engine's recipe, or a `[script]` table: one of the two.
    recipe: Option<Spanned<String>>,
    script: Option<Spanned<crate::script::declare::RawScript>>,
    /// A script matrix's tricks, each declared once.
    tricks: Option<BTreeMap<Spanned<String>, Spanned<crate::script::declare::RawTrick>>>,
    kind: Spanned<String>,
    data: Option<Spanned<String>>,
    device: Option<Spanned<String>>,
    target: Option<Spanned<f64>>,
    budget: Option<Spanned<String>>,
    seeds: Option<Spanned<Vec<u64>>>,
    repeats: Option<Spanned<usize>>,
    base_seed: Option<Spanned<u64>>,
    adaptive: Option<Spanned<RawAdaptive>>,
    until_decided: Option<Spanned<RawUntil>>,
    /// "i/N": this file runs the i-th of N deterministic shares of its runs.
    shard: Option<Spanned<String>>,
    on: Names,
    off: Names,
    set: Sets,
    /// Changes made to every variant after its own (`run --force`): the
    /// last word on a trick or setting, as a CPU rehearsal of a GPU
    /// leave-one-out needs for fp16, which every variant but one turns on.
    force: Sets,
    vary: Option<Spanned<Vec<Spanned<String>>>>,
    rung: Option<Vec<RawStep>>,
    variant: Option<Vec<RawStep>>,
    grid: Grid,
    /// factorial, fractional, shapley: a factor that is several changes at
    /// once (a ladder's rung): its `on`/`off`/`set` at high; at low, its
    /// `on` tricks off and its `off` tricks on, its settings the recipe's.
    factor: Option<Vec<RawStep>>,
    /// factorial, fractional, shapley: settings at two levels, KEY = [low, high].
    levels: Grid,
    /// fractional: p of 2^(k−p), the tabulated minimum-aberration generators.
    fraction: Option<Spanned<usize>>,
    /// fractional: the generators written out ("E=ABCD"), instead of `fraction`.
    generators: Option<Spanned<Vec<String>>>,
    /// shapley: the number of random orders, and their seed.
    orders: Option<Spanned<usize>>,
    order_seed: Option<u64>,
}

/// One two-level factor: its name and its (low, high) overrides.
struct Factor {
    name: String,
    low: Placed,
    high: Placed,
    /// A `[[factor]]` bundle: named by its name when high, not by its overrides.
    bundle: bool,
}

/// The first look of an `until_decided` that asks a width, unless `min`
/// says otherwise: a pilot of seeds before the width rule may stop. A
/// spread measured on 2 or 3 seeds comes out small by chance often enough
/// that stopping on it leaves intervals that cover well under 95% (in
/// `questions`' simulation, a false "excludes 0" 11% of the time with
/// looks from 2 seeds, 7% from 5); sequential fixed-width procedures start
/// from such a pilot sample for that reason (Chow & Robbins 1965; Kelley,
/// Darku & Chattopadhyay 2018).
pub const WIDTH_PILOT: usize = 5;

/// A Shapley matrix's default number of orders: each ordering's credit is
/// one sample of the trick's marginal value, and 20 gives a t interval on
/// 19 degrees of freedom (t = 2.09, within 7% of the normal's 1.96).
const DEFAULT_ORDERS: usize = 20;

/// Beyond these a matrix is a typo (an extra zero or three), not a plan: it
/// would allocate and persist a queue nobody can run.
pub const MAX_REPEATS: usize = 10_000;
pub const MAX_VARIANTS: usize = 10_000;
pub const MAX_RUNS: usize = 100_000;

/// A configuration's variant name: its tricks on (`+name`) and its settings
/// at their chosen values (`key=value`); `base` when every trick is off and
/// no setting is listed.
fn configuration_name(factors: &[Factor], w: crate::stats::design::Word) -> String {
    let parts: Vec<String> = factors
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let high = w >> i & 1 == 1;
            if f.bundle {
                return high.then(|| format!("+{}", f.name));
            }
            match &(if high { &f.high } else { &f.low })[0].0 {
                Override::Trick { key, on: true } => Some(format!("+{key}")),
                Override::Trick { .. } => None,
                set => Some(set.to_string()),
            }
        })
        .collect();
    let full = parts.join(" ");
    if parts.is_empty() {
        "base".into()
    } else if full.chars().count() <= crate::config::MAX_VARIANT_NAME {
        full
    } else {
        // Too long to name a folder or a row: the textbook's name of the run,
        // its high factors' letters in lower case (`matrix show` lists them).
        crate::stats::design::letters(w).to_lowercase()
    }
}

/// Where a byte offset sits, as `origin:line:col`.
fn locate(origin: &str, text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let line = text[..at].matches('\n').count() + 1;
    let col = at - text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    format!("{origin}:{line}:{col}")
}

struct Ctx<'a> {
    origin: &'a str,
    text: &'a str,
    recipe: &'a str,
    /// A script matrix's command and tricks; `None`: the engine's recipe.
    script: Option<&'a Declared>,
}

/// What the header says, checked.
struct Header {
    kind: Kind,
    target: f64,
    budget: Option<Duration>,
    seeds: Vec<u64>,
    adaptive: Option<Adaptive>,
    until_decided: Option<UntilDecided>,
    shard: Option<(usize, usize)>,
}

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, msg: impl std::fmt::Display) -> anyhow::Error {
        anyhow!("{}: {msg}", locate(self.origin, self.text, span.start))
    }

    /// Checks trick names here so the error points at the name itself.
    fn trick(&self, name: &Spanned<String>, on: bool) -> Result<Override> {
        if let Some(d) = self.script {
            let n = name.get_ref();
            let t = d.trick(n).ok_or_else(|| {
                let hint = tricks::nearest(n, d.trick_names())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                self.err(
                    name.span(),
                    format!(
                        "unknown trick `{n}`{hint}: this matrix declares {}; add a [tricks.{n}] table",
                        d.trick_names().join(", ")
                    ),
                )
            })?;
            return Ok(Override::Trick {
                key: t.name.clone(),
                on,
            });
        }
        let t = tricks::find(name.get_ref())
            .ok_or_else(|| self.err(name.span(), tricks::unknown_trick_message(name.get_ref())))?;
        Ok(Override::Trick {
            key: t.key.to_string(),
            on,
        })
    }

    fn step(&self, on: &Names, off: &Names, set: &Sets) -> Result<Placed> {
        let mut out: Placed = Vec::new();
        for (names, state) in [(on, true), (off, false)] {
            for n in names.iter().flatten() {
                let o = self.trick(n, state)?;
                if let Override::Trick { key, .. } = &o
                    && let Some(was) = out.iter().find_map(|(p, _)| match p {
                        Override::Trick { key: k, on } if k == key => Some(*on),
                        _ => None,
                    })
                {
                    let msg = if was == state {
                        format!("`{key}` is listed twice; drop one")
                    } else {
                        format!("`{key}` is both in `on` and in `off`; keep one")
                    };
                    return Err(self.err(n.span(), msg));
                }
                out.push((o, n.span()));
            }
        }
        for (k, v) in set.iter().flatten() {
            let o = Override::Set {
                key: k.get_ref().clone(),
                value: Override::toml_text(v.get_ref()),
            };
            match self.script {
                Some(d) => d.settable(k.get_ref()).map_err(|e| self.err(k.span(), e))?,
                None => recipe::check_override(self.recipe, &o)
                    .map_err(|e| self.err(k.span(), crate::util::one_line(&e)))?,
            }
            out.push((o, k.span()));
        }
        Ok(out)
    }

    /// The `force` table's changes: a trick's on/off or a setting, each
    /// checked as a grid value is (the later change to a key wins, so these
    /// come after every variant's own).
    fn forced(&self, force: &Sets) -> Result<Placed> {
        let mut out: Placed = Vec::new();
        for (k, v) in force.iter().flatten() {
            let o = self.grid_value("force", k.get_ref(), v.get_ref(), k.span())?;
            if self.script.is_none() && matches!(o, Override::Set { .. }) {
                recipe::check_override(self.recipe, &o)
                    .map_err(|e| self.err(k.span(), crate::util::one_line(&e)))?;
            }
            out.push((o, k.span()));
        }
        Ok(out)
    }

    /// A matrix runs the engine's `recipe` or a `[script]`, one of the two;
    /// the script's own data and scale are its to decide.
    fn engine_or_script(&self, raw: &RawMatrix) -> Result<()> {
        let at = raw.name.span();
        match (&raw.recipe, &raw.script) {
            (Some(r), Some(_)) => Err(self.err(
                r.span(),
                "a matrix has a `recipe` (the engine) or a [script] table (your command), not both",
            )),
            (None, None) => Err(self.err(
                at,
                "no `recipe` and no [script] table: name an engine recipe (`tricklab recipes`) or give your command in [script] (docs/scripts.md)",
            )),
            (None, Some(_)) => {
                for (key, span) in [
                    ("data", raw.data.as_ref().map(Spanned::span)),
                    ("device", raw.device.as_ref().map(Spanned::span)),
                ] {
                    if let Some(sp) = span {
                        return Err(self.err(
                            sp,
                            format!(
                                "`{key}` is the engine's: a script reads its own data and gets its device from the worker; drop it (or pass it in [script] command)"
                            ),
                        ));
                    }
                }
                Ok(())
            }
            (Some(_), None) => match &raw.tricks {
                Some(t) => Err(self.err(
                    t.keys().next().map_or(at, Spanned::span),
                    "[tricks.NAME] tables declare a script's tricks: this matrix runs the engine's recipe, whose tricks `tricklab tricks` lists",
                )),
                None => Ok(()),
            },
        }
    }

    fn kind(&self, raw: &RawMatrix) -> Result<Kind> {
        Ok(match raw.kind.get_ref().as_str() {
            "ladder" => Kind::Ladder,
            "leave-one-out" => Kind::LeaveOneOut,
            "add-one" => Kind::AddOne,
            "grid" => Kind::Grid,
            "list" => Kind::List,
            "factorial" => Kind::Factorial,
            "fractional" => Kind::Fractional,
            "shapley" => Kind::Shapley,
            k => {
                let kinds = [
                    "ladder",
                    "leave-one-out",
                    "add-one",
                    "grid",
                    "list",
                    "factorial",
                    "fractional",
                    "shapley",
                ];
                let hint = tricks::nearest(k, kinds)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                return Err(self.err(
                    raw.kind.span(),
                    format!(
                        "unknown kind `{k}`{hint}: use ladder, leave-one-out, add-one, grid, list, factorial, fractional or shapley"
                    ),
                ));
            }
        })
    }

    /// Everything but the variants: names, recipe, target, budget, device,
    /// data, seeds and shard, each with its range.
    fn header(&self, raw: &RawMatrix) -> Result<Header> {
        check_matrix_name(raw.name.get_ref()).map_err(|e| self.err(raw.name.span(), e))?;
        let kind = self.kind(raw)?;
        self.engine_or_script(raw)?;
        if self.script.is_none() && !recipe::recipe_names().contains(&self.recipe) {
            let hint = tricks::nearest(self.recipe, recipe::recipe_names())
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            return Err(self.err(
                raw.recipe.as_ref().map_or(0..0, Spanned::span),
                format!(
                    "unknown recipe `{}`{hint}; `tricklab recipes` lists them",
                    self.recipe
                ),
            ));
        }
        let target = match &raw.target {
            Some(t) if !(0.0..=1.0).contains(t.get_ref()) => {
                return Err(self.err(
                    t.span(),
                    format!(
                        "target {} must be an accuracy in [0, 1] (e.g. 0.94)",
                        t.get_ref()
                    ),
                ));
            }
            Some(t) => *t.get_ref(),
            None => 0.94,
        };
        let budget = match &raw.budget {
            Some(b) => Some(crate::util::parse_duration(b.get_ref()).ok_or_else(|| {
                self.err(
                    b.span(),
                    format!(
                        "budget `{}`: use e.g. \"90s\", \"30m\" or \"2h\", at most a week",
                        b.get_ref()
                    ),
                )
            })?),
            None => None,
        };
        let adaptive = self.adaptive(raw)?;
        let until_decided = self.until_decided(raw, kind)?;
        // Syntax only: whether the device exists and the data is there is checked
        // when a session starts, so GPU matrices can be read on any machine.
        if let Some(d) = &raw.device {
            crate::util::device::parse_device_name(d.get_ref())
                .map_err(|e| self.err(d.span(), crate::util::one_line(&e)))?;
        }
        if let Some(d) = raw
            .data
            .as_ref()
            .filter(|d| d.get_ref().starts_with("synthetic"))
        {
            crate::data::locate(d.get_ref())
                .map_err(|e| self.err(d.span(), crate::util::one_line(&e)))?;
        }
        let seeds = self.seeds(raw, adaptive.as_ref(), until_decided.as_ref())?;
        let shard = match &raw.shard {
            Some(s) => {
                let parsed = parse_shard(s.get_ref()).map_err(|e| self.err(s.span(), e))?;
                if adaptive.is_some() || until_decided.is_some() {
                    return Err(self.err(
                        s.span(),
                        "a matrix with adaptive repeats or until_decided cannot be sharded: each shard would add its own seeds; give fixed repeats",
                    ));
                }
                Some(parsed)
            }
            None => None,
        };
        Ok(Header {
            kind,
            target,
            budget,
            seeds,
            adaptive,
            until_decided,
            shard,
        })
    }

    fn adaptive(&self, raw: &RawMatrix) -> Result<Option<Adaptive>> {
        let Some(a) = &raw.adaptive else {
            return Ok(None);
        };
        let r = a.get_ref();
        let min = r.min.unwrap_or(3).max(2);
        if r.max > MAX_REPEATS {
            return Err(self.err(
                a.span(),
                format!(
                    "adaptive max {} is over the {MAX_REPEATS} repeats a matrix may have: lower it",
                    r.max
                ),
            ));
        }
        if !(r.ci_width.is_finite() && r.ci_width > 0.0 && r.ci_width <= 1.0) || r.max < min {
            return Err(self.err(
                a.span(),
                format!(
                    "adaptive needs 0 < ci_width ≤ 1 (an accuracy interval, e.g. 0.002) and max ≥ min ({min})"
                ),
            ));
        }
        Ok(Some(Adaptive {
            ci_width: r.ci_width,
            min,
            max: r.max,
        }))
    }

    /// `until_decided = { time, acc, width_time, width_acc, min, max, alpha }`,
    /// each value checked against what it means.
    fn until_decided(&self, raw: &RawMatrix, kind: Kind) -> Result<Option<UntilDecided>> {
        let Some(u) = &raw.until_decided else {
            return Ok(None);
        };
        let r = u.get_ref();
        let bad = |msg: String| Err(self.err(u.span(), msg));
        let widths = r.width_time.is_some() || r.width_acc.is_some();
        let first = if widths { WIDTH_PILOT } else { 2 };
        let (min, alpha) = (r.min.unwrap_or(first), r.alpha.unwrap_or(0.05));
        if raw.adaptive.is_some() {
            return bad(
                "give `adaptive` or `until_decided`, not both: each adds seeds its own way".into(),
            );
        }
        if kind == Kind::Shapley {
            return bad("a shapley matrix's intervals come from its sampled orders, not its seeds: raise `orders` instead of using until_decided".into());
        }
        if [r.time, r.acc, r.width_time, r.width_acc]
            .iter()
            .all(Option::is_none)
        {
            return bad("until_decided asks nothing: give `time` (a fraction of the reference's mean time, e.g. 0.05) and/or `acc` (an accuracy margin, e.g. 0.005), or a widest interval, `width_time` (e.g. 0.02) and/or `width_acc` (e.g. 0.01)".into());
        }
        // Each a fraction in (0, 1]: a share of the mean time, or accuracy.
        let fractions = [
            (
                "time",
                r.time,
                "give the margin as a fraction of the mean time in (0, 1], e.g. 0.05 for ±5%",
            ),
            (
                "acc",
                r.acc,
                "give an accuracy margin in (0, 1], e.g. 0.005 for ±0.5 points",
            ),
            (
                "width_time",
                r.width_time,
                "give the widest 95% interval (end to end) as a fraction of the mean time in (0, 1], e.g. 0.02 for 2%",
            ),
            (
                "width_acc",
                r.width_acc,
                "give the widest 95% interval of accuracy (end to end) as a fraction in (0, 1], e.g. 0.01 for 1 point",
            ),
        ];
        for (key, value, fix) in fractions {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0 && *v <= 1.0)) {
                return bad(format!("until_decided {key} = {v}: {fix}"));
            }
        }
        if !(alpha.is_finite() && alpha > 0.0 && alpha <= 0.5) {
            return bad(format!(
                "until_decided alpha = {alpha}: give a family-wise error rate in (0, 0.5], e.g. 0.05"
            ));
        }
        if min < 2 {
            return bad(format!(
                "until_decided min = {min}: the first look needs 2 seeds a variant for a spread; give min ≥ 2"
            ));
        }
        if r.max < min || r.max > MAX_REPEATS {
            let pilot = if widths && r.min.is_none() {
                ", the default with a width: a pilot for the spread"
            } else {
                ""
            };
            return bad(format!(
                "until_decided max = {}: give from min ({min}{pilot}) to {MAX_REPEATS} rounds of seeds",
                r.max
            ));
        }
        Ok(Some(UntilDecided {
            time: r.time,
            acc: r.acc,
            width_time: r.width_time,
            width_acc: r.width_acc,
            min,
            max: r.max,
            alpha,
        }))
    }

    /// The seeds a matrix starts with; `until_decided`'s max must leave
    /// room for them.
    fn seeds(
        &self,
        raw: &RawMatrix,
        adaptive: Option<&Adaptive>,
        until: Option<&UntilDecided>,
    ) -> Result<Vec<u64>> {
        let grows = match (adaptive, until) {
            (Some(a), _) => Some((a.min, a.max)),
            (None, Some(u)) => Some((u.min, u.max)),
            (None, None) => None,
        };
        let seeds = self.listed_seeds(raw, grows)?;
        if let (Some(u), Some(r)) = (until, &raw.until_decided)
            && seeds.len() > u.max
        {
            return Err(self.err(
                r.span(),
                format!(
                    "until_decided max = {} is below the {} seeds the matrix starts with: raise max or give fewer repeats",
                    u.max,
                    seeds.len()
                ),
            ));
        }
        Ok(seeds)
    }

    /// `seeds = [...]`, or `repeats = N` from `base_seed`, without wrapping.
    /// `grows` is (min, max) of a matrix that adds seeds (`adaptive`,
    /// `until_decided`): without seeds or repeats it starts with `min`.
    fn listed_seeds(&self, raw: &RawMatrix, grows: Option<(usize, usize)>) -> Result<Vec<u64>> {
        if let (Some(_), Some(r)) = (&raw.seeds, &raw.repeats) {
            return Err(self.err(
                r.span(),
                "give `seeds = [...]` or `repeats = N`, not both (repeats N means seeds base_seed..base_seed+N-1)",
            ));
        }
        let base = raw.base_seed.as_ref().map_or(0, |b| *b.get_ref());
        let base_at = raw.base_seed.as_ref().map_or(0..0, Spanned::span);
        let count = |n: usize| -> Result<Vec<u64>> {
            if base.checked_add(n as u64).is_none() {
                return Err(self.err(
                    base_at.clone(),
                    format!(
                        "base_seed {base} + {n} repeats runs past the largest seed (2^64 - 1): lower base_seed"
                    ),
                ));
            }
            Ok((0..n as u64).map(|i| base + i).collect())
        };
        match (
            raw.seeds.as_ref().map(|s| (s.get_ref(), s.span())),
            &raw.repeats,
            grows,
        ) {
            (Some((s, at)), _, _) if s.is_empty() => Err(self.err(
                at,
                "`seeds` is empty; list at least one seed or drop it",
            )),
            (None, Some(r), _) if *r.get_ref() == 0 => Err(self.err(r.span(), "repeats must be ≥ 1")),
            (None, Some(r), _) if *r.get_ref() > MAX_REPEATS => Err(self.err(
                r.span(),
                format!(
                    "repeats = {} is over the limit of {MAX_REPEATS}: a typo? lower it",
                    r.get_ref()
                ),
            )),
            (Some((s, at)), _, _) if s.len() > MAX_REPEATS => Err(self.err(
                at,
                format!("{} seeds is over the limit of {MAX_REPEATS}: list fewer", s.len()),
            )),
            (Some((s, at)), _, Some((_, max))) if s.iter().max().is_some_and(|m| m.checked_add(max as u64).is_none()) => {
                Err(self.err(
                    at,
                    "adaptive repeats continue the seeds past the largest one (2^64 - 1): list smaller seeds",
                ))
            }
            (Some((s, _)), _, _) => Ok(s.clone()),
            (None, Some(r), _) => count(*r.get_ref()),
            (None, None, Some((_, max))) => count(max),
            (None, None, None) => Ok(vec![base]),
        }
        .map(|mut seeds| {
            if let (None, None, Some((min, _))) = (&raw.seeds, &raw.repeats, grows) {
                seeds.truncate(min);
            }
            seeds
        })
    }

    /// A kind's missing part, pointed at the `kind` that asks for it.
    fn need(&self, raw: &RawMatrix, what: &str, ok: bool) -> Result<()> {
        if ok {
            Ok(())
        } else {
            Err(self.err(
                raw.kind.span(),
                format!(
                    "kind `{}` needs {what} (see ablations/README.md)",
                    raw.kind.get_ref()
                ),
            ))
        }
    }

    /// `[[rung]]` tables, each keeping every earlier change, or `[[variant]]`
    /// tables, each on its own.
    fn steps(&self, raw: &RawMatrix, ladder: bool) -> Result<Vec<(String, Placed, Range<usize>)>> {
        let (steps, what) = if ladder {
            (&raw.rung, "[[rung]] tables")
        } else {
            (&raw.variant, "[[variant]] tables")
        };
        self.need(raw, what, steps.as_ref().is_some_and(|s| !s.is_empty()))?;
        let mut acc: Placed = Vec::new();
        let mut out = Vec::new();
        for (i, s) in steps.iter().flatten().enumerate() {
            let mine = self.step(&s.on, &s.off, &s.set)?;
            let name = s
                .name
                .as_ref()
                .map(|n| n.get_ref().clone())
                .unwrap_or_else(|| format!("variant {}", i + 1));
            let span = s
                .name
                .as_ref()
                .map(|n| n.span())
                .or_else(|| mine.first().map(|m| m.1.clone()))
                .unwrap_or(raw.kind.span());
            if ladder {
                acc.extend(mine);
                out.push((name, acc.clone(), span));
            } else {
                out.push((name, mine, span));
            }
        }
        Ok(out)
    }

    /// Leave-one-out (everything on, then each one off) or add-one (the
    /// base, then each one on).
    fn one_at_a_time(
        &self,
        raw: &RawMatrix,
        loo: bool,
    ) -> Result<Vec<(String, Placed, Range<usize>)>> {
        let vary = raw.vary.as_ref().filter(|v| !v.get_ref().is_empty());
        self.need(
            raw,
            "`vary = [...]` (the tricks to remove or add one at a time)",
            vary.is_some(),
        )?;
        let vary = vary.expect("checked");
        let all: Placed = if loo {
            vary.get_ref()
                .iter()
                .map(|n| Ok((self.trick(n, true)?, n.span())))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let reference = if loo { "all" } else { "base" };
        let mut out = vec![(reference.to_string(), all.clone(), vary.span())];
        for n in vary.get_ref() {
            let mut ov = all.clone();
            ov.push((self.trick(n, !loo)?, n.span()));
            let sign = if loo { "-" } else { "+" };
            out.push((format!("{sign} {}", n.get_ref()), ov, n.span()));
        }
        Ok(out)
    }

    /// Every combination of the `[grid]` values, counted before it is built.
    fn grid(&self, raw: &RawMatrix) -> Result<Vec<(String, Placed, Range<usize>)>> {
        let grid = raw.grid.as_ref().filter(|g| !g.get_ref().is_empty());
        self.need(raw, "a [grid] table of KEY = [values]", grid.is_some())?;
        let grid = grid.expect("checked");
        let count = grid
            .get_ref()
            .values()
            .try_fold(1usize, |n, v| n.checked_mul(v.get_ref().len().max(1)));
        if count.is_none_or(|n| n > MAX_VARIANTS) {
            return Err(self.err(
                grid.span(),
                format!(
                    "this grid has {} variants, over the limit of {MAX_VARIANTS}: fewer values per key, or split it into several matrices",
                    count.map_or("too many".to_string(), |n| n.to_string())
                ),
            ));
        }
        let mut combos: Vec<Placed> = vec![Vec::new()];
        for (k, vals) in grid.get_ref() {
            if vals.get_ref().is_empty() {
                return Err(self.err(vals.span(), format!("grid `{}` has no values", k.get_ref())));
            }
            let mut next = Vec::new();
            for c in &combos {
                for v in vals.get_ref() {
                    let mut c = c.clone();
                    c.push((
                        self.grid_value("grid", k.get_ref(), v, vals.span())?,
                        k.span(),
                    ));
                    next.push(c);
                }
            }
            combos = next;
        }
        Ok(combos
            .into_iter()
            .map(|c| {
                let name = c
                    .iter()
                    .map(|(o, _)| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                let span = c.first().map(|x| x.1.clone()).unwrap_or(raw.kind.span());
                (name, c, span)
            })
            .collect())
    }

    /// The two-level factors: each `vary` trick (off, on), then each
    /// `[levels]` setting (its first value, its second).
    fn factors(&self, raw: &RawMatrix) -> Result<Vec<Factor>> {
        let mut out = Vec::new();
        for n in raw.vary.iter().flat_map(|v| v.get_ref()) {
            out.push(Factor {
                name: n.get_ref().clone(),
                low: vec![(self.trick(n, false)?, n.span())],
                high: vec![(self.trick(n, true)?, n.span())],
                bundle: false,
            });
        }
        for (i, f) in raw.factor.iter().flatten().enumerate() {
            let high = self.step(&f.on, &f.off, &None)?;
            let mut all = high.clone();
            all.extend(self.step(&None, &None, &f.set)?);
            let low = high
                .into_iter()
                .map(|(o, sp)| match o {
                    Override::Trick { key, on } => (Override::Trick { key, on: !on }, sp),
                    set => (set, sp),
                })
                .collect();
            let name = f
                .name
                .as_ref()
                .map_or_else(|| format!("factor {}", i + 1), |n| n.get_ref().clone());
            out.push(Factor {
                name,
                low,
                high: all,
                bundle: true,
            });
        }
        for (k, vals) in raw.levels.iter().flat_map(|g| g.get_ref()) {
            let [lo, hi] = vals.get_ref().as_slice() else {
                return Err(self.err(
                    vals.span(),
                    format!(
                        "levels `{}` has {} values: give two, [low, high]",
                        k.get_ref(),
                        vals.get_ref().len()
                    ),
                ));
            };
            out.push(Factor {
                name: k.get_ref().clone(),
                low: vec![(
                    self.grid_value("levels", k.get_ref(), lo, vals.span())?,
                    k.span(),
                )],
                high: vec![(
                    self.grid_value("levels", k.get_ref(), hi, vals.span())?,
                    k.span(),
                )],
                bundle: false,
            });
        }
        self.need(
            raw,
            "factors: `vary = [...]` tricks (off/on), [[factor]] tables (a rung's changes) and/or a [levels] table of KEY = [low, high]",
            !out.is_empty(),
        )?;
        let mut seen: Vec<&str> = out.iter().map(|f| f.name.as_str()).collect();
        seen.sort();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(anyhow!(
                "{}: factor `{}` is listed twice",
                self.origin,
                w[0]
            ));
        }
        Ok(out)
    }

    /// The variants of a factorial, fractional or Shapley matrix, each a
    /// configuration of the factors, and the design they came from.
    fn designed(&self, raw: &RawMatrix, kind: Kind) -> Result<(Expanded, super::Design)> {
        use crate::stats::design;
        let factors = self.factors(raw)?;
        let at = raw.kind.span();
        let plan = self.design_plan(raw, kind, factors.len())?;
        let configs: Vec<design::Word> = match &plan {
            super::DesignPlan::Factorial(d) => d.runs.clone(),
            super::DesignPlan::Shapley { orders, .. } => design::order_configs(orders),
        };
        let variants = configs
            .iter()
            .map(|&w| {
                let placed: Placed = factors
                    .iter()
                    .enumerate()
                    .flat_map(|(i, f)| {
                        if w >> i & 1 == 1 {
                            f.high.clone()
                        } else {
                            f.low.clone()
                        }
                    })
                    .collect();
                (configuration_name(&factors, w), placed, at.clone())
            })
            .collect();
        let design = super::Design {
            factors: factors.into_iter().map(|f| f.name).collect(),
            configs,
            plan,
        };
        Ok((variants, design))
    }

    /// The design of `k` factors a designed kind asks for, its keys checked.
    fn design_plan(&self, raw: &RawMatrix, kind: Kind, k: usize) -> Result<super::DesignPlan> {
        use crate::stats::design;
        let at = raw.kind.span();
        let stray = |what: &str, present: bool, span: Option<Range<usize>>| -> Result<()> {
            match (present, span) {
                (true, Some(sp)) => Err(self.err(
                    sp,
                    format!(
                        "`{what}` belongs to another kind of matrix than `{}`",
                        kind.as_str()
                    ),
                )),
                _ => Ok(()),
            }
        };
        if kind != Kind::Fractional {
            stray(
                "fraction",
                raw.fraction.is_some(),
                raw.fraction.as_ref().map(|f| f.span()),
            )?;
            stray(
                "generators",
                raw.generators.is_some(),
                raw.generators.as_ref().map(|g| g.span()),
            )?;
        }
        if kind != Kind::Shapley {
            stray(
                "orders",
                raw.orders.is_some(),
                raw.orders.as_ref().map(|o| o.span()),
            )?;
        }
        let plan = match kind {
            Kind::Factorial => super::DesignPlan::Factorial(
                design::full_factorial(k).map_err(|e| self.err(at.clone(), e))?,
            ),
            Kind::Fractional => {
                let d = match (&raw.fraction, &raw.generators) {
                    (Some(p), None) => {
                        design::fractional(k, *p.get_ref()).map_err(|e| self.err(p.span(), e))?
                    }
                    (None, Some(g)) => {
                        let g: Vec<&str> = g.get_ref().iter().map(String::as_str).collect();
                        design::fractional_with(k, &g)
                            .map_err(|e| self.err(raw.generators.as_ref().unwrap().span(), e))?
                    }
                    _ => {
                        return Err(self.err(
                            at,
                            "kind `fractional` needs `fraction = p` (a tabulated 2^(k-p) design) or `generators = [\"E=ABCD\", ...]`, one of them",
                        ));
                    }
                };
                super::DesignPlan::Factorial(d)
            }
            _ => {
                let m = raw.orders.as_ref().map_or(DEFAULT_ORDERS, |o| *o.get_ref());
                if m == 0 || m > MAX_VARIANTS {
                    return Err(self.err(
                        raw.orders.as_ref().map_or(at, |o| o.span()),
                        format!("orders = {m}: give 1 to {MAX_VARIANTS}"),
                    ));
                }
                let seed = raw.order_seed.unwrap_or(0);
                super::DesignPlan::Shapley {
                    orders: design::sample_orders(k, m, seed),
                    seed,
                }
            }
        };
        Ok(plan)
    }

    /// One grid value: a trick's on/off, or a setting's value.
    fn grid_value(
        &self,
        table: &str,
        key: &str,
        v: &toml::Value,
        span: Range<usize>,
    ) -> Result<Override> {
        if let Some(d) = self.script {
            return match (d.trick(key), v) {
                (Some(t), toml::Value::String(s)) if s == "on" || s == "off" => {
                    Ok(Override::Trick {
                        key: t.name.clone(),
                        on: s == "on",
                    })
                }
                (Some(t), toml::Value::Boolean(b)) => Ok(Override::Trick {
                    key: t.name.clone(),
                    on: *b,
                }),
                (Some(t), v) => Err(self.err(
                    span,
                    format!(
                        "{table} `{}` is a trick: its values are \"on\"/\"off\" or true/false, not {}",
                        t.name,
                        Override::toml_text(v)
                    ),
                )),
                (None, v) => {
                    d.settable(key).map_err(|e| self.err(span, e))?;
                    Ok(Override::Set {
                        key: key.to_string(),
                        value: Override::toml_text(v),
                    })
                }
            };
        }
        Ok(match (tricks::find(key), v) {
            (Some(t), toml::Value::String(s)) if s == "on" || s == "off" => Override::Trick {
                key: t.key.into(),
                on: s == "on",
            },
            (Some(t), toml::Value::Boolean(b)) => Override::Trick {
                key: t.key.into(),
                on: *b,
            },
            (Some(t), v) => {
                return Err(self.err(
                    span,
                    format!(
                        "{table} `{}` is a trick: its values are \"on\"/\"off\" or true/false, not {}",
                        t.key,
                        Override::toml_text(v)
                    ),
                ));
            }
            _ => Override::Set {
                key: key.to_string(),
                value: Override::toml_text(v),
            },
        })
    }

    /// Every variant resolved against its recipe, the error pointing at it.
    fn resolve(&self, variants: &[(Variant, Range<usize>)]) -> Result<Vec<(RunConfig, RunPlan)>> {
        variants
            .iter()
            .map(|(v, span)| {
                recipe::resolve_plan(self.recipe, &v.overrides).map_err(|e| {
                    self.err(
                        span.clone(),
                        format!("variant `{}`: {}", v.name, crate::util::one_line(&e)),
                    )
                })
            })
            .collect()
    }
}

impl Ctx<'_> {
    /// Every script variant's command, environment and patches, the error
    /// pointing at the variant.
    fn resolve_scripts(
        &self,
        d: &Declared,
        variants: &[(Variant, Range<usize>)],
    ) -> Result<Vec<Arc<ScriptRecord>>> {
        let err = |at: Range<usize>, m: String| self.err(at, m);
        variants
            .iter()
            .map(|(v, _)| d.resolve(&v.overrides, &err).map(Arc::new))
            .collect()
    }
}

/// Script variants that run the same command, environment and patches.
fn script_warnings(origin: &str, variants: &[Variant], runs: &[Arc<ScriptRecord>]) -> Vec<String> {
    let mut out = Vec::new();
    for (j, rj) in runs.iter().enumerate() {
        if let Some(i) = runs[..j].iter().position(|ri| ri == rj) {
            out.push(format!(
                "{origin}: variants `{}` and `{}` run the same command, environment and patches: the second changes nothing; drop it or change what it varies",
                variants[i].name, variants[j].name
            ));
        }
    }
    out
}

/// What the plans say about a matrix that its text does not: variants that
/// train identically, and trick parameters set where the trick is never on.
fn plan_warnings(
    origin: &str,
    recipe: &str,
    variants: &[Variant],
    resolved: &[(RunConfig, RunPlan)],
) -> Vec<String> {
    let mut out = Vec::new();
    // A length changed from the recipe's, with settings in epochs left as
    // they were: said once for the matrix, with the first variant doing it.
    if let Some((v, note)) = variants.iter().find_map(|v| {
        crate::recipe::unscaled_epoch_settings(recipe, &v.overrides)
            .ok()
            .flatten()
            .map(|n| (v, n))
    }) {
        out.push(format!("{origin}: variant `{}`: {note}", v.name));
    }
    // Settings that cannot act in a plan (fp16 Muon buffers in an fp16 net)
    // are put in one state first, so a variant that only changes those is caught.
    let effective: Vec<RunPlan> = resolved.iter().map(|(_, p)| p.effective()).collect();
    for (j, (vj, pj)) in variants.iter().zip(&effective).enumerate() {
        if let Some(i) = effective[..j].iter().position(|pi| pi == pj) {
            out.push(format!(
                "{origin}: variants `{}` and `{}` have the same plan, so they train identically: \
                 the second changes nothing (is a trick already in that state, or one that cannot act here?); drop it or change what it varies",
                variants[i].name, vj.name
            ));
        }
    }
    let mut reported = Vec::new();
    for o in variants.iter().flat_map(|v| &v.overrides) {
        let Override::Set { key, .. } = o else {
            continue;
        };
        let Some(t) = key.split_once('.').and_then(|(t, _)| tricks::find(t)) else {
            continue;
        };
        let never_on = resolved
            .iter()
            .all(|(cfg, _)| !cfg.tricks.get(t.key).is_some_and(|s| s.on));
        if never_on && !reported.contains(key) {
            reported.push(key.clone());
            out.push(format!(
                "{origin}: `{key}` is set but `{}` is off in every variant, so the setting changes nothing; turn the trick on or drop the setting",
                t.key
            ));
        }
    }
    out
}

pub fn load(path: &Path) -> Result<Matrix> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| {
            anyhow!(
                "cannot read matrix file {}: {e}; pass a .toml file (`tricklab matrix list` shows the shipped ones)",
                path.display()
            )
        })?;
    let base = path.parent().filter(|p| !p.as_os_str().is_empty());
    let mut m = parse_in(
        &text,
        &path.display().to_string(),
        base.unwrap_or(Path::new(".")),
    )?;
    m.path = Some(path.to_path_buf());
    Ok(m)
}

/// Refuses a matrix past [`MAX_VARIANTS`] or [`MAX_RUNS`], counting the
/// seeds `adaptive` or `until_decided` may add.
fn check_size(origin: &str, variants: usize, h: &Header) -> Result<()> {
    let most = (h.adaptive.as_ref().map(|a| a.max))
        .or(h.until_decided.as_ref().map(|u| u.max))
        .unwrap_or(0);
    let runs = variants.saturating_mul(h.seeds.len().max(most));
    if variants > MAX_VARIANTS || runs > MAX_RUNS {
        return Err(anyhow!(
            "{origin}: {variants} variants x {} seeds = {runs} runs, over the limit of {MAX_VARIANTS} variants and {MAX_RUNS} runs a matrix: split it, or fewer repeats",
            h.seeds.len()
        ));
    }
    Ok(())
}

/// Each variant's name once: the second of two of one name is pointed at.
fn unique_names(cx: &Ctx, variants: &[(Variant, Range<usize>)]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (v, span) in variants {
        if !seen.insert(v.name.as_str()) {
            return Err(cx.err(
                span.clone(),
                format!(
                    "two variants are named `{}`; give each a distinct name",
                    v.name
                ),
            ));
        }
    }
    Ok(())
}

/// Variants from which a matrix's size is worth a word before it runs.
const LARGE_VARIANTS: usize = 1024;

/// A matrix accepted but large (2^10 configurations and up: a full
/// factorial of 12 tricks is 4,096): one warning with its size and, for a
/// factorial, the design that asks the same questions with fewer runs.
fn size_warning(origin: &str, kind: Kind, variants: usize, seeds: usize) -> Option<String> {
    if variants < LARGE_VARIANTS {
        return None;
    }
    let runs = variants * seeds;
    Some(format!(
        "{origin}: {variants} variants × {seeds} seed(s) = {runs} runs; `matrix show --estimate` prices them before they start{}",
        if kind == Kind::Factorial {
            ". A full factorial doubles with each factor: `kind = \"fractional\"` estimates the main effects and two-factor interactions with a fraction of the runs"
        } else {
            ""
        }
    ))
}

/// Parses and expands a matrix; every variant is resolved against its recipe
/// so that a bad name or value is reported here, at its place in the file.
/// A script matrix's `dir` is taken from the working folder.
pub fn parse(text: &str, origin: &str) -> Result<Matrix> {
    parse_in(text, origin, Path::new("."))
}

/// The TOML's error at its place in the file.
fn toml_error(e: &toml::de::Error, origin: &str, text: &str) -> anyhow::Error {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(s) => anyhow!(
            "{}: {msg} (see ablations/README.md for the format)",
            locate(origin, text, s.start)
        ),
        None => anyhow!("{origin}: {msg} (see ablations/README.md for the format)"),
    }
}

/// As [`parse`], a script matrix's `dir` relative to `base` (the matrix
/// file's folder). The recorded text then names the folder absolutely, so
/// that a resume or a shard reads the same script from anywhere.
pub fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Matrix> {
    let raw: RawMatrix = toml::from_str(text).map_err(|e| toml_error(&e, origin, text))?;
    let locate_err =
        |at: Range<usize>, m: String| anyhow!("{}: {m}", locate(origin, text, at.start));
    let declared = match &raw.script {
        Some(s) => Some(Declared::new(s, raw.tricks.as_ref(), base, &locate_err)?),
        None => None,
    };
    let recipe_name = raw.recipe.as_ref().map_or(SCRIPT, |r| r.get_ref().as_str());
    let cx = Ctx {
        origin,
        text,
        recipe: recipe_name,
        script: declared.as_ref(),
    };
    let h = cx.header(&raw)?;
    let (variants, design) = expand(&cx, &raw, &h)?;
    let (resolved, scripts) = match &declared {
        Some(d) => (Vec::new(), cx.resolve_scripts(d, &variants)?),
        None => (cx.resolve(&variants)?, Vec::new()),
    };
    let plain: Vec<Variant> = variants.into_iter().map(|(v, _)| v).collect();
    let until_at = raw.until_decided.as_ref().map(|u| u.span().start);
    let mut warnings = match &declared {
        Some(_) => script_warnings(origin, &plain, &scripts),
        None => plan_warnings(origin, recipe_name, &plain, &resolved),
    };
    warnings.extend(size_warning(origin, h.kind, plain.len(), h.seeds.len()));
    let recorded = match &declared {
        Some(d) => with_script_dir(text, origin, &d.dir)?,
        None => text.to_string(),
    };
    let m = Matrix {
        warnings,
        name: raw.name.get_ref().clone(),
        description: raw.description.unwrap_or_default(),
        path: None,
        text: recorded,
        recipe: recipe_name.to_string(),
        kind: h.kind,
        data_named: raw.data.is_some(),
        data: match (&raw.data, &declared) {
            (Some(d), _) => d.get_ref().clone(),
            (None, Some(_)) => SCRIPT.into(),
            (None, None) => "embedded".into(),
        },
        device: raw.device.map(Spanned::into_inner),
        target: h.target,
        budget: h.budget,
        seeds: h.seeds,
        adaptive: h.adaptive,
        until_decided: h.until_decided,
        shard: h.shard,
        variants: plain,
        design,
        plans: resolved,
        script: declared.map(|d| {
            Arc::new(super::ScriptMatrix {
                declared: d,
                runs: scripts,
            })
        }),
    };
    match until_at.map(|at| locate(origin, text, at)) {
        Some(at) if m.record().asked().is_empty() => Err(anyhow!(
            "{at}: until_decided has nothing to decide: this matrix compares no two variants; add a variant or drop until_decided"
        )),
        _ => Ok(m),
    }
}

/// The variants of a matrix's kind, each starting from the matrix's own
/// changes, named and counted; the design they came from, for a designed kind.
fn expand(
    cx: &Ctx,
    raw: &RawMatrix,
    h: &Header,
) -> Result<(Vec<PlacedVariant>, Option<super::Design>)> {
    let mut design = None;
    let expanded = match h.kind {
        Kind::Ladder => cx.steps(raw, true)?,
        Kind::List => cx.steps(raw, false)?,
        Kind::LeaveOneOut => cx.one_at_a_time(raw, true)?,
        Kind::AddOne => cx.one_at_a_time(raw, false)?,
        Kind::Grid => cx.grid(raw)?,
        Kind::Factorial | Kind::Fractional | Kind::Shapley => {
            let (v, d) = cx.designed(raw, h.kind)?;
            design = Some(d);
            v
        }
    };
    let base_changes = cx.step(&raw.on, &raw.off, &raw.set)?;
    let forced = cx.forced(&raw.force)?;
    let mut variants = Vec::with_capacity(expanded.len());
    for (name, extra, span) in expanded {
        check_variant_name(&name).map_err(|e| cx.err(span.clone(), e))?;
        let overrides = base_changes
            .iter()
            .chain(&extra)
            .chain(&forced)
            .map(|(o, _)| o.clone())
            .collect();
        variants.push((Variant { name, overrides }, span));
    }
    check_size(cx.origin, variants.len(), h)?;
    unique_names(cx, &variants)?;
    Ok((variants, design))
}

/// The name a script matrix carries where an engine matrix names its
/// recipe and data set.
pub const SCRIPT: &str = "script";

/// The file's text with `[script] dir` set to the absolute `dir`, where it
/// was not: as a session records a script matrix, and as `parity --peers`
/// points a record's matrix at another copy.
pub fn with_script_dir(text: &str, origin: &str, dir: &Path) -> Result<String> {
    let mut table: toml::Table = toml::from_str(text)?;
    let Some(toml::Value::Table(script)) = table.get_mut("script") else {
        return Ok(text.to_string());
    };
    let abs = dir.display().to_string();
    if script.get("dir").and_then(toml::Value::as_str) == Some(abs.as_str()) {
        return Ok(text.to_string());
    }
    script.insert("dir".into(), toml::Value::String(abs));
    Ok(format!(
        "# {origin} with its script's dir made absolute (comments of the original file dropped)\n{}",
        toml::to_string(&table)?
    ))
}

/// "i/N" with 1 ≤ i ≤ N.
pub fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("shard `{s}`: write i/N with 1 ≤ i ≤ N, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if i == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LADDER: &str = r#"
name = "t"
recipe = "tiny-page-resnet9"
kind = "ladder"
target = 0.5
repeats = 2
set = { epochs = 2 }

[[rung]]
name = "baseline"

[[rung]]
name = "+ ls"
on = ["label_smoothing"]
set = { epochs = 3 }

[[rung]]
name = "+ celu"
on = ["celu"]
"#;

    #[test]
    fn ladder_rungs_keep_earlier_changes_and_repeats_interleave() {
        let m = parse(LADDER, "t.toml").unwrap();
        assert_eq!(m.variants.len(), 3);
        let last = &m.variants[2].overrides;
        assert!(last.contains(&Override::Trick {
            key: "label_smoothing".into(),
            on: true
        }));
        assert!(last.contains(&Override::Set {
            key: "epochs".into(),
            value: "3".into()
        }));
        let runs = m.runs();
        assert_eq!(runs.len(), 6);
        let order: Vec<(usize, usize)> = runs.iter().map(|r| (r.id.index, r.id.repeat)).collect();
        assert_eq!(order, vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
        assert_eq!(runs[3].seed, 1);
    }

    #[test]
    fn loo_addone_grid_and_list_expand() {
        let loo = parse(
            "name='l'\nrecipe='tiny-airbench94'\nkind='leave-one-out'\nvary=['lookahead','tta']\n",
            "l.toml",
        )
        .unwrap();
        let names: Vec<&str> = loo.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["all", "- lookahead", "- tta"]);
        let add = parse(
            "name='a'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu']\n",
            "a.toml",
        )
        .unwrap();
        assert_eq!(
            add.variants[1].overrides,
            vec![Override::Trick {
                key: "celu".into(),
                on: true
            }]
        );
        let grid = parse("name='g'\nrecipe='tiny-page-resnet9'\nkind='grid'\n[grid]\nepochs=[1,2]\n'label_smoothing.alpha'=[0.1,0.2,0.3]\n", "g.toml").unwrap();
        assert_eq!(grid.variants.len(), 6);
        let list = parse("name='x'\nrecipe='tiny-page-resnet9'\nkind='list'\n[[variant]]\nname='a'\non=['celu']\n[[variant]]\nname='b'\noff=['cutout']\n", "x.toml").unwrap();
        assert_eq!(
            list.variants[1].overrides,
            vec![Override::Trick {
                key: "cutout".into(),
                on: false
            }]
        );
    }

    /// A factorial, a fraction and Shapley orders expand into one variant a
    /// configuration, each variant's overrides setting every factor to the
    /// level its configuration's bit says.
    #[test]
    fn designed_matrices_expand_into_their_configurations() {
        use crate::matrix::DesignPlan;
        let head = "name = \"d\"\nrecipe = \"tiny-airbench94\"\n";
        let fact = parse(
            &format!(
                "{head}kind = \"factorial\"\nvary = [\"tta\", \"lookahead\"]\n[levels]\nepochs = [2, 3]\n"
            ),
            "f",
        )
        .unwrap();
        let d = fact.design.as_ref().unwrap();
        assert_eq!(d.factors, ["tta", "lookahead", "epochs"]);
        assert_eq!(fact.variants.len(), 8);
        assert_eq!(fact.variants[0].name, "epochs=2");
        assert_eq!(fact.variants[7].name, "+tta +lookahead epochs=3");
        for (v, &w) in fact.variants.iter().zip(&d.configs) {
            let on = |k: &str| {
                v.overrides.contains(&Override::Trick {
                    key: k.into(),
                    on: true,
                })
            };
            assert_eq!(
                (on("tta"), on("lookahead")),
                (w & 1 == 1, w & 2 == 2),
                "{}",
                v.name
            );
            let epochs = if w & 4 == 4 { "3" } else { "2" };
            assert!(v.overrides.contains(&Override::Set {
                key: "epochs".into(),
                value: epochs.into()
            }));
        }
        let frac = parse(
            &format!(
                "{head}kind = \"fractional\"\nfraction = 1\nvary = [\"tta\", \"lookahead\", \"label_smoothing\", \"whitening_bias\", \"alternating_flip\"]\n"
            ),
            "f",
        )
        .unwrap();
        let DesignPlan::Factorial(d) = &frac.design.as_ref().unwrap().plan else {
            panic!("a fraction of a factorial")
        };
        assert_eq!((frac.variants.len(), d.resolution()), (16, Some(5)));
        let shown = frac.design.as_ref().unwrap().describe().join("\n");
        assert!(
            shown.contains("resolution V") && shown.contains("I = ABCDE"),
            "{shown}"
        );
        let shap = parse(
            &format!(
                "{head}kind = \"shapley\"\norders = 8\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n"
            ),
            "f",
        )
        .unwrap();
        let d = shap.design.as_ref().unwrap();
        let DesignPlan::Shapley { orders, .. } = &d.plan else {
            panic!("orders")
        };
        // Every order starts at the base and ends with all on: both run once.
        assert_eq!(orders.len(), 8);
        assert_eq!(shap.variants[0].name, "base");
        assert!(d.configs.contains(&0b111));
        assert_eq!(
            d.configs.len(),
            crate::stats::design::runs_saved(orders).1,
            "one variant per distinct configuration"
        );
    }

    #[test]
    fn a_factorial_of_twelve_tricks_is_accepted_with_a_word_on_its_size() {
        let tricks = [
            "label_smoothing",
            "tta",
            "lookahead",
            "cutout",
            "nesterov",
            "dirac_init",
            "logit_scale",
            "zero_grad_none",
            "cudnn_benchmark",
            "blurpool",
            "head_init_normal",
            "channels_last",
        ];
        let vary: Vec<String> = tricks.iter().map(|t| format!("\"{t}\"")).collect();
        let text = format!(
            "name = \"big\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nvary = [{}]\n",
            vary.join(", ")
        );
        // Twelve tricks the recipe can turn on and off in any combination.
        let m = parse(&text, "big.toml").unwrap();
        assert_eq!(m.variants.len(), 4096);
        let w = m
            .warnings
            .iter()
            .find(|w| w.contains("4096 variants"))
            .unwrap();
        assert!(
            w.starts_with("big.toml: 4096 variants × 1 seed(s) = 4096 runs")
                && w.contains("kind = \"fractional\""),
            "{w}"
        );
        let small = parse(
            "name = \"s\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nvary = [\"lookahead\", \"tta\"]\n",
            "s.toml",
        )
        .unwrap();
        assert!(!small.warnings.iter().any(|w| w.contains("variants ×")));
    }

    #[test]
    fn every_invalid_fixture_gives_its_one_line_error() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/matrices/invalid");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let want = std::fs::read_to_string(path.with_extension("expected"))
                .unwrap_or_else(|_| panic!("{name} has no .expected file"));
            let got = format!("{:#}", parse(&text, &name).expect_err(&name));
            assert_eq!(got, want.trim_end(), "{name}");
            assert!(!got.contains('\n'), "{name}: one line");
            seen += 1;
        }
        assert!(seen >= 30, "{seen} fixtures");
    }

    /// The tricks a variant ends with, resolved against its recipe.
    fn resolved_on(m: &Matrix, i: usize) -> Vec<String> {
        recipe::resolve(&m.recipe, &m.variants[i].overrides)
            .unwrap()
            .tricks_on()
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one table of every shipped matrix and what it must expand into"
    )]
    fn every_shipped_matrix_expands_into_what_it_claims() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ablations");
        let files = super::super::matrix_files(&dir);
        let mut seen = Vec::new();
        // A published record's matrix reads the user's fetched copy
        // (tests/it/records.rs checks those).
        for f in files
            .iter()
            .filter(|f| !super::super::pins_a_published_copy(f))
        {
            let m = load(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert!(m.variants.len() >= 2, "{}", f.display());
            assert_eq!(m.runs().len(), m.variants.len() * m.seeds.len());
            assert!(m.target > 0.0 && m.target <= 1.0);
            assert!(m.warnings.is_empty(), "{}: {:?}", f.display(), m.warnings);
            seen.push((m.name.clone(), m));
        }
        let get = |name: &str| {
            &seen
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("ablations/{name}.toml is missing"))
                .1
        };

        // The designed matrices (issue 37): their sizes, and Page's rungs all on
        // is page-final itself.
        use crate::matrix::DesignPlan;
        let fact = get("airbench94-factorial");
        assert_eq!((fact.kind, fact.variants.len()), (Kind::Factorial, 16));
        let frac = get("speedrun-fractional");
        let DesignPlan::Factorial(d) = &frac.design.as_ref().unwrap().plan else {
            panic!("a fraction")
        };
        assert_eq!((frac.variants.len(), d.resolution()), (16, Some(4)));
        let shap = get("page-shapley");
        let d = shap.design.as_ref().unwrap();
        assert_eq!((shap.kind, d.factors.len()), (Kind::Shapley, 9));
        let all = d.variant_of((1 << 9) - 1).expect("every order ends all on");
        let (_, final_plan) = crate::recipe::resolve_plan("page-final", &[]).unwrap();
        let (_, all_on) =
            crate::recipe::resolve_plan(&shap.recipe, &shap.variants[all].overrides).unwrap();
        assert_eq!(all_on, final_plan);
        // All off: every rung's tricks off, page-final's settings kept.
        assert_eq!(shap.variants[0].name, "base");
        let base = crate::recipe::resolve(&shap.recipe, &shap.variants[0].overrides).unwrap();
        for t in [
            "gpu_data",
            "ghost_bn",
            "whitening",
            "ema",
            "frozen_bn_scale",
        ] {
            assert!(!base.tricks_on().iter().any(|x| x == t), "{t} on at base");
        }
        assert_eq!(base.epochs, 10.0);

        // Page part 8: B0..B9b, and the last rung is the page-final recipe.
        let ladder = get("page-ladder");
        assert_eq!(ladder.kind, Kind::Ladder);
        assert_eq!(ladder.variants.len(), 12);
        let last = recipe::resolve(&ladder.recipe, &ladder.variants[11].overrides).unwrap();
        let fin = recipe::resolve("page-final", &[]).unwrap();
        assert_eq!(last.tricks_on(), fin.tricks_on());
        assert_eq!((last.epochs, last.lr), (fin.epochs, fin.lr));
        for w in ladder.variants.windows(2) {
            assert!(
                w[1].overrides.starts_with(&w[0].overrides),
                "a rung drops earlier changes"
            );
        }

        // On screen a rung is read against the one before it.
        assert_eq!(ladder.reference(0), None);
        let r = ladder.reference(5).unwrap();
        assert_eq!((r.index, r.role.as_str()), (4, "previous rung"));
        assert_eq!(ladder.spec(5, 0, 0).reference, Some(r));

        // Leave-one-out: the reference is the recipe, each variant lacks one trick.
        let loo = get("airbench94-loo");
        assert_eq!(loo.reference(0), None);
        let r = loo.reference(3).unwrap();
        assert_eq!((r.index, r.role.as_str()), (0, "all on"));
        let full = resolved_on(loo, 0);
        assert_eq!(
            full,
            recipe::resolve("airbench94", &[]).unwrap().tricks_on()
        );
        for i in 1..loo.variants.len() {
            let v = resolved_on(loo, i);
            let gone: Vec<_> = full.iter().filter(|t| !v.contains(t)).collect();
            assert_eq!(gone.len(), 1, "{}", loo.variants[i].name);
            assert!(v.iter().all(|t| full.contains(t)));
        }

        // Add-one: the bare base plus exactly one tip per variant, every tip of the issue.
        let tips = get("pytorch-tips");
        let base = resolved_on(tips, 0);
        let mut added = Vec::new();
        for i in 1..tips.variants.len() {
            let v = resolved_on(tips, i);
            let new: Vec<_> = v.iter().filter(|t| !base.contains(t)).cloned().collect();
            assert_eq!(new.len(), 1, "{}", tips.variants[i].name);
            added.extend(new);
        }
        for tip in [
            "amp",
            "channels_last",
            "cudnn_benchmark",
            "zero_grad_none",
            "no_bias_before_bn",
        ] {
            assert!(added.iter().any(|t| t == tip), "pytorch-tips lacks {tip}");
        }

        // Large batch: LARS, LAMB, warm-up, label smoothing, no WD on BN, progressive resizing.
        let lb = get("large-batch");
        let all: Vec<String> = (0..lb.variants.len())
            .flat_map(|i| resolved_on(lb, i))
            .collect();
        for t in [
            "lars",
            "lamb",
            "warmup",
            "label_smoothing",
            "no_wd_bn_bias",
            "progressive_resize",
        ] {
            assert!(all.iter().any(|x| x == t), "large-batch lacks {t}");
        }

        // Parts 1-4 run from the DAWNBench ResNet-18 to ResNet-9.
        let parts = get("page-parts1-4");
        let first = recipe::resolve(&parts.recipe, &parts.variants[0].overrides).unwrap();
        let end =
            recipe::resolve(&parts.recipe, &parts.variants.last().unwrap().overrides).unwrap();
        assert_eq!(first.arch, crate::model::Arch::PageResnet18);
        assert_eq!(end.arch, crate::model::Arch::Resnet9);

        // hiverge's record: the ladder climbs from airbench94_muon to the recipe, one
        // change per rung, and the list takes each change back out of it.
        let plan = |m: &Matrix, i: usize| {
            recipe::resolve_plan(&m.recipe, &m.variants[i].overrides)
                .unwrap()
                .1
        };
        let record = |name: &str| recipe::resolve_plan(name, &[]).unwrap().1;
        let sr = get("speedrun-ladder");
        assert_eq!(sr.kind, Kind::Ladder);
        assert_eq!(plan(sr, 0), record("airbench94-muon"));
        assert_eq!(plan(sr, sr.variants.len() - 1), record("hiverge-speedrun"));
        for i in 1..sr.variants.len() {
            assert_ne!(plan(sr, i), plan(sr, i - 1), "{}", sr.variants[i].name);
        }
        let loo = get("speedrun-loo");
        assert_eq!(plan(loo, 0), record("hiverge-speedrun"));
        assert_eq!(loo.variants.len(), sr.variants.len());
        let back = loo.variants.len() - 1;
        assert_eq!(plan(loo, back).batch_size, 2000);
        assert_eq!(plan(loo, back).epochs, plan(sr, 0).epochs);
        // At CPU scale the last rung is still the record, at the tiny batch and length.
        let tiny = sr.clone().tiny().unwrap();
        assert_eq!(
            (tiny.name.as_str(), tiny.recipe.as_str(), tiny.data.as_str()),
            ("speedrun-ladder-tiny", "tiny-airbench94-muon", "embedded")
        );
        assert_eq!(
            plan(&tiny, tiny.variants.len() - 1),
            record("tiny-hiverge-speedrun")
        );
        assert_eq!(tiny.seeds, sr.seeds);
        assert!(
            tiny.text.contains("--tiny")
                && !tiny.text.contains("batch_size = 1536")
                && !tiny.text.contains("0.19")
        );

        // Fujitsu's: from Goyal's recipe to fujitsu-rn50 one change a rung, at the
        // ladder's world size (BatchNorm over the same 42 images a rank).
        let fj = get("fujitsu-rn50-ladder");
        let mut goyal = record("goyal-rn50");
        assert_eq!(goyal.eval.median_of_last, 5);
        goyal.eval.median_of_last = 0;
        assert_eq!(plan(fj, 0), goyal);
        let mut want = record("fujitsu-rn50");
        assert_eq!(want.bn_batch(), 42);
        want.world_size = 8;
        want.net.bn.ghost_splits = 86016 / 8 / 42;
        let last = plan(fj, fj.variants.len() - 1);
        assert_eq!((last.bn_batch(), last.clock), (42, want.clock));
        assert_eq!(last, want);
        for i in 1..fj.variants.len() {
            assert_ne!(plan(fj, i), plan(fj, i - 1), "{}", fj.variants[i].name);
        }
        // Its tiny form plans every rung (the tiny form fixes the BatchNorm size).
        let tiny = fj.clone().tiny().unwrap();
        for i in 0..tiny.variants.len() {
            assert_eq!(plan(&tiny, i).bn_batch(), 32, "{}", tiny.variants[i].name);
        }

        // The demo runs on the embedded data with the tiny net.
        let demo = get("demo-ladder");
        assert_eq!(
            (demo.data.as_str(), demo.recipe.as_str()),
            ("embedded", "tiny-page-resnet9")
        );
    }
}

#[cfg(test)]
mod plan_checks {
    use super::parse;

    #[test]
    fn identical_variants_and_dead_settings_are_warned_about() {
        // tiny-page-resnet9 already has cutout on: "+ cutout" trains like the base.
        let m = parse(
            r#"
name = "dup"
recipe = "tiny-page-resnet9"
kind = "add-one"
vary = ["cutout", "label_smoothing"]
set = { "celu.alpha" = 0.3 }
"#,
            "dup.toml",
        )
        .unwrap();
        assert_eq!(m.warnings.len(), 2, "{:#?}", m.warnings);
        assert!(
            m.warnings[0].contains("dup.toml")
                && m.warnings[0].contains("`base`")
                && m.warnings[0].contains("`+ cutout`"),
            "{}",
            m.warnings[0]
        );
        assert!(m.warnings[1].contains("`celu.alpha` is set but `celu` is off in every variant"));
        // A leave-one-out of a trick the recipe lacks, and a ladder rung that repeats one.
        let m = parse(
            r#"
name = "noop"
recipe = "tiny-page-resnet9"
kind = "ladder"
[[rung]]
name = "a"
[[rung]]
name = "b"
on = ["celu"]
[[rung]]
name = "c"
on = ["celu"]
"#,
            "noop.toml",
        )
        .unwrap();
        assert_eq!(m.warnings.len(), 1, "{:#?}", m.warnings);
        assert!(m.warnings[0].contains("`b` and `c`"));
        let clean = parse(
            r#"
name = "ok"
recipe = "tiny-page-resnet9"
kind = "add-one"
vary = ["label_smoothing"]
"#,
            "ok.toml",
        )
        .unwrap();
        assert!(clean.warnings.is_empty(), "{:?}", clean.warnings);
    }

    #[test]
    fn absurd_epochs_name_the_limit() {
        let e = parse(
            "name = \"x\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\nset = { epochs = 1e9 }\n[[variant]]\nname = \"a\"\n",
            "x.toml",
        )
        .unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("x.toml") && e.contains("10000"), "{e}");
    }
}

#[cfg(test)]
mod data_override {
    #[test]
    fn with_data_changes_the_runs_and_the_recorded_text() {
        let text = "# a comment\nname = 'd'\nrecipe = 'tiny-page-resnet9'\nkind = 'add-one'\nvary = ['celu']\n";
        let m = super::parse(text, "d.toml")
            .unwrap()
            .with_data("synthetic:100")
            .unwrap();
        assert!(m.runs().iter().all(|r| r.data == "synthetic:100"));
        // What the manifest records re-parses to the same data (resume follows it).
        let again = super::parse(&m.text, "manifest.json").unwrap();
        assert_eq!(
            (again.data.as_str(), again.variants.len()),
            ("synthetic:100", 2)
        );
        let e = super::parse(text, "d.toml")
            .unwrap()
            .with_data("no-such-set")
            .unwrap_err();
        assert!(format!("{e:#}").contains("no-such-set"));
    }

    #[test]
    fn sizes_beyond_any_plan_are_refused_before_anything_is_allocated() {
        let e = format!("{:#}", super::parse("name='x'\nrecipe='tiny-page-resnet9'\nkind='list'\nrepeats=1000000000\n[[variant]]\nname='a'\n", "x.toml").unwrap_err());
        assert!(e.contains("over the limit of 10000"), "{e}");
        let keys: String = (0..6)
            .map(|k| {
                format!(
                    "'label_smoothing.alpha{k}' = [{}]\n",
                    (0..10)
                        .map(|v| format!("{v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect();
        let t = format!("name='g'\nrecipe='tiny-page-resnet9'\nkind='grid'\n[grid]\n{keys}");
        let e = format!("{:#}", super::parse(&t, "g.toml").unwrap_err());
        assert!(e.contains("1000000 variants") && e.contains("split"), "{e}");
    }
}

#[cfg(test)]
mod shards {
    #[test]
    fn every_run_is_in_exactly_one_shard_and_every_shard_gets_every_variant() {
        let text = "name='s'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu','flip','cutout']\nrepeats=4\n";
        let m = super::parse(text, "s.toml").unwrap();
        let all: Vec<_> = m.runs().into_iter().map(|r| r.id).collect();
        let mut seen = Vec::new();
        for i in 1..=3 {
            let s = m.clone().with_shard(i, 3).unwrap();
            let ids: Vec<_> = s.runs().into_iter().map(|r| r.id).collect();
            assert!(
                (5..=6).contains(&ids.len()),
                "shard {i}: {} runs",
                ids.len()
            );
            let variants: std::collections::BTreeSet<_> = ids.iter().map(|r| r.index).collect();
            assert_eq!(variants.len(), 4, "shard {i} lacks a variant");
            // The shard's recorded text re-parses to the same shard and seeds.
            let again = super::parse(&s.text, "manifest.json").unwrap();
            assert_eq!(
                (again.shard, again.seeds.clone()),
                (Some((i, 3)), m.seeds.clone())
            );
            seen.extend(ids);
        }
        seen.sort_by_key(|r| (r.repeat, r.index));
        assert_eq!(seen, all);
        assert!(super::parse_shard("0/3").is_err() && super::parse_shard("4/3").is_err());
    }
}
