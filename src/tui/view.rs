//! State → frame. Pure: reads the state, draws, changes nothing.

use super::state::{
    AppState, EffectRow, LiveCompare, Overlay, ResultRow, RunSeries, Tab, fmt_secs, mean_curve,
    response_unit,
};
use crate::events::{LogLevel, RunStatus};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table, Tabs, Wrap,
};

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
    match s.tab {
        Tab::Queue => queue(f, body, s, &pal),
        Tab::Live => live(f, body, s, &pal),
        Tab::Results => results(f, body, s, &pal),
        Tab::Ladder => ladder(f, body, s, &pal),
        Tab::Tricks => tricks(f, body, s, &pal),
        Tab::Log => log(f, body, s, &pal),
        Tab::Effects => effects(f, body, s, &pal),
    }
    footer(f, foot, s);
    match &s.overlay {
        Overlay::None => {}
        Overlay::Help => help(f, body),
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
            // One line a file; what the selected one would queue, wrapped below.
            let width = body.width.saturating_sub(4).clamp(40, 110);
            let r = centered(body, width, (files.len() as u16 + 7).min(body.height));
            f.render_widget(Clear, r);
            let mut lines: Vec<Line> = files
                .iter()
                .enumerate()
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
                })
                .collect();
            match files.get(*selected) {
                None => lines.push(Line::from("no matrix files in ablations/")),
                Some(e) => {
                    lines.push(Line::from(""));
                    let st = if e.refused {
                        pal.fg(Color::Red)
                    } else {
                        Style::default()
                    };
                    lines.push(Line::styled(e.about.clone(), st));
                }
            }
            f.render_widget(
                Paragraph::new(lines)
                    .wrap(Wrap { trim: true })
                    .block(Block::bordered().title(format!(
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

fn queue(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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

/// A CI half-width, or "–" where one run (or none) cannot give one.
fn ci_text(ci: f64, n: usize, digits: usize) -> String {
    if n >= 2 && ci.is_finite() {
        format!("{ci:.digits$}")
    } else {
        "–".into()
    }
}

fn log10(v: f64) -> f64 {
    v.max(1e-12).log10()
}

/// The loader on the Live screen: the share of the steps' time spent
/// getting batches (flagged past the 5% that makes a run data-bound), and
/// the streaming loader's own rate.
pub(super) fn loader_part(cur: &RunSeries) -> Option<String> {
    if cur.loader_share <= 0.0 && cur.loader_images_per_s.is_none() {
        return None;
    }
    let share = 100.0 * cur.loader_share;
    let flag = if cur.loader_share > crate::report::DATA_BOUND_SHARE {
        " (data-bound)"
    } else {
        ""
    };
    Some(match cur.loader_images_per_s {
        Some(r) => format!("loader {share:.0}% wait{flag}, {r:.0} img/s"),
        None => format!("loader {share:.0}%{flag}"),
    })
}

#[allow(
    clippy::too_many_lines,
    reason = "the Live screen's panels drawn in order, sharing their scales"
)]
fn live(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    let Some(run) = s.current.as_ref() else {
        f.render_widget(
            Paragraph::new(if s.browse_only {
                "no finished run in this folder to draw"
            } else {
                "no run has started yet"
            })
            .block(Block::bordered().title("live")),
            area,
        );
        return;
    };
    let cur = &s.runs[run];
    let cmp = s.live_compare(run);
    let mem = cur
        .peak_mem_bytes
        .map(|b| format!("{:.0} MiB", b as f64 / 1048576.0))
        .unwrap_or_else(|| "-".into());
    // The numbers first; what does not fit the width goes on to a next
    // line whole, never cut (an 80-column tmux pane).
    let head: Vec<String> = [
        Some(format!("step {}/{}", cur.step, cur.total_steps)),
        Some(format!(
            "ETA {}{}",
            cur.eta_s().map(fmt_secs).unwrap_or_else(|| "-".into()),
            if cur.paused_since.is_some() {
                " (paused)"
            } else {
                ""
            }
        )),
        Some(format!("{:.0} img/s", cur.images_per_s)),
        loader_part(cur),
        Some(format!("peak mem {mem}")),
        Some(format!("{run} on {}", cur.device)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let width = area.width as usize;
    let mut lines: Vec<Line> = pack(&head, "  ", width)
        .into_iter()
        .chain(pack(&compare_parts(cur, &cmp), "  ·  ", width))
        .map(Line::from)
        .collect();
    lines.push(legend_line(&cmp, s.overlays, pal));
    // With several workers, each device's run on a line of its own.
    let running = s.busy_workers();
    if running.len() > 1 {
        let w = running
            .iter()
            .map(|(dev, id, done)| format!("{dev}: {id} {:.0}%", 100.0 * done))
            .collect::<Vec<_>>()
            .join("  ·  ");
        lines.push(Line::from(format!("workers  {w}")));
    }
    let [h, grid] =
        Layout::vertical([Constraint::Length(lines.len() as u16), Constraint::Min(4)]).areas(area);
    f.render_widget(Paragraph::new(lines), h);
    let [r1, r2] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(grid);
    let [loss_a, lr_a] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(r1);
    let [bn_a, acc_a] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(r2);
    let x_max = cur.total_epochs.max(1.0);

    // Behind the run, when shown: the other seeds (dots) and the reference
    // variant's mean (a dim line).
    let (seeds, ref_runs): (&[&RunSeries], &[&RunSeries]) = if s.overlays {
        (
            &cmp.seeds,
            cmp.reference.as_ref().map_or(&[][..], |r| &r.2[..]),
        )
    } else {
        (&[], &[])
    };
    let ref_mean = |pick: fn(&RunSeries) -> &[(f64, f64)]| {
        let curves: Vec<&[(f64, f64)]> = ref_runs.iter().map(|r| pick(r)).collect();
        mean_curve(&curves)
    };

    // Loss on a log axis: plot log10(loss), label the ticks with the real values.
    let to_log = |v: &[(f64, f64)]| v.iter().map(|&(x, y)| (x, log10(y))).collect::<Vec<_>>();
    let cur_loss = to_log(&cur.loss);
    let old_loss: Vec<Vec<(f64, f64)>> = seeds.iter().map(|r| to_log(&r.loss)).collect();
    let ref_loss = to_log(&ref_mean(|r| &r.loss));
    let all = cur_loss
        .iter()
        .chain(old_loss.iter().flatten())
        .chain(&ref_loss)
        .map(|p| p.1);
    let (lo, hi) = bounds(all, -1.0, 1.0);
    let mut ds = behind(&old_loss, &ref_loss, pal);
    ds.push(
        Dataset::default()
            .name("loss")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(pal.series(0))
            .data(&cur_loss),
    );
    let ylabels = vec![
        format!("{:.2}", 10f64.powf(lo)),
        format!("{:.2}", 10f64.powf(hi)),
    ];
    f.render_widget(chart(ds, "loss (log)", x_max, (lo, hi), ylabels), loss_a);

    let (lo, hi) = bounds(cur.lr.iter().map(|p| p.1), 0.0, 1.0);
    let ds = vec![
        Dataset::default()
            .name("lr")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(pal.series(1))
            .data(&cur.lr),
    ];
    f.render_widget(
        chart(
            ds,
            "learning rate",
            x_max,
            (lo.min(0.0), hi),
            axis_labels(lo.min(0.0), hi, 3),
        ),
        lr_a,
    );

    let (lo, hi) = bounds(cur.bn_scale.iter().flatten().map(|p| p.1), 0.0, 1.0);
    let ds: Vec<Dataset> = cur
        .bn_scale
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(pal.series(i))
                .data(d)
        })
        .collect();
    let title = format!("BN scale mean|γ| ({} layers)", cur.bn_scale.len());
    f.render_widget(
        chart(ds, &title, x_max, (lo, hi), axis_labels(lo, hi, 2)),
        bn_a,
    );

    let target = [(0.0, cur.target_acc), (x_max, cur.target_acc)];
    let old_acc: Vec<Vec<(f64, f64)>> = seeds.iter().map(|r| r.acc.clone()).collect();
    let ref_acc = ref_mean(|r| &r.acc);
    let mut ds = behind(&old_acc, &ref_acc, pal);
    ds.push(
        Dataset::default()
            // Not dots: those are the other seeds.
            .name("target")
            .marker(Marker::HalfBlock)
            .graph_type(GraphType::Line)
            .style(pal.fg(Color::Red))
            .data(&target),
    );
    ds.push(
        Dataset::default()
            .name("acc")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(pal.series(3))
            .data(&cur.acc),
    );
    let last = cur
        .acc
        .last()
        .map(|p| format!(" {:.1}%", 100.0 * p.1))
        .unwrap_or_default();
    f.render_widget(
        chart(
            ds,
            &format!(
                "eval accuracy{last} (target {:.0}%)",
                100.0 * cur.target_acc
            ),
            x_max,
            (0.0, 1.0),
            vec!["0%".into(), "100%".into()],
        ),
        acc_a,
    );
}

/// The lines drawn dimmed behind a run: the other seeds as dots, the
/// reference variant's mean as a line.
fn behind<'a>(
    seed_curves: &'a [Vec<(f64, f64)>],
    mean: &'a [(f64, f64)],
    pal: &Palette,
) -> Vec<Dataset<'a>> {
    let mut ds: Vec<Dataset> = seed_curves
        .iter()
        .map(|d| {
            Dataset::default()
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(Style::default().add_modifier(Modifier::DIM))
                .data(d)
        })
        .collect();
    if !mean.is_empty() {
        ds.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(pal.fg(Color::Gray).add_modifier(Modifier::DIM))
                .data(mean),
        );
    }
    ds
}

