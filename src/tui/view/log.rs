//! The Log tab: the session's messages, newest last.

use super::Palette;
use crate::events::LogLevel;
use crate::tui::state::AppState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

pub(super) fn log(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    let visible = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = s.log[s.log.len().saturating_sub(visible)..]
        .iter()
        .map(|l| {
            let (tag, st) = match l.level {
                LogLevel::Info => ("info ", Style::default()),
                LogLevel::Warn => ("warn ", pal.fg(Color::Yellow)),
                LogLevel::Error => ("ERROR", pal.fg(Color::Red).add_modifier(Modifier::BOLD)),
            };
            Line::from(vec![
                Span::styled(tag, st),
                Span::raw(" "),
                Span::raw(l.text.clone()),
            ])
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title("log")),
        area,
    );
}
