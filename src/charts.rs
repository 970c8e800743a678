//! Charts for write-ups, PNG and SVG, drawn with plotters and an embedded
//! font (assets/fonts/DejaVuSans.ttf) so they render on machines without
//! system fonts: the ladder, the accuracy distribution, the training curves
//! and time against accuracy with its Pareto front; for a designed matrix,
//! its effects (`effects`).

mod effects;

use crate::report::curves::{Curve, TimeCurve, curves, time_curves};
use crate::report::{Clock, Report};
use anyhow::{Context, Result};
use image::ImageEncoder as _;
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// Every text size in this file is even: plotters' ab_glyph renderer places
/// each glyph at `size / 2 + top` truncated to a pixel, so at odd sizes glyphs
/// whose top is below the middle (the decimal point) land a pixel higher than
/// the digits beside them: "68·0" (`glyphs_share_their_baseline` checks it).
const FAMILY: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
        let _ = plotters::style::register_font(FAMILY, FontStyle::Bold, FONT);
    });
}

/// Okabe and Ito's palette, told apart with every common colour-vision
/// deficiency; black is kept for whiskers and text, vermillion for the target.
/// Past its seven colours the palette goes round again darker, then
/// lighter, so that up to 21 variants stay apart.
fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(240, 228, 66),
        RGBColor(120, 120, 120),
    ];
    let RGBColor(r, g, b) = C[i % C.len()];
    let shade = |v: u8, f: f64, toward: f64| (v as f64 * f + toward * (1.0 - f)).round() as u8;
    match (i / C.len()) % 3 {
        0 => RGBColor(r, g, b),
        1 => RGBColor(shade(r, 0.6, 0.0), shade(g, 0.6, 0.0), shade(b, 0.6, 0.0)),
        _ => RGBColor(
            shade(r, 0.55, 255.0),
            shade(g, 0.55, 255.0),
            shade(b, 0.55, 255.0),
        ),
    }
}

/// The line under every chart's title: what the numbers were measured on.
fn setup_line(r: &Report) -> String {
    let get = |k: &str| {
        r.setup
            .iter()
            .find(|(key, _)| key == k)
            .map_or("", |(_, v)| v.as_str())
            .to_string()
    };
    format!(
        "{} · data {} · {} · {} clock",
        get("hardware"),
        get("data"),
        get("runs"),
        get("clock")
    )
}

/// The target line's colour (Okabe–Ito vermillion).
const TARGET: RGBColor = RGBColor(213, 94, 0);

/// Light charts for papers, dark ones for slides with a dark background.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotTheme {
    #[default]
    Light,
    Dark,
}

/// The colours every chart takes its background, text, axes and whiskers from.
#[derive(Clone, Copy, Debug)]
struct Theme {
    bg: RGBColor,
    fg: RGBColor,
}

impl Theme {
    fn of(t: PlotTheme) -> Theme {
        match t {
            PlotTheme::Light => Theme {
                bg: RGBColor(255, 255, 255),
                fg: RGBColor(0, 0, 0),
            },
            PlotTheme::Dark => Theme {
                bg: RGBColor(24, 24, 28),
                fg: RGBColor(225, 225, 225),
            },
        }
    }

