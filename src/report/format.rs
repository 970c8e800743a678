//! A report as Markdown (for write-ups), CSV and JSON.

use super::{Clock, Report, VariantStats};
use anyhow::Result;

fn secs(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "-".into()
    }
}

/// An accuracy cell: mean ± 95% CI (the interval itself at n = 2), then
/// the sd over runs where there are two or more (the spread papers such as
/// Goyal et al. report, ± one sd).
fn acc_cell(mean: f64, ci: f64, sd: f64, n: usize) -> String {
    let cell = super::text::mean_ci(mean, ci, n, 100.0, (0.0, 100.0));
    if n >= 2 && ci.is_finite() && sd.is_finite() {
        format!("{cell} (sd {:.2})", 100.0 * sd)
    } else {
        cell
    }
}

/// The page's look: wide tables scroll sideways instead of squeezing their
/// cells, and numbers line up.
const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}\
table{border-collapse:collapse;margin:1em 0;display:block;overflow-x:auto}\
td,th{border:1px solid #bbb;padding:2px 6px;font-size:13px;white-space:nowrap}\
th{background:#f0f0f0}code{font-size:12px}.chart svg{max-width:100%;height:auto}";

/// P(acc ≥ target) with its Wilson interval where there is one.
fn p_target_cell(r: &VariantStats) -> String {
    match (r.p_target.is_finite(), r.p_target_ci95) {
        (true, Some((lo, hi))) => format!("{:.2} [{lo:.2}, {hi:.2}]", r.p_target),
        (true, None) => format!("{:.2}", r.p_target),
        _ => "-".into(),
    }
}

fn escape_html(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Report {
    #[allow(
        clippy::too_many_lines,
        reason = "the Markdown report section by section, in the order read"
    )]
    pub fn to_markdown(&self) -> String {
        let describe = |c: Clock| match c {
            Clock::Dawn => {
                "dawn: DAWNBench-style (prep + whitening + train, eval excluded; Page's convention)"
            }
            Clock::Airbench => {
                "airbench: airbench-style (preprocessing on the device + whitening + train + final TTA eval; airbench's convention)"
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
        let mut s = String::from("# tricklab report\n\n");
        if let Some(b) = self.noise_banner() {
            s.push_str(&format!("> **Noisy.** {b}\n\n"));
        }
        // What the table is not, said here, never silently: a folder whose
        // record does not read (it loses effects, seeds, the ladder's
        // reading), runs passed twice, a budget that stopped a session.
        for n in &self.notes {
            s.push_str(&format!("> **Note.** {n}\n\n"));
        }
        s.push_str("| setup | |\n|---|---|\n");
        for (k, v) in &self.setup {
            s.push_str(&format!("| {k} | {} |\n", v.replace('|', "\\|")));
        }
        s.push_str(&format!("\nTarget accuracy: **{:.1}%**. Time column: the full fixed-length run in each recipe's own timing convention ({clock}), seconds, mean ± 95% CI (t) where n ≥ 3, the interval itself at n = 2, with min and median where n ≥ 2. The headline is that time with the mean accuracy against the target, as Page and airbench claim theirs.\n", 100.0 * self.target));
        s.push_str("Accuracy is the final test accuracy with each run's TTA level (or the median readout's, where a recipe reads its last epochs' median), mean ± 95% CI over seeds, and the sd over seeds that papers give as ± (Goyal et al.: ± one sd). Δ columns: this variant minus the one it is read against (`vs`, by its number: a ladder's previous rung, else the first variant), paired by seed where both ran the same seeds, else Welch; `*` where the 95% CI excludes 0; one run a side gives the value and no interval. A run is *noisy* when other processes used over a quarter of the machine's cores, the GPU throttled, or its throughput varied over 30% between epochs (`report --drop-noisy` leaves such runs out); a ratio or a Δ read from noisy runs says so in its cell.\n\n");
        s.push_str("Results: ");
        s.push_str(
            &self
                .dirs
                .iter()
                .map(|d| format!("`{}`", crate::store::session_label(d)))
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push_str(&self.lead_table());
        s.push_str(&self.data_bound());
        s.push_str(&super::effects::to_markdown(&self.effects));
        s.push_str(&super::seeds::to_markdown(&self.seeds));
        s.push_str(&self.full_table());
        s
    }

    /// The table a write-up takes: nine columns, one row a variant, each Δ
    /// naming the variant it is read against by its number.
    fn lead_table(&self) -> String {
        let mut s = String::from(
            "\n\n| # | variant | n | time (s) | Δ s [95% CI] | vs | acc % | P(acc ≥ target) [95% CI] | noisy |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut matrix = "";
        for r in &self.rows {
            s.push_str(&self.matrix_row(r, &mut matrix, 9));
            let c = r.time();
            let reference = self.reference_of(r);
            let noisy = if Self::noisy_between(r, reference) {
                super::text::NOISY_MARK
            } else {
                ""
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.index,
                r.variant.replace('|', "\\|"),
                if r.failed > 0 {
                    format!("{} ({} failed)", r.n, r.failed)
                } else {
                    r.n.to_string()
                },
                super::text::mean_ci(c.mean, c.ci95, r.n, 1.0, (0.0, f64::INFINITY)),
                r.delta_time
                    .map_or("-".into(), |d| format!("{}{noisy}", d.label(1.0))),
                // By its number: a rung's name is often a sentence.
                reference.map_or("-".into(), |x| format!("#{}{}", x.index, r.skipped_words())),
                super::text::mean_ci(r.acc_tta_mean, r.acc_tta_ci95, r.n, 100.0, (0.0, 100.0)),
                p_target_cell(r),
                if r.noisy > 0 {
                    format!("{} of {}", r.noisy, r.n)
                } else {
                    "-".into()
                },
            ));
        }
        s
    }

    /// The row that heads a matrix's variants, `cells` columns wide, where
    /// the report holds several matrices; empty inside a matrix's rows (`last`
    /// is the matrix of the row before) or where it holds one.
    fn matrix_row<'a>(&self, r: &'a VariantStats, last: &mut &'a str, cells: usize) -> String {
        let several = self.rows.iter().any(|x| x.matrix != r.matrix);
        if !several || r.matrix == *last {
            return String::new();
        }
        *last = &r.matrix;
        format!("| | **{}** |{}\n", r.matrix, " |".repeat(cells - 2))
    }

    /// Every column of the variants, as an appendix: what the lead table
    /// leaves out, beside what it shows, one row a variant.
    #[allow(
        clippy::too_many_lines,
        reason = "one cell per column, in the order of the header"
    )]
    fn full_table(&self) -> String {
        let mut s = String::from(
            "\n## Appendix: every column\n\nThe variants again with every number the report has: the accuracy without TTA and its sd over seeds, the failed runs, the clock, the time's min and median, the first evaluation at the target, the speed-ups and the Δ accuracy. `--format csv` gives them unrounded. \"First eval at target\" is secondary and per run: the DAWNBench-style time of the first evaluation at the target, averaged only over the runs that reached it (a selection: the count that did not is given). Speedups divide the previous (first) variant's mean time by this one's; \"vs prev\" only on ladders, where each rung builds on the one before.",
        );
        // Data-parallel variants get a column of their gradient all-reduce.
        let ddp = self.rows.iter().any(|r| r.ddp_allreduce_ms.is_some());
        let (ddp_head, ddp_rule) = if ddp {
            (" all-reduce ms/step (exposed), DDP's clock |", "---|")
        } else {
            ("", "")
        };
        // The columns a reader looks for first lead: time, what it bought, accuracy.
        s.push_str(&format!("\n\n| # | variant | n | time mean (s) | Δ s [95% CI] | acc % (TTA where used) | failed | acc % (no TTA) | P(acc ≥ target) [95% CI, Wilson] | clock | time min | time median | first eval at target (s, per run) | speedup vs prev | speedup vs first | Δ acc pts [95% CI] |{ddp_head}\n"));
        s.push_str(&format!(
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|{ddp_rule}\n"
        ));
        let mut matrix = "";
        for (i, r) in self.rows.iter().enumerate() {
            s.push_str(&self.matrix_row(r, &mut matrix, 16 + usize::from(ddp)));
            let c = r.time();
            let missed = r.n - r.ttt_n;
            // A ratio or a Δ that rests on noisy runs says so where it is read.
            let first = self.rows.iter().find(|x| x.matrix == r.matrix);
            // The rung before it in its own matrix.
            let prev = self.rows[..i].iter().rev().find(|x| x.matrix == r.matrix);
            let noisy = |other: Option<&VariantStats>| {
                if Self::noisy_between(r, other) {
                    super::text::NOISY_MARK
                } else {
                    ""
                }
            };
            let reference = self.reference_of(r);
            let one = |x: f64| if r.n >= 2 { secs(x) } else { "-".into() };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.index,
                r.variant.replace('|', "\\|"),
                if r.noisy > 0 {
                    format!("{} ({} noisy)", r.n, r.noisy)
                } else {
                    r.n.to_string()
                },
                super::text::mean_ci(c.mean, c.ci95, r.n, 1.0, (0.0, f64::INFINITY)),
                r.delta_time.map_or("-".into(), |d| format!(
                    "{}{}{}",
                    d.label(1.0),
                    noisy(reference),
                    r.skipped_words()
                )),
                acc_cell(r.acc_tta_mean, r.acc_tta_ci95, r.acc_tta_std, r.n),
                r.failed,
                acc_cell(r.acc_mean, r.acc_ci95, r.acc_std, r.n),
                p_target_cell(r),
                r.headline.name(),
                one(c.min),
                one(c.median),
                match r.ttt_mean {
                    Some(m) => format!(
                        "{} (n={}, {missed} not)",
                        super::text::mean_ci(
                            m,
                            r.ttt_ci95.unwrap_or(f64::NAN),
                            r.ttt_n,
                            1.0,
                            (0.0, f64::INFINITY)
                        ),
                        r.ttt_n
                    ),
                    None => format!("not reached (0 of {})", r.n),
                },
                r.speedup_prev
                    .map_or_else(|| "-".into(), |x| format!("×{x:.2}{}", noisy(prev))),
                r.speedup_first
                    .map_or_else(|| "-".into(), |x| format!("×{x:.2}{}", noisy(first))),
                r.delta_acc.map_or("-".into(), |d| d.label(100.0)),
            ));
            if ddp {
                s.push_str(&match (r.ddp_allreduce_ms, r.ddp_exposed_ms) {
                    (Some(a), Some(e)) => format!(" {a:.1} ({e:.1}) |"),
                    _ => " - |".into(),
                });
            }
            s.push('\n');
        }
        s.push('\n');
        s
    }

    /// The variants whose time measures their loader as much as their net.
    fn data_bound(&self) -> String {
        let mut s = String::new();
        let bound: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| {
                let share = r.loader_share.filter(|&x| x > super::DATA_BOUND_SHARE)?;
                Some(format!(
                    "{} ({:.1}%)",
                    r.variant.replace('|', "\\|"),
                    100.0 * share
                ))
            })
            .collect();
        if !bound.is_empty() {
            s.push_str(&format!(
                "\n*Data-bound* (the training loop spent over {:.0}% of its time building batches or waiting for the streaming loader's, `loader_s / hlb_s`, mean over runs; with an asynchronous GPU a built batch is at most the time the steps waited): {}. Their time measures the loader as much as the net.\n",
                100.0 * super::DATA_BOUND_SHARE,
                bound.join(", ")
            ));
        }
        s
    }

    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "matrix,index,variant,clock,n,failed,noisy,acc_mean,acc_ci95,acc_tta_mean,acc_tta_ci95,p_target,p_target_lo,p_target_hi,dawn_s_mean,dawn_s_min,dawn_s_median,airbench_s_mean,airbench_s_min,airbench_s_median,hlb_s_mean,hlb_s_min,hlb_s_median,wall_s_mean,ttt_mean,ttt_n,speedup_prev,speedup_first",
        );
        for c in super::STAGE_COLUMNS {
            s.push_str(&format!(",{c}_mean"));
        }
        s.push_str(",graphs,ddp_allreduce_ms,ddp_exposed_ms\n");
        // One null (util::csv_num): a mean of no runs, an interval of one,
        // a speed-up with nothing before it are all empty cells.
        let (o, x) = (crate::util::csv_opt, crate::util::csv_num);
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for r in &self.rows {
            let VariantStats {
                dawn,
                airbench,
                hlb,
                wall,
                ..
            } = r;
            let cells = [
                q(&r.matrix),
                r.index.to_string(),
                q(&r.variant),
                r.headline.name().to_string(),
                r.n.to_string(),
                r.failed.to_string(),
                r.noisy.to_string(),
                x(r.acc_mean),
                x(r.acc_ci95),
                x(r.acc_tta_mean),
                x(r.acc_tta_ci95),
                x(r.p_target),
                o(r.p_target_ci95.map(|c| c.0)),
                o(r.p_target_ci95.map(|c| c.1)),
                x(dawn.mean),
                x(dawn.min),
                x(dawn.median),
                x(airbench.mean),
                x(airbench.min),
                x(airbench.median),
                x(hlb.mean),
                x(hlb.min),
                x(hlb.median),
                x(wall.mean),
                o(r.ttt_mean),
                r.ttt_n.to_string(),
                o(r.speedup_prev),
                o(r.speedup_first),
            ];
            s.push_str(&cells.join(","));
            for v in r.stages {
                s.push_str(&format!(",{}", o(v)));
            }
            s.push_str(&format!(
                ",{},{},{}\n",
                q(r.graphs.as_deref().unwrap_or("")),
                o(r.ddp_allreduce_ms),
                o(r.ddp_exposed_ms)
            ));
        }
        s
    }

    /// The effects of the designed matrices as one CSV table
    /// (`report --format csv --table effects`): see [`super::effects::to_csv`].
    pub fn to_effects_csv(&self) -> String {
        super::effects::to_csv(&self.effects)
    }

    /// The report as one self-contained HTML page: the Markdown rendered by
    /// a CommonMark parser with GitHub's table extension (pulldown-cmark), then
    /// `charts` (name, SVG text) inline. Raw HTML, links and images in the
    /// Markdown (a host or variant name that looks like one) are shown as
    /// text, never passed through: the page is mailed and opened by others.
    pub fn to_html(&self, charts: &[(String, String)]) -> String {
        use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd, html};
        let markdown = self.to_markdown();
        let events = Parser::new_ext(&markdown, Options::ENABLE_TABLES).filter_map(|e| match e {
            Event::Html(t) | Event::InlineHtml(t) => Some(Event::Text(t)),
            // The tables link nothing: a link or image here came from a
            // value (a variant or host name), and stays its text.
            Event::Start(Tag::Link { .. } | Tag::Image { .. })
            | Event::End(TagEnd::Link | TagEnd::Image) => None,
            e => Some(e),
        });
        let mut body = String::new();
        html::push_html(&mut body, events);
        for (name, svg) in charts {
            body += &format!(
                "<h2>{}</h2>\n<div class=\"chart\">{svg}</div>\n",
                escape_html(name)
            );
        }
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tricklab report</title>\n<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n"
        )
    }

    /// The report as JSON: `schema_version`, lowercase clocks, NaN as null.
    pub fn to_json(&self) -> Result<String> {
        let mut v = serde_json::to_value(self)?;
        v["schema_version"] = crate::util::SCHEMA_VERSION.into();
        Ok(serde_json::to_string_pretty(&v)?)
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{ReportOptions, aggregate};
    use crate::store::{ResultsWriter, tests as st};

    /// The cells of each `<table>` in `html`, row by row (header row first).
    fn tables(html: &str) -> Vec<Vec<Vec<String>>> {
        html.split("<table>")
            .skip(1)
            .map(|t| {
                let t = &t[..t.find("</table>").expect("a table is closed")];
                t.split("<tr>")
                    .skip(1)
                    .map(|row| {
                        row.split(['<'])
                            .filter_map(|piece| {
                                let cell = piece
                                    .strip_prefix("td>")
                                    .or_else(|| piece.strip_prefix("th>"));
                                cell.map(|c| c.rsplit('>').next().unwrap_or(c).to_string())
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_csv_has_one_null_an_empty_cell_never_nan() {
        let root = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
        // One run of `base` (no interval, no sd), and a `+ trick` that failed
        // (no accuracy, no time): the cells that cannot exist.
        st::feed(
            &mut w,
            st::rid("base", 0, 0),
            0,
            Some(st::summary(0.5, 10.0, None)),
        );
        st::feed(&mut w, st::rid("+ trick", 1, 0), 0, None);
        let dir = w.dir().to_path_buf();
        let r = aggregate(&[dir], &ReportOptions::default()).unwrap();
        let csv = r.to_csv();
        assert!(!csv.contains("NaN") && !csv.contains("inf"), "{csv}");
        let width = csv.lines().next().unwrap().split(',').count();
        for line in csv.lines() {
            // No quoted cell here holds a comma.
            assert_eq!(line.split(',').count(), width, "{line}");
        }
        // `base`'s accuracy CI of one run is an empty cell.
        let base: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!((base[7], base[8]), ("0.5", ""), "{csv}");
    }

    #[test]
    fn html_tables_have_a_head_and_no_divider_row_and_markdown_emphasis_renders() {
        let root = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::create(root.path(), "m", "").unwrap();
        for (idx, rep, acc, t) in [(0, 0, 0.5, 10.0), (0, 1, 0.52, 12.0), (1, 0, 0.6, 5.0)] {
            let v = if idx == 0 { "base" } else { "+ trick" };
            st::feed(
                &mut w,
                st::rid(v, idx, rep),
                rep as u64,
                Some(st::summary(acc, t, None)),
            );
        }
        let dir = w.dir().to_path_buf();
        let mut r = aggregate(&[dir], &ReportOptions::default()).unwrap();
        r.setup
            .push(("host".into(), "<script>alert(1)</script> a|b".into()));
        r.setup.push((
            "data".into(),
            "[x](javascript:alert(1)) ![i](http://example.invalid/t.png) <http://example.invalid>"
                .into(),
        ));
        let html = r.to_html(&[("ladder <1>".into(), "<svg></svg>".into())]);
        let tables = tables(&html);
        // The setup block, the lead table and the appendix's.
        assert_eq!(tables.len(), 3, "{html}");
        assert_eq!(html.matches("<thead>").count(), 3, "{html}");
        for t in &tables {
            let width = t[0].len();
            for row in t {
                assert_eq!(
                    row.len(),
                    width,
                    "a row with other cells than its head: {row:?}"
                );
                for cell in row {
                    // "-" alone is a cell with no value; "---" is the divider.
                    let c = cell.trim();
                    assert!(
                        c.len() < 3 || !c.chars().all(|ch| matches!(ch, '-' | '|' | ':')),
                        "a cell of dashes (the divider read as data): {row:?}"
                    );
                }
            }
        }
        // A lead table a paper takes, of 9 columns, its Δ naming what it is
        // read against; every column in the appendix; one row a variant.
        assert_eq!((tables[1][0].len(), tables[1].len()), (9, 3));
        assert_eq!(tables[1][2][5], "#0", "{:?}", tables[1]);
        assert_eq!((tables[2][0].len(), tables[2].len()), (16, 3));
        assert!(html.contains("<h2>Appendix: every column</h2>"), "{html}");
        // Emphasis is rendered, not left as asterisks; a pipe escaped in a
        // cell stays in its cell; a tag in a value is text, not markup.
        assert!(html.contains("<em>noisy</em>") && !html.contains("*noisy*"));
        assert!(html.contains("<strong>"));
        assert!(tables[0].iter().any(|row| row[1].contains("a|b")));
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"));
        assert!(!html.contains("<a ") && !html.contains("<img"), "{html}");
        assert!(html.contains("<h2>ladder &lt;1&gt;</h2>"));
    }
}
