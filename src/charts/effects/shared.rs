//! What the effects charts share: how a response is shown (`Units`), a
//! term's name and its value beside its bar, the 95% CI whisker, room on
//! the axis for the value labels, and a ladder's credit drawn beside the
//! estimate it questions.

use crate::charts::parts::*;
use crate::charts::theme::*;
use crate::report::effects::{Analysis, Effects, Estimate, LadderCredit};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The half-height of a bar on a category axis whose rows are 1 apart.
pub(super) const BAR: f64 = 0.32;

/// Where a chart shows a ladder's credit, each row shares its height: the
/// bar in the upper part (its centre this far up, this half-height), the
/// ladder's diamond and whisker below it (this far down).
pub(super) const BAR_UP: f64 = 0.13;
pub(super) const BAR_SHARED: f64 = 0.2;
pub(super) const LADDER_DOWN: f64 = 0.25;

/// A ladder's credit that its estimate's interval does not overlap:
/// Okabe–Ito's vermillion, apart from the bars' colours.
pub(super) const ORDER_DEPENDENT: RGBColor = RGBColor(213, 94, 0);

/// A ladder's credit worth drawing: with a finite Δ.
pub(super) fn ladder_of(x: &Estimate) -> Option<&LadderCredit> {
    x.ladder.as_ref().filter(|l| l.estimate.is_finite())
}

/// The legend entries of the ladder's diamonds, where `rows` has any.
pub(super) fn ladder_legend(rows: &[&Estimate], t: &Theme) -> Vec<(String, Mark)> {
    let credits: Vec<&LadderCredit> = rows.iter().filter_map(|x| ladder_of(x)).collect();
    let mut ladders: Vec<&str> = credits.iter().map(|l| l.matrix.as_str()).collect();
    ladders.dedup();
    let mut out = Vec::new();
    if !credits.is_empty() {
        out.push((
            format!(
                "ladder ({}): the Δ of its rung that adds the factor alone, with its 95% CI",
                ladders.join(", ")
            ),
            Mark::Diamond(t.fg),
        ));
    }
    if credits.iter().any(|l| l.order_dependent) {
        out.push((
            "order-dependent: the ladder's CI and the estimate's do not overlap".to_string(),
            Mark::Diamond(ORDER_DEPENDENT),
        ));
    }
    out
}

/// A ladder's credit as written beside its diamond: `ladder +10.00
/// points`, and `order-dependent` where it is (the legend names the
/// ladder; the rung is the one that adds the row's factor).
pub(super) fn ladder_text(l: &LadderCredit, u: &Units) -> String {
    format!(
        "ladder {}{}",
        u.signed(l.estimate),
        if l.order_dependent {
            ", order-dependent"
        } else {
            ""
        }
    )
}

/// The extent of the values in `xs`: what a chart must show, in its units.
/// A chart passes each ladder's Δ, not its interval: a ladder of two seeds
/// has one ten times as wide as the design's, which would squash every
/// bar; its whisker is cut at this extent instead.
pub(super) fn extent(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    xs.filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// Whether a ladder's interval, from `from`, runs past `(lo, hi)`.
pub(super) fn cut_at(l: &LadderCredit, from: f64, s: f64, (lo, hi): (f64, f64)) -> bool {
    l.lo.is_finite() && l.hi.is_finite() && (from + l.lo * s < lo || from + l.hi * s > hi)
}

/// The note under a chart whose ladder whiskers are cut at its extent.
pub(super) const CUT_NOTE: &str =
    "a ladder's whisker without an end cap is cut at the chart's edge: its 95% CI runs on";

/// A ladder's Δ drawn at `from` + Δ on row position `y`: its 95% CI
/// whisker (where it has one) cut at `clip` (no cap where it is cut), a
/// diamond, and its text `gap` beyond the whisker's end on the side of its
/// sign (`right`: always on the right).
#[allow(
    clippy::too_many_arguments,
    reason = "one mark: where it starts, its row, its extent, units, gap, side, theme"
)]
pub(super) fn ladder_mark<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    l: &LadderCredit,
    (from, y): (f64, f64),
    clip: (f64, f64),
    u: &Units,
    gap: f64,
    right: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let s = u.scale;
    let col = if l.order_dependent {
        ORDER_DEPENDENT
    } else {
        t.fg
    };
    let v = from + l.estimate * s;
    let (mut lo, mut hi) = (v, v);
    if l.lo.is_finite() && l.hi.is_finite() {
        let (a, b) = (from + l.lo * s, from + l.hi * s);
        let (ca, cb) = (a.max(clip.0), b.min(clip.1));
        let mut lines = vec![vec![(ca, y), (cb, y)]];
        if ca == a {
            lines.push(vec![(a, y - 0.1), (a, y + 0.1)]);
        }
        if cb == b {
            lines.push(vec![(b, y - 0.1), (b, y + 0.1)]);
        }
        let style = col.stroke_width(2);
        c.draw_series(lines.into_iter().map(|p| PathElement::new(p, style)))?;
        (lo, hi) = (ca.min(v), cb.max(v));
    }
    c.draw_series(std::iter::once(
        EmptyElement::at((v, y))
            + Polygon::new(vec![(0, -8), (8, 0), (0, 8), (-8, 0)], col.filled()),
    ))?;
    // Clear of the diamond (as wide as the gap) as well as of the whisker.
    let text = ladder_text(l, u);
    if right || l.estimate >= 0.0 {
        beside(c, text, (hi + 2.0 * gap, y), false, t)
    } else {
        beside(c, text, (lo - 2.0 * gap, y), true, t)
    }
}

