//! libtorch C++ that tch 0.24 does not bind, through a small C++ shim
//! (native.cpp) compiled by `build.rs` against the same libtorch. c10d's
//! store and process groups are bound in `c10d`; here:
//! - CELU with its α as one kernel: tch's `celu()` and `elu()` take no α, and
//!   α·celu(x/α) costs two extra elementwise passes (and their backward) per
//!   activation in Page's final net;
//! - autocast on the CPU: tch's `autocast` sets CUDA's only, so the `amp`
//!   path could not run in a test;
//! - random draws from a generator of the run's own: tch binds only the
//!   process-wide default generators, so two CPU workers interleave their
//!   draws (runs differ from a one-worker session) and one GPU worker's
//!   `manual_seed` reseeds every other GPU mid-run.

pub mod c10d;
pub mod cuda;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;
use tch::{Device, Tensor};

unsafe extern "C" {
    fn tricklab_last_error() -> *const c_char;
    fn tricklab_celu(x: *const torch_sys::C_tensor, alpha: f64) -> *mut torch_sys::C_tensor;
    fn tricklab_pin_memory(x: *const torch_sys::C_tensor) -> *mut torch_sys::C_tensor;
    fn tricklab_autocast_enter(cuda: c_int, half: c_int) -> c_int;
    fn tricklab_autocast_exit(cuda: c_int, prev: c_int);
    fn tricklab_generator_new(cuda: c_int, index: c_int, seed: u64) -> *mut c_void;
    fn tricklab_generator_free(g: *mut c_void);
    fn tricklab_randperm(
        g: *mut c_void,
        n: i64,
        cuda: c_int,
        index: c_int,
    ) -> *mut torch_sys::C_tensor;
    fn tricklab_randint(
        g: *mut c_void,
        high: i64,
        shape: *const i64,
        ndim: c_int,
        cuda: c_int,
        index: c_int,
    ) -> *mut torch_sys::C_tensor;
    fn tricklab_rand(
        g: *mut c_void,
        shape: *const i64,
        ndim: c_int,
        cuda: c_int,
        index: c_int,
    ) -> *mut torch_sys::C_tensor;
    fn tricklab_seed_defaults(cuda: c_int, index: c_int, seed: u64) -> c_int;
    fn tricklab_fused_sgd(
        params: *const *const torch_sys::C_tensor,
        grads: *const *const torch_sys::C_tensor,
        bufs: *const *const torch_sys::C_tensor,
        n: c_int,
        wd: f64,
        momentum: f64,
        lr: f64,
        nesterov: c_int,
        first: c_int,
    ) -> c_int;
    fn tricklab_page_sgd(
        params: *const *const torch_sys::C_tensor,
        grads: *const *const torch_sys::C_tensor,
        bufs: *const *const torch_sys::C_tensor,
        n: c_int,
        wd: f64,
        momentum: f64,
        lr: f64,
    ) -> c_int;
    fn tricklab_grads_to_none(ts: *const *const torch_sys::C_tensor, n: c_int);
}

