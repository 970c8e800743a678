//! Losses: label-smoothed and soft-target cross-entropy (mean over the batch).

use tch::{Kind, Reduction, Tensor};

/// (1 − α)·CE + α·mean_c(−log p_c), averaged over the batch, computed in f32.
pub fn label_smoothed_ce(logits: &Tensor, targets: &Tensor, alpha: f64) -> Tensor {
    at_least_f32(logits).cross_entropy_loss(targets, None::<&Tensor>, Reduction::Mean, -100, alpha)
}

/// The loss in float32, or float64 where the logits are (a float64 replay).
fn at_least_f32(logits: &Tensor) -> Tensor {
    match logits.kind() {
        Kind::Double => logits.shallow_clone(),
        _ => logits.to_kind(Kind::Float),
    }
}

/// mean_n(−Σ_c q_c·log p_c) for soft targets q (CutMix).
pub fn soft_target_ce(logits: &Tensor, soft_targets: &Tensor) -> Tensor {
    let logp = at_least_f32(logits).log_softmax(-1, None);
    (soft_targets.to_kind(logp.kind()) * logp)
        .sum_dim_intlist(-1, false, None)
        .neg()
        .mean(None)
}

/// Label smoothing applied to soft targets: (1 − α)·q + α/C, which makes
/// `soft_target_ce` equal `label_smoothed_ce` on one-hot q.
pub fn smooth_targets(soft_targets: &Tensor, alpha: f64) -> Tensor {
    let c = soft_targets.size()[soft_targets.dim() - 1] as f64;
    soft_targets * (1.0 - alpha) + alpha / c
}
