//! One run over several processes through c10d (Gloo on the CPU): the gang
//! trains what one process trains, and every way a gang can break ends in
//! bounded time with one line naming the rank.

use super::common::{children_of, err, free_port, wait_for_ranks};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary with collectives that give up after 20 s, so a broken gang
/// fails within a test's patience.
fn bin() -> Command {
    let mut c = super::common::bin();
    c.env("TRICKLAB_DIST_TIMEOUT", "20");
    c
}

/// A run of tiny-page-resnet9 as the queue holds it, with `sets` (KEY,
/// VALUE) and `tricks` on.
fn spec(tricks: &[&str], sets: &[(&str, &str)]) -> String {
    spec_of("tiny-page-resnet9", tricks, sets)
}

fn spec_of(recipe: &str, tricks: &[&str], sets: &[(&str, &str)]) -> String {
    let mut o: Vec<serde_json::Value> = tricks
        .iter()
        .map(|t| serde_json::json!({"Trick": {"key": t, "on": true}}))
        .collect();
    o.extend(
        sets.iter()
            .map(|(k, v)| serde_json::json!({"Set": {"key": k, "value": v}})),
    );
    serde_json::json!({
        "id": {"matrix": "dp", "index": 0, "variant": "v", "repeat": 0},
        "seed": 3, "recipe": recipe, "overrides": o,
        "data": "synthetic:64", "target_acc": 0.9, "device": null, "reference": null
    })
    .to_string()
}

