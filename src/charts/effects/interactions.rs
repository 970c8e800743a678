//! The interaction plots (`interactions`): each response's largest pairs,
//! the mean response at the first factor low and high, one line for each
//! level of the second.

use super::shared::*;
use crate::charts::parts::*;
use crate::charts::theme::*;
use crate::report::Report;
use crate::report::effects::{Analysis, Effects, Estimate};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Interaction plots per response, the largest pairs first.
const MAX_PAIRS: usize = 3;

/// The ends of an axis that shows every value, `pad` of their span added
/// each side: the interaction plots' response axis, which has no labels
/// beside its points to make room for.
fn padded_range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    let span = (hi - lo).max(1e-6 * hi.abs().max(1.0));
    (lo - span * pad, hi + span * pad)
}

/// An interaction to plot: its estimate, its two factors' bits, and the
/// mean response at each of their four level pairs.
pub(super) type Pair<'a> = (&'a Estimate, (usize, usize), [[f64; 2]; 2]);

/// The largest interactions of a response that can be plotted, by size.
pub(super) fn top_pairs<'a>(e: &Effects, a: &'a Analysis) -> Vec<Pair<'a>> {
    let mut pairs: Vec<Pair<'a>> = a
        .effects
        .iter()
        .filter(|x| is_interaction(x) && x.estimate.is_finite())
        .filter_map(|x| {
            let (i, j) = e.pair(&x.term)?;
            Some((x, (i, j), a.two_way_means(i, j)?))
        })
        .collect();
    pairs.sort_by(|x, y| y.0.estimate.abs().total_cmp(&x.0.estimate.abs()));
    pairs.truncate(MAX_PAIRS);
    pairs
}

/// For each response with interactions, its largest pairs' interaction
/// plots in a row: the mean response at the first factor low and high,
/// one line with the second low and one with it high.
pub(super) fn interactions<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    e: &Effects,
    tta: &str,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<(&Analysis, Vec<Pair>)> = e
        .analyses
        .iter()
        .map(|a| (a, top_pairs(e, a)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let mut root = root.titled("Largest two-way interactions", t.font(24))?;
    for note in [
        setup_line(r),
        format!(
            "{} ({} runs): each point is the mean of the configurations' means at those two levels, over the other factors; parallel lines: no interaction",
            e.matrix, e.runs
        ),
        LOW_HIGH.to_string(),
    ] {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let cols = rows.iter().map(|(_, p)| p.len()).max().unwrap_or(1);
    let bands = root.split_evenly((rows.len().max(1), 1));
    for ((a, pairs), band) in rows.iter().zip(bands) {
        let u = Units::of(e, a, tta);
        // One y-axis across a response's panels, so that their slopes compare.
        let (y0, y1) = padded_range(
            pairs
                .iter()
                .flat_map(|p| p.2.iter().flatten().map(|m| m * u.scale)),
            0.12,
        );
        let panels = band.split_evenly((1, cols));
        for (p, panel) in pairs.iter().zip(panels) {
            pair_panel(&panel, e, p, &u, (y0, y1), t)?;
        }
    }
    Ok(())
}

/// One interaction plot: `A×B` with the first factor on the x-axis and a
/// line for each level of the second, each line's end named.
fn pair_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    e: &Effects,
    (x, (i, j), m): &Pair,
    u: &Units,
    (y0, y1): (f64, f64),
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let ci = if x.lo.is_finite() && x.hi.is_finite() {
        format!(" [{:+.2}, {:+.2}]", x.lo * u.scale, x.hi * u.scale)
    } else {
        String::new()
    };
    // The term and its estimate on lines of their own, so that panels
    // whose terms fit one line start their axes level.
    let area = titled_wrapped(area, &term_label(x), t.font(16))?;
    let area = titled_wrapped(
        &area,
        &format!("{}{ci}{}", u.signed(x.estimate), star(x)),
        t.font(16),
    )?;
    let (a, b) = (&e.factors[*i], &e.factors[*j]);
    let plot_w = area.dim_in_pixel().0.saturating_sub(64 + 24).max(1);
    let names = line_names(&area, b, plot_w * 9 / 20, t);
    // Room right of the lines for their names, and for the dots at the left.
    let (x0, x1) = room_for_labels(
        [0.0, 1.0].into_iter(),
        (24, widest(&area, &names, t) + GAP + 4),
        plot_w,
    );
    let mut c = ChartBuilder::on(&area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    t.axes(c.configure_mesh(), 16)
        .disable_x_mesh()
        .x_labels(3)
        .x_label_formatter(&|v: &f64| {
            if v.abs() < 0.01 {
                "low".into()
            } else if (v - 1.0).abs() < 0.01 {
                "high".into()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .max_light_lines(4)
        .x_desc(label(a, 28))
        .y_desc(&u.axis)
        .draw()?;
    let ends: Vec<f64> = (0..2).map(|lb| m[1][lb] * u.scale).collect();
    // The two names a text line apart at least, where the lines end close.
    let plot_h = area.dim_in_pixel().1.saturating_sub(44 + 24).max(1);
    let gap = (y1 - y0) * 18.0 / f64::from(plot_h);
    let mid = (ends[0] + ends[1]) / 2.0;
    let up = if ends[1] >= ends[0] { 1.0 } else { -1.0 };
    for (lb, name) in names.into_iter().enumerate() {
        let col = color(lb);
        let pts = [(0.0, m[0][lb] * u.scale), (1.0, m[1][lb] * u.scale)];
        c.draw_series(LineSeries::new(pts, col.stroke_width(3)))?;
        c.draw_series(pts.map(|p| Circle::new(p, 5, col.filled())))?;
        let side = if lb == 1 { up } else { -up };
        let y = if (ends[1] - ends[0]).abs() < gap {
            mid + side * gap / 2.0
        } else {
            ends[lb]
        };
        c.draw_series(std::iter::once(Text::new(
            name,
            (1.0 + f64::from(GAP) * (x1 - x0) / f64::from(plot_w), y),
            t.font(14)
                .color(&col)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )))?;
    }
    Ok(())
}

/// The names of an interaction plot's two lines, `B low` and `B high`, the
/// factor's name shortened with "…" until both fit `max` pixels.
fn line_names<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    b: &str,
    max: u32,
    t: &Theme,
) -> Vec<String> {
    let font = t.font(14);
    let fits = |s: &str| {
        area.estimate_text_size(s, &font)
            .map_or(true, |(w, _)| w <= max)
    };
    let mut keep = b.chars().count();
    while keep > 2 && !fits(&format!("{} high", label(b, keep))) {
        keep -= 1;
    }
    ["low", "high"]
        .iter()
        .map(|w| format!("{} {w}", label(b, keep)))
        .collect()
}
