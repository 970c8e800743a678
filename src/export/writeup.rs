//! The write-up of a results folder: the report's tables (report/) and the
//! charts drawn from them (`charts`), written beside the runs as report.md,
//! the PNG and SVG charts, and report.html with the SVGs inline. It sits
//! above both, so that the report only aggregates and the charts only draw.

use anyhow::Result;
use std::path::{Path, PathBuf};

/// How a session ended for one of its results folders: the one write-up
/// at the end of a session, whichever consumer (headless or the TUI) was
/// attached; each says it in its own words.
pub enum Ending {
    /// No run finished: nothing to report (its queue is kept, resumable).
    NothingFinished,
    /// A stop signal came before this folder's write-up.
    NotWritten,
    /// A stop signal came during it: the files written before it.
    Partly(Vec<PathBuf>),
    /// The report (its short table for the terminal) and the files written.
    Written(Box<crate::report::Report>, Vec<PathBuf>),
    /// Not written, and why, in one line.
    Failed(String),
}

/// A consumer of a session (headless, the TUI) at its end, as burn-train's
/// renderer has `on_train_end`: the write-up is made once, by
/// [`end_of_session`], and each consumer says each folder's [`Ending`] in
/// its own words.
pub trait SessionEnd {
    /// Folder `dir` ended so; an error ends the session's end with it.
    fn ended(&mut self, dir: &Path, ending: Ending) -> Result<()>;
}

/// The end of a session: each folder's report and charts, written once, in
/// order, each told to `consumer`; a stop signal ends it at the next file.
pub fn end_of_session(dirs: &[PathBuf], consumer: &mut dyn SessionEnd) -> Result<()> {
    for d in dirs {
        consumer.ended(d, ending(d))?;
    }
    Ok(())
}

/// How the write-up of folder `d` ends.
fn ending(d: &Path) -> Ending {
    use crate::util::signals::stopping;
    if !crate::store::has_finished_run(d) {
        return Ending::NothingFinished;
    }
    if stopping() {
        return Ending::NotWritten;
    }
    let written = crate::report::aggregate(&[d.to_path_buf()], &Default::default())
        .and_then(|r| Ok((write_report(d, &r)?, r)));
    match written {
        Ok((files, _)) if stopping() => Ending::Partly(files),
        Ok((files, r)) => Ending::Written(Box::new(r), files),
        Err(e) => Ending::Failed(crate::util::one_line(&e)),
    }
}

/// Writes report.md, the charts and report.html into a results folder;
/// returns the files written.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>> {
    let report = crate::report::aggregate(
        &[dir.to_path_buf()],
        &crate::report::ReportOptions::default(),
    )?;
    write_report(dir, &report)
}

/// [`write`] of a report already aggregated.
fn write_report(dir: &Path, report: &crate::report::Report) -> Result<Vec<PathBuf>> {
    let folder = [dir.to_path_buf()];
    // The tables first, so that a chart that cannot be drawn (a damaged
    // epochs file) loses no table; then again with the links to the charts
    // that were written.
    let md = dir.join("report.md");
    let html = dir.join("report.html");
    crate::util::write_atomic(&md, report.to_markdown().as_bytes())?;
    let figures = crate::report::figures::Figures::read(report, &folder);
    let charts = match figures.and_then(|f| {
        crate::charts::write_all(report, &f, dir, &crate::charts::PlotOptions::default())
    }) {
        Ok(charts) => charts,
        Err(e) => {
            crate::util::write_atomic(&html, report.to_html(&[]).as_bytes())?;
            return Err(e.context(format!(
                "{}: report.md and report.html were written without charts",
                dir.display()
            )));
        }
    };
    let text = format!("{}{}", report.to_markdown(), chart_links(dir, &charts));
    crate::util::write_atomic(&md, text.as_bytes())?;
    // The SVGs inline: one file to mail or attach.
    let svgs: Vec<(String, String)> = charts
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            Some((name, std::fs::read_to_string(p).ok()?))
        })
        .collect();
    crate::util::write_atomic(&html, report.to_html(&svgs).as_bytes())?;
    Ok([md, html].into_iter().chain(charts).collect())
}

