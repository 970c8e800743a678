//! `tricklab parity`: trains a recipe and the published script it reproduces
//! side by side, on the same images in the same order and for the same number
//! of steps, seeds alternating A B B A, and writes what it measured: time per
//! step and each recipe's own clock with the ratio and its 95% CI, accuracy
//! mean ± CI, and a verdict by Welch's t as `compare` computes it.
//!
//! The reference side is the record's script matrix (ablations/*-script.toml,
//! its first variant: the record as published), run by tricklab's script
//! runner through the adapter `python3 -m tricklab.peers`, which runs a
//! fetched copy of the published script with only the changes its device
//! needs; the reference code is never part of this repository.

use crate::config::{Clock, Override, RunId, RunSpec};
use crate::report::{Diff, welch};
use crate::train::{NeverStop, Outcome, TchTrainer, Trainer};
use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A recipe and a published script it reproduces.
#[derive(Debug)]
struct Pair {
    recipe: &'static str,
    /// The adapter's name for the script (unique: it also names the pair on
    /// the command line), and the fetched repository's folder.
    peer: &'static str,
    repo: &'static str,
    /// Epochs for a CPU comparison of minutes a side on 512 images a class.
    cpu_epochs: f64,
    /// tricklab's clock that covers the stages the reference's clock times,
    /// so that every row compares the same regions.
    clock: Clock,
    /// The reference's script matrix in ablations/ (its first variant is the
    /// record as published), where one ships.
    matrix: Option<&'static str>,
}

const PAIRS: &[Pair] = &[
    Pair {
        recipe: "airbench94",
        peer: "airbench94",
        repo: "cifar10-airbench",
        cpu_epochs: 2.0,
        clock: Clock::Airbench,
        matrix: Some("airbench94-script"),
    },
    Pair {
        recipe: "airbench94-muon",
        peer: "airbench94-muon",
        repo: "cifar10-airbench",
        cpu_epochs: 5.0,
        clock: Clock::Airbench,
        matrix: Some("airbench94-muon-script"),
    },
    Pair {
        recipe: "hiverge-speedrun",
        peer: "hiverge-speedrun",
        repo: "cifar10-speedrun",
        cpu_epochs: 3.0,
        clock: Clock::Airbench,
        matrix: Some("speedrun-script"),
    },
    // Page's own new_dawn.py, timed as DAWNBench's total_time: preprocessing,
    // whitening, the net's build and training. 3 epochs is the shortest run
    // whose lr knots [0, E/5, E − 2] still rise.
    Pair {
        recipe: "page-final",
        peer: "page-final",
        repo: "cifar10-fast",
        cpu_epochs: 3.0,
        clock: Clock::Dawn,
        matrix: Some("page-final-script"),
    },
    // A second peer: 99991's simplification of it, whose train_time times
    // the training epochs only, and whose lr floor is the last fifth of
    // however many epochs it runs.
    Pair {
        recipe: "page-final",
        peer: "page-final-simple",
        repo: "cifar10-fast-simple",
        cpu_epochs: 1.0,
        clock: Clock::Hlb,
        matrix: None,
    },
    Pair {
        recipe: "hlb",
        peer: "hlb",
        repo: "hlb-CIFAR10",
        // hlb runs `epochs % 1` of its last epoch, so a whole number runs one
        // epoch short of its own schedule; 1.99 is two full epochs on both sides.
        cpu_epochs: 1.99,
        clock: Clock::Hlb,
        matrix: Some("hlb-script"),
    },
];

#[derive(clap::Args, Debug)]
pub struct ParityArgs {
    /// Recipes to compare, each against the script it reproduces (default:
    /// airbench94, airbench94-muon, hiverge-speedrun and page-final; hlb too
    /// when named), or a second script by its name: page-final-simple
    /// (page-final against 99991/cifar10-fast-simple).
    pub recipes: Vec<String>,
    /// The folder holding the fetched repositories (cifar10-airbench,
    /// cifar10-speedrun, hlb-CIFAR10, cifar10-fast, cifar10-fast-simple).
    /// (Default: where each reference's script matrix looks, `peers/` in
    /// the repository root.)
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Read two finished leave-one-outs of one record side by side instead
    /// of running anything: the engine's results folder, then the script
    /// matrix's (e.g. results/speedrun-loo results/speedrun-script). Each
    /// trick's Δ on both sides, whether their intervals overlap, and a mark
    /// where they point opposite ways; written beside --out as .md and .csv.
    #[arg(long, num_args = 2, value_names = ["ENGINE", "SCRIPT"], conflicts_with = "recipes")]
    pub tricks: Vec<PathBuf>,
    /// Data set both sides train on (`tricklab data list`).
    #[arg(long, default_value = "embedded")]
    pub data: String,
    /// Training images kept per class (both sides: the same first images).
    #[arg(long, default_value_t = 512)]
    pub train_per_class: usize,
    /// Test images kept per class (128: new_dawn.py warms up on a batch of
    /// the test set's remainder by 512, which its ghost batch norm splits in 16).
    #[arg(long, default_value_t = 128)]
    pub test_per_class: usize,
    /// Epochs of every recipe (default: each recipe's CPU length, about ten steps).
    #[arg(long)]
    pub epochs: Option<f64>,
    /// Runs a side.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// cpu (fp32 on both sides) or cuda (each side as published).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// The python that runs the published scripts (default: .venv's, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The report to write (default: results/reference/parity-DEVICE-DATE.md, a CSV beside it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Times within this fraction are equivalent (two one-sided tests).
    #[arg(long, default_value_t = 0.05)]
    pub time_margin: f64,
    /// Accuracies within this fraction are equivalent (0.005 = 0.5 points).
    #[arg(long, default_value_t = 0.005)]
    pub acc_margin: f64,
}

