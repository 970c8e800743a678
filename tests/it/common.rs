//! What every scenario needs to drive the real binary: the command, its
//! output as text, the repository's own files, a free port and the
//! processes it started.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `tricklab`, without colours (its output is read as text),
/// with libtorch's own thread count: `make test` gives each unit test one
/// thread (OMP_NUM_THREADS=1), while a scenario runs alone on every core.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tricklab"));
    c.env("NO_COLOR", "1").env_remove("OMP_NUM_THREADS");
    c
}

/// `tricklab ARGS` run to its end in `cwd`.
pub fn run(args: &[&str], cwd: &Path) -> Output {
    bin()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("running tricklab")
}

/// `tricklab ARGS` run to its end in `cwd` on the planted trainer
/// (src/train/planted.rs, `TRICKLAB_PLANTED`): the engine's events with
/// planted seconds and accuracies and no libtorch work, for the scenarios
/// about sessions, stores and reports rather than training.
pub fn run_planted(args: &[&str], cwd: &Path, planted: &str) -> Output {
    bin()
        .env(tricklab::train::PLANTED_ENV, planted)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("running tricklab")
}

/// The arguments of a headless session of `matrix` writing under the
/// results root `results`: `run MATRIX --headless --results RESULTS`, then
/// `extra` (`--devices cpu`, `--repeats 2`...).
pub fn headless<'a, P: AsRef<Path> + ?Sized>(
    matrix: &'a P,
    results: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let matrix = matrix.as_ref().to_str().expect("a matrix path in UTF-8");
    let mut args = vec!["run", matrix, "--headless", "--results", results];
    args.extend_from_slice(extra);
    args
}

