//! The catalog's own consistency, and every trick proven to act.

use super::*;

#[test]
fn catalog_is_consistent() {
    let mut keys: Vec<&str> = CATALOG.iter().map(|t| t.key).collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(n, keys.len(), "duplicate trick keys");
    for (i, t) in CATALOG.iter().enumerate() {
        assert_eq!(t.id as usize, i);
        assert_eq!(t.id.spec().key, t.key);
    }
    for t in CATALOG {
        for r in t.requires.iter().chain(t.conflicts) {
            assert_ne!(*r, t.id, "{} requires or conflicts with itself", t.key);
        }
        for p in t.params {
            if let (Some((lo, hi)), ParamValue::Float(v)) = (p.range, p.default) {
                assert!(
                    lo <= v && v <= hi,
                    "{}.{} default out of range",
                    t.key,
                    p.name
                );
            }
        }
    }
    // Every row of TRICKS.md section 4 is a switch or a recipe setting,
    // and every part-8 rung has an entry.
    for id in (1..=32).map(|i| format!("T{i}")) {
        match (find(&id), setting_row(&id)) {
            (Some(_), None) => {}
            (None, Some((_, key, help))) => {
                assert!(!help.is_empty(), "{key} is not a recipe setting");
                assert!(unknown_trick_message(&id).contains(&format!("--set {key}=")));
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    for id in [
        "B1", "B2a", "B2b", "B3", "B4", "B5", "B6", "B7", "B8", "B9a",
    ] {
        assert!(find(id).is_some(), "no entry for {id}");
    }
    assert_eq!(find("t24").unwrap().key, "label_smoothing");
}

#[test]
fn nearest_finds_typos_only() {
    assert_eq!(
        nearest("lable_smoothing", ["label_smoothing", "celu"]),
        Some("label_smoothing")
    );
    assert_eq!(nearest("zzzzzzzz", ["label_smoothing", "celu"]), None);
}

/// docs/TRICKS.md is the catalog's own Markdown: a trick added or changed
/// without regenerating it fails here, with the command that fixes it.
#[test]
fn the_shipped_trick_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/TRICKS.md");
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == super::catalog_markdown(),
        "{} differs from the catalog: run `make docs` (tricklab tricks --markdown > docs/TRICKS.md)",
        path.display()
    );
    for t in super::CATALOG {
        assert!(shipped.contains(&format!("### `{}`", t.key)), "{}", t.key);
    }
}

/// `tricks T13` names two tricks (issue 33): both are shown, each in full,
/// and a key still shows only its own trick.
#[test]
fn an_id_shared_by_two_tricks_finds_both() {
    let keys: Vec<&str> = find_all("T13").iter().map(|t| t.key).collect();
    assert_eq!(keys, ["celu", "gelu"]);
    assert_eq!(find_all("t13").len(), 2);
    let keys: Vec<&str> = find_all("gelu").iter().map(|t| t.key).collect();
    assert_eq!(keys, ["gelu"]);
    assert!(find_all("T999").is_empty());
    let celu = describe(find("celu").unwrap());
    assert!(celu.contains("celu.alpha = 0.075  "), "{celu}");
    assert!(!celu.contains("Float("), "{celu}");
}
