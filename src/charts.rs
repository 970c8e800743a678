//! Charts for write-ups, PNG and SVG, drawn with plotters and an embedded
//! font (assets/fonts/DejaVuSans.ttf) so they render on machines without
//! system fonts: the ladder, the accuracy distribution, the training curves
//! and time against accuracy with its Pareto front.

use crate::report::curves::{Curve, curves};
use crate::report::{Clock, Report};
use anyhow::{Context, Result};
use image::ImageEncoder as _;
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
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

/// Page's figure from our data: time per rung with CI whiskers, and accuracy per rung with the target line.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: axes, bars, labels, legend"
)]
fn ladder<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report, t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<_> = r.rows.iter().filter(|x| x.n > 0).collect();
    let n = rows.len().max(1);
    let root = root
        .titled("Ablation ladder: time per rung and accuracy", t.font(26))?
        .titled(
            &format!(
                "{}  (×: the previous rung's mean time over this rung's)",
                setup_line(r)
            ),
            t.font(14),
        )?;
    let (left, right) = root.split_horizontally((root.dim_in_pixel().0 as f64 * 0.62) as u32);
    let pos = |i: usize| (n - 1 - i) as f64;
    let names: Vec<String> = rows.iter().map(|x| label(&x.variant, 28)).collect();
    let tmax = rows
        .iter()
        .map(|x| x.time().mean + x.time().ci95.max(0.0))
        // A damaged or hand-edited table can hold an infinite time: an axis
        // to infinity never finishes placing its ticks.
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.18;
    let mut c = ChartBuilder::on(&left)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(230)
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
        c.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - 0.32), (s.mean, y + 0.32)],
            color(0).mix(0.75).filled(),
        )))?;
        if s.ci95.is_finite() {
            let (a, b) = ((s.mean - s.ci95).max(0.0), s.mean + s.ci95);
            c.draw_series(std::iter::once(PathElement::new(
                vec![(a, y), (b, y)],
                t.fg.stroke_width(2),
            )))?;
            c.draw_series([a, b].map(|v| {
                PathElement::new(vec![(v, y - 0.15), (v, y + 0.15)], t.fg.stroke_width(2))
            }))?;
        }
        let txt = match x.speedup_prev {
            Some(sp) => format!("{} s  ×{sp:.2}", seconds(s.mean)),
            None => format!("{} s", seconds(s.mean)),
        };
        c.draw_series(std::iter::once(Text::new(
            txt,
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
        .x_desc("test accuracy % (mean ± 95% CI, clipped to 0-100)")
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
        a.draw_series(std::iter::once(Circle::new((m, y), 6, color(2).filled())))?;
        a.draw_series(std::iter::once(Text::new(
            format!("{m:.1}%"),
            (m, y + 0.42),
            t.font(14),
        )))?;
    }
    a.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(t.bg.mix(0.8))
        .border_style(t.fg)
        .label_font(t.font(14))
        .draw()?;
    Ok(())
}

/// Every run's accuracy per variant, with the mean and the target line.
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
    let names: Vec<String> = rows.iter().map(|x| label(&x.variant, 28)).collect();
    let vals: Vec<f64> = runs
        .iter()
        .filter_map(|x| x.acc_tta)
        .chain([r.target])
        .collect();
    let lo = vals.iter().copied().fold(1.0, f64::min);
    let hi = vals.iter().copied().fold(0.0, f64::max);
    let pad = ((hi - lo) * 0.1).max(0.005);
    let root = root
        .titled("Accuracy per run (with TTA), by variant", t.font(24))?
        .titled(&setup_line(r), t.font(14))?;
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(230)
        .build_cartesian_2d(
            ((lo - pad).max(0.0) * 100.0)..((hi + pad).min(1.0) * 100.0),
            -0.6..(n as f64 - 0.4),
        )?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc("test accuracy %")
        .draw()?;
    target_line(&mut c, r.target, n)?;
    for (i, v) in rows.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let mine: Vec<f64> = runs
            .iter()
            .filter(|x| x.variant == v.variant && x.matrix == v.matrix)
            .filter_map(|x| x.acc_tta)
            .collect();
        let k = mine.len().max(1) as f64;
        c.draw_series(mine.iter().enumerate().map(|(j, a)| {
            Circle::new(
                (a * 100.0, y - 0.2 + 0.4 * (j as f64 + 0.5) / k),
                4,
                color(i).mix(0.8).filled(),
            )
        }))?;
        let m = v.acc_tta_mean * 100.0;
        c.draw_series(std::iter::once(PathElement::new(
            vec![(m, y - 0.35), (m, y + 0.35)],
            t.fg.stroke_width(3),
        )))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(t.bg.mix(0.8))
        .border_style(t.fg)
        .label_font(t.font(14))
        .draw()?;
    Ok(())
}

