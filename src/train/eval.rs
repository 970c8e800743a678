//! Stage 5 of a run: test accuracy without and with TTA, and the seconds
//! to the target on the run's own clock.

use super::prepare::Layout;
use crate::config::Clock;
use crate::dist::group::Collective;
use crate::events::Clocks;
use crate::model::Net;
use crate::optim;
use crate::plan::EvalPlan;
use anyhow::Result;
use tch::{Kind, Tensor};

/// Correct predictions without and with TTA, and the images they were
/// counted over: what a rank adds to the gang's sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub plain: f64,
    pub tta: f64,
    pub n: f64,
}

impl Counts {
    /// The counts kept on the device, read back (one sync each), over `n` images.
    pub fn read(plain: &Tensor, tta: &Tensor, level: u8, n: f64) -> Counts {
        Counts {
            plain: plain.double_value(&[]),
            tta: if level > 0 {
                tta.double_value(&[])
            } else {
                0.0
            },
            n,
        }
    }

    /// (plain, TTA) accuracy; with TTA off (`level` 0) both are the plain one.
    pub fn accuracies(&self, level: u8) -> (f64, f64) {
        let plain = self.plain / self.n;
        (plain, if level > 0 { self.tta / self.n } else { plain })
    }

    /// The gang's counts: every rank's summed by one all-reduce, so every
    /// rank holds them (counts of images are exact in float64).
    pub fn summed(self, gang: &Collective) -> Result<Counts> {
        let t = Tensor::from_slice(&[self.plain, self.tta, self.n]);
        gang.allreduce_sum(std::slice::from_ref(&t))?;
        let v = Vec::<f64>::try_from(&t)?;
        Ok(Counts {
            plain: v[0],
            tta: v[1],
            n: v[2],
        })
    }
}

/// The part of the validation set rank `rank` of `world` evaluates:
/// consecutive blocks that together are the whole set, the remainder on
/// the first ranks (rows `range(n)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Shard {
    pub rank: usize,
    pub world: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };

    /// This shard's rows [start, end) of `n`.
    pub fn range(&self, n: i64) -> (i64, i64) {
        let (r, w) = (self.rank as i64, self.world as i64);
        (n * r / w, n * (r + 1) / w)
    }
}

/// Correct predictions without and with TTA at the plan's level over
/// `shard` of the test set, counted on the device and read once. `size`:
/// evaluate downscaled images (progressive resizing without full-size
/// validation). Under `amp` the forward is autocast, as FFCV validates.
/// Selective TTA (`tta_fraction`) ranks the images of what it is given, so
/// its caller gives it the whole set.
pub(super) fn evaluate(
    net: &Net,
    (x, y): (&Tensor, &Tensor),
    eval: &EvalPlan,
    layout: Layout,
    size: Option<i64>,
    shard: Shard,
) -> Counts {
    let level = eval.tta_level;
    let (start, end) = shard.range(x.size()[0]);
    let (x, y) = (
        &x.narrow(0, start, end - start),
        &y.narrow(0, start, end - start),
    );
    tch::no_grad(|| {
        let n = x.size()[0];
        let bs = eval.batch as i64;
        let seen = |t: Tensor| match size {
            Some(s) => t.upsample_bilinear2d([s, s], false, None, None),
            None => t,
        };
        let fwd = |t: &Tensor| forward_eval(net, t, layout);
        let hits =
            |logits: &Tensor, y: &Tensor| logits.argmax(-1, false).eq_tensor(y).sum(Kind::Int64);
        let mut plain = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut tta = Tensor::zeros([], (Kind::Int64, x.device()));
        let mut all_plain = Vec::new();
        let mut i = 0;
        while i < n {
            let k = bs.min(n - i);
            let (xb, yb) = (seen(x.narrow(0, i, k)), y.narrow(0, i, k));
            let logits = fwd(&xb);
            let _ = plain.g_add_(&hits(&logits, &yb));
            match eval.tta_fraction {
                Some(_) => all_plain.push(logits),
                None if level > 0 => {
                    let l = tta_of(eval, &fwd, &xb, &logits);
                    let _ = tta.g_add_(&hits(&l, &yb));
                }
                None => {}
            }
            i += k;
        }
        if let (Some(_), true) = (eval.tta_fraction, level > 0) {
            // Which images get the views is decided over the whole test set.
            let plain_all = Tensor::cat(&all_plain, 0);
            let l = tta_of(eval, &fwd, &seen(x.shallow_clone()), &plain_all);
            let _ = tta.g_add_(&hits(&l, y));
        }
        Counts::read(&plain, &tta, level, n as f64)
    })
}

