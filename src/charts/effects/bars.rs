//! The effects bars (`effects_time`, `effects_accuracy`): one response's
//! main effects and largest interactions as bars from 0 with their 95% CI
//! whiskers.

use super::shared::*;
// The ladder's whisker note, not parts' (the time whiskers' arrowheads).
use super::shared::CUT_NOTE;
use crate::charts::parts::*;
use crate::charts::theme::*;
use crate::report::Report;
use crate::report::effects::{Analysis, Effects, Estimate};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Interactions an effects chart shows after the main effects, the largest
/// first: a design of 7 factors has 21 pairs, too many bars to read.
const MAX_INTERACTIONS: usize = 8;

/// The terms an effects chart shows: every main effect in the design's
/// order, then the largest interactions by size; and how many interactions
/// were left out.
pub(super) fn shown_terms(a: &Analysis) -> (Vec<&Estimate>, usize) {
    let finite = |x: &&Estimate| x.estimate.is_finite();
    let mains = a
        .effects
        .iter()
        .filter(finite)
        .filter(|x| !is_interaction(x));
    let mut pairs: Vec<&Estimate> = a
        .effects
        .iter()
        .filter(finite)
        .filter(|x| is_interaction(x))
        .collect();
    pairs.sort_by(|x, y| y.estimate.abs().total_cmp(&x.estimate.abs()));
    let left_out = pairs.len().saturating_sub(MAX_INTERACTIONS);
    pairs.truncate(MAX_INTERACTIONS);
    (mains.chain(pairs).collect(), left_out)
}

/// The lines under an effects chart's title.
fn effect_notes(
    r: &Report,
    e: &Effects,
    a: &Analysis,
    rows: &[&Estimate],
    left_out: usize,
) -> Vec<String> {
    let mut notes = vec![
        setup_line(r),
        format!("{} ({} runs): {}", e.matrix, e.runs, method_of(a, false)),
        "bar: the estimate (mean at high − mean at low); whisker: its 95% CI; *: the CI excludes 0"
            .to_string(),
    ];
    if left_out > 0 {
        let all = rows.iter().filter(|x| is_interaction(x)).count() + left_out;
        notes.push(format!(
            "the {MAX_INTERACTIONS} largest of {all} interactions shown; the Markdown lists every one"
        ));
    }
    if rows.iter().any(|x| !(x.lo.is_finite() && x.hi.is_finite())) {
        notes.push("no whisker: the design gives that term no error estimate".into());
    }
    let (scale, clip) = (
        Units::of(e, a, "").scale,
        bars_extent(rows, Units::of(e, a, "").scale),
    );
    if rows
        .iter()
        .filter_map(|x| ladder_of(x))
        .any(|l| cut_at(l, 0.0, scale, clip))
    {
        notes.push(CUT_NOTE.into());
    }
    notes
}