/// `parts` joined by `sep` into lines of at most `width` characters,
/// breaking only between parts (a part wider than `width` has a line alone).
pub(crate) fn pack(parts: &[String], sep: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for p in parts {
        match lines.last_mut() {
            Some(l) if l.chars().count() + sep.chars().count() + p.chars().count() <= width => {
                l.push_str(sep);
                l.push_str(p);
            }
            _ => lines.push(p.clone()),
        }
    }
    lines
}

/// What the run is read against: its projected accuracy beside the
/// reference variant's, and the time to target beside theirs.
fn compare_parts(cur: &RunSeries, cmp: &LiveCompare) -> Vec<String> {
    let pct = |v: f64| format!("{:.1}%", 100.0 * v);
    let mut parts = Vec::new();
    let theirs = cmp.reference.as_ref().map(|(role, name, runs)| {
        let ttt: Vec<f64> = runs.iter().filter_map(|r| r.time_to_target()).collect();
        let ttt = (!ttt.is_empty()).then(|| ttt.iter().sum::<f64>() / ttt.len() as f64);
        (role, name, runs, ttt)
    });
    if let Some((role, name, runs, _)) = &theirs {
        let who = format!("{role} «{name}», n={}", runs.len());
        parts.push(match cur.projected_final(runs) {
            Some((p, r)) if cur.finished => format!("final {} vs {} ({who})", pct(p), pct(r)),
            Some((p, r)) => format!("projected {} vs {} ({who})", pct(p), pct(r)),
            None if runs.is_empty() => format!("{role} «{name}»: no finished run yet"),
            None => format!("projection after the first evaluation ({who})"),
        });
    }
    let mut target = format!(
        "target {}: {}",
        pct(cur.target_acc),
        cur.time_to_target()
            .map(fmt_secs)
            .as_deref()
            .unwrap_or("not yet")
    );
    if let Some((role, _, runs, Some(t))) = &theirs {
        let reached = runs.iter().filter(|r| r.time_to_target().is_some()).count();
        target += &format!(
            " ({role} {}, {reached}/{} reached)",
            fmt_secs(*t),
            runs.len()
        );
    }
    parts.push(target);
    parts
}