/// A "Charts" section for report.md: each chart written, by its path
/// relative to the report (they sit side by side), the PNG shown inline and
/// the SVG linked, so that the Markdown renders with its figures wherever
/// the folder is copied.
fn chart_links(dir: &Path, charts: &[PathBuf]) -> String {
    let rel = |p: &Path| {
        p.strip_prefix(dir)
            .unwrap_or(p)
            .to_string_lossy()
            .replace('\\', "/")
    };
    let mut stems: Vec<&std::ffi::OsStr> = charts.iter().filter_map(|p| p.file_stem()).collect();
    stems.dedup();
    let mut s = String::new();
    for stem in stems {
        let of = |ext: &str| {
            charts
                .iter()
                .find(|p| p.file_stem() == Some(stem) && p.extension().is_some_and(|e| e == ext))
        };
        let name = stem.to_string_lossy();
        let line = match (of("png"), of("svg")) {
            (Some(png), Some(svg)) => {
                format!("![{name}]({}) ([SVG]({}))", rel(png), rel(svg))
            }
            (Some(png), None) => format!("![{name}]({})", rel(png)),
            (None, Some(svg)) => format!("![{name}]({})", rel(svg)),
            (None, None) => continue,
        };
        s += &format!("{line}\n\n");
    }
    if s.is_empty() {
        s
    } else {
        format!("\n## Charts\n\n{s}")
    }
}

#[cfg(test)]
mod tests {
    use crate::store::tests::{feed, rid, summary};