/// The net's logits for an evaluation batch, in float32, autocast under
/// the run's `amp` as its training forward is.
pub(super) fn forward_eval(net: &Net, x: &Tensor, layout: Layout) -> Tensor {
    let x = layout.input(x.shallow_clone());
    crate::native::autocast(x.device(), layout.amp, || net.forward_t(&x, false))
        .to_kind(Kind::Float)
}

/// (plain, TTA) accuracy of `net` on the validation set, given `count`,
/// which counts a shard of it. In a gang every rank counts its shard with
/// rank 0's BatchNorm statistics (broadcast first, as DDP's
/// `broadcast_buffers` makes them everyone's) and one all-reduce sums the
/// counts, as FFCV and fast.ai validate over every GPU: the result is
/// rank 0's net on every image, whatever the world size, and every rank
/// holds it. Selective TTA ranks the whole set, so there rank 0 counts it
/// alone and the sum carries its counts.
pub(super) fn over_ranks(
    gang: Option<&Collective>,
    net: &Net,
    eval: &EvalPlan,
    count: impl FnOnce(Shard) -> Result<Counts>,
) -> Result<(f64, f64)> {
    let gang = gang.filter(|d| d.world > 1);
    let shard = match gang {
        Some(d) if eval.tta_fraction.is_none() => Some(Shard {
            rank: d.rank,
            world: d.world,
        }),
        Some(d) if d.rank > 0 => None,
        _ => Some(Shard::WHOLE),
    };
    if let Some(d) = gang {
        d.broadcast(&net.bn_running_stats(), 0)?;
    }
    let mine = match shard {
        Some(s) => count(s)?,
        None => Counts::default(),
    };
    let counts = match gang {
        Some(d) => mine.summed(d)?,
        None => mine,
    };
    anyhow::ensure!(
        counts.n > 0.0,
        "the validation split has no readable image: give the data set a val/ (or test/) folder"
    );
    Ok(counts.accuracies(eval.tta_level))
}

/// The logits the plan's TTA scores `x` by, given its plain logits `fx`:
/// every view averaged (Page, airbench, hlb), or only the least confident
/// images re-scored by the equal mean of their views (hiverge).
pub(super) fn tta_of(
    eval: &EvalPlan,
    forward: &dyn Fn(&Tensor) -> Tensor,
    x: &Tensor,
    fx: &Tensor,
) -> Tensor {
    match eval.tta_fraction {
        Some(frac) => optim::selective_tta(forward, x, fx, eval.tta_level, frac, eval.batch as i64),
        None => optim::tta_from_plain(forward, x, fx, eval.tta_level),
    }
}

