//! The catalog's own consistency, and every trick proven to act.

use super::*;
use crate::config::RunConfig;

#[test]
fn catalog_is_consistent() {
    let mut keys: Vec<&str> = CATALOG.iter().map(|t| t.key).collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(n, keys.len(), "duplicate trick keys");
    for t in CATALOG {
        for r in t.requires.iter().chain(t.conflicts) {
            assert!(find(r).is_some(), "{} names unknown trick {r}", t.key);
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

/// A recipe's configuration with `key` forced on or off, its requirements on
/// and its conflicts off in both states, so that only the trick differs.
fn with_trick(recipe: &str, t: &TrickSpec, on: bool) -> RunConfig {
    let mut cfg = crate::recipe::resolve(recipe, &[]).unwrap();
    for c in t.conflicts {
        cfg.tricks.get_mut(*c).unwrap().on = false;
    }
    for r in t.requires {
        cfg.tricks.get_mut(*r).unwrap().on = true;
    }
    cfg.tricks.get_mut(t.key).unwrap().on = on;
    cfg
}

#[test]
fn every_trick_changes_the_plan() {
    let recipes = crate::recipe::recipe_names();
    for t in CATALOG {
        let mut acted_in = Vec::new();
        for recipe in &recipes {
            let (off, on) = (with_trick(recipe, t, false), with_trick(recipe, t, true));
            // A combination the trick refuses (say Page's whitening with negation) is
            // not a place where it acts; every trick must act somewhere.
            let (Ok(off), Ok(on)) = (unchecked_plan(&off), unchecked_plan(&on)) else {
                continue;
            };
            assert_ne!(
                off, on,
                "`{}` on leaves the plan of {recipe} unchanged",
                t.key
            );
            acted_in.push(*recipe);
        }
        assert!(!acted_in.is_empty(), "`{}` acts in no recipe", t.key);
    }
}

#[test]
fn an_effect_reads_typed_parameters_with_clear_errors() {
    let mut cfg = crate::recipe::resolve("page-resnet9", &[]).unwrap();
    let t = find("label_smoothing").unwrap();
    let state = cfg.tricks.get_mut(t.key).unwrap();
    state.on = true;
    state.params.remove("alpha");
    let e = format!("{:#}", build_plan(&cfg).unwrap_err());
    assert!(
        e.contains("`alpha`") && e.contains("label_smoothing.alpha"),
        "{e}"
    );
    let state = cfg.tricks.get_mut(t.key).unwrap();
    state
        .params
        .insert("alpha".into(), Value::Text("lots".into()));
    let e = format!("{:#}", build_plan(&cfg).unwrap_err());
    assert!(e.contains("must be a finite number"), "{e}");
}