/// The runs stored in the session folder `dir`, each checked to hold the
/// planted trainer's numbers for its variant, position and seed under
/// `planted` (as given to `TRICKLAB_PLANTED`): its seconds on every clock
/// and its accuracy, exactly, and no noise flag (planted runs are quiet).
pub fn planted_runs(dir: &Path, planted: &str) -> Vec<tricklab::store::RunRow> {
    let p = tricklab::train::Planted::parse(planted).unwrap();
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    for r in &rows {
        let (t, a) = p.planted_at(&r.variant, r.index as usize, r.seed);
        assert_eq!(
            (r.dawn_s, r.airbench_s, r.hlb_s, r.acc, r.acc_tta, r.noisy),
            (Some(t), Some(t), Some(t), Some(a), Some(a), Some(false)),
            "{}#{} seed {}: not its planted {t} s, {a}",
            r.variant,
            r.repeat,
            r.seed
        );
    }
    rows
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// (stdout, stderr).
pub fn text(o: &Output) -> (String, String) {
    (out(o), err(o))
}

/// The repository: its ablations/, fixtures and README.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A port the kernel says is free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A folder of 16 training images of which only the first of each class
/// reads: with batch 4 at least two of an epoch's four batches hold no
/// readable image (on_bad_image = skip is what lets a run reach them).
pub fn mostly_truncated_folder(dir: &std::path::Path) {
    use tricklab::data::stream::synth::{SynthSpec, imagenet_like};
    let spec = SynthSpec {
        long_side: (40, 48),
        quality: 85,
        seed: 3,
        ..SynthSpec::small(2, 8, 2)
    };
    imagenet_like(dir, &spec).unwrap();
    for class in std::fs::read_dir(dir.join("train")).unwrap() {
        let mut files: Vec<_> = std::fs::read_dir(class.unwrap().path())
            .unwrap()
            .map(|f| f.unwrap().path())
            .collect();
        files.sort();
        for f in &files[1..] {
            let bytes = std::fs::read(f).unwrap();
            std::fs::write(f, &bytes[..bytes.len() / 3]).unwrap();
        }
    }
}

/// A tmux server of its own (`-L socket`) with one session, `t`: a real
/// terminal for the binary, read by its screen and driven by keys.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn cmd(&self, args: &[&str]) -> String {
        // The server it starts runs the binary: libtorch's default threads,
        // as `bin()` gives it.
        let o = std::process::Command::new("tmux")
            .env_remove("OMP_NUM_THREADS")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is part of the machine image (apt-get install tmux)");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    pub fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }
    pub fn keys(&self, k: &str) {
        self.cmd(&["send-keys", "-t", "t", k]);
    }
    pub fn wait_for(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let start = std::time::Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(secs),
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

/// What a user relies on in a ladder's report, read from its JSON (`report
/// --format json`) rather than from one layout of report.md: `rungs` rows,
/// each with `n` finished runs and none failed, each read against the rung
/// before it, and each Δ (seconds on the rung's own clock, accuracy with
/// TTA) agreeing with the runs in runs.parquet: its mean is the difference
/// of the two rungs' means (paired by seed or not, the same number when no
/// run is missing), its interval holds the mean, and at n = 1 there is no
/// interval. Returns the report.
pub fn check_ladder(folder: &Path, rungs: usize, n: usize) -> serde_json::Value {
    let o = bin()
        .args(["report", folder.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["rows"].as_array().expect("report rows");
    assert_eq!(rows.len(), rungs, "{r:#}");
    let runs = tricklab::store::read_runs(&folder.join("runs.parquet")).unwrap();
    let mean = |variant: &str, clock: &str| {
        let xs: Vec<f64> = runs
            .iter()
            .filter(|x| x.variant == variant && x.status == tricklab::store::Ended::Done)
            .map(|x| match clock {
                "dawn" => x.dawn_s,
                "airbench" => x.airbench_s,
                "hlb" => x.hlb_s,
                "wall" => x.wall_s,
                "acc" => x.acc_tta,
                other => panic!("unknown clock {other}"),
            })
            .map(Option::unwrap)
            .collect();
        assert_eq!(xs.len(), n, "{variant}: {} finished runs", xs.len());
        xs.iter().sum::<f64>() / xs.len() as f64
    };
    for (i, row) in rows.iter().enumerate() {
        let variant = row["variant"].as_str().unwrap();
        assert_eq!(row["n"], n, "{variant}: {row:#}");
        assert_eq!(row["failed"], 0, "{variant}: {row:#}");
        if i == 0 {
            assert!(row["delta_vs"].is_null(), "{row:#}");
            continue;
        }
        let prev = rows[i - 1]["variant"].as_str().unwrap();
        assert_eq!(
            row["delta_vs"], prev,
            "{variant} is read against the rung before it"
        );
        let clock = row["headline"].as_str().unwrap();
        for (key, what) in [("delta_time", clock), ("delta_acc", "acc")] {
            let d = &row[key];
            let got = d["mean"].as_f64().unwrap();
            let want = mean(variant, what) - mean(prev, what);
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{variant} {key}: {got} in the report, {want} from the runs"
            );
            assert_eq!(d["n"], n, "{variant} {key}: {d}");
            match (d["lo"].as_f64(), d["hi"].as_f64()) {
                (Some(lo), Some(hi)) => {
                    assert!(n > 1 && lo <= got && got <= hi, "{variant} {key}: {d}")
                }
                (None, None) => assert_eq!(n, 1, "{variant} {key}: no interval at n = {n}"),
                _ => panic!("{variant} {key}: half an interval: {d}"),
            }
        }
    }
    r
}

/// The pids whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The pids of `tricklab rank` processes whose parent is `parent`.
pub fn ranks_of(parent: u32) -> Vec<i32> {
    children_of(parent)
        .into_iter()
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmd.split(|b| *b == 0).nth(1) == Some(b"rank".as_slice())
        })
        .collect()
}

/// The `n` ranks of the session `pid`, waited for up to a minute and then
/// given `settle` to get into their run; `None` if they never all started.
pub fn wait_for_ranks(pid: u32, n: usize, settle: std::time::Duration) -> Option<Vec<i32>> {
    let start = std::time::Instant::now();
    while ranks_of(pid).len() < n {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(settle);
    Some(ranks_of(pid))
}
