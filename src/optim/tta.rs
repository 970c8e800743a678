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

/// Number of forward passes a level costs (1, 2, 6).
pub fn tta_passes(level: u8) -> usize {
    match level {
        0 => 1,
        1 => 2,
        _ => 6,
    }
}