/// One run of one side.
#[derive(Clone, Debug)]
struct Sample {
    side: &'static str,
    seed: u64,
    steps: u64,
    clock_s: f64,
    per_step_s: f64,
    acc: f64,
}

#[allow(
    clippy::too_many_lines,
    reason = "the harness's protocol in order: plan, alternate sides, collect, judge, write"
)]
pub fn cmd_parity(a: ParityArgs) -> Result<i32> {
    if let [engine, script] = a.tricks.as_slice() {
        return trick_by_trick(engine, script, a.out.as_deref());
    }
    let pairs = select_pairs(&a.recipes)?;
    if a.seeds < 2 {
        bail!(
            "--seeds {}: a confidence interval needs at least 2 runs a side",
            a.seeds
        );
    }
    if !(a.time_margin > 0.0 && a.acc_margin > 0.0) {
        bail!(
            "--time-margin {} --acc-margin {}: an equivalence margin must be above 0 (0.05 = 5% time, 0.005 = 0.5 points)",
            a.time_margin,
            a.acc_margin
        );
    }
    let margins = Margins {
        time: a.time_margin,
        acc: a.acc_margin,
    };
    let python = a.python.clone().unwrap_or_else(crate::util::default_python);
    let cuda = a.device.starts_with("cuda");
    let device =
        crate::util::device::resolve_devices(std::slice::from_ref(&a.device))?.swap_remove(0);
    // The same images, in the same order, on both sides: the reference's
    // runs read them as the script runner exports them (`[script.data]`),
    // into this folder, which also keeps their logs while parity runs.
    let tmp = tempfile_dir()?;
    let full = crate::data::load(&a.data)?;
    let data = full.subset(Some(a.train_per_class), Some(a.test_per_class));
    let threads = tch::get_num_threads();
    let mut trainer = TchTrainer::new(&device)?;
    let mut report = String::new();
    let mut csv = String::from("recipe,side,seed,steps,clock_s,per_step_s,acc\n");
    let date = chrono::Local::now();
    writeln!(
        report,
        "# Parity: tricklab against the published scripts, {}\n\n\
         - device: {} ({threads} threads on each side), {}\n\
         - data: `{}` (hash {}), the first {} training and {} test images of each class, exported by `tricklab data export` in the order tricklab trains on them\n\
         - tricklab {} (commit {}), libtorch {}\n\
         - seeds {}..{} a side, alternating A B B A; the references run by tricklab's script runner from their script matrices (ablations/*-script.toml, the record as published), the copies from {}\n\
         - both sides warm (tricklab's trainer before its first run, each reference run in its own process with `--warmup`), except hlb, whose script has none: neither side warms there\n\
         - on a CPU both sides in fp32, hiverge's Muon momentum buffers included\n\
         - verdicts by two one-sided tests at α = 0.05 (Schuirmann 1987): *equivalent* when the 90% CI of tricklab − reference lies within ±{:.0}% time (on log times) and ±{:.2} points accuracy; *different* when the 95% CI lies wholly beyond the margin; otherwise *inconclusive*, with about the runs a side that the measured spread says would settle it\n",
        date.format("%Y-%m-%d %H:%M"),
        trainer.device_name(),
        if cuda {
            "each side in its published precision"
        } else {
            "fp32 on both sides (the peers' half precision turned to float, compile off)"
        },
        a.data,
        &data.hash[..16],
        a.train_per_class,
        a.test_per_class,
        env!("CARGO_PKG_VERSION"),
        env!("TRICKLAB_BUILD_COMMIT"),
        crate::util::device::torch_info().version,
        0,
        a.seeds - 1,
        a.peers.as_ref().map_or_else(
            || "each script matrix's own `dir`".to_string(),
            |p| format!("`{}`", p.display())
        ),
        100.0 * margins.time,
        100.0 * margins.acc,
    )?;
    for pair in pairs {
        let epochs = a.epochs.unwrap_or(pair.cpu_epochs);
        // hlb's script has no warm-up of its own: neither side warms there
        // (cold only in a process that has trained nothing before).
        let warm = pair.recipe != "hlb";
        let spec = |seed: u64| RunSpec {
            id: RunId {
                matrix: "parity".into(),
                index: 0,
                variant: pair.recipe.into(),
                repeat: seed as usize,
            },
            seed,
            recipe: pair.recipe.into(),
            overrides: side_overrides(pair, epochs, (a.train_per_class, a.test_per_class), cuda),
            data: a.data.clone(),
            target_acc: 1.0,
            device: None,
            reference: None,
        };
        // The record as its script matrix runs it (its first variant), at
        // this comparison's length, on the same export, warm as tricklab's side.
        let reference = reference_record(
            pair,
            a.peers.as_deref(),
            (epochs, warm),
            &python,
            &crate::record::ScriptData {
                name: a.data.clone(),
                train_per_class: Some(a.train_per_class),
                test_per_class: Some(a.test_per_class),
            },
        )?;
        let planned = crate::recipe::plan_run(&spec(0))?;
        if warm && let Some(msg) = trainer.warm_up(&planned, &NeverStop) {
            eprintln!("{msg}");
        }
        let mut samples = Vec::new();
        let mut peer_meta = serde_json::Value::Null;
        for seed in 0..a.seeds {
            // A B, then B A: drift over the session falls on both sides alike.
            let order: [bool; 2] = if seed % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for ours in order {
                if ours {
                    samples.push(tricklab_side(
                        &mut trainer,
                        &crate::recipe::plan_run(&spec(seed))?,
                        pair.clock,
                    )?);
                } else {
                    let (s, meta) = peer_side(&reference, tmp.path(), seed, &a.device)?;
                    samples.push(s);
                    peer_meta = meta;
                }
                let s = samples.last().expect("just pushed");
                eprintln!(
                    "{} {:<8} seed {seed}: {} steps, {:.3} s a step, clock {:.2} s, accuracy {:.2}%",
                    pair.recipe,
                    s.side,
                    s.steps,
                    s.per_step_s,
                    s.clock_s,
                    100.0 * s.acc
                );
                writeln!(
                    csv,
                    "{},{},{},{},{},{},{}",
                    pair.recipe,
                    s.side,
                    s.seed,
                    s.steps,
                    crate::util::csv_num(s.clock_s),
                    crate::util::csv_num(s.per_step_s),
                    crate::util::csv_num(s.acc)
                )?;
            }
        }
        section(
            &mut report,
            pair,
            &samples,
            &peer_meta,
            &reference,
            &spec(0),
            (epochs, margins),
        )?;
    }
    let out = a.out.clone().unwrap_or_else(|| {
        let dev = if cuda { "cuda" } else { "cpu" };
        PathBuf::from(format!(
            "results/reference/parity-{dev}-{}.md",
            date.format("%Y-%m-%d")
        ))
    });
    crate::util::write_atomic(&out, report.as_bytes())?;
    crate::util::write_atomic(&out.with_extension("csv"), csv.as_bytes())?;
    println!("{report}");
    println!(
        "wrote {} and {}",
        out.display(),
        out.with_extension("csv").display()
    );
    Ok(0)
}

