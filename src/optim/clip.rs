//! Gradient clipping by the global norm.

use tch::{Kind, Tensor};

/// Rescales the gradients of `params` so their global norm is at most
/// `max_norm`, on the device (no host sync).
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) {
    tch::no_grad(|| {
        let grads: Vec<Tensor> = params
            .iter()
            .map(|p| p.grad())
            .filter(|g| g.defined())
            .collect();
        if grads.is_empty() {
            return;
        }
        let sq: Vec<Tensor> = grads
            .iter()
            .map(|g| g.to_kind(Kind::Float).pow_tensor_scalar(2).sum(Kind::Float))
            .collect();
        let norm = Tensor::stack(&sq, 0).sum(Kind::Float).sqrt();
        let coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
        for g in &grads {
            let _ = g.shallow_clone().g_mul_(&coef.to_kind(g.kind()));
        }
    });
}
