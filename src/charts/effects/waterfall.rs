//! The Shapley waterfall (`shapley`): each response from every factor low
//! to every factor high, one step a factor by its Shapley value.

use super::shared::*;
// The ladder's whisker note, not parts' (the time whiskers' arrowheads).
use super::shared::CUT_NOTE;
use crate::charts::parts::*;
use crate::charts::theme::*;
use crate::report::Report;
use crate::report::effects::{Analysis, Effects, Estimate};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A response's Shapley waterfall, if it has Shapley values and both ends
/// ran: the start (every factor low), each factor's value and its CI by
/// size, and the end (every factor high).
pub(super) struct Waterfall<'a> {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) steps: Vec<&'a Estimate>,
}

pub(super) fn waterfall_of<'a>(e: &Effects, a: &'a Analysis) -> Option<Waterfall<'a>> {
    let all = (1u32 << e.factors.len()) - 1;
    let mut steps: Vec<&Estimate> = a
        .shapley
        .iter()
        .filter(|s| s.estimate.is_finite())
        .collect();
    if steps.is_empty() {
        return None;
    }
    steps.sort_by(|x, y| y.estimate.abs().total_cmp(&x.estimate.abs()));
    Some(Waterfall {
        start: a.cell(0)?.mean,
        end: a.cell(all)?.mean,
        steps,
    })
}

/// Rows a waterfall panel takes: its steps and its two ends.
pub(super) fn waterfall_rows(w: &Waterfall) -> usize {
    w.steps.len() + 2
}

/// Where each waterfall step starts (the start, then the sum of the steps
/// before), and the extent the panel shows (see [`extent`]).
fn waterfall_at(w: &Waterfall, s: f64) -> (Vec<f64>, (f64, f64)) {
    let mut at = vec![w.start * s];
    for x in &w.steps {
        at.push(at[at.len() - 1] + x.estimate * s);
    }
    let reach = w.steps.iter().zip(&at).flat_map(|(x, a)| {
        [
            a + x.lo * s,
            a + x.hi * s,
            ladder_of(x).map_or(*a, |l| a + l.estimate * s),
        ]
    });
    let clip = extent(at.iter().copied().chain(reach).chain([w.end * s]));
    (at, clip)
}

/// Whether a waterfall cuts a ladder's whisker at its extent.
fn waterfall_cuts(w: &Waterfall, s: f64) -> bool {
    let (at, clip) = waterfall_at(w, s);
    w.steps
        .iter()
        .zip(&at)
        .any(|(x, a)| ladder_of(x).is_some_and(|l| cut_at(l, *a, s, clip)))
}

/// For each response with Shapley values, its waterfall from every factor
/// low to every factor high, one panel a response.
pub(super) fn shapley<DB: DrawingBackend>(
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
    let panels: Vec<(&Analysis, Waterfall)> = e
        .analyses
        .iter()
        .filter_map(|a| Some((a, waterfall_of(e, a)?)))
        .collect();
    let how = panels
        .first()
        .map(|(a, _)| method_of(a, true))
        .unwrap_or_default();
    let mut root = root.titled(
        "Shapley values: from every factor low to every factor high",
        t.font(24),
    )?;
    let cuts = panels
        .iter()
        .any(|(a, w)| waterfall_cuts(w, Units::of(e, a, tta).scale));
    let notes = [
        setup_line(r),
        format!("{} ({} runs): {how}", e.matrix, e.runs),
        "one step a factor, its Shapley value (its gain averaged over the orders of adding the factors), largest first; whisker: its 95% CI; *: the CI excludes 0".to_string(),
        LOW_HIGH.to_string(),
    ];
    for note in notes.into_iter().chain(cuts.then(|| CUT_NOTE.to_string())) {
        root = titled_wrapped(&root, &note, t.font(14))?;
    }
    let mut legend = vec![
        ("raises the response".to_string(), Mark::Filled(color(2))),
        ("lowers it".to_string(), Mark::Filled(color(3))),
        (
            "mean with every factor low, high".to_string(),
            Mark::Line(t.fg),
        ),
    ];
    let steps: Vec<&Estimate> = panels.iter().flat_map(|(_, w)| w.steps.clone()).collect();
    legend.extend(ladder_legend(&steps, t));
    let mut rest = with_legend(&root, &legend, t)?;
    let total: usize = panels.iter().map(|(_, w)| waterfall_rows(w) + 2).sum();
    let h = rest.dim_in_pixel().1 as usize;
    for (k, (a, w)) in panels.iter().enumerate() {
        let u = Units::of(e, a, tta);
        let area = if k + 1 == panels.len() {
            rest.clone()
        } else {
            let (top, bottom) =
                rest.split_vertically((h * (waterfall_rows(w) + 2) / total.max(1)) as u32);
            rest = bottom;
            top
        };
        waterfall_panel(&area, w, &u, t)?;
    }
    Ok(())
}

