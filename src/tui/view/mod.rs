//! State → frame. Pure: reads the state, draws, changes nothing. One file
//! a tab; the frame around them (tabs, footer, overlays) is drawn here.

mod effects;
mod help;
mod ladder;
mod live;
mod log;
mod queue;
mod results;
mod table;
mod tricks;

#[cfg(test)]
pub(crate) use effects::bar;
#[cfg(test)]
pub(crate) use live::{axis_labels_for_test, ddp_part, loader_part, pack};

use super::state::{AppState, Overlay, Tab, fmt_secs};
use crate::events::RunStatus;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph, Tabs, Wrap};

/// Colours vanish under NO_COLOR; emphasis stays.
struct Palette {
    on: bool,
}

impl Palette {
    fn fg(&self, c: Color) -> Style {
        if self.on {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn series(&self, i: usize) -> Style {
        const C: [Color; 6] = [
            Color::Cyan,
            Color::Yellow,
            Color::Magenta,
            Color::Green,
            Color::Blue,
            Color::Red,
        ];
        self.fg(C[i % C.len()])
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "every screen's layout dispatched from one place"
)]
pub fn render(f: &mut Frame, s: &AppState) {
    let pal = Palette { on: !s.no_color };
    let [top, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(2),
    ])
    .areas(f.area());
    let titles: Vec<Line> = Tab::ALL
        .iter()
        .enumerate()
        .map(|(i, t)| Line::from(format!("{} {}", i + 1, t.title())))
        .collect();
    let sel = Tab::ALL.iter().position(|t| *t == s.tab).unwrap_or(0);
    let state_tag = if s.browse_only {
        "browse"
    } else if s.paused {
        "PAUSED"
    } else if s.running() {
        "running"
    } else if s.drained {
        "done"
    } else {
        "idle"
    };
    let [tabs_area, tag_area] =
        Layout::horizontal([Constraint::Min(10), Constraint::Length(9)]).areas(top);
    f.render_widget(
        Tabs::new(titles)
            .select(sel)
            .highlight_style(
                pal.fg(Color::Yellow)
                    .add_modifier(Modifier::BOLD | Modifier::REVERSED),
            )
            // No space before the first title: the seven screens and the
            // widest state tag just fit 80 columns.
            .padding("", " ")
            .divider("| "),
        tabs_area,
    );
    f.render_widget(
        Paragraph::new(format!("[{state_tag}]"))
            .style(Style::default().add_modifier(Modifier::BOLD)),
        tag_area,
    );
    // A screen of noisy runs says so above its numbers, wrapped to fit.
    let screen = match s.noise_banner(s.tab) {
        Some(b) => {
            // Word wrapping leaves a ragged edge: room for it past one line.
            let (n, w) = (b.chars().count(), usize::from(body.width.max(9)));
            let lines = if n <= w { 1 } else { n.div_ceil(w - 8) };
            let [banner, rest] = Layout::vertical([
                Constraint::Length(lines.clamp(1, 3) as u16),
                Constraint::Min(3),
            ])
            .areas(body);
            f.render_widget(
                Paragraph::new(b)
                    .style(pal.fg(Color::Yellow).add_modifier(Modifier::BOLD))
                    .wrap(Wrap { trim: true }),
                banner,
            );
            rest
        }
        None => body,
    };
    match s.tab {
        Tab::Queue => queue::queue(f, body, s, &pal),
        Tab::Live => live::live(f, body, s, &pal),
        Tab::Results => results::results(f, screen, s, &pal),
        Tab::Ladder => ladder::ladder(f, screen, s, &pal),
        Tab::Tricks => tricks::tricks(f, body, s, &pal),
        Tab::Log => log::log(f, body, s, &pal),
        Tab::Effects => effects::effects(f, screen, s, &pal),
    }
    footer(f, foot, s);
    match &s.overlay {
        Overlay::None => {}
        Overlay::Help => help::help(f, body),
        Overlay::ConfirmQuit => {
            let r = centered(body, 46, 5);
            f.render_widget(Clear, r);
            f.render_widget(
                Paragraph::new("A run is in progress.\ny/q: cancel it and quit\ns: quit when it ends   other key: stay")
                    .block(Block::bordered().title("quit")),
                r,
            );
        }
        Overlay::Picker { files, selected } => {
            // What the selected file would queue (its runs, or why it is
            // refused) first, so a short terminal never cuts it; then the
            // files, scrolled to keep the selected one in view.
            let width = body.width.saturating_sub(4).clamp(40, 110);
            let inner_w = usize::from(width.saturating_sub(2)).max(1);
            let about: Vec<Line> = match files.get(*selected) {
                None => vec![Line::from("no matrix files in ablations/")],
                Some(e) => {
                    let st = if e.refused {
                        pal.fg(Color::Red)
                    } else {
                        Style::default()
                    };
                    effects::wrap_words(&e.about, inner_w, "", "")
                        .into_iter()
                        .map(|l| Line::styled(l, st))
                        .collect()
                }
            };
            let height = (files.len() + about.len() + 3).min(usize::from(body.height));
            let r = centered(body, width, height as u16);
            f.render_widget(Clear, r);
            let room = height.saturating_sub(about.len() + 3).max(1);
            let first = selected
                .saturating_sub(room - 1)
                .min(files.len().saturating_sub(room));
            let mut lines = about;
            lines.push(Line::from(""));
            lines.extend(
                files
                    .iter()
                    .enumerate()
                    .skip(first)
                    .take(room)
                    .map(|(i, e)| {
                        let mut st = if e.refused {
                            pal.fg(Color::Gray).add_modifier(Modifier::DIM)
                        } else {
                            Style::default()
                        };
                        if i == *selected {
                            st = st.add_modifier(Modifier::REVERSED);
                        }
                        Line::styled(e.path.clone(), st)
                    }),
            );
            f.render_widget(
                Paragraph::new(lines).block(Block::bordered().title(format!(
                    "add matrix: Enter queues, t tiny ({}), Esc closes",
                    if s.picker_tiny { "on" } else { "off" }
                ))),
                r,
            );
        }
    }
}

/// The footer's key hints that fit `width`: `? help` and `q quit` always
/// (the help lists the rest), then the others in their order while they fit.
pub(crate) fn fit_keys(keys: &[&str], width: usize) -> String {
    const ALWAYS: [&str; 2] = ["? help", "q quit"];
    const SEP: usize = 2;
    // Each hint is counted with a separator; the first needs none.
    let mut room =
        (width + SEP).saturating_sub(ALWAYS.iter().map(|k| k.chars().count() + SEP).sum());
    let mut shown: Vec<&str> = Vec::new();
    for k in keys {
        let w = k.chars().count() + SEP;
        if w <= room {
            shown.push(k);
            room -= w;
        }
    }
    shown.extend(ALWAYS);
    shown.join("  ")
}

fn footer(f: &mut Frame, area: Rect, s: &AppState) {
    let keys: &[&str] = match s.tab {
        _ if s.browse_only => &["Tab/1-7 screens", "↑↓ select", "e export"],
        Tab::Queue => &[
            "Tab/1-7 screens",
            "a add",
            "p pause/resume",
            "c cancel",
            "r requeue",
            "K/J move",
            "d remove",
            "D remove matrix",
            "e export",
        ],
        Tab::Results => &["Tab/1-7 screens", "s sort", "↑↓ select", "e export"],
        Tab::Effects => &[
            "Tab/1-7 screens",
            "↑↓ scroll",
            "p pause/resume",
            "c cancel",
            "e export",
        ],
        _ => &["Tab/1-7 screens", "p pause/resume", "c cancel", "e export"],
    };
    let keys = fit_keys(keys, area.width as usize);
    let (left, eta) = s.queue_eta();
    let eta = eta.map(fmt_secs).unwrap_or_else(|| "-".into());
    let status = match &s.quitting {
        Some(q) => Line::styled(
            format!("{q} (q again: quit now)"),
            Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        ),
        None if s.status.is_empty() => Line::from(format!("{left} queued, ETA {eta}")),
        None => Line::from(s.status.clone()),
    };
    f.render_widget(
        Paragraph::new(vec![
            status,
            Line::styled(keys, Style::default().add_modifier(Modifier::DIM)),
        ]),
        area,
    );
}

fn status_text(st: RunStatus) -> &'static str {
    match st {
        RunStatus::Queued => "queued",
        RunStatus::Running => "running",
        RunStatus::Done => "done",
        RunStatus::Failed => "FAILED",
        RunStatus::Cancelled => "cancelled",
        RunStatus::Skipped => "skipped",
    }
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}
