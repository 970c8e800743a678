//! Frozen PCA patch-whitening convolution (Page B7, airbench T18).

use anyhow::{Context, Result, bail};
use tch::{Kind, Tensor, nn};

use super::Whitening;
use super::layers::Conv;

/// Images per chunk when accumulating the patch second moment: keeps the
/// unfolded patch matrix at a few tens of MB whatever `images` is.
const CHUNK: i64 = 500;

pub(crate) struct Whiten {
    pub conv: Conv,
    kernel: i64,
    eps: f64,
    images: usize,
    negate: bool,
    /// Page divides the uncentred second moment by n−1, airbench by n.
    unbiased: bool,
    /// hlb subtracts the mean patch (a covariance, ÷(n−1)).
    centred: bool,
    svd: bool,
}

impl Whiten {
    /// `None` for `Whitening::Off`.
    pub fn new(p: &nn::Path, w: &Whitening) -> Option<Whiten> {
        match *w {
            Whitening::Off => None,
            Whitening::Page { eps, images } => Some(Whiten {
                conv: Conv::new(p, 3, 27, 3, 1, 1, false, false),
                kernel: 3,
                eps,
                images,
                negate: false,
                unbiased: true,
                centred: false,
                svd: false,
            }),
            Whitening::Airbench {
                eps,
                images,
                negate,
                bias,
                centred,
                bias_uniform,
                svd,
            } => {
                let cout = if negate { 24 } else { 12 };
                let conv = Conv::new(p, 3, cout, 2, 1, 0, false, false);
                // airbench94 zero-initialises the bias, airbench94_muon keeps
                // nn.Conv2d's default; it is trained for the first epochs only
                // (see `Net::set_whiten_bias_trainable`).
                let bound = 1.0 / ((3 * 2 * 2) as f64).sqrt();
                let conv = Conv {
                    bias: bias.then(|| {
                        if bias_uniform {
                            p.var(
                                "bias",
                                &[cout],
                                tch::nn::Init::Uniform {
                                    lo: -bound,
                                    up: bound,
                                },
                            )
                        } else {
                            p.zeros("bias", &[cout])
                        }
                    }),
                    ..conv
                };
                Some(Whiten {
                    conv,
                    kernel: 2,
                    eps,
                    images,
                    negate,
                    unbiased: centred,
                    centred,
                    svd,
                })
            }
        }
    }

    pub fn out_channels(&self) -> i64 {
        self.conv.weight.size()[0]
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.conv.forward(x)
    }

    /// Computes the eigenbasis (by eigh, or SVD) of the patch second moment (or covariance, when
    /// centred) over the first `images` images and copies eigvecs/√(λ+eps) into
    /// the frozen conv.
    pub fn init(&self, images: &Tensor) -> Result<()> {
        let size = images.size();
        if size.len() != 4 || size[1] != 3 {
            bail!("whitening needs float NCHW images with 3 channels, got shape {size:?}");
        }
        let k = self.kernel;
        if size[2] < k || size[3] < k {
            bail!("whitening needs images of at least {k}×{k} pixels, got shape {size:?}");
        }
        let n = (self.images as i64).min(size[0]);
        if n == 0 {
            bail!("whitening needs at least one image");
        }
        let d = 3 * k * k;
        let dev = images.device();
        let (eigvals, eigvecs) = tch::no_grad(|| -> Result<(Tensor, Tensor)> {
            let mut moment = Tensor::zeros([d, d], (Kind::Double, dev));
            let mut sum = Tensor::zeros([d], (Kind::Double, dev));
            let mut rows: i64 = 0;
            let mut start = 0;
            while start < n {
                let len = CHUNK.min(n - start);
                let x = images.narrow(0, start, len).to_kind(Kind::Double);
                // (N, 3, H', W', k, k) → (N·H'·W', 3·k·k), the conv weight's layout.
                let patches = x
                    .unfold(2, k, 1)
                    .unfold(3, k, 1)
                    .permute([0, 2, 3, 1, 4, 5])
                    .reshape([-1, d]);
                rows += patches.size()[0];
                moment += patches.tr().matmul(&patches);
                sum += patches.sum_dim_intlist(0, false, Kind::Double);
                start += len;
            }
            let denom = if self.unbiased {
                (rows - 1).max(1)
            } else {
                rows
            } as f64;
            if self.centred {
                // Σ(x−μ)(x−μ)ᵀ = Σxxᵀ − n·μμᵀ, with μ = Σx / n.
                let mean = &sum / rows as f64;
                moment -= mean.outer(&mean) * rows as f64;
            }
            let moment = moment / denom;
            if self.svd {
                // U·diag(S)·Vᵀ of a symmetric PSD matrix: S are its
                // eigenvalues, largest first, and U its eigenvectors.
                let (u, s, _) = moment
                    .f_svd(true, true)
                    .context("SVD of the patch covariance failed")?;
                return Ok((s, u));
            }
            let (vals, vecs) = moment
                .f_linalg_eigh("L")
                .context("eigendecomposition of the patch covariance failed")?;
            // Largest eigenvalue first, as both references order their filters.
            Ok((vals.flip([0]), vecs.flip([1])))
        })?;
        let filters = eigvecs.tr() / (eigvals + self.eps).sqrt().unsqueeze(1);
        let filters = filters.reshape([d, 3, k, k]);
        let filters = if self.negate {
            Tensor::cat(&[&filters, &filters.neg()], 0)
        } else {
            filters
        };
        let weight = &self.conv.weight;
        if filters.size() != weight.size() {
            bail!(
                "whitening filters {:?} do not fit the conv {:?}",
                filters.size(),
                weight.size()
            );
        }
        tch::no_grad(|| {
            weight
                .shallow_clone()
                .copy_(&filters.to_kind(weight.kind()))
        });
        Ok(())
    }
}
