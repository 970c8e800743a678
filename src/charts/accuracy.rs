//! The accuracy distribution of each variant's runs against the target.

use super::parts::*;
use super::theme::*;
use crate::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Every run's accuracy per variant, with the mean and the target line; a
/// run flagged noisy is a hollow dot.
pub(super) fn accuracy<DB: DrawingBackend>(
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
