//! Data flows one way: each module of `src/` names (`crate::x`) only modules
//! below it in this order, tests included. A new module gets a place here.
//!
//! A room is a folder named for what it holds; most sit on one floor. One
//! room spans two: `dist` (distributed training) keeps its launch contract
//! and process group low, where the model's SyncBN and the train step reduce
//! through them, and its rank entry and launcher above `train`, which they
//! drive. Such a part is placed by its path (`dist::env`), and a file belongs
//! to the longest entry its module path starts with.

const LAYERS: &[&str] = &[
    "util",
    "stats",
    "native",
    "config",
    "dist::env",
    "dist::group",
    "optim",
    "data",
    "model",
    "plan",
    "tricks",
    "recipe",
    "record",
    "events",
    "train",
    "script",
    "dist",
    "matrix",
    "testkit",
    "store",
    "session",
    "report",
    "charts",
    "export",
    "headless",
    "tui",
    "cli",
];

fn sources(path: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            sources(&e.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// `src/dist/env.rs` → `dist::env`; `src/dist/mod.rs` → `dist`.
fn module_path(src: &std::path::Path, file: &std::path::Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The floor of a module path: the longest LAYERS entry it starts with.
fn floor(path: &[String]) -> Option<usize> {
    LAYERS
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let l: Vec<&str> = l.split("::").collect();
            l.len() <= path.len() && l.iter().zip(path).all(|(a, b)| a == b)
        })
        .max_by_key(|(_, l)| l.len())
        .map(|(i, _)| i)
}

#[test]
fn every_module_uses_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut bad = Vec::new();
    for f in files {
        let here = module_path(&src, &f);
        if here.len() == 1 && (here[0] == "lib" || here[0] == "main") {
            continue;
        }
        let rank = floor(&here).unwrap_or_else(|| panic!("src/{} has no place in LAYERS", here[0]));
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("crate::{"),
            "{}: name modules one by one",
            f.display()
        );
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + 7..];
            let mut dep = Vec::new();
            let mut at = 0;
            loop {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                at += name.len();
                dep.push(name);
                if !rest[at..].starts_with("::") {
                    break;
                }
                at += 2;
            }
            let Some(d) = floor(&dep) else {
                continue;
            };
            // `crate::dist::{env, gang}` would hide a part's floor.
            let split = LAYERS
                .iter()
                .any(|l| l.len() > LAYERS[d].len() && l.starts_with(&format!("{}::", LAYERS[d])));
            if split && dep.len() == 1 {
                bad.push(format!(
                    "{} names crate::{} whole: name its parts ({}::…) one by one",
                    f.display(),
                    LAYERS[d],
                    LAYERS[d]
                ));
            }
            if d > rank {
                bad.push(format!("{} uses crate::{}", f.display(), dep.join("::")));
            }
        }
    }
    assert!(bad.is_empty(), "imports going up:\n{}", bad.join("\n"));
}
