//! The write-up of a results folder: the report's tables (report/) and the
//! charts drawn from them (charts.rs), written beside the runs as report.md,
//! the PNG and SVG charts, and report.html with the SVGs inline. It sits
//! above both, so that the report only aggregates and the charts only draw.

use anyhow::Result;
use std::path::{Path, PathBuf};

/// Writes report.md, the charts and report.html into a results folder;
/// returns the files written.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>> {
    let folder = [dir.to_path_buf()];
    let report = crate::report::aggregate(&folder, &crate::report::ReportOptions::default())?;
    let md = dir.join("report.md");
    crate::util::write_atomic(&md, report.to_markdown().as_bytes())?;
    let charts = crate::charts::write_all(
        &report,
        &folder,
        dir,
        &crate::charts::PlotOptions::default(),
    )?;
    // The SVGs inline: one file to mail or attach.
    let svgs: Vec<(String, String)> = charts
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .filter_map(|p| {
            let name = p.file_stem()?.to_string_lossy().into_owned();
            Some((name, std::fs::read_to_string(p).ok()?))
        })
        .collect();
    let html = dir.join("report.html");
    crate::util::write_atomic(&html, report.to_html(&svgs).as_bytes())?;
    Ok([md, html].into_iter().chain(charts).collect())
}

#[cfg(test)]
mod tests {
    use crate::store::tests::{feed, rid, summary};

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
        // report.md, report.html, and 4 charts as PNG and SVG.
        assert_eq!(files.len(), 10);
        assert!(files.iter().all(|f| f.parent() == Some(dir.as_path())));
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| 1 | + celu |"), "{md}");
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<table"), "{html}");
        assert_eq!(html.matches("<svg").count(), 4, "the charts inline");
    }
}
