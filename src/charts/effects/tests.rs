//! The effects charts drawn from planted designs and read back from their
//! PNG and SVG files.

use super::bars::bars_extent;
use super::shared::cut_at;
use super::*;
use crate::report::effects::tests::planted;
use crate::report::effects::{Estimate, LadderCredit};

const HEAD: &str = "recipe = \"tiny-airbench94\"\nrepeats = 2\n";

/// A 2^3 factorial of tta, lookahead and label smoothing: tta +3 points
/// and +2 s, lookahead +2 points, label smoothing +1 s, and tta and
/// lookahead together 3 points short of their sum.
fn factorial(root: &Path) -> PathBuf {
    let text = format!(
        "name = \"fx\"\n{HEAD}kind = \"factorial\"\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n"
    );
    planted(root, &text, 2, &|c, rng| {
        let on = |i: u32| f64::from(c >> i & 1);
        let acc = 0.6 + 0.03 * on(0) + 0.02 * on(1) - 0.03 * on(0) * on(1)
            + 0.004 * (rng.unit_f64() - 0.5);
        (acc, 10.0 + 2.0 * on(0) + on(2) + 0.1 * rng.unit_f64())
    })
    .0
}

fn charts_of(dirs: &[PathBuf], out: &Path, opts: &PlotOptions) -> (Report, Vec<String>) {
    let r = crate::report::aggregate(dirs, &Default::default()).unwrap();
    let files = super::super::write_all(
        &r,
        &crate::report::figures::Figures::read(&r, dirs).unwrap(),
        out,
        opts,
    )
    .unwrap();
    let names = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    (r, names)
}

/// The share of a PNG's pixels that are not its background (the top
/// left pixel), and how many distinct colours it has.
fn ink(png: &Path) -> (f64, usize) {
    let img = image::open(png).unwrap().to_rgb8();
    let bg = *img.get_pixel(0, 0);
    let inked = img.pixels().filter(|p| **p != bg).count();
    let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    colours.sort_unstable();
    colours.dedup();
    (inked as f64 / img.pixels().len() as f64, colours.len())
}

const EFFECT_CHARTS: [&str; 4] = [
    "effects_time",
    "effects_accuracy",
    "interactions",
    "shapley",
];

