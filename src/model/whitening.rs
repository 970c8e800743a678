//! Frozen PCA patch-whitening convolution (Page B7, airbench T18).
//!
//! Each style computes its basis the way its reference does, in float32 with
//! the same operations in the same order: an eigendecomposition's signs are
//! whatever LAPACK returns for that exact matrix, and hlb averages
//! eigenvectors over chunks, so a basis computed any other way (in f64, or
//! accumulated in pieces) is a different init. tests/golden pins each one.

use anyhow::{Context, Result, bail};
use tch::{Kind, Tensor, nn};

use super::layers::Conv;
use super::{Basis, Whitening};

#[derive(Clone, Copy, Debug)]
enum Style {
    /// new_dawn.py `eigens`: X/√(n−1), Σ = XᵀX, symeig (upper), largest first.
    Page,
    Airbench(Basis),
}

pub(crate) struct Whiten {
    pub conv: Conv,
    kernel: i64,
    eps: f64,
    negate: bool,
    style: Style,
}

impl Whiten {
    /// `None` for `Whitening::Off`.
    pub fn new(p: &nn::Path, w: &Whitening) -> Option<Whiten> {
        match *w {
            Whitening::Off => None,
            Whitening::Page { eps, .. } => Some(Whiten {
                conv: Conv::new(p, 3, 27, 3, 1, 1, false, false),
                kernel: 3,
                eps,
                negate: false,
                style: Style::Page,
            }),
            Whitening::Airbench {
                eps,
                negate,
                bias,
                bias_uniform,
                basis,
                ..
            } => {
                let cout = if negate { 24 } else { 12 };
                let conv = Conv::new(p, 3, cout, 2, 1, 0, false, false);
                // airbench94 zero-initialises the bias, airbench94_muon keeps
                // nn.Conv2d's default; it is trained for the first steps only
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
                    negate,
                    style: Style::Airbench(basis),
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

    /// Fits the frozen conv to `images` (normalised NCHW, unaugmented,
    /// unpadded, in the order the style takes them): eigenvectors/√(λ + eps),
    /// with their negations when `negate`.
    pub fn init(&self, images: &Tensor) -> Result<()> {
        let size = images.size();
        if size.len() != 4 || size[1] != 3 {
            bail!("whitening needs float NCHW images with 3 channels, got shape {size:?}");
        }
        let k = self.kernel;
        if size[2] < k || size[3] < k {
            bail!("whitening needs images of at least {k}×{k} pixels, got shape {size:?}");
        }
        if size[0] < 2 {
            bail!("whitening needs at least two images, got {}", size[0]);
        }
        let filters = tch::no_grad(|| filters(images, k, self.eps, self.style))?;
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

/// The references' `get_patches`: (N·W'·H', C·k·k) rows in float32.
fn patches(x: &Tensor, k: i64) -> Tensor {
    let c = x.size()[1];
    x.unfold(2, k, 1)
        .unfold(3, k, 1)
        .transpose(1, 3)
        .reshape([-1, c * k * k])
        .to_kind(Kind::Float)
}

/// (eigenvalues, eigenvectors as rows), largest first, of a symmetric matrix.
fn eigh_desc(m: &Tensor) -> Result<(Tensor, Tensor)> {
    let (vals, vecs) = m
        .f_linalg_eigh("U")
        .context("eigendecomposition of the patch covariance failed")?;
    Ok((vals.flip([0]), vecs.tr().flip([0])))
}

/// The frozen conv's weight that `w` fits to `images` (negations included),
/// or `None` for `Whitening::Off`: what `Whiten::init` copies in.
pub fn whitening_filters(w: &Whitening, images: &Tensor) -> Result<Option<Tensor>> {
    let vs = nn::VarStore::new(images.device());
    let Some(whiten) = Whiten::new(&vs.root(), w) else {
        return Ok(None);
    };
    whiten.init(images)?;
    Ok(Some(whiten.conv.weight.detach().copy()))
}

/// The whitening filters, (C·k·k, C, k, k), before any negation.
fn filters(images: &Tensor, k: i64, eps: f64, style: Style) -> Result<Tensor> {
    let d = 3 * k * k;
    let (vals, rows) = match style {
        Style::Page => {
            let p = patches(images, k);
            let x = &p / ((p.size()[0] - 1) as f64).sqrt();
            eigh_desc(&x.tr().matmul(&x))?
        }
        Style::Airbench(Basis::HlbChunks { chunk }) => {
            let (mut vals, mut rows) = (Vec::new(), Vec::new());
            for part in images.split(chunk.max(2) as i64, 0) {
                // torch.cov over variables in rows: centred, ÷(n−1).
                let cov = patches(&part, k)
                    .tr()
                    .cov(1, None::<Tensor>, None::<Tensor>);
                let (v, r) = eigh_desc(&cov)?;
                vals.push(v);
                rows.push(r);
            }
            (
                Tensor::stack(&vals, 0).mean_dim(0, false, Kind::Float),
                Tensor::stack(&rows, 0).mean_dim(0, false, Kind::Float),
            )
        }
        Style::Airbench(basis) => {
            let p = patches(images, k);
            let moment = p.tr().matmul(&p) / p.size()[0] as f64;
            match basis {
                Basis::Svd => {
                    let (u, s, _) = moment
                        .f_svd(true, true)
                        .context("SVD of the patch covariance failed")?;
                    (s, u.tr())
                }
                Basis::EighAscending => {
                    let (vals, vecs) = moment
                        .f_linalg_eigh("U")
                        .context("eigendecomposition of the patch covariance failed")?;
                    (vals, vecs.tr())
                }
                _ => eigh_desc(&moment)?,
            }
        }
    };
    Ok((rows / (vals + eps).sqrt().unsqueeze(1)).reshape([d, 3, k, k]))
}