/// What low and high mean, under the charts that name levels.
pub(super) const LOW_HIGH: &str =
    "low, high: a trick off, on; a setting at its first, second value";

/// How a response is shown: accuracy in points, as the Markdown has it,
/// time in seconds on the recipe's clock.
pub(super) struct Units {
    pub(super) scale: f64,
    pub(super) unit: &'static str,
    /// What was measured, for titles: "time on the airbench clock".
    pub(super) what: String,
    /// The response's axis: "time on the airbench clock, s".
    pub(super) axis: String,
}

impl Units {
    pub(super) fn of(e: &Effects, a: &Analysis, tta: &str) -> Units {
        if a.response == "time" {
            let what = format!("time on the {}", e.clock.label());
            Units {
                scale: 1.0,
                unit: "s",
                axis: format!("{what}, s"),
                what,
            }
        } else {
            Units {
                scale: 100.0,
                unit: "points",
                what: format!("test accuracy{tta}"),
                axis: format!("test accuracy, points{tta}"),
            }
        }
    }

    /// A difference in the response's unit, signed: `+2.01 s`, `-0.42 points`.
    pub(super) fn signed(&self, v: f64) -> String {
        let v = v * self.scale;
        let digits = if self.unit == "s" {
            seconds(v.abs())
        } else {
            format!("{:.2}", v.abs())
        };
        format!("{}{digits} {}", if v < 0.0 { "-" } else { "+" }, self.unit)
    }

    /// A level of the response in its unit: `12.3 s`, `61.20 points`.
    pub(super) fn level(&self, v: f64) -> String {
        let v = v * self.scale;
        if self.unit == "s" {
            format!("{} s", seconds(v))
        } else {
            format!("{v:.2} points")
        }
    }
}

/// How an analysis made its effects, or with `shapley` its Shapley values.
pub(super) fn method_of(a: &Analysis, shapley: bool) -> String {
    if shapley {
        a.shapley_method.clone()
    } else {
        a.method.clone()
    }
}

pub(super) fn is_interaction(x: &Estimate) -> bool {
    x.term.contains('×')
}

/// A term as a chart names it: an aliased one with the terms its estimate
/// also holds, `tta (+ lookahead×ema)`.
pub(super) fn term_label(x: &Estimate) -> String {
    if x.aliases.is_empty() {
        x.term.clone()
    } else {
        format!("{} (+ {})", x.term, x.aliases.join(" + "))
    }
}

/// " *" where the 95% CI excludes 0, as the Markdown marks it.
pub(super) fn star(x: &Estimate) -> &'static str {
    if x.decided() { " *" } else { "" }
}

/// Pixels between a bar or whisker and its value.
pub(super) const GAP: u32 = 8;

/// The x-axis's ends that show every value with `left` and `right` pixels
/// beyond them for the value labels, on a plot `width` pixels wide: the
/// data get the pixels the labels leave, so that a label never runs into
/// the names or off the edge. Labels may take at most half the width (a
/// chart forced very narrow cuts them instead).
pub(super) fn room_for_labels(
    values: impl Iterator<Item = f64>,
    (left, right): (u32, u32),
    width: u32,
) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    let span = (hi - lo).max(1e-6 * hi.abs().max(1.0));
    let labels = f64::from(left + right).min(f64::from(width) / 2.0);
    let share = labels / f64::from((left + right).max(1));
    // A 2% margin of the data's pixels each side, so no bar touches the frame.
    let per_unit = (f64::from(width) - labels) / (span * 1.04);
    let pad = |px: u32| f64::from(px) * share / per_unit + span * 0.02;
    (lo - pad(left), hi + pad(right))
}

/// The width of the widest of `texts` in the value labels' font.
pub(super) fn widest<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    texts: &[String],
    t: &Theme,
) -> u32 {
    texts
        .iter()
        .filter_map(|s| area.estimate_text_size(s, &t.font(14)).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0)
}

/// A horizontal 95% CI whisker with its end caps.
pub(super) fn whisker<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    lo: f64,
    hi: f64,
    y: f64,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let style = t.fg.stroke_width(2);
    c.draw_series(
        [
            vec![(lo, y), (hi, y)],
            vec![(lo, y - 0.15), (lo, y + 0.15)],
            vec![(hi, y - 0.15), (hi, y + 0.15)],
        ]
        .into_iter()
        .map(|p| PathElement::new(p, style)),
    )?;
    Ok(())
}

/// Text beside a bar, in chart coordinates, left-aligned (or right-aligned
/// with `right`), centred on the row.
pub(super) fn beside<DB: DrawingBackend>(
    c: &mut Chart2d<'_, DB>,
    text: String,
    at: (f64, f64),
    right: bool,
    t: &Theme,
) -> Res
where
    DB::ErrorType: 'static,
{
    let h = if right { HPos::Right } else { HPos::Left };
    c.draw_series(std::iter::once(Text::new(
        text,
        at,
        t.font(14).pos(Pos::new(h, VPos::Center)),
    )))?;
    Ok(())
}

/// A term's value as written beside its bar.
pub(super) fn effect_text(x: &Estimate, u: &Units) -> String {
    format!("{}{}", u.signed(x.estimate), star(x))
}
