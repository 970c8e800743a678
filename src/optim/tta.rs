//! Test-time augmentation over logits.

use tch::Tensor;

fn mirror(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    (forward(x) + forward(&x.flip([3]))) * 0.5
}

/// 0: f(x); 1: mean over x and its left-right mirror; 2 (airbench):
/// 0.5·mirror(x) + 0.25·(mirror(t₁x) + mirror(t₂x)) with t₁, t₂ the two 1-px
/// diagonal translations (reflect pad 1, crops at (0,0) and (2,2)).
/// Levels above 2 are treated as 2.
pub fn tta_logits(forward: &dyn Fn(&Tensor) -> Tensor, x: &Tensor, level: u8) -> Tensor {
    match level {
        0 => forward(x),
        1 => mirror(forward, x),
        _ => {
            let s = x.size();
            let (h, w) = (s[2], s[3]);
            let padded = x.reflection_pad2d([1, 1, 1, 1]);
            let t1 = padded.narrow(2, 0, h).narrow(3, 0, w);
            let t2 = padded.narrow(2, 2, h).narrow(3, 2, w);
            let shifted = (mirror(forward, &t1) + mirror(forward, &t2)) * 0.5;
            (mirror(forward, x) + shifted) * 0.5
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
