//! The ladder: each rung's time to target with its 95% CI, and its Δ.

use super::parts::*;
use super::theme::*;
use crate::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Page's figure from our data: time per rung with CI whiskers, and accuracy
/// per rung with the target line. A rung with noisy runs says how many in its
/// label, its bar is hatched and its accuracy dot hollow.
#[allow(
    clippy::too_many_lines,
    reason = "one chart drawn top to bottom: axes, bars, labels, legend"
)]
pub(super) fn ladder<DB: DrawingBackend>(
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
    // Tick labels a bar's width apart at most, so a narrow chart's labels
    // do not run into each other.
    let ticks = |area: &DrawingArea<DB, Shift>| (area.dim_in_pixel().0 as usize / 70).clamp(3, 10);
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .x_labels(ticks(&left))
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
    // The axis title whole where it fits its panel, else its short form:
    // a title cut at the edge, or run into the time axis's, is lost.
    let long = format!("test accuracy %{tta} (mean ± 95% CI, clipped to 0-100)");
    let fits = right
        .estimate_text_size(&long, &t.font(16))
        .is_ok_and(|(w, _)| w + 40 <= right.dim_in_pixel().0);
    let desc = if fits {
        long
    } else {
        format!("acc %{tta}, mean ± 95% CI")
    };
    t.axes(a.configure_mesh(), 16)
        .disable_y_mesh()
        .y_labels(0)
        .max_light_lines(4)
        .x_labels(ticks(&right))
        .x_desc(desc)
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
