//! Every shipped matrix's plans, pinned: a change to any trick's effect, a
//! recipe or a matrix shows up here as a diff to review, variant by variant.
//! After an intended change: `cargo insta review` (or `INSTA_UPDATE=always
//! cargo test --test it plans`).

use std::fmt::Write;
use std::path::Path;

fn render() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = String::new();
    for file in tricklab::matrix::matrix_files(&root.join("ablations")) {
        // A published record's matrix reads the user's fetched copy, which
        // CI has not: tests/it/records.rs checks those.
        if tricklab::matrix::pins_a_published_copy(&file) {
            continue;
        }
        let m = tricklab::matrix::load(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy();
        for (i, v) in m.variants.iter().enumerate() {
            // A script variant's command, environment and patches (its
            // folder, which differs by checkout, left out).
            if let Some(s) = m.variant_record(i).script() {
                let patches: Vec<(&str, &str, &str)> = s
                    .patches
                    .iter()
                    .map(|p| (p.file.as_str(), p.find.as_str(), p.replace.as_str()))
                    .collect();
                writeln!(
                    out,
                    "{name} | {} | {:?} {:?} {patches:?} world_size {}",
                    v.name, s.argv, s.env, s.world_size
                )
                .unwrap();
                continue;
            }
            let (_, plan) = tricklab::recipe::resolve_plan(&m.recipe, &v.overrides).unwrap();
            writeln!(out, "{name} | {} | {plan:?}", v.name).unwrap();
        }
    }
    out
}

#[test]
fn shipped_matrices_keep_their_plans() {
    insta::with_settings!({
        snapshot_path => "../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("plans", render());
    });
}
