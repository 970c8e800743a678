//! The Tricks tab: the catalog, each trick with what it was measured to buy.

use super::Palette;
use crate::tui::state::AppState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};

pub(super) fn tricks(f: &mut Frame, area: Rect, s: &AppState, _pal: &Palette) {
    let cat = crate::tricks::CATALOG;
    let [list_a, detail_a] =
        Layout::horizontal([Constraint::Percentage(38), Constraint::Percentage(62)]).areas(area);
    let visible = list_a.height.saturating_sub(2) as usize;
    let skip = s.tricks_selected.saturating_sub(visible.saturating_sub(1));
    let lines: Vec<Line> = cat
        .iter()
        .enumerate()
        .skip(skip)
        .map(|(i, t)| {
            let st = if i == s.tricks_selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            Line::styled(
                format!("{:<6} {}", t.ids.first().copied().unwrap_or(""), t.key),
                st,
            )
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(format!("tricks ({})", cat.len()))),
        list_a,
    );
    let Some(t) = cat.get(s.tricks_selected) else {
        return;
    };
    let mut text = vec![
        Line::styled(t.name, Style::default().add_modifier(Modifier::BOLD)),
        Line::from(t.help),
        Line::from(""),
        Line::from(format!("source: {}", t.source)),
        Line::from(format!("off: {}", t.off)),
        Line::from(format!("on:  {}", t.on)),
    ];
    for p in t.params {
        text.push(Line::from(format!(
            "  {}.{} = {}  {}",
            t.key, p.name, p.default, p.help
        )));
    }
    if !t.requires.is_empty() {
        text.push(Line::from(format!(
            "requires: {}",
            crate::tricks::keys(t.requires)
        )));
    }
    if !t.conflicts.is_empty() {
        text.push(Line::from(format!(
            "conflicts: {}",
            crate::tricks::keys(t.conflicts)
        )));
    }
    text.push(Line::from(""));
    text.extend(measured_lines(s, t.key));
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(t.key)),
        detail_a,
    );
}

/// What trick `key` bought in each finished rung that isolates it.
pub(super) fn measured_lines(s: &AppState, key: &str) -> Vec<Line<'static>> {
    let measured = s.measured(key);
    if measured.is_empty() {
        return vec![Line::from(
            "measured: not yet (no finished rung here adds or removes it alone)",
        )];
    }
    measured
        .into_iter()
        .map(|m| {
            let r = m.row;
            Line::from(format!(
                "measured: {} it, Δ {} s ({} clock), Δ acc {} pp, n={}{} in {} «{}»{}",
                if m.added { "adding" } else { "removing" },
                r.delta_time.map_or("-".into(), |d| d.label(1.0)),
                r.clock,
                r.delta_acc.map_or("-".into(), |d| d.label(100.0)),
                r.n,
                // A Δ read off runs on a busy machine is said to be so.
                match (r.noisy, r.data_bound) {
                    (0, None) => String::new(),
                    (0, Some(d)) => format!(" (data-bound: {:.0}% loader)", 100.0 * d),
                    (k, None) => format!(" ({k} noisy)"),
                    (k, Some(d)) => format!(" ({k} noisy; data-bound: {:.0}% loader)", 100.0 * d),
                },
                m.matrix,
                m.variant,
                r.finished
                    .as_deref()
                    .map_or(String::new(), |d| format!(", {d}"))
            ))
        })
        .collect()
}