/// The legend of the lines drawn behind the run, and the key that hides them.
fn legend_line<'a>(cmp: &LiveCompare, overlays: bool, pal: &Palette) -> Line<'a> {
    let mut spans = vec![Span::raw("o overlays: ")];
    if !overlays {
        spans.push(Span::raw("off"));
        return Line::from(spans);
    }
    spans.push(Span::styled("━ this run", pal.series(3)));
    if let Some((role, _, runs)) = &cmp.reference
        && !runs.is_empty()
    {
        spans.push(Span::styled(
            format!("  ─ {role} mean of {}", runs.len()),
            pal.fg(Color::Gray).add_modifier(Modifier::DIM),
        ));
    }
    if !cmp.seeds.is_empty() {
        spans.push(Span::styled(
            format!("  • other seeds ({})", cmp.seeds.len()),
            Style::default().add_modifier(Modifier::DIM),
        ));
    }
    Line::from(spans)
}

/// The two ends of an axis with enough digits to tell them apart (a frozen
/// BN scale spans 0.9995–1.0005, which two digits print as "1.00 … 1.00").
fn axis_labels(lo: f64, hi: f64, min_digits: usize) -> Vec<String> {
    let span = (hi - lo).abs();
    let need = if span > 0.0 && span.is_finite() {
        (-span.log10()).ceil().max(0.0) as usize + 1
    } else {
        min_digits
    };
    let d = need.clamp(min_digits, 8);
    vec![format!("{lo:.d$}"), format!("{hi:.d$}")]
}