/// `tricklab rank` as torchrun would start rank `rank` of `world`, on the
/// CPU, warm-up and all, not yet started.
fn rank_command(exe: &Path, rank: usize, world: usize, port: u16, spec: &str) -> Command {
    let mut c = Command::new(exe);
    c.env("NO_COLOR", "1")
        .env("TRICKLAB_DIST_TIMEOUT", "5")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .args(["rank", "--spec", spec, "--device", "cpu"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `tricklab rank` as torchrun would start rank `rank` of `world`, without
/// the warm-up.
fn rank(
    exe: &Path,
    rank: usize,
    world: usize,
    port: u16,
    spec: &str,
    extra: &[&str],
) -> std::process::Child {
    rank_command(exe, rank, world, port, spec)
        .arg("--no-warm-up")
        .args(extra)
        .spawn()
        .expect("starting a rank")
}

fn finish(c: std::process::Child, secs: u64) -> Output {
    let start = Instant::now();
    let mut c = c;
    while c.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = c.kill();
            panic!("a rank still ran after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_with_output().unwrap()
}

/// The smallest scale a trained tensor's difference is measured against
/// (see `two_ranks_train_the_weights_one_process_trains`). A BN bias's
/// float32 noise reached 1.26e-5 absolute on an AMD EPYC (2026-11-27,
/// `body.layer1.down.bn.bias` under sync_bn), past the 1e-5 a floor of 0.1
/// allowed; a wrong reduction moves it by its whole travel (~0.03).
const SCALE_FLOOR: f64 = 0.5;

fn weights(p: &Path) -> Vec<(String, tch::Tensor)> {
    let mut w = tch::Tensor::read_safetensors(p).unwrap();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// Every trained tensor of `gang` (the ranks' saved net) within `tol` of
/// its size of `one`'s (the one-process run's), BN running statistics
/// left out (ghost BN keeps one set a split, a rank its own). A BN bias
/// starts at 0 and moves ~0.03 in 8 steps: against its own size, the
/// float32 noise of the sums that moved it (~1e-5 absolute on an AMD EPYC,
/// 2e-4 of such a bias) would read as a difference, so scales under
/// SCALE_FLOOR count as it. Returns how many tensors were compared.
fn assert_trained_alike(one: &Path, gang: &Path, tol: f64, name: &str) -> usize {
    let (a, b) = (weights(one), weights(gang));
    assert_eq!(a.len(), b.len(), "{name}: the two nets differ in layout");
    let mut compared = 0;
    for ((ka, ta), (kb, tb)) in a.iter().zip(&b) {
        assert_eq!(ka, kb, "{name}: the two nets differ in layout");
        if ka.contains("running") {
            continue;
        }
        let scale = f64::try_from(ta.abs().max()).unwrap().max(SCALE_FLOOR);
        let diff = f64::try_from((ta - tb).abs().max()).unwrap();
        assert!(
            diff / scale < tol,
            "{name}: {ka} differs by {diff} (largest value {scale})"
        );
        compared += 1;
    }
    compared
}

/// Two Gloo ranks at global batch 16 against one process at batch 16 whose
/// BN normalises the same two sub-batches (ghost BN, 2 splits, which deals
/// images to splits as the ranks' shards do): after 8 steps every trained
/// tensor agrees within 1e-4 of its largest value (float32 sums in another
/// order: measured ~3e-6 for SGD), for each optimiser family and warm-up.
/// With `sync_bn` the ranks' BN is the whole batch's, and the one process
/// runs plain BN.
#[test]
fn two_ranks_train_the_weights_one_process_trains() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    // LAMB at the recipe's SGD lr diverges (loss 2.3 → 2.75 in 4 steps),
    // and a diverging run amplifies float32's last bits in either process:
    // it is compared where it trains (lr 0.01). LAMB divides each element by
    // √v, and Muon orthogonalises each update by Newton–Schulz in bfloat16:
    // both turn the reduction order's float32 noise into steps of their own
    // size (the step losses agree to 6e-6 at step 2, then drift). LAMB gets
    // 1e-3 after 8 steps (measured 1.4e-4), Muon 1e-2 after 2 (measured
    // 2.5e-3: bf16's rounding step is 4e-3), the others 1e-4.
    // The gradients go through PyTorch's DDP Reducer (issue 50): with
    // accumulation it reduces only the last micro-batch's backward (DDP's
    // no_sync before it), and airbench's whitening bias, which stops
    // training after its first epoch, has the Reducer built again over
    // what still trains. With accumulation each BN batch holds 4 images,
    // whose statistics amplify float32's noise step by step (the step
    // losses agree to 1e-7 at step 1 and 2e-5 at step 7; the weights after 8
    // steps 1.6e-3 apart, where a post-backward all-reduce in place of the
    // Reducer gave weights identical to the Reducer's to the last bit): it
    // is compared after 2 steps.
    // (name, recipe, tricks on, its own settings, tolerance)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        f64,
    );
    let page = "tiny-page-resnet9";
    let cases: &[Case] = &[
        ("sgd-nesterov", page, &[], &[], 1e-4),
        ("lars", page, &["lars"], &[], 1e-4),
        ("lamb", page, &["lamb"], &[("lr", "0.01")], 1e-3),
        ("muon", page, &["muon"], &[("epochs", "0.5")], 1e-2),
        ("warmup", page, &["warmup"], &[], 1e-4),
        (
            "accumulation",
            page,
            &["grad_accum"],
            &[("grad_accum.steps", "2"), ("epochs", "0.5")],
            1e-4,
        ),
        (
            "whitening-bias-stops",
            "tiny-airbench94",
            &[],
            &[("epochs", "3")],
            1e-4,
        ),
        // SyncBN: the ranks' BN is the whole batch's, so the one process
        // runs plain BN (sync_bn at world size 1 is plain BN): measured 2.8e-6,
        // and 1.06e-4 on the AMD EPYC of 2026-11-27 (body.layer1.res1.conv.weight),
        // hence 5e-4. (With E[x²] − E[x]² from summed moments it was 1.6e-3:
        // the ranks' means and variances are combined instead.)
        ("sync_bn", page, &["sync_bn"], &[], 5e-4),
    ];
    for (name, recipe, tricks, own, tol) in cases {
        let mut sets = vec![("epochs", "2"), ("batch_size", "16")];
        sets.extend_from_slice(own);
        let mut gang_sets = sets.clone();
        gang_sets.push(("world_size", "2"));
        let gang_w = dir.path().join(format!("{name}-2.safetensors"));
        let port = free_port();
        let s = spec_of(recipe, tricks, &gang_sets);
        let save = gang_w.to_str().unwrap();
        let r0 = rank(exe, 0, 2, port, &s, &["--save-weights", save]);
        let r1 = rank(exe, 1, 2, port, &s, &["--save-weights", save]);
        let (o0, o1) = (finish(r0, 120), finish(r1, 120));
        assert!(
            o0.status.success() && o1.status.success(),
            "{name}: {}{}",
            err(&o0),
            err(&o1)
        );
        let one_w = dir.path().join(format!("{name}-1.safetensors"));
        let mut c = bin();
        c.args([
            "train",
            "--recipe",
            recipe,
            "--data",
            "synthetic:64",
            "--seed",
            "3",
        ]);
        for t in *tricks {
            c.args(["--trick", t]);
        }
        if !tricks.contains(&"sync_bn") {
            c.args(["--trick", "ghost_bn", "--set", "ghost_bn.splits=2"]);
        }
        for (k, v) in &sets {
            c.args(["--set", &format!("{k}={v}")]);
        }
        // One thread, as each rank has (the cores shared between the two):
        // oneDNN's sums then differ only in the ranks' split, not also in
        // its threads' (warmup: 1.45e-4 with two threads, 2.2e-5 with one).
        let o = c
            .env("OMP_NUM_THREADS", "1")
            .args(["--no-warm-up", "--save-weights", one_w.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", err(&o));
        let compared = assert_trained_alike(&one_w, &gang_w, *tol, name);
        assert!(compared >= 20, "{name}: only {compared} tensors compared");
    }
}

/// torchrun beside the Python that `make test` installs (TRICKLAB_PYTHON,
/// else the project's `.venv`), if it is there.
fn torchrun() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("TRICKLAB_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| super::common::repo().join(".venv/bin/python3"));
    let t = python.parent()?.join("torchrun");
    t.is_file().then_some(t)
}

/// `tricklab train` started as users start distributed jobs: torchrun
/// (`--standalone --nproc-per-node 2 --no-python`, its agent serving the
/// store) makes two ranks of ONE run; rank 0 reports it and saves the
/// weights, which are the one-process ghost-BN run's, as the gang's are.
/// Where torchrun is missing (a LIBTORCH build without the wheel), the two
/// ranks get torchrun's variables by hand.
#[test]
fn torchrun_starts_train_as_one_run_over_its_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let gang_w = dir.path().join("torchrun.safetensors");
    let args = |w: &Path| -> Vec<String> {
        [
            "train",
            "--recipe",
            "tiny-page-resnet9",
            "--data",
            "synthetic:64",
            "--seed",
            "3",
            "--set",
            "epochs=2",
            "--set",
            "batch_size=16",
            "--device",
            "cpu",
            "--no-warm-up",
            "--save-weights",
            w.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let outputs: Vec<Output> = match torchrun() {
        Some(t) => {
            let mut c = Command::new(t);
            c.env("NO_COLOR", "1")
                .env("TRICKLAB_DIST_TIMEOUT", "30")
                .env("OMP_NUM_THREADS", "1")
                .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
                .arg(exe)
                .args(args(&gang_w))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            vec![finish(c.spawn().unwrap(), 180)]
        }
        None => {
            eprintln!("no torchrun beside TRICKLAB_PYTHON: the ranks get its variables by hand");
            let port = free_port().to_string();
            let ranks: Vec<_> = (0..2)
                .map(|r| {
                    Command::new(exe)
                        .env("NO_COLOR", "1")
                        .env("RANK", r.to_string())
                        .env("WORLD_SIZE", "2")
                        .env("MASTER_ADDR", "127.0.0.1")
                        .env("MASTER_PORT", &port)
                        .args(args(&gang_w))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            ranks.into_iter().map(|c| finish(c, 180)).collect()
        }
    };
    let said: String = outputs.iter().map(super::common::out).collect();
    for o in &outputs {
        assert!(o.status.success(), "{}{}", super::common::out(o), err(o));
    }
    assert!(said.contains("world size 2 (torchrun)"), "{said}");
    assert_eq!(
        said.matches("accuracy ").count(),
        1,
        "rank 0 alone reports: {said}"
    );
    let one_w = dir.path().join("one.safetensors");
    let mut one = bin();
    one.env("OMP_NUM_THREADS", "1").args(args(&one_w)).args([
        "--trick",
        "ghost_bn",
        "--set",
        "ghost_bn.splits=2",
    ]);
    let o = one.output().unwrap();
    assert!(o.status.success(), "{}", err(&o));
    assert_trained_alike(&one_w, &gang_w, 1e-4, "torchrun");
}

/// torchrun's multi-node form: two agents (`--nnodes 2`, one rank each)
/// meet through a c10d rendezvous at `--rdzv-endpoint` and start ONE run
/// over both; the agent that became rank 0's reports it, the other is quiet.
#[test]
fn torchruns_multi_node_form_meets_at_a_c10d_rendezvous_and_trains_one_run() {
    let Some(t) = torchrun() else {
        eprintln!("no torchrun beside TRICKLAB_PYTHON: its multi-node form is not tried");
        return;
    };
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let endpoint = format!("127.0.0.1:{}", free_port());
    let agents: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&t)
                .env("NO_COLOR", "1")
                .env("TRICKLAB_DIST_TIMEOUT", "30")
                .env("OMP_NUM_THREADS", "1")
                .args(["--nnodes", "2", "--nproc-per-node", "1"])
                .args(["--rdzv-backend", "c10d", "--rdzv-id", "tricklab-it"])
                .args(["--rdzv-endpoint", &endpoint, "--no-python"])
                .arg(exe)
                .args([
                    "train",
                    "--recipe",
                    "tiny-page-resnet9",
                    "--data",
                    "synthetic:64",
                ])
                .args([
                    "--set",
                    "epochs=1",
                    "--set",
                    "batch_size=16",
                    "--device",
                    "cpu",
                ])
                .arg("--no-warm-up")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = agents.into_iter().map(|a| finish(a, 180)).collect();
    for o in &outputs {
        assert!(o.status.success(), "{}{}", super::common::out(o), err(o));
    }
    let said: Vec<String> = outputs.iter().map(super::common::out).collect();
    let reporting: Vec<&String> = said.iter().filter(|s| s.contains("accuracy ")).collect();
    assert_eq!(reporting.len(), 1, "one agent's rank 0 reports: {said:?}");
    let r = reporting[0];
    assert!(
        r.contains("world size 2 (torchrun)") && r.contains("2 ranks on 1 host"),
        "{r}"
    );
    assert!(r.contains("DDP (rank 0, a sampled step)"), "{r}");
}

/// A rank killed under torchrun: torchrun's own handling ends the job (it
/// stops the other rank and exits non-zero), its report names the rank that
/// died as the root cause, and no rank is left behind.
#[test]
fn a_rank_killed_under_torchrun_ends_the_job_by_torchruns_handling() {
    let Some(t) = torchrun() else {
        eprintln!("no torchrun beside TRICKLAB_PYTHON: nothing to kill a rank under");
        return;
    };
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let mut c = Command::new(t);
    c.env("NO_COLOR", "1")
        .env("TRICKLAB_DIST_TIMEOUT", "30")
        .env("OMP_NUM_THREADS", "1")
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(exe)
        .args([
            "train",
            "--recipe",
            "tiny-page-resnet9",
            "--data",
            "synthetic:200",
        ])
        .args([
            "--set",
            "epochs=9999",
            "--set",
            "batch_size=16",
            "--device",
            "cpu",
        ])
        .arg("--no-warm-up")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut job = c.spawn().unwrap();
    // Rank 0 reports the run: wait for its first epoch, so both ranks are
    // inside the run's collectives when rank 1 dies.
    let stdout = job.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut said = String::new();
    while !said.lines().any(|l| l.trim_start().starts_with("1 ")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => said += &format!("{l}\n"),
            Err(_) => {
                let _ = job.kill();
                panic!("no first epoch under torchrun within 120 s: {said}");
            }
        }
    }
    // torchrun's workers are its children, each told its RANK.
    let workers: Vec<(i32, String)> = children_of(job.id())
        .into_iter()
        .map(|p| (p, environ(p, "RANK").unwrap_or_default()))
        .collect();
    let victim = workers.iter().find(|(_, r)| r == "1").map(|(p, _)| *p);
    let Some(victim) = victim else {
        let _ = job.kill();
        panic!("no rank 1 among torchrun's children {workers:?}");
    };
    let killed = Instant::now();
    // SAFETY: kill(2) on a pid this test's torchrun started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let o = finish(job, 90);
    let report = err(&o);
    assert!(
        !o.status.success(),
        "torchrun should fail the job: {report}"
    );
    let root = report
        .split("Root Cause")
        .nth(1)
        .unwrap_or_else(|| panic!("torchrun's report has no root cause: {report}"));
    assert!(
        root.contains("rank      : 1 (local_rank: 1)") && root.contains("SIGKILL"),
        "the root cause should be rank 1, killed: {root}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "the job took {:?} to end after the kill",
        killed.elapsed()
    );
    for (p, r) in &workers {
        assert!(
            !Path::new(&format!("/proc/{p}")).exists(),
            "rank {r} (pid {p}) was left behind"
        );
    }
}

/// One variable of a process's environment.
fn environ(pid: i32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{key}=")).map(str::to_string)
    })
}

/// A streaming run (FFCV's ResNet-18, tiny) over two Gloo ranks: each
/// rank's loader decodes only its share of every global batch (the
/// positions DistributedSampler deals it; crops and flips drawn per image),
/// so the gang trains what one process trains on the whole batch with two
/// ghost-BN splits that deal the images the same way.
#[test]
fn two_ranks_of_a_streaming_run_decode_their_shares_and_train_what_one_process_trains() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    // At lr 0.1 (FFCV's 0.5 is for batch 1024) this 1/8-width net on 8
    // images a BatchNorm turns float32's reduction-order noise into 1e-2
    // within 3 steps (measured: 3e-6 after 2 steps, 2e-2 after 3): it is
    // compared where the steps are stable, lr 0.01 (measured 1e-5 after 8).
    let sets = [("epochs", "2"), ("batch_size", "16"), ("lr", "0.01")];
    let mut overrides: Vec<serde_json::Value> = sets
        .iter()
        .chain(&[("world_size", "2")])
        .map(|(k, v)| serde_json::json!({"Set": {"key": k, "value": v}}))
        .collect();
    overrides.push(serde_json::json!({"Set": {"key": "stream.workers", "value": "1"}}));
    let s = serde_json::json!({
        "id": {"matrix": "dp", "index": 0, "variant": "v", "repeat": 0},
        "seed": 3, "recipe": "tiny-ffcv-rn18", "overrides": overrides,
        "data": "synthetic:64", "target_acc": 0.9, "device": null, "reference": null
    })
    .to_string();
    let gang_w = dir.path().join("stream-2.safetensors");
    let save = gang_w.to_str().unwrap();
    let port = free_port();
    let r0 = rank(exe, 0, 2, port, &s, &["--save-weights", save]);
    let r1 = rank(exe, 1, 2, port, &s, &["--save-weights", save]);
    let (o0, o1) = (finish(r0, 120), finish(r1, 120));
    assert!(
        o0.status.success() && o1.status.success(),
        "{}{}",
        err(&o0),
        err(&o1)
    );
    let one_w = dir.path().join("stream-1.safetensors");
    let mut c = bin();
    c.args([
        "train",
        "--recipe",
        "tiny-ffcv-rn18",
        "--data",
        "synthetic:64",
        "--seed",
        "3",
        "--trick",
        "ghost_bn",
        "--set",
        "ghost_bn.splits=2",
        "--set",
        "stream.workers=1",
    ]);
    for (k, v) in &sets {
        c.args(["--set", &format!("{k}={v}")]);
    }
    let o = c
        .args(["--no-warm-up", "--save-weights", one_w.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let compared = assert_trained_alike(&one_w, &gang_w, 1e-4, "streaming");
    assert!(compared >= 20, "only {compared} tensors compared");
}

/// A gang whose rank finds a batch with no readable image: that rank joins
/// the step with zero gradients (as DDP's Join shadows a rank out of data),
/// so the other rank's all-reduce is met, the run ends, and no NaN arrives.
#[test]
fn a_rank_whose_batch_has_no_readable_image_joins_the_step_with_zero_gradients() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("broken");
    super::common::mostly_truncated_folder(&data);
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let overrides: Vec<serde_json::Value> = [
        ("epochs", "2"),
        ("batch_size", "4"),
        ("world_size", "2"),
        ("stream.on_bad_image", "skip"),
        ("stream.workers", "1"),
    ]
    .iter()
    .map(|(k, v)| serde_json::json!({"Set": {"key": k, "value": v}}))
    .collect();
    let s = serde_json::json!({
        "id": {"matrix": "dp", "index": 0, "variant": "v", "repeat": 0},
        "seed": 3, "recipe": "tiny-ffcv-rn18", "overrides": overrides,
        "data": data.to_str().unwrap(), "target_acc": 0.9, "device": null, "reference": null
    })
    .to_string();
    let port = free_port();
    let r0 = rank(exe, 0, 2, port, &s, &[]);
    let r1 = rank(exe, 1, 2, port, &s, &[]);
    let (o0, o1) = (finish(r0, 120), finish(r1, 120));
    let all = format!(
        "{}{}{}{}",
        String::from_utf8_lossy(&o0.stdout),
        err(&o0),
        String::from_utf8_lossy(&o1.stdout),
        err(&o1)
    );
    assert!(o0.status.success() && o1.status.success(), "{all}");
    // Two readable images over 2 epochs x 4 batches x 2 ranks: most of the
    // ranks' batches are empty, and each says what it did.
    assert!(
        all.contains("joined its step with zero gradients")
            && all.contains("had no readable image")
            && !all.contains("NaN"),
        "{all}"
    );
}

#[test]
fn a_rank_that_never_arrives_a_port_in_use_and_a_different_binary_fail_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let s = spec(
        &[],
        &[("epochs", "1"), ("batch_size", "16"), ("world_size", "2")],
    );

    // Rank 1 never starts: rank 0 gives up at the rendezvous timeout (5 s).
    let t = Instant::now();
    let o = finish(rank(exe, 0, 2, free_port(), &s, &[]), 60);
    assert!(!o.status.success());
    let e = err(&o);
    assert!(e.contains("rank 0 of 2") && e.contains("arrive"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(t.elapsed() < Duration::from_secs(30));

    // Rank 0's port is taken by another program.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let o = finish(rank(exe, 0, 2, port, &s, &[]), 60);
    let e = err(&o);
    assert!(
        !o.status.success() && e.contains("rank 0 of 2") && e.contains("in use"),
        "{e}"
    );
    drop(held);

    // Rank 1 runs another build (one byte more): both stop, naming rank 1.
    let other = dir.path().join("tricklab-other");
    let mut bytes = std::fs::read(exe).unwrap();
    bytes.push(0);
    std::fs::write(&other, bytes).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let port = free_port();
    let r0 = rank(exe, 0, 2, port, &s, &[]);
    let r1 = rank(&other, 1, 2, port, &s, &[]);
    let (o0, o1) = (finish(r0, 60), finish(r1, 60));
    for o in [&o0, &o1] {
        let e = err(o);
        assert!(
            !o.status.success() && e.contains("rank 1's binary differs from rank 0's"),
            "{e}"
        );
    }
}

/// Whether any `tricklab rank` of matrix `matrix` is still running.
fn gang_ranks_alive(matrix: &str) -> bool {
    let needle = format!("\"matrix\":\"{matrix}\"");
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        args.get(1).is_some_and(|a| a == "rank") && args.iter().any(|a| a.contains(&needle))
    })
}

/// `tricklab run --headless` of the matrix `toml` on `--devices cpu:2`,
/// results under `dir/results`.
fn run_on_two_cpus(dir: &Path, toml: &str) -> std::process::Child {
    let m = dir.join("matrix.toml");
    std::fs::write(&m, toml).unwrap();
    bin()
        .args([
            "run",
            "--headless",
            m.to_str().unwrap(),
            "--devices",
            "cpu:2",
            "--results",
        ])
        .arg(dir.join("results"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A rank that stops answering (SIGSTOP, as a hung process or a debugger
/// holds it) fails its run once the others time out, and the failure names
/// the stopped rank, not the healthy one that timed out; the queue goes on.
/// `tricklab run` of a 2-rank matrix `name` (a long run, then a short
/// one) on two CPU workers with collectives that give up after `timeout`
/// seconds, once both ranks of the long run are a few seconds in: the
/// session and rank 1's pid (the higher: started second).
#[allow(
    clippy::zombie_processes,
    reason = "the child goes to the caller, who waits for it (killed and reaped here if its ranks never start)"
)]
fn long_gang(dir: &Path, name: &str, timeout: &str) -> (std::process::Child, i32) {
    let m = dir.join("matrix.toml");
    std::fs::write(&m, format!("name = \"{name}\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = 1\nset = {{ batch_size = 20, world_size = 2, train_per_class = 0, test_per_class = 0 }}\n[[variant]]\nname = \"long\"\nset = {{ epochs = 9999 }}\n[[variant]]\nname = \"short\"\nset = {{ epochs = 1 }}\n")).unwrap();
    let mut child = bin()
        .env("TRICKLAB_DIST_TIMEOUT", timeout)
        .args([
            "run",
            "--headless",
            m.to_str().unwrap(),
            "--devices",
            "cpu:2",
            "--results",
        ])
        .arg(dir.join("results"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match wait_for_ranks(child.id(), 2, Duration::from_secs(4)) {
        Some(r) => (child, *r.iter().max().unwrap()),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the ranks did not start");
        }
    }
}

#[test]
fn a_stopped_rank_is_named_when_the_others_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let (child, victim) = long_gang(dir.path(), "hung", "6");
    // SAFETY: stopping a process this test's child started (its worker kills it).
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    let o = finish(child, 180);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), err(&o));
    assert!(
        text.contains("rank 1 of 2") && text.contains("stopped answering"),
        "the failure names the stopped rank: {text}"
    );
    assert!(
        text.contains("done  hung/short"),
        "the next run trained: {text}"
    );
    assert!(!gang_ranks_alive("hung"), "a rank was left behind");
}

/// An exported MASTER_PORT (a job script's, torchrun's) is not every gang's:
/// two 2-rank gangs train at once on four CPU workers and both finish.
#[test]
fn an_exported_master_port_is_not_given_to_every_gang_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("matrix.toml");
    std::fs::write(&m, "name = \"ports\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:64\"\nrepeats = 1\nset = { batch_size = 16, world_size = 2, epochs = 1 }\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\n").unwrap();
    let o = bin()
        .env("MASTER_PORT", free_port().to_string())
        .args([
            "run",
            "--headless",
            m.to_str().unwrap(),
            "--devices",
            "cpu:4",
            "--results",
        ])
        .arg(dir.path().join("results"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), err(&o));
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("done  ports/a") && text.contains("done  ports/b"),
        "both gangs trained: {text}"
    );
}

#[test]
fn a_rank_killed_mid_run_fails_that_run_by_name_and_the_queue_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (child, victim) = long_gang(dir.path(), "gang", "20");
    // SAFETY: killing a process this test's child started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let o = finish(child, 180);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), err(&o));
    assert!(
        text.contains("rank 1 of 2") && text.contains("SIGKILL"),
        "the failure names the rank: {text}"
    );
    assert!(
        text.contains("done  gang/short"),
        "the next run trained: {text}"
    );
    assert!(!gang_ranks_alive("gang"), "a rank was left behind");
    let folder = std::fs::read_dir(dir.path().join("results/gang"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let rows = tricklab::store::read_runs(&folder.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 2, "one row a run, whatever its world size");
    let short = rows.iter().find(|r| r.variant == "short").unwrap();
    assert_eq!(short.world_size, Some(2));
    assert_eq!(short.rank_devices.as_deref(), Some("cpu;cpu"));
    assert_eq!(short.device, "cpu ×2", "the run's device is the gang's");
    assert!(short.allreduce_s.is_some_and(|s| s > 0.0));
    // Every rank's machine, as it ended.
    let ranks: serde_json::Value = serde_json::from_str(short.ranks.as_deref().unwrap()).unwrap();
    let ranks = ranks.as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["rank"], i);
        assert!(
            r["machine"]["cpu_cores"].as_u64().is_some_and(|c| c > 0),
            "{r}"
        );
        // DDP's own clock of its sampled steps.
        let (b, a, h) = (
            r["ddp"]["backward_s"].as_f64().unwrap_or(0.0),
            r["ddp"]["allreduce_s"].as_f64().unwrap_or(-1.0),
            r["ddp"]["hidden_s"].as_f64().unwrap_or(-1.0),
        );
        assert!(b > 0.0 && a >= h && h >= 0.0, "{r}");
    }
}