    fn font(&self, size: u32) -> TextStyle<'static> {
        (FAMILY, size as f64).into_font().color(&self.fg)
    }

    /// The axes every chart shares: the theme's colour, faint grid lines,
    /// labels at `size`; each chart adds its own labels and descriptions.
    fn axes<'a, 'b, X: Ranged, Y: Ranged, DB: DrawingBackend>(
        &self,
        mut mesh: MeshStyle<'a, 'b, X, Y, DB>,
        size: u32,
    ) -> MeshStyle<'a, 'b, X, Y, DB> {
        mesh.axis_style(self.fg)
            .bold_line_style(self.fg.mix(0.2))
            .light_line_style(self.fg.mix(0.07))
            .label_style(self.font(size));
        mesh
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;
type Chart2d<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The variant name at a rung position of a top-to-bottom category axis.
fn rung_label(names: &[String], y: f64) -> String {
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
fn cut_arrow<DB: DrawingBackend>(
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

const CUT_LEFT: [(i32, i32); 3] = [(8, -7), (0, 0), (8, 7)];
const CUT_DOWN: [(i32, i32); 3] = [(-6, -8), (0, 0), (6, -8)];

fn target_line<DB: DrawingBackend>(c: &mut Chart2d<'_, DB>, target: f64, n: usize) -> Res
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

fn label(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        name.to_string()
    } else {
        format!("{}…", name.chars().take(max - 1).collect::<String>())
    }
}

/// The width of a category axis's label area: the longest name at `size`
/// with room for the tick, at most half of `area`'s width (names longer than
/// that are shortened with "…" by `names_fitting`).
fn name_area<DB: DrawingBackend>(
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
fn names_fitting<DB: DrawingBackend>(
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
fn seconds(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

fn clock_name(c: Option<Clock>) -> &'static str {
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
fn wrap<DB: DrawingBackend>(
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
fn titled_wrapped<DB: DrawingBackend>(
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
enum Mark {
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
fn with_legend<DB: DrawingBackend>(
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
fn time_whisker(mean: f64, ci: f64) -> (f64, f64, bool) {
    ((mean - ci).max(0.0), mean + ci, mean - ci < 0.0)
}

/// The note every chart with whiskers cut at 0 carries.
const CUT_NOTE: &str = "arrowhead at 0 s: the 95% CI reaches below 0 s and is cut there";

/// Whether a chart's accuracies were measured with TTA, from the runs' `tta_level`.
fn tta_words(runs: &[crate::store::RunRow]) -> &'static str {
    let with = runs.iter().filter(|r| r.tta_level.unwrap_or(0) > 0).count();
    match with {
        0 => "",
        w if w == runs.len() => " (TTA)",
        _ => " (TTA where the run used it)",
    }
}

/// " · k of n runs noisy" for a row with noisy runs, else nothing.
fn noisy_words(noisy: usize, n: usize) -> String {
    if noisy > 0 {
        format!(" · {noisy} of {n} noisy")
    } else {
        String::new()
    }
}

/// A bar drawn hatched (a light fill, diagonal strokes, an outline), so that
/// it reads apart from the plain bars in print without colour: a rung with
/// noisy runs, an aliased effect. `x0 <= x1`; a stroke every `step`.
fn hatched_bar<DB: DrawingBackend>(
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

/// Page's figure from our data: time per rung with CI whiskers, and accuracy
/// per rung with the target line. A rung with noisy runs says how many in its
/// label, its bar is hatched and its accuracy dot hollow.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: axes, bars, labels, legend"
)]
fn ladder<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<_> = r.rows.iter().filter(|x| x.n > 0).collect();
    let n = rows.len().max(1);
    let cut = rows
        .iter()
        .any(|x| time_whisker(x.time().mean, x.time().ci95).2);
    let noisy = rows.iter().any(|x| x.noisy > 0);
    let mut notes = vec![
        setup_line(r),
        "(×: the previous rung's mean time over this rung's)".to_string(),
    ];
    if noisy {
        notes.push("hatched bar, hollow dot: the rung has runs flagged noisy".into());
    }
    if cut {
        notes.push(CUT_NOTE.into());
    }
    let mut root = root.titled("Ablation ladder: time per rung and accuracy", t.font(26))?;
    for note in &notes {
        root = titled_wrapped(&root, note, t.font(14))?;
    }
    let mut legend = vec![(
        format!("target {:.1}%", 100.0 * r.target),
        Mark::Line(TARGET),
    )];
    if noisy {
        legend.push(("rung with noisy runs".into(), Mark::Hollow(color(2))));
    }
    let root = with_legend(&root, &legend, t)?;
    let (left, right) = root.split_horizontally((root.dim_in_pixel().0 as f64 * 0.62) as u32);
    let pos = |i: usize| (n - 1 - i) as f64;
    let whole: Vec<String> = rows.iter().map(|x| x.variant.clone()).collect();
    let name_w = name_area(&left, &whole, t);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let names = names_fitting(&left, &whole, name_w, t);
    let tmax = rows
        .iter()
        .map(|x| x.time().mean + x.time().ci95.max(0.0))
        // A damaged or hand-edited table can hold an infinite time: an axis
        // to infinity never finishes placing its ticks.
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.3;
    let mut c = ChartBuilder::on(&left)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(name_w)
        .build_cartesian_2d(0.0..tmax, -0.6..(n as f64 - 0.4))?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc(clock_name(r.clock))
        .draw()?;
    for (i, x) in rows.iter().enumerate() {
        let s = x.time();
        let y = pos(i);
        if !s.mean.is_finite() {
            continue;
        }
        let (x0, x1, y0, y1) = (0.0, s.mean, y - 0.32, y + 0.32);
        if x.noisy > 0 {
            hatched_bar(&mut c, (x0, x1), (y0, y1), color(0), tmax / 40.0)?;
        } else {
            c.draw_series(std::iter::once(Rectangle::new(
                [(x0, y0), (x1, y1)],
                color(0).mix(0.75).filled(),
            )))?;
        }
        if s.ci95.is_finite() {
            let (a, b, clipped) = time_whisker(s.mean, s.ci95);
            c.draw_series(std::iter::once(PathElement::new(
                vec![(a, y), (b, y)],
                t.fg.stroke_width(2),
            )))?;
            c.draw_series(std::iter::once(PathElement::new(
                vec![(b, y - 0.15), (b, y + 0.15)],
                t.fg.stroke_width(2),
            )))?;
            if clipped {
                cut_arrow(&mut c, (a, y), CUT_LEFT, t.fg.stroke_width(2))?;
            } else {
                c.draw_series(std::iter::once(PathElement::new(
                    vec![(a, y - 0.15), (a, y + 0.15)],
                    t.fg.stroke_width(2),
                )))?;
            }
        }
        let txt = match x.speedup_prev {
            Some(sp) => format!("{} s  ×{sp:.2}", seconds(s.mean)),
            None => format!("{} s", seconds(s.mean)),
        };
        c.draw_series(std::iter::once(Text::new(
            format!("{txt}{}", noisy_words(x.noisy, x.n)),
            (s.mean + s.ci95.max(0.0) + tmax * 0.01, y + 0.12),
            t.font(14),
        )))?;
    }
    let accs: Vec<f64> = rows
        .iter()
        .flat_map(|x| {
            [
                (x.acc_tta_mean - x.acc_tta_ci95.max(0.0)).max(0.0),
                (x.acc_tta_mean + x.acc_tta_ci95.max(0.0)).min(1.0),
            ]
        })
        .chain([r.target])
        .filter(|v| v.is_finite())
        .collect();
    let lo = accs.iter().copied().fold(1.0, f64::min);
    let hi = accs.iter().copied().fold(0.0, f64::max);
    let pad = ((hi - lo) * 0.15).max(0.01);
    let mut a = ChartBuilder::on(&right)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d(
            ((lo - pad).max(0.0) * 100.0)..((hi + pad).min(1.0) * 100.0),
            -0.6..(n as f64 - 0.4),
        )?;
    t.axes(a.configure_mesh(), 16)
        .disable_y_mesh()
        .y_labels(0)
        .max_light_lines(4)
        .x_desc(format!(
            "test accuracy %{tta} (mean ± 95% CI, clipped to 0-100)"
        ))
        .draw()?;
    target_line(&mut a, r.target, n)?;
    for (i, x) in rows.iter().enumerate() {
        let y = pos(i);
        let m = x.acc_tta_mean * 100.0;
        if x.acc_tta_ci95.is_finite() {
            // A t-interval from two seeds can pass 0% or 100%: accuracy cannot.
            let ci = x.acc_tta_ci95 * 100.0;
            a.draw_series(std::iter::once(PathElement::new(
                vec![((m - ci).max(0.0), y), ((m + ci).min(100.0), y)],
                t.fg.stroke_width(2),
            )))?;
        }
        let style = if x.noisy > 0 {
            color(2).stroke_width(2)
        } else {
            color(2).filled()
        };
        a.draw_series(std::iter::once(Circle::new((m, y), 6, style)))?;
        a.draw_series(std::iter::once(Text::new(
            format!("{m:.1}%"),
            (m, y + 0.42),
            t.font(14),
        )))?;
    }
    Ok(())
}

/// Every run's accuracy per variant, with the mean and the target line; a
/// run flagged noisy is a hollow dot.
fn accuracy<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    runs: &[crate::store::RunRow],
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<_> = r.rows.iter().filter(|x| x.n > 0).collect();
    let n = rows.len().max(1);
    let vals: Vec<f64> = runs
        .iter()
        .filter_map(|x| x.acc_tta)
        .chain([r.target])
        .collect();
    let lo = vals.iter().copied().fold(1.0, f64::min);
    let hi = vals.iter().copied().fold(0.0, f64::max);
    let pad = ((hi - lo) * 0.1).max(0.005);
    let tta = tta_words(runs);
    let root = root.titled(&format!("Accuracy per run{tta}, by variant"), t.font(24))?;
    let root = titled_wrapped(&root, &setup_line(r), t.font(14))?;
    let mut legend = vec![
        (
            format!("target {:.1}%", 100.0 * r.target),
            Mark::Line(TARGET),
        ),
        ("variant mean".into(), Mark::Line(t.fg)),
    ];
    if runs.iter().any(|x| x.noisy == Some(true)) {
        legend.push(("run flagged noisy".into(), Mark::Hollow(color(0))));
    }
    let root = with_legend(&root, &legend, t)?;
    let whole: Vec<String> = rows.iter().map(|x| x.variant.clone()).collect();
    let name_w = name_area(&root, &whole, t);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let names = names_fitting(&root, &whole, name_w, t);
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(name_w)
        .build_cartesian_2d(
            ((lo - pad).max(0.0) * 100.0)..((hi + pad).min(1.0) * 100.0),
            -0.6..(n as f64 - 0.4),
        )?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc(format!("test accuracy %{tta}"))
        .draw()?;
    target_line(&mut c, r.target, n)?;
    for (i, v) in rows.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let mine: Vec<(f64, bool)> = runs
            .iter()
            .filter(|x| x.variant == v.variant && x.matrix == v.matrix)
            .filter_map(|x| Some((x.acc_tta?, x.noisy == Some(true))))
            .collect();
        let k = mine.len().max(1) as f64;
        c.draw_series(mine.iter().enumerate().map(|(j, (a, noisy))| {
            let style = if *noisy {
                color(i).stroke_width(2)
            } else {
                color(i).mix(0.8).filled()
            };
            Circle::new((a * 100.0, y - 0.2 + 0.4 * (j as f64 + 0.5) / k), 4, style)
        }))?;
        let m = v.acc_tta_mean * 100.0;
        c.draw_series(std::iter::once(PathElement::new(
            vec![(m, y - 0.35), (m, y + 0.35)],
            t.fg.stroke_width(3),
        )))?;
    }
    Ok(())
}

/// Loss across the width, learning rate and BN scale under it, and one
/// legend of full variant names beneath: legible when report.html fits the
/// chart to its 1200-pixel column.
#[allow(
    clippy::too_many_lines,
    reason = "three panels sharing one legend, drawn in order"
)]
fn curves_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    cs: &[Curve],
    r: &Report,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let root = titled_wrapped(
        root,
        "Training curves per variant (mean over seeds, band = min–max)",
        t.font(24),
    )?;
    let legend: Vec<(String, Mark)> = cs
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let noisy = r
                .rows
                .iter()
                .find(|x| x.index == c.index && x.variant == c.variant)
                .map_or(String::new(), |x| noisy_words(x.noisy, x.n));
            (
                format!("{} {}{noisy}", c.index, c.variant),
                Mark::Line(color(k)),
            )
        })
        .collect();
    let root = with_legend(&root, &legend, t)?;
    let h = root.dim_in_pixel().1;
    let (top, bottom) = root.split_vertically(h * 11 / 20);
    let (lower_left, lower_right) = bottom.split_horizontally(bottom.dim_in_pixel().0 / 2);
    let panels = [top, lower_left, lower_right];
    let xmax = cs
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-3);
    let pos: Vec<f64> = cs
        .iter()
        .flat_map(|c| c.points.iter().flat_map(|p| [p.1, p.2]))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let (lo, hi) = (
        pos.iter().copied().fold(f64::INFINITY, f64::min),
        pos.iter().copied().fold(0.0, f64::max),
    );
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo * 0.9, hi * 1.1)
    } else {
        (0.1, 10.0)
    };
    // log10 of the loss on a linear axis, labelled with the loss itself: plotters'
    // log axis puts its ticks at powers of ten only, and a loss curve rarely spans one.
    let mut loss = ChartBuilder::on(&panels[0])
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .caption("loss (log scale)", t.font(18))
        .build_cartesian_2d(0.0..xmax, lo.log10()..hi.log10())?;
    t.axes(loss.configure_mesh(), 16)
        .x_desc("epoch")
        .y_labels(8)
        .max_light_lines(4)
        .y_label_formatter(&|v| format!("{:.2}", 10f64.powf(*v)))
        .draw()?;
    for (k, c) in cs.iter().enumerate() {
        let band: Vec<(f64, f64)> = c
            .points
            .iter()
            .filter(|p| p.2 > 0.0 && p.3 > 0.0)
            .map(|p| (p.0, p.3.log10()))
            .chain(
                c.points
                    .iter()
                    .rev()
                    .filter(|p| p.2 > 0.0 && p.3 > 0.0)
                    .map(|p| (p.0, p.2.log10())),
            )
            .collect();
        if band.len() > 2 {
            loss.draw_series(std::iter::once(Polygon::new(band, color(k).mix(0.18))))?;
        }
        loss.draw_series(LineSeries::new(
            c.points
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|p| (p.0, p.1.log10())),
            color(k).stroke_width(2),
        ))?;
    }
    let lrmax = cs
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.4))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.05;
    let mut lr = ChartBuilder::on(&panels[1])
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .caption("learning rate", t.font(18))
        .build_cartesian_2d(0.0..xmax, 0.0..lrmax)?;
    t.axes(lr.configure_mesh(), 16).x_desc("epoch").draw()?;
    for (k, c) in cs.iter().enumerate() {
        lr.draw_series(LineSeries::new(
            c.points.iter().map(|p| (p.0, p.4)),
            color(k).stroke_width(2),
        ))?;
    }
    let bns: Vec<f64> = cs
        .iter()
        .flat_map(|c| c.points.iter().filter_map(|p| p.5))
        .collect();
    let (blo, bhi) = (
        bns.iter().copied().fold(f64::INFINITY, f64::min),
        bns.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let (blo, bhi) = if blo.is_finite() && bhi > blo + 1e-6 {
        (blo - (bhi - blo) * 0.1, bhi + (bhi - blo) * 0.1)
    } else if blo.is_finite() {
        (blo - 0.1, blo + 0.1)
    } else {
        (0.0, 1.0)
    };
    let mut bn = ChartBuilder::on(&panels[2])
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .caption("BN scale: mean |γ| over layers", t.font(18))
        .build_cartesian_2d(0.0..xmax, blo..bhi)?;
    t.axes(bn.configure_mesh(), 16).x_desc("epoch").draw()?;
    for (k, c) in cs.iter().enumerate() {
        bn.draw_series(LineSeries::new(
            c.points.iter().filter_map(|p| p.5.map(|b| (p.0, b))),
            color(k).stroke_width(2),
        ))?;
    }
    Ok(())
}

