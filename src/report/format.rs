//! A report as Markdown (for write-ups), CSV and JSON.

use super::{Clock, Report, VariantStats};
use anyhow::Result;

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}", 100.0 * x)
    } else {
        "-".into()
    }
}

fn secs(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "-".into()
    }
}

fn pm(mean: String, ci: f64, scale: f64) -> String {
    if ci.is_finite() {
        format!("{mean} ± {:.2}", ci * scale)
    } else {
        mean
    }
}

impl Report {
    pub fn to_markdown(&self) -> String {
        let describe = |c: Clock| match c {
            Clock::Dawn => {
                "dawn: DAWNBench-style (prep + whitening + train, eval excluded; Page's convention)"
            }
            Clock::Airbench => {
                "airbench: airbench-style (whitening + train + final TTA eval; airbench's convention)"
            }
            Clock::Hlb => "hlb: hlb-style (training loop only)",
            Clock::Wall => "wall: wall clock of the whole run",
        };
        let mut used: Vec<Clock> = self.rows.iter().map(|r| r.headline).collect();
        used.dedup();
        let clock = used
            .iter()
            .map(|c| describe(*c))
            .collect::<Vec<_>>()
            .join("; ");
        let mut s = String::new();
        s.push_str(&format!("# tricklab report\n\nTarget accuracy: **{:.1}%**. Time column: the full fixed-length run in each recipe's own timing convention ({clock}), seconds, mean ± 95% CI (t) where n ≥ 2, with min and median. The headline is that time with the mean accuracy against the target, as Page and airbench claim theirs.\n", 100.0 * self.target));
        s.push_str("Accuracy is the final test accuracy with each run's TTA level, mean ± 95% CI over seeds. \"First eval at target\" is secondary and per run: the DAWNBench-style time of the first evaluation at the target, averaged only over the runs that reached it (a selection: the count that did not is given). Speedups divide the previous (first) variant's mean time by this one's; \"vs prev\" only on ladders, where each rung builds on the one before.\n\n");
        s.push_str("Results: ");
        s.push_str(
            &self
                .dirs
                .iter()
                .map(|d| format!("`{}`", d.display()))
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push_str("\n\n| # | variant | n | failed | acc % (TTA) | acc % (no TTA) | P(acc ≥ target) | clock | time mean (s) | time min | time median | first eval at target (s, per run) | speedup vs prev | speedup vs first |\n");
        s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        let mut matrix = "";
        for r in &self.rows {
            if r.matrix != matrix && self.rows.iter().any(|x| x.matrix != r.matrix) {
                s.push_str(&format!("| | **{}** | | | | | | | | | | | | |\n", r.matrix));
            }
            matrix = &r.matrix;
            let c = r.time();
            let missed = r.n - r.ttt_n;
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.index,
                r.variant.replace('|', "\\|"),
                r.n,
                r.failed,
                pm(pct(r.acc_tta_mean), r.acc_tta_ci95, 100.0),
                pm(pct(r.acc_mean), r.acc_ci95, 100.0),
                if r.p_target.is_finite() {
                    format!("{:.2}", r.p_target)
                } else {
                    "-".into()
                },
                r.headline.name(),
                pm(secs(c.mean), c.ci95, 1.0),
                secs(c.min),
                secs(c.median),
                match (r.ttt_mean, r.ttt_ci95) {
                    (Some(m), Some(ci)) =>
                        format!("{m:.2} ± {ci:.2} (n={}, {missed} not)", r.ttt_n),
                    (Some(m), None) => format!("{m:.2} (n={}, {missed} not)", r.ttt_n),
                    _ => format!("not reached (0 of {})", r.n),
                },
                r.speedup_prev
                    .map(|x| format!("×{x:.2}"))
                    .unwrap_or_else(|| "-".into()),
                r.speedup_first
                    .map(|x| format!("×{x:.2}"))
                    .unwrap_or_else(|| "-".into()),
            ));
        }
        s
    }

    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "matrix,index,variant,clock,n,failed,acc_mean,acc_ci95,acc_tta_mean,acc_tta_ci95,p_target,dawn_s_mean,dawn_s_min,dawn_s_median,airbench_s_mean,airbench_s_min,airbench_s_median,hlb_s_mean,hlb_s_min,hlb_s_median,wall_s_mean,ttt_mean,ttt_n,speedup_prev,speedup_first\n",
        );
        let o = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for r in &self.rows {
            let VariantStats {
                dawn,
                airbench,
                hlb,
                wall,
                ..
            } = r;
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                q(&r.matrix),
                r.index,
                q(&r.variant),
                r.headline.name(),
                r.n,
                r.failed,
                r.acc_mean,
                r.acc_ci95,
                r.acc_tta_mean,
                r.acc_tta_ci95,
                r.p_target,
                dawn.mean,
                dawn.min,
                dawn.median,
                airbench.mean,
                airbench.min,
                airbench.median,
                hlb.mean,
                hlb.min,
                hlb.median,
                wall.mean,
                o(r.ttt_mean),
                r.ttt_n,
                o(r.speedup_prev),
                o(r.speedup_first)
            ));
        }
        s
    }

    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }
}
