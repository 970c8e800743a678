//! A script matrix's `[script]` table and its `[tricks.NAME]` tables
//! (docs/scripts.md): what they may say, checked where they say it, and
//! each variant's command, environment and patches as its tricks make them.
//!
//! A trick is declared once, with what switching it on adds: `args` after
//! the command, `env` entries, `patch`es to the script's sources. Its
//! `params` are its defaults, which a matrix's `set = { "trick.param" = … }`
//! changes; `[script] params` are the command's own (`set = { epochs = 5 }`).
//! Everything a variant runs is decided here, once, from the files as they
//! are when the matrix is read; a patch whose text is not found the number
//! of times it says refuses the matrix before any run.

use crate::config::{Clock, Override};
use crate::record::{Patch, Provenance, ScriptRecord};
use anyhow::Result;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Placeholders a run fills when it starts, not when the matrix is read.
pub const RUN_PLACEHOLDERS: [&str; 4] = ["seed", "out", "device", "world_size"];

/// The placeholder for the folder tricklab exports `[script.data]` to.
pub const DATA_PLACEHOLDER: &str = "data";

/// The longest `timeout`: a week.
const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

type Words = Spanned<Vec<Spanned<String>>>;
type Params = BTreeMap<Spanned<String>, Spanned<toml::Value>>;
type Env = BTreeMap<Spanned<String>, Spanned<String>>;

/// `[script]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScript {
    command: Words,
    dir: Option<Spanned<String>>,
    env: Option<Env>,
    timeout: Option<Spanned<String>>,
    /// The convention the script's own seconds follow (default hlb: the
    /// training loop only, evaluation outside, as the protocol asks).
    clock: Option<Spanned<String>>,
    world_size: Option<Spanned<usize>>,
    params: Option<Params>,
    parse: Option<Vec<RawParse>>,
    /// A published script: the repository and commit `dir` must be a copy
    /// of, and the sha256 of each file its runs read.
    source: Option<Spanned<RawSource>>,
    /// A tricklab data set exported for the script as raw bytes, its
    /// folder given as `{data}`.
    data: Option<Spanned<RawData>>,
}

/// `[script.data]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawData {
    /// A data set spec, as `--data` takes it (`tricklab data list`).
    name: Spanned<String>,
    train_per_class: Option<usize>,
    test_per_class: Option<usize>,
}

/// `[script.source]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    /// GitHub's `owner/name`, or a git URL.
    repo: Spanned<String>,
    commit: Spanned<String>,
    /// sha256 by path in the repository.
    files: BTreeMap<Spanned<String>, Spanned<String>>,
}

impl RawSource {
    /// What fetches the pinned copy into `dir`.
    fn fetch_command(&self, dir: &Path) -> String {
        let repo = self.repo.get_ref();
        let url = if repo.contains("://") || repo.starts_with("git@") {
            repo.clone()
        } else {
            format!("https://github.com/{repo}")
        };
        format!(
            "git clone {url} {d} && git -C {d} checkout {}",
            self.commit.get_ref(),
            d = dir.display()
        )
    }

