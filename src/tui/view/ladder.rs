//! The Ladder tab: each rung's time as a bar, with its Δ.

use super::Palette;
use super::table::{self, Column};
use crate::tui::state::{AppState, fmt_secs};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

pub(super) fn ladder(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    let mut clocks: Vec<&str> = s.results.iter().map(|r| r.clock).collect();
    clocks.sort();
    clocks.dedup();
    let block = Block::bordered().title(format!(
        "ladder: full-run time per rung ({} clock), accuracy and Δ beside",
        if clocks.is_empty() {
            "each recipe's".to_string()
        } else {
            clocks.join("/")
        }
    ));
    if s.results.is_empty() {
        f.render_widget(Paragraph::new("no finished rungs yet").block(block), area);
        return;
    }
    let rows = {
        let mut r = s.clone_results_by_rung();
        r.retain(|x| x.time_mean.is_finite());
        r
    };
    let several = rows.iter().any(|r| r.matrix != rows[0].matrix);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{:>9} {:>6.2}% n={}{} {}",
                fmt_secs(r.time_mean),
                100.0 * r.acc_mean,
                r.n,
                if r.noisy > 0 { "!" } else { "" },
                r.delta_time
                    .map(|d| format!("Δ{}", d.label(1.0)))
                    .unwrap_or_default()
            )
        })
        .collect();
    // The numbers keep their room, the name at most a third of the width;
    // the bars take what is left.
    let longest = rows
        .iter()
        .map(|r| r.variant.chars().count())
        .max()
        .unwrap_or(4);
    let value_w = values.iter().map(|v| v.chars().count()).max().unwrap_or(0);
    let fitted = table::fit(
        &[
            Column::kept(longest.min(inner.width as usize / 3)),
            Column::fill(1, usize::MAX),
            Column::kept(value_w),
        ],
        inner.width as usize,
    );
    let (name_w, bar_w) = (fitted[0].unwrap_or(0), fitted[1].unwrap_or(1));
    let mut lines: Vec<Line> = Vec::new();
    let mut matrix = "";
    for (r, value) in rows.iter().zip(values) {
        // Bars scale within their own matrix (recipes' seconds differ by
        // orders of magnitude), and each matrix's head says to what.
        let max_t = slowest(&rows, &r.matrix);
        if several && r.matrix != matrix {
            lines.push(Line::from(Span::styled(
                format!(
                    "▸ {} (bars to its own scale: full bar {})",
                    r.matrix,
                    fmt_secs(max_t)
                ),
                Style::default().add_modifier(Modifier::BOLD),
            )));
        }
        matrix = &r.matrix;
        let n = ((r.time_mean / max_t) * bar_w as f64).round() as usize;
        let name: String = r.variant.chars().take(name_w).collect();
        lines.push(Line::from(vec![
            Span::raw(format!("{name:<name_w$} ")),
            Span::styled("█".repeat(n.max(1)), pal.series(r.index)),
            Span::raw(" ".repeat(bar_w.saturating_sub(n.max(1)) + 1)),
            Span::raw(value),
        ]));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

/// The slowest mean time among `matrix`'s rows: its full bar.
fn slowest(rows: &[crate::tui::state::ResultRow], matrix: &str) -> f64 {
    rows.iter()
        .filter(|x| x.matrix == matrix)
        .map(|x| x.time_mean)
        .fold(0.0, f64::max)
        .max(1e-9)
}