/// `--tricks ENGINE SCRIPT`: the two leave-one-outs of one record read
/// side by side (report/sides.rs), printed and written as .md and .csv.
fn trick_by_trick(engine: &Path, script: &Path, out: Option<&Path>) -> Result<i32> {
    let open = |d: &Path| crate::store::Folder::open(&crate::store::session_folder(d)?);
    let sides = crate::report::sides::side_by_side(&open(engine)?, &open(script)?)?;
    let page = sides.markdown();
    print!("{page}");
    if let Some(out) = out {
        crate::util::write_atomic(&out.with_extension("md"), page.as_bytes())?;
        crate::util::write_atomic(&out.with_extension("csv"), sides.csv().as_bytes())?;
        println!(
            "\nwrote {} and {}",
            out.with_extension("md").display(),
            out.with_extension("csv").display()
        );
    }
    Ok(0)
}

/// The pairs named: each a script's name (`page-final-simple`) or a recipe,
/// which stands for its first pair (its published script); none, every
/// recipe's first but hlb's.
fn select_pairs(names: &[String]) -> Result<Vec<&'static Pair>> {
    let first_of = |recipe: &str| PAIRS.iter().find(|p| p.recipe == recipe);
    if names.is_empty() {
        return Ok(PAIRS
            .iter()
            .filter(|p| p.recipe != "hlb" && first_of(p.recipe).is_some_and(|f| f.peer == p.peer))
            .collect());
    }
    names
        .iter()
        .map(|r| {
            PAIRS
                .iter()
                .find(|p| p.peer == r)
                .or_else(|| first_of(r))
                .with_context(|| {
                    let names: Vec<&str> = PAIRS.iter().map(|p| p.peer).collect();
                    format!(
                        "no published script is paired with `{r}`: choose from {}",
                        names.join(", ")
                    )
                })
        })
        .collect()
}

