//! The effects of a designed matrix drawn (issue 37): each response's main
//! effects and largest interactions as bars with their 95% CIs, the
//! interaction plot of the largest pairs, and the Shapley waterfall from
//! every factor low to every factor high. Drawn from `report::effects`
//! alone, and only for a report that has effects.

use super::parts::*;
use super::theme::*;
use super::{PlotOptions, both};
use crate::report::Report;
use crate::report::effects::{Analysis, Effects, Estimate, LadderCredit};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// Interactions an effects chart shows after the main effects, the largest
/// first: a design of 7 factors has 21 pairs, too many bars to read.
const MAX_INTERACTIONS: usize = 8;
/// Interaction plots per response, the largest pairs first.
const MAX_PAIRS: usize = 3;
/// The half-height of a bar on a category axis whose rows are 1 apart.
const BAR: f64 = 0.32;
/// Where a chart shows a ladder's credit, each row shares its height: the
/// bar in the upper part (its centre this far up, this half-height), the
/// ladder's diamond and whisker below it (this far down).
const BAR_UP: f64 = 0.13;
const BAR_SHARED: f64 = 0.2;
const LADDER_DOWN: f64 = 0.25;
/// A ladder's credit that its estimate's interval does not overlap:
/// Okabe–Ito's vermillion, apart from the bars' colours.
const ORDER_DEPENDENT: RGBColor = RGBColor(213, 94, 0);

/// A ladder's credit worth drawing: with a finite Δ.
fn ladder_of(x: &Estimate) -> Option<&LadderCredit> {
    x.ladder.as_ref().filter(|l| l.estimate.is_finite())
}

/// The legend entries of the ladder's diamonds, where `rows` has any.
fn ladder_legend(rows: &[&Estimate], t: &Theme) -> Vec<(String, Mark)> {
    let credits: Vec<&LadderCredit> = rows.iter().filter_map(|x| ladder_of(x)).collect();
    let mut ladders: Vec<&str> = credits.iter().map(|l| l.matrix.as_str()).collect();
    ladders.dedup();
    let mut out = Vec::new();
    if !credits.is_empty() {
        out.push((
            format!(
                "ladder ({}): the Δ of its rung that adds the factor alone, with its 95% CI",
                ladders.join(", ")
            ),
            Mark::Diamond(t.fg),
        ));
    }
    if credits.iter().any(|l| l.order_dependent) {
        out.push((
            "order-dependent: the ladder's CI and the estimate's do not overlap".to_string(),
            Mark::Diamond(ORDER_DEPENDENT),
        ));
    }
    out
}

/// A ladder's credit as written beside its diamond: `ladder +10.00
/// points`, and `order-dependent` where it is (the legend names the
/// ladder; the rung is the one that adds the row's factor).
fn ladder_text(l: &LadderCredit, u: &Units) -> String {
    format!(
        "ladder {}{}",
        u.signed(l.estimate),
        if l.order_dependent {
            ", order-dependent"
        } else {
            ""
        }
    )
}

/// The extent of the values in `xs`: what a chart must show, in its units.
/// A chart passes each ladder's Δ, not its interval: a ladder of two seeds
/// has one ten times as wide as the design's, which would squash every
/// bar; its whisker is cut at this extent instead.
fn extent(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    xs.filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// Whether a ladder's interval, from `from`, runs past `(lo, hi)`.
fn cut_at(l: &LadderCredit, from: f64, s: f64, (lo, hi): (f64, f64)) -> bool {
    l.lo.is_finite() && l.hi.is_finite() && (from + l.lo * s < lo || from + l.hi * s > hi)
}

/// The note under a chart whose ladder whiskers are cut at its extent.
const CUT_NOTE: &str =
    "a ladder's whisker without an end cap is cut at the chart's edge: its 95% CI runs on";

/// A ladder's Δ drawn at `from` + Δ on row position `y`: its 95% CI
/// whisker (where it has one) cut at `clip` (no cap where it is cut), a
/// diamond, and its text `gap` beyond the whisker's end on the side of its
/// sign (`right`: always on the right).
#[allow(
    clippy::too_many_arguments,
    reason = "one mark: where it starts, its row, its extent, units, gap, side, theme"
)]
fn ladder_mark<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    l: &LadderCredit,
    (from, y): (f64, f64),
    clip: (f64, f64),
    u: &Units,
    gap: f64,
    right: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let col = if l.order_dependent {
        ORDER_DEPENDENT
    } else {
        t.fg
    };
    let v = from + l.estimate * s;
    let (mut lo, mut hi) = (v, v);
    if l.lo.is_finite() && l.hi.is_finite() {
        let (a, b) = (from + l.lo * s, from + l.hi * s);
        let (ca, cb) = (a.max(clip.0), b.min(clip.1));
        let mut lines = vec![vec![(ca, y), (cb, y)]];
        if ca == a {
            lines.push(vec![(a, y - 0.1), (a, y + 0.1)]);
        }
        if cb == b {
            lines.push(vec![(b, y - 0.1), (b, y + 0.1)]);
        }
        let style = col.stroke_width(2);
        c.draw_series(lines.into_iter().map(|p| PathElement::new(p, style)))?;
        (lo, hi) = (ca.min(v), cb.max(v));
    }
    c.draw_series(std::iter::once(
        EmptyElement::at((v, y))
            + Polygon::new(vec![(0, -8), (8, 0), (0, 8), (-8, 0)], col.filled()),
    ))?;
    // Clear of the diamond (as wide as the gap) as well as of the whisker.
    let text = ladder_text(l, u);
    if right || l.estimate >= 0.0 {
        beside(c, text, (hi + 2.0 * gap, y), false, t)
    } else {
        beside(c, text, (lo - 2.0 * gap, y), true, t)
    }
}
/// What low and high mean, under the charts that name levels.
const LOW_HIGH: &str = "low, high: a trick off, on; a setting at its first, second value";