/// One waterfall: the start and the end as marks, each step a floating bar
/// from where the previous one ended, joined by thin connectors.
fn waterfall_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    w: &Waterfall,
    u: &Units,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let n = waterfall_rows(w);
    let mut names = vec!["every factor low".to_string()];
    names.extend(w.steps.iter().map(|x| x.term.clone()));
    names.push("every factor high".into());
    let name_w = name_area(area, &names, t);
    let whole: Vec<&str> = names.iter().map(String::as_str).collect();
    let names = names_fitting(area, &whole, name_w, t);
    let (at, clip) = waterfall_at(w, s);
    // Every value is written right of its bar, whisker or mark.
    let texts: Vec<String> = [u.level(w.start), u.level(w.end)]
        .into_iter()
        .chain(w.steps.iter().map(|x| effect_text(x, u)))
        .chain(
            w.steps
                .iter()
                .filter_map(|x| ladder_of(x))
                .map(|l| ladder_text(l, u)),
        )
        .collect();
    let credited = w.steps.iter().any(|x| ladder_of(x).is_some());
    let plot_w = area.dim_in_pixel().0.saturating_sub(name_w + 24).max(1);
    let (x0, x1) = room_for_labels(
        [clip.0, clip.1].into_iter(),
        (0, widest(area, &texts, t) + GAP + 4),
        plot_w,
    );
    let mut c = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(name_w)
        .caption(&u.what, t.font(18))
        .build_cartesian_2d(x0..x1, -0.6..(n as f64 - 0.4))?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc(format!("mean response ({})", u.unit))
        .draw()?;
    let y_of = |row: usize| (n - 1 - row) as f64;
    let gap = f64::from(GAP) * (x1 - x0) / f64::from(plot_w);
    for (row, v) in [(0, w.start), (n - 1, w.end)] {
        let y = y_of(row);
        c.draw_series(std::iter::once(PathElement::new(
            vec![(v * s, y - BAR), (v * s, y + BAR)],
            t.fg.stroke_width(4),
        )))?;
        beside(&mut c, u.level(v), (v * s + gap, y), false, t)?;
    }
    for (k, x) in w.steps.iter().enumerate() {
        waterfall_step(&mut c, x, (y_of(k + 1), at[k]), u, (gap, clip), credited, t)?;
    }
    // The last step's end to the end mark: they differ where a
    // configuration some order needs did not run.
    let (y, last) = (y_of(n - 1), at[at.len() - 1]);
    connector(&mut c, last, y, t)
}

/// The thin line from where the row above ended down to row `y`.
fn connector<DB: DrawingBackend>(c: &mut Chart2d<'_, DB>, x: f64, y: f64, t: &Theme) -> Res
where
    DB::ErrorType: 'static,
{
    c.draw_series(std::iter::once(PathElement::new(
        vec![(x, y + 1.0 - BAR), (x, y + BAR)],
        t.fg.mix(0.45).stroke_width(1),
    )))?;
    Ok(())
}

/// One factor's step: a bar from `from` by its Shapley value, its CI
/// around the step's end, and its value `gap` right of both. Where the
/// chart shows a ladder's credit (`credited`), the bar takes the upper part
/// of the row and the ladder's Δ, from the same start, the lower.
fn waterfall_step<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    x: &Estimate,
    (row, from): (f64, f64),
    u: &Units,
    (gap, clip): (f64, (f64, f64)),
    credited: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let to = from + x.estimate * s;
    connector(c, from, row, t)?;
    let (y, bar) = if credited {
        (row + BAR_UP, BAR_SHARED)
    } else {
        (row, BAR)
    };
    if let Some(l) = ladder_of(x) {
        ladder_mark(c, l, (from, row - LADDER_DOWN), clip, u, gap, true, t)?;
    }
    let col = if to >= from { color(2) } else { color(3) };
    c.draw_series(std::iter::once(Rectangle::new(
        [(from.min(to), y - bar), (from.max(to), y + bar)],
        col.mix(0.75).filled(),
    )))?;
    let mut right = from.max(to);
    if x.lo.is_finite() && x.hi.is_finite() {
        whisker(c, from + x.lo * s, from + x.hi * s, y, t)?;
        right = right.max(from + x.hi * s);
    }
    beside(c, effect_text(x, u), (right + gap, y), false, t)
}
