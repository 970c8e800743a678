//! Factorial effects of two-level ablation designs with confidence
//! intervals: least squares on replicates, or Lenth's method when there are
//! none; and the pooled pure error of replicated runs.
//!
//! Coding: a trick is +1 when on and −1 when off; a configuration is the
//! bitmask of tricks on and a term is a [`Word`] (see [`crate::stats::design`]).
//! All intervals are two-sided at [`CONFIDENCE`].

use std::collections::BTreeMap;

use super::design::{Word, factors_of, letters, term_sign, word_label};
use super::{CONFIDENCE, Interval, t_multiplier};

/// One observed run: the configuration (bitmask of tricks on) and the
/// response. Replicates are several `Obs` with the same configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Obs {
    /// Bitmask of the tricks that were on.
    pub config: Word,
    /// Measured response (seconds to target, accuracy, …).
    pub y: f64,
}

/// Where the error estimate behind the intervals came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ErrorMethod {
    /// Residual mean square of the least-squares fit, on `df` degrees of
    /// freedom (replicates or terms left out of the model).
    Replicates {
        /// Residual degrees of freedom n_obs − n_params.
        df: usize,
    },
    /// Lenth's (1989) pseudo standard error for a saturated, unreplicated
    /// orthogonal design, with `df` = m/3 (m = number of effects).
    Lenth {
        /// Lenth's approximate degrees of freedom m/3.
        df: f64,
    },
}

/// Estimate of one term of a [`fit`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TermEffect {
    /// The term (bitmask of its factors).
    pub term: Word,
    /// The classical effect and its [`CONFIDENCE`] interval.
    pub effect: Interval,
    /// Standard error of the effect (Lenth's PSE for [`ErrorMethod::Lenth`]).
    pub se: f64,
}

/// Result of [`fit`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// Intercept: the mean response over the ±1-coded design centre.
    pub mean: f64,
    /// One entry per requested term, in the requested order.
    pub terms: Vec<TermEffect>,
    /// Source of the error estimate.
    pub method: ErrorMethod,
    /// Residual standard deviation σ̂ (None under Lenth's method, which
    /// estimates the effects' error directly).
    pub sigma: Option<f64>,
    /// Number of observations used.
    pub n_obs: usize,
}

/// "{0, 2}": a configuration as the indices of the tricks that are on.
pub(super) fn set_label(config: Word) -> String {
    let parts: Vec<String> = factors_of(config).iter().map(|i| i.to_string()).collect();
    format!("{{{}}}", parts.join(", "))
}

/// "A×B": a term in letters joined by "×".
fn term_label(term: Word) -> String {
    word_label(term, &[])
}