/// How a response is shown: accuracy in points, as the Markdown has it,
/// time in seconds on the recipe's clock.
struct Units {
    scale: f64,
    unit: &'static str,
    /// What was measured, for titles: "time on the airbench clock".
    what: String,
    /// The response's axis: "time on the airbench clock, s".
    axis: String,
}

impl Units {
    fn of(e: &Effects, a: &Analysis, tta: &str) -> Units {
        if a.response == "time" {
            let what = format!("time on the {}", e.clock.label());
            Units {
                scale: 1.0,
                unit: "s",
                axis: format!("{what}, s"),
                what,
            }
        } else {
            Units {
                scale: 100.0,
                unit: "points",
                what: format!("test accuracy{tta}"),
                axis: format!("test accuracy, points{tta}"),
            }
        }
    }

    /// A difference in the response's unit, signed: `+2.01 s`, `-0.42 points`.
    fn signed(&self, v: f64) -> String {
        let v = v * self.scale;
        let digits = if self.unit == "s" {
            seconds(v.abs())
        } else {
            format!("{:.2}", v.abs())
        };
        format!("{}{digits} {}", if v < 0.0 { "-" } else { "+" }, self.unit)
    }

    /// A level of the response in its unit: `12.3 s`, `61.20 points`.
    fn level(&self, v: f64) -> String {
        let v = v * self.scale;
        if self.unit == "s" {
            format!("{} s", seconds(v))
        } else {
            format!("{v:.2} points")
        }
    }
}

/// How an analysis made its effects, or with `shapley` its Shapley values.
fn method_of(a: &Analysis, shapley: bool) -> String {
    if shapley {
        a.shapley_method.clone()
    } else {
        a.method.clone()
    }
}

fn is_interaction(x: &Estimate) -> bool {
    x.term.contains('×')
}

/// A term as a chart names it: an aliased one with the terms its estimate
/// also holds, `tta (+ lookahead×ema)`.
fn term_label(x: &Estimate) -> String {
    if x.aliases.is_empty() {
        x.term.clone()
    } else {
        format!("{} (+ {})", x.term, x.aliases.join(" + "))
    }
}

/// " *" where the 95% CI excludes 0, as the Markdown marks it.
fn star(x: &Estimate) -> &'static str {
    if x.decided() { " *" } else { "" }
}

/// The terms an effects chart shows: every main effect in the design's
/// order, then the largest interactions by size; and how many interactions
/// were left out.
fn shown_terms(a: &Analysis) -> (Vec<&Estimate>, usize) {
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

/// The ends of an axis that shows every value, `pad` of their span added
/// each side: the interaction plots' response axis, which has no labels
/// beside its points to make room for.
fn padded_range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    let span = (hi - lo).max(1e-6 * hi.abs().max(1.0));
    (lo - span * pad, hi + span * pad)
}

/// Pixels between a bar or whisker and its value.
const GAP: u32 = 8;

/// The x-axis's ends that show every value with `left` and `right` pixels
/// beyond them for the value labels, on a plot `width` pixels wide: the
/// data get the pixels the labels leave, so that a label never runs into
/// the names or off the edge. Labels may take at most half the width (a
/// chart forced very narrow cuts them instead).
fn room_for_labels(
    values: impl Iterator<Item = f64>,
    (left, right): (u32, u32),
    width: u32,
) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    let span = (hi - lo).max(1e-6 * hi.abs().max(1.0));
    let labels = f64::from(left + right).min(f64::from(width) / 2.0);
    let share = labels / f64::from((left + right).max(1));
    // A 2% margin of the data's pixels each side, so no bar touches the frame.
    let per_unit = (f64::from(width) - labels) / (span * 1.04);
    let pad = |px: u32| f64::from(px) * share / per_unit + span * 0.02;
    (lo - pad(left), hi + pad(right))
}

/// The width of the widest of `texts` in the value labels' font.
fn widest<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, texts: &[String], t: &Theme) -> u32 {
    texts
        .iter()
        .filter_map(|s| area.estimate_text_size(s, &t.font(14)).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0)
}

