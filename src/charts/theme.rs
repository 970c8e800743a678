//! What every chart looks like: the embedded font (so charts render on
//! machines without system fonts), Okabe and Ito's colour-blind-safe
//! palette, the light and dark themes, and the line under each title.

use crate::report::Report;
use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use std::sync::Once;

pub(super) static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
/// Every text size in this file is even: plotters' ab_glyph renderer places
/// each glyph at `size / 2 + top` truncated to a pixel, so at odd sizes glyphs
/// whose top is below the middle (the decimal point) land a pixel higher than
/// the digits beside them: "68·0" (`glyphs_share_their_baseline` checks it).
pub(super) const FAMILY: &str = "sans-serif";

pub(super) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
        let _ = plotters::style::register_font(FAMILY, FontStyle::Bold, FONT);
    });
}

/// Okabe and Ito's palette, told apart with every common colour-vision
/// deficiency; black is kept for whiskers and text, vermillion for the target.
/// Past its seven colours the palette goes round again darker, then
/// lighter, so that up to 21 variants stay apart.
pub(super) fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(240, 228, 66),
        RGBColor(120, 120, 120),
    ];
    let RGBColor(r, g, b) = C[i % C.len()];
    let shade = |v: u8, f: f64, toward: f64| (v as f64 * f + toward * (1.0 - f)).round() as u8;
    match (i / C.len()) % 3 {
        0 => RGBColor(r, g, b),
        1 => RGBColor(shade(r, 0.6, 0.0), shade(g, 0.6, 0.0), shade(b, 0.6, 0.0)),
        _ => RGBColor(
            shade(r, 0.55, 255.0),
            shade(g, 0.55, 255.0),
            shade(b, 0.55, 255.0),
        ),
    }
}

/// The line under every chart's title: what the numbers were measured on.
pub(super) fn setup_line(r: &Report) -> String {
    let get = |k: &str| {
        r.setup
            .iter()
            .find(|(key, _)| key == k)
            .map_or("", |(_, v)| v.as_str())
            .to_string()
    };
    format!(
        "{} · data {} · {} · {} clock",
        get("hardware"),
        short_hashes(&get("data")),
        get("runs"),
        get("clock")
    )
}

/// Each `(hash H)` cut to H's first 12 characters, as git shortens a
/// commit: enough to tell data sets apart, short enough for a subtitle
/// (report.md keeps the whole hash).
fn short_hashes(data: &str) -> String {
    let mut out = String::new();
    let mut rest = data;
    while let Some(at) = rest.find("(hash ") {
        let (head, tail) = rest.split_at(at + "(hash ".len());
        out.push_str(head);
        let end = tail.find(')').unwrap_or(tail.len());
        out.extend(tail[..end].chars().take(12));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_subtitle_shows_a_data_hash_as_its_first_12_characters() {
        assert_eq!(
            super::short_hashes(
                "synthetic-0 (hash ab22a1a2460d8805b192233a94bcefeca2618d20), x (hash 12)"
            ),
            "synthetic-0 (hash ab22a1a2460d), x (hash 12)"
        );
        assert_eq!(super::short_hashes("no hash here"), "no hash here");
    }
}

/// The target line's colour (Okabe–Ito vermillion).
pub(super) const TARGET: RGBColor = RGBColor(213, 94, 0);

/// Light charts for papers, dark ones for slides with a dark background.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotTheme {
    #[default]
    Light,
    Dark,
}

/// The colours every chart takes its background, text, axes and whiskers from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Theme {
    pub(super) bg: RGBColor,
    pub(super) fg: RGBColor,
}

impl Theme {
    pub(super) fn of(t: PlotTheme) -> Theme {
        match t {
            PlotTheme::Light => Theme {
                bg: RGBColor(255, 255, 255),
                fg: RGBColor(0, 0, 0),
            },
            PlotTheme::Dark => Theme {
                bg: RGBColor(24, 24, 28),
                fg: RGBColor(225, 225, 225),
            },
        }
    }

    pub(super) fn font(&self, size: u32) -> TextStyle<'static> {
        (FAMILY, size as f64).into_font().color(&self.fg)
    }

    /// The axes every chart shares: the theme's colour, faint grid lines,
    /// labels at `size`; each chart adds its own labels and descriptions.
    pub(super) fn axes<'a, 'b, X: Ranged, Y: Ranged, DB: DrawingBackend>(
        &self,
        mut mesh: MeshStyle<'a, 'b, X, Y, DB>,
        size: u32,
    ) -> MeshStyle<'a, 'b, X, Y, DB> {
        mesh.axis_style(self.fg)
            .bold_line_style(self.fg.mix(0.2))
            .light_line_style(self.fg.mix(0.07))
            .label_style(self.font(size));
        mesh
    }
}