#[allow(
    clippy::too_many_lines,
    reason = "three panels sharing one legend, drawn in order"
)]
fn curves_chart<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, cs: &[Curve], t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let root = root.titled(
        "Training curves per variant (mean over seeds, band = min–max)",
        t.font(24),
    )?;
    let panels = root.split_evenly((1, 3));
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
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .caption("loss (log scale)", t.font(18))
        .build_cartesian_2d(0.0..xmax, lo.log10()..hi.log10())?;
    t.axes(loss.configure_mesh(), 14)
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
        ))?
        .label(label(&c.variant, 24))
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 16, y)], color(k).stroke_width(3))
        });
    }
    loss.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(t.bg.mix(0.85))
        .border_style(t.fg)
        .label_font(t.font(12))
        .draw()?;
    let lrmax = cs
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.4))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.05;
    let mut lr = ChartBuilder::on(&panels[1])
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .caption("learning rate", t.font(18))
        .build_cartesian_2d(0.0..xmax, 0.0..lrmax)?;
    t.axes(lr.configure_mesh(), 14).x_desc("epoch").draw()?;
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
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .caption("BN scale: mean |γ| over layers", t.font(18))
        .build_cartesian_2d(0.0..xmax, blo..bhi)?;
    t.axes(bn.configure_mesh(), 14).x_desc("epoch").draw()?;
    for (k, c) in cs.iter().enumerate() {
        bn.draw_series(LineSeries::new(
            c.points.iter().filter_map(|p| p.5.map(|b| (p.0, b))),
            color(k).stroke_width(2),
        ))?;
    }
    Ok(())
}