/// A horizontal 95% CI whisker with its end caps.
fn whisker<DB: DrawingBackend>(c: &mut Chart2d<'_, DB>, lo: f64, hi: f64, y: f64, t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    let style = t.fg.stroke_width(2);
    c.draw_series(
        [
            vec![(lo, y), (hi, y)],
            vec![(lo, y - 0.15), (lo, y + 0.15)],
            vec![(hi, y - 0.15), (hi, y + 0.15)],
        ]
        .into_iter()
        .map(|p| PathElement::new(p, style)),
    )?;
    Ok(())
}

/// Text beside a bar, in chart coordinates, left-aligned (or right-aligned
/// with `right`), centred on the row.
fn beside<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    text: String,
    at: (f64, f64),
    right: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let h = if right { HPos::Right } else { HPos::Left };
    c.draw_series(std::iter::once(Text::new(
        text,
        at,
        t.font(14).pos(Pos::new(h, VPos::Center)),
    )))?;
    Ok(())
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
fn effect_bars<DB: DrawingBackend>(
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
fn bars_extent(rows: &[&Estimate], s: f64) -> (f64, f64) {
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

/// Where each waterfall step starts (the start, then the sum of the steps
/// before), and the extent the panel shows (see [`extent`]).
fn waterfall_at(w: &Waterfall, s: f64) -> (Vec<f64>, (f64, f64)) {
    let mut at = vec![w.start * s];
    for x in &w.steps {
        at.push(at[at.len() - 1] + x.estimate * s);
    }
    let reach = w.steps.iter().zip(&at).flat_map(|(x, a)| {
        [
            a + x.lo * s,
            a + x.hi * s,
            ladder_of(x).map_or(*a, |l| a + l.estimate * s),
        ]
    });
    let clip = extent(at.iter().copied().chain(reach).chain([w.end * s]));
    (at, clip)
}

/// Whether a waterfall cuts a ladder's whisker at its extent.
fn waterfall_cuts(w: &Waterfall, s: f64) -> bool {
    let (at, clip) = waterfall_at(w, s);
    w.steps
        .iter()
        .zip(&at)
        .any(|(x, a)| ladder_of(x).is_some_and(|l| cut_at(l, *a, s, clip)))
}

/// A term's value as written beside its bar.
fn effect_text(x: &Estimate, u: &Units) -> String {
    format!("{}{}", u.signed(x.estimate), star(x))
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

/// An interaction to plot: its estimate, its two factors' bits, and the
/// mean response at each of their four level pairs.
type Pair<'a> = (&'a Estimate, (usize, usize), [[f64; 2]; 2]);

/// The largest interactions of a response that can be plotted, by size.
fn top_pairs<'a>(e: &Effects, a: &'a Analysis) -> Vec<Pair<'a>> {
    let mut pairs: Vec<Pair<'a>> = a
        .effects
        .iter()
        .filter(|x| is_interaction(x) && x.estimate.is_finite())
        .filter_map(|x| {
            let (i, j) = e.pair(&x.term)?;
            Some((x, (i, j), a.two_way_means(i, j)?))
        })
        .collect();
    pairs.sort_by(|x, y| y.0.estimate.abs().total_cmp(&x.0.estimate.abs()));
    pairs.truncate(MAX_PAIRS);
    pairs
}

