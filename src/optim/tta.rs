//! Test-time augmentation over logits.

use tch::Tensor;

fn mirror(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    mirror_of(forward, x, &forward(x))
}

/// The mirror average when f(x) is already known.
fn mirror_of(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor, fx: &Tensor) -> Tensor {
    (fx + forward(&x.flip([3]))) * 0.5
}

/// 0: f(x); 1: mean over x and its left-right mirror; 2 (airbench):
/// 0.5·mirror(x) + 0.25·(mirror(t₁x) + mirror(t₂x)) with t₁, t₂ the two 1-px
/// diagonal translations (reflect pad 1, crops at (0,0) and (2,2)).
/// Levels above 2 are treated as 2.
pub fn tta_logits(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor, level: u8) -> Tensor {
    tta_from_plain(forward, x, &forward(x), level)
}

/// `tta_logits` given the plain view's logits `fx` = f(x), which an
/// evaluation that reports both accuracies has computed already.
pub fn tta_from_plain(
    forward: &dyn Fn(&Tensor) -> Tensor,
    x: &Tensor,
    fx: &Tensor,
    level: u8,
) -> Tensor {
    match level {
        0 => fx.shallow_clone(),
        1 => mirror_of(forward, x, fx),
        _ => {
            let s = x.size();
            let (h, w) = (s[2], s[3]);
            let padded = x.reflection_pad2d([1, 1, 1, 1]);
            let t1 = padded.narrow(2, 0, h).narrow(3, 0, w);
            let t2 = padded.narrow(2, 2, h).narrow(3, 2, w);
            let shifted = (mirror(forward, &t1) + mirror(forward, &t2)) * 0.5;
            (mirror_of(forward, x, fx) + shifted) * 0.5
        }
    }
}

/// The indices of the int(`fraction`·n) rows of `logits` whose softmax is
/// least confident (lowest top probability), on the device: no host sync.
pub fn least_confident(logits: &Tensor, fraction: f64) -> Tensor {
    let n = logits.size()[0];
    let k = ((fraction * n as f64).floor() as i64).clamp(0, n);
    let confidence = logits
        .softmax(-1, tch::Kind::Float)
        .amax([-1i64].as_slice(), false);
    confidence.topk(k, -1, false, false).1
}

/// hiverge's `_get_tta_logits`: the mean of every view's logits, weighted
/// equally; level 2 = the image and its two 1-px reflect-pad shifts (crops
/// at (0,0) and (2,2)), each with its mirror: 6 views in one forward pass.
pub fn equal_views(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor, level: u8) -> Tensor {
    let base = if level >= 2 {
        let s = x.size();
        let (h, w) = (s[2], s[3]);
        let padded = x.reflection_pad2d([1, 1, 1, 1]);
        Tensor::cat(
            &[
                x.shallow_clone(),
                padded.narrow(2, 0, h).narrow(3, 0, w),
                padded.narrow(2, 2, h).narrow(3, 2, w),
            ],
            0,
        )
    } else {
        x.shallow_clone()
    };
    let views = Tensor::cat(&[&base, &base.flip([3])], 0);
    let n = x.size()[0];
    let logits = forward(&views);
    let classes = logits.size()[1];
    logits.view([-1, n, classes]).mean_dim(0, false, None)
}

/// hiverge's selective TTA: every image keeps its plain logits `plain`
/// except the int(`fraction`·n) least confident, which get the equal mean of
/// `level`'s views (`batch` images at a time).
pub fn selective_tta(
    forward: &dyn Fn(&Tensor) -> Tensor,
    x: &Tensor,
    plain: &Tensor,
    level: u8,
    fraction: f64,
    batch: i64,
) -> Tensor {
    let idx = least_confident(plain, fraction);
    let k = idx.size()[0];
    let mut out = plain.copy();
    let mut start = 0;
    while start < k {
        let ib = idx.narrow(0, start, batch.max(1).min(k - start));
        let views = equal_views(forward, &x.index_select(0, &ib), level.max(1));
        out = out.index_copy(0, &ib, &views.to_kind(out.kind()));
        start += ib.size()[0];
    }
    out
}

/// Number of forward passes a level costs (1, 2, 6).
pub fn tta_passes(level: u8) -> usize {
    match level {
        0 => 1,
        1 => 2,
        _ => 6,
    }
}
