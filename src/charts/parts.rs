//! The pieces several charts draw: rung labels that fit, legends,
//! whiskers cut at 0 s, the target line, hatched bars for noisy rungs.

use super::theme::*;
use crate::report::Clock;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(super) type Res = Result<(), Box<dyn std::error::Error>>;
pub(super) type Chart2d<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The variant name at a rung position of a top-to-bottom category axis.
pub(super) fn rung_label(names: &[String], y: f64) -> String {
    let i = names.len() as i64 - 1 - y.round() as i64;
    if (y - y.round()).abs() < 0.01 && i >= 0 && (i as usize) < names.len() {
        names[i as usize].clone()
    } else {
        String::new()
    }
}

/// The vertical target-accuracy line (x in %) across `n` rungs, with its legend entry.
/// The arrowhead that ends a time whisker cut at 0 (`CUT_NOTE` says so), at
/// `at`, its three pixel offsets pointing at the cut: [`CUT_LEFT`] on a
/// horizontal time axis, [`CUT_DOWN`] on a vertical one.
pub(super) fn cut_arrow<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    at: (f64, f64),
    points: [(i32, i32); 3],
    style: ShapeStyle,
) -> Res
where
    DB::ErrorType: 'static,
{
    c.draw_series(std::iter::once(
        EmptyElement::at(at) + PathElement::new(points.to_vec(), style),
    ))?;
    Ok(())
}

pub(super) const CUT_LEFT: [(i32, i32); 3] = [(8, -7), (0, 0), (8, 7)];
pub(super) const CUT_DOWN: [(i32, i32); 3] = [(-6, -8), (0, 0), (6, -8)];

pub(super) fn target_line<DB: DrawingBackend>(c: &mut Chart2d<'_, DB>, target: f64, n: usize) -> Res
where
    DB::ErrorType: 'static,
{
    c.draw_series(std::iter::once(PathElement::new(
        vec![(target * 100.0, -0.6), (target * 100.0, n as f64 - 0.4)],
        TARGET.stroke_width(2),
    )))?
    .label(format!("target {:.1}%", 100.0 * target))
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], TARGET.stroke_width(2)));
    Ok(())
}

pub(super) fn label(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        name.to_string()
    } else {
        format!("{}…", name.chars().take(max - 1).collect::<String>())
    }
}

/// The width of a category axis's label area: the longest name at `size`
/// with room for the tick, at most half of `area`'s width (names longer than
/// that are shortened with "…" by `names_fitting`).
pub(super) fn name_area<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    names: &[String],
    t: &Theme,
) -> u32 {
    let font = t.font(16);
    let widest = names
        .iter()
        .filter_map(|n| area.estimate_text_size(n, &font).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0);
    (widest + 24).clamp(80, area.dim_in_pixel().0 / 2)
}

/// Each name whole where it fits `width` pixels at the axis font, else
/// shortened with "…" until it does.
pub(super) fn names_fitting<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    names: &[&str],
    width: u32,
    t: &Theme,
) -> Vec<String> {
    let font = t.font(16);
    names
        .iter()
        .map(|n| {
            let mut max = n.chars().count();
            loop {
                let l = label(n, max.max(2));
                let fits = area
                    .estimate_text_size(&l, &font)
                    .map_or(true, |(w, _)| w + 24 <= width);
                if fits || max <= 2 {
                    return l;
                }
                max -= 1;
            }
        })
        .collect()
}

/// Three significant digits, so that rungs of 0.16 s and 0.18 s read apart.
pub(super) fn seconds(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

pub(super) fn clock_name(c: Option<Clock>) -> &'static str {
    match c {
        Some(Clock::Dawn) => "DAWNBench-style time (s)",
        Some(Clock::Airbench) => "airbench-style time (s)",
        Some(Clock::Hlb) => "hlb-style time (s)",
        Some(Clock::Wall) => "wall time (s)",
        None => "time, each recipe's convention (s)",
    }
}

/// Words of `text` in lines no wider than `width` pixels in `style` (a word
/// wider than that alone keeps its own line): subtitles wrap instead of
/// running past both edges of a narrow chart.
pub(super) fn wrap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle,
    width: u32,
) -> Vec<String> {
    let fits = |s: &str| {
        area.estimate_text_size(s, style)
            .map_or(true, |(w, _)| w <= width)
    };
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(last) if fits(&format!("{last} {word}")) => {
                last.push(' ');
                last.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// `root` under `text` drawn centred in as many lines as it needs.
pub(super) fn titled_wrapped<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    text: &str,
    style: TextStyle,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    // A margin each side, so that a centred line never touches the edge.
    let width = root.dim_in_pixel().0.saturating_sub(24);
    let mut area = root.clone();
    for line in wrap(root, text, &style, width) {
        area = area.titled(&line, style.clone())?;
    }
    Ok(area)
}

/// How a legend entry is drawn: a line, a hollow dot, or a bar's swatch,
/// plain or hatched.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    Line(RGBColor),
    Hollow(RGBColor),
    Filled(RGBColor),
    Hatched(RGBColor),
    /// A filled diamond: a point estimate drawn beside a bar.
    Diamond(RGBColor),
}