/// For each response with interactions, its largest pairs' interaction
/// plots in a row: the mean response at the first factor low and high,
/// one line with the second low and one with it high.
fn interactions<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    e: &Effects,
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<(&Analysis, Vec<Pair>)> = e
        .analyses
        .iter()
        .map(|a| (a, top_pairs(e, a)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let mut root = root.titled("Largest two-way interactions", t.font(24))?;
    for note in [
        setup_line(r),
        format!(
            "{} ({} runs): each point is the mean of the configurations' means at those two levels, over the other factors; parallel lines: no interaction",
            e.matrix, e.runs
        ),
        LOW_HIGH.to_string(),
    ] {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let cols = rows.iter().map(|(_, p)| p.len()).max().unwrap_or(1);
    let bands = root.split_evenly((rows.len().max(1), 1));
    for ((a, pairs), band) in rows.iter().zip(bands) {
        let u = Units::of(e, a, tta);
        // One y-axis across a response's panels, so that their slopes compare.
        let (y0, y1) = padded_range(
            pairs
                .iter()
                .flat_map(|p| p.2.iter().flatten().map(|m| m * u.scale)),
            0.12,
        );
        let panels = band.split_evenly((1, cols));
        for (p, panel) in pairs.iter().zip(panels) {
            pair_panel(&panel, e, p, &u, (y0, y1), t)?;
        }
    }
    Ok(())
}

/// One interaction plot: `A×B` with the first factor on the x-axis and a
/// line for each level of the second, each line's end named.
fn pair_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    e: &Effects,
    (x, (i, j), m): &Pair,
    u: &Units,
    (y0, y1): (f64, f64),
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let ci = if x.lo.is_finite() && x.hi.is_finite() {
        format!(" [{:+.2}, {:+.2}]", x.lo * u.scale, x.hi * u.scale)
    } else {
        String::new()
    };
    // The term and its estimate on lines of their own, so that panels
    // whose terms fit one line start their axes level.
    let area = titled_wrapped(area, &term_label(x), t.font(16))?;
    let area = titled_wrapped(
        &area,
        &format!("{}{ci}{}", u.signed(x.estimate), star(x)),
        t.font(16),
    )?;
    let (a, b) = (&e.factors[*i], &e.factors[*j]);
    let plot_w = area.dim_in_pixel().0.saturating_sub(64 + 24).max(1);
    let names = line_names(&area, b, plot_w * 9 / 20, t);
    // Room right of the lines for their names, and for the dots at the left.
    let (x0, x1) = room_for_labels(
        [0.0, 1.0].into_iter(),
        (24, widest(&area, &names, t) + GAP + 4),
        plot_w,
    );
    let mut c = ChartBuilder::on(&area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    t.axes(c.configure_mesh(), 16)
        .disable_x_mesh()
        .x_labels(3)
        .x_label_formatter(&|v: &f64| {
            if v.abs() < 0.01 {
                "low".into()
            } else if (v - 1.0).abs() < 0.01 {
                "high".into()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .max_light_lines(4)
        .x_desc(label(a, 28))
        .y_desc(&u.axis)
        .draw()?;
    let ends: Vec<f64> = (0..2).map(|lb| m[1][lb] * u.scale).collect();
    // The two names a text line apart at least, where the lines end close.
    let plot_h = area.dim_in_pixel().1.saturating_sub(44 + 24).max(1);
    let gap = (y1 - y0) * 18.0 / f64::from(plot_h);
    let mid = (ends[0] + ends[1]) / 2.0;
    let up = if ends[1] >= ends[0] { 1.0 } else { -1.0 };
    for (lb, name) in names.into_iter().enumerate() {
        let col = color(lb);
        let pts = [(0.0, m[0][lb] * u.scale), (1.0, m[1][lb] * u.scale)];
        c.draw_series(LineSeries::new(pts, col.stroke_width(3)))?;
        c.draw_series(pts.map(|p| Circle::new(p, 5, col.filled())))?;
        let side = if lb == 1 { up } else { -up };
        let y = if (ends[1] - ends[0]).abs() < gap {
            mid + side * gap / 2.0
        } else {
            ends[lb]
        };
        c.draw_series(std::iter::once(Text::new(
            name,
            (1.0 + f64::from(GAP) * (x1 - x0) / f64::from(plot_w), y),
            t.font(14)
                .color(&col)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )))?;
    }
    Ok(())
}

/// The names of an interaction plot's two lines, `B low` and `B high`, the
/// factor's name shortened with "…" until both fit `max` pixels.
fn line_names<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    b: &str,
    max: u32,
    t: &Theme,
) -> Vec<String> {
    let font = t.font(14);
    let fits = |s: &str| {
        area.estimate_text_size(s, &font)
            .map_or(true, |(w, _)| w <= max)
    };
    let mut keep = b.chars().count();
    while keep > 2 && !fits(&format!("{} high", label(b, keep))) {
        keep -= 1;
    }
    ["low", "high"]
        .iter()
        .map(|w| format!("{} {w}", label(b, keep)))
        .collect()
}

/// A response's Shapley waterfall, if it has Shapley values and both ends
/// ran: the start (every factor low), each factor's value and its CI by
/// size, and the end (every factor high).
struct Waterfall<'a> {
    start: f64,
    end: f64,
    steps: Vec<&'a Estimate>,
}

fn waterfall_of<'a>(e: &Effects, a: &'a Analysis) -> Option<Waterfall<'a>> {
    let all = (1u32 << e.factors.len()) - 1;
    let mut steps: Vec<&Estimate> = a
        .shapley
        .iter()
        .filter(|s| s.estimate.is_finite())
        .collect();
    if steps.is_empty() {
        return None;
    }
    steps.sort_by(|x, y| y.estimate.abs().total_cmp(&x.estimate.abs()));
    Some(Waterfall {
        start: a.cell(0)?.mean,
        end: a.cell(all)?.mean,
        steps,
    })
}

/// Rows a waterfall panel takes: its steps and its two ends.
fn waterfall_rows(w: &Waterfall) -> usize {
    w.steps.len() + 2
}

/// For each response with Shapley values, its waterfall from every factor
/// low to every factor high, one panel a response.
fn shapley<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    e: &Effects,
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let panels: Vec<(&Analysis, Waterfall)> = e
        .analyses
        .iter()
        .filter_map(|a| Some((a, waterfall_of(e, a)?)))
        .collect();
    let how = panels
        .first()
        .map(|(a, _)| method_of(a, true))
        .unwrap_or_default();
    let mut root = root.titled(
        "Shapley values: from every factor low to every factor high",
        t.font(24),
    )?;
    let cuts = panels
        .iter()
        .any(|(a, w)| waterfall_cuts(w, Units::of(e, a, tta).scale));
    let notes = [
        setup_line(r),
        format!("{} ({} runs): {how}", e.matrix, e.runs),
        "one step a factor, its Shapley value (its gain averaged over the orders of adding the factors), largest first; whisker: its 95% CI; *: the CI excludes 0".to_string(),
        LOW_HIGH.to_string(),
    ];
    for note in notes.into_iter().chain(cuts.then(|| CUT_NOTE.to_string())) {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let mut legend = vec![
        ("raises the response".to_string(), Mark::Filled(color(2))),
        ("lowers it".to_string(), Mark::Filled(color(3))),
        (
            "mean with every factor low, high".to_string(),
            Mark::Line(t.fg),
        ),
    ];
    let steps: Vec<&Estimate> = panels.iter().flat_map(|(_, w)| w.steps.clone()).collect();
    legend.extend(ladder_legend(&steps, t));
    let mut rest = with_legend(&root, &legend, t)?;
    let total: usize = panels.iter().map(|(_, w)| waterfall_rows(w) + 2).sum();
    let h = rest.dim_in_pixel().1 as usize;
    for (k, (a, w)) in panels.iter().enumerate() {
        let u = Units::of(e, a, tta);
        let area = if k + 1 == panels.len() {
            rest.clone()
        } else {
            let (top, bottom) =
                rest.split_vertically((h * (waterfall_rows(w) + 2) / total.max(1)) as u32);
            rest = bottom;
            top
        };
        waterfall_panel(&area, w, &u, t)?;
    }
    Ok(())
}

/// One waterfall: the start and the end as marks, each step a floating bar
/// from where the previous one ended, joined by thin connectors.
fn waterfall_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    w: &Waterfall,
    u: &Units,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let n = waterfall_rows(w);
    let mut names = vec!["every factor low".to_string()];
    names.extend(w.steps.iter().map(|x| x.term.clone()));
    names.push("every factor high".into());
    let name_w = name_area(area, &names, t);
    let whole: Vec<&str> = names.iter().map(String::as_str).collect();
    let names = names_fitting(area, &whole, name_w, t);
    let (at, clip) = waterfall_at(w, s);
    // Every value is written right of its bar, whisker or mark.
    let texts: Vec<String> = [u.level(w.start), u.level(w.end)]
        .into_iter()
        .chain(w.steps.iter().map(|x| effect_text(x, u)))
        .chain(
            w.steps
                .iter()
                .filter_map(|x| ladder_of(x))
                .map(|l| ladder_text(l, u)),
        )
        .collect();
    let credited = w.steps.iter().any(|x| ladder_of(x).is_some());
    let plot_w = area.dim_in_pixel().0.saturating_sub(name_w + 24).max(1);
    let (x0, x1) = room_for_labels(
        [clip.0, clip.1].into_iter(),
        (0, widest(area, &texts, t) + GAP + 4),
        plot_w,
    );
    let mut c = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(name_w)
        .caption(&u.what, t.font(18))
        .build_cartesian_2d(x0..x1, -0.6..(n as f64 - 0.4))?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc(format!("mean response ({})", u.unit))
        .draw()?;
    let y_of = |row: usize| (n - 1 - row) as f64;
    let gap = f64::from(GAP) * (x1 - x0) / f64::from(plot_w);
    for (row, v) in [(0, w.start), (n - 1, w.end)] {
        let y = y_of(row);
        c.draw_series(std::iter::once(PathElement::new(
            vec![(v * s, y - BAR), (v * s, y + BAR)],
            t.fg.stroke_width(4),
        )))?;
        beside(&mut c, u.level(v), (v * s + gap, y), false, t)?;
    }
    for (k, x) in w.steps.iter().enumerate() {
        waterfall_step(&mut c, x, (y_of(k + 1), at[k]), u, (gap, clip), credited, t)?;
    }
    // The last step's end to the end mark: they differ where a
    // configuration some order needs did not run.
    let (y, last) = (y_of(n - 1), at[at.len() - 1]);
    connector(&mut c, last, y, t)
}