/// What tricklab's side changes in the recipe: the comparison's length and
/// data, and on a CPU float32 throughout, as the peers run there. Page's
/// simplified script holds its lr floor for the last fifth of however many
/// epochs it runs: against it, page-final's EMA floor follows (its 2 epochs
/// are the fifth of 10); Page's own keeps 2 epochs at any length, as
/// page-final does.
fn side_overrides(
    pair: &Pair,
    epochs: f64,
    (train, test): (usize, usize),
    cuda: bool,
) -> Vec<Override> {
    let mut o = vec![
        Override::Set {
            key: "epochs".into(),
            value: epochs.to_string(),
        },
        Override::Set {
            key: "train_per_class".into(),
            value: train.to_string(),
        },
        Override::Set {
            key: "test_per_class".into(),
            value: test.to_string(),
        },
    ];
    if !cuda {
        // The adapter turns the peers' half precision to float on a CPU,
        // hiverge's Muon momentum buffers included (`torch.half` ->
        // `torch.float32`): the same dtypes on both sides.
        for key in ["fp16", "muon_fp16_momentum"] {
            o.push(Override::Trick {
                key: key.into(),
                on: false,
            });
        }
    }
    if pair.peer == "page-final-simple" {
        o.push(Override::Set {
            key: "ema.floor_epochs".into(),
            value: (epochs / 5.0).to_string(),
        });
    }
    o
}

/// One tricklab run, timed by `clock`: the one that covers the reference's regions.
fn tricklab_side(
    trainer: &mut TchTrainer,
    run: &crate::plan::PlannedRun,
    clock: Clock,
) -> Result<Sample> {
    let Outcome::Finished(s) = trainer.run(run, &NeverStop, &mut |_| {})? else {
        bail!("the tricklab run was cancelled");
    };
    Ok(Sample {
        side: "tricklab",
        seed: run.spec.seed,
        steps: s.steps,
        clock_s: s.clocks.on(clock),
        per_step_s: s.clocks.hlb_s / s.steps.max(1) as f64,
        acc: s.acc_tta,
    })
}

/// The reference's run: its script matrix's first variant (the record as
/// published, every published trick on) with `epochs` set, or, for a script
/// no matrix ships (page-final-simple), the adapter's command as parity
/// writes it; either way started by tricklab's script runner.
fn reference_record(
    pair: &Pair,
    peers: Option<&Path>,
    (epochs, warm): (f64, bool),
    python: &Path,
    data: &crate::record::ScriptData,
) -> Result<crate::record::ScriptRecord> {
    let mut rec = match pair.matrix {
        Some(name) => {
            let path = Path::new("ablations").join(format!("{name}.toml"));
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "{}: the reference's script matrix; run parity from the repository root",
                    path.display()
                )
            })?;
            let origin = path.display().to_string();
            let text = match peers {
                Some(p) => crate::matrix::with_script_dir(
                    &text,
                    &origin,
                    &std::path::absolute(p.join(pair.repo))?,
                )?,
                None => text,
            };
            let m = crate::matrix::parse_in(&text, &origin, Path::new("ablations"))?;
            let script = m.script.as_ref().context("a script matrix")?;
            let err = |_: std::ops::Range<usize>, msg: String| anyhow::anyhow!("{origin}: {msg}");
            let set = Override::Set {
                key: "epochs".into(),
                value: epochs.to_string(),
            };
            script.declared.resolve(&[set], &err)?
        }
        None => {
            let dir = peers
                .map_or_else(|| PathBuf::from("peers"), Path::to_path_buf)
                .join(pair.repo);
            anyhow::ensure!(
                dir.is_dir(),
                "{}: no fetched copy of {}; clone it there or pass --peers",
                dir.display(),
                pair.repo
            );
            let argv = ["python3", "-m", "tricklab.peers", pair.peer, "--repo", "."];
            let argv = argv.into_iter().map(String::from).chain([
                "--data".into(),
                "{data}".into(),
                "--seed".into(),
                "{seed}".into(),
                "--epochs".into(),
                epochs.to_string(),
                "--device".into(),
                "{device}".into(),
            ]);
            crate::record::ScriptRecord {
                argv: argv.collect(),
                dir: std::path::absolute(&dir)?,
                env: Default::default(),
                patches: Vec::new(),
                world_size: 1,
                timeout_s: None,
                parse: Vec::new(),
                provenance: Default::default(),
                data: None,
            }
        }
    };
    // parity's python (the project's .venv) runs it, warm as tricklab's side
    // is: tricklab's trainer warms before its first run, so each reference
    // run warms in its own process.
    // (Absolute: the command runs in the script's folder.)
    rec.argv[0] = std::path::absolute(python)?.display().to_string();
    rec.argv
        .push(if warm { "--warmup" } else { "--no-warmup" }.into());
    rec.data = Some(data.clone());
    Ok(rec)
}