#[test]
fn a_run_asking_for_more_devices_than_the_session_has_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_on_two_cpus(
        dir.path(),
        "name = \"big\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:64\"\nset = { world_size = 4, batch_size = 16, epochs = 1 }\n[[variant]]\nname = \"four\"\n",
    )
    .wait_with_output()
    .unwrap();
    let e = err(&o);
    assert!(
        !o.status.success() && e.contains("world_size 4") && e.contains("2 device(s)"),
        "{e}"
    );
    assert!(!dir.path().join("results/big").exists(), "nothing started");
}

/// A shell in a real pseudo-terminal (tmux), running one command with its
/// stderr in `err.log` and its exit code in `rc`.
struct Terminal {
    tmux: super::common::Tmux,
    dir: std::path::PathBuf,
}

impl Terminal {
    fn open(dir: &Path, name: &str, command: &str) -> Terminal {
        let t = Terminal {
            tmux: super::common::Tmux {
                socket: format!("tricklab-{name}-{}", std::process::id()),
            },
            dir: dir.to_path_buf(),
        };
        let _ = std::fs::remove_file(dir.join("rc"));
        let shell = format!(
            "cd {} && {command} 2> err.log; echo $? > rc; sleep 120",
            dir.display()
        );
        t.tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "30",
            &shell,
        ]);
        t
    }
    /// The command's pid: the pane's shell's one child.
    fn command_pid(&self) -> u32 {
        let shell: u32 = self
            .tmux
            .cmd(&["display-message", "-p", "-t", "t", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("tmux names the pane's pid");
        let start = Instant::now();
        loop {
            if let Some(&c) = children_of(shell).first() {
                return c as u32;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no command started"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    /// Typing Ctrl-C: the terminal sends SIGINT to its foreground group.
    fn ctrl_c(&self) {
        self.tmux.keys("C-c");
    }
    /// The command's exit code and stderr, once it has exited.
    fn exit(&self, secs: u64) -> (i32, String) {
        let start = Instant::now();
        loop {
            let err = std::fs::read_to_string(self.dir.join("err.log")).unwrap_or_default();
            if let Ok(rc) = std::fs::read_to_string(self.dir.join("rc"))
                && rc.ends_with('\n')
            {
                return (rc.trim().parse().unwrap(), err);
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "the command did not exit within {secs} s:\n{err}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Both ranks of the session `pid`'s gang, a couple of seconds into training.
fn wait_for_gang(pid: u32) {
    assert!(
        wait_for_ranks(pid, 2, Duration::from_secs(2)).is_some(),
        "the ranks did not start"
    );
}

/// Ctrl-C typed in a terminal reaches the session, not the ranks (which
/// share its terminal): the first lets the 2-rank run finish and stores it,
/// two cancel it, as at world size 1; no rank is left either way.
#[test]
fn ctrl_c_in_a_terminal_lets_a_data_parallel_run_finish_and_twice_cancels_it() {
    // 30 epochs (a few seconds a run): at 6, a quick machine finished the
    // resumed run (1.1 s) between the two Ctrl-Cs, 300 ms apart.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("matrix.toml"),
        "name = \"ctrlc\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = 2\nset = { batch_size = 20, world_size = 2, epochs = 30, train_per_class = 0, test_per_class = 0 }\n[[variant]]\nname = \"gang\"\n",
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_tricklab");
    let t = Terminal::open(
        dir.path(),
        "ctrlc",
        &format!("{exe} run --headless matrix.toml --devices cpu:2 --results results"),
    );
    let session = t.command_pid();
    wait_for_gang(session);
    t.ctrl_c();
    let (code, err) = t.exit(180);
    assert_eq!(code, 130, "{err}");
    assert!(
        err.contains("interrupted: finishing the current run")
            && err.matches("done  ").count() == 1
            && !err.contains("FAILED")
            && !err.contains("killed by signal"),
        "{err}"
    );
    assert!(!gang_ranks_alive("ctrlc"), "a rank outlived the session");
    let folder = std::fs::read_dir(dir.path().join("results/ctrlc"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    drop(t);

    // Resumed, two Ctrl-Cs cancel the second run; the first stays stored.
    let t = Terminal::open(
        dir.path(),
        "ctrlc2",
        &format!(
            "{exe} run --headless --devices cpu:2 --resume {}",
            folder.display()
        ),
    );
    let session = t.command_pid();
    wait_for_gang(session);
    t.ctrl_c();
    std::thread::sleep(Duration::from_millis(300));
    t.ctrl_c();
    let (code, err) = t.exit(60);
    assert_eq!(code, 130, "{err}");
    assert!(
        err.contains("stop signal again: cancelling the current run")
            && !err.contains("done  ")
            && !err.contains("killed by signal"),
        "{err}"
    );
    assert!(!gang_ranks_alive("ctrlc"), "a rank outlived the session");
    let results = bin()
        .args(["results", "--results"])
        .arg(dir.path().join("results"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&results.stdout);
    // done, failed, cancelled: the finished run kept, the second cancelled.
    assert!(
        out.contains("ctrlc      1      0         1  stopped (1 cancelled)"),
        "{out}"
    );
}

/// A 2-rank run that evaluates only at its end, as the ImageNet recipes do:
/// its epochs without an evaluation carry a NaN accuracy over the ranks'
/// channel, and every epoch row is kept (issue 64: they were dropped).
#[test]
fn a_gang_run_evaluating_only_at_its_end_keeps_every_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("end-eval.toml");
    std::fs::write(
        &m,
        "name = \"end-eval\"\nrecipe = \"tiny-page-resnet9\"\nkind = \"list\"\ndata = \"synthetic:200\"\nrepeats = 1\ntarget = 0.2\nset = { batch_size = 20, world_size = 2, epochs = 3, eval_every = 3, train_per_class = 0, test_per_class = 0 }\n[[variant]]\nname = \"two\"\n",
    )
    .unwrap();
    let o = super::common::bin()
        .args(super::common::headless(&m, "res", &["--devices", "cpu:2"]))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let dir = std::fs::read_dir(tmp.path().join("res/end-eval"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("runs.parquet").is_file())
        .expect("a session folder");
    let rows = tricklab::store::read_runs(&dir.join("runs.parquet")).unwrap();
    assert_eq!(rows.len(), 1);
    let (_, epochs) = tricklab::store::read_curves(&dir, &rows[0]).unwrap();
    assert_eq!(epochs.len(), 3, "{epochs:?}");
    assert!(epochs[0].test_acc.is_nan() && epochs[1].test_acc.is_nan());
    assert!(epochs[2].test_acc.is_finite());
    assert!(!err(&o).contains("cannot read"), "{}", err(&o));
}

/// A streaming run of tiny-ffcv-rn18 (batch 4, one epoch, one decoding
/// thread) over `world` ranks, on `data`.
fn stream_spec(data: &str, world: usize) -> String {
    let overrides: Vec<serde_json::Value> = [
        ("epochs", "1"),
        ("batch_size", "4"),
        ("world_size", &world.to_string()),
        ("stream.workers", "1"),
    ]
    .iter()
    .map(|(k, v)| serde_json::json!({"Set": {"key": k, "value": v}}))
    .collect();
    serde_json::json!({
        "id": {"matrix": "dp", "index": 0, "variant": "v", "repeat": 0},
        "seed": 3, "recipe": "tiny-ffcv-rn18", "overrides": overrides,
        "data": data, "target_acc": 0.9, "device": null, "reference": null
    })
    .to_string()
}

/// An ImageNet-like folder of `classes` classes, `train` training and 2
/// validation images each, small JPEGs.
fn tiny_folder(dir: &Path, classes: usize, train: usize) {
    use tricklab::data::stream::synth::{SynthSpec, imagenet_like};
    let spec = SynthSpec {
        long_side: (40, 48),
        quality: 85,
        seed: 3,
        ..SynthSpec::small(classes, train, 2)
    };
    imagenet_like(dir, &spec).unwrap();
}

/// Two nodes holding different imports under one name (the local-SSD
/// ImageNet set-up, here two stores that differ in one image): the ranks
/// stop at the rendezvous, each with one line naming rank 1's data set and
/// the fix, instead of training apart. Ranks that differ in a per-rank
/// option that changes what they do together (`--no-warm-up` on one) stop
/// the same way, naming it.
#[test]
fn ranks_holding_other_data_under_one_name_or_another_warm_up_stop_at_the_rendezvous() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    for node in ["a", "b"] {
        let imgs = dir.path().join(format!("images-{node}"));
        tiny_folder(&imgs, 2, 4);
        if node == "b" {
            // One training image of class 0 is another image.
            let class = |c: &str| {
                let mut f: Vec<_> = std::fs::read_dir(imgs.join("train").join(c))
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                f.sort();
                f
            };
            let mut classes: Vec<_> = std::fs::read_dir(imgs.join("train"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            classes.sort();
            let (a, b) = (class(&classes[0]), class(&classes[1]));
            std::fs::copy(&b[0], &a[0]).unwrap();
        }
        let o = bin()
            .env("TRICKLAB_DATA", dir.path().join(node))
            .args(["data", "import"])
            .arg(&imgs)
            .args(["--name", "imgs", "--max-side", "48"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", err(&o));
    }
    let s = stream_spec("imgs", 2);
    let started = Instant::now();
    let port = free_port();
    let start = |r: usize, node: &str| {
        rank_command(exe, r, 2, port, &s)
            .env("TRICKLAB_DATA", dir.path().join(node))
            .arg("--no-warm-up")
            .spawn()
            .unwrap()
    };
    let (r0, r1) = (start(0, "a"), start(1, "b"));
    for o in [finish(r0, 60), finish(r1, 60)] {
        let e = err(&o);
        assert!(!o.status.success(), "the ranks trained on other data: {e}");
        assert!(
            e.contains("rank 1's data set `imgs` differs from rank 0's")
                && e.contains("give every node the same copy"),
            "{e}"
        );
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    }
    assert!(started.elapsed() < Duration::from_secs(60));

    // One data set, but rank 1 warms up and rank 0 does not.
    let port = free_port();
    let r0 = rank_command(exe, 0, 2, port, &s)
        .env("TRICKLAB_DATA", dir.path().join("a"))
        .arg("--no-warm-up")
        .spawn()
        .unwrap();
    let r1 = rank_command(exe, 1, 2, port, &s)
        .env("TRICKLAB_DATA", dir.path().join("a"))
        .spawn()
        .unwrap();
    for o in [finish(r0, 60), finish(r1, 60)] {
        let e = err(&o);
        assert!(
            !o.status.success()
                && e.contains(
                    "rank 1's warm-up differs from rank 0's (on on rank 1, off on rank 0)"
                )
                && e.contains("--no-warm-up to every rank or to none"),
            "{e}"
        );
    }
}

/// A gang's warm-up of a streamed set smaller than the warm-up's share
/// (3 classes x 4 images: 12, where the warm-up takes 8 a class, 24)
/// takes at most the images the set holds, and the run trains.
#[test]
fn a_gangs_warm_up_of_a_small_streamed_set_takes_at_most_the_images_held() {
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let imgs = dir.path().join("tiny");
    tiny_folder(&imgs, 3, 4);
    let s = stream_spec(imgs.to_str().unwrap(), 2);
    let port = free_port();
    let r0 = rank_command(exe, 0, 2, port, &s).spawn().unwrap();
    let r1 = rank_command(exe, 1, 2, port, &s).spawn().unwrap();
    let (o0, o1) = (finish(r0, 120), finish(r1, 120));
    let said = format!("{}{}{}", super::common::out(&o0), err(&o0), err(&o1));
    assert!(o0.status.success() && o1.status.success(), "{said}");
    assert!(
        said.contains("one training step of 12 images"),
        "the warm-up took the 12 images held: {said}"
    );
}

/// `tricklab train` under torchrun's variables, two ranks: rank 1 stopped
/// (SIGSTOP) mid-run, rank 0 times out in a collective, and its one line
/// names the stopped rank, as a session's gang names it, not rank 0.
#[test]
fn under_torchrun_a_stopped_rank_is_named_not_the_healthy_one() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tricklab"));
    let port = free_port().to_string();
    let ranks: Vec<std::process::Child> = (0..2)
        .map(|r| {
            Command::new(exe)
                .env("NO_COLOR", "1")
                .env("OMP_NUM_THREADS", "1")
                .env("TRICKLAB_DIST_TIMEOUT", "6")
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .args(["train", "--recipe", "tiny-page-resnet9"])
                .args(["--data", "synthetic:200", "--set", "epochs=9999"])
                .args(["--set", "batch_size=16", "--device", "cpu", "--no-warm-up"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ranks = ranks.into_iter();
    let (mut r0, mut r1) = (ranks.next().unwrap(), ranks.next().unwrap());
    // Rank 0 prints the table: both ranks are in the run's collectives
    // once its first epoch is.
    let stdout = r0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut said = String::new();
    while !said.lines().any(|l| l.trim_start().starts_with("1 ")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => said += &format!("{l}\n"),
            Err(_) => {
                let _ = (r0.kill(), r1.kill(), r0.wait(), r1.wait());
                panic!("no first epoch within 120 s: {said}");
            }
        }
    }
    let stopped = r1.id();
    // SAFETY: stopping a process this test started (killed below).
    unsafe { libc::kill(stopped as i32, libc::SIGSTOP) };
    let o = finish(r0, 90);
    let _ = (r1.kill(), r1.wait());
    let e = err(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&format!("rank 1 of 2 (pid {stopped}) stopped answering"))
            && e.contains("rank 0 timed out waiting for it"),
        "the line names the stopped rank: {e}"
    );
    assert!(!e.contains("error: rank 0 of 2"), "rank 0 is blamed: {e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
}

/// A rank pointed at a MASTER_ADDR:MASTER_PORT where no one listens says
/// so in exactly one line on stderr, naming the address and the fix; c10d's
/// own messages (its retries, its C++ backtraces) are kept in the log file
/// the line names.
#[test]
fn a_rank_with_no_rendezvous_says_one_line_and_keeps_c10ds_text_in_a_log() {
    let port = free_port();
    let o = bin()
        .env("TRICKLAB_DIST_TIMEOUT", "3")
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .args(["train", "--data", "synthetic:64", "--device", "cpu"])
        .args([
            "--no-warm-up",
            "--set",
            "epochs=1",
            "--set",
            "batch_size=16",
        ])
        .output()
        .unwrap();
    let e = err(&o);
    assert!(!o.status.success(), "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {e}");
    assert!(
        lines[0].contains("rank 1 of 2")
            && lines[0].contains(&format!("no rendezvous at 127.0.0.1:{port}"))
            && lines[0].contains("is rank 0 running"),
        "{e}"
    );
    let log = lines[0]
        .split("c10d's own messages: ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("the line names no log: {e}"));
    let text = std::fs::read_to_string(log).unwrap();
    let _ = std::fs::remove_file(log);
    assert!(text.contains("c10d"), "c10d's text is in the log: {text}");
}