#[cfg(test)]
pub(crate) fn axis_labels_for_test(lo: f64, hi: f64) -> Vec<String> {
    axis_labels(lo, hi, 2)
}

fn bounds(vals: impl Iterator<Item = f64>, dlo: f64, dhi: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (dlo, dhi);
    }
    if hi - lo < 1e-9 {
        return (lo - 0.5 * lo.abs().max(1e-3), hi + 0.5 * hi.abs().max(1e-3));
    }
    (lo, hi)
}

fn chart<'a>(
    ds: Vec<Dataset<'a>>,
    title: &str,
    x_max: f64,
    (lo, hi): (f64, f64),
    ylabels: Vec<String>,
) -> Chart<'a> {
    Chart::new(ds)
        .block(Block::bordered().title(title.to_string()))
        .x_axis(
            Axis::default()
                .bounds([0.0, x_max])
                .labels(vec!["0".to_string(), format!("{x_max:.0} ep")]),
        )
        .y_axis(Axis::default().bounds([lo, hi]).labels(ylabels))
        .legend_position(None)
}

#[allow(
    clippy::too_many_lines,
    reason = "one table: columns chosen, rows built, drawn"
)]
fn results(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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
    let fixed = [0, 4, 14, 5, 9, time_head.chars().count() as u16, 7, 25];
    let shown = shown_columns(area.width.saturating_sub(2), &fixed);
    let pick = |cells: Vec<Cell<'static>>| -> Vec<Cell<'static>> {
        cells
            .into_iter()
            .zip(&shown)
            .filter_map(|(c, &on)| on.then_some(c))
            .collect()
    };
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
        let mut row = Row::new(pick(vec![
            Cell::from(r.variant.clone()),
            Cell::from(n),
            Cell::from(format!(
                "{:.2} ± {}",
                100.0 * r.acc_mean,
                ci_text(100.0 * r.acc_ci95, r.n, 2)
            ))
            .style(acc_style),
            Cell::from(format!("{:.2}", r.p_target)),
            Cell::from(r.ttt_mean.map(fmt_secs).unwrap_or_else(|| "-".into())),
            Cell::from(format!(
                "{} ± {}",
                fmt_secs(r.time_mean),
                ci_text(r.time_ci95, r.n, 1)
            ))
            .style(time_style),
            // Against the rung before on a ladder, else against the reference.
            Cell::from(
                r.speedup_prev
                    .or(r.speedup_first)
                    .map(|x| format!("×{x:.2}"))
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::from(r.delta_time.map_or("-".into(), |d| d.label(1.0))),
        ]));
        if i == s.results_selected {
            row = row.style(Style::default().add_modifier(Modifier::REVERSED));
        }
        rows.push(row);
    }
    let widths: Vec<Constraint> = fixed
        .iter()
        .zip(&shown)
        .filter(|&(_, &on)| on)
        .map(|(&w, _)| {
            if w == 0 {
                Constraint::Min(VARIANT_MIN)
            } else {
                Constraint::Length(w)
            }
        })
        .collect();
    let title = format!(
        "results (sorted by {}, s to change; n! = some runs noisy, n~ = data-bound)",
        s.sort.label()
    );
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        area,
    );
}

const VARIANT_MIN: u16 = 16;

