//! Accuracy as the seconds go by, each variant on its headline clock.

use super::parts::*;
use super::theme::*;
use crate::report::Report;
use crate::report::curves::TimeCurve;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Each variant's accuracy against seconds on its clock, per evaluation:
/// the mean over seeds, with the t-based 95% CI as a band where two or more
/// seeds were evaluated: how long a variant takes to reach any accuracy,
/// the target's included.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: bands, lines, target, legend"
)]
pub(super) fn time_to_accuracy<DB: DrawingBackend>(
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
