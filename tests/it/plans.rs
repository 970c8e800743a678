//! Every shipped matrix's plans, pinned: a change to any trick's effect, a
//! recipe or a matrix shows up here as a diff to review, variant by variant.
//! After an intended change: `TRICKLAB_UPDATE_SNAPSHOTS=1 cargo test --test plans`.

use std::fmt::Write;
use std::path::Path;

fn render() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = String::new();
    for file in tricklab::matrix::matrix_files(&root.join("ablations")) {
        let m = tricklab::matrix::load(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy();
        for v in &m.variants {
            let (_, plan) = tricklab::recipe::resolve_plan(&m.recipe, &v.overrides).unwrap();
            writeln!(out, "{name} | {} | {plan:?}", v.name).unwrap();
        }
    }
    out
}

#[test]
fn shipped_matrices_keep_their_plans() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/plans.txt");
    let now = render();
    if std::env::var_os("TRICKLAB_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_default();
    for (a, b) in pinned.lines().zip(now.lines()) {
        assert_eq!(a, b, "a shipped variant's plan changed");
    }
    assert_eq!(
        pinned.lines().count(),
        now.lines().count(),
        "variants added or removed"
    );
}
