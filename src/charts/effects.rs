//! The effects of a designed matrix drawn (issue 37): each response's main
//! effects and largest interactions as bars with their 95% CIs, the
//! interaction plot of the largest pairs, and the Shapley waterfall from
//! every factor low to every factor high. Drawn from `report::effects`
//! alone, and only for a report that has effects.

use super::{
    Chart2d, Mark, PlotOptions, Res, Theme, both, color, hatched_bar, label, name_area,
    names_fitting, rung_label, seconds, setup_line, titled_wrapped, with_legend,
};
use crate::report::Report;
use crate::report::effects::{Analysis, Effects, Estimate};
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
    let root = with_legend(&root, &legend, t)?;
    let whole: Vec<String> = rows.iter().map(|x| term_label(x)).collect();
    let name_w = name_area(&root, &whole, t);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let names = names_fitting(&root, &whole, name_w, t);
    let s = u.scale;
    let ends = rows
        .iter()
        .flat_map(|x| [x.estimate * s, x.lo * s, x.hi * s])
        .chain([0.0]);
    // Values of negative estimates are written left of their bars, the rest right.
    let side = |neg: bool| -> Vec<String> {
        rows.iter()
            .filter(|x| (x.estimate < 0.0) == neg)
            .map(|x| effect_text(x, u))
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
        effect_row(&mut c, x, (n - 1 - i) as f64, u, px, t)?;
    }
    Ok(())
}

/// A term's value as written beside its bar.
fn effect_text(x: &Estimate, u: &Units) -> String {
    format!("{}{}", u.signed(x.estimate), star(x))
}

/// One term's bar, whisker and value; `px`: a pixel in x units.
fn effect_row<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    x: &Estimate,
    y: f64,
    u: &Units,
    px: f64,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
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
            [(b0, y - BAR), (b1, y + BAR)],
            col.mix(0.75).filled(),
        )))?;
    } else {
        hatched_bar(c, (b0, b1), (y - BAR, y + BAR), col, 10.0 * px)?;
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
    for note in [
        setup_line(r),
        format!("{} ({} runs): {how}", e.matrix, e.runs),
        "one step a factor, its Shapley value (its gain averaged over the orders of adding the factors), largest first; whisker: its 95% CI; *: the CI excludes 0".to_string(),
        LOW_HIGH.to_string(),
    ] {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let legend = vec![
        ("raises the response".to_string(), Mark::Filled(color(2))),
        ("lowers it".to_string(), Mark::Filled(color(3))),
        (
            "mean with every factor low, high".to_string(),
            Mark::Line(t.fg),
        ),
    ];
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
    // Where each step starts: the start, then the sum of the steps before.
    let mut at = vec![w.start * s];
    for x in &w.steps {
        at.push(at[at.len() - 1] + x.estimate * s);
    }
    let reach = w
        .steps
        .iter()
        .zip(&at)
        .flat_map(|(x, a)| [a + x.lo * s, a + x.hi * s]);
    // Every value is written right of its bar, whisker or mark.
    let texts: Vec<String> = [u.level(w.start), u.level(w.end)]
        .into_iter()
        .chain(w.steps.iter().map(|x| effect_text(x, u)))
        .collect();
    let plot_w = area.dim_in_pixel().0.saturating_sub(name_w + 24).max(1);
    let (x0, x1) = room_for_labels(
        at.iter().copied().chain(reach).chain([w.end * s]),
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
        waterfall_step(&mut c, x, y_of(k + 1), at[k], u, gap, t)?;
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
/// around the step's end, and its value `gap` right of both.
fn waterfall_step<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    x: &Estimate,
    y: f64,
    from: f64,
    u: &Units,
    gap: f64,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let to = from + x.estimate * s;
    connector(c, from, y, t)?;
    let col = if to >= from { color(2) } else { color(3) };
    c.draw_series(std::iter::once(Rectangle::new(
        [(from.min(to), y - BAR), (from.max(to), y + BAR)],
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
        let files = super::super::write_all(&r, dirs, out, opts).unwrap();
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
            analyses: Vec::new(),
        };
        assert_eq!(
            suffixes(&[e("a/b"), e("a/b"), e("c")]),
            ["_a_b", "_a_b_2", "_c"]
        );
        assert_eq!(suffixes(&[e("a/b")]), [""]);
    }
}