/// One reference run through the script runner; the adapter's JSON line
/// (steps, its clock's parts) is the last of the run's stdout.log.
fn peer_side(
    rec: &crate::record::ScriptRecord,
    folder: &Path,
    seed: u64,
    device: &str,
) -> Result<(Sample, serde_json::Value)> {
    use crate::record::{RunRecord, Runs, VariantRecord};
    let spec = RunSpec {
        id: RunId {
            matrix: "parity".into(),
            index: 1,
            variant: "reference".into(),
            repeat: seed as usize,
        },
        seed,
        recipe: String::new(),
        overrides: Vec::new(),
        data: crate::matrix::SCRIPT.into(),
        target_acc: 1.0,
        device: None,
        reference: None,
    };
    let record = std::sync::Arc::new(RunRecord {
        variant: VariantRecord {
            index: 1,
            name: "reference".into(),
            overrides: Vec::new(),
            tricks: Vec::new(),
            clock: Clock::Wall,
            reference: None,
            runs: Runs::Script(Box::new(rec.clone())),
        },
        data: Default::default(),
        loader: None,
    });
    let devices = [device.to_string()];
    let run = crate::script::run::ScriptRun {
        spec: &spec,
        record,
        devices: &devices,
        folder: folder.to_path_buf(),
    };
    let shown = crate::script::declare::command_line(&rec.argv);
    match crate::script::run::run(&run, &NeverStop, &mut |_| {})
        .with_context(|| format!("the reference run `{shown}` (seed {seed})"))?
    {
        Outcome::Finished(_) => {}
        _ => bail!("the reference run `{shown}` (seed {seed}) was cancelled"),
    }
    let log = crate::script::run::run_dir(folder, &spec.id).join("stdout.log");
    let stdout =
        std::fs::read_to_string(&log).with_context(|| format!("cannot read {}", log.display()))?;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("{}: the adapter printed no JSON line", log.display()))?;
    let v: serde_json::Value = serde_json::from_str(line)
        .with_context(|| format!("the peer adapter printed `{line}`, not JSON"))?;
    let num = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("the peer's JSON has no number `{k}`"))
    };
    Ok((
        Sample {
            side: "reference",
            seed,
            steps: num("steps")? as u64,
            clock_s: num("clock_s")?,
            per_step_s: num("time_per_step_s")?,
            acc: num("acc_tta")?,
        },
        v,
    ))
}

/// The differences parity calls equivalent: time as a fraction, accuracy
/// as a fraction (0.005 = 0.5 points).
#[derive(Clone, Copy, Debug)]
struct Margins {
    time: f64,
    acc: f64,
}

/// Mean, sample standard deviation and count (`stats::mean_sd`).
fn stats(xs: &[f64]) -> (f64, f64, usize) {
    let (mean, sd) = crate::stats::mean_sd(xs);
    (mean, sd, xs.len())
}

/// The most runs a side a verdict asks for before it says "over".
const MAX_RUNS_ASKED: usize = 1000;

/// What the runs say about d = tricklab − reference against `margin`, by two
/// one-sided tests at α = 0.05 (Schuirmann 1987): "equivalent" when the 90%
/// CI lies within ±margin; "different" when the 95% CI lies wholly beyond
/// it; otherwise "inconclusive", with about the runs a side that would
/// settle it (`runs_to_settle`). `sds` are the two sides' standard
/// deviations of one run; `words` name d < 0 and d > 0.
fn equivalence(d: &Diff, margin: f64, sds: (f64, f64), words: (&str, &str), shown: &str) -> String {
    use crate::stats::Tost;
    let q = crate::stats::Estimate {
        estimate: d.delta,
        se: d.se,
        df: d.df,
    };
    let side = if d.delta < 0.0 { words.0 } else { words.1 };
    match q.tost(margin) {
        Tost::Equivalent => return format!("equivalent (90% CI within ±{shown})"),
        Tost::Different => return format!("different: tricklab {side} by more than {shown}"),
        Tost::Open => {}
    }
    let gap = margin - d.delta.abs();
    if gap == 0.0 || !sds.0.is_finite() || !sds.1.is_finite() {
        return "inconclusive (the estimate sits on the margin)".into();
    }
    match runs_to_settle(gap, sds) {
        Some(n) => format!("inconclusive (about {n} runs a side would settle it)"),
        None => format!("inconclusive (settling it needs over {MAX_RUNS_ASKED} runs a side)"),
    }
}

