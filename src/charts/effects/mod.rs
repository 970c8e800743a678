//! The effects of a designed matrix drawn (issue 37): each response's main
//! effects and largest interactions as bars with their 95% CIs, the
//! interaction plot of the largest pairs, and the Shapley waterfall from
//! every factor low to every factor high. Drawn from `report::effects`
//! alone, and only for a report that has effects.
//!
//! One file a chart (`bars`, `interactions`, `waterfall`); what they share,
//! the units, the labels and whiskers and a ladder's credit, in `shared`.

mod bars;
mod interactions;
mod shared;
mod waterfall;

#[cfg(test)]
mod tests;

use super::theme::Theme;
use super::{PlotOptions, both};
use crate::report::Report;
use crate::report::effects::Effects;
use anyhow::Result;
use bars::{effect_bars, shown_terms};
use interactions::{interactions, top_pairs};
use plotters::coord::Shift;
use plotters::prelude::*;
use shared::Units;
use std::path::{Path, PathBuf};
use waterfall::{shapley, waterfall_of, waterfall_rows};

/// Each designed matrix's file-name suffix: none for the one a report
/// usually has, else its safe name (numbered where two folders share one).
fn suffixes(all: &[Effects]) -> Vec<String> {
    if all.len() == 1 {
        return vec![String::new()];
    }
    let mut seen: Vec<String> = Vec::new();
    for e in all {
        let base = format!("_{}", crate::store::safe(&e.matrix));
        let mut s = base.clone();
        let mut k = 2;
        while seen.contains(&s) {
            s = format!("{base}_{k}");
            k += 1;
        }
        seen.push(s);
    }
    seen
}

/// Writes the effects charts of each designed matrix in `r` into `out`:
/// `effects_time`, `effects_accuracy`, `interactions` and `shapley`, each
/// only where it has something to draw (a Shapley design has no effects, a
/// fraction no Shapley values); nothing for a report without effects.
pub(super) fn write(
    r: &Report,
    out: &Path,
    opts: &PlotOptions,
    tta: &str,
    t: &Theme,
) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (e, sfx) in r.effects.iter().zip(suffixes(&r.effects)) {
        for a in &e.analyses {
            let (rows, _) = shown_terms(a);
            if rows.is_empty() || crate::util::signals::stopping() {
                continue;
            }
            let u = Units::of(e, a, tta);
            let h = (260 + 48 * rows.len() as u32).clamp(460, 1400);
            let draw = |d: &DrawingArea<BitMapBackend, Shift>| effect_bars(d, r, e, a, &u, t);
            let draw_svg = |d: &DrawingArea<SVGBackend, Shift>| effect_bars(d, r, e, a, &u, t);
            let name = format!("effects_{}{sfx}", a.response);
            files.extend(both(out, &name, (1200, h), opts, &draw, &draw_svg)?);
        }
        let pairs = e
            .analyses
            .iter()
            .filter(|a| !top_pairs(e, a).is_empty())
            .count() as u32;
        if pairs > 0 && !crate::util::signals::stopping() {
            let size = (1200, 200 + 420 * pairs);
            let draw = |d: &DrawingArea<BitMapBackend, Shift>| interactions(d, r, e, tta, t);
            let draw_svg = |d: &DrawingArea<SVGBackend, Shift>| interactions(d, r, e, tta, t);
            files.extend(both(
                out,
                &format!("interactions{sfx}"),
                size,
                opts,
                &draw,
                &draw_svg,
            )?);
        }
        let rows: usize = e
            .analyses
            .iter()
            .filter_map(|a| waterfall_of(e, a))
            .map(|w| waterfall_rows(&w))
            .sum();
        if rows > 0 && !crate::util::signals::stopping() {
            let size = (1200, (260 + 48 * rows as u32).clamp(460, 1600));
            let draw = |d: &DrawingArea<BitMapBackend, Shift>| shapley(d, r, e, tta, t);
            let draw_svg = |d: &DrawingArea<SVGBackend, Shift>| shapley(d, r, e, tta, t);
            files.extend(both(
                out,
                &format!("shapley{sfx}"),
                size,
                opts,
                &draw,
                &draw_svg,
            )?);
        }
    }
    Ok(files)
}
