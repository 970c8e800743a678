//! A matrix described: its files, each variant as decided, the whole as
//! JSON (`matrix show --format json`, and the manifest's `matrix`) and its
//! `until_decided` rule in words.

use anyhow::Result;
use std::path::PathBuf;

/// Matrix files in a folder, sorted.
pub fn matrix_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether the matrix file runs a published script from a pinned copy
/// (`[script.source]`), which only the user can fetch.
pub fn pins_a_published_copy(file: &std::path::Path) -> bool {
    std::fs::read_to_string(file).is_ok_and(|t| {
        toml::from_str::<toml::Table>(&t).is_ok_and(|t| {
            t.get("script")
                .and_then(toml::Value::as_table)
                .is_some_and(|s| s.contains_key("source"))
        })
    })
}

/// Each variant as decided: its overrides, the tricks on, its clock and the
/// resolved plan's values (`matrix show --format json`, and a results
/// folder's `manifest.json`, which reports read instead of today's recipes).
pub fn resolved_variants(m: &super::Matrix) -> Result<Vec<serde_json::Value>> {
    (0..m.variants.len())
        .map(|i| {
            let v = m.variant_record(i);
            let mut out = serde_json::json!({
                "index": i,
                "name": v.name,
                "overrides": v.override_words(),
                "tricks": v.tricks,
                "clock": v.clock,
            });
            match v.script() {
                Some(s) => out["script"] = serde_json::to_value(s)?,
                None => out["resolved"] = serde_json::to_value(v.settings())?,
            }
            Ok(out)
        })
        .collect()
}

/// One matrix as `matrix show --format json` prints it: its header, every
/// variant with the values it resolves to, and its runs.
pub fn to_json(file: &std::path::Path, m: &super::Matrix) -> Result<serde_json::Value> {
    let variants = resolved_variants(m)?;
    Ok(serde_json::json!({
        "file": file,
        "name": m.name,
        "kind": m.kind.as_str(),
        "recipe": m.recipe,
        "data": m.data,
        "target": m.target,
        "description": m.description,
        "seeds": m.seeds,
        "adaptive": m.adaptive.map(|a| serde_json::json!({"ci_width": a.ci_width, "max": a.max})),
        "until_decided": m.until_decided.map(|u| serde_json::json!({
            "time": u.time, "acc": u.acc, "width_time": u.width_time, "width_acc": u.width_acc,
            "min": u.min, "max": u.max, "alpha": u.alpha, "looks": u.looks(),
        })),
        "budget_s": m.budget.map(|b| b.as_secs_f64()),
        "variants": variants,
        "runs": m.runs().len(),
        "design": m.design.as_ref().map(|d| serde_json::json!({
            "factors": d.factors,
            "configs": d.configs,
            "description": d.describe(),
        })),
        "warnings": m.warnings,
    }))
}

/// `until_decided` in words, as `matrix show` prints it.
pub fn until_words(u: &super::UntilDecided) -> String {
    let mut margins = Vec::new();
    if let Some(t) = u.time {
        margins.push(format!("time ±{:.1}% of the reference's mean", 100.0 * t));
    }
    if let Some(a) = u.acc {
        margins.push(format!("accuracy ±{:.2} points", 100.0 * a));
    }
    let mut widths = Vec::new();
    // Up to three decimals, without trailing zeros: 2%, 0.01%, 0.5 points.
    let short = |x: f64| {
        let t = format!("{x:.3}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if let Some(t) = u.width_time {
        widths.push(format!("{}% of the mean time", short(100.0 * t)));
    }
    if let Some(a) = u.width_acc {
        widths.push(format!("{} points of accuracy", short(100.0 * a)));
    }
    let mut goals = Vec::new();
    if !margins.is_empty() {
        goals.push(format!(
            "every asked Δ is decided (its interval excludes 0, or lies within {})",
            margins.join(" / ")
        ));
    }
    if !widths.is_empty() {
        goals.push(format!(
            "every asked Δ's 95% CI (a full factorial's Shapley values' too) is at most {} wide, end to end (a precision stop: no α spent)",
            widths.join(" / ")
        ));
    }
    let looks = if margins.is_empty() {
        format!("looks after rounds {} to {}", u.min, u.max)
    } else {
        format!(
            "α = {} split over {} looks (rounds {} to {}, Bonferroni over looks)",
            u.alpha,
            u.looks(),
            u.min,
            u.max
        )
    };
    format!(
        "a round of seeds at a time until {}, at most {} rounds; {looks}",
        goals.join(" and "),
        u.max,
    )
}
