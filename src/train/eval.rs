//! Stage 5 of a run: test accuracy without and with TTA, and the seconds
//! to the target on the run's own clock.

use super::prepare::Layout;
use crate::config::Clock;
use crate::events::Clocks;
use crate::model::Net;
use crate::optim;
use crate::plan::EvalPlan;
use tch::{Kind, Tensor};

/// Accuracy without and with TTA at the plan's level, counted on the
/// device and read once. `size`: evaluate downscaled images (progressive
/// resizing without full-size validation).
pub(super) fn evaluate(
    net: &Net,
    x: &Tensor,
    y: &Tensor,
    eval: &EvalPlan,
    layout: Layout,
    size: Option<i64>,
) -> (f64, f64) {
    let level = eval.tta_level;
    tch::no_grad(|| {
        let n = x.size()[0];
        let bs = eval.batch as i64;
        let seen = |t: Tensor| match size {
            Some(s) => t.upsample_bilinear2d([s, s], false, None, None),
            None => t,
        };
        let fwd = |t: &Tensor| {
            net.forward_t(&layout.input(t.shallow_clone()), false)
                .to_kind(Kind::Float)
        };
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
        let n = n as f64;
        let plain = plain.double_value(&[]) / n;
        let tta = if level > 0 {
            tta.double_value(&[]) / n
        } else {
            plain
        };
        (plain, tta)
    })
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
    let Some(stages) = clock.stages() else {
        return wall_s;
    };
    // Each stage's own stopwatch; loading is what prep_s adds to the
    // preprocessing (prep_s times both, preprocess_s the second alone).
    let seconds = |s: &Stage| match s {
        Stage::Loading => c.prep_s - c.preprocess_s,
        Stage::Preprocessing => c.preprocess_s,
        Stage::Whitening => c.whiten_s,
        Stage::NetBuild => c.build_s,
        Stage::Training => c.hlb_s,
        Stage::FinalEvaluation => eval_s,
        // No clock covers them (`stages` says which do).
        Stage::EpochEvaluation => 0.0,
    };
    stages.iter().map(seconds).sum()
}
