//! The README and the docs book as a newcomer meets them: every relative
//! link leads somewhere, and every command in the README's table is one the
//! binary has.

use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, recursively.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The targets of the `](target)` links and `<img src="target">` tags on one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(j) = rest.find(')') else { break };
        out.push(&rest[..j]);
        rest = &rest[j + 1..];
    }
    let mut rest = line;
    while let Some(i) = rest.find("<img") {
        rest = &rest[i + 4..];
        let Some(k) = rest.find("src=\"") else { break };
        rest = &rest[k + 5..];
        let Some(j) = rest.find('"') else { break };
        out.push(&rest[..j]);
        rest = &rest[j + 1..];
    }
    out
}

/// The file a link points at, relative to its page: None for web and mail
/// links and for anchors within the page; a `#anchor` suffix and a
/// `"title"` are dropped.
fn local_path(link: &str) -> Option<&str> {
    let link = link.trim();
    let target = match link.strip_prefix('<').and_then(|l| l.split_once('>')) {
        Some((inside, _)) => inside,
        None => link.split_whitespace().next()?,
    };
    let remote = ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| target.starts_with(scheme));
    if remote || target.starts_with('#') {
        return None;
    }
    let path = target.split('#').next().unwrap_or(target);
    (!path.is_empty()).then_some(path)
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let files = markdown_files();
    assert!(
        files.len() > 1,
        "no Markdown pages under docs/ beside README.md"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let dir = file.parent().expect("a page has a folder");
        let shown = file.strip_prefix(repo()).unwrap_or(file.as_path());
        let mut fenced = false;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            for link in link_targets(line) {
                let Some(path) = local_path(link) else {
                    continue;
                };
                checked += 1;
                if !dir.join(path).exists() {
                    broken.push(format!("{}: {link}", shown.display()));
                }
            }
        }
    }
    assert!(checked > 0, "no relative links found: is the scan broken?");
    assert!(
        broken.is_empty(),
        "{} relative links do not resolve (relative to the page's folder):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn every_command_in_the_readme_table_is_a_real_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("reading README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: it is the five-minute read, at most 300 (move the rest into docs/)"
    );
    let commands: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `tricklab "))
        .map(|rest| rest.split([' ', '`']).next().unwrap_or_default())
        .collect();
    assert!(
        commands.len() >= 8,
        "README.md's command table has {} rows starting \"| `tricklab \": {commands:?}",
        commands.len()
    );
    let out = super::common::bin()
        .arg("--help")
        .output()
        .expect("running tricklab --help");
    assert!(
        out.status.success(),
        "tricklab --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = String::from_utf8_lossy(&out.stdout);
    // clap lists each subcommand on its own line, indented by two spaces.
    let listed = |word: &str| {
        help.lines()
            .any(|l| l.starts_with("  ") && l.split_whitespace().next() == Some(word))
    };
    let missing: Vec<&str> = commands
        .iter()
        .copied()
        .filter(|word| word.is_empty() || !listed(word))
        .collect();
    assert!(
        missing.is_empty(),
        "in README.md's command table but not a subcommand in `tricklab --help`: {missing:?}\n\n{help}"
    );
}
