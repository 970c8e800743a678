//! The report as a terminal reads it at the end of a run, the way hyperfine
//! ends one: a short aligned table (variant, time, Δ against the rung it is
//! read against, accuracy, noise), the fastest variant and the largest
//! significant saving in one line each. And the noise banner every view of
//! a report shares, so a busy machine's seconds are never a headline.

use super::{Report, VariantStats};

/// Over this share of a table's runs noisy, the table carries a banner.
pub const NOISY_SHARE: f64 = 0.25;

/// The banner over a table of `runs` runs of which `noisy` are flagged noisy
/// (other processes on the cores, a throttled GPU, a ragged throughput);
/// `None` at a quarter or less.
pub fn noise_banner(noisy: usize, runs: usize) -> Option<String> {
    (runs > 0 && noisy as f64 > NOISY_SHARE * runs as f64).then(|| {
        format!(
            "{noisy} of {runs} runs are noisy (other processes used the machine, the GPU throttled, or the throughput was ragged): their seconds, and the ratios and stars read from them, measure the machine as much as the tricks. `--drop-noisy` leaves them out; rerun on an idle machine for times to quote."
        )
    })
}

/// The mark a ratio or a star read from noisy runs carries in place.
pub const NOISY_MARK: &str = " (noisy)";

impl Report {
    /// Noisy runs and runs in the table (none noisy once `--drop-noisy`
    /// has left them out).
    pub fn noise(&self) -> (usize, usize) {
        self.rows
            .iter()
            .fold((0, 0), |(k, n), r| (k + r.noisy, n + r.n))
    }

    /// The banner over this report's tables, where over a quarter of its
    /// runs are noisy.
    pub fn noise_banner(&self) -> Option<String> {
        let (noisy, runs) = self.noise();
        noise_banner(noisy, runs)
    }

    /// The row `r`'s Δ and speedups are read against: a ladder's previous
    /// rung, else its matrix's first variant.
    pub fn reference_of(&self, r: &VariantStats) -> Option<&VariantStats> {
        let name = r.delta_vs.as_deref()?;
        self.rows
            .iter()
            .find(|x| x.matrix == r.matrix && x.variant == name)
    }

    /// Whether a number read from `r` against `other` rests on noisy runs.
    pub fn noisy_between(r: &VariantStats, other: Option<&VariantStats>) -> bool {
        r.noisy > 0 || other.is_some_and(|o| o.noisy > 0)
    }