/// A variant's place on the Pareto chart: mean time and accuracy (%) with
/// their 95% CI half-widths, and whether any of its runs was flagged noisy.
#[derive(Clone, Debug, PartialEq)]
struct ParetoPoint {
    time: f64,
    time_ci: f64,
    acc: f64,
    acc_ci: f64,
    index: usize,
    variant: String,
    /// " · k of n noisy", or empty.
    noisy_note: String,
    noisy: bool,
}

fn pareto_points(r: &Report) -> Vec<ParetoPoint> {
    r.rows
        .iter()
        .filter(|x| x.n > 0)
        .map(|x| ParetoPoint {
            time: x.time().mean,
            time_ci: x.time().ci95,
            acc: x.acc_tta_mean * 100.0,
            acc_ci: x.acc_tta_ci95 * 100.0,
            index: x.index,
            variant: x.variant.clone(),
            noisy_note: noisy_words(x.noisy, x.n),
            noisy: x.noisy > 0,
        })
        .filter(|p| p.time.is_finite() && p.acc.is_finite())
        .collect()
}

/// The points no other beats on both time and accuracy, by time. Variants
/// with noisy runs are left out: their seconds are not to be trusted, so
/// they can neither be on the front nor push a clean variant off it.
fn pareto_front(pts: &[ParetoPoint]) -> Vec<(f64, f64)> {
    let clean: Vec<&ParetoPoint> = pts.iter().filter(|p| !p.noisy).collect();
    let mut front: Vec<(f64, f64)> = clean
        .iter()
        .filter(|p| {
            !clean
                .iter()
                .any(|q| q.time <= p.time && q.acc >= p.acc && (q.time < p.time || q.acc > p.acc))
        })
        .map(|p| (p.time, p.acc))
        .collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    front
}

