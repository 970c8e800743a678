//! Plain conv / linear layers with PyTorch-default init and the activations.
//!
//! Our own thin layers (instead of `tch::nn::Conv2D`) so that every tensor can
//! be routed into the right optimiser group and cast to half precision
//! independently of the BatchNorm state.

use tch::{Kind, Tensor, nn};

use super::Activation;

/// Bound of PyTorch's default `kaiming_uniform_(a=√5)` init: 1/√fan_in.
fn default_bound(fan_in: i64) -> f64 {
    1.0 / (fan_in.max(1) as f64).sqrt()
}

pub(crate) struct Conv {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub stride: i64,
    pub padding: i64,
}

impl Conv {
    /// `trainable = false` registers a frozen (non-gradient) variable that still
    /// lives in the VarStore, so averaging and checkpoints see it.
    #[allow(
        clippy::too_many_arguments,
        reason = "a conv layer is its shape: cin, cout, kernel, stride, padding, bias and whether it trains"
    )]
    pub fn new(
        p: &nn::Path,
        cin: i64,
        cout: i64,
        k: i64,
        stride: i64,
        padding: i64,
        bias: bool,
        trainable: bool,
    ) -> Conv {
        let bound = default_bound(cin * k * k);
        let init = nn::Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let weight = if trainable {
            p.var("weight", &[cout, cin, k, k], init)
        } else {
            let w = Tensor::zeros([cout, cin, k, k], (Kind::Float, p.device()));
            p.add("weight", w, false)
        };
        let bias = bias.then(|| {
            if trainable {
                p.var("bias", &[cout], init)
            } else {
                p.zeros_no_train("bias", &[cout])
            }
        });
        Conv {
            weight,
            bias,
            stride,
            padding,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.conv2d(
            &self.weight,
            self.bias.as_ref(),
            [self.stride, self.stride],
            [self.padding, self.padding],
            [1, 1],
            1,
        )
    }

    /// Identity ("dirac") init on the first min(C_in, C_out) output filters,
    /// the rest keep their random init (airbench's partial identity init).
    pub fn dirac_init(&self) {
        let size = self.weight.size();
        let (cout, cin, kh, kw) = (size[0], size[1], size[2], size[3]);
        let n = cout.min(cin);
        let delta = Tensor::zeros([n, cin, kh, kw], (self.weight.kind(), self.weight.device()));
        let eye = Tensor::eye_m(n, cin, (self.weight.kind(), self.weight.device()));
        tch::no_grad(|| {
            delta
                .narrow(2, kh / 2, 1)
                .narrow(3, kw / 2, 1)
                .copy_(&eye.view([n, cin, 1, 1]));
            self.weight.narrow(0, 0, n).copy_(&delta);
        });
    }

    /// hlb-CIFAR10's first-conv init: the random init plus the identity on the
    /// first min(C_in, C_out) filters, shifted and scaled back to the random
    /// init's mean and std (so the identity does not change the layer's scale).
    pub fn dirac_mixed_init(&self) {
        tch::no_grad(|| {
            let w0 = self.weight.detach().copy();
            self.dirac_init();
            let n = w0.size()[0].min(w0.size()[1]);
            let id = self.weight.narrow(0, 0, n).copy();
            let w = w0.copy();
            let _ = w.narrow(0, 0, n).g_add_(&id);
            let w = (&w - w.mean(None)) / w.std(true) * w0.std(true) + w0.mean(None);
            self.weight.shallow_clone().copy_(&w);
        });
    }
}

pub(crate) struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new(p: &nn::Path, cin: i64, cout: i64, bias: bool) -> Linear {
        let bound = default_bound(cin);
        let init = nn::Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let weight = p.var("weight", &[cout, cin], init);
        let bias = bias.then(|| p.var("bias", &[cout], init));
        Linear { weight, bias }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

impl Activation {
    pub fn apply(&self, x: &Tensor) -> Tensor {
        match *self {
            Activation::Relu => x.relu(),
            Activation::Celu { alpha } => crate::native::celu(x, alpha),
            Activation::Gelu => x.gelu("none"),
            Activation::Silu => x.silu(),
        }
    }
}

pub(crate) fn max_pool2(x: &Tensor) -> Tensor {
    x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)
}

/// Global max pool to (N, C): equal to Page's MaxPool(4) on 4×4 maps and to
/// airbench's MaxPool(3) on 3×3 maps, and still valid at other input sizes.
pub(crate) fn global_max(x: &Tensor) -> Tensor {
    x.amax([2, 3], false)
}