/// A legend in its own strip under the chart, entries flowing left to right
/// and onto more rows as the width asks: no name is cut, and no entry covers
/// data. Returns the area above it, for the chart.
pub(super) fn with_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[(String, Mark)],
    t: &Theme,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    if entries.is_empty() {
        return Ok(root.clone());
    }
    let font = t.font(14);
    let (w, _) = root.dim_in_pixel();
    let (row_h, swatch, gap, pad) = (22i32, 22i32, 18i32, 14i32);
    // Each entry's place: (row, x).
    let mut places = Vec::new();
    let (mut row, mut x) = (0i32, pad);
    for (text, _) in entries {
        let tw = root.estimate_text_size(text, &font)?.0 as i32;
        let need = swatch + 6 + tw;
        if x > pad && x + need > w as i32 - pad {
            row += 1;
            x = pad;
        }
        places.push((row, x));
        x += need + gap;
    }
    let h = (row + 1) * row_h + 20;
    let (chart, strip) = root.split_vertically(root.dim_in_pixel().1 as i32 - h);
    for ((text, mark), (row, x)) in entries.iter().zip(places) {
        let y = 8 + row * row_h + row_h / 2;
        match *mark {
            Mark::Line(c) => strip.draw(&PathElement::new(
                vec![(x, y), (x + swatch - 4, y)],
                c.stroke_width(3),
            ))?,
            Mark::Hollow(c) => {
                strip.draw(&Circle::new((x + swatch / 2 - 2, y), 6, c.stroke_width(2)))?
            }
            Mark::Filled(c) => strip.draw(&Rectangle::new(
                [(x, y - 7), (x + swatch - 4, y + 7)],
                c.mix(0.75).filled(),
            ))?,
            Mark::Hatched(c) => {
                let (x1, y0, y1) = (x + swatch - 4, y - 7, y + 7);
                strip.draw(&Rectangle::new([(x, y0), (x1, y1)], c.mix(0.25).filled()))?;
                for a in (x..x1).step_by(6) {
                    strip.draw(&PathElement::new(
                        vec![(a, y0), ((a + 6).min(x1), y1)],
                        c.stroke_width(1),
                    ))?;
                }
                strip.draw(&Rectangle::new([(x, y0), (x1, y1)], c.stroke_width(2)))?;
            }
            Mark::Diamond(c) => {
                let cx = x + swatch / 2 - 2;
                strip.draw(&Polygon::new(
                    vec![(cx, y - 7), (cx + 7, y), (cx, y + 7), (cx - 7, y)],
                    c.filled(),
                ))?;
            }
        }
        strip.draw(&Text::new(
            text.clone(),
            (x + swatch + 4, y),
            font.pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(chart)
}

/// A whisker's ends on a time axis that starts at 0: a 95% t-interval from
/// few seeds can reach below 0 s, which no run took, so it is cut at 0 and
/// says so (`true`).
pub(super) fn time_whisker(mean: f64, ci: f64) -> (f64, f64, bool) {
    ((mean - ci).max(0.0), mean + ci, mean - ci < 0.0)
}

/// The note every chart with whiskers cut at 0 carries.
pub(super) const CUT_NOTE: &str = "arrowhead at 0 s: the 95% CI reaches below 0 s and is cut there";

/// Whether a chart's accuracies were measured with TTA, from the runs' `tta_level`.
pub(super) fn tta_words(runs: &[crate::store::RunRow]) -> &'static str {
    let with = runs.iter().filter(|r| r.tta_level.unwrap_or(0) > 0).count();
    match with {
        0 => "",
        w if w == runs.len() => " (TTA)",
        _ => " (TTA where the run used it)",
    }
}

/// " · k of n runs noisy" for a row with noisy runs, else nothing.
pub(super) fn noisy_words(noisy: usize, n: usize) -> String {
    if noisy > 0 {
        format!(" · {noisy} of {n} noisy")
    } else {
        String::new()
    }
}

/// A bar drawn hatched (a light fill, diagonal strokes, an outline), so that
/// it reads apart from the plain bars in print without colour: a rung with
/// noisy runs, an aliased effect. `x0 <= x1`; a stroke every `step`.
pub(super) fn hatched_bar<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    col: RGBColor,
    step: f64,
) -> Res
where
    DB::ErrorType: 'static,
{
    c.draw_series(std::iter::once(Rectangle::new(
        [(x0, y0), (x1, y1)],
        col.mix(0.25).filled(),
    )))?;
    let k = ((x1 - x0) / step).ceil() as usize;
    c.draw_series((0..k).map(|j| {
        let a = x0 + j as f64 * step;
        PathElement::new(vec![(a, y0), ((a + step).min(x1), y1)], col.stroke_width(1))
    }))?;
    c.draw_series(std::iter::once(Rectangle::new(
        [(x0, y0), (x1, y1)],
        col.stroke_width(2),
    )))?;
    Ok(())
}
