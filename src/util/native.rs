//! Two libtorch operations that tch 0.24 cannot express, through a small C++
//! shim compiled by `build.rs` against the same libtorch:
//! - CELU with its α as one kernel: tch's `celu()` and `elu()` take no α, and
//!   α·celu(x/α) costs two extra elementwise passes (and their backward) per
//!   activation in Page's final net;
//! - autocast on the CPU: tch's `autocast` sets CUDA's only, so the `amp`
//!   path could not run in a test.

use std::ffi::{CStr, c_char, c_int};
use tch::{Device, Tensor};

unsafe extern "C" {
    fn tricklab_last_error() -> *const c_char;
    fn tricklab_celu(x: *const torch_sys::C_tensor, alpha: f64) -> *mut torch_sys::C_tensor;
    fn tricklab_autocast_enter(cuda: c_int, half: c_int) -> c_int;
    fn tricklab_autocast_exit(cuda: c_int, prev: c_int);
}

/// CELU(x; α) = max(0, x) + min(0, α·(exp(x/α) − 1)), one kernel each way.
pub fn celu(x: &Tensor, alpha: f64) -> Tensor {
    // SAFETY: `x` outlives the call; a non-null result is a fresh heap tensor
    // that `from_ptr` takes ownership of.
    let out = unsafe { tricklab_celu(x.as_ptr(), alpha) };
    if out.is_null() {
        // Only a broken input (a non-float tensor) gets here: a bug, not data.
        let msg = unsafe { CStr::from_ptr(tricklab_last_error()) };
        panic!("celu failed: {}", msg.to_string_lossy());
    }
    unsafe { Tensor::from_ptr(out) }
}

/// The type a forward pass under [`autocast`] runs its matmuls and convs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutocastKind {
    F16,
    Bf16,
}

/// Runs `f` with autocast on `device` (a no-op when `enabled` is false), on
/// the CPU as on CUDA. Backward runs outside, as PyTorch prescribes.
pub fn autocast<T>(device: Device, kind: Option<AutocastKind>, f: impl FnOnce() -> T) -> T {
    let Some(kind) = kind else { return f() };
    let cuda = c_int::from(device.is_cuda());
    let half = c_int::from(kind == AutocastKind::Bf16);
    // SAFETY: plain calls into libtorch's thread-local autocast state; the
    // guard restores it even if `f` panics.
    let prev = unsafe { tricklab_autocast_enter(cuda, half) };
    struct Exit(c_int, c_int);
    impl Drop for Exit {
        fn drop(&mut self) {
            unsafe { tricklab_autocast_exit(self.0, self.1) }
        }
    }
    let _exit = Exit(cuda, prev);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn celu_with_alpha_matches_the_formula_and_its_gradient() {
        let x =
            Tensor::linspace(-4.0, 3.0, 71, (Kind::Double, Device::Cpu)).set_requires_grad(true);
        let alpha = 0.3;
        let y = celu(&x, alpha);
        let want = x.clamp_min(0.0) + ((&x / alpha).exp() - 1.0).clamp_max(0.0) * alpha;
        assert!(y.allclose(&want, 1e-12, 1e-12, false));
        y.sum(Kind::Double).backward();
        let g = x.grad();
        // d/dx: 1 for x > 0, exp(x/α) below (the kernel rounds near 0 a little differently).
        let want_g = (&x / alpha)
            .exp()
            .detach()
            .where_self(&x.le(0.0), &x.ones_like());
        let diff = (&g - &want_g).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "gradient off by {diff}: {g} vs {want_g}");
    }

    #[test]
    fn autocast_runs_a_cpu_matmul_in_half_and_restores_the_state() {
        let a = Tensor::randn([8, 8], (Kind::Float, Device::Cpu));
        let inside = autocast(Device::Cpu, Some(AutocastKind::F16), || a.matmul(&a));
        assert_eq!(inside.kind(), Kind::Half);
        let bf = autocast(Device::Cpu, Some(AutocastKind::Bf16), || a.matmul(&a));
        assert_eq!(bf.kind(), Kind::BFloat16);
        assert_eq!(a.matmul(&a).kind(), Kind::Float, "left on after the region");
        let off = autocast(Device::Cpu, None, || a.matmul(&a));
        assert_eq!(off.kind(), Kind::Float);
    }
}