/// Which of the results table's columns fit `width`: the variant, n,
/// accuracy and time always; then P≥tgt, Δ, speedup and time to target
/// while they fit, kept in their places. `fixed[0]` is the variant's.
fn shown_columns(width: u16, fixed: &[u16; 8]) -> [bool; 8] {
    const PRIORITY: [usize; 8] = [0, 1, 2, 5, 3, 7, 6, 4];
    let mut shown = [false; 8];
    let mut used = 0u16;
    for (k, &c) in PRIORITY.iter().enumerate() {
        let w = if c == 0 { VARIANT_MIN } else { fixed[c] } + u16::from(used > 0);
        if k < 4 || used + w <= width {
            shown[c] = true;
            used += w;
        }
    }
    shown
}

fn ladder(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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
    let name_w = rows
        .iter()
        .map(|r| r.variant.chars().count())
        .max()
        .unwrap_or(4)
        .min(inner.width as usize / 3);
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
    // The numbers keep their room; the bars take what is left.
    let value_w = values.iter().map(|v| v.chars().count()).max().unwrap_or(0);
    let bar_w = (inner.width as usize)
        .saturating_sub(name_w + value_w + 2)
        .max(1);
    let mut lines: Vec<Line> = Vec::new();
    let mut matrix = "";
    for (r, value) in rows.iter().zip(values) {
        if several && r.matrix != matrix {
            lines.push(Line::from(Span::styled(
                format!("▸ {}", r.matrix),
                Style::default().add_modifier(Modifier::BOLD),
            )));
        }
        matrix = &r.matrix;
        // Bars scale within their own matrix.
        let max_t = rows
            .iter()
            .filter(|x| x.matrix == r.matrix)
            .map(|x| x.time_mean)
            .fold(0.0, f64::max)
            .max(1e-9);
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

fn tricks(f: &mut Frame, area: Rect, s: &AppState, _pal: &Palette) {
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
fn measured_lines(s: &AppState, key: &str) -> Vec<Line<'static>> {
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

fn log(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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

/// The Effects screen: for each designed matrix its design, then for time
/// and accuracy a table of main effects and interactions and one of Shapley
/// values, each with its 95% CI and a bar against the response's largest
/// |estimate|. A window of `effect_rows` around the selected one; the rows
/// of text (design, method, notes) wrap, the table rows are cut to fit.
fn effects(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
    let block = Block::bordered().title("effects (high − low; * = 95% CI excludes 0)");
    if s.effects.is_empty() {
        let why = if s.results.is_empty() {
            "no finished runs yet: a designed matrix's effects fill in as its runs finish"
        } else {
            "no factorial, fractional or shapley matrix in these results: see ablations/README.md, Kinds"
        };
        f.render_widget(
            Paragraph::new(why).wrap(Wrap { trim: true }).block(block),
            area,
        );
        return;
    }
    let rows = s.effect_rows();
    let inner = block.inner(area);
    let width = inner.width as usize;
    let cols = EffectCols::fit(&rows, width);
    let drawn: Vec<Vec<Line>> = rows
        .iter()
        .map(|r| effect_lines(r, &cols, width, pal))
        .collect();
    let visible = inner.height as usize;
    let sel = s.effects_selected.min(rows.len() - 1);
    let (first, last) = effect_window(&drawn, sel, visible);
    let block = if first > 0 || last + 1 < rows.len() {
        block.title_top(
            Line::from(format!("{}–{} of {}", first + 1, last + 1, rows.len())).right_aligned(),
        )
    } else {
        block
    };
    let lines: Vec<Line> = drawn
        .into_iter()
        .enumerate()
        .skip(first)
        .flat_map(|(i, lines)| {
            lines.into_iter().map(move |l| {
                if i == sel {
                    l.style(Style::default().add_modifier(Modifier::REVERSED))
                } else {
                    l
                }
            })
        })
        .take(visible)
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// The rows shown in `visible` lines with row `sel` among them: from the
/// first row while that keeps `sel` whole in sight, else ending with `sel`
/// (as the Queue screen keeps its selection at the bottom). Returns the
/// first row and the last one shown whole.
fn effect_window(drawn: &[Vec<Line>], sel: usize, visible: usize) -> (usize, usize) {
    let mut first = sel;
    let mut used = drawn[sel].len();
    while first > 0 && used + drawn[first - 1].len() <= visible {
        first -= 1;
        used += drawn[first].len();
    }
    let mut last = sel;
    while last + 1 < drawn.len() && used + drawn[last + 1].len() <= visible {
        last += 1;
        used += drawn[last].len();
    }
    (first, last)
}

/// `text` in lines of at most `width` columns, broken between words (a
/// word longer than a line is cut), the first line after `first` and the
/// text's own indent, the others after `rest`.
fn wrap_words(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let body = text.trim_start();
    let mut lines = Vec::new();
    let mut cur = format!("{first}{}", &text[..text.len() - body.len()]);
    let mut bare = true;
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        if !bare && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut cur, rest.to_string()));
            bare = true;
        }
        if !bare {
            cur.push(' ');
        }
        cur.push_str(word);
        bare = false;
    }
    lines.push(cur);
    lines.into_iter().map(|l| cut(&l, width)).collect()
}

/// Widest bar drawn: beyond it more columns only spread the same picture.
const EFFECT_BAR_MAX: usize = 61;
/// Narrowest bar worth drawing (three cells a side and the axis).
const EFFECT_BAR_MIN: usize = 7;

/// The Effects tables' column widths, one set for the whole screen so that
/// the columns line up from matrix to matrix.
struct EffectCols {
    term: usize,
    estimate: usize,
    ci: usize,
    /// 0: no room for bars.
    bar: usize,
    /// 0: no term on the screen has aliases.
    aliases: usize,
    /// 0: no term on the screen has a ladder's credit.
    ladder: usize,
    /// The ladder's intervals fit beside its estimates; else the estimate
    /// and the flag alone, which must not be cut off.
    ladder_ci: bool,
}

impl EffectCols {
    /// Term, estimate, CI and a ladder's credit (which questions the
    /// estimate) keep their width; the aliases (which change what an
    /// estimate means) come next; the bars take what is left.
    fn fit(rows: &[EffectRow], width: usize) -> EffectCols {
        let terms = rows.iter().filter_map(|r| match r {
            EffectRow::Term { of, x } => Some((*of, *x)),
            _ => None,
        });
        let (mut term, mut estimate, mut ci, mut aliases) = (13, 8, 6, 0);
        // The ladder's column with its intervals, and without.
        let (mut full, mut short) = (0, 0);
        for (a, x) in terms {
            term = term.max(x.term.chars().count());
            estimate = estimate.max(estimate_text(a, x.estimate).chars().count());
            ci = ci.max(ci_interval(a, x).chars().count());
            aliases = aliases.max(x.aliases.join(", ").chars().count());
            if x.ladder.is_some() {
                full = full.max(ladder_text(a, x, true).chars().count());
                short = short.max(ladder_text(a, x, false).chars().count());
            }
        }
        let term = term.min((width * 2 / 5).max(12));
        if aliases > 0 {
            aliases = aliases.max("aliased with".len());
        }
        // Two of indent, a space between columns.
        let before = 2 + term + 1 + estimate + 1 + ci;
        let ladder_ci = before + 1 + full <= width;
        let ladder = match (full, ladder_ci) {
            (0, _) => 0,
            (_, true) => full.max(LADDER_HEAD.chars().count()),
            (_, false) => short.max(LADDER_HEAD.chars().count()),
        };
        let fixed = before + if ladder > 0 { ladder + 1 } else { 0 };
        let left = width.saturating_sub(fixed + if aliases > 0 { aliases + 1 } else { 0 });
        let mut bar = left.saturating_sub(1).min(EFFECT_BAR_MAX);
        // Odd, so that zero has a column of its own in the middle.
        bar -= usize::from(bar % 2 == 0 && bar > 0);
        if bar < EFFECT_BAR_MIN {
            bar = 0;
        }
        let aliases = if aliases > 0 {
            width.saturating_sub(fixed + 1 + if bar > 0 { bar + 1 } else { 0 })
        } else {
            0
        };
        EffectCols {
            term,
            estimate,
            ci,
            bar,
            aliases,
            ladder,
            ladder_ci,
        }
    }
}

/// The head of the ladder's column.
const LADDER_HEAD: &str = "ladder Δ";

/// A ladder's credit for the estimate's factor: its Δ and (`with_ci`) 95%
/// CI, and `!` where the two intervals do not overlap (order-dependent);
/// `-` where no rung adds the factor alone.
fn ladder_text(
    a: &crate::report::effects::Analysis,
    x: &crate::report::effects::Estimate,
    with_ci: bool,
) -> String {
    let Some(l) = &x.ladder else {
        return "-".into();
    };
    let ci = if with_ci && l.lo.is_finite() && l.hi.is_finite() {
        format!(" [{}, {}]", estimate_text(a, l.lo), estimate_text(a, l.hi))
    } else {
        String::new()
    };
    let flag = if l.order_dependent { " !" } else { "" };
    format!("{}{ci}{flag}", estimate_text(a, l.estimate))
}

/// What the ladder Δ column holds, under a response that has one: the
/// rungs it comes from and what `!` means.
fn ladder_legend(a: &crate::report::effects::Analysis) -> String {
    let mut rungs: Vec<String> = Vec::new();
    for l in a
        .effects
        .iter()
        .chain(&a.shapley)
        .filter_map(|x| x.ladder.as_ref())
    {
        let r = format!("{}: {}", l.matrix, l.rung);
        if !rungs.contains(&r) {
            rungs.push(r);
        }
    }
    let flagged = a
        .effects
        .iter()
        .chain(&a.shapley)
        .filter_map(|x| x.ladder.as_ref())
        .any(|l| l.order_dependent);
    format!(
        "{LADDER_HEAD}: the Δ of the ladder rung that adds the factor alone, against the rung before ({}); {}",
        rungs.join("; "),
        if flagged {
            "! order-dependent: its 95% CI and the estimate's do not overlap, so what the factor buys depends on what came before it"
        } else {
            "each one's 95% CI overlaps the estimate's (none order-dependent)"
        }
    )
}

/// An estimate in its response's unit, signed, with a true minus.
fn estimate_text(a: &crate::report::effects::Analysis, v: f64) -> String {
    let (_, scale) = response_unit(a);
    // Seconds to the millisecond; accuracy to a hundredth of a point.
    let digits = if scale == 1.0 { 3 } else { 2 };
    format!("{:+.digits$}", scale * v).replace('-', "−")
}

/// `[−0.12, +0.40]`, `*` after it where it excludes 0.
fn ci_interval(
    a: &crate::report::effects::Analysis,
    x: &crate::report::effects::Estimate,
) -> String {
    if !(x.lo.is_finite() && x.hi.is_finite()) {
        return "no error estimate".into();
    }
    format!(
        "[{}, {}]{}",
        estimate_text(a, x.lo),
        estimate_text(a, x.hi),
        if x.decided() { "*" } else { "" }
    )
}

/// `s` in at most `w` columns, an ellipsis where it was cut.
fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    if w > 0 {
        out.push('…');
    }
    out
}