/// Time against accuracy per variant with 95% CI error bars both ways, the
/// Pareto front of the variants without noisy runs joined; a variant with
/// noisy runs is a hollow dot and says how many in its label.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: frontier, points, labels, legend"
)]
fn pareto<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let pts = pareto_points(r);
    let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
    // Zoomed to the points and their bars: rungs often differ by a few
    // percent of their time.
    let t1 = pts
        .iter()
        .map(|p| p.time + fin(p.time_ci))
        .fold(0.0, f64::max)
        .max(1e-3);
    let t0 = pts
        .iter()
        .map(|p| p.time - fin(p.time_ci))
        .fold(t1, f64::min);
    let tpad = ((t1 - t0) * 0.12).max(t1 * 0.03);
    let tmin = (t0 - tpad).max(0.0);
    // Extra room on the right for the labels.
    let tmax = t1 + 3.0 * tpad;
    let accs: Vec<f64> = pts
        .iter()
        .flat_map(|p| [p.acc - fin(p.acc_ci), p.acc + fin(p.acc_ci)])
        .chain([r.target * 100.0])
        .collect();
    let (lo, hi) = (
        accs.iter().copied().fold(100.0, f64::min).max(0.0),
        accs.iter().copied().fold(0.0, f64::max).min(100.0),
    );
    let pad = ((hi - lo) * 0.12).max(0.5);
    let cut = pts.iter().any(|p| time_whisker(p.time, p.time_ci).2);
    let mut notes = vec![format!("{}  (bars: 95% CI)", setup_line(r))];
    if cut {
        notes.push(CUT_NOTE.into());
    }
    let mut root = root.titled("Time against accuracy (Pareto front joined)", t.font(24))?;
    for note in &notes {
        root = titled_wrapped(&root, note, t.font(14))?;
    }
    let mut legend = vec![
        (
            format!("target {:.1}%", 100.0 * r.target),
            Mark::Line(TARGET),
        ),
        (
            "Pareto front (variants without noisy runs)".into(),
            Mark::Line(color(0)),
        ),
    ];
    if pts.iter().any(|p| p.noisy) {
        legend.push(("variant with noisy runs".into(), Mark::Hollow(t.fg)));
    }
    let root = with_legend(&root, &legend, t)?;
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(tmin..tmax, (lo - pad)..(hi + pad))?;
    t.axes(c.configure_mesh(), 16)
        .max_light_lines(4)
        .x_desc(clock_name(r.clock))
        .y_desc(format!("test accuracy %{tta}"))
        .draw()?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![(tmin, r.target * 100.0), (tmax, r.target * 100.0)],
        TARGET.stroke_width(2),
    )))?;
    c.draw_series(std::iter::once(PathElement::new(
        pareto_front(&pts),
        color(0).stroke_width(2),
    )))?;
    // Error bars first, so that the dots sit on top of them.
    for p in &pts {
        let bar = t.fg.mix(0.7).stroke_width(1);
        if p.time_ci.is_finite() {
            let (a, b, clipped) = time_whisker(p.time, p.time_ci);
            c.draw_series(std::iter::once(PathElement::new(
                vec![(a, p.acc), (b, p.acc)],
                bar,
            )))?;
            if clipped {
                cut_arrow(&mut c, (a, p.acc), CUT_LEFT, bar)?;
            }
        }
        if p.acc_ci.is_finite() {
            c.draw_series(std::iter::once(PathElement::new(
                vec![
                    (p.time, (p.acc - p.acc_ci).max(0.0)),
                    (p.time, (p.acc + p.acc_ci).min(100.0)),
                ],
                bar,
            )))?;
        }
    }
    // Labels placed top-down, each pushed below any earlier one it would overprint.
    let (xr, yr) = (tmax - tmin, hi - lo + 2.0 * pad);
    let mut order: Vec<&ParetoPoint> = pts.iter().collect();
    order.sort_by(|a, b| b.acc.total_cmp(&a.acc));
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for p in order {
        let style = if p.noisy {
            color(p.index).stroke_width(2)
        } else {
            color(p.index).filled()
        };
        c.draw_series(std::iter::once(Circle::new((p.time, p.acc), 6, style)))?;
        let x = p.time + xr * 0.01;
        let mut y = p.acc;
        while placed
            .iter()
            .any(|q| (q.0 - x).abs() < xr * 0.22 && (q.1 - y).abs() < yr * 0.035)
        {
            y -= yr * 0.035;
        }
        placed.push((x, y));
        c.draw_series(std::iter::once(Text::new(
            format!("{} {}{}", p.index, label(&p.variant, 32), p.noisy_note),
            (x, y),
            t.font(14),
        )))?;
    }
    Ok(())
}

/// Each variant's accuracy against seconds on its clock, per evaluation:
/// the mean over seeds, with the t-based 95% CI as a band where two or more
/// seeds were evaluated: how long a variant takes to reach any accuracy,
/// the target's included.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: bands, lines, target, legend"
)]
fn time_to_accuracy<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    cs: &[TimeCurve],
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let root = root.titled("Accuracy against time", t.font(24))?;
    let root = titled_wrapped(&root, &setup_line(r), t.font(14))?;
    let root = titled_wrapped(
        &root,
        "the mean over seeds at each evaluation; band and bars: its 95% CI (t); hollow dots: a variant with noisy runs",
        t.font(14),
    )?;
    let mut legend: Vec<(String, Mark)> = cs
        .iter()
        .enumerate()
        .map(|(k, c)| {
            (
                format!("{} {}{}", c.index, c.variant, noisy_words(c.noisy, c.runs)),
                Mark::Line(color(k)),
            )
        })
        .collect();
    legend.push((
        format!("target {:.1}%", 100.0 * r.target),
        Mark::Line(TARGET),
    ));
    let root = with_legend(&root, &legend, t)?;
    let pts = || cs.iter().flat_map(|c| c.points.iter());
    let xmax = pts().map(|p| p.seconds).fold(0.0, f64::max).max(1e-3) * 1.05;
    let ys: Vec<f64> = pts()
        .flat_map(|p| {
            let ci = p.acc_ci95.filter(|c| c.is_finite()).unwrap_or(0.0);
            [(p.acc - ci).max(0.0), (p.acc + ci).min(1.0)]
        })
        .chain([r.target])
        .filter(|v| v.is_finite())
        .collect();
    let lo = ys.iter().copied().fold(1.0, f64::min);
    let hi = ys.iter().copied().fold(0.0, f64::max);
    let pad = ((hi - lo) * 0.06).max(0.005);
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0.0..xmax,
            ((lo - pad).max(0.0) * 100.0)..((hi + pad).min(1.0) * 100.0),
        )?;
    t.axes(c.configure_mesh(), 16)
        .max_light_lines(4)
        .x_desc(clock_name(r.clock))
        .y_desc(format!("test accuracy %{tta}"))
        .draw()?;
    for (k, cv) in cs.iter().enumerate() {
        let band: Vec<(f64, f64)> = cv
            .points
            .iter()
            .filter_map(|p| Some((p.seconds, p.acc, p.acc_ci95.filter(|c| c.is_finite())?)))
            .map(|(x, m, ci)| (x, ((m + ci).min(1.0)) * 100.0))
            .chain(
                cv.points
                    .iter()
                    .rev()
                    .filter_map(|p| Some((p.seconds, p.acc, p.acc_ci95.filter(|c| c.is_finite())?)))
                    .map(|(x, m, ci)| (x, ((m - ci).max(0.0)) * 100.0)),
            )
            .collect();
        if band.len() > 2 {
            c.draw_series(std::iter::once(Polygon::new(band, color(k).mix(0.18))))?;
        }
        let line: Vec<(f64, f64)> = cv
            .points
            .iter()
            .map(|p| (p.seconds, p.acc * 100.0))
            .collect();
        c.draw_series(LineSeries::new(
            line.iter().copied(),
            color(k).stroke_width(2),
        ))?;
        let dot = if cv.noisy > 0 {
            color(k).stroke_width(2)
        } else {
            color(k).filled()
        };
        c.draw_series(line.iter().map(|p| Circle::new(*p, 4, dot)))?;
        // The same interval as a bar at each evaluation: a band needs two
        // evaluations, a bar shows it at one too.
        c.draw_series(cv.points.iter().filter_map(|p| {
            let ci = p.acc_ci95.filter(|c| c.is_finite())?;
            Some(PathElement::new(
                vec![
                    (p.seconds, (p.acc - ci).max(0.0) * 100.0),
                    (p.seconds, (p.acc + ci).min(1.0) * 100.0),
                ],
                color(k).stroke_width(1),
            ))
        }))?;
    }
    c.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, r.target * 100.0), (xmax, r.target * 100.0)],
        TARGET.stroke_width(2),
    )))?;
    Ok(())
}

/// Which files a chart is written as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotFormat {
    Png,
    Svg,
    #[default]
    Both,
}

/// The user's choices for exported charts (`report --plots-format --plots-size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlotOptions {
    pub format: PlotFormat,
    /// Every chart at this size in pixels instead of its own.
    pub size: Option<(u32, u32)>,
    pub theme: PlotTheme,
}

