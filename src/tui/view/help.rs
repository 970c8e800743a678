//! The help overlay: every key.

use super::centered;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::widgets::Clear;
use ratatui::widgets::{Block, Borders, Paragraph};

pub(super) fn help(f: &mut Frame, area: Rect) {
    let text = "Tab / Shift-Tab / ←→ / 1-7  switch screens\n\
                ↑↓ or j/k                   select / scroll\n\
                a   add a matrix from ablations/\n\
                p   pause / resume the queue\n\
                c   cancel the current run\n\
                r   requeue the selected failed run\n\
                K/J move the selected run up / down\n\
                d   remove the selected queued run\n\
                D   remove every queued run of its matrix\n\
                t   in the picker: its --tiny form on/off\n\
                s   change the sort column (Results)\n\
                e   export report.md and charts\n\
                o   overlays on Live: reference, other seeds\n\
                q   quit (asks if a run is in progress)\n\
                any key closes this help";
    let r = centered(area, 52, 17);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL).title("keys")),
        r,
    );
}
