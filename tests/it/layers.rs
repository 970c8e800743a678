//! Data flows one way: each module of `src/` names (`crate::x`) only modules
//! below it in this order, tests included. A new module gets a place here.

const LAYERS: &[&str] = &[
    "util", "config", "optim", "data", "model", "plan", "tricks", "recipe", "events", "train",
    "matrix", "queue", "gang", "worker", "store", "session", "report", "charts", "export",
    "writeup", "headless", "tui", "doctor", "cli",
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

#[test]
fn every_module_uses_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" || name == "main" {
            continue;
        }
        let rank = LAYERS
            .iter()
            .position(|l| *l == name)
            .unwrap_or_else(|| panic!("src/{name} has no place in LAYERS"));
        let mut files = Vec::new();
        sources(&path, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("crate::{"),
                "{}: name modules one by one",
                f.display()
            );
            for (i, _) in text.match_indices("crate::") {
                let dep: String = text[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let Some(d) = LAYERS.iter().position(|l| *l == dep) else {
                    continue;
                };
                if d > rank {
                    bad.push(format!("{} uses crate::{dep}", f.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports going up:\n{}", bad.join("\n"));
}
