//! Where each variant's seconds go: a stacked bar per variant of its mean
//! seconds a run in each stage of the training steps (the batch, the
//! forward, the backward, the optimiser) and in evaluation, so a rung that
//! buys seconds says in which stage (issue 48, item 4).

use super::parts::*;
use super::theme::*;
use crate::report::{Report, VariantStats};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The stacked stages, each with the column index in `VariantStats::stages`
/// ([`crate::report::STAGE_COLUMNS`]) and its colour's index.
const STACK: [(&str, usize, usize); 5] = [
    ("data", 0, 6),
    ("forward", 1, 0),
    ("backward", 2, 4),
    ("optimiser", 4, 1),
    ("evaluation", 5, 2),
];

/// Whether any variant recorded its stages (older folders did not).
pub(super) fn any(r: &Report) -> bool {
    r.rows.iter().any(|x| x.n > 0 && x.stages[0].is_some())
}

/// A variant's stacked segments: (name, colour, seconds). Where forward and
/// backward were one graph replay, one "forward+backward" segment.
fn segments(x: &VariantStats) -> Vec<(&'static str, usize, f64)> {
    let split = x.stages[1].is_some() && x.stages[2].is_some();
    let mut out = Vec::new();
    for (name, k, c) in STACK {
        let v = match (name, split) {
            ("forward", false) => continue,
            // Its own colour: not the backward's, which it holds with the forward.
            ("backward", false) => x.stages[3].map(|s| ("forward+backward", 3, s)),
            _ => x.stages[k].map(|s| (name, c, s)),
        };
        if let Some(seg) = v.filter(|s| s.2.is_finite()) {
            out.push(seg);
        }
    }
    out
}

pub(super) fn stages<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&t.bg)?;
    let rows: Vec<&VariantStats> = r
        .rows
        .iter()
        .filter(|x| x.n > 0 && x.stages[0].is_some())
        .collect();
    let n = rows.len().max(1);
    // A run on the graph path (replayed on a GPU, rehearsed on a CPU) marks
    // nothing between its forward and its backward.
    let unsplit = rows.iter().any(|x| x.stages[1].is_none());
    let mut notes = vec![
        setup_line(r),
        "mean seconds a run: each training step's stages, then every evaluation pass".to_string(),
    ];
    if unsplit {
        notes.push(
            "forward+backward: the graph path (one CUDA graph on a GPU) marks nothing between them"
                .into(),
        );
    }
    let mut root = root.titled("Where the seconds go, by stage", t.font(26))?;
    for note in &notes {
        root = titled_wrapped(&root, note, t.font(14))?;
    }
    let mut legend: Vec<(String, Mark)> = Vec::new();
    for x in &rows {
        for (name, c, _) in segments(x) {
            if !legend.iter().any(|(l, _)| l == name) {
                legend.push((name.to_string(), Mark::Filled(color(c))));
            }
        }
    }
    let root = with_legend(&root, &legend, t)?;
    let whole: Vec<String> = rows.iter().map(|x| x.variant.clone()).collect();
    let name_w = name_area(&root, &whole, t);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let names = names_fitting(&root, &whole, name_w, t);
    let total = |x: &VariantStats| segments(x).iter().map(|s| s.2).sum::<f64>();
    let tmax = rows
        .iter()
        .map(|x| total(x))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.25;
    let pos = |i: usize| (n - 1 - i) as f64;
    let mut c = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(name_w)
        .build_cartesian_2d(0.0..tmax, -0.6..(n as f64 - 0.4))?;
    t.axes(c.configure_mesh(), 16)
        .disable_y_mesh()
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|y| rung_label(&names, *y))
        .x_desc("seconds a run")
        .draw()?;
    for (i, x) in rows.iter().enumerate() {
        let y = pos(i);
        let mut from = 0.0;
        for (_, col, secs) in segments(x) {
            c.draw_series(std::iter::once(Rectangle::new(
                [(from, y - 0.32), (from + secs, y + 0.32)],
                color(col).mix(0.85).filled(),
            )))?;
            from += secs;
        }
        c.draw_series(std::iter::once(Text::new(
            format!("{} s", seconds(from)),
            (from + tmax / 100.0, y + 0.1),
            t.font(14),
        )))?;
    }
    Ok(())
}