/// "a, b and c".
pub(super) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Largest `k` accepted by the estimators (configurations are `u32` masks
/// and exact Shapley enumerates 2^k subsets).
const MAX_K: usize = 16;

pub(super) fn check_k(k: usize) -> Result<(), String> {
    if k == 0 || k > MAX_K {
        return Err(format!(
            "{k} tricks is outside 1..={MAX_K}; ablate between 1 and {MAX_K} tricks at once"
        ));
    }
    Ok(())
}

pub(super) fn check_obs(obs: &[Obs], k: usize) -> Result<(), String> {
    check_k(k)?;
    if obs.is_empty() {
        return Err("no observations; run the design first".to_string());
    }
    let outside: Word = !((1u32 << k) - 1);
    for (i, o) in obs.iter().enumerate() {
        if o.config & outside != 0 {
            return Err(format!(
                "observation {i} has configuration {} but only tricks 0..{} exist; check the trick count",
                set_label(o.config),
                k - 1
            ));
        }
        if !o.y.is_finite() {
            return Err(format!(
                "observation {i} (configuration {}) has a non-finite value {}; drop or rerun that run",
                set_label(o.config),
                o.y
            ));
        }
    }
    Ok(())
}

fn check_terms(terms: &[Word], k: usize) -> Result<(), String> {
    let outside: Word = !((1u32 << k) - 1);
    for (i, &t) in terms.iter().enumerate() {
        if t == 0 {
            return Err(
                "term I (the mean) is always fitted; remove it from the term list".to_string(),
            );
        }
        if t & outside != 0 {
            return Err(format!(
                "term {} uses a trick beyond the {k} in the design; check the term list",
                letters(t)
            ));
        }
        if terms[..i].contains(&t) {
            return Err(format!(
                "term {} is listed twice; list each term once",
                term_label(t)
            ));
        }
    }
    Ok(())
}

/// Observations grouped by configuration, in configuration order.
pub(super) fn group(obs: &[Obs]) -> BTreeMap<Word, Vec<f64>> {
    let mut cells: BTreeMap<Word, Vec<f64>> = BTreeMap::new();
    for o in obs {
        cells.entry(o.config).or_default().push(o.y);
    }
    cells
}

/// Model row of a configuration: intercept then each term's ±1 sign.
fn model_row(config: Word, terms: &[Word]) -> Vec<f64> {
    std::iter::once(1.0)
        .chain(terms.iter().map(|&t| term_sign(config, t) as f64))
        .collect()
}

/// Cholesky factor L (row-major, lower triangular) of the symmetric n×n
/// matrix `a`, by the Cholesky–Banachiewicz recurrence (Golub & Van Loan,
/// *Matrix Computations*, 4th ed., §4.2). The pivot of column j is the
/// squared length of column j of X after projecting out columns 0..j, so a
/// pivot below `1e-9 · a_jj` means column j is (numerically) a combination of
/// the earlier ones: `Err(j)`.
fn cholesky(a: &[f64], n: usize) -> Result<Vec<f64>, usize> {
    let mut l = vec![0.0f64; n * n];
    for j in 0..n {
        let pivot = a[j * n + j] - (0..j).map(|m| l[j * n + m].powi(2)).sum::<f64>();
        if pivot <= 1e-9 * a[j * n + j].abs().max(f64::MIN_POSITIVE) {
            return Err(j);
        }
        let d = pivot.sqrt();
        l[j * n + j] = d;
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|m| l[i * n + m] * l[j * n + m]).sum::<f64>();
            l[i * n + j] = s / d;
        }
    }
    Ok(l)
}