/// "WIDTHxHEIGHT" in pixels, each from 200 to 8000.
pub fn parse_plot_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!("--plots-size {s}: give WIDTHxHEIGHT in pixels, e.g. 1600x900 (200 to 8000 each)")
    };
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (
        w.trim().parse().map_err(|_| bad())?,
        h.trim().parse().map_err(|_| bad())?,
    );
    if !(200..=8000).contains(&w) || !(200..=8000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

fn both(
    out: &Path,
    name: &str,
    size: (u32, u32),
    opts: &PlotOptions,
    draw: &dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res,
    draw_svg: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res,
) -> Result<Vec<PathBuf>> {
    let size = opts.size.unwrap_or(size);
    let png = out.join(format!("{name}.png"));
    let svg = out.join(format!("{name}.svg"));
    let mut files = Vec::new();
    if opts.format != PlotFormat::Svg {
        write_png(&png, name, size, draw)?;
        files.push(png);
    }
    if opts.format != PlotFormat::Png {
        write_svg(&svg, name, size, draw_svg)?;
        files.push(svg);
    }
    Ok(files)
}

fn write_png(
    png: &Path,
    name: &str,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res,
) -> Result<()> {
    let (w, h) = size;
    let mut rgb = vec![0u8; (w as usize) * (h as usize) * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(&root).map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
    }
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(&rgb, w, h, image::ExtendedColorType::Rgb8)
        .with_context(|| format!("encoding {}", png.display()))?;
    crate::util::write_atomic(png, &bytes)
}

fn write_svg(
    svg: &Path,
    name: &str,
    size: (u32, u32),
    draw_svg: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res,
) -> Result<()> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        draw_svg(&root).map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", svg.display()))?;
    }
    crate::util::write_atomic(svg, text.as_bytes())
}

/// Writes every chart into `out` as `opts` asks; returns the files.
pub fn write_all(
    r: &Report,
    dirs: &[PathBuf],
    out: &Path,
    opts: &PlotOptions,
) -> Result<Vec<PathBuf>> {
    register_font();
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut runs = Vec::new();
    for d in dirs {
        runs.extend(
            crate::store::read_runs(&d.join("runs.parquet"))?
                .into_iter()
                .filter(|x| x.status == crate::store::Ended::Done)
                .filter(|x| !(r.dropped_noisy && x.noisy == Some(true))),
        );
    }
    let cs = curves(dirs)?;
    // Each run on its variant's headline clock, as the tables have it.
    let clock_of = |row: &crate::store::RunRow| {
        r.rows
            .iter()
            .find(|x| x.matrix == row.matrix && x.index == row.index as usize)
            .map(|x| x.headline)
            .or(r.clock)
            .unwrap_or_else(|| crate::report::clock_of_recipe(&row.recipe))
    };
    let ts = time_curves(dirs, &clock_of, r.dropped_noisy)?;
    let tta = tta_words(&runs);
    let theme = Theme::of(opts.theme);
    let t = &theme;
    let h = (160 + 60 * r.rows.len() as u32).clamp(420, 1400);
    type Png<'a> = &'a dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res;
    type Svg<'a> = &'a dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res;
    let charts: [(&str, (u32, u32), Png, Svg); 5] = [
        ("ladder", (1400, h + 60), &|a| ladder(a, r, tta, t), &|a| {
            ladder(a, r, tta, t)
        }),
        (
            "accuracy",
            (1200, h + 40),
            &|a| accuracy(a, r, &runs, t),
            &|a| accuracy(a, r, &runs, t),
        ),
        (
            "curves",
            (1200, 1000),
            &|a| curves_chart(a, &cs, r, t),
            &|a| curves_chart(a, &cs, r, t),
        ),
        ("pareto", (1100, 800), &|a| pareto(a, r, tta, t), &|a| {
            pareto(a, r, tta, t)
        }),
        (
            "time_to_accuracy",
            (1200, 750),
            &|a| time_to_accuracy(a, r, &ts, tta, t),
            &|a| time_to_accuracy(a, r, &ts, tta, t),
        ),
    ];
    let mut files = Vec::new();
    for (name, size, png, svg) in charts {
        if crate::util::signals::stopping() {
            // Stopped: the files written so far, and no more.
            return Ok(files);
        }
        files.extend(both(out, name, size, opts, png, svg)?);
    }
    // Only a report with a designed matrix has these: every other report's
    // charts stay as they were.
    files.extend(effects::write(r, out, opts, tta, t)?);
    Ok(files)
}

/// Each rung's time night by night (`report --history`): one line per rung,
/// CI whiskers where a night had n ≥ 2.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: notes, legend, axes, lines, whiskers"
)]
fn history_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    nights: &[crate::report::history::Night],
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let mut dates: Vec<&str> = nights.iter().map(|n| n.night.as_str()).collect();
    dates.sort();
    dates.dedup();
    let x_of = |n: &crate::report::history::Night| {
        dates.iter().position(|d| *d == n.night).unwrap_or(0) as f64
    };
    let finite = |v: f64| v.is_finite().then_some(v);
    let tmax = nights
        .iter()
        .filter_map(|n| finite(n.time_s + finite(n.time_ci95).unwrap_or(0.0)))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.1;
    let last = (dates.len().max(2) - 1) as f64;
    let rungs = crate::report::history::rungs(nights);
    let cut = nights
        .iter()
        .any(|n| n.time_ci95.is_finite() && time_whisker(n.time_s, n.time_ci95).2);
    let root = root.titled("Each rung's time, night by night", t.font(24))?;
    let root = if cut {
        titled_wrapped(&root, CUT_NOTE, t.font(14))?
    } else {
        root
    };
    let legend: Vec<(String, Mark)> = rungs
        .iter()
        .enumerate()
        .map(|(k, (idx, v))| (format!("{idx} {v}"), Mark::Line(color(k))))
        .collect();
    let root = with_legend(&root, &legend, t)?;
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.3..(last + 0.3), 0.0..tmax)?;
    let labels: Vec<String> = dates
        .iter()
        .map(|d| d.get(..10).unwrap_or(d).to_string())
        .collect();
    t.axes(c.configure_mesh(), 16)
        .x_labels(dates.len().min(12))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("full-run time (s), each recipe's clock")
        .draw()?;
    for (k, (idx, v)) in rungs.iter().enumerate() {
        let pts: Vec<(f64, f64, f64)> = nights
            .iter()
            .filter(|n| n.index == *idx && n.variant == *v && n.time_s.is_finite())
            .map(|n| (x_of(n), n.time_s, n.time_ci95))
            .collect();
        let col = color(k);
        c.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.0, p.1)),
            col.stroke_width(2),
        ))?;
        c.draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 4, col.filled())))?;
        for p in pts.iter().filter(|p| p.2.is_finite()) {
            let (a, b, clipped) = time_whisker(p.1, p.2);
            c.draw_series(std::iter::once(PathElement::new(
                vec![(p.0, a), (p.0, b)],
                col.stroke_width(1),
            )))?;
            if clipped {
                cut_arrow(&mut c, (p.0, a), CUT_DOWN, col.stroke_width(2))?;
            }
        }
    }
    Ok(())
}

