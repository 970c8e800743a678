//! Charts for write-ups, PNG and SVG, drawn with plotters and an embedded
//! font so they render on machines without system fonts (`theme`). One file
//! a chart: the ladder, the accuracy distribution, the training curves, time
//! against accuracy with its Pareto front, time to accuracy, the nightly
//! history, and a designed matrix's effects (`effects/`: the effect bars,
//! the interaction plots and the Shapley waterfall, one file each). They
//! draw what the report hands them (`Report` and `report::figures::Figures`)
//! and read no results files.

mod accuracy;
mod curves;
mod effects;
mod history;
mod ladder;
mod pareto;
mod parts;
mod stages;
mod theme;
mod time_to_accuracy;

use crate::report::Report;
use crate::report::figures::Figures;
use anyhow::{Context, Result};
pub use history::write_history;
use image::ImageEncoder as _;
use parts::{Res, tta_words};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
pub use theme::PlotTheme;
use theme::{Theme, register_font};

/// Which files a chart is written as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotFormat {
    Png,
    Svg,
    #[default]
    Both,
}

/// The user's choices for exported charts (`report --plots-format --plots-size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlotOptions {
    pub format: PlotFormat,
    /// Every chart at this size in pixels instead of its own.
    pub size: Option<(u32, u32)>,
    pub theme: PlotTheme,
}

/// "WIDTHxHEIGHT" in pixels, each from 200 to 8000.
pub fn parse_plot_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!("--plots-size {s}: give WIDTHxHEIGHT in pixels, e.g. 1600x900 (200 to 8000 each)")
    };
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (
        w.trim().parse().map_err(|_| bad())?,
        h.trim().parse().map_err(|_| bad())?,
    );
    if !(200..=8000).contains(&w) || !(200..=8000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

fn both(
    out: &Path,
    name: &str,
    size: (u32, u32),
    opts: &PlotOptions,
    draw: &dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res,
    draw_svg: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res,
) -> Result<Vec<PathBuf>> {
    let size = opts.size.unwrap_or(size);
    let png = out.join(format!("{name}.png"));
    let svg = out.join(format!("{name}.svg"));
    let mut files = Vec::new();
    if opts.format != PlotFormat::Svg {
        write_png(&png, name, size, draw)?;
        files.push(png);
    }
    if opts.format != PlotFormat::Png {
        write_svg(&svg, name, size, draw_svg)?;
        files.push(svg);
    }
    Ok(files)
}

fn write_png(
    png: &Path,
    name: &str,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res,
) -> Result<()> {
    let (w, h) = size;
    let mut rgb = vec![0u8; (w as usize) * (h as usize) * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(&root).map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
    }
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(&rgb, w, h, image::ExtendedColorType::Rgb8)
        .with_context(|| format!("encoding {}", png.display()))?;
    crate::util::write_atomic(png, &bytes)
}

fn write_svg(
    svg: &Path,
    name: &str,
    size: (u32, u32),
    draw_svg: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res,
) -> Result<()> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        draw_svg(&root).map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", svg.display()))?;
    }
    crate::util::write_atomic(svg, text.as_bytes())
}