/// The lines one row of the Effects screen takes at `width`.
fn effect_lines(
    r: &EffectRow,
    cols: &EffectCols,
    width: usize,
    pal: &Palette,
) -> Vec<Line<'static>> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let text = |t: String, first: &str, rest: &str, st: Style| -> Vec<Line<'static>> {
        wrap_words(&t, width, first, rest)
            .into_iter()
            .map(|l| Line::styled(l, st))
            .collect()
    };
    match *r {
        EffectRow::Matrix(e) => vec![Line::styled(
            cut(
                &format!(
                    "▸ {}: {} runs, time on the {}, {}",
                    e.matrix,
                    e.runs,
                    e.clock.label(),
                    e.folder.display()
                ),
                width,
            ),
            bold,
        )],
        EffectRow::Design(d) => text(d.to_string(), "  ", "    ", Style::default()),
        EffectRow::Response(a) => {
            let (unit, _) = response_unit(a);
            let head = format!("{} ({unit}, high − low)", a.response);
            let methods = a.methods();
            let t = if methods.is_empty() {
                head.clone()
            } else {
                format!("{head}: {methods}")
            };
            let mut lines = text(t, "", "  ", Style::default());
            // The response's name in bold, its method as it is.
            if let Some(rest) = lines[0].spans[0].content.strip_prefix(head.as_str()) {
                lines[0] = Line::from(vec![
                    Span::styled(head.clone(), bold),
                    Span::raw(rest.to_string()),
                ]);
            }
            lines
        }
        EffectRow::Header { shapley } => vec![effect_header(shapley, cols)],
        EffectRow::Term { of, x } => vec![term_line(of, x, cols, pal)],
        EffectRow::Ladder(a) => text(ladder_legend(a), "  ", "    ", Style::default()),
        EffectRow::Note(n) => text(format!("note: {n}"), "  ", "    ", pal.fg(Color::Yellow)),
    }
}