fn last_error() -> String {
    // SAFETY: the shim keeps a thread-local NUL-terminated string alive.
    unsafe { CStr::from_ptr(tricklab_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Takes ownership of a tensor the shim returned, or panics with its error:
/// only a bug (a bad shape, a device that does not exist) gets there.
fn owned(out: *mut torch_sys::C_tensor, what: &str) -> Tensor {
    if out.is_null() {
        panic!("{what} failed: {}", last_error());
    }
    // SAFETY: a non-null result is a fresh heap tensor nobody else owns.
    unsafe { Tensor::from_ptr(out) }
}

fn split(device: Device) -> (c_int, c_int) {
    match device {
        Device::Cuda(i) => (1, i as c_int),
        _ => (0, 0),
    }
}

/// One run's random draws: a CPU generator and, on a GPU, one for that GPU,
/// both seeded with the run's seed. Every data-side draw goes through it, so
/// a run draws the same numbers whichever worker runs it and whatever the
/// other workers do.
pub struct Rng {
    cpu: *mut c_void,
    device: Option<(Device, *mut c_void)>,
    /// Recorded draws given back in order instead of drawing (a golden
    /// trajectory's: a reference's own draws written as this engine's).
    replay: Option<Replay>,
}

/// One recorded draw, in the form `Rng`'s methods return it.
#[derive(Clone, Debug, PartialEq)]
pub enum Draw {
    /// `randperm(n)`: a permutation of 0..n.
    Perm(Vec<i64>),
    /// `randint(high, shape)`: integers in [0, high), row-major.
    Int {
        high: i64,
        shape: Vec<i64>,
        values: Vec<i64>,
    },
    /// `rand(shape)`: floats in [0, 1), row-major.
    Float { shape: Vec<i64>, values: Vec<f32> },
}

impl Draw {
    /// The call the draw answers, without its values.
    pub fn summary(&self) -> String {
        match self {
            Draw::Perm(v) => format!("Perm({})", v.len()),
            Draw::Int { high, shape, .. } => format!("Int({high}, {shape:?})"),
            Draw::Float { shape, .. } => format!("Float({shape:?})"),
        }
    }
}

/// What a draw asks for: `randperm(n)`, `randint(high, shape)`, `rand(shape)`.
#[derive(Clone, Copy, Debug)]
enum Asked<'a> {
    Perm(i64),
    Int(i64, &'a [i64]),
    Float(&'a [i64]),
}

/// Labelled draws and how many have been given back.
struct Replay {
    draws: Vec<(String, Draw)>,
    next: Mutex<usize>,
}

// SAFETY: ATen generators lock their own mutex around every draw.
unsafe impl Send for Rng {}

impl Rng {
    pub fn new(device: Device, seed: u64) -> Rng {
        let make = |d: Device| {
            let (cuda, index) = split(d);
            // SAFETY: plain constructor; null means an error string is set.
            let g = unsafe { tricklab_generator_new(cuda, index, seed) };
            assert!(!g.is_null(), "generator for {d:?}: {}", last_error());
            g
        };
        Rng {
            cpu: make(Device::Cpu),
            device: device.is_cuda().then(|| (device, make(device))),
            replay: None,
        }
    }

    /// A generator that gives back `draws` (label, draw) in order, and
    /// panics naming the first one that is not what the run asks for:
    /// a replay that drifts from the recording is a failed golden test.
    pub fn replaying(device: Device, draws: Vec<(String, Draw)>) -> Rng {
        // Not `..Rng::new()`: its pointers would be copied out of a value
        // whose drop frees them.
        let mut rng = Rng::new(device, 0);
        rng.replay = Some(Replay {
            draws,
            next: Mutex::new(0),
        });
        rng
    }

    /// The recorded draws not yet asked for (0 when a replay ran to its end).
    pub fn draws_left(&self) -> usize {
        self.replay.as_ref().map_or(0, |r| {
            r.draws.len() - *r.next.lock().unwrap_or_else(|e| e.into_inner())
        })
    }

    /// The next recorded draw, checked against what the run asks for.
    fn replayed(&self, asked: Asked, device: Device) -> Option<Tensor> {
        let r = self.replay.as_ref()?;
        let mut next = r.next.lock().unwrap_or_else(|e| e.into_inner());
        let i = *next;
        let Some((label, d)) = r.draws.get(i) else {
            panic!(
                "replay: the run asked for draw {i}, {asked:?}, past the {} recorded",
                r.draws.len()
            );
        };
        let fits = match (asked, d) {
            (Asked::Perm(n), Draw::Perm(v)) => v.len() as i64 == n,
            (
                Asked::Int(h, s),
                Draw::Int {
                    high,
                    shape,
                    values,
                },
            ) => h == *high && s == shape.as_slice() && values.iter().all(|v| (0..h).contains(v)),
            (Asked::Float(s), Draw::Float { shape, .. }) => s == shape.as_slice(),
            _ => false,
        };
        assert!(
            fits,
            "replay: draw {i} is `{label}`, recorded as {}, but the run asked for {asked:?}",
            d.summary()
        );
        *next += 1;
        let t = match d {
            Draw::Perm(v) => Tensor::from_slice(v),
            Draw::Int { shape, values, .. } => Tensor::from_slice(values).view(shape.as_slice()),
            Draw::Float { shape, values } => Tensor::from_slice(values).view(shape.as_slice()),
        };
        Some(t.to_device(device))
    }

    /// The device the run trains on.
    pub fn device(&self) -> Device {
        self.device.map_or(Device::Cpu, |(d, _)| d)
    }

    fn generator(&self, device: Device) -> *mut c_void {
        match self.device {
            Some((d, g)) if d == device => g,
            _ if device == Device::Cpu => self.cpu,
            _ => panic!("this run's generators are not on {device:?}"),
        }
    }

    /// A random permutation of 0..n.
    pub fn randperm(&self, n: i64, device: Device) -> Tensor {
        if let Some(t) = self.replayed(Asked::Perm(n), device) {
            return t;
        }
        let (cuda, index) = split(device);
        let g = self.generator(device);
        owned(unsafe { tricklab_randperm(g, n, cuda, index) }, "randperm")
    }

    /// Integers uniform in [0, high).
    pub fn randint(&self, high: i64, shape: &[i64], device: Device) -> Tensor {
        if let Some(t) = self.replayed(Asked::Int(high, shape), device) {
            return t;
        }
        let (cuda, index) = split(device);
        let g = self.generator(device);
        let ndim = shape.len() as c_int;
        owned(
            unsafe { tricklab_randint(g, high, shape.as_ptr(), ndim, cuda, index) },
            "randint",
        )
    }

    /// Floats uniform in [0, 1).
    pub fn rand(&self, shape: &[i64], device: Device) -> Tensor {
        if let Some(t) = self.replayed(Asked::Float(shape), device) {
            return t;
        }
        let (cuda, index) = split(device);
        let g = self.generator(device);
        let ndim = shape.len() as c_int;
        owned(
            unsafe { tricklab_rand(g, shape.as_ptr(), ndim, cuda, index) },
            "rand",
        )
    }
}

impl Drop for Rng {
    fn drop(&mut self) {
        // SAFETY: each pointer came from tricklab_generator_new, freed once.
        unsafe {
            tricklab_generator_free(self.cpu);
            if let Some((_, g)) = self.device {
                tricklab_generator_free(g);
            }
        }
    }
}

/// libtorch's default generators are one per process, and tch's inits (and
/// every draw not given a generator) take from them. Whoever draws from them
/// holds this lock, so a seeded scope's draws are never interleaved with
/// another thread's: a second CPU worker building its averaged net, a probe
/// beside a run, or tests in parallel (one such draw in the middle of a
/// run's init gave the graph test's eager and graph runs different nets).
/// Reentrant: a holder may build a run's net, which takes it again.
static DEFAULTS: parking_lot::ReentrantMutex<()> = parking_lot::const_reentrant_mutex(());

/// The default generators, held until the guard drops.
pub fn default_generators() -> parking_lot::ReentrantMutexGuard<'static, ()> {
    DEFAULTS.lock()
}

/// Runs `f` (a network's construction: tch's inits draw from the default
/// generators) with the CPU's and `device`'s default generators seeded with
/// `seed`, one holder at a time, so concurrent workers' inits never interleave.
pub fn with_seeded_inits<T>(device: Device, seed: u64, f: impl FnOnce() -> T) -> T {
    let _one_at_a_time = default_generators();
    let (cuda, index) = split(device);
    // SAFETY: reseeds libtorch's default generators under their own locks.
    let ok = unsafe { tricklab_seed_defaults(cuda, index, seed) };
    assert!(ok == 1, "seeding the default generators: {}", last_error());
    f()
}

/// CELU(x; α) = max(0, x) + min(0, α·(exp(x/α) − 1)), one kernel each way.
pub fn celu(x: &Tensor, alpha: f64) -> Tensor {
    // SAFETY: `x` outlives the call; a non-null result is a fresh heap tensor
    // that `from_ptr` takes ownership of.
    owned(unsafe { tricklab_celu(x.as_ptr(), alpha) }, "celu")
}

/// A copy of a CPU tensor in page-locked memory, so that a copy to a GPU
/// with `non_blocking` is asynchronous (needs a CUDA build of libtorch).
pub fn pin_memory(x: &Tensor) -> Tensor {
    // SAFETY: as `celu`.
    owned(unsafe { tricklab_pin_memory(x.as_ptr()) }, "pin_memory")
}

fn ptrs(ts: &[Tensor]) -> Vec<*const torch_sys::C_tensor> {
    ts.iter().map(Tensor::as_ptr).collect()
}

/// The tensors of one multi-tensor optimiser call: parameters of one device
/// and type, their gradients and their momentum buffers, in step.
pub struct TensorLists<'a> {
    pub params: &'a [Tensor],
    pub grads: &'a [Tensor],
    pub bufs: &'a [Tensor],
}

impl TensorLists<'_> {
    fn checked(
        &self,
    ) -> (
        Vec<*const torch_sys::C_tensor>,
        [Vec<*const torch_sys::C_tensor>; 2],
        c_int,
    ) {
        assert!(
            self.grads.len() == self.params.len() && self.bufs.len() == self.params.len(),
            "one gradient and one buffer per parameter"
        );
        (
            ptrs(self.params),
            [ptrs(self.grads), ptrs(self.bufs)],
            self.params.len() as c_int,
        )
    }
}

/// torch.optim.SGD's fused kernel (`at::_fused_sgd_`, CPU and CUDA): coupled
/// weight decay, momentum (the buffer starts as the gradient when `first`),
/// Nesterov; one kernel for the whole list instead of a chain per parameter.
pub fn fused_sgd(t: &TensorLists, wd: f64, momentum: f64, lr: f64, nesterov: bool, first: bool) {
    let (p, [g, b], n) = t.checked();
    // SAFETY: every pointer is a live tensor borrowed for the call.
    let ok = unsafe {
        tricklab_fused_sgd(
            p.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            n,
            wd,
            momentum,
            lr,
            c_int::from(nesterov),
            c_int::from(first),
        )
    };
    assert!(ok == 1, "fused SGD failed: {}", last_error());
}

/// Page's Nesterov update (lr inside the momentum buffer) with multi-tensor
/// (`_foreach_*`) kernels: dw = −lr(g + wd·w); v = μv + dw; w += dw + μv.
pub fn page_sgd(t: &TensorLists, wd: f64, momentum: f64, lr: f64) {
    let (p, [g, b], n) = t.checked();
    // SAFETY: every pointer is a live tensor borrowed for the call.
    let ok = unsafe { tricklab_page_sgd(p.as_ptr(), g.as_ptr(), b.as_ptr(), n, wd, momentum, lr) };
    assert!(ok == 1, "multi-tensor SGD failed: {}", last_error());
}

/// PyTorch's `zero_grad(set_to_none=True)`: the gradients become undefined
/// (no fill kernel; the next backward writes them afresh).
pub fn grads_to_none(ts: &[Tensor]) {
    let p = ptrs(ts);
    // SAFETY: resets each live tensor's grad slot; nothing else holds it mutably.
    unsafe { tricklab_grads_to_none(p.as_ptr(), p.len() as c_int) }
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

    /// A replaying generator gives back its draws in order, and the first
    /// call that does not fit the recording fails naming that draw.
    #[test]
    fn a_replay_gives_back_its_draws_and_names_the_first_that_does_not_fit() {
        let draws = vec![
            ("order".to_string(), Draw::Perm(vec![2, 0, 1])),
            (
                "crops".to_string(),
                Draw::Int {
                    high: 5,
                    shape: vec![2, 2],
                    values: vec![4, 0, 1, 3],
                },
            ),
            ("flip".to_string(), Draw::Perm(vec![1, 0])),
        ];
        let rng = Rng::replaying(Device::Cpu, draws);
        assert_eq!(
            Vec::<i64>::try_from(rng.randperm(3, Device::Cpu)).unwrap(),
            [2, 0, 1]
        );
        let c = rng.randint(5, &[2, 2], Device::Cpu);
        assert_eq!(c.size(), [2, 2]);
        assert_eq!(
            Vec::<i64>::try_from(c.flatten(0, -1)).unwrap(),
            [4, 0, 1, 3]
        );
        assert_eq!(rng.draws_left(), 1);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rng.randint(2, &[2], Device::Cpu)
        }))
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("draw 2 is `flip`, recorded as Perm(2)") && msg.contains("Int(2, [2])"),
            "{msg}"
        );
    }

    /// Page-locked memory needs a CUDA driver: without one the call fails
    /// with libtorch's own message (so the stream feeds call it only for a
    /// CUDA device); with one, the copy is pinned and holds the same values.
    #[test]
    fn pin_memory_pins_where_a_driver_is_and_names_the_driver_where_not() {
        let x = Tensor::arange(6, (Kind::Int64, Device::Cpu));
        if tch::Cuda::is_available() {
            let p = pin_memory(&x);
            assert!(p.is_pinned(Device::Cuda(0)));
            assert_eq!(Vec::<i64>::try_from(&p).unwrap(), [0, 1, 2, 3, 4, 5]);
        } else {
            let err = std::panic::catch_unwind(|| pin_memory(&x)).unwrap_err();
            let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                msg.starts_with("pin_memory failed") && msg.contains("driver"),
                "{msg}"
            );
        }
    }

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
        let _defaults = crate::native::default_generators();
        let a = Tensor::randn([8, 8], (Kind::Float, Device::Cpu));
        let inside = autocast(Device::Cpu, Some(AutocastKind::F16), || a.matmul(&a));
        assert_eq!(inside.kind(), Kind::Half);
        let bf = autocast(Device::Cpu, Some(AutocastKind::Bf16), || a.matmul(&a));
        assert_eq!(bf.kind(), Kind::BFloat16);
        assert_eq!(a.matmul(&a).kind(), Kind::Float, "left on after the region");
        let off = autocast(Device::Cpu, None, || a.matmul(&a));
        assert_eq!(off.kind(), Kind::Float);
    }

    #[test]
    fn a_runs_draws_depend_on_its_seed_alone() {
        let _defaults = crate::native::default_generators();
        let draws = |rng: &Rng| {
            let p = Vec::<i64>::try_from(rng.randperm(50, Device::Cpu)).unwrap();
            let i = Vec::<i64>::try_from(rng.randint(7, &[20], Device::Cpu)).unwrap();
            let u = Vec::<f32>::try_from(rng.rand(&[5], Device::Cpu)).unwrap();
            (p, i, u)
        };
        let alone = draws(&Rng::new(Device::Cpu, 3));
        // Interleaved with another run's draws and the default generator's.
        let (a, b) = (Rng::new(Device::Cpu, 3), Rng::new(Device::Cpu, 4));
        let p = a.randperm(50, Device::Cpu);
        let _ = (
            b.randperm(50, Device::Cpu),
            Tensor::rand([9], (Kind::Float, Device::Cpu)),
        );
        let i = a.randint(7, &[20], Device::Cpu);
        let _ = b.randint(7, &[20], Device::Cpu);
        let u = a.rand(&[5], Device::Cpu);
        let mixed = (
            Vec::<i64>::try_from(p).unwrap(),
            Vec::<i64>::try_from(i).unwrap(),
            Vec::<f32>::try_from(u).unwrap(),
        );
        assert_eq!(alone, mixed);
        assert_ne!(alone, draws(&Rng::new(Device::Cpu, 4)));
        assert!(alone.1.iter().all(|v| (0..7).contains(v)));
        assert!(alone.2.iter().all(|v| (0.0..1.0).contains(v)));
    }
}