/// Seconds to an evaluation that reached the target, on `clock`: what that
/// convention would have timed had the run stopped there (`eval_s`: this
/// evaluation's seconds, which airbench's clock counts and the others do not).
pub(super) fn time_on(clock: Clock, c: &Clocks, eval_s: f64, wall_s: f64) -> f64 {
    use crate::config::Stage;
    // Each stage's own stopwatch; loading is what prep_s adds to the
    // preprocessing (prep_s times both, preprocess_s the second alone).
    let seconds = |s: Stage| match s {
        Stage::Loading => c.prep_s - c.preprocess_s,
        Stage::Preprocessing => c.preprocess_s,
        Stage::Whitening => c.whiten_s,
        Stage::NetBuild => c.build_s,
        Stage::Training => c.hlb_s,
        Stage::FinalEvaluation => eval_s,
        // No clock covers them (`stages` says which do).
        Stage::EpochEvaluation => 0.0,
    };
    clock.sum(seconds).unwrap_or(wall_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::env::Launch;
    use crate::model::Net;
    use crate::native::Rng;
    use tch::{Device, nn};

    /// Two Gloo ranks (threads) whose nets differ only in their BatchNorm
    /// statistics each count their shard of 50 images: with rank 0's
    /// statistics broadcast first, the sum is rank 0's net on all 50, and
    /// both ranks hold it; TTA's counts too.
    #[test]
    fn two_ranks_count_what_rank_0s_net_counts_on_the_whole_set_alone() {
        let plan = crate::recipe::resolve_plan("tiny-page-resnet9", &[])
            .unwrap()
            .1;
        let eval = EvalPlan {
            tta_level: 1,
            batch: 8,
            ..plan.eval.clone()
        };
        let layout = Layout::of(&plan);
        let data = Rng::new(Device::Cpu, 9);
        let x = data.rand(&[50, 3, 16, 16], Device::Cpu) * 2.0 - 1.0;
        let y = data.randint(10, &[50], Device::Cpu);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // (rank, its own predictions on all images, what it counted alone,
        // what over_ranks gave it)
        type Seen = (usize, Vec<i64>, (f64, f64), (f64, f64));
        let ranks: Vec<std::thread::JoinHandle<Seen>> = (0..2)
            .map(|rank| {
                let (x, y, eval, net_cfg) = (x.copy(), y.copy(), eval.clone(), plan.net.clone());
                std::thread::spawn(move || {
                    let vs = nn::VarStore::new(Device::Cpu);
                    let net = crate::native::with_seeded_inits(Device::Cpu, 7, || {
                        Net::new(&vs.root(), &net_cfg)
                    });
                    // The head drawn alike on both ranks (the recipe's starts
                    // at zero, which predicts one class for every image).
                    let head = Rng::new(Device::Cpu, 11);
                    for t in vs.trainable_variables().iter().filter(|t| t.dim() == 2) {
                        let r = head.rand(&t.size(), Device::Cpu) - 0.5;
                        tch::no_grad(|| {
                            t.shallow_clone().copy_(&r);
                        });
                    }
                    // Statistics of each rank's own batches: apart, channel by channel.
                    let own_batches = Rng::new(Device::Cpu, 100 + rank as u64);
                    for (i, s) in net.bn_running_stats().iter().enumerate() {
                        let r = own_batches.rand(&s.size(), Device::Cpu);
                        let v = if i % 2 == 0 { r - 0.5 } else { r + 0.5 };
                        tch::no_grad(|| {
                            s.shallow_clone().copy_(&v);
                        });
                    }
                    let own = tch::no_grad(|| forward_eval(&net, &x, layout).argmax(-1, false));
                    let alone = evaluate(&net, (&x, &y), &eval, layout, None, Shard::WHOLE)
                        .accuracies(eval.tta_level);
                    let launch = Launch::on_this_machine(rank, 2, port);
                    let gang =
                        Collective::join(&launch, false, &[], std::time::Duration::from_secs(20))
                            .unwrap();
                    let summed = over_ranks(Some(&gang), &net, &eval, |shard| {
                        assert_eq!(shard, Shard { rank, world: 2 });
                        Ok(evaluate(&net, (&x, &y), &eval, layout, None, shard))
                    })
                    .unwrap();
                    (rank, Vec::<i64>::try_from(own).unwrap(), alone, summed)
                })
            })
            .collect();
        let seen: Vec<Seen> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
        let (rank0, rank1) = (&seen[0], &seen[1]);
        assert_ne!(
            rank0.1, rank1.1,
            "the ranks' statistics must change what they predict, or the test proves nothing"
        );
        assert_eq!(
            rank0.3, rank0.2,
            "rank 0: the gang's count is its net's on all images"
        );
        assert_eq!(rank1.3, rank0.2, "rank 1 holds the same result");
    }

    #[test]
    fn shards_are_consecutive_blocks_that_make_the_whole_set() {
        let blocks: Vec<(i64, i64)> = (0..3)
            .map(|rank| Shard { rank, world: 3 }.range(10))
            .collect();
        assert_eq!(blocks, vec![(0, 3), (3, 6), (6, 10)]);
        assert_eq!(Shard::WHOLE.range(10), (0, 10));
    }
}
