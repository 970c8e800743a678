//! The Live tab: the current run's loss, LR, BN scale and accuracy as they
//! come, beside an earlier run and the reference's curves.

use super::Palette;
use crate::tui::state::{AppState, LiveCompare, RunSeries, fmt_secs, mean_curve};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};

pub(super) fn log10(v: f64) -> f64 {
    v.max(1e-12).log10()
}

/// The loader on the Live screen: the share of the steps' time spent
/// getting batches (flagged past the 5% that makes a run data-bound), and
/// the streaming loader's own rate.
pub(crate) fn loader_part(cur: &RunSeries) -> Option<String> {
    if cur.loader_share <= 0.0 && cur.loader_images_per_s.is_none() {
        return None;
    }
    let share = 100.0 * cur.loader_share;
    let flag = if cur.loader_share > crate::report::DATA_BOUND_SHARE {
        " (data-bound)"
    } else {
        ""
    };
    let from = cur
        .loader_from
        .as_ref()
        .map(|f| format!(" ({f})"))
        .unwrap_or_default();
    Some(match cur.loader_images_per_s {
        Some(r) => format!("loader {share:.0}% wait{flag}, {r:.0} img/s{from}"),
        None => format!("loader {share:.0}%{flag}{from}"),
    })
}

/// A data-parallel run's gradient all-reduce a step by DDP's own clock (as
/// of its last epoch), and how much of it the backward did not hide.
pub(crate) fn ddp_part(cur: &RunSeries) -> Option<String> {
    let t = cur.epochs.last()?.ddp?;
    Some(format!(
        "all-reduce {:.1} ms/step ({:.1} exposed)",
        1e3 * t.allreduce_s,
        1e3 * t.exposed_s()
    ))
}

#[allow(
    clippy::too_many_lines,
    reason = "the Live screen's panels drawn in order, sharing their scales"
)]
pub(super) fn live(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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
        // A script that reports no images has no throughput: not "0 img/s".
        (cur.images_per_s > 0.0).then(|| format!("{:.0} img/s", cur.images_per_s)),
        loader_part(cur),
        ddp_part(cur),
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
    let title = match cur.bn_scale.len() {
        // A script that sends no bn_scale: said, not "(0 layers)".
        0 => "BN scale mean|γ| (not reported)".to_string(),
        n => format!("BN scale mean|γ| ({n} layers)"),
    };
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
pub(super) fn behind<'a>(
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
pub(super) fn compare_parts(cur: &RunSeries, cmp: &LiveCompare) -> Vec<String> {
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
        // A finished run that never reached it missed it; a running one may yet.
        cur.time_to_target()
            .map(fmt_secs)
            .unwrap_or_else(|| { if cur.finished { "missed" } else { "not yet" }.to_string() })
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
pub(super) fn legend_line<'a>(cmp: &LiveCompare, overlays: bool, pal: &Palette) -> Line<'a> {
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
pub(super) fn axis_labels(lo: f64, hi: f64, min_digits: usize) -> Vec<String> {
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

pub(super) fn bounds(vals: impl Iterator<Item = f64>, dlo: f64, dhi: f64) -> (f64, f64) {
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

pub(super) fn chart<'a>(
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