/// Time against accuracy per variant, the Pareto front (faster and more accurate) joined.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: frontier, points, labels, legend"
)]
fn pareto<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report, t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let pts: Vec<(f64, f64, usize, String)> = r
        .rows
        .iter()
        .filter(|x| x.n > 0)
        .map(|x| {
            (
                x.time().mean,
                x.acc_tta_mean * 100.0,
                x.index,
                x.variant.clone(),
            )
        })
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    // Zoomed to the points: rungs often differ by a few percent of their time.
    let t1 = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let t0 = pts.iter().map(|p| p.0).fold(t1, f64::min);
    let tpad = ((t1 - t0) * 0.12).max(t1 * 0.03);
    let tmin = (t0 - tpad).max(0.0);
    // Extra room on the right for the labels.
    let tmax = t1 + 3.0 * tpad;
    let accs: Vec<f64> = pts.iter().map(|p| p.1).chain([r.target * 100.0]).collect();
    let (lo, hi) = (
        accs.iter().copied().fold(100.0, f64::min),
        accs.iter().copied().fold(0.0, f64::max),
    );
    let pad = ((hi - lo) * 0.12).max(0.5);
    let root = root
        .titled("Time against accuracy (Pareto front joined)", t.font(24))?
        .titled(&setup_line(r), t.font(14))?;
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(tmin..tmax, (lo - pad)..(hi + pad))?;
    t.axes(c.configure_mesh(), 16)
        .max_light_lines(4)
        .x_desc(clock_name(r.clock))
        .y_desc("test accuracy % (TTA)")
        .draw()?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![(tmin, r.target * 100.0), (tmax, r.target * 100.0)],
        TARGET.stroke_width(2),
    )))?
    .label(format!("target {:.1}%", 100.0 * r.target))
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], TARGET.stroke_width(2)));
    let mut front: Vec<(f64, f64)> = pts
        .iter()
        .filter(|p| {
            !pts.iter()
                .any(|q| q.0 <= p.0 && q.1 >= p.1 && (q.0 < p.0 || q.1 > p.1))
        })
        .map(|p| (p.0, p.1))
        .collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    c.draw_series(std::iter::once(PathElement::new(
        front,
        color(0).stroke_width(2),
    )))?
    .label("Pareto front")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color(0).stroke_width(2)));
    // Labels placed top-down, each pushed below any earlier one it would overprint.
    let (xr, yr) = (tmax - tmin, hi - lo + 2.0 * pad);
    let mut order: Vec<&(f64, f64, usize, String)> = pts.iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for p in order {
        c.draw_series(std::iter::once(Circle::new(
            (p.0, p.1),
            6,
            color(p.2).filled(),
        )))?;
        let x = p.0 + xr * 0.01;
        let mut y = p.1;
        while placed
            .iter()
            .any(|q| (q.0 - x).abs() < xr * 0.22 && (q.1 - y).abs() < yr * 0.035)
        {
            y -= yr * 0.035;
        }
        placed.push((x, y));
        c.draw_series(std::iter::once(Text::new(
            format!("{} {}", p.2, label(&p.3, 18)),
            (x, y),
            t.font(14),
        )))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(t.bg.mix(0.85))
        .border_style(t.fg)
        .label_font(t.font(14))
        .draw()?;
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
                .filter(|x| x.status == crate::store::Ended::Done),
        );
    }
    let cs = curves(dirs)?;
    let theme = Theme::of(opts.theme);
    let mut files = Vec::new();
    let h = (160 + 60 * r.rows.len() as u32).clamp(420, 1400);
    if crate::util::signals::stopping() {
        // Stopped: the files written so far, and no more.
        return Ok(files);
    }
    files.extend(both(
        out,
        "ladder",
        (1400, h),
        opts,
        &|a| ladder(a, r, &theme),
        &|a| ladder(a, r, &theme),
    )?);
    if crate::util::signals::stopping() {
        // Stopped: the files written so far, and no more.
        return Ok(files);
    }
    files.extend(both(
        out,
        "accuracy",
        (1200, h),
        opts,
        &|a| accuracy(a, r, &runs, &theme),
        &|a| accuracy(a, r, &runs, &theme),
    )?);
    if crate::util::signals::stopping() {
        // Stopped: the files written so far, and no more.
        return Ok(files);
    }
    files.extend(both(
        out,
        "curves",
        (1800, 600),
        opts,
        &|a| curves_chart(a, &cs, &theme),
        &|a| curves_chart(a, &cs, &theme),
    )?);
    if crate::util::signals::stopping() {
        // Stopped: the files written so far, and no more.
        return Ok(files);
    }
    files.extend(both(
        out,
        "pareto",
        (1100, 750),
        opts,
        &|a| pareto(a, r, &theme),
        &|a| pareto(a, r, &theme),
    )?);
    Ok(files)
}

/// Each rung's time night by night (`report --history`): one line per rung,
/// CI whiskers where a night had n ≥ 2.
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
    let mut c = ChartBuilder::on(root)
        .caption("Each rung's time, night by night", t.font(24))
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
    let mut rungs: Vec<(usize, &str)> = nights
        .iter()
        .map(|n| (n.index, n.variant.as_str()))
        .collect();
    rungs.sort();
    rungs.dedup();
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
        ))?
        .label(format!("{idx} {}", label(v, 30)))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
        c.draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 4, col.filled())))?;
        c.draw_series(pts.iter().filter(|p| p.2.is_finite()).map(|p| {
            PathElement::new(
                vec![(p.0, (p.1 - p.2).max(0.0)), (p.0, p.1 + p.2)],
                col.stroke_width(1),
            )
        }))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(t.bg.mix(0.85))
        .border_style(t.fg)
        .label_font(t.font(14))
        .draw()?;
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
    const TEXT_SIZES: [u32; 6] = [12, 14, 16, 18, 24, 26];

    #[test]
    fn glyphs_share_their_baseline() {
        register_font();
        let sizes: Vec<u32> = {
            let src = include_str!("charts.rs");
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
        // 4 charts, each as PNG and SVG.
        assert_eq!(files.len(), 8);
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
        // The loss panel (left third) labels its log axis with losses, not only powers of ten.
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
        assert_eq!(written.len(), 4);
        for f in &written {
            assert_eq!(f.extension().unwrap(), "svg");
            let t = std::fs::read_to_string(f).unwrap();
            assert!(
                t.contains("width=\"800\"") && t.contains("height=\"400\""),
                "{}",
                f.display()
            );
        }
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
}
