//! The catalog against the recipes: every trick acts somewhere, and an
//! effect reads its parameters typed, with errors that name the fix.

use super::{recipe_names, resolve};
use crate::config::{RunConfig, Value};
use crate::tricks::{CATALOG, TrickSpec, build_plan, find, unchecked_plan};

/// A recipe's configuration with `key` forced on or off, its requirements on
/// and its conflicts off in both states, so that only the trick differs.
fn with_trick(recipe: &str, t: &TrickSpec, on: bool) -> RunConfig {
    let mut cfg = resolve(recipe, &[]).unwrap();
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
    let recipes = recipe_names();
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
    let mut cfg = resolve("page-resnet9", &[]).unwrap();
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