    #[test]
    fn runs_that_recorded_their_stages_get_the_stage_chart_and_csv_columns() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "w", "").unwrap();
        for (i, v) in ["eager", "+ cuda_graphs"].iter().enumerate() {
            for rep in 0..2 {
                let mut s = summary(0.5, 10.0 - 2.0 * i as f64, None);
                let graphs = i == 1;
                s.graphs = Some(if graphs { "on" } else { "off" }.into());
                s.stages = Some(Box::new(crate::events::StageSeconds {
                    data_s: 1.0,
                    forward_s: (!graphs).then_some(2.0),
                    backward_s: (!graphs).then_some(3.0),
                    forward_backward_s: if graphs { 3.5 } else { 5.0 },
                    optimiser_s: 1.5,
                    eval_s: 0.5,
                    timed_by: "host clock".into(),
                }));
                feed(&mut w, rid(v, i, rep), rep as u64, Some(s));
            }
        }
        let dir = w.dir().to_path_buf();
        let files = super::write(&dir).unwrap();
        assert!(files.contains(&dir.join("stages.png")), "{files:?}");
        assert!(files.contains(&dir.join("stages.svg")), "{files:?}");
        let svg = std::fs::read_to_string(dir.join("stages.svg")).unwrap();
        for word in [
            "data",
            "forward",
            "backward",
            "forward+backward",
            "optimiser",
            "evaluation",
        ] {
            assert!(svg.contains(word), "the stage chart lacks {word}");
        }
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let csv = r.to_csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let row: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
        let at = |c: &str| header.iter().position(|h| *h == c).unwrap();
        assert_eq!(row[at("stage_forward_backward_s_mean")], "3.5");
        assert_eq!(
            row[at("stage_forward_s_mean")],
            "",
            "a graph's forward is not split"
        );
        assert_eq!(row[at("graphs")], "\"on\"");
        let first: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(first[at("stage_forward_s_mean")], "2");
        assert_eq!(first[at("stage_optimiser_s_mean")], "1.5");
    }

    #[test]
    fn a_folder_gets_its_report_its_charts_and_one_html_file_with_them_inline() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "w", "").unwrap();
        for (i, v) in ["baseline", "+ celu"].iter().enumerate() {
            for rep in 0..2 {
                let s = summary(0.5 + 0.05 * i as f64, 10.0 - 2.0 * i as f64, Some(5.0));
                feed(&mut w, rid(v, i, rep), rep as u64, Some(s));
            }
        }
        let dir = w.dir().to_path_buf();
        let files = super::write(&dir).unwrap();
        // report.md, report.html, and 5 charts as PNG and SVG.
        assert_eq!(files.len(), 12);
        assert!(files.iter().all(|f| f.parent() == Some(dir.as_path())));
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| 1 | + celu |"), "{md}");
        // The setup's run count reads as English.
        assert!(
            md.contains("4 finished, 2 per variant") && !md.contains(" a variant"),
            "{md}"
        );
        // Each chart written is linked from report.md by its relative path,
        // and the link leads to the file.
        for chart in files.iter().skip(2) {
            let name = chart.file_name().unwrap().to_string_lossy();
            assert!(
                md.contains(&format!("]({name})")),
                "{name} not linked: {md}"
            );
            assert!(dir.join(&*name).is_file());
        }
        assert!(
            md.contains("![time_to_accuracy](time_to_accuracy.png) ([SVG](time_to_accuracy.svg))")
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<table"), "{html}");
        assert_eq!(html.matches("<svg").count(), 5, "the charts inline");
    }

    /// A designed matrix's folder gets its effect charts too, linked from
    /// report.md and inline in report.html.
    #[test]
    fn a_factorial_folder_gets_its_effect_charts_inline() {
        let text = "name = \"w\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 2\nvary = [\"tta\", \"lookahead\"]\n";
        let root = tempfile::tempdir().unwrap();
        let (dir, _) = crate::report::effects::tests::planted(root.path(), text, 2, &|c, rng| {
            (
                0.5 + 0.02 * f64::from(c & 1) + 0.01 * rng.unit_f64(),
                10.0 + rng.unit_f64(),
            )
        });
        let files = super::write(&dir).unwrap();
        // report.md, report.html, the 4 charts of every folder but the
        // ladder (a factorial has no rungs) and the 4 of a design, each as
        // PNG and SVG.
        assert_eq!(files.len(), 18, "{files:?}");
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        for chart in [
            "effects_time",
            "effects_accuracy",
            "interactions",
            "shapley",
        ] {
            assert!(
                md.contains(&format!("![{chart}]({chart}.png) ([SVG]({chart}.svg))")),
                "{chart}: {md}"
            );
            assert!(html.contains(&format!("<h2>{chart}</h2>")), "{chart}");
        }
        assert_eq!(html.matches("<svg").count(), 8, "the charts inline");
    }

    #[test]
    fn a_chart_that_cannot_be_drawn_loses_no_table() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "w", "").unwrap();
        for rep in 0..2 {
            let s = summary(0.5, 10.0, Some(5.0));
            feed(&mut w, rid("baseline", 0, rep), rep as u64, Some(s));
        }
        let dir = w.dir().to_path_buf();
        // Damage every epochs file the accuracy-against-time chart reads.
        let mut damaged = 0;
        for f in std::fs::read_dir(dir.join("epochs")).unwrap().flatten() {
            std::fs::write(f.path(), b"PAR1 truncated").unwrap();
            damaged += 1;
        }
        assert!(damaged > 0);
        let e = super::write(&dir).unwrap_err();
        assert!(
            format!("{e:#}").contains("report.md and report.html were written without charts"),
            "{e:#}"
        );
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| 0 | baseline |"), "{md}");
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<table") && !html.contains("<svg"), "{html}");
    }

    #[test]
    fn report_md_links_only_the_charts_written() {
        let dir = std::path::Path::new("/r/f");
        let links = super::chart_links(dir, &[dir.join("ladder.svg"), dir.join("pareto.png")]);
        assert_eq!(
            links,
            "\n## Charts\n\n![ladder](ladder.svg)\n\n![pareto](pareto.png)\n\n"
        );
        assert_eq!(super::chart_links(dir, &[]), "");
    }
}
