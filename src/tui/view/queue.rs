//! The Queue tab: every run with its status, in queue order.

use super::{Palette, status_text};
use crate::events::RunStatus;
use crate::tui::state::{AppState, fmt_secs};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Cell, Row, Table};

pub(super) fn queue(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    let header = Row::new([
        "matrix", "variant", "#", "seed", "status", "progress", "ETA",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = s
        .queue
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let series = s.runs.get(&q.run);
            let (progress, eta) = match (q.status, series) {
                (RunStatus::Running, Some(r)) => (
                    format!("{:>3.0}%", 100.0 * r.progress()),
                    r.eta_s().map(fmt_secs).unwrap_or_else(|| "-".into()),
                ),
                (RunStatus::Done | RunStatus::Skipped, _) => ("100%".into(), String::new()),
                _ => (String::new(), String::new()),
            };
            let color = match q.status {
                RunStatus::Failed => pal.fg(Color::Red),
                RunStatus::Running => pal.fg(Color::Yellow),
                RunStatus::Done => pal.fg(Color::Green),
                _ => Style::default(),
            };
            let mut row = Row::new(vec![
                Cell::from(q.run.matrix.clone()),
                Cell::from(q.run.variant.clone()),
                Cell::from(q.run.repeat.to_string()),
                Cell::from(q.seed.to_string()),
                Cell::from(status_text(q.status)).style(color),
                Cell::from(progress),
                Cell::from(eta),
            ]);
            if i == s.queue_selected {
                row = row.style(Style::default().add_modifier(Modifier::REVERSED));
            }
            row
        })
        .collect();
    let widths = [
        Constraint::Percentage(18),
        Constraint::Percentage(34),
        Constraint::Length(3),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(7),
    ];
    let title = if s.queue.is_empty() {
        "queue (empty: press a to add a matrix)".to_string()
    } else {
        format!("queue ({} runs)", s.queue.len())
    };
    // Keep the selected row visible on small terminals.
    let visible = area.height.saturating_sub(3) as usize;
    let skip = s.queue_selected.saturating_sub(visible.saturating_sub(1));
    let rows: Vec<Row> = rows.into_iter().skip(skip).collect();
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        area,
    );
}