    /// The pin itself is well formed: a commit and sha256s in hex.
    fn check(&self, err: Locate) -> Result<()> {
        let hex = |s: &str, lens: std::ops::RangeInclusive<usize>| {
            lens.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
        };
        if !hex(self.commit.get_ref(), 7..=40) {
            return Err(err(
                self.commit.span(),
                "source commit: give the commit's hash (7 to 40 hex digits)".into(),
            ));
        }
        if self.files.is_empty() {
            return Err(err(
                self.repo.span(),
                "source files: pin at least the script, `{ \"train.py\" = \"<sha256>\" }`".into(),
            ));
        }
        for (f, h) in &self.files {
            if !hex(h.get_ref(), 64..=64) {
                return Err(err(
                    h.span(),
                    format!(
                        "source files: `{}` needs its sha256 (64 hex digits; `sha256sum FILE`)",
                        f.get_ref()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `dir` holds the pinned copy: every pinned file, each with its sha256.
    fn verify(&self, dir: &Path, at: Range<usize>, err: Locate) -> Result<()> {
        use sha2::Digest;
        let (repo, commit) = (self.repo.get_ref(), self.commit.get_ref());
        if !dir.is_dir() {
            return Err(err(
                at,
                format!(
                    "the published script ({repo} at {commit}) is not at {}; fetch it: {}",
                    dir.display(),
                    self.fetch_command(dir)
                ),
            ));
        }
        for (f, want) in &self.files {
            let path = dir.join(f.get_ref());
            let Ok(bytes) = std::fs::read(&path) else {
                return Err(err(
                    f.span(),
                    format!(
                        "{} is missing: {} is not a copy of {repo} at {commit}; fetch it: {}",
                        path.display(),
                        dir.display(),
                        self.fetch_command(dir)
                    ),
                ));
            };
            let got = hex::encode(sha2::Sha256::digest(&bytes));
            if !got.eq_ignore_ascii_case(want.get_ref()) {
                return Err(err(
                    want.span(),
                    format!(
                        "{}: sha256 {got}, the matrix pins {} ({repo} at {commit}): `git -C {} checkout {commit}` (the copy changed), or update the pin",
                        path.display(),
                        want.get_ref(),
                        dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParse {
    regex: Spanned<String>,
}

/// `[tricks.NAME]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrick {
    help: Option<String>,
    args: Option<Words>,
    env: Option<Env>,
    patch: Option<Vec<Spanned<RawPatch>>>,
    params: Option<Params>,
    /// What taking back a trick the script has as written does: such a
    /// trick is on unless a variant turns it off.
    off: Option<Spanned<RawChange>>,
}

/// A `[tricks.NAME.off]` table: the change that switches a published trick off.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChange {
    args: Option<Words>,
    env: Option<Env>,
    patch: Option<Vec<Spanned<RawPatch>>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPatch {
    file: Spanned<String>,
    find: Spanned<String>,
    replace: Spanned<String>,
    count: Option<usize>,
}

/// A text with the place in the matrix file it came from.
#[derive(Clone, Debug)]
struct Placed {
    text: String,
    at: Range<usize>,
}

impl Placed {
    fn of(s: &Spanned<String>) -> Placed {
        Placed {
            text: s.get_ref().clone(),
            at: s.span(),
        }
    }
}

#[derive(Clone, Debug)]
struct PatchDecl {
    file: Placed,
    find: Placed,
    replace: Placed,
    count: usize,
}

/// What a trick's state adds to the command: arguments, environment, patches.
#[derive(Clone, Debug, Default)]
struct Change {
    args: Vec<Placed>,
    env: Vec<(String, Placed)>,
    patches: Vec<PatchDecl>,
}

impl Change {
    fn is_empty(&self) -> bool {
        self.args.is_empty() && self.env.is_empty() && self.patches.is_empty()
    }

    fn texts(&self) -> impl Iterator<Item = &Placed> {
        let env = self.env.iter().map(|(_, v)| v);
        let replaced = self.patches.iter().map(|p| &p.replace);
        self.args.iter().chain(env).chain(replaced)
    }
}

/// One declared trick.
#[derive(Clone, Debug)]
pub struct TrickDecl {
    pub name: String,
    pub help: String,
    /// On unless a variant turns it off: the script as written has it, and
    /// `off` takes it back.
    pub published: bool,
    /// What switching it on adds.
    on: Change,
    /// What switching it off adds (a published trick's take-back).
    off: Change,
    /// Parameter defaults, as their text.
    pub params: BTreeMap<String, String>,
}

/// A checked `[script]` table and its tricks.
#[derive(Clone, Debug)]
pub struct Declared {
    command: Vec<Placed>,
    pub dir: PathBuf,
    env: Vec<(String, Placed)>,
    pub timeout_s: Option<f64>,
    pub clock: Clock,
    pub world_size: usize,
    pub params: BTreeMap<String, String>,
    parse: Vec<String>,
    /// The published repository and commit `dir` is a copy of, and the
    /// files pinned.
    source: Option<(crate::record::Pinned, Vec<String>)>,
    /// What `{data}` is exported from.
    data: Option<crate::record::ScriptData>,
    /// In the order the file declares them.
    pub tricks: Vec<TrickDecl>,
}

/// How errors are placed: `FILE:LINE:COL: message` for a range of the file.
pub type Locate<'a> = &'a dyn Fn(Range<usize>, String) -> anyhow::Error;

fn env_of(env: &Option<Env>, err: Locate) -> Result<Vec<(String, Placed)>> {
    let mut out = Vec::new();
    for (k, v) in env.iter().flatten() {
        let name = k.get_ref();
        let ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(err(
                k.span(),
                format!("`{name}` is not an environment variable's name: letters, digits and _"),
            ));
        }
        if name.starts_with("TRICKLAB_") || name == "CUDA_VISIBLE_DEVICES" {
            return Err(err(
                k.span(),
                format!("`{name}` is set by tricklab for each run; drop it from the matrix"),
            ));
        }
        out.push((name.clone(), Placed::of(v)));
    }
    Ok(out)
}

/// A parameter's value as a command line spells it.
fn value_text(v: &toml::Value) -> String {
    Override::toml_text(v)
}

fn params_of(params: &Option<Params>, err: Locate) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (k, v) in params.iter().flatten() {
        if matches!(v.get_ref(), toml::Value::Table(_) | toml::Value::Array(_)) {
            return Err(err(
                v.span(),
                format!(
                    "parameter `{}` must be a string, a number or a boolean",
                    k.get_ref()
                ),
            ));
        }
        out.insert(k.get_ref().clone(), value_text(v.get_ref()));
    }
    Ok(out)
}

/// The script's folder, absolute: `dir` relative to the matrix file's; a
/// published script's, checked against its pin.
fn folder(raw: &RawScript, base: &Path, err: Locate) -> Result<PathBuf> {
    let (dir, at) = match &raw.dir {
        Some(d) => (base.join(d.get_ref()), d.span()),
        None => (base.to_path_buf(), raw.command.span()),
    };
    let dir = lexical(&std::path::absolute(&dir).unwrap_or(dir));
    if let Some(s) = &raw.source {
        s.get_ref().check(err)?;
        s.get_ref().verify(&dir, at.clone(), err)?;
    }
    if !dir.is_dir() {
        return Err(err(
            at,
            format!(
                "the script's folder {} is not there; `dir` is relative to the matrix file",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

/// `path` with its `.` and `..` taken out by name, as a user reads it
/// (`ablations/../peers/x` is `peers/x`); links are left as they are.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if out.parent().is_some() => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

impl Declared {
    /// Checks `[script]` and the tricks; `base` is the matrix file's folder.
    pub fn new(
        raw: &Spanned<RawScript>,
        tricks: Option<&BTreeMap<Spanned<String>, Spanned<RawTrick>>>,
        base: &Path,
        err: Locate,
    ) -> Result<Declared> {
        let raw = raw.get_ref();
        let command: Vec<Placed> = raw.command.get_ref().iter().map(Placed::of).collect();
        if command.first().is_none_or(|c| c.text.trim().is_empty()) {
            return Err(err(
                raw.command.span(),
                "`command` needs at least the program: e.g. [\"python3\", \"train.py\"]".into(),
            ));
        }
        let timeout_s = match &raw.timeout {
            Some(t) => Some(
                crate::util::parse_duration(t.get_ref())
                    .filter(|d| d.as_secs_f64() <= MAX_TIMEOUT_S)
                    .ok_or_else(|| {
                        err(
                            t.span(),
                            format!(
                                "timeout `{}`: use e.g. \"90s\", \"30m\" or \"2h\", at most a week",
                                t.get_ref()
                            ),
                        )
                    })?
                    .as_secs_f64(),
            ),
            None => None,
        };
        let clock = match &raw.clock {
            Some(c) => Clock::parse(c.get_ref()).ok_or_else(|| {
                err(
                    c.span(),
                    format!(
                        "clock `{}`: use hlb (training only), airbench, dawn or wall",
                        c.get_ref()
                    ),
                )
            })?,
            None => Clock::Hlb,
        };
        let world_size = match &raw.world_size {
            Some(w) if *w.get_ref() == 0 || *w.get_ref() > 64 => {
                return Err(err(w.span(), "world_size: give 1 to 64 processes".into()));
            }
            Some(w) => *w.get_ref(),
            None => 1,
        };
        let mut parse = Vec::new();
        for p in raw.parse.iter().flatten() {
            check_regex(p.regex.get_ref()).map_err(|e| err(p.regex.span(), e))?;
            parse.push(p.regex.get_ref().clone());
        }
        let mut declared = Declared {
            command,
            dir: folder(raw, base, err)?,
            env: env_of(&raw.env, err)?,
            timeout_s,
            clock,
            world_size,
            params: params_of(&raw.params, err)?,
            parse,
            source: raw.source.as_ref().map(|s| {
                let s = s.get_ref();
                (
                    crate::record::Pinned {
                        repo: s.repo.get_ref().clone(),
                        commit: s.commit.get_ref().clone(),
                    },
                    s.files.keys().map(|f| f.get_ref().clone()).collect(),
                )
            }),
            data: raw.data.as_ref().map(|d| data_of(d, err)).transpose()?,
            tricks: Vec::new(),
        };
        for (name, t) in tricks.into_iter().flatten() {
            declared.tricks.push(trick_of(name, t.get_ref(), err)?);
        }
        declared.check_placeholders(err)?;
        Ok(declared)
    }

    /// The declared trick named `name`.
    pub fn trick(&self, name: &str) -> Option<&TrickDecl> {
        self.tricks.iter().find(|t| t.name == name)
    }

    /// The tricks a variant with `overrides` has on, in declaration order.
    pub fn tricks_on(&self, overrides: &[Override]) -> Vec<String> {
        self.tricks
            .iter()
            .filter(|t| {
                overrides
                    .iter()
                    .rev()
                    .find_map(|o| match o {
                        Override::Trick { key, on } if *key == t.name => Some(*on),
                        _ => None,
                    })
                    .unwrap_or(t.published)
            })
            .map(|t| t.name.clone())
            .collect()
    }

    /// The declared tricks' names, for hints.
    pub fn trick_names(&self) -> Vec<&str> {
        self.tricks.iter().map(|t| t.name.as_str()).collect()
    }

    /// Whether `key` names something a `set` may change: a script
    /// parameter, or a trick's (`trick.param`).
    pub fn settable(&self, key: &str) -> Result<(), String> {
        if self.params.contains_key(key) {
            return Ok(());
        }
        if let Some((t, p)) = key.split_once('.') {
            let Some(trick) = self.trick(t) else {
                return Err(format!(
                    "`{t}` is not a declared trick; declared: {}",
                    self.trick_names().join(", ")
                ));
            };
            if trick.params.contains_key(p) {
                return Ok(());
            }
            return Err(format!(
                "trick `{t}` has no parameter `{p}`; its parameters: {}",
                words(trick.params.keys())
            ));
        }
        Err(format!(
            "`{key}` is not a parameter of [script] ({}) nor `trick.param`; declare it in [script] params",
            words(self.params.keys())
        ))
    }

    /// Every `{name}` names something a run has: a run placeholder, a
    /// script parameter, a trick's parameter (`trick.param`, or a trick's
    /// own as `{param}` in its own tables).
    fn check_placeholders(&self, err: Locate) -> Result<()> {
        let script_known = |name: &str, own: Option<&TrickDecl>| {
            RUN_PLACEHOLDERS.contains(&name)
                || (name == DATA_PLACEHOLDER && self.data.is_some())
                || self.params.contains_key(name)
                || own.is_some_and(|t| t.params.contains_key(name))
                || name
                    .split_once('.')
                    .is_some_and(|(t, p)| self.trick(t).is_some_and(|t| t.params.contains_key(p)))
        };
        let check = |p: &Placed, own: Option<&TrickDecl>| -> Result<()> {
            for name in placeholders(&p.text).map_err(|e| err(p.at.clone(), e))? {
                if !script_known(&name, own) {
                    return Err(err(
                        p.at.clone(),
                        format!(
                            "unknown placeholder `{{{name}}}`: use {}{}, a [script] parameter or `trick.param` (write {{{{ for a brace){}",
                            RUN_PLACEHOLDERS.map(|r| format!("{{{r}}}")).join(", "),
                            own.map(|t| format!(", one of `{}`'s parameters", t.name))
                                .unwrap_or_default(),
                            if name == DATA_PLACEHOLDER {
                                "; `{data}` is the folder of a data set tricklab exports: name it in [script.data] (docs/scripts.md)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
            }
            Ok(())
        };
        for p in self.command.iter().chain(self.env.iter().map(|(_, v)| v)) {
            check(p, None)?;
        }
        for t in &self.tricks {
            for p in t.on.texts().chain(t.off.texts()) {
                check(p, Some(t))?;
            }
        }
        Ok(())
    }

    /// The tricks on (published ones unless turned off), the script's
    /// parameters and each trick's, after `overrides` in order.
    #[allow(clippy::type_complexity, reason = "three maps read once by `resolve`")]
    fn state(
        &self,
        overrides: &[Override],
    ) -> (
        Vec<&str>,
        BTreeMap<String, String>,
        BTreeMap<&str, BTreeMap<String, String>>,
    ) {
        let mut on: Vec<&str> = self
            .tricks
            .iter()
            .filter(|t| t.published)
            .map(|t| t.name.as_str())
            .collect();
        let mut params = self.params.clone();
        let mut trick_params: BTreeMap<&str, BTreeMap<String, String>> = self
            .tricks
            .iter()
            .map(|t| (t.name.as_str(), t.params.clone()))
            .collect();
        for o in overrides {
            match o {
                Override::Trick { key, on: state } => {
                    on.retain(|k| k != key);
                    // Parsing checked the name: a trick of this matrix.
                    if let Some(t) = self.trick(key).filter(|_| *state) {
                        on.push(t.name.as_str());
                    }
                }
                Override::Set { key, value } => match key.split_once('.') {
                    Some((t, p)) if !self.params.contains_key(key) => {
                        if let Some(ps) = trick_params.get_mut(t) {
                            ps.insert(p.into(), value.clone());
                        }
                    }
                    _ => {
                        params.insert(key.clone(), value.clone());
                    }
                },
            }
        }
        (on, params, trick_params)
    }

    /// What a variant with `overrides` runs: the tricks on and the
    /// parameters set as they say, in order, every patch checked against
    /// the files as they are now.
    pub fn resolve(&self, overrides: &[Override], err: Locate) -> Result<ScriptRecord> {
        let (on, params, trick_params) = self.state(overrides);
        let fill = |text: &str, own: Option<&str>| {
            fill(text, &|name: &str| {
                if let Some(v) = own.and_then(|t| trick_params[t].get(name)) {
                    return Some(v.clone());
                }
                if let Some(v) = params.get(name) {
                    return Some(v.clone());
                }
                let (t, p) = name.split_once('.')?;
                trick_params.get(t)?.get(p).cloned()
            })
        };
        let mut argv: Vec<String> = self.command.iter().map(|p| fill(&p.text, None)).collect();
        let mut env: BTreeMap<String, String> = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), fill(&v.text, None)))
            .collect();
        let mut patches = Vec::new();
        // In declaration order, whatever order the overrides named them in:
        // one set of tricks is one command. A trick adds what its state
        // says: an added trick's change when on, a published one's
        // take-back when off.
        for t in &self.tricks {
            let change = if on.contains(&t.name.as_str()) {
                &t.on
            } else {
                &t.off
            };
            let own = Some(t.name.as_str());
            argv.extend(change.args.iter().map(|a| fill(&a.text, own)));
            env.extend(
                change
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), fill(&v.text, own))),
            );
            for p in &change.patches {
                patches.push((
                    Patch {
                        file: p.file.text.clone(),
                        find: p.find.text.clone(),
                        replace: fill(&p.replace.text, own),
                        count: p.count,
                        trick: t.name.clone(),
                    },
                    p,
                ));
            }
        }
        let mut files = self.check_patches(&patches, err)?;
        files.extend(self.source.iter().flat_map(|(_, f)| f.iter().cloned()));
        let mut provenance = provenance(&self.dir, &argv, files);
        provenance.source = self.source.as_ref().map(|(p, _)| p.clone());
        Ok(ScriptRecord {
            provenance,
            argv,
            dir: self.dir.clone(),
            env,
            patches: patches.into_iter().map(|(p, _)| p).collect(),
            world_size: self.world_size,
            timeout_s: self.timeout_s,
            parse: self.parse.clone(),
            data: self.data.clone(),
        })
    }

    /// Applies the patches in order to the files as read now, each `find`
    /// found exactly its `count` times; returns the files patched.
    fn check_patches(&self, patches: &[(Patch, &PatchDecl)], err: Locate) -> Result<Vec<String>> {
        let mut texts: BTreeMap<String, String> = BTreeMap::new();
        for (p, decl) in patches {
            let path = self.dir.join(&p.file);
            if !texts.contains_key(&p.file) {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    err(
                        decl.file.at.clone(),
                        format!(
                            "patch of `{}`: cannot read {} ({e}); `file` is relative to the script's dir",
                            p.trick,
                            path.display()
                        ),
                    )
                })?;
                texts.insert(p.file.clone(), text);
            }
            let text = texts.get_mut(&p.file).expect("read above");
            let found = text.matches(p.find.as_str()).count();
            if found != p.count {
                return Err(err(
                    decl.find.at.clone(),
                    format!(
                        "patch of `{}`: `{}` is found {found} time(s) in {}, not {}: quote more of the line, or say `count = {found}`",
                        p.trick,
                        p.find.escape_debug(),
                        path.display(),
                        p.count
                    ),
                ));
            }
            *text = text.replace(&p.find, &p.replace);
        }
        Ok(texts.into_keys().collect())
    }
}

fn trick_of(name: &Spanned<String>, t: &RawTrick, err: Locate) -> Result<TrickDecl> {
    let n = name.get_ref();
    crate::config::check_variant_name(n)
        .ok()
        .filter(|_| !n.contains(['.', ' ', '=', '+']) && !n.starts_with('-'))
        .ok_or_else(|| {
            err(
                name.span(),
                format!("trick name `{n}`: use letters, digits, _ and -"),
            )
        })?;
    let on = change_of(t.args.as_ref(), t.env.as_ref(), t.patch.as_ref(), err)?;
    let off = match &t.off {
        Some(o) => {
            let c = o.get_ref();
            let off = change_of(c.args.as_ref(), c.env.as_ref(), c.patch.as_ref(), err)?;
            if off.is_empty() {
                return Err(err(
                    o.span(),
                    format!(
                        "trick `{n}`'s `off` changes nothing: give it `args`, `env` or `patch` that take the trick back"
                    ),
                ));
            }
            off
        }
        None => Change::default(),
    };
    let decl = TrickDecl {
        name: n.clone(),
        help: t.help.clone().unwrap_or_default(),
        published: t.off.is_some(),
        on,
        off,
        params: params_of(&t.params, err)?,
    };
    if !decl.published && decl.on.is_empty() {
        return Err(err(
            name.span(),
            format!(
                "trick `{n}` changes nothing: give it `args`, `env` or `patch` (what switching it on adds), or an `off` table (what taking back a trick the script has does)"
            ),
        ));
    }
    Ok(decl)
}

/// `[script.data]` checked: a data set tricklab knows, whole or cut.
fn data_of(d: &Spanned<RawData>, err: Locate) -> Result<crate::record::ScriptData> {
    let raw = d.get_ref();
    let name = raw.name.get_ref().trim();
    if name.is_empty() {
        return Err(err(
            raw.name.span(),
            "[script.data] name: give a data set (`tricklab data list`), e.g. \"embedded\"".into(),
        ));
    }
    if raw.train_per_class == Some(0) || raw.test_per_class == Some(0) {
        return Err(err(
            d.span(),
            "[script.data]: a per-class count of 0 leaves the split empty; give 1 or more, or leave it out for all".into(),
        ));
    }
    Ok(crate::record::ScriptData {
        name: name.to_string(),
        train_per_class: raw.train_per_class,
        test_per_class: raw.test_per_class,
    })
}

/// The arguments, environment and patches of one trick state.
fn change_of(
    args: Option<&Words>,
    env: Option<&Env>,
    patch: Option<&Vec<Spanned<RawPatch>>>,
    err: Locate,
) -> Result<Change> {
    let mut patches = Vec::new();
    for p in patch.into_iter().flatten() {
        let (at, p) = (p.span(), p.get_ref());
        if p.find.get_ref().is_empty() {
            return Err(err(p.find.span(), "a patch's `find` is empty".into()));
        }
        if p.count == Some(0) {
            return Err(err(
                at,
                "`count = 0`: a patch replaces at least once".into(),
            ));
        }
        patches.push(PatchDecl {
            file: Placed::of(&p.file),
            find: Placed::of(&p.find),
            replace: Placed::of(&p.replace),
            count: p.count.unwrap_or(1),
        });
    }
    Ok(Change {
        args: args
            .into_iter()
            .flat_map(|a| a.get_ref())
            .map(Placed::of)
            .collect(),
        env: env_of(&env.cloned(), err)?,
        patches,
    })
}

fn words<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The `{name}`s of `text` (`{{` and `}}` are braces).
pub fn placeholders(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        let (c, after) = (rest.as_bytes()[i], &rest[i + 1..]);
        if after.starts_with(c as char) {
            rest = &after[1..];
            continue;
        }
        if c == b'}' {
            return Err(format!(
                "`{text}` has a `}}` with no `{{`; write }}}} for a brace"
            ));
        }
        let end = after
            .find('}')
            .ok_or_else(|| format!("`{text}` has a `{{` with no `}}`; write {{{{ for a brace"))?;
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    Ok(out)
}

/// `text` with each `{name}` that `value` knows replaced; the others (a
/// run's own placeholders) and doubled braces left for the run.
pub fn fill(text: &str, value: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let (c, after) = (rest.as_bytes()[i] as char, &rest[i + 1..]);
        if after.starts_with(c) {
            out.push(c);
            out.push(c);
            rest = &after[1..];
            continue;
        }
        match after.find('}').filter(|_| c == '{') {
            Some(end) => {
                let name = &after[..end];
                match value(name) {
                    Some(v) => out.push_str(&v.replace('{', "{{").replace('}', "}}")),
                    None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push(c);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A pattern `parse` can use: it compiles, and captures something the
/// protocol knows.
fn check_regex(re: &str) -> Result<(), String> {
    const NAMES: [&str; 8] = [
        "step",
        "loss",
        "lr",
        "epoch",
        "acc",
        "seconds",
        "final_acc",
        "final_seconds",
    ];
    let r = regex::Regex::new(re).map_err(|e| {
        format!(
            "parse regex does not compile: {}",
            e.to_string().replace('\n', " ")
        )
    })?;
    let names: Vec<&str> = r.capture_names().flatten().collect();
    if let Some(bad) = names.iter().find(|n| !NAMES.contains(n)) {
        return Err(format!(
            "parse regex captures `{bad}`: name captures {}",
            NAMES.join(", ")
        ));
    }
    if names.is_empty() {
        return Err(format!(
            "parse regex has no named capture: use (?P<acc>...) and the like ({})",
            NAMES.join(", ")
        ));
    }
    Ok(())
}

/// sha256 of each file a patch touches or the command names, and the
/// folder's git state, where it is a work tree.
fn provenance(dir: &Path, argv: &[String], patched: Vec<String>) -> Provenance {
    use sha2::Digest;
    let mut files = BTreeMap::new();
    let named = argv
        .iter()
        .filter(|a| !a.contains('{') && dir.join(a).is_file());
    for f in patched.iter().chain(named) {
        if let Ok(bytes) = std::fs::read(dir.join(f)) {
            files.insert(f.clone(), hex::encode(sha2::Sha256::digest(&bytes)));
        }
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| o.stdout)
    };
    let git_commit = git(&["rev-parse", "HEAD"])
        .map(|o| String::from_utf8_lossy(&o).trim().to_string())
        .filter(|c| !c.is_empty());
    let git_diff = git_commit
        .as_ref()
        .and_then(|_| git(&["diff", "HEAD", "--", "."]))
        .filter(|d| !d.is_empty())
        .map(|d| hex::encode(sha2::Sha256::digest(&d)));
    let (interpreter, torch) = super::program::versions(&argv[0], dir);
    Provenance {
        files,
        git_commit,
        git_diff,
        interpreter,
        torch,
        source: None,
    }
}

/// The command of a record as a line to read (`matrix show`, the log):
/// each word quoted where a shell would need it.
pub fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:{},+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What placed an error, for tests: the span's text.
#[cfg(test)]
pub fn spanless(_: Range<usize>, m: String) -> anyhow::Error {
    anyhow::anyhow!("{m}")
}