fn effect_header(shapley: bool, cols: &EffectCols) -> Line<'static> {
    let (tw, ew, cw) = (cols.term, cols.estimate, cols.ci);
    let mut text = format!(
        "  {:<tw$} {:>ew$} {:<cw$}",
        if shapley { "Shapley value" } else { "term" },
        "estimate",
        "95% CI"
    );
    if cols.ladder > 0 {
        text.push_str(&format!(" {LADDER_HEAD:<lw$}", lw = cols.ladder));
    }
    if cols.bar > 0 {
        // −, 0 and + over the bars' left end, axis and right end.
        let half = cols.bar / 2;
        text.push_str(&format!(" −{:>half$}{:>half$}", "0", "+"));
    }
    if cols.aliases > 0 && !shapley {
        text.push_str(&format!(" {}", cut("aliased with", cols.aliases)));
    }
    Line::styled(text, Style::default().add_modifier(Modifier::BOLD))
}

fn term_line(
    a: &crate::report::effects::Analysis,
    x: &crate::report::effects::Estimate,
    cols: &EffectCols,
    pal: &Palette,
) -> Line<'static> {
    let (tw, ew, cw) = (cols.term, cols.estimate, cols.ci);
    let mut spans = vec![Span::raw(format!(
        "  {:<tw$} {:>ew$} {:<cw$}",
        cut(&x.term, tw),
        estimate_text(a, x.estimate),
        ci_interval(a, x)
    ))];
    if cols.ladder > 0 {
        // The flag stands out: the ladder and the design disagree.
        let text = format!(
            " {:<lw$}",
            ladder_text(a, x, cols.ladder_ci),
            lw = cols.ladder
        );
        let flagged = x.ladder.as_ref().is_some_and(|l| l.order_dependent);
        spans.push(if flagged {
            Span::styled(text, pal.fg(Color::Yellow).add_modifier(Modifier::BOLD))
        } else {
            Span::raw(text)
        });
    }
    if cols.bar > 0 {
        let largest = a
            .effects
            .iter()
            .chain(&a.shapley)
            .map(|e| e.estimate.abs())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        // Green where the term helps (less time, more accuracy); dim where
        // its interval does not exclude 0.
        let helps = (a.response == "accuracy") == (x.estimate > 0.0);
        let mut st = pal.fg(if helps { Color::Green } else { Color::Red });
        if !x.decided() {
            st = st.add_modifier(Modifier::DIM);
        }
        spans.push(Span::raw(" "));
        spans.push(Span::styled(bar(x.estimate, largest, cols.bar), st));
    }
    if cols.aliases > 0 && !x.aliases.is_empty() {
        spans.push(Span::raw(format!(
            " {}",
            cut(&x.aliases.join(", "), cols.aliases)
        )));
    }
    Line::from(spans)
}

/// A bar of `w` cells (odd) for `v` against `largest`: zero in the middle
/// column, negative to its left, positive to its right, to half a cell.
pub(super) fn bar(v: f64, largest: f64, w: usize) -> String {
    let half = w / 2;
    let halves = if largest > 0.0 && v.is_finite() {
        ((v.abs() / largest) * (2 * half) as f64).round() as usize
    } else {
        0
    }
    .min(2 * half);
    let (full, part) = (halves / 2, halves % 2 == 1);
    let empty = half - full - usize::from(part);
    let filled = "█".repeat(full);
    if v < 0.0 {
        format!(
            "{}{}{filled}│{}",
            " ".repeat(empty),
            if part { "▐" } else { "" },
            " ".repeat(half)
        )
    } else {
        format!(
            "{}│{filled}{}{}",
            " ".repeat(half),
            if part { "▌" } else { "" },
            " ".repeat(empty)
        )
    }
}

fn help(f: &mut Frame, area: Rect) {
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
