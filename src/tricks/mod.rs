//! The trick registry: the one place where a trick's name, help text, source,
//! off and on states, parameters and dependencies are written down. The TOML
//! parser, the CLI, the TUI and the docs all read it from here.

mod catalog;

pub use catalog::CATALOG;

/// A parameter value as the registry states it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    Float(f64),
    Int(i64),
    Bool(bool),
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

#[derive(Debug)]
pub struct TrickSpec {
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
    pub requires: &'static [&'static str],
    /// Tricks that cannot be on together with this one.
    pub conflicts: &'static [&'static str],
}

impl TrickSpec {
    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

pub fn catalog() -> &'static [TrickSpec] {
    CATALOG
}

pub fn find(key: &str) -> Option<&'static TrickSpec> {
    CATALOG
        .iter()
        .find(|t| t.key == key || t.ids.iter().any(|id| id.eq_ignore_ascii_case(key)))
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

/// "unknown trick `x`" with the nearest valid name, for one-line errors.
pub fn unknown_trick_message(name: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_typos_only() {
        assert_eq!(
            nearest("lable_smoothing", ["label_smoothing", "celu"]),
            Some("label_smoothing")
        );
        assert_eq!(nearest("zzzzzzzz", ["label_smoothing", "celu"]), None);
    }
}

#[derive(clap::Args, Debug)]
pub struct TricksArgs {}

pub fn cmd_tricks(_args: TricksArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab tricks` is not built yet")
}
