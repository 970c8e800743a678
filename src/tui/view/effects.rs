//! The Effects tab: a designed matrix's main effects, interactions and
//! Shapley values with their CIs, beside the ladder's credit.

use super::Palette;
use super::table::{self, Column};
use crate::tui::state::{AppState, EffectRow, response_unit};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

/// The Effects screen: for each designed matrix its design, then for time
/// and accuracy a table of main effects and interactions and one of Shapley
/// values, each with its 95% CI and a bar against the response's largest
/// |estimate|. A window of `effect_rows` around the selected one; the rows
/// of text (design, method, notes) wrap, the table rows are cut to fit.
pub(super) fn effects(f: &mut Frame, area: Rect, s: &AppState, pal: &Palette) {
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
pub(super) fn effect_window(drawn: &[Vec<Line>], sel: usize, visible: usize) -> (usize, usize) {
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
pub(super) fn wrap_words(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
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
pub(super) const EFFECT_BAR_MAX: usize = 61;
/// Narrowest bar worth drawing (three cells a side and the axis).
pub(super) const EFFECT_BAR_MIN: usize = 7;

/// The Effects tables' column widths, one set for the whole screen so that
/// the columns line up from matrix to matrix.
pub(super) struct EffectCols {
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
        // The indent and the four kept columns as one; the aliases, cut
        // where they must, before the bars; the bars, odd, last.
        let mut columns = vec![Column::kept(before)];
        if ladder > 0 {
            columns.push(Column::kept(ladder));
        }
        columns.push(Column::fill(EFFECT_BAR_MIN, EFFECT_BAR_MAX));
        if aliases > 0 {
            columns.push(Column::cut_to(0, aliases));
        }
        let fitted = table::fit(&columns, width);
        let bar_at = 1 + usize::from(ladder > 0);
        let mut bar = fitted[bar_at].unwrap_or(0);
        // Odd, so that zero has a column of its own in the middle.
        bar -= usize::from(bar.is_multiple_of(2) && bar > 0);
        let aliases = if aliases > 0 {
            // What the bars leave, so a long list of aliases is cut at
            // the screen's edge rather than short of it.
            let fixed = before + if ladder > 0 { ladder + 1 } else { 0 };
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
pub(super) const LADDER_HEAD: &str = "ladder Δ";

/// A ladder's credit for the estimate's factor: its Δ and (`with_ci`) 95%
/// CI, and `!` where the two intervals do not overlap (order-dependent);
/// `-` where no rung adds the factor alone.
pub(super) fn ladder_text(
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
pub(super) fn ladder_legend(a: &crate::report::effects::Analysis) -> String {
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
pub(super) fn estimate_text(a: &crate::report::effects::Analysis, v: f64) -> String {
    let (_, scale) = response_unit(a);
    // Seconds to the millisecond; accuracy to a hundredth of a point.
    let digits = if scale == 1.0 { 3 } else { 2 };
    format!("{:+.digits$}", scale * v).replace('-', "−")
}

/// `[−0.12, +0.40]`, `*` after it where it excludes 0.
pub(super) fn ci_interval(
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
pub(super) fn cut(s: &str, w: usize) -> String {
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
pub(super) fn effect_lines(
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
                    "▸ {}: {} runs{}, time on the {}, {}",
                    e.matrix,
                    e.runs,
                    if e.noisy > 0 {
                        format!(" ({} noisy)", e.noisy)
                    } else {
                        String::new()
                    },
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

pub(super) fn effect_header(shapley: bool, cols: &EffectCols) -> Line<'static> {
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

pub(super) fn term_line(
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
pub(crate) fn bar(v: f64, largest: f64, w: usize) -> String {
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