/// Writes `history.png` and `history.svg` into `out`.
pub fn write_history(
    nights: &[crate::report::history::Night],
    out: &Path,
    opts: &PlotOptions,
) -> Result<Vec<PathBuf>> {
    register_font();
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let theme = Theme::of(opts.theme);
    both(
        out,
        "history",
        (1400, 700),
        opts,
        &|a| history_chart(a, nights, &theme),
        &|a| history_chart(a, nights, &theme),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text sizes the charts use, every one even (see `FAMILY`).
    const TEXT_SIZES: [u32; 5] = [14, 16, 18, 24, 26];

    #[test]
    fn glyphs_share_their_baseline() {
        register_font();
        let sizes: Vec<u32> = {
            let src = concat!(include_str!("charts.rs"), include_str!("charts/effects.rs"));
            // `t.font(N)` and the axes' `t.axes(mesh, N)`.
            let mut v: Vec<u32> = src
                .match_indices("t.font(")
                .filter_map(|(i, _)| src[i + 7..].split(')').next()?.parse().ok())
                .chain(src.match_indices("t.axes(").filter_map(|(i, _)| {
                    src[i..]
                        .split(')')
                        .nth(1)?
                        .trim_start_matches(',')
                        .trim()
                        .parse()
                        .ok()
                }))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        assert_eq!(
            sizes, TEXT_SIZES,
            "a text size was added: keep it even and list it"
        );
        for size in TEXT_SIZES {
            let (w, h) = (200u32, 60u32);
            let mut buf = vec![255u8; (w * h * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
                root.draw(&Text::new("8 . 8", (4, 4), (FAMILY, size as f64)))
                    .unwrap();
                root.present().unwrap();
            }
            // The lowest inked row of each column, then of each glyph (gaps split them).
            let bottoms: Vec<Option<u32>> = (0..w)
                .map(|x| (0..h).rfind(|&y| buf[((y * w + x) * 3) as usize] < 160))
                .collect();
            let mut glyphs: Vec<u32> = Vec::new();
            let mut cur: Option<u32> = None;
            for b in bottoms {
                match (b, cur) {
                    (Some(b), Some(c)) => cur = Some(c.max(b)),
                    (Some(b), None) => cur = Some(b),
                    (None, Some(c)) => {
                        glyphs.push(c);
                        cur = None;
                    }
                    (None, None) => {}
                }
            }
            assert_eq!(glyphs.len(), 3, "size {size}: {glyphs:?}");
            assert!(
                glyphs[1].abs_diff(glyphs[0]) == 0 && glyphs[2] == glyphs[0],
                "size {size}: the decimal point's bottom {} is not the digits' {}",
                glyphs[1],
                glyphs[0]
            );
        }
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one set of charts checked file by file"
    )]
    fn charts_are_valid_png_and_svg() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "c", "").unwrap();
        for (i, v) in [
            "baseline",
            "+ a rather long trick name that needs abbreviating",
            "+ celu",
        ]
        .iter()
        .enumerate()
        {
            for rep in 0..2 {
                crate::store::tests::feed(
                    &mut w,
                    crate::store::tests::rid(v, i, rep),
                    rep as u64,
                    Some(crate::store::tests::summary(
                        0.5 + 0.05 * i as f64 + 0.01 * rep as f64,
                        10.0 - 2.0 * i as f64,
                        Some(5.0),
                    )),
                );
            }
        }
        let dir = w.dir().to_path_buf();
        let report =
            crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let files = write_all(
            &report,
            std::slice::from_ref(&dir),
            &dir,
            &PlotOptions::default(),
        )
        .unwrap();
        // 5 charts, each as PNG and SVG.
        assert_eq!(files.len(), 10);
        for f in &files {
            let b = std::fs::read(f).unwrap();
            match f.extension().unwrap().to_str().unwrap() {
                "png" => assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display()),
                "svg" => assert!(
                    String::from_utf8_lossy(&b).contains("<svg") && b.len() > 1000,
                    "{}",
                    f.display()
                ),
                other => panic!("{other}: not a chart"),
            }
        }
        // Names are whole on the category axes and in the legends.
        for chart in ["ladder", "accuracy", "curves", "time_to_accuracy"] {
            let svg = std::fs::read_to_string(dir.join(format!("{chart}.svg"))).unwrap();
            assert!(
                svg.contains("+ a rather long trick name that needs abbreviating"),
                "{chart}"
            );
        }
        // The loss panel (across the top, axis at the left) labels its log axis with losses, not only powers of ten.
        let svg = std::fs::read_to_string(dir.join("curves.svg")).unwrap();
        let loss_ticks = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| {
                let x: f64 = t.split("x=\"").nth(1)?.split('"').next()?.parse().ok()?;
                let body = t.split('>').nth(1)?.split('<').next()?.trim();
                (x < 100.0).then(|| body.parse::<f64>().ok()).flatten()
            })
            .filter(|v| (0.5..=2.5).contains(v))
            .count();
        assert!(loss_ticks >= 4, "{loss_ticks} loss tick labels");
        let cs = curves(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(cs.len(), 3);
        // Format and size as asked: SVG only, every chart 800x400.
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            size: Some((800, 400)),
            ..Default::default()
        };
        let only = root.path().join("svg-only");
        let r0 = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let written = write_all(&r0, std::slice::from_ref(&dir), &only, &opts).unwrap();
        assert_eq!(written.len(), 5);
        for f in &written {
            assert_eq!(f.extension().unwrap(), "svg");
            let t = std::fs::read_to_string(f).unwrap();
            assert!(
                t.contains("width=\"800\"") && t.contains("height=\"400\""),
                "{}",
                f.display()
            );
        }
        // At 800 pixels the long name is shortened to its axis, not drawn over the bars.
        let small = std::fs::read_to_string(only.join("ladder.svg")).unwrap();
        assert!(
            small.contains("+ a rather long") && small.contains('…'),
            "{small}"
        );
        assert_eq!(parse_plot_size("1600x900"), Ok((1600, 900)));
        assert!(parse_plot_size("16x9").is_err() && parse_plot_size("wide").is_err());
        // An infinite time (a damaged table) is left out instead of hanging the axis.
        let mut r =
            crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        r.rows[0].dawn.mean = f64::INFINITY;
        r.rows[1].dawn.ci95 = f64::INFINITY;
        let out = root.path().join("inf");
        assert!(
            !write_all(
                &r,
                std::slice::from_ref(&dir),
                &out,
                &PlotOptions::default()
            )
            .unwrap()
            .is_empty()
        );
        // A damaged step file is named.
        let bad = dir.join("steps").join("zz-damaged.parquet");
        std::fs::write(&bad, b"PAR1 not really").unwrap();
        let e = format!("{:#}", curves(std::slice::from_ref(&dir)).err().unwrap());
        assert!(
            e.contains("zz-damaged.parquet") && e.contains("delete it"),
            "{e}"
        );
        std::fs::remove_file(&bad).unwrap();
        assert_eq!(cs[0].points.len(), 3);
        assert!((cs[0].points[0].1 - 2.0).abs() < 1e-9);

        // Step files written without a matrix column (older stores) still aggregate.
        for e in std::fs::read_dir(dir.join("steps")).unwrap().flatten() {
            let mut df = crate::store::read_parquet(&e.path(), None).unwrap();
            let _ = df.drop_in_place("matrix").unwrap();
            crate::store::write_parquet(&e.path(), &mut df).unwrap();
        }
        let old = curves(&[dir]).unwrap();
        assert_eq!(old.len(), 3);
        assert_eq!(old[0].points, cs[0].points);
    }

    /// A report of three rungs with two seeds each, the same on every machine.
    fn fixed_store(root: &Path) -> PathBuf {
        let mut w = crate::store::ResultsWriter::create(root, "c", "").unwrap();
        for (i, v) in ["baseline", "+ label smoothing", "+ celu"]
            .iter()
            .enumerate()
        {
            for rep in 0..2 {
                crate::store::tests::feed(
                    &mut w,
                    crate::store::tests::rid(v, i, rep),
                    rep as u64,
                    Some(crate::store::tests::summary(
                        0.5 + 0.05 * i as f64 + 0.01 * rep as f64,
                        10.0 - 2.0 * i as f64 + 0.5 * rep as f64,
                        Some(5.0),
                    )),
                );
            }
        }
        w.dir().to_path_buf()
    }

    /// The SVGs are text: any change to a chart shows up here as a diff
    /// (insta: `cargo insta review`, or `INSTA_UPDATE=always`, after a change
    /// that is meant).
    #[test]
    fn svg_charts_match_their_snapshots_in_both_themes() {
        let root = tempfile::tempdir().unwrap();
        let dir = fixed_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        for theme in [PlotTheme::Light, PlotTheme::Dark] {
            let opts = PlotOptions {
                format: PlotFormat::Svg,
                size: Some((1000, 500)),
                theme,
            };
            let out = root.path().join(format!("{theme:?}"));
            let files = write_all(&r, std::slice::from_ref(&dir), &out, &opts).unwrap();
            for f in files {
                let name = format!(
                    "chart_{}_{}",
                    f.file_stem().unwrap().to_string_lossy(),
                    format!("{theme:?}").to_lowercase()
                );
                let got = std::fs::read_to_string(&f).unwrap();
                insta::with_settings!({
                    snapshot_path => "../tests/snapshots",
                    prepend_module_to_snapshot => false,
                    omit_expression => true,
                }, {
                    insta::assert_snapshot!(name, got);
                });
            }
            // The theme reaches the background and the text.
            let ladder = std::fs::read_to_string(out.join("ladder.svg")).unwrap();
            let (bg, fg) = match theme {
                PlotTheme::Light => ("#FFFFFF", "#000000"),
                PlotTheme::Dark => ("#18181C", "#E1E1E1"),
            };
            assert!(
                ladder.contains(&format!("fill=\"{bg}\""))
                    && ladder.contains(&format!("fill=\"{fg}\"")),
                "{theme:?}"
            );
        }
    }

    /// One run fed with its own evaluations: (test accuracy, training
    /// seconds of the epoch) per epoch, its DAWNBench-style total `dawn`,
    /// and `noise` for a run whose seconds are not to be trusted.
    fn feed_evals(
        w: &mut crate::store::ResultsWriter,
        run: crate::events::RunId,
        seed: u64,
        evals: &[(f64, f64)],
        dawn: f64,
        noise: Option<&str>,
    ) {
        use crate::events::{EpochRow, Event};
        let config = std::sync::Arc::new(serde_json::json!({
            "recipe": "tiny", "tricks_on": [], "overrides": [],
            "data_name": "d", "data_hash": "h",
            "resolved": {"clock": "dawn", "tta_level": 0}
        }));
        w.on_event(&Event::RunStarted {
            run: run.clone(),
            seed,
            config,
            total_steps: 3,
            total_epochs: evals.len() as f64,
            target_acc: 0.5,
            device: "cpu".into(),
            reference: None,
        })
        .unwrap();
        for (e, (acc, train_s)) in evals.iter().enumerate() {
            let row = EpochRow {
                epoch: e + 1,
                steps: 3 * (e as u64 + 1),
                train_loss: 1.0,
                train_acc: 0.5,
                test_acc: *acc,
                test_acc_tta: None,
                train_s: *train_s,
                eval_s: 0.5,
                images_per_s: 10.0,
                peak_mem_bytes: None,
                loader_s: 0.0,
                loader_images_per_s: None,
            };
            w.on_event(&Event::Epoch {
                run: run.clone(),
                row,
            })
            .unwrap();
        }
        let mut summary = crate::store::tests::summary(evals.last().unwrap().0, dawn, None);
        summary.acc_tta = summary.acc;
        summary.noise = noise.map(str::to_string);
        w.on_event(&Event::RunFinished { run, summary }).unwrap();
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one fixture, then each clock, --drop-noisy and the chart checked on it"
    )]
    fn accuracy_against_time_is_the_mean_and_t_interval_over_seeds() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "t", "").unwrap();
        let rid = crate::store::tests::rid;
        // Two seeds of the baseline, the second evaluated once more slowly;
        // one seed of "+ celu".
        feed_evals(
            &mut w,
            rid("baseline", 0, 0),
            0,
            &[(0.30, 2.0), (0.50, 3.0)],
            5.1,
            None,
        );
        feed_evals(
            &mut w,
            rid("baseline", 0, 1),
            1,
            &[(0.40, 4.0), (0.60, 3.0)],
            7.1,
            None,
        );
        feed_evals(
            &mut w,
            rid("+ celu", 1, 0),
            0,
            &[(0.45, 1.0), (0.70, 1.0)],
            2.1,
            Some("busy"),
        );
        let dir = w.dir().to_path_buf();
        let cs = time_curves(std::slice::from_ref(&dir), &|_| Clock::Dawn, false).unwrap();
        assert_eq!(cs.len(), 2);
        let (base, celu) = (&cs[0], &cs[1]);
        assert_eq!(
            (base.variant.as_str(), base.runs, base.noisy),
            ("baseline", 2, 0)
        );
        assert_eq!(
            (celu.variant.as_str(), celu.runs, celu.noisy),
            ("+ celu", 1, 1)
        );
        // DAWNBench-style at an evaluation: preparation (0.1 s in the
        // summary) plus the training so far.
        let p = &base.points;
        assert_eq!(p.len(), 2);
        assert!(
            (p[0].seconds - (0.1 + (2.0 + 4.0) / 2.0)).abs() < 1e-9,
            "{p:?}"
        );
        assert!(
            (p[1].seconds - (0.1 + (5.0 + 7.0) / 2.0)).abs() < 1e-9,
            "{p:?}"
        );
        assert!((p[0].acc - 0.35).abs() < 1e-9 && (p[1].acc - 0.55).abs() < 1e-9);
        // Two seeds 0.1 apart: s = 0.1/√2, half-width t(0.975, 1) · s/√2 = 12.706 · 0.05.
        let t1 = (std::f64::consts::PI * (0.975 - 0.5)).tan();
        assert!((p[0].acc_ci95.unwrap() - t1 * 0.05).abs() < 1e-9, "{p:?}");
        assert_eq!(p[0].n, 2);
        // One seed: the mean and no interval.
        assert_eq!(celu.points[1].acc_ci95, None);
        assert!((celu.points[1].seconds - 2.1).abs() < 1e-9);
        // hlb: the training alone; airbench: whitening, training and that evaluation.
        let hlb = time_curves(std::slice::from_ref(&dir), &|_| Clock::Hlb, false).unwrap();
        assert!((hlb[0].points[0].seconds - 3.0).abs() < 1e-9);
        let air = time_curves(std::slice::from_ref(&dir), &|_| Clock::Airbench, false).unwrap();
        assert!((air[0].points[0].seconds - 3.5).abs() < 1e-9);
        // --drop-noisy: the noisy run leaves the curve as it leaves the tables.
        let kept = time_curves(std::slice::from_ref(&dir), &|_| Clock::Dawn, true).unwrap();
        assert_eq!(
            kept.len(),
            1,
            "{:?}",
            kept.iter().map(|c| &c.variant).collect::<Vec<_>>()
        );
        assert_eq!((kept[0].runs, kept[0].noisy), (2, 0));

        // The chart is written with the rest, and names the noisy run.
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        let files = write_all(&r, std::slice::from_ref(&dir), &dir, &opts).unwrap();
        assert!(
            files.contains(&dir.join("time_to_accuracy.svg")),
            "{files:?}"
        );
        let svg = std::fs::read_to_string(dir.join("time_to_accuracy.svg")).unwrap();
        assert!(svg.contains("Accuracy against time"), "{svg}");
        assert!(svg.contains("1 + celu · 1 of 1 noisy"), "{svg}");
        // A band (the CI) for the baseline, evaluated by two seeds.
        assert!(svg.contains("<polygon"), "{svg}");
        // No run used TTA: no chart says it did.
        for f in &files {
            let t = std::fs::read_to_string(f).unwrap();
            assert!(!t.contains("TTA"), "{}", f.display());
        }
    }

    /// A store where "+ celu" has a noisy run and the baseline's two seeds
    /// are so far apart that the time CI reaches below 0 s.
    fn noisy_store(root: &Path) -> PathBuf {
        let mut w = crate::store::ResultsWriter::create(root, "n", "").unwrap();
        let rid = crate::store::tests::rid;
        feed_evals(&mut w, rid("baseline", 0, 0), 0, &[(0.50, 1.0)], 1.0, None);
        feed_evals(&mut w, rid("baseline", 0, 1), 1, &[(0.52, 9.0)], 9.0, None);
        feed_evals(
            &mut w,
            rid("+ celu", 1, 0),
            0,
            &[(0.60, 1.0)],
            0.5,
            Some("busy"),
        );
        feed_evals(&mut w, rid("+ celu", 1, 1), 1, &[(0.61, 1.0)], 0.6, None);
        feed_evals(&mut w, rid("+ ema", 2, 0), 0, &[(0.55, 1.0)], 3.0, None);
        feed_evals(&mut w, rid("+ ema", 2, 1), 1, &[(0.56, 1.0)], 3.1, None);
        w.dir().to_path_buf()
    }

    #[test]
    fn noisy_runs_are_marked_and_kept_off_the_pareto_front() {
        let root = tempfile::tempdir().unwrap();
        let dir = noisy_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        write_all(&r, std::slice::from_ref(&dir), &dir, &opts).unwrap();
        let ladder = std::fs::read_to_string(dir.join("ladder.svg")).unwrap();
        // The count in the rung's label, and the legend for the marks.
        assert!(ladder.contains("· 1 of 2 noisy"), "{ladder}");
        assert_eq!(ladder.matches(" of 2 noisy").count(), 1, "{ladder}");
        assert!(ladder.contains("rung with noisy runs"), "{ladder}");
        let acc = std::fs::read_to_string(dir.join("accuracy.svg")).unwrap();
        assert!(acc.contains("run flagged noisy"), "{acc}");
        // "+ celu" is the fastest and most accurate, but its seconds are not
        // to be trusted: the front runs through the clean variants only.
        let pts = pareto_points(&r);
        assert_eq!(pts.iter().filter(|p| p.noisy).count(), 1);
        let front = pareto_front(&pts);
        let celu = pts.iter().find(|p| p.noisy).unwrap();
        assert!(!front.contains(&(celu.time, celu.acc)), "{front:?}");
        // ema (3.05 s, 55.5%) beats baseline (5 s, 51%) on both: the front is ema alone.
        assert_eq!(front.len(), 1, "{front:?}");
        let pareto = std::fs::read_to_string(dir.join("pareto.svg")).unwrap();
        assert!(
            pareto.contains("1 + celu · 1 of 2 noisy")
                && pareto.contains("variant with noisy runs"),
            "{pareto}"
        );
    }

    /// The polylines of an SVG as their points.
    pub(super) fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .filter_map(|p| {
                let pts = p.split("points=\"").nth(1)?.split('"').next()?;
                Some(
                    pts.split_whitespace()
                        .filter_map(|xy| {
                            let (x, y) = xy.split_once(',')?;
                            Some((x.parse().ok()?, y.parse().ok()?))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn pareto_has_error_bars_and_cut_whiskers_say_so() {
        let root = tempfile::tempdir().unwrap();
        let dir = noisy_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        write_all(&r, std::slice::from_ref(&dir), &dir, &opts).unwrap();
        let pareto = std::fs::read_to_string(dir.join("pareto.svg")).unwrap();
        let lines = polylines(&pareto);
        // Each of the three variants (n = 2) has a vertical accuracy bar.
        let vertical = lines
            .iter()
            .filter(|l| l.len() == 2 && l[0].0 == l[1].0 && l[0].1 != l[1].1)
            .count();
        assert!(vertical >= 3, "{vertical} vertical bars: {lines:?}");
        // The baseline's time CI (1 s and 9 s: 5 ± 50.8 s) is cut at 0 and says so.
        assert_eq!(time_whisker(5.0, 50.8), (0.0, 55.8, true));
        assert_eq!(time_whisker(5.0, 1.0), (4.0, 6.0, false));
        assert!(pareto.contains(CUT_NOTE), "{pareto}");
        let ladder = std::fs::read_to_string(dir.join("ladder.svg")).unwrap();
        assert!(ladder.contains(CUT_NOTE), "{ladder}");
        // The arrowhead at the cut end: three points, the middle one foremost.
        assert!(
            polylines(&ladder)
                .iter()
                .any(|l| l.len() == 3 && l[0].0 == l[2].0 && l[1].0 < l[0].0),
            "{ladder}"
        );
        // A chart whose whiskers stay above 0 carries no such note.
        let fixed = fixed_store(root.path());
        let r =
            crate::report::aggregate(std::slice::from_ref(&fixed), &Default::default()).unwrap();
        write_all(&r, std::slice::from_ref(&fixed), &fixed, &opts).unwrap();
        let ladder = std::fs::read_to_string(fixed.join("ladder.svg")).unwrap();
        assert!(!ladder.contains(CUT_NOTE));
    }

    #[test]
    fn a_long_subtitle_wraps_inside_the_canvas() {
        register_font();
        let long = "AMD EPYC 7763 64-Core Processor (16 cores); GPU NVIDIA H100 80GB HBM3 · data cifar10 (hash 0123456789abcdef) · 27 finished, 3 per variant, 6 flagged noisy · dawn clock";
        let mut text = String::new();
        {
            let root = SVGBackend::with_string(&mut text, (500, 300)).into_drawing_area();
            let style = Theme::of(PlotTheme::Light).font(14);
            let lines = wrap(&root, long, &style, 476);
            assert!(lines.len() >= 3, "{lines:?}");
            assert_eq!(lines.join(" "), long, "no word lost");
            for l in &lines {
                assert!(root.estimate_text_size(l, &style).unwrap().0 <= 476, "{l}");
            }
            let below = titled_wrapped(&root, long, style).unwrap();
            // The area left for the chart starts under every line.
            assert!(
                below.get_base_pixel().1 >= 3 * 14,
                "{:?}",
                below.get_base_pixel()
            );
            root.present().unwrap();
        }
        // Each line is its own text element, centred on the canvas.
        let n = text.matches("<text").count();
        assert!(n >= 3, "{text}");
    }

    #[test]
    fn tta_is_named_only_where_runs_used_it() {
        let run = |level: u32| {
            let cfg = serde_json::json!({"resolved": {"tta_level": level}});
            let s = crate::store::tests::summary(0.9, 1.0, None);
            crate::store::RunRow::new(
                &crate::store::tests::rid("v", 0, 0),
                Some((0, &cfg, 0.9)),
                crate::store::Ended::Done,
                None,
                Some(&s),
            )
        };
        assert_eq!(tta_words(&[run(0), run(0)]), "");
        assert_eq!(tta_words(&[run(2), run(1)]), " (TTA)");
        assert_eq!(tta_words(&[run(0), run(2)]), " (TTA where the run used it)");
    }

    #[test]
    fn history_whiskers_cut_at_0_say_so_and_names_stay_whole() {
        let root = tempfile::tempdir().unwrap();
        let long = "B5 + ghost BN with a name longer than thirty characters";
        let mut csv = String::from(
            "night,folder,git_commit,data_hash,matrix,index,variant,clock,n,time_s,time_ci95,acc_tta,acc_tta_ci95,verdict\n",
        );
        for (night, ci) in [
            ("2026-11-23T02:00:00Z", 1.0),
            ("2026-11-24T02:00:00Z", 30.0),
        ] {
            csv += &format!("{night},f,c,h,m,0,baseline,dawn,2,10.0,1.0,0.9,0.01,no change\n");
            csv += &format!("{night},f,c,h,m,1,{long},dawn,2,8.0,{ci},0.9,0.01,no change\n");
        }
        std::fs::write(root.path().join("history.csv"), csv).unwrap();
        let nights = crate::report::history::load(root.path()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        let files = write_history(&nights, root.path(), &opts).unwrap();
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        // 8 ± 30 s reaches below 0: cut there, with the note and the arrowhead.
        assert!(svg.contains(CUT_NOTE), "{svg}");
        assert!(
            polylines(&svg)
                .iter()
                .any(|l| l.len() == 3 && l[0].1 == l[2].1 && l[1].1 > l[0].1),
            "{svg}"
        );
        assert!(svg.contains(&format!("1 {long}")), "{svg}");
    }
}