/// Writes every chart into `out` as `opts` asks; returns the files.
pub fn write_all(r: &Report, f: &Figures, out: &Path, opts: &PlotOptions) -> Result<Vec<PathBuf>> {
    register_font();
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let (runs, cs, ts) = (&f.runs, &f.curves, &f.time_curves);
    let tta = tta_words(runs);
    let theme = Theme::of(opts.theme);
    let t = &theme;
    let h = (160 + 60 * r.rows.len() as u32).clamp(420, 1400);
    type Png<'a> = &'a dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Res;
    type Svg<'a> = &'a dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Res;
    let charts: [(&str, (u32, u32), Png, Svg); 5] = [
        (
            "ladder",
            (1400, h + 60),
            &|a| ladder::ladder(a, r, tta, t),
            &|a| ladder::ladder(a, r, tta, t),
        ),
        (
            "accuracy",
            (1200, h + 40),
            &|a| accuracy::accuracy(a, r, runs, t),
            &|a| accuracy::accuracy(a, r, runs, t),
        ),
        (
            "curves",
            (1200, 1000),
            &|a| curves::curves_chart(a, cs, r, t),
            &|a| curves::curves_chart(a, cs, r, t),
        ),
        (
            "pareto",
            (1100, 800),
            &|a| pareto::pareto(a, r, tta, t),
            &|a| pareto::pareto(a, r, tta, t),
        ),
        (
            "time_to_accuracy",
            (1200, 750),
            &|a| time_to_accuracy::time_to_accuracy(a, r, ts, tta, t),
            &|a| time_to_accuracy::time_to_accuracy(a, r, ts, tta, t),
        ),
    ];
    // A designed matrix (factorial, fractional, Shapley) has no rungs: its
    // variants are design points, which the effects charts below read.
    // The ladder is drawn where some folder's variants are read in order.
    let designed_only = !r.effects.is_empty() && r.effects.len() >= r.dirs.len();
    let mut files = Vec::new();
    for (name, size, png, svg) in charts {
        if name == "ladder" && designed_only {
            continue;
        }
        if crate::util::signals::stopping() {
            // Stopped: the files written so far, and no more.
            return Ok(files);
        }
        files.extend(both(out, name, size, opts, png, svg)?);
    }
    // Only runs that recorded their stages have this chart (folders older
    // than the record keep the charts they had).
    if stages::any(r) {
        let h = (200 + 60 * r.rows.len() as u32).clamp(420, 1400);
        files.extend(both(
            out,
            "stages",
            (1300, h),
            opts,
            &|a| stages::stages(a, r, t),
            &|a| stages::stages(a, r, t),
        )?);
    }
    // Only a report with a designed matrix has these: every other report's
    // charts stay as they were.
    files.extend(effects::write(r, out, opts, tta, t)?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::pareto::{pareto_front, pareto_points};
    use super::parts::*;
    use super::theme::*;
    use super::*;
    use crate::report::Clock;
    use crate::report::curves::{curves, time_curves};

    /// A script that reports once an epoch gives each variant of a one-epoch
    /// run one point: drawn as a dot in each panel, where a line of one
    /// point drew nothing and the chart came out empty.
    #[test]
    fn a_curve_of_one_point_is_a_dot_in_each_panel() {
        let root = tempfile::tempdir().unwrap();
        let dir = fixed_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let cs: Vec<crate::report::curves::Curve> = (0..2)
            .map(|i| crate::report::curves::Curve {
                index: i,
                variant: format!("v{i}"),
                points: vec![(1.0, 2.0, 1.9, 2.1, 0.1, Some(0.9))],
            })
            .collect();
        register_font();
        let mut svg = String::new();
        {
            let area = SVGBackend::with_string(&mut svg, (800, 600)).into_drawing_area();
            curves::curves_chart(&area, &cs, &r, &Theme::of(PlotTheme::Light)).unwrap();
        }
        // Two variants, three panels (loss, lr, BN scale).
        assert_eq!(svg.matches("<circle").count(), 6, "{svg}");
    }

    /// The text sizes the charts use, every one even (see `FAMILY`).
    const TEXT_SIZES: [u32; 5] = [14, 16, 18, 24, 26];

    #[test]
    fn glyphs_share_their_baseline() {
        register_font();
        let sizes: Vec<u32> = {
            let src = concat!(
                include_str!("mod.rs"),
                include_str!("theme.rs"),
                include_str!("parts.rs"),
                include_str!("ladder.rs"),
                include_str!("accuracy.rs"),
                include_str!("curves.rs"),
                include_str!("pareto.rs"),
                include_str!("time_to_accuracy.rs"),
                include_str!("history.rs"),
                include_str!("effects/mod.rs"),
                include_str!("effects/shared.rs"),
                include_str!("effects/bars.rs"),
                include_str!("effects/interactions.rs"),
                include_str!("effects/waterfall.rs")
            );
            // `t.font(N)` and the axes' `t.axes(mesh, N)`.
            let mut v: Vec<u32> = src
                .match_indices("t.font(")
                .filter_map(|(i, _)| src[i + 7..].split(')').next()?.parse().ok())
                .chain(src.match_indices("t.axes(").filter_map(|(i, _)| {
                    src[i..]
                        .split(')')
                        .nth(1)?
                        .trim_start_matches(',')
                        .trim()
                        .parse()
                        .ok()
                }))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        assert_eq!(
            sizes, TEXT_SIZES,
            "a text size was added: keep it even and list it"
        );
        for size in TEXT_SIZES {
            let (w, h) = (200u32, 60u32);
            let mut buf = vec![255u8; (w * h * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
                root.draw(&Text::new("8 . 8", (4, 4), (FAMILY, size as f64)))
                    .unwrap();
                root.present().unwrap();
            }
            // The lowest inked row of each column, then of each glyph (gaps split them).
            let bottoms: Vec<Option<u32>> = (0..w)
                .map(|x| (0..h).rfind(|&y| buf[((y * w + x) * 3) as usize] < 160))
                .collect();
            let mut glyphs: Vec<u32> = Vec::new();
            let mut cur: Option<u32> = None;
            for b in bottoms {
                match (b, cur) {
                    (Some(b), Some(c)) => cur = Some(c.max(b)),
                    (Some(b), None) => cur = Some(b),
                    (None, Some(c)) => {
                        glyphs.push(c);
                        cur = None;
                    }
                    (None, None) => {}
                }
            }
            assert_eq!(glyphs.len(), 3, "size {size}: {glyphs:?}");
            assert!(
                glyphs[1].abs_diff(glyphs[0]) == 0 && glyphs[2] == glyphs[0],
                "size {size}: the decimal point's bottom {} is not the digits' {}",
                glyphs[1],
                glyphs[0]
            );
        }
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one set of charts checked file by file"
    )]
    fn charts_are_valid_png_and_svg() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "c", "").unwrap();
        for (i, v) in [
            "baseline",
            "+ a rather long trick name that needs abbreviating",
            "+ celu",
        ]
        .iter()
        .enumerate()
        {
            for rep in 0..2 {
                crate::store::tests::feed(
                    &mut w,
                    crate::store::tests::rid(v, i, rep),
                    rep as u64,
                    Some(crate::store::tests::summary(
                        0.5 + 0.05 * i as f64 + 0.01 * rep as f64,
                        10.0 - 2.0 * i as f64,
                        Some(5.0),
                    )),
                );
            }
        }
        let dir = w.dir().to_path_buf();
        let report =
            crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let files = write_all(
            &report,
            &Figures::read(&report, std::slice::from_ref(&dir)).unwrap(),
            &dir,
            &PlotOptions::default(),
        )
        .unwrap();
        // 5 charts, each as PNG and SVG.
        assert_eq!(files.len(), 10);
        for f in &files {
            let b = std::fs::read(f).unwrap();
            match f.extension().unwrap().to_str().unwrap() {
                "png" => assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display()),
                "svg" => assert!(
                    String::from_utf8_lossy(&b).contains("<svg") && b.len() > 1000,
                    "{}",
                    f.display()
                ),
                other => panic!("{other}: not a chart"),
            }
        }
        // Names are whole on the category axes and in the legends.
        for chart in ["ladder", "accuracy", "curves", "time_to_accuracy"] {
            let svg = std::fs::read_to_string(dir.join(format!("{chart}.svg"))).unwrap();
            assert!(
                svg.contains("+ a rather long trick name that needs abbreviating"),
                "{chart}"
            );
        }
        // The loss panel (across the top, axis at the left) labels its log axis with losses, not only powers of ten.
        let svg = std::fs::read_to_string(dir.join("curves.svg")).unwrap();
        let loss_ticks = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| {
                let x: f64 = t.split("x=\"").nth(1)?.split('"').next()?.parse().ok()?;
                let body = t.split('>').nth(1)?.split('<').next()?.trim();
                (x < 100.0).then(|| body.parse::<f64>().ok()).flatten()
            })
            .filter(|v| (0.5..=2.5).contains(v))
            .count();
        assert!(loss_ticks >= 4, "{loss_ticks} loss tick labels");
        let cs = curves(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(cs.len(), 3);
        // Format and size as asked: SVG only, every chart 800x400.
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            size: Some((800, 400)),
            ..Default::default()
        };
        let only = root.path().join("svg-only");
        let r0 = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let written = write_all(
            &r0,
            &Figures::read(&r0, std::slice::from_ref(&dir)).unwrap(),
            &only,
            &opts,
        )
        .unwrap();
        assert_eq!(written.len(), 5);
        for f in &written {
            assert_eq!(f.extension().unwrap(), "svg");
            let t = std::fs::read_to_string(f).unwrap();
            assert!(
                t.contains("width=\"800\"") && t.contains("height=\"400\""),
                "{}",
                f.display()
            );
        }
        // At 800 pixels the long name is shortened to its axis, not drawn over the bars.
        let small = std::fs::read_to_string(only.join("ladder.svg")).unwrap();
        assert!(
            small.contains("+ a rather long") && small.contains('…'),
            "{small}"
        );
        assert_eq!(parse_plot_size("1600x900"), Ok((1600, 900)));
        assert!(parse_plot_size("16x9").is_err() && parse_plot_size("wide").is_err());
        // An infinite time (a damaged table) is left out instead of hanging the axis.
        let mut r =
            crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        r.rows[0].dawn.mean = f64::INFINITY;
        r.rows[1].dawn.ci95 = f64::INFINITY;
        let out = root.path().join("inf");
        assert!(
            !write_all(
                &r,
                &Figures::read(&r, std::slice::from_ref(&dir)).unwrap(),
                &out,
                &PlotOptions::default()
            )
            .unwrap()
            .is_empty()
        );
        // A damaged step file is named.
        let bad = dir.join("steps").join("zz-damaged.parquet");
        std::fs::write(&bad, b"PAR1 not really").unwrap();
        let e = format!("{:#}", curves(std::slice::from_ref(&dir)).err().unwrap());
        assert!(
            e.contains("zz-damaged.parquet") && e.contains("delete it"),
            "{e}"
        );
        std::fs::remove_file(&bad).unwrap();
        assert_eq!(cs[0].points.len(), 3);
        assert!((cs[0].points[0].1 - 2.0).abs() < 1e-9);

        // Step files written without a matrix column (older stores) still aggregate.
        for e in std::fs::read_dir(dir.join("steps")).unwrap().flatten() {
            let mut df = crate::store::read_parquet(&e.path(), None).unwrap();
            let _ = df.drop_in_place("matrix").unwrap();
            crate::store::write_parquet(&e.path(), &mut df).unwrap();
        }
        let old = curves(&[dir]).unwrap();
        assert_eq!(old.len(), 3);
        assert_eq!(old[0].points, cs[0].points);
    }

    /// A report of three rungs with two seeds each, the same on every machine.
    fn fixed_store(root: &Path) -> PathBuf {
        let mut w = crate::store::ResultsWriter::create(root, "c", "").unwrap();
        for (i, v) in ["baseline", "+ label smoothing", "+ celu"]
            .iter()
            .enumerate()
        {
            for rep in 0..2 {
                crate::store::tests::feed(
                    &mut w,
                    crate::store::tests::rid(v, i, rep),
                    rep as u64,
                    Some(crate::store::tests::summary(
                        0.5 + 0.05 * i as f64 + 0.01 * rep as f64,
                        10.0 - 2.0 * i as f64 + 0.5 * rep as f64,
                        Some(5.0),
                    )),
                );
            }
        }
        w.dir().to_path_buf()
    }

    /// A narrow ladder keeps both axis titles: the accuracy axis's long
    /// title where it fits its panel, its short form where not (the long
    /// one was cut at the edge and ran into the time axis's).
    #[test]
    fn a_narrow_ladder_keeps_both_axis_titles() {
        let root = tempfile::tempdir().unwrap();
        let dir = fixed_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let figures = Figures::read(&r, std::slice::from_ref(&dir)).unwrap();
        for (w, long) in [(1400, true), (800, false)] {
            let out = root.path().join(format!("w{w}"));
            let opts = PlotOptions {
                format: PlotFormat::Svg,
                size: Some((w, 600)),
                theme: PlotTheme::Light,
            };
            write_all(&r, &figures, &out, &opts).unwrap();
            let svg = std::fs::read_to_string(out.join("ladder.svg")).unwrap();
            assert!(svg.contains("DAWNBench-style time (s)"), "{w}");
            assert_eq!(svg.contains("clipped to 0-100"), long, "{w}");
            assert!(svg.contains("mean ± 95% CI"), "{w}");
        }
    }

    /// The SVGs are text: any change to a chart shows up here as a diff
    /// (insta: `cargo insta review`, or `INSTA_UPDATE=always`, after a change
    /// that is meant).
    #[test]
    fn svg_charts_match_their_snapshots_in_both_themes() {
        let root = tempfile::tempdir().unwrap();
        let dir = fixed_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        for theme in [PlotTheme::Light, PlotTheme::Dark] {
            let opts = PlotOptions {
                format: PlotFormat::Svg,
                size: Some((1000, 500)),
                theme,
            };
            let out = root.path().join(format!("{theme:?}"));
            let files = write_all(
                &r,
                &Figures::read(&r, std::slice::from_ref(&dir)).unwrap(),
                &out,
                &opts,
            )
            .unwrap();
            for f in files {
                let name = format!(
                    "chart_{}_{}",
                    f.file_stem().unwrap().to_string_lossy(),
                    format!("{theme:?}").to_lowercase()
                );
                let got = std::fs::read_to_string(&f).unwrap();
                insta::with_settings!({
                    snapshot_path => "../../tests/snapshots",
                    prepend_module_to_snapshot => false,
                    omit_expression => true,
                }, {
                    insta::assert_snapshot!(name, got);
                });
            }
            // The theme reaches the background and the text.
            let ladder = std::fs::read_to_string(out.join("ladder.svg")).unwrap();
            let (bg, fg) = match theme {
                PlotTheme::Light => ("#FFFFFF", "#000000"),
                PlotTheme::Dark => ("#18181C", "#E1E1E1"),
            };
            assert!(
                ladder.contains(&format!("fill=\"{bg}\""))
                    && ladder.contains(&format!("fill=\"{fg}\"")),
                "{theme:?}"
            );
        }
    }

    /// One run fed with its own evaluations: (test accuracy, training
    /// seconds of the epoch) per epoch, its DAWNBench-style total `dawn`,
    /// and `noise` for a run whose seconds are not to be trusted.
    fn feed_evals(
        w: &mut crate::store::ResultsWriter,
        run: crate::events::RunId,
        seed: u64,
        evals: &[(f64, f64)],
        dawn: f64,
        noise: Option<&str>,
    ) {
        use crate::events::{EpochRow, Event};
        w.on_event(&Event::RunStarted {
            run: run.clone(),
            seed,
            record: crate::testkit::record_with(&run, &["tta=off"]),
            total_steps: 3,
            total_epochs: evals.len() as f64,
            target_acc: 0.5,
            device: "cpu".into(),
            reference: None,
        })
        .unwrap();
        for (e, (acc, train_s)) in evals.iter().enumerate() {
            let row = EpochRow {
                epoch: e + 1,
                steps: 3 * (e as u64 + 1),
                train_loss: 1.0,
                train_acc: 0.5,
                test_acc: *acc,
                test_acc_tta: None,
                train_s: *train_s,
                eval_s: 0.5,
                images_per_s: 10.0,
                peak_mem_bytes: None,
                loader_s: 0.0,
                loader_images_per_s: None,
                ddp: None,
            };
            w.on_event(&Event::Epoch {
                run: run.clone(),
                row,
            })
            .unwrap();
        }
        let mut summary = crate::store::tests::summary(evals.last().unwrap().0, dawn, None);
        summary.acc_tta = summary.acc;
        summary.noise = noise.map(str::to_string);
        w.on_event(&Event::RunFinished { run, summary }).unwrap();
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one fixture, then each clock, --drop-noisy and the chart checked on it"
    )]
    fn accuracy_against_time_is_the_mean_and_t_interval_over_seeds() {
        let root = tempfile::tempdir().unwrap();
        let mut w = crate::store::ResultsWriter::create(root.path(), "t", "").unwrap();
        let rid = crate::store::tests::rid;
        // Two seeds of the baseline, the second evaluated once more slowly;
        // one seed of "+ celu".
        feed_evals(
            &mut w,
            rid("baseline", 0, 0),
            0,
            &[(0.30, 2.0), (0.50, 3.0)],
            5.1,
            None,
        );
        feed_evals(
            &mut w,
            rid("baseline", 0, 1),
            1,
            &[(0.40, 4.0), (0.60, 3.0)],
            7.1,
            None,
        );
        feed_evals(
            &mut w,
            rid("+ celu", 1, 0),
            0,
            &[(0.45, 1.0), (0.70, 1.0)],
            2.1,
            Some("busy"),
        );
        let dir = w.dir().to_path_buf();
        let cs = time_curves(std::slice::from_ref(&dir), &|_| Clock::Dawn, false).unwrap();
        assert_eq!(cs.len(), 2);
        let (base, celu) = (&cs[0], &cs[1]);
        assert_eq!(
            (base.variant.as_str(), base.runs, base.noisy),
            ("baseline", 2, 0)
        );
        assert_eq!(
            (celu.variant.as_str(), celu.runs, celu.noisy),
            ("+ celu", 1, 1)
        );
        // DAWNBench-style at an evaluation: preparation (0.1 s in the
        // summary) plus the training so far.
        let p = &base.points;
        assert_eq!(p.len(), 2);
        assert!(
            (p[0].seconds - (0.1 + (2.0 + 4.0) / 2.0)).abs() < 1e-9,
            "{p:?}"
        );
        assert!(
            (p[1].seconds - (0.1 + (5.0 + 7.0) / 2.0)).abs() < 1e-9,
            "{p:?}"
        );
        assert!((p[0].acc - 0.35).abs() < 1e-9 && (p[1].acc - 0.55).abs() < 1e-9);
        // Two seeds 0.1 apart: s = 0.1/√2, half-width t(0.975, 1) · s/√2 = 12.706 · 0.05.
        let t1 = (std::f64::consts::PI * (0.975 - 0.5)).tan();
        assert!((p[0].acc_ci95.unwrap() - t1 * 0.05).abs() < 1e-9, "{p:?}");
        assert_eq!(p[0].n, 2);
        // One seed: the mean and no interval.
        assert_eq!(celu.points[1].acc_ci95, None);
        assert!((celu.points[1].seconds - 2.1).abs() < 1e-9);
        // hlb: the training alone; airbench: whitening, training and that evaluation.
        let hlb = time_curves(std::slice::from_ref(&dir), &|_| Clock::Hlb, false).unwrap();
        assert!((hlb[0].points[0].seconds - 3.0).abs() < 1e-9);
        let air = time_curves(std::slice::from_ref(&dir), &|_| Clock::Airbench, false).unwrap();
        assert!((air[0].points[0].seconds - 3.5).abs() < 1e-9);
        // --drop-noisy: the noisy run leaves the curve as it leaves the tables.
        let kept = time_curves(std::slice::from_ref(&dir), &|_| Clock::Dawn, true).unwrap();
        assert_eq!(
            kept.len(),
            1,
            "{:?}",
            kept.iter().map(|c| &c.variant).collect::<Vec<_>>()
        );
        assert_eq!((kept[0].runs, kept[0].noisy), (2, 0));

        // The chart is written with the rest, and names the noisy run.
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        let files = write_all(
            &r,
            &Figures::read(&r, std::slice::from_ref(&dir)).unwrap(),
            &dir,
            &opts,
        )
        .unwrap();
        assert!(
            files.contains(&dir.join("time_to_accuracy.svg")),
            "{files:?}"
        );
        let svg = std::fs::read_to_string(dir.join("time_to_accuracy.svg")).unwrap();
        assert!(svg.contains("Accuracy against time"), "{svg}");
        assert!(svg.contains("1 + celu · 1 of 1 noisy"), "{svg}");
        // A band (the CI) for the baseline, evaluated by two seeds.
        assert!(svg.contains("<polygon"), "{svg}");
        // No run used TTA: no chart says it did.
        for f in &files {
            let t = std::fs::read_to_string(f).unwrap();
            assert!(!t.contains("TTA"), "{}", f.display());
        }
    }

    /// A store where "+ celu" has a noisy run and the baseline's two seeds
    /// are so far apart that the time CI reaches below 0 s.
    fn noisy_store(root: &Path) -> PathBuf {
        let mut w = crate::store::ResultsWriter::create(root, "n", "").unwrap();
        let rid = crate::store::tests::rid;
        feed_evals(&mut w, rid("baseline", 0, 0), 0, &[(0.50, 1.0)], 1.0, None);
        feed_evals(&mut w, rid("baseline", 0, 1), 1, &[(0.52, 9.0)], 9.0, None);
        feed_evals(
            &mut w,
            rid("+ celu", 1, 0),
            0,
            &[(0.60, 1.0)],
            0.5,
            Some("busy"),
        );
        feed_evals(&mut w, rid("+ celu", 1, 1), 1, &[(0.61, 1.0)], 0.6, None);
        feed_evals(&mut w, rid("+ ema", 2, 0), 0, &[(0.55, 1.0)], 3.0, None);
        feed_evals(&mut w, rid("+ ema", 2, 1), 1, &[(0.56, 1.0)], 3.1, None);
        w.dir().to_path_buf()
    }

    #[test]
    fn noisy_runs_are_marked_and_kept_off_the_pareto_front() {
        let root = tempfile::tempdir().unwrap();
        let dir = noisy_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        write_all(
            &r,
            &Figures::read(&r, std::slice::from_ref(&dir)).unwrap(),
            &dir,
            &opts,
        )
        .unwrap();
        let ladder = std::fs::read_to_string(dir.join("ladder.svg")).unwrap();
        // The count in the rung's label, and the legend for the marks.
        assert!(ladder.contains("· 1 of 2 noisy"), "{ladder}");
        assert_eq!(ladder.matches(" of 2 noisy").count(), 1, "{ladder}");
        assert!(ladder.contains("rung with noisy runs"), "{ladder}");
        let acc = std::fs::read_to_string(dir.join("accuracy.svg")).unwrap();
        assert!(acc.contains("run flagged noisy"), "{acc}");
        // "+ celu" is the fastest and most accurate, but its seconds are not
        // to be trusted: the front runs through the clean variants only.
        let pts = pareto_points(&r);
        assert_eq!(pts.iter().filter(|p| p.noisy).count(), 1);
        let front = pareto_front(&pts);
        let celu = pts.iter().find(|p| p.noisy).unwrap();
        assert!(!front.contains(&(celu.time, celu.acc)), "{front:?}");
        // ema (3.05 s, 55.5%) beats baseline (5 s, 51%) on both: the front is ema alone.
        assert_eq!(front.len(), 1, "{front:?}");
        let pareto = std::fs::read_to_string(dir.join("pareto.svg")).unwrap();
        assert!(
            pareto.contains("1 + celu · 1 of 2 noisy")
                && pareto.contains("variant with noisy runs"),
            "{pareto}"
        );
    }

    /// The polylines of an SVG as their points.
    pub(super) fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .filter_map(|p| {
                let pts = p.split("points=\"").nth(1)?.split('"').next()?;
                Some(
                    pts.split_whitespace()
                        .filter_map(|xy| {
                            let (x, y) = xy.split_once(',')?;
                            Some((x.parse().ok()?, y.parse().ok()?))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn pareto_has_error_bars_and_cut_whiskers_say_so() {
        let root = tempfile::tempdir().unwrap();
        let dir = noisy_store(root.path());
        let r = crate::report::aggregate(std::slice::from_ref(&dir), &Default::default()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        write_all(
            &r,
            &Figures::read(&r, std::slice::from_ref(&dir)).unwrap(),
            &dir,
            &opts,
        )
        .unwrap();
        let pareto = std::fs::read_to_string(dir.join("pareto.svg")).unwrap();
        let lines = polylines(&pareto);
        // Each of the three variants (n = 2) has a vertical accuracy bar.
        let vertical = lines
            .iter()
            .filter(|l| l.len() == 2 && l[0].0 == l[1].0 && l[0].1 != l[1].1)
            .count();
        assert!(vertical >= 3, "{vertical} vertical bars: {lines:?}");
        // The baseline's time CI (1 s and 9 s: 5 ± 50.8 s) is cut at 0 and says so.
        assert_eq!(time_whisker(5.0, 50.8), (0.0, 55.8, true));
        assert_eq!(time_whisker(5.0, 1.0), (4.0, 6.0, false));
        assert!(pareto.contains(CUT_NOTE), "{pareto}");
        let ladder = std::fs::read_to_string(dir.join("ladder.svg")).unwrap();
        assert!(ladder.contains(CUT_NOTE), "{ladder}");
        // The arrowhead at the cut end: three points, the middle one foremost.
        assert!(
            polylines(&ladder)
                .iter()
                .any(|l| l.len() == 3 && l[0].0 == l[2].0 && l[1].0 < l[0].0),
            "{ladder}"
        );
        // A chart whose whiskers stay above 0 carries no such note.
        let fixed = fixed_store(root.path());
        let r =
            crate::report::aggregate(std::slice::from_ref(&fixed), &Default::default()).unwrap();
        write_all(
            &r,
            &Figures::read(&r, std::slice::from_ref(&fixed)).unwrap(),
            &fixed,
            &opts,
        )
        .unwrap();
        let ladder = std::fs::read_to_string(fixed.join("ladder.svg")).unwrap();
        assert!(!ladder.contains(CUT_NOTE));
    }

    #[test]
    fn a_long_subtitle_wraps_inside_the_canvas() {
        register_font();
        let long = "AMD EPYC 7763 64-Core Processor (16 cores); GPU NVIDIA H100 80GB HBM3 · data cifar10 (hash 0123456789abcdef) · 27 finished, 3 per variant, 6 flagged noisy · dawn clock";
        let mut text = String::new();
        {
            let root = SVGBackend::with_string(&mut text, (500, 300)).into_drawing_area();
            let style = Theme::of(PlotTheme::Light).font(14);
            let lines = wrap(&root, long, &style, 476);
            assert!(lines.len() >= 3, "{lines:?}");
            assert_eq!(lines.join(" "), long, "no word lost");
            for l in &lines {
                assert!(root.estimate_text_size(l, &style).unwrap().0 <= 476, "{l}");
            }
            let below = titled_wrapped(&root, long, style).unwrap();
            // The area left for the chart starts under every line.
            assert!(
                below.get_base_pixel().1 >= 3 * 14,
                "{:?}",
                below.get_base_pixel()
            );
            root.present().unwrap();
        }
        // Each line is its own text element, centred on the canvas.
        let n = text.matches("<text").count();
        assert!(n >= 3, "{text}");
    }

    #[test]
    fn tta_is_named_only_where_runs_used_it() {
        let run = |level: u32| {
            let id = crate::store::tests::rid("v", 0, 0);
            let tta = if level > 0 { "tta" } else { "tta=off" };
            let rec = crate::testkit::record_with(&id, &[tta]);
            let s = crate::store::tests::summary(0.9, 1.0, None);
            crate::store::RunRow::new(
                &id,
                Some((0, &rec, 0.9)),
                crate::store::Ended::Done,
                None,
                Some(&s),
            )
        };
        assert_eq!(tta_words(&[run(0), run(0)]), "");
        assert_eq!(tta_words(&[run(2), run(1)]), " (TTA)");
        assert_eq!(tta_words(&[run(0), run(2)]), " (TTA where the run used it)");
    }

    #[test]
    fn history_whiskers_cut_at_0_say_so_and_names_stay_whole() {
        let root = tempfile::tempdir().unwrap();
        let long = "B5 + ghost BN with a name longer than thirty characters";
        let mut csv = String::from(
            "night,folder,git_commit,data_hash,matrix,index,variant,clock,n,time_s,time_ci95,acc_tta,acc_tta_ci95,verdict\n",
        );
        for (night, ci) in [
            ("2026-11-23T02:00:00Z", 1.0),
            ("2026-11-24T02:00:00Z", 30.0),
        ] {
            csv += &format!("{night},f,c,h,m,0,baseline,dawn,2,10.0,1.0,0.9,0.01,no change\n");
            csv += &format!("{night},f,c,h,m,1,{long},dawn,2,8.0,{ci},0.9,0.01,no change\n");
        }
        std::fs::write(root.path().join("history.csv"), csv).unwrap();
        let nights = crate::report::history::load(root.path()).unwrap();
        let opts = PlotOptions {
            format: PlotFormat::Svg,
            ..Default::default()
        };
        let files = write_history(&nights, root.path(), &opts).unwrap();
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        // 8 ± 30 s reaches below 0: cut there, with the note and the arrowhead.
        assert!(svg.contains(CUT_NOTE), "{svg}");
        assert!(
            polylines(&svg)
                .iter()
                .any(|l| l.len() == 3 && l[0].1 == l[2].1 && l[1].1 > l[0].1),
            "{svg}"
        );
        assert!(svg.contains(&format!("1 {long}")), "{svg}");
    }
}
