//! DDP's overlap against the post-backward reduction tricklab used before
//! issue 50, on this machine in one run: two Gloo ranks (threads of this
//! process, one libtorch thread each) train the same MLP, whose backward is
//! long enough to hide a bucket, in three forms taken in turn each round:
//! - post-backward: the backward, then every gradient all-reduced in flat
//!   25 MiB buckets and divided by the world size (the old path);
//! - DDP, its default buckets (1 MiB first, then 25 MiB), armed before the
//!   backward as DistributedDataParallel's forward arms it;
//! - DDP with 4 MiB buckets, so more of the all-reduce can start early.
//!
//! Each form reports the median step (forward, backward, reduction) and,
//! for DDP, its own Logger's backward, all-reduce and hidden milliseconds.
//! Results: results/reference/benchmarks.md.

use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};
use tricklab::config::{DdpOptions, DdpTimes};
use tricklab::dist::env::Launch;
use tricklab::dist::group::{Collective, Ddp};

const LAYERS: usize = 8;
const WIDTH: i64 = 1024;
const BATCH: i64 = 64;
const ROUNDS: usize = 12;
const WARM: usize = 2;

/// An MLP's weights (float32, the same on both ranks), trainable.
fn mlp() -> Vec<Tensor> {
    tch::manual_seed(0);
    (0..LAYERS)
        .map(|_| {
            (Tensor::randn([WIDTH, WIDTH], (Kind::Float, Device::Cpu)) / (WIDTH as f64).sqrt())
                .set_requires_grad(true)
        })
        .collect()
}

/// Forward and backward of the MLP on this rank's batch.
fn backward(ws: &[Tensor], x: &Tensor) {
    let mut h = x.shallow_clone();
    for w in ws {
        h = h.matmul(w).relu();
    }
    h.square().mean(Kind::Float).backward();
}

fn zero(ws: &[Tensor]) {
    for w in ws {
        let mut g = w.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
}

/// The old path: after the backward, the gradients in flat buckets of 25
/// MiB, each all-reduced and divided by the world size, copied back.
fn post_backward(c: &Collective, ws: &[Tensor]) {
    let per = (25 << 20) / 4 / (WIDTH * WIDTH) as usize;
    for chunk in ws.chunks(per.max(1)) {
        let grads: Vec<Tensor> = chunk.iter().map(|w| w.grad().reshape([-1])).collect();
        let flat = Tensor::cat(&grads, 0);
        c.allreduce_sum(std::slice::from_ref(&flat)).unwrap();
        let flat = flat / c.world as f64;
        for (i, w) in chunk.iter().enumerate() {
            let n = WIDTH * WIDTH;
            let mut g = w.grad();
            g.copy_(&flat.narrow(0, i as i64 * n, n).view([WIDTH, WIDTH]));
        }
    }
}

struct Form {
    name: &'static str,
    ms: Vec<f64>,
    ddp: Option<DdpTimes>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rank(rank: usize, port: u16) -> Vec<Form> {
    tch::set_num_threads(1);
    let launch = Launch::on_this_machine(rank, 2, port);
    let c = Collective::join(&launch, false, &[], Duration::from_secs(60)).unwrap();
    tch::manual_seed(rank as i64 + 1);
    let x = Tensor::randn([BATCH, WIDTH], (Kind::Float, Device::Cpu));
    let (plain, dflt, small) = (mlp(), mlp(), mlp());
    let ddp_default = Ddp::new(&c, &dflt, false, DdpOptions::default()).unwrap();
    let ddp_small = Ddp::new(
        &c,
        &small,
        false,
        DdpOptions {
            first_bucket_bytes: 4 << 20,
            bucket_bytes: 4 << 20,
            ..DdpOptions::default()
        },
    )
    .unwrap();
    let mut forms = vec![
        Form {
            name: "post-backward, 25 MiB flat buckets (before issue 50)",
            ms: Vec::new(),
            ddp: None,
        },
        Form {
            name: "DDP Reducer, default buckets (1 MiB, then 25 MiB)",
            ms: Vec::new(),
            ddp: None,
        },
        Form {
            name: "DDP Reducer, 4 MiB buckets",
            ms: Vec::new(),
            ddp: None,
        },
    ];
    for round in 0..ROUNDS + WARM {
        for (i, form) in forms.iter_mut().enumerate() {
            c.barrier().unwrap();
            let t = Instant::now();
            match i {
                0 => {
                    backward(&plain, &x);
                    post_backward(&c, &plain);
                    zero(&plain);
                }
                1 => {
                    ddp_default.arm();
                    backward(&dflt, &x);
                    ddp_default.check().unwrap();
                    zero(&dflt);
                }
                _ => {
                    ddp_small.arm();
                    backward(&small, &x);
                    ddp_small.check().unwrap();
                    zero(&small);
                }
            }
            if round >= WARM {
                form.ms.push(1e3 * t.elapsed().as_secs_f64());
            }
        }
    }
    forms[1].ddp = ddp_default.times().unwrap();
    forms[2].ddp = ddp_small.times().unwrap();
    forms
}

fn main() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ranks: Vec<_> = (0..2)
        .map(|r| std::thread::spawn(move || rank(r, port)))
        .collect();
    let mut results: Vec<Vec<Form>> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    let bytes = LAYERS as f64 * (WIDTH * WIDTH) as f64 * 4.0 / f64::from(1 << 20);
    println!(
        "ddp_overlap: 2 Gloo ranks on {} ({} cores), an MLP of {LAYERS} × {WIDTH}² ({bytes:.0} MiB of gradients), batch {BATCH} a rank, median of {ROUNDS} steps",
        tricklab::util::machine::cpu_model(),
        tricklab::util::machine::cpu_cores()
    );
    println!(
        "| form | step ms (rank 0) | DDP backward ms | DDP all-reduce ms | hidden under the backward ms | exposed ms |"
    );
    println!("|---|---|---|---|---|---|");
    for form in &mut results[0] {
        let step = median(&mut form.ms);
        let cell = |f: fn(&DdpTimes) -> f64| {
            form.ddp
                .map_or("-".to_string(), |t| format!("{:.1}", 1e3 * f(&t)))
        };
        println!(
            "| {} | {step:.1} | {} | {} | {} | {} |",
            form.name,
            cell(|t| t.backward_s),
            cell(|t| t.allreduce_s),
            cell(|t| t.hidden_s),
            cell(DdpTimes::exposed_s)
        );
    }
}
