//! Time against accuracy, with the Pareto front of the variants.

use super::parts::*;
use super::theme::*;
use crate::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A variant's place on the Pareto chart: mean time and accuracy (%) with
/// their 95% CI half-widths, and whether any of its runs was flagged noisy.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ParetoPoint {
    pub(super) time: f64,
    pub(super) time_ci: f64,
    pub(super) acc: f64,
    pub(super) acc_ci: f64,
    pub(super) index: usize,
    pub(super) variant: String,
    /// " · k of n noisy", or empty.
    pub(super) noisy_note: String,
    pub(super) noisy: bool,
}

pub(super) fn pareto_points(r: &Report) -> Vec<ParetoPoint> {
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
pub(super) fn pareto_front(pts: &[ParetoPoint]) -> Vec<(f64, f64)> {
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
pub(super) fn pareto<DB: DrawingBackend>(
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