/// One response's main effects and largest interactions as bars from 0
/// with their 95% CI whiskers; an aliased term is hatched and names the
/// terms its estimate also holds.
pub(super) fn effect_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    e: &Effects,
    a: &Analysis,
    u: &Units,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let (rows, left_out) = shown_terms(a);
    let n = rows.len().max(1);
    let mut root = root.titled(&format!("Effects: {}", u.what), t.font(24))?;
    for note in effect_notes(r, e, a, &rows, left_out) {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let mut legend = vec![("main effect".to_string(), Mark::Filled(color(0)))];
    if rows.iter().any(|x| is_interaction(x)) {
        legend.push(("two-way interaction".into(), Mark::Filled(color(1))));
    }
    if rows.iter().any(|x| !x.aliases.is_empty()) {
        legend.push((
            "aliased: the estimate is the sum of the terms in brackets".into(),
            Mark::Hatched(t.fg),
        ));
    }
    legend.extend(ladder_legend(&rows, t));
    let credited = rows.iter().any(|x| ladder_of(x).is_some());
    let root = with_legend(&root, &legend, t)?;
    let whole: Vec<String> = rows.iter().map(|x| term_label(x)).collect();
    let name_w = name_area(&root, &whole, t);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let names = names_fitting(&root, &whole, name_w, t);
    let s = u.scale;
    let clip = bars_extent(&rows, s);
    let ends = [clip.0, clip.1].into_iter();
    // Values of negative estimates are written left of their bars, the rest
    // right; a ladder's text beside its diamond likewise.
    let side = |neg: bool| -> Vec<String> {
        rows.iter()
            .filter(|x| (x.estimate < 0.0) == neg)
            .map(|x| effect_text(x, u))
            .chain(
                rows.iter()
                    .filter_map(|x| ladder_of(x))
                    .filter(|l| (l.estimate < 0.0) == neg)
                    .map(|l| ladder_text(l, u)),
            )
            .collect()
    };
    let room = |neg: bool| match widest(&root, &side(neg), t) {
        0 => 0,
        w => w + GAP + 4,
    };
    let plot_w = root.dim_in_pixel().0.saturating_sub(name_w + 28).max(1);
    let (x0, x1) = room_for_labels(ends, (room(true), room(false)), plot_w);
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(name_w)
        .build_cartesian_2d(x0..x1, -0.6..(n as f64 - 0.4))?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc(format!("effect, high − low ({})", u.unit))
        .draw()?;
    let mains = rows.iter().filter(|x| !is_interaction(x)).count();
    if mains > 0 && mains < rows.len() {
        // Between the main effects and the interactions.
        let y = (n - mains) as f64 - 0.5;
        c.draw_series(std::iter::once(PathElement::new(
            vec![(x0, y), (x1, y)],
            t.fg.mix(0.35).stroke_width(1),
        )))?;
    }
    c.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, -0.6), (0.0, n as f64 - 0.4)],
        t.fg.stroke_width(2),
    )))?;
    let px = (x1 - x0) / f64::from(plot_w);
    for (i, x) in rows.iter().enumerate() {
        let at = (n - 1 - i) as f64;
        effect_row(&mut c, x, at, u, (px, clip), credited, t)?;
    }
    Ok(())
}

/// What an effects chart shows: every estimate and its interval, 0, and
/// each ladder's Δ (see [`extent`]).
pub(super) fn bars_extent(rows: &[&Estimate], s: f64) -> (f64, f64) {
    extent(
        rows.iter()
            .flat_map(|x| [x.estimate * s, x.lo * s, x.hi * s])
            .chain(
                rows.iter()
                    .filter_map(|x| ladder_of(x))
                    .map(|l| l.estimate * s),
            )
            .chain([0.0]),
    )
}

/// One term's bar, whisker and value; `px`: a pixel in x units. Where the
/// chart shows a ladder's credit (`credited`), the bar takes the upper part
/// of its row and the ladder's diamond the lower.
fn effect_row<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    x: &Estimate,
    row: f64,
    u: &Units,
    (px, clip): (f64, (f64, f64)),
    credited: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let (y, bar) = if credited {
        (row + BAR_UP, BAR_SHARED)
    } else {
        (row, BAR)
    };
    if let Some(l) = ladder_of(x) {
        let at = (0.0, row - LADDER_DOWN);
        ladder_mark(c, l, at, clip, u, f64::from(GAP) * px, false, t)?;
    }
    let s = u.scale;
    let v = x.estimate * s;
    let col = if is_interaction(x) {
        color(1)
    } else {
        color(0)
    };
    let (b0, b1) = (v.min(0.0), v.max(0.0));
    if x.aliases.is_empty() {
        c.draw_series(std::iter::once(Rectangle::new(
            [(b0, y - bar), (b1, y + bar)],
            col.mix(0.75).filled(),
        )))?;
    } else {
        hatched_bar(c, (b0, b1), (y - bar, y + bar), col, 10.0 * px)?;
    }
    let whiskered = x.lo.is_finite() && x.hi.is_finite();
    if whiskered {
        whisker(c, x.lo * s, x.hi * s, y, t)?;
    }
    let text = effect_text(x, u);
    let pad = f64::from(GAP) * px;
    if v >= 0.0 {
        let end = if whiskered { (x.hi * s).max(v) } else { v };
        beside(c, text, (end + pad, y), false, t)
    } else {
        let end = if whiskered { (x.lo * s).min(v) } else { v };
        beside(c, text, (end - pad, y), true, t)
    }
}