/// The runs a side at which the interval the verdict uses would be
/// narrower than `gap` = margin − |d| if the estimate and the spreads
/// stayed as measured: for equivalence (gap > 0) the 90% CI the two
/// one-sided tests read, for a difference (gap < 0) the 95% CI's end
/// (`stats::runs_to_settle`, which compare and nightly use too).
fn runs_to_settle(gap: f64, sds: (f64, f64)) -> Option<usize> {
    let p = if gap > 0.0 { 0.95 } else { 0.975 };
    crate::stats::runs_to_settle(gap, &[sds.0, sds.1], p, MAX_RUNS_ASKED)
}

#[allow(clippy::too_many_arguments)] // one report section: its data and the commands that made it
#[allow(
    clippy::too_many_lines,
    reason = "one recipe's section of the report: the table rows in the order printed"
)]
fn section(
    out: &mut String,
    pair: &Pair,
    samples: &[Sample],
    peer: &serde_json::Value,
    reference: &crate::record::ScriptRecord,
    spec: &RunSpec,
    (epochs, margins): (f64, Margins),
) -> Result<()> {
    let side = |name: &str, f: fn(&Sample) -> f64| -> Vec<f64> {
        samples.iter().filter(|s| s.side == name).map(f).collect()
    };
    let steps: Vec<u64> = samples.iter().map(|s| s.steps).collect();
    writeln!(
        out,
        "\n## {} against {} ({})\n",
        pair.recipe,
        peer["script"].as_str().unwrap_or(pair.peer),
        pair.repo
    )?;
    if steps.windows(2).any(|w| w[0] != w[1]) {
        writeln!(
            out,
            "**The two sides ran different step counts ({steps:?}): the times do not compare.**\n"
        )?;
    }
    writeln!(
        out,
        "| | tricklab | reference | tricklab / reference (95% CI) | verdict |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    let log = |x: f64| x.max(1e-12).ln();
    for (label, f, is_time) in [
        (
            "seconds a training step",
            (|s: &Sample| s.per_step_s) as fn(&Sample) -> f64,
            true,
        ),
        (
            "seconds on the reference's clock",
            |s: &Sample| s.clock_s,
            true,
        ),
        ("accuracy (with TTA)", |s: &Sample| s.acc, false),
    ] {
        let (a, b) = (side("tricklab", f), side("reference", f));
        let (sa, sb) = (stats(&a), stats(&b));
        let fmt = |s: (f64, f64, usize)| {
            if is_time {
                format!("{:.3} ± {:.3}", s.0, s.1)
            } else {
                format!("{:.2}% ± {:.2}", 100.0 * s.0, 100.0 * s.1)
            }
        };
        let (ratio, verdict_text) = if is_time {
            // The ratio's CI from the difference of log times.
            let la: Vec<f64> = a.iter().map(|x| log(*x)).collect();
            let lb: Vec<f64> = b.iter().map(|x| log(*x)).collect();
            let sds = (stats(&la).1, stats(&lb).1);
            match welch(stats(&lb), stats(&la)) {
                Some(d) => (
                    format!(
                        "{:.2} ({:.2} – {:.2})",
                        d.delta.exp(),
                        d.lo().exp(),
                        d.hi().exp()
                    ),
                    equivalence(
                        &d,
                        margins.time.ln_1p(),
                        sds,
                        ("faster", "slower"),
                        &format!("{:.0}%", 100.0 * margins.time),
                    ),
                ),
                None => ("–".into(), "no interval".into()),
            }
        } else {
            match welch(sb, sa) {
                Some(d) => (
                    format!(
                        "{:+.2} points ({:+.2} – {:+.2})",
                        100.0 * d.delta,
                        100.0 * d.lo(),
                        100.0 * d.hi()
                    ),
                    equivalence(
                        &d,
                        margins.acc,
                        (sa.1, sb.1),
                        ("less accurate", "more accurate"),
                        &format!("{:.2} points", 100.0 * margins.acc),
                    ),
                ),
                None => ("–".into(), "no interval".into()),
            }
        };
        writeln!(
            out,
            "| {label} | {} | {} | {ratio} | {verdict_text} |",
            fmt(sa),
            fmt(sb)
        )?;
    }
    let n = samples.len() / 2;
    writeln!(
        out,
        "\n{n} runs a side of {} steps ({epochs} epochs); each side's mean ± standard deviation, the ratio's and difference's 95% CI by Welch's t (the ratio's on log times). The reference's clock: {}; tricklab's: {}, the stages it covers ({}).",
        steps.first().copied().unwrap_or(0),
        peer["clock"].as_str().unwrap_or("?"),
        pair.clock.name(),
        pair.clock.stages().map_or_else(
            || "start to summary".to_string(),
            |s| s.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
        ),
    )?;
    writeln!(
        out,
        "Reference: `{}` sha256 {} ({}), {}, torch {}.",
        peer["script"].as_str().unwrap_or("?"),
        peer["sha256"]
            .as_str()
            .map_or("?", |s| &s[..16.min(s.len())]),
        if peer["known_commit"].as_bool() == Some(true) {
            "the commit read for TRICKS.md"
        } else {
            "not the commit read for TRICKS.md"
        },
        peer["precision"].as_str().unwrap_or("?"),
        peer["torch"].as_str().unwrap_or("?"),
    )?;
    if let Some(changes) = peer["changes"].as_array() {
        let list: Vec<&str> = changes.iter().filter_map(|c| c.as_str()).collect();
        writeln!(
            out,
            "Changes the adapter made to the script: {}.",
            list.join("; ")
        )?;
    }
    let sets: Vec<String> = spec
        .overrides
        .iter()
        .map(|o| match o {
            Override::Trick { .. } => format!("--trick {o}"),
            Override::Set { .. } => format!("--set {o}"),
        })
        .collect();
    writeln!(
        out,
        "\nCommands (seed 0; the reference runs in its copy with the `tricklab` module on its PYTHONPATH, its `{{data}}` the same images exported by tricklab's script runner, `{{seed}}` 0, `{{device}}` the device):\n\n```sh\ntricklab train --recipe {} --data {} {} --seed 0\ncd {} && PYTHONPATH={} {}\n```",
        pair.recipe,
        spec.data,
        sets.join(" "),
        reference.dir.display(),
        std::path::absolute("python")?.display(),
        crate::script::declare::command_line(&reference.argv),
    )?;
    Ok(())
}

fn tempfile_dir() -> Result<TempDir> {
    let dir = std::env::temp_dir().join(format!("tricklab-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(TempDir(dir))
}

/// A folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(delta: f64, se: f64, df: f64) -> Diff {
        let half_width = crate::stats::t_multiplier(0.95, df) * se;
        Diff {
            base: 0.0,
            cand: delta,
            delta,
            half_width,
            se,
            df,
            sds: [0.0, 0.0],
        }
    }

    /// Equivalent only when the 90% CI lies inside the margin; different
    /// only when the 95% CI lies wholly beyond it; otherwise inconclusive,
    /// with the runs a side the spread asks for, and never "same within
    /// noise" from an interval that merely straddles 0.
    #[test]
    fn parity_verdicts_can_say_equivalent_different_or_inconclusive() {
        let m = 0.05f64.ln_1p();
        let words = ("faster", "slower");
        // 1% slower, known to ±0.4% (90%): equivalent.
        let v = equivalence(&diff(0.01, 0.002, 18.0), m, (0.006, 0.006), words, "5%");
        assert_eq!(v, "equivalent (90% CI within ±5%)");
        // 20% slower, known to ±2%: different.
        let v = equivalence(&diff(0.2, 0.01, 18.0), m, (0.03, 0.03), words, "5%");
        assert_eq!(v, "different: tricklab slower by more than 5%");
        let v = equivalence(&diff(-0.2, 0.01, 18.0), m, (0.03, 0.03), words, "5%");
        assert_eq!(v, "different: tricklab faster by more than 5%");
        // 2% slower, 3 runs a side spread ±10%: its 95% CI holds 0 (what
        // the old verdict called "same within noise"), but it is
        // inconclusive, and t₀.₉₅(2n − 2)·√(0.02/n) ≤ 0.0488 − 0.02 first
        // holds at n = 67 (the normal approximation's 2(1.645·0.1/0.0288)²
        // is 65.3).
        let d = diff(0.02, 0.1 * (2.0f64 / 3.0).sqrt(), 4.0);
        assert!(d.lo() < 0.0 && d.hi() > 0.0);
        let v = equivalence(&d, m, (0.1, 0.1), words, "5%");
        assert_eq!(v, "inconclusive (about 67 runs a side would settle it)");
        // A spread that would need more than a thousand runs says so.
        let v = equivalence(&diff(0.045, 0.5, 4.0), m, (1.0, 1.0), words, "5%");
        assert!(v.contains("over 1000"), "{v}");
    }

    /// The H200's airbench94 clock at 6 runs a side (results/reference/
    /// h200/lease3): log-time sds 0.0072 (tricklab) and 0.082 (reference),
    /// d = ln 0.89. The reference's spread leaves Welch's df near n − 1, so
    /// the t quantile asks for 9 runs a side where the normal approximation
    /// asked for the 6 that had just left the verdict open.
    #[test]
    fn the_runs_that_would_settle_it_follow_welchs_df() {
        let gap = 0.05f64.ln_1p() - 0.89f64.ln().abs();
        assert_eq!(runs_to_settle(gap, (0.0072, 0.082)), Some(9));
        let normal =
            2.0 * (1.96 * ((0.0072f64.powi(2) + 0.082f64.powi(2)) / 2.0).sqrt() / gap).powi(2);
        assert_eq!(normal.ceil(), 6.0);
        // Equal spreads and many df: the t and normal answers meet.
        let n = runs_to_settle(0.01, (0.02, 0.02)).unwrap();
        let z = (2.0 * (1.645f64 * 0.02 / 0.01).powi(2)).ceil() as usize;
        assert!((z..=z + 1).contains(&n), "{n} against {z}");
    }

    fn pair(peer: &str) -> &'static Pair {
        PAIRS.iter().find(|p| p.peer == peer).unwrap()
    }

    /// tricklab's side as the reference runs: against Page's simplified
    /// script page-final's floor is the last fifth of the run at any length;
    /// against Page's own the recipe's 2 epochs, as new_dawn.py's; on a
    /// CPU every recipe in fp32, Muon's momentum buffers included.
    #[test]
    fn tricklabs_side_follows_the_peers_floor_and_dtypes() {
        let o = side_overrides(pair("page-final-simple"), 1.0, (512, 100), false);
        assert!(o.contains(&Override::Set {
            key: "ema.floor_epochs".into(),
            value: "0.2".into()
        }));
        let spec = RunSpec {
            id: RunId {
                matrix: "p".into(),
                index: 0,
                variant: "v".into(),
                repeat: 0,
            },
            seed: 0,
            recipe: "page-final".into(),
            overrides: o,
            data: "embedded".into(),
            target_acc: 1.0,
            device: None,
            reference: None,
        };
        assert!(crate::recipe::plan_run(&spec).is_ok());
        for peer in ["airbench94", "page-final"] {
            assert!(
                !side_overrides(pair(peer), 3.0, (512, 100), false)
                    .iter()
                    .any(|o| matches!(o, Override::Set { key, .. } if key == "ema.floor_epochs")),
                "{peer}"
            );
        }
        // At Page's own CPU length the recipe's schedule stands as it is.
        let p = pair("page-final");
        let own = RunSpec {
            overrides: side_overrides(p, p.cpu_epochs, (512, 128), false),
            ..spec.clone()
        };
        assert!(crate::recipe::plan_run(&own).is_ok());
        // On a CPU every recipe resolves in fp32, hiverge's Muon buffers too.
        for pair in PAIRS {
            let spec = RunSpec {
                recipe: pair.recipe.into(),
                overrides: side_overrides(pair, pair.cpu_epochs, (512, 100), false),
                ..spec.clone()
            };
            let p = crate::recipe::plan_run(&spec).unwrap().plan;
            assert!(p.precision.half.is_none(), "{}", pair.recipe);
            if let Some(m) = &p.optim.muon {
                assert!(!m.half_momentum, "{}", pair.recipe);
            }
        }
    }

    /// A recipe names its published script, a script's name a second one,
    /// nothing every recipe's first but hlb's; an unknown name lists them.
    /// Each pair times tricklab by the clock whose stages the reference's
    /// clock covers: Page's own DAWNBench total, the simplified script's
    /// training epochs.
    #[test]
    fn pairs_are_named_by_recipe_or_script_and_clocked_as_the_reference() {
        let names = |v: &[&str]| -> Vec<&str> {
            select_pairs(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap()
                .iter()
                .map(|p| p.peer)
                .collect()
        };
        assert_eq!(
            names(&[]),
            [
                "airbench94",
                "airbench94-muon",
                "hiverge-speedrun",
                "page-final"
            ]
        );
        assert_eq!(names(&["page-final"]), ["page-final"]);
        assert_eq!(pair("page-final").repo, "cifar10-fast");
        assert_eq!(
            names(&["page-final-simple", "hlb"]),
            ["page-final-simple", "hlb"]
        );
        let e = format!("{:#}", select_pairs(&["page".into()]).unwrap_err());
        assert!(e.contains("page-final-simple") && !e.contains('\n'), "{e}");
        assert_eq!(pair("page-final").clock, Clock::Dawn);
        assert_eq!(pair("page-final-simple").clock, Clock::Hlb);
        // Page's DAWNBench total covers the net's build, as tricklab's dawn clock does.
        assert!(
            Clock::Dawn
                .stages()
                .unwrap()
                .contains(&crate::config::Stage::NetBuild)
        );
    }
}