/// The thin line from where the row above ended down to row `y`.
fn connector<DB: DrawingBackend>(c: &mut Chart2d<'_, DB>, x: f64, y: f64, t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    c.draw_series(std::iter::once(PathElement::new(
        vec![(x, y + 1.0 - BAR), (x, y + BAR)],
        t.fg.mix(0.45).stroke_width(1),
    )))?;
    Ok(())
}

/// One factor's step: a bar from `from` by its Shapley value, its CI
/// around the step's end, and its value `gap` right of both. Where the
/// chart shows a ladder's credit (`credited`), the bar takes the upper part
/// of the row and the ladder's Δ, from the same start, the lower.
fn waterfall_step<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    x: &Estimate,
    (row, from): (f64, f64),
    u: &Units,
    (gap, clip): (f64, (f64, f64)),
    credited: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let to = from + x.estimate * s;
    connector(c, from, row, t)?;
    let (y, bar) = if credited {
        (row + BAR_UP, BAR_SHARED)
    } else {
        (row, BAR)
    };
    if let Some(l) = ladder_of(x) {
        ladder_mark(c, l, (from, row - LADDER_DOWN), clip, u, gap, true, t)?;
    }
    let col = if to >= from { color(2) } else { color(3) };
    c.draw_series(std::iter::once(Rectangle::new(
        [(from.min(to), y - bar), (from.max(to), y + bar)],
        col.mix(0.75).filled(),
    )))?;
    let mut right = from.max(to);
    if x.lo.is_finite() && x.hi.is_finite() {
        whisker(c, from + x.lo * s, from + x.hi * s, y, t)?;
        right = right.max(from + x.hi * s);
    }
    beside(c, effect_text(x, u), (right + gap, y), false, t)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::effects::tests::planted;

    const HEAD: &str = "recipe = \"tiny-airbench94\"\nrepeats = 2\n";

    /// A 2^3 factorial of tta, lookahead and label smoothing: tta +3 points
    /// and +2 s, lookahead +2 points, label smoothing +1 s, and tta and
    /// lookahead together 3 points short of their sum.
    fn factorial(root: &Path) -> PathBuf {
        let text = format!(
            "name = \"fx\"\n{HEAD}kind = \"factorial\"\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n"
        );
        planted(root, &text, 2, &|c, rng| {
            let on = |i: u32| f64::from(c >> i & 1);
            let acc = 0.6 + 0.03 * on(0) + 0.02 * on(1) - 0.03 * on(0) * on(1)
                + 0.004 * (rng.unit_f64() - 0.5);
            (acc, 10.0 + 2.0 * on(0) + on(2) + 0.1 * rng.unit_f64())
        })
        .0
    }

    fn charts_of(dirs: &[PathBuf], out: &Path, opts: &PlotOptions) -> (Report, Vec<String>) {
        let r = crate::report::aggregate(dirs, &Default::default()).unwrap();
        let files = super::super::write_all(
            &r,
            &crate::report::figures::Figures::read(&r, dirs).unwrap(),
            out,
            opts,
        )
        .unwrap();
        let names = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        (r, names)
    }

    /// The share of a PNG's pixels that are not its background (the top
    /// left pixel), and how many distinct colours it has.
    fn ink(png: &Path) -> (f64, usize) {
        let img = image::open(png).unwrap().to_rgb8();
        let bg = *img.get_pixel(0, 0);
        let inked = img.pixels().filter(|p| **p != bg).count();
        let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        colours.sort_unstable();
        colours.dedup();
        (inked as f64 / img.pixels().len() as f64, colours.len())
    }

    const EFFECT_CHARTS: [&str; 4] = [
        "effects_time",
        "effects_accuracy",
        "interactions",
        "shapley",
    ];

    #[test]
    fn a_factorial_gets_its_effect_bars_interactions_and_waterfall() {
        let root = tempfile::tempdir().unwrap();
        let dir = factorial(root.path());
        let out = root.path().join("charts");
        let (r, names) = charts_of(std::slice::from_ref(&dir), &out, &PlotOptions::default());
        // The five charts of every report, then the four of the design, as PNG and SVG.
        assert_eq!(names.len(), 18, "{names:?}");
        for chart in EFFECT_CHARTS {
            for ext in ["png", "svg"] {
                assert!(
                    names.contains(&format!("{chart}.{ext}")),
                    "{chart}.{ext}: {names:?}"
                );
            }
            let (share, colours) = ink(&out.join(format!("{chart}.png")));
            assert!(
                share > 0.03 && colours > 20,
                "{chart}: {share} inked, {colours} colours"
            );
        }
        let svg = |name: &str| std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
        let acc = svg("effects_accuracy");
        // Every term, each estimate in points, the planted interaction decided.
        for term in [
            "tta",
            "lookahead",
            "label_smoothing",
            "tta×lookahead",
            "lookahead×label_smoothing",
        ] {
            assert!(acc.contains(&format!(">\n{term}\n<")), "{term}: {acc}");
        }
        let e = &r.effects[0];
        let inter = e.analyses[1]
            .effects
            .iter()
            .find(|x| x.term == "tta×lookahead")
            .unwrap();
        assert!(inter.decided());
        assert!(
            acc.contains(&format!(
                "{} *",
                Units::of(e, &e.analyses[1], "").signed(inter.estimate)
            )),
            "{acc}"
        );
        assert!(!acc.contains("aliased"), "a full factorial aliases nothing");
        assert!(acc.contains("effect, high − low (points)"), "{acc}");
        // The zero line: as tall as the y-axis (whisker caps are a fraction
        // of a row), inside the plot, since the effects go both ways.
        let tall: Vec<f64> = crate::charts::tests::polylines(&acc)
            .into_iter()
            .filter(|l| l.len() == 2 && l[0].0 == l[1].0 && (l[0].1 - l[1].1).abs() > 300.0)
            .map(|l| l[0].0)
            .collect();
        assert!(tall.len() == 2 && tall[1] > tall[0] + 100.0, "{tall:?}");
        // The largest interaction plotted first, with its estimate and CI.
        let pairs = top_pairs(e, &e.analyses[1]);
        assert_eq!(pairs[0].0.term, "tta×lookahead");
        assert_eq!(pairs[0].1, (0, 1));
        let plots = svg("interactions");
        let signed = Units::of(e, &e.analyses[1], "").signed(inter.estimate);
        assert!(
            plots.contains("\ntta×lookahead\n") && plots.contains(&format!("\n{signed} [")),
            "{plots}"
        );
        // The waterfall climbs from every factor low by each Shapley value,
        // the largest first, to every factor high.
        for a in &e.analyses {
            let w = waterfall_of(e, a).unwrap();
            let sum: f64 = w.steps.iter().map(|x| x.estimate).sum();
            assert!((w.start + sum - w.end).abs() < 1e-9, "{}", a.response);
            assert!(
                w.steps
                    .windows(2)
                    .all(|p| p[0].estimate.abs() >= p[1].estimate.abs())
            );
        }
        let time = waterfall_of(e, &e.analyses[0]).unwrap();
        assert_eq!(time.steps[0].term, "tta", "tta's 2 s first");
        let shap = svg("shapley");
        assert!(
            shap.contains("every factor low") && shap.contains("every factor high"),
            "{shap}"
        );
    }

    #[test]
    fn a_report_without_a_designed_matrix_gets_no_effect_charts() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "plain", "").unwrap();
        for rep in 0..2 {
            let s = crate::store::tests::summary(0.5, 10.0, None);
            crate::store::tests::feed(
                &mut w,
                crate::store::tests::rid("baseline", 0, rep),
                rep as u64,
                Some(s),
            );
        }
        let dir = w.dir().to_path_buf();
        let (r, names) = charts_of(std::slice::from_ref(&dir), &dir, &PlotOptions::default());
        assert!(r.effects.is_empty());
        assert_eq!(names.len(), 10, "{names:?}");
        for chart in EFFECT_CHARTS {
            assert!(
                !names.iter().any(|n| n.starts_with(chart)),
                "{chart}: {names:?}"
            );
        }
    }

    /// A fraction's estimates are aliased and have no Shapley values; a
    /// Shapley design has Shapley values and no effects; two designed
    /// matrices in one report each get their own files.
    #[test]
    fn each_design_gets_the_charts_it_has_data_for() {
        let root = tempfile::tempdir().unwrap();
        let y = |c: u32, rng: &mut crate::util::splitmix::SplitMix64| {
            let on = |i: u32| f64::from(c >> i & 1);
            (
                0.6 + 0.02 * on(0) + 0.01 * on(2) + 0.004 * rng.unit_f64(),
                10.0 + on(1) + 0.1 * rng.unit_f64(),
            )
        };
        let frac = planted(
            root.path(),
            &format!("name = \"fr\"\n{HEAD}kind = \"fractional\"\nfraction = 1\nvary = [\"tta\", \"lookahead\", \"label_smoothing\", \"whitening_bias\"]\n"),
            2,
            &y,
        )
        .0;
        let shap = planted(
            root.path(),
            &format!("name = \"sh\"\n{HEAD}kind = \"shapley\"\norders = 6\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n"),
            2,
            &y,
        )
        .0;
        let opts = PlotOptions {
            format: super::super::PlotFormat::Svg,
            ..Default::default()
        };
        let out = root.path().join("frac");
        let (_, names) = charts_of(std::slice::from_ref(&frac), &out, &opts);
        assert_eq!(
            &names[5..],
            [
                "effects_time.svg",
                "effects_accuracy.svg",
                "interactions.svg"
            ]
        );
        let acc = std::fs::read_to_string(out.join("effects_accuracy.svg")).unwrap();
        assert!(
            acc.contains("aliased: the estimate is the sum of the terms in brackets"),
            "{acc}"
        );
        assert!(
            acc.contains(" (+ "),
            "an aliased term names its aliases: {acc}"
        );
        let out = root.path().join("shap");
        let (_, names) = charts_of(std::slice::from_ref(&shap), &out, &opts);
        assert_eq!(&names[5..], ["shapley.svg"]);
        let out = root.path().join("both");
        let (_, names) = charts_of(&[frac, shap], &out, &opts);
        assert_eq!(
            &names[5..],
            [
                "effects_time_fr.svg",
                "effects_accuracy_fr.svg",
                "interactions_fr.svg",
                "shapley_sh.svg"
            ]
        );
        let e = |m: &str| Effects {
            matrix: m.into(),
            folder: PathBuf::new(),
            clock: crate::config::Clock::Dawn,
            factors: Vec::new(),
            design: Vec::new(),
            runs: 0,
            noisy: 0,
            analyses: Vec::new(),
        };
        assert_eq!(
            suffixes(&[e("a/b"), e("a/b"), e("c")]),
            ["_a_b", "_a_b_2", "_c"]
        );
        assert_eq!(suffixes(&[e("a/b")]), [""]);
    }

    /// The centres of an SVG's filled diamonds (four-point polygons) of
    /// colour `fill`.
    fn diamonds(svg: &str, fill: &str) -> Vec<(f64, f64)> {
        svg.split("<polygon")
            .skip(1)
            .filter(|p| p.split('>').next().is_some_and(|head| head.contains(fill)))
            .filter_map(|p| {
                let pts = p.split("points=\"").nth(1)?.split('"').next()?;
                let xy: Vec<(f64, f64)> = pts
                    .split_whitespace()
                    .filter_map(|xy| {
                        let (x, y) = xy.split_once(',')?;
                        Some((x.parse().ok()?, y.parse().ok()?))
                    })
                    .collect();
                (xy.len() == 4).then(|| {
                    let n = xy.len() as f64;
                    (
                        xy.iter().map(|p| p.0).sum::<f64>() / n,
                        xy.iter().map(|p| p.1).sum::<f64>() / n,
                    )
                })
            })
            .collect()
    }

    /// A factorial drawn with a ladder among the same folders: tta's main
    /// effect (+4 points) and its Shapley step get the rung's +10 points as
    /// a vermillion diamond (order-dependent: the intervals do not overlap)
    /// with its text, named in the legend, right of the bar; lookahead, which
    /// no rung adds alone, gets none; and the same folder drawn alone, no
    /// ladder's mark or legend.
    #[test]
    fn a_ladders_credit_is_drawn_beside_the_bar_it_questions() {
        let root = tempfile::tempdir().unwrap();
        let dirs = crate::report::effects::tests::factorial_and_ladder(root.path());
        let opts = PlotOptions {
            format: super::super::PlotFormat::Svg,
            ..Default::default()
        };
        let out = root.path().join("with");
        charts_of(&dirs, &out, &opts);
        let vermillion = "#D55E00";
        for (chart, legend) in [
            // (SVG writes an apostrophe as &apos;.)
            (
                "effects_accuracy",
                "ladder (lad): the Δ of its rung that adds the factor alone",
            ),
            ("shapley", "CI and the estimate&apos;s do not overlap"),
        ] {
            let svg = std::fs::read_to_string(out.join(format!("{chart}.svg"))).unwrap();
            assert!(svg.contains(legend), "{chart}: {svg}");
            assert!(
                svg.contains("ladder +10.00 points, order-dependent"),
                "{chart}: {svg}"
            );
            // One diamond in the chart and one in the legend, both vermillion
            // (the legend's lies below the plot).
            let marks = diamonds(&svg, vermillion);
            assert_eq!(marks.len(), 2, "{chart}: {marks:?}");
        }
        // On the effects chart, the diamond lies right of tta's bar: +10
        // against +4 points.
        let acc = std::fs::read_to_string(out.join("effects_accuracy.svg")).unwrap();
        // The chart's diamond: above the legend's, in the strip under it.
        let diamond = diamonds(&acc, vermillion)
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        let bars: Vec<f64> = acc
            .split("<rect")
            .skip(1)
            .filter_map(|r| {
                let num = |k: &str| -> Option<f64> {
                    r.split(&format!(" {k}=\""))
                        .nth(1)?
                        .split('"')
                        .next()?
                        .parse()
                        .ok()
                };
                Some(num("x")? + num("width")?)
            })
            .collect();
        let widest = bars
            .iter()
            .copied()
            .filter(|x| *x < diamond.0)
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(
            widest.is_finite() && diamond.0 > widest + 20.0,
            "{diamond:?} {bars:?}"
        );
        assert_eq!(acc.matches("ladder +").count(), 1, "tta's alone");
        // The ladder's interval here is as narrow as its estimate: nothing cut.
        assert!(!acc.contains("is cut at the chart"), "{acc}");
        let alone = root.path().join("alone");
        charts_of(&dirs[..1], &alone, &opts);
        for chart in ["effects_accuracy", "shapley"] {
            let svg = std::fs::read_to_string(alone.join(format!("{chart}.svg"))).unwrap();
            assert!(
                !svg.contains("rung that adds") && !svg.contains("ladder +"),
                "{chart}"
            );
            assert!(diamonds(&svg, vermillion).is_empty(), "{chart}");
        }
    }

    /// A ladder's whisker past what the design's bars need is cut there,
    /// and only then; an interval it does not have is never cut.
    #[test]
    fn a_ladders_whisker_is_cut_only_past_the_charts_extent() {
        let wide = LadderCredit {
            matrix: "lad".into(),
            rung: "+ tta".into(),
            estimate: 0.1,
            lo: -0.5,
            hi: 0.7,
            order_dependent: false,
        };
        assert!(cut_at(&wide, 0.0, 100.0, (-10.0, 15.0)));
        assert!(!cut_at(&wide, 0.0, 100.0, (-60.0, 75.0)));
        assert!(!cut_at(
            &LadderCredit {
                lo: f64::NAN,
                ..wide.clone()
            },
            0.0,
            100.0,
            (0.0, 1.0)
        ));
        let tta = Estimate {
            term: "tta".into(),
            estimate: 0.04,
            lo: 0.03,
            hi: 0.05,
            aliases: Vec::new(),
            ladder: Some(wide),
        };
        // The bars' extent holds 0, the estimate's interval and the
        // ladder's Δ, not the ladder's interval.
        assert_eq!(bars_extent(&[&tta], 100.0), (0.0, 10.0));
    }
}
