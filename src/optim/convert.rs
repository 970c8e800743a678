//! Converters from each reference's lr/wd units to ours: mean-loss lr and a
//! coupled wd whose per-step decay is lr·wd (TRICKS interaction 7).

/// Page passes lr/bs and wd·bs to SGD on a summed loss (CF:dawn, CF:tb).
/// Returns (mean-loss lr, wd): (raw_lr·batch, raw_wd/batch).
pub fn from_page(raw_lr: f64, raw_wd: f64, batch: usize) -> (f64, f64) {
    let b = batch as f64;
    (raw_lr * b, raw_wd / b)
}

/// airbench's "per 1024 examples" hyperparameters with PyTorch Nesterov SGD
/// on a summed loss: raw lr = lr/(1024·(1 + 1/(1−μ))), per-step decay =
/// wd·batch/(1024·(1 + 1/(1−μ))). Returns (mean-loss lr, wd).
pub fn from_airbench(
    lr_per_1024: f64,
    wd_per_1024: f64,
    momentum: f64,
    batch: usize,
) -> (f64, f64) {
    let kilostep = 1024.0 * (1.0 + 1.0 / (1.0 - momentum));
    let b = batch as f64;
    let lr = lr_per_1024 / kilostep * b;
    let decay = wd_per_1024 * b / kilostep;
    (lr, decay / lr)
}

/// hlb's coupled PyTorch SGD on a loss summed over the batch after scaling
/// each example by `loss_scale` (512/1024 in v0.7.0). Returns (mean-loss lr, wd).
pub fn from_hlb(raw_lr: f64, raw_wd: f64, batch: usize, loss_scale: f64) -> (f64, f64) {
    let lr = raw_lr * batch as f64 * loss_scale;
    (lr, raw_lr * raw_wd / lr)
}

/// (lr_mult, wd_mult) of the BN-bias group for a `bias_scaler` (64 in Page's
/// final recipe, airbench and hlb). Page scales lr ×k and wd ÷k; airbench
/// scales lr ×k and keeps the absolute decay; both keep the per-step decay
/// lr·wd of the other weights, which in our units is wd_mult = 1/k.
pub fn bias_group_mults(bias_scaler: f64) -> (f64, f64) {
    (bias_scaler, 1.0 / bias_scaler)
}