    /// The end of a headless run, and `report --format text`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(b) = self.noise_banner() {
            s.push_str(&format!("! {b}\n\n"));
        }
        let head = [
            "variant",
            "n",
            "time (s)",
            "Δ s [95% CI]",
            "vs",
            "acc %",
            "noisy",
        ];
        let mut rows: Vec<[String; 7]> = Vec::new();
        for r in &self.rows {
            let c = r.time();
            let reference = self.reference_of(r);
            let delta = r.delta_time.map_or(String::new(), |d| {
                let mark = if d.excludes_zero() && Self::noisy_between(r, reference) {
                    NOISY_MARK
                } else {
                    ""
                };
                format!("{}{mark}", d.label(1.0))
            });
            rows.push([
                r.variant.clone(),
                r.n.to_string(),
                mean_ci(c.mean, c.ci95, r.n, 1.0, (0.0, f64::INFINITY)),
                delta,
                r.delta_vs
                    .as_ref()
                    .map(|v| format!("{v}{}", r.skipped_words()))
                    .unwrap_or_default(),
                mean_ci(r.acc_tta_mean, r.acc_tta_ci95, r.n, 100.0, (0.0, 100.0)),
                if r.noisy > 0 {
                    format!("{} of {}", r.noisy, r.n)
                } else {
                    String::new()
                },
            ]);
        }
        let width = |i: usize| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..head.len()).map(width).collect();
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i] - c.chars().count();
                // Numbers right-aligned, names left.
                if i == 0 || i == 4 || i == 6 {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                } else {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                }
                l.push_str("  ");
            }
            format!("{}\n", l.trim_end())
        };
        let mut matrix = "";
        let several = self.rows.iter().any(|x| x.matrix != self.rows[0].matrix);
        s.push_str(&line(&head.map(String::from)));
        for (r, cells) in self.rows.iter().zip(&rows) {
            if several && r.matrix != matrix {
                s.push_str(&format!("{}:\n", r.matrix));
                matrix = &r.matrix;
            }
            s.push_str(&line(cells));
        }
        s.push('\n');
        s.push_str(&self.verdict());
        s
    }

    /// The fastest variant and the largest saving whose interval excludes 0.
    fn verdict(&self) -> String {
        let mut s = String::new();
        let timed = self
            .rows
            .iter()
            .filter(|r| r.n > 0 && r.time().mean.is_finite());
        if let Some(f) = timed.min_by(|a, b| a.time().mean.total_cmp(&b.time().mean)) {
            s.push_str(&format!(
                "fastest: {} ({:.2} s, acc {:.2}%{}){}\n",
                f.variant,
                f.time().mean,
                100.0 * f.acc_tta_mean,
                if f.acc_tta_mean >= self.target {
                    ", at the target"
                } else {
                    ", below the target"
                },
                if f.noisy > 0 { NOISY_MARK } else { "" }
            ));
        }
        let saving = self
            .rows
            .iter()
            .filter_map(|r| Some((r, r.delta_time?)))
            .filter(|(_, d)| d.excludes_zero() && d.mean < 0.0)
            .min_by(|a, b| a.1.mean.total_cmp(&b.1.mean));
        match saving {
            Some((r, d)) => s.push_str(&format!(
                "largest significant saving: {}, {} s against {}{}\n",
                r.variant,
                d.label(1.0),
                r.delta_vs.as_deref().unwrap_or("?"),
                if Self::noisy_between(r, self.reference_of(r)) {
                    NOISY_MARK
                } else {
                    ""
                }
            )),
            None if self.rows.len() > 1 => {
                s.push_str("largest significant saving: none (no Δ s interval excludes 0)\n");
            }
            None => {}
        }
        s
    }
}

/// `mean ± CI` (scaled), the value alone at n = 1, and at n = 2 the
/// interval itself within `bounds` (the t quantile on 1 df, 12.7, makes
/// `±` read as a precision the runs do not have).
pub fn mean_ci(mean: f64, ci: f64, n: usize, scale: f64, bounds: (f64, f64)) -> String {
    if !mean.is_finite() {
        return "-".into();
    }
    let m = scale * mean;
    match n {
        _ if !ci.is_finite() || n < 2 => format!("{m:.2}"),
        2 => {
            let lo = (m - scale * ci).max(bounds.0);
            let hi = (m + scale * ci).min(bounds.1);
            format!("{m:.2} [{lo:.2}, {hi:.2}]")
        }
        _ => format!("{m:.2} ± {:.2}", scale * ci),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_starts_past_a_quarter_of_the_runs() {
        assert!(noise_banner(1, 4).is_none());
        assert!(noise_banner(0, 0).is_none());
        let b = noise_banner(2, 4).unwrap();
        assert!(b.starts_with("2 of 4 runs are noisy") && b.contains("--drop-noisy"));
        assert!(b.contains("rerun on an idle machine"));
    }

    #[test]
    fn an_interval_reads_as_one_where_two_runs_make_it_wide() {
        assert_eq!(
            mean_ci(0.7844, 1.2309, 2, 100.0, (0.0, 100.0)),
            "78.44 [0.00, 100.00]"
        );
        assert_eq!(
            mean_ci(10.0, 1.0, 3, 1.0, (0.0, f64::INFINITY)),
            "10.00 ± 1.00"
        );
        assert_eq!(
            mean_ci(10.0, f64::NAN, 1, 1.0, (0.0, f64::INFINITY)),
            "10.00"
        );
        assert_eq!(mean_ci(f64::NAN, 1.0, 3, 1.0, (0.0, 1.0)), "-");
    }
}