#[test]
fn a_factorial_gets_its_effect_bars_interactions_and_waterfall() {
    let root = tempfile::tempdir().unwrap();
    let dir = factorial(root.path());
    let out = root.path().join("charts");
    let (r, names) = charts_of(std::slice::from_ref(&dir), &out, &PlotOptions::default());
    // The charts of every report but the ladder (a factorial has no rungs),
    // then the four of the design, as PNG and SVG.
    assert_eq!(names.len(), 16, "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("ladder")), "{names:?}");
    for chart in EFFECT_CHARTS {
        for ext in ["png", "svg"] {
            assert!(
                names.contains(&format!("{chart}.{ext}")),
                "{chart}.{ext}: {names:?}"
            );
        }
        let (share, colours) = ink(&out.join(format!("{chart}.png")));
        assert!(
            share > 0.03 && colours > 20,
            "{chart}: {share} inked, {colours} colours"
        );
    }
    let svg = |name: &str| std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
    let acc = svg("effects_accuracy");
    // Every term, each estimate in points, the planted interaction decided.
    for term in [
        "tta",
        "lookahead",
        "label_smoothing",
        "tta×lookahead",
        "lookahead×label_smoothing",
    ] {
        assert!(acc.contains(&format!(">\n{term}\n<")), "{term}: {acc}");
    }
    let e = &r.effects[0];
    let inter = e.analyses[1]
        .effects
        .iter()
        .find(|x| x.term == "tta×lookahead")
        .unwrap();
    assert!(inter.decided());
    assert!(
        acc.contains(&format!(
            "{} *",
            Units::of(e, &e.analyses[1], "").signed(inter.estimate)
        )),
        "{acc}"
    );
    assert!(!acc.contains("aliased"), "a full factorial aliases nothing");
    assert!(acc.contains("effect, high − low (points)"), "{acc}");
    // The zero line: as tall as the y-axis (whisker caps are a fraction
    // of a row), inside the plot, since the effects go both ways.
    let tall: Vec<f64> = crate::charts::tests::polylines(&acc)
        .into_iter()
        .filter(|l| l.len() == 2 && l[0].0 == l[1].0 && (l[0].1 - l[1].1).abs() > 300.0)
        .map(|l| l[0].0)
        .collect();
    assert!(tall.len() == 2 && tall[1] > tall[0] + 100.0, "{tall:?}");
    // The largest interaction plotted first, with its estimate and CI.
    let pairs = top_pairs(e, &e.analyses[1]);
    assert_eq!(pairs[0].0.term, "tta×lookahead");
    assert_eq!(pairs[0].1, (0, 1));
    let plots = svg("interactions");
    let signed = Units::of(e, &e.analyses[1], "").signed(inter.estimate);
    assert!(
        plots.contains("\ntta×lookahead\n") && plots.contains(&format!("\n{signed} [")),
        "{plots}"
    );
    // The waterfall climbs from every factor low by each Shapley value,
    // the largest first, to every factor high.
    for a in &e.analyses {
        let w = waterfall_of(e, a).unwrap();
        let sum: f64 = w.steps.iter().map(|x| x.estimate).sum();
        assert!((w.start + sum - w.end).abs() < 1e-9, "{}", a.response);
        assert!(
            w.steps
                .windows(2)
                .all(|p| p[0].estimate.abs() >= p[1].estimate.abs())
        );
    }
    let time = waterfall_of(e, &e.analyses[0]).unwrap();
    assert_eq!(time.steps[0].term, "tta", "tta's 2 s first");
    let shap = svg("shapley");
    assert!(
        shap.contains("every factor low") && shap.contains("every factor high"),
        "{shap}"
    );
}

#[test]
fn a_report_without_a_designed_matrix_gets_no_effect_charts() {
    let root = tempfile::tempdir().unwrap();
    let mut w = crate::store::ResultsWriter::create(root.path(), "plain", "").unwrap();
    for rep in 0..2 {
        let s = crate::store::tests::summary(0.5, 10.0, None);
        crate::store::tests::feed(
            &mut w,
            crate::store::tests::rid("baseline", 0, rep),
            rep as u64,
            Some(s),
        );
    }
    let dir = w.dir().to_path_buf();
    let (r, names) = charts_of(std::slice::from_ref(&dir), &dir, &PlotOptions::default());
    assert!(r.effects.is_empty());
    assert_eq!(names.len(), 10, "{names:?}");
    for chart in EFFECT_CHARTS {
        assert!(
            !names.iter().any(|n| n.starts_with(chart)),
            "{chart}: {names:?}"
        );
    }
}

/// A fraction's estimates are aliased and have no Shapley values; a
/// Shapley design has Shapley values and no effects; two designed
/// matrices in one report each get their own files.
#[test]
fn each_design_gets_the_charts_it_has_data_for() {
    let root = tempfile::tempdir().unwrap();
    let y = |c: u32, rng: &mut crate::util::splitmix::SplitMix64| {
        let on = |i: u32| f64::from(c >> i & 1);
        (
            0.6 + 0.02 * on(0) + 0.01 * on(2) + 0.004 * rng.unit_f64(),
            10.0 + on(1) + 0.1 * rng.unit_f64(),
        )
    };
    let frac = planted(
        root.path(),
        &format!("name = \"fr\"\n{HEAD}kind = \"fractional\"\nfraction = 1\nvary = [\"tta\", \"lookahead\", \"label_smoothing\", \"whitening_bias\"]\n"),
        2,
        &y,
    )
    .0;
    let shap = planted(
        root.path(),
        &format!("name = \"sh\"\n{HEAD}kind = \"shapley\"\norders = 6\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n"),
        2,
        &y,
    )
    .0;
    let opts = PlotOptions {
        format: super::super::PlotFormat::Svg,
        ..Default::default()
    };
    let out = root.path().join("frac");
    let (_, names) = charts_of(std::slice::from_ref(&frac), &out, &opts);
    assert_eq!(
        &names[4..],
        [
            "effects_time.svg",
            "effects_accuracy.svg",
            "interactions.svg"
        ]
    );
    let acc = std::fs::read_to_string(out.join("effects_accuracy.svg")).unwrap();
    assert!(
        acc.contains("aliased: the estimate is the sum of the terms in brackets"),
        "{acc}"
    );
    assert!(
        acc.contains(" (+ "),
        "an aliased term names its aliases: {acc}"
    );
    let out = root.path().join("shap");
    let (_, names) = charts_of(std::slice::from_ref(&shap), &out, &opts);
    assert_eq!(&names[4..], ["shapley.svg"]);
    let out = root.path().join("both");
    let (_, names) = charts_of(&[frac, shap], &out, &opts);
    assert_eq!(
        &names[4..],
        [
            "effects_time_fr.svg",
            "effects_accuracy_fr.svg",
            "interactions_fr.svg",
            "shapley_sh.svg"
        ]
    );
    let e = |m: &str| Effects {
        matrix: m.into(),
        folder: PathBuf::new(),
        clock: crate::config::Clock::Dawn,
        factors: Vec::new(),
        design: Vec::new(),
        runs: 0,
        noisy: 0,
        analyses: Vec::new(),
    };
    assert_eq!(
        suffixes(&[e("a/b"), e("a/b"), e("c")]),
        ["_a_b", "_a_b_2", "_c"]
    );
    assert_eq!(suffixes(&[e("a/b")]), [""]);
}

/// The centres of an SVG's filled diamonds (four-point polygons) of
/// colour `fill`.
fn diamonds(svg: &str, fill: &str) -> Vec<(f64, f64)> {
    svg.split("<polygon")
        .skip(1)
        .filter(|p| p.split('>').next().is_some_and(|head| head.contains(fill)))
        .filter_map(|p| {
            let pts = p.split("points=\"").nth(1)?.split('"').next()?;
            let xy: Vec<(f64, f64)> = pts
                .split_whitespace()
                .filter_map(|xy| {
                    let (x, y) = xy.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            (xy.len() == 4).then(|| {
                let n = xy.len() as f64;
                (
                    xy.iter().map(|p| p.0).sum::<f64>() / n,
                    xy.iter().map(|p| p.1).sum::<f64>() / n,
                )
            })
        })
        .collect()
}

/// A factorial drawn with a ladder among the same folders: tta's main
/// effect (+4 points) and its Shapley step get the rung's +10 points as
/// a vermillion diamond (order-dependent: the intervals do not overlap)
/// with its text, named in the legend, right of the bar; lookahead, which
/// no rung adds alone, gets none; and the same folder drawn alone, no
/// ladder's mark or legend.
#[test]
fn a_ladders_credit_is_drawn_beside_the_bar_it_questions() {
    let root = tempfile::tempdir().unwrap();
    let dirs = crate::report::effects::tests::factorial_and_ladder(root.path());
    let opts = PlotOptions {
        format: super::super::PlotFormat::Svg,
        ..Default::default()
    };
    let out = root.path().join("with");
    charts_of(&dirs, &out, &opts);
    let vermillion = "#D55E00";
    for (chart, legend) in [
        // (SVG writes an apostrophe as &apos;.)
        (
            "effects_accuracy",
            "ladder (lad): the Δ of its rung that adds the factor alone",
        ),
        ("shapley", "CI and the estimate&apos;s do not overlap"),
    ] {
        let svg = std::fs::read_to_string(out.join(format!("{chart}.svg"))).unwrap();
        assert!(svg.contains(legend), "{chart}: {svg}");
        assert!(
            svg.contains("ladder +10.00 points, order-dependent"),
            "{chart}: {svg}"
        );
        // One diamond in the chart and one in the legend, both vermillion
        // (the legend's lies below the plot).
        let marks = diamonds(&svg, vermillion);
        assert_eq!(marks.len(), 2, "{chart}: {marks:?}");
    }
    // On the effects chart, the diamond lies right of tta's bar: +10
    // against +4 points.
    let acc = std::fs::read_to_string(out.join("effects_accuracy.svg")).unwrap();
    // The chart's diamond: above the legend's, in the strip under it.
    let diamond = diamonds(&acc, vermillion)
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    let bars: Vec<f64> = acc
        .split("<rect")
        .skip(1)
        .filter_map(|r| {
            let num = |k: &str| -> Option<f64> {
                r.split(&format!(" {k}=\""))
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse()
                    .ok()
            };
            Some(num("x")? + num("width")?)
        })
        .collect();
    let widest = bars
        .iter()
        .copied()
        .filter(|x| *x < diamond.0)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        widest.is_finite() && diamond.0 > widest + 20.0,
        "{diamond:?} {bars:?}"
    );
    assert_eq!(acc.matches("ladder +").count(), 1, "tta's alone");
    // The ladder's interval here is as narrow as its estimate: nothing cut.
    assert!(!acc.contains("is cut at the chart"), "{acc}");
    let alone = root.path().join("alone");
    charts_of(&dirs[..1], &alone, &opts);
    for chart in ["effects_accuracy", "shapley"] {
        let svg = std::fs::read_to_string(alone.join(format!("{chart}.svg"))).unwrap();
        assert!(
            !svg.contains("rung that adds") && !svg.contains("ladder +"),
            "{chart}"
        );
        assert!(diamonds(&svg, vermillion).is_empty(), "{chart}");
    }
}

/// A ladder's whisker past what the design's bars need is cut there,
/// and only then; an interval it does not have is never cut.
#[test]
fn a_ladders_whisker_is_cut_only_past_the_charts_extent() {
    let wide = LadderCredit {
        matrix: "lad".into(),
        rung: "+ tta".into(),
        estimate: 0.1,
        lo: -0.5,
        hi: 0.7,
        order_dependent: false,
    };
    assert!(cut_at(&wide, 0.0, 100.0, (-10.0, 15.0)));
    assert!(!cut_at(&wide, 0.0, 100.0, (-60.0, 75.0)));
    assert!(!cut_at(
        &LadderCredit {
            lo: f64::NAN,
            ..wide.clone()
        },
        0.0,
        100.0,
        (0.0, 1.0)
    ));
    let tta = Estimate {
        term: "tta".into(),
        estimate: 0.04,
        lo: 0.03,
        hi: 0.05,
        aliases: Vec::new(),
        ladder: Some(wide),
    };
    // The bars' extent holds 0, the estimate's interval and the
    // ladder's Δ, not the ladder's interval.
    assert_eq!(bars_extent(&[&tta], 100.0), (0.0, 10.0));
}