/// Solve (L Lᵀ) x = b by forward then back substitution.
fn cholesky_solve(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut z = vec![0.0; n];
    for i in 0..n {
        let s = b[i] - (0..i).map(|m| l[i * n + m] * z[m]).sum::<f64>();
        z[i] = s / l[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s = z[i] - (i + 1..n).map(|m| l[m * n + i] * x[m]).sum::<f64>();
        x[i] = s / l[i * n + i];
    }
    x
}

/// Diagonal of (L Lᵀ)⁻¹.
fn inverse_diagonal(l: &[f64], n: usize) -> Vec<f64> {
    (0..n)
        .map(|j| {
            let mut e = vec![0.0; n];
            e[j] = 1.0;
            cholesky_solve(l, n, &e)[j]
        })
        .collect()
}

/// Leading `j`×`j` block of the row-major `n`×`n` matrix `a`.
fn leading_block(a: &[f64], n: usize, j: usize) -> Vec<f64> {
    (0..j)
        .flat_map(|r| a[r * n..r * n + j].iter().copied())
        .collect()
}

/// One-line explanation of a singular XᵀX whose column `j` (0 = intercept,
/// i = terms[i−1]) depends on the earlier ones. Regressing column j on the
/// earlier columns (Gram block solve) shows which terms it cannot be told
/// apart from; a single ±1 coefficient is a textbook alias I = ±(product).
fn singular_message(xtx: &[f64], n: usize, j: usize, terms: &[Word]) -> String {
    let t = terms[j - 1];
    let block = leading_block(xtx, n, j);
    let coef = match cholesky(&block, j) {
        Ok(l) => {
            let rhs: Vec<f64> = (0..j).map(|r| xtx[r * n + j]).collect();
            cholesky_solve(&l, j, &rhs)
        }
        Err(_) => vec![0.0; j],
    };
    let involved: Vec<usize> = (0..j).filter(|&i| coef[i].abs() > 1e-6).collect();
    let sign = |c: f64| if c < 0.0 { "-" } else { "" };
    match involved.as_slice() {
        [0] if (coef[0].abs() - 1.0).abs() < 1e-6 => format!(
            "{} is constant in these observations (I = {}{}); drop it or run the full factorial",
            term_label(t),
            sign(coef[0]),
            letters(t)
        ),
        [u] if *u > 0 && (coef[*u].abs() - 1.0).abs() < 1e-6 => {
            let other = terms[u - 1];
            format!(
                "{} and {} are aliased in this design (I = {}{}); drop one or run the full factorial",
                term_label(other),
                term_label(t),
                sign(coef[*u]),
                letters(other ^ t)
            )
        }
        _ => {
            let names: Vec<String> = involved
                .iter()
                .map(|&i| {
                    if i == 0 {
                        "the mean".to_string()
                    } else {
                        term_label(terms[i - 1])
                    }
                })
                .collect();
            format!(
                "{} cannot be separated from {} in these observations (a configuration is missing or the design is too small); drop one of them or run the missing configurations",
                term_label(t),
                if names.is_empty() {
                    "the other terms".to_string()
                } else {
                    and_list(&names)
                }
            )
        }
    }
}

/// Ordinary least squares of `obs` on ±1 coding with an intercept plus
/// `terms`, reporting each term's classical factorial EFFECT.
///
/// The effect is 2 × the regression coefficient: in a balanced two-level
/// design that is exactly (mean response where the term's sign is +1) −
/// (mean where it is −1) (Montgomery, *Design and Analysis of Experiments*,
/// 8th ed., §6.2: "the regression coefficient is one-half the effect
/// estimate", because x moves 2 units from −1 to +1). The design
/// may be unbalanced; the least-squares coefficient is then still unbiased
/// when the model holds.
///
/// Error estimate:
/// * residual d.f. > 0: σ̂² = RSS/df and Var(β̂) = σ̂²(XᵀX)⁻¹ (Montgomery,
///   Peck & Vining, *Introduction to Linear Regression Analysis*, 5th ed.,
///   §3.2 and §3.4), so se(effect) = 2·se(β̂); the interval uses Student t
///   on df.
/// * residual d.f. = 0 (saturated, unreplicated): Lenth's pseudo standard
///   error (Lenth 1989, "Quick and easy analysis of unreplicated
///   factorials", *Technometrics* 31:469–473, Sec. 2) on the effects:
///   s0 = 1.5·median|c|, PSE = 1.5·median{|c| : |c| < 2.5·s0}, and the
///   margin of error ME = t(0.975; d)·PSE with d = m/3. Lenth's method
///   assumes an orthogonal, balanced design (all effects equally precise);
///   otherwise this returns an error.
///
/// Errors (one line each): bad inputs, and terms that cannot be separated in
/// these observations (aliased, or a configuration missing).
pub fn fit(obs: &[Obs], k: usize, terms: &[Word]) -> Result<Fit, String> {
    check_obs(obs, k)?;
    check_terms(terms, k)?;
    let cells = group(obs);
    let p = terms.len() + 1;
    let mut xtx = vec![0.0; p * p];
    let mut xty = vec![0.0; p];
    // XᵀX and Xᵀy summed per configuration: every replicate of a
    // configuration has the same model row.
    for (&config, ys) in &cells {
        let x = model_row(config, terms);
        let (n_c, sum) = (ys.len() as f64, ys.iter().sum::<f64>());
        for i in 0..p {
            xty[i] += x[i] * sum;
            for j in 0..p {
                xtx[i * p + j] += n_c * x[i] * x[j];
            }
        }
    }
    let l = cholesky(&xtx, p).map_err(|j| singular_message(&xtx, p, j, terms))?;
    let beta = cholesky_solve(&l, p, &xty);
    // Full rank means p ≤ number of distinct configurations ≤ n, so this
    // only fails if the rank test was fooled by rounding.
    let df = obs.len().checked_sub(p).ok_or_else(|| {
        format!(
            "{} observations cannot estimate {p} parameters; fit fewer terms or run more configurations",
            obs.len()
        )
    })?;
    if df > 0 {
        Ok(replicate_fit(obs, terms, &l, &beta, df))
    } else {
        lenth_fit(obs.len(), terms, &xtx, &beta)
    }
}

/// Intervals from the residual mean square (see [`fit`]).
fn replicate_fit(obs: &[Obs], terms: &[Word], l: &[f64], beta: &[f64], df: usize) -> Fit {
    let p = beta.len();
    // RSS from the residuals themselves (not yᵀy − β̂ᵀXᵀy, which cancels badly).
    let rss: f64 = obs
        .iter()
        .map(|o| {
            let fitted: f64 = model_row(o.config, terms)
                .iter()
                .zip(beta)
                .map(|(x, b)| x * b)
                .sum();
            (o.y - fitted).powi(2)
        })
        .sum();
    let sigma2 = rss / df as f64;
    let inv_diag = inverse_diagonal(l, p);
    let t = t_multiplier(CONFIDENCE, df as f64);
    let terms = terms
        .iter()
        .enumerate()
        .map(|(i, &term)| {
            let se = 2.0 * (sigma2 * inv_diag[i + 1]).sqrt();
            TermEffect {
                term,
                effect: Interval::symmetric(2.0 * beta[i + 1], t * se),
                se,
            }
        })
        .collect();
    Fit {
        mean: beta[0],
        terms,
        method: ErrorMethod::Replicates { df },
        sigma: Some(sigma2.sqrt()),
        n_obs: obs.len(),
    }
}

/// Median of a non-empty slice (mean of the two middle values when even).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Lenth's (1989, Sec. 2) pseudo standard error of a set of effects:
/// s0 = 1.5·median|c|, PSE = 1.5·median{|c| : |c| < 2.5·s0}. `None` when no
/// effect is below the cut-off (more than half the effects exactly zero).
pub fn lenth_pse(effects: &[f64]) -> Option<f64> {
    if effects.is_empty() {
        return None;
    }
    let abs: Vec<f64> = effects.iter().map(|c| c.abs()).collect();
    let s0 = 1.5 * median(&abs);
    let trimmed: Vec<f64> = abs.iter().copied().filter(|&a| a < 2.5 * s0).collect();
    if trimmed.is_empty() {
        None
    } else {
        Some(1.5 * median(&trimmed))
    }
}

/// Lenth's intervals for a saturated design (see [`fit`]).
fn lenth_fit(n: usize, terms: &[Word], xtx: &[f64], beta: &[f64]) -> Result<Fit, String> {
    let p = beta.len();
    // Orthogonal and balanced ⇔ XᵀX = n·I: every column sums to zero and
    // every pair is orthogonal, so all effects have the same variance 4σ²/n.
    let orthogonal = (0..p).all(|i| {
        (0..p).all(|j| {
            let target = if i == j { n as f64 } else { 0.0 };
            (xtx[i * p + j] - target).abs() < 1e-9 * n as f64
        })
    });
    if !orthogonal {
        return Err("no replicates to estimate error and the design is not orthogonal and balanced, so Lenth's method does not apply; add replicates (seeds) or fit fewer terms".to_string());
    }
    let m = terms.len();
    if m < 3 {
        return Err(format!(
            "no replicates to estimate error and only {m} effects to pool for Lenth's method (needs 3 or more); add replicates (seeds)"
        ));
    }
    let effects: Vec<f64> = beta[1..].iter().map(|b| 2.0 * b).collect();
    let pse = match lenth_pse(&effects) {
        Some(pse) if pse > 0.0 => pse,
        _ => return Err("no replicates and Lenth's pseudo standard error is zero (more than half the effects are exactly 0); add replicates (seeds)".to_string()),
    };
    let df = m as f64 / 3.0;
    let margin = t_multiplier(CONFIDENCE, df) * pse;
    let terms = terms
        .iter()
        .zip(&effects)
        .map(|(&term, &e)| TermEffect {
            term,
            effect: Interval::symmetric(e, margin),
            se: pse,
        })
        .collect();
    Ok(Fit {
        mean: beta[0],
        terms,
        method: ErrorMethod::Lenth { df },
        sigma: None,
        n_obs: n,
    })
}

/// The pooled within-configuration ("pure error") standard deviation of
/// replicated observations, σ̂² = Σ_c Σ_i (y_ci − ȳ_c)² / (n − C) over the C
/// configurations observed (Montgomery, *Design and Analysis of
/// Experiments*, §6.2: the error mean square of a replicated 2^k), with its
/// n − C d.f. `None` when no configuration has two observations.
pub fn pure_error(obs: &[Obs]) -> Option<(f64, usize)> {
    let cells = group(obs);
    let df = obs.len() - cells.len();
    if df == 0 {
        return None;
    }
    let ss: f64 = cells
        .values()
        .map(|ys| {
            let m = ys.iter().sum::<f64>() / ys.len() as f64;
            ys.iter().map(|y| (y - m).powi(2)).sum::<f64>()
        })
        .sum();
    Some(((ss / df as f64).sqrt(), df))
}
