//! Training curves: loss, learning rate and BN scale by step.

use super::parts::*;
use super::theme::*;
use crate::report::Report;
use crate::report::curves::Curve;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Loss across the width, learning rate and BN scale under it, and one
/// legend of full variant names beneath: legible when report.html fits the
/// chart to its 1200-pixel column.
#[allow(
    clippy::too_many_lines,
    reason = "three panels sharing one legend, drawn in order"
)]
pub(super) fn curves_chart<DB: DrawingBackend>(
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
        line_or_dot(
            &mut loss,
            c.points
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|p| (p.0, p.1.log10()))
                .collect(),
            color(k),
        )?;
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
        line_or_dot(
            &mut lr,
            c.points.iter().map(|p| (p.0, p.4)).collect(),
            color(k),
        )?;
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
        line_or_dot(
            &mut bn,
            c.points
                .iter()
                .filter_map(|p| p.5.map(|b| (p.0, b)))
                .collect(),
            color(k),
        )?;
    }
    Ok(())
}

/// A curve as a line, or as a dot where it has one point: a script that
/// reports once an epoch gives one point a variant in a one-epoch run, and
/// a line through one point draws nothing.
fn line_or_dot<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    points: Vec<(f64, f64)>,
    c: RGBColor,
) -> Res
where
    DB::ErrorType: 'static,
{
    if let [one] = points.as_slice() {
        chart.draw_series(std::iter::once(Circle::new(*one, 4, c.filled())))?;
    } else {
        chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?;
    }
    Ok(())
}
