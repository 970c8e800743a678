//! Each rung's time night by night (`report --history`).

use super::parts::*;
use super::theme::*;
use super::{PlotOptions, both};
use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Each rung's time night by night (`report --history`): one line per rung,
/// CI whiskers where a night had n ≥ 2.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: notes, legend, axes, lines, whiskers"
)]
pub(super) fn history_chart<DB: DrawingBackend>(
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
