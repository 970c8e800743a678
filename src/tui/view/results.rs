//! The Results tab: each variant's time and accuracy with their CIs.

use super::Palette;
use super::table::{self, Column};
use crate::tui::state::{AppState, ResultRow, fmt_secs};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

/// A CI half-width, or "–" where one run (or none) cannot give one.
pub(super) fn ci_text(ci: f64, n: usize, digits: usize) -> String {
    if n >= 2 && ci.is_finite() {
        format!("{ci:.digits$}")
    } else {
        "–".into()
    }
}

/// A mean (written `shown`) with its 95% CI as the report writes it
/// (docs/reports.md): `± ci` from three runs; at two, whose t quantile of
/// 12.7 makes `±` wider than the scale, the interval itself within
/// `bounds`; `± –` at one.
pub(super) fn mean_ci_text(
    shown: &str,
    (mean, ci): (f64, f64),
    n: usize,
    digits: usize,
    bounds: (f64, f64),
) -> String {
    if n == 2 && ci.is_finite() && mean.is_finite() {
        let (lo, hi) = ((mean - ci).max(bounds.0), (mean + ci).min(bounds.1));
        format!("{shown} [{lo:.digits$}, {hi:.digits$}]")
    } else {
        format!("{shown} ± {}", ci_text(ci, n, digits))
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one table: columns chosen, rows built, drawn"
)]
pub(super) fn results(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    if s.results.is_empty() {
        f.render_widget(
            Paragraph::new("no finished runs yet: the table fills in as runs finish")
                .block(Block::bordered().title("results")),
            area,
        );
        return;
    }
    let sorted = s.sorted_results();
    let several = sorted.iter().any(|r| r.matrix != sorted[0].matrix);
    let prev_of = |row: &ResultRow| {
        s.results
            .iter()
            .filter(|r| r.matrix == row.matrix && r.index < row.index)
            .max_by_key(|r| r.index)
            .cloned()
    };
    let clocks: Vec<&str> = {
        let mut c: Vec<&str> = sorted.iter().map(|r| r.clock).collect();
        c.dedup();
        c
    };
    let time_head = format!("time ({}) ± CI", clocks.join("/"));
    // Each row's accuracy and time, written first: their columns are as
    // wide as the widest (an interval of two runs is wider than `± ci`).
    let acc_text = |r: &ResultRow| {
        mean_ci_text(
            &format!("{:.2}", 100.0 * r.acc_mean),
            (100.0 * r.acc_mean, 100.0 * r.acc_ci95),
            r.n,
            2,
            (0.0, 100.0),
        )
    };
    let time_text = |r: &ResultRow| {
        mean_ci_text(
            &fmt_secs(r.time_mean),
            (r.time_mean, r.time_ci95),
            r.n,
            1,
            (0.0, f64::INFINITY),
        )
    };
    let widest = |text: &dyn Fn(&ResultRow) -> String, least: usize| {
        sorted
            .iter()
            .map(|r| text(r).chars().count())
            .chain([least])
            .max()
            .unwrap_or(least)
    };
    let heads = [
        "variant",
        "n",
        "acc % ± 95% CI",
        "P≥tgt",
        "to target",
        time_head.as_str(),
        "speedup",
        "Δ s [95% CI]",
    ];
    // The variant, n, accuracy and time always; then P≥tgt, Δ, speedup and
    // time to target while they fit, each in its place.
    let columns = [
        Column::kept(VARIANT_MIN),
        Column::kept(4),
        Column::kept(widest(&acc_text, 14)),
        Column::optional(5, 1),
        Column::optional(9, 4),
        Column::kept(widest(&time_text, time_head.chars().count())),
        Column::optional(7, 3),
        Column::optional(25, 2),
    ];
    let fitted = table::fit(&columns, area.width.saturating_sub(2) as usize);
    let pick = |cells: Vec<Cell<'static>>| table::pick(&fitted, cells);
    let header = Row::new(pick(
        heads.iter().map(|h| Cell::from(h.to_string())).collect(),
    ))
    .style(Style::default().add_modifier(Modifier::BOLD));
    let mut rows: Vec<Row> = Vec::new();
    let mut matrix = "";
    for (i, r) in sorted.iter().enumerate() {
        if several && r.matrix != matrix {
            rows.push(
                Row::new(vec![Cell::from(format!("▸ {}", r.matrix))])
                    .style(Style::default().add_modifier(Modifier::BOLD)),
            );
        }
        matrix = &r.matrix;
        let prev = prev_of(r);
        let acc_style = match &prev {
            Some(p) if r.acc_mean >= p.acc_mean => pal.fg(Color::Green),
            Some(_) => pal.fg(Color::Red),
            None => Style::default(),
        };
        let time_style = match &prev {
            Some(p) if r.time_mean <= p.time_mean => pal.fg(Color::Green),
            Some(_) => pal.fg(Color::Red),
            None => Style::default(),
        };
        // `!`: noisy runs among the n (a busy machine, a throttled GPU);
        // `~`: data-bound (its time measures the loader as much as the net).
        let n = format!(
            "{}{}{}",
            r.n,
            if r.noisy > 0 { "!" } else { "" },
            if r.data_bound.is_some() { "~" } else { "" }
        );
        // A ratio or Δ read from noisy runs (this variant's or the one it is
        // read against) carries the same `!` where it is read.
        let first = s.results.iter().find(|x| x.matrix == r.matrix);
        let shaky = if r.noisy > 0
            || prev.as_ref().is_some_and(|p| p.noisy > 0)
            || first.is_some_and(|p| p.noisy > 0)
        {
            "!"
        } else {
            ""
        };
        let mut row = Row::new(pick(vec![
            Cell::from(r.variant.clone()),
            Cell::from(n),
            Cell::from(acc_text(r)).style(acc_style),
            Cell::from(format!("{:.2}", r.p_target)),
            Cell::from(r.ttt_mean.map(fmt_secs).unwrap_or_else(|| "-".into())),
            Cell::from(time_text(r)).style(time_style),
            // Against the rung before on a ladder, else against the reference.
            Cell::from(
                r.speedup_prev
                    .or(r.speedup_first)
                    .map(|x| format!("×{x:.2}{shaky}"))
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::from(
                r.delta_time
                    .map_or("-".into(), |d| format!("{}{shaky}", d.label(1.0))),
            ),
        ]));
        if i == s.results_selected {
            row = row.style(Style::default().add_modifier(Modifier::REVERSED));
        }
        rows.push(row);
    }
    // The variant's column takes what the others leave.
    let widths: Vec<Constraint> = fitted
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.map(|w| (i, w as u16)))
        .map(|(i, w)| {
            if i == 0 {
                Constraint::Min(w)
            } else {
                Constraint::Length(w)
            }
        })
        .collect();
    let title = format!(
        "results (sorted by {}, s to change; ! noisy, ~ data-bound)",
        s.sort.label()
    );
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        area,
    );
}

/// The narrowest the variant's column gets.
const VARIANT_MIN: usize = 16;
