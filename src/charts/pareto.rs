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
    let tmax = t1 + tpad;
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
    // The key to the numbers beside the dots.
    legend.extend(pts.iter().map(|p| {
        let mark = if p.noisy {
            Mark::Hollow(color(p.index))
        } else {
            Mark::Filled(color(p.index))
        };
        (
            format!("{} {}{}", p.index, label(&p.variant, 40), p.noisy_note),
            mark,
        )
    }));
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
    // Each dot is numbered beside it, where the number overprints no other
    // number and no other dot (a leader line where it had to move away);
    // the legend under the chart says which variant each number is.
    let dots: Vec<(i32, i32)> = pts
        .iter()
        .map(|p| c.backend_coord(&(p.time, p.acc)))
        .collect();
    for p in &pts {
        let style = if p.noisy {
            color(p.index).stroke_width(2)
        } else {
            color(p.index).filled()
        };
        c.draw_series(std::iter::once(Circle::new((p.time, p.acc), DOT, style)))?;
    }
    let font = t.font(16);
    let sizes: Vec<(i32, i32)> = pts
        .iter()
        .map(|p| {
            let (w, h) = root.estimate_text_size(&p.index.to_string(), &font)?;
            Ok((w as i32 + 2, h as i32))
        })
        .collect::<Result<_, DrawingAreaErrorKind<DB::ErrorType>>>()?;
    // The plot's corners in pixels: labels stay inside it.
    let (xs, ys) = (
        c.plotting_area().get_x_range(),
        c.plotting_area().get_y_range(),
    );
    let area = (
        c.backend_coord(&(xs.start, ys.end)),
        c.backend_coord(&(xs.end, ys.start)),
    );
    // The labels are drawn on `root`, whose pixels start at its own corner.
    let base = root.get_base_pixel();
    let rel = |(x, y): (i32, i32)| (x - base.0, y - base.1);
    let places = place_labels(&dots, &sizes, area);
    for (i, p) in pts.iter().enumerate() {
        let (place, (w, h)) = (places[i], sizes[i]);
        if place.leader {
            root.draw(&PathElement::new(
                // From the dot to the label's nearest edge.
                vec![
                    rel(dots[i]),
                    rel((
                        dots[i].0.clamp(place.at.0, place.at.0 + w),
                        dots[i].1.clamp(place.at.1, place.at.1 + h),
                    )),
                ],
                color(p.index).mix(0.6).stroke_width(1),
            ))?;
        }
        root.draw(&Text::new(p.index.to_string(), rel(place.at), font.clone()))?;
    }
    Ok(())
}

/// A dot's radius in pixels.
const DOT: i32 = 6;

/// Where a dot's number goes: its top-left pixel, and whether it sits away
/// from its dot, joined to it by a leader line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LabelPlace {
    pub(super) at: (i32, i32),
    pub(super) leader: bool,
}

/// Places each dot's label (`sizes`, in pixels) in the plot `area`
/// (top-left, bottom-right): the first of the spots around its dot, ring
/// by ring outward, whose box overlaps no label placed before it and no
/// dot; from the second ring on it gets a leader line, so that a label
/// never reads as another dot's. Dots are taken from the top down.
pub(super) fn place_labels(
    dots: &[(i32, i32)],
    sizes: &[(i32, i32)],
    area: ((i32, i32), (i32, i32)),
) -> Vec<LabelPlace> {
    type Box = (i32, i32, i32, i32);
    let overlaps = |a: Box, b: Box| a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
    let dot_box = |(x, y): (i32, i32)| (x - DOT, y - DOT, x + DOT + 1, y + DOT + 1);
    let mut order: Vec<usize> = (0..dots.len()).collect();
    order.sort_by_key(|&i| (dots[i].1, dots[i].0));
    let mut placed: Vec<Box> = Vec::new();
    let mut out = vec![
        LabelPlace {
            at: (0, 0),
            leader: false
        };
        dots.len()
    ];
    for i in order {
        let ((x, y), (w, h)) = (dots[i], sizes[i]);
        // Right, left, above, below, then the diagonals; each ring further out.
        let spots = |r: i32| {
            let g = DOT + 3 + r;
            [
                (x + g, y - h / 2),
                (x - g - w, y - h / 2),
                (x - w / 2, y - g - h),
                (x - w / 2, y + g),
                (x + g, y - g - h),
                (x + g, y + g),
                (x - g - w, y - g - h),
                (x - g - w, y + g),
            ]
        };
        let free = |(ax, ay): (i32, i32)| {
            let b = (ax, ay, ax + w, ay + h);
            b.0 >= area.0.0
                && b.1 >= area.0.1
                && b.2 <= area.1.0
                && b.3 <= area.1.1
                && !placed.iter().any(|&q| overlaps(b, q))
                && !dots.iter().any(|&d| overlaps(b, dot_box(d)))
        };
        let step = h.max(8);
        let found = (0..40)
            .flat_map(|k| spots(k * step).into_iter().map(move |s| (k, s)))
            .find(|&(_, s)| free(s));
        // With no free spot in 40 rings (a plot smaller than its labels),
        // the first spot: overprinted, but still its dot's.
        let (ring, at) = found.unwrap_or((0, spots(0)[0]));
        placed.push((at.0, at.1, at.0 + w, at.1 + h));
        out[i] = LabelPlace {
            at,
            leader: ring > 0,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twelve dots within a few pixels of each other, as rungs that cost the
    /// same and score the same put them: every number gets a box of its
    /// own, inside the plot, covering no dot, and one moved off its dot has
    /// a leader line back to it.
    #[test]
    fn crowded_labels_never_overprint_each_other_or_a_dot() {
        let dots: Vec<(i32, i32)> = (0..12).map(|i| (400 + i % 3, 300 + i % 4)).collect();
        let sizes = vec![(18, 15); 12];
        let area = ((60, 40), (800, 600));
        let places = place_labels(&dots, &sizes, area);
        let bx = |i: usize| {
            let ((x, y), (w, h)) = (places[i].at, sizes[i]);
            (x, y, x + w, y + h)
        };
        let overlaps = |a: (i32, i32, i32, i32), b: (i32, i32, i32, i32)| {
            a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
        };
        for i in 0..12 {
            let b = bx(i);
            assert!(b.0 >= 60 && b.1 >= 40 && b.2 <= 800 && b.3 <= 600, "{b:?}");
            for (j, &d) in dots.iter().enumerate() {
                assert!(
                    i == j || !overlaps(b, bx(j)),
                    "labels {i} and {j}: {places:?}"
                );
                let dot = (d.0 - DOT, d.1 - DOT, d.0 + DOT + 1, d.1 + DOT + 1);
                assert!(!overlaps(b, dot), "label {i} covers dot {j}: {places:?}");
            }
        }
        // The first ring holds eight spots around a dot: the rest moved out.
        assert!(
            places.iter().filter(|p| p.leader).count() >= 4,
            "{places:?}"
        );
        // A lone dot's number sits right beside it, without a line.
        let lone = place_labels(&[(400, 300)], &[(18, 15)], area);
        assert_eq!(
            lone[0],
            LabelPlace {
                at: (400 + DOT + 3, 300 - 7),
                leader: false
            }
        );
    }
}
