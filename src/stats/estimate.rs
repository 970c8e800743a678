//! Estimation for two-level ablation designs: factorial effects with
//! confidence intervals (least squares, or Lenth's method when there are no
//! replicates), Shapley credit per trick (exact and permutation-sampled),
//! power and sample size for seeds, and a sequential decision rule.
//!
//! Coding: a trick is +1 when on and −1 when off; a configuration is the
//! bitmask of tricks on and a term is a [`Word`] (see [`crate::stats::design`]).
//! All intervals are two-sided at [`CONFIDENCE`].

use std::collections::{BTreeMap, HashMap};
use std::f64::consts::{FRAC_2_PI, LN_2, PI};

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
use statrs::function::beta::beta_reg;
use statrs::function::gamma::ln_gamma;

use crate::stats::design::{Word, factors_of, letters, term_sign, word_label};

/// Confidence level of every interval in this module.
pub const CONFIDENCE: f64 = 0.95;

/// A point estimate with a two-sided interval. `lo`/`hi` are ±∞ when the
/// data carry no estimate of error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Point estimate.
    pub estimate: f64,
    /// Lower end (−∞ when unknown).
    pub lo: f64,
    /// Upper end (+∞ when unknown).
    pub hi: f64,
}

impl Interval {
    /// `estimate ± half_width`.
    pub fn symmetric(estimate: f64, half_width: f64) -> Self {
        Interval {
            estimate,
            lo: estimate - half_width,
            hi: estimate + half_width,
        }
    }

    /// An estimate with no error estimate: (−∞, +∞).
    pub fn unbounded(estimate: f64) -> Self {
        Interval {
            estimate,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
        }
    }

    /// Whether `x` lies in the closed interval.
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

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

/// Two-sided Student t quantile: the `p` quantile on `df` degrees of freedom.
fn t_quantile(p: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

/// Multiplier for a two-sided interval of level `level` on `df` d.f.
fn t_multiplier(level: f64, df: f64) -> f64 {
    t_quantile(0.5 + level / 2.0, df)
}

/// Standard normal CDF.
fn std_normal_cdf(x: f64) -> f64 {
    Normal::standard().cdf(x)
}

/// "{0, 2}": a configuration as the indices of the tricks that are on.
fn set_label(config: Word) -> String {
    let parts: Vec<String> = factors_of(config).iter().map(|i| i.to_string()).collect();
    format!("{{{}}}", parts.join(", "))
}

/// "A×B": a term in letters joined by "×".
fn term_label(term: Word) -> String {
    word_label(term, &[])
}

/// "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Largest `k` accepted by the estimators (configurations are `u32` masks
/// and exact Shapley enumerates 2^k subsets).
const MAX_K: usize = 16;

fn check_k(k: usize) -> Result<(), String> {
    if k == 0 || k > MAX_K {
        return Err(format!(
            "{k} tricks is outside 1..={MAX_K}; ablate between 1 and {MAX_K} tricks at once"
        ));
    }
    Ok(())
}

fn check_obs(obs: &[Obs], k: usize) -> Result<(), String> {
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
fn group(obs: &[Obs]) -> BTreeMap<Word, Vec<f64>> {
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

/// Exact Shapley values with their error, from [`shapley_exact`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShapleyValues {
    /// φ_i per trick with its [`CONFIDENCE`] interval (unbounded when
    /// `df` = 0).
    pub values: Vec<Interval>,
    /// Degrees of freedom of the pooled within-configuration variance
    /// (n_obs − 2^k).
    pub df: usize,
    /// Why the intervals are unbounded, when they are.
    pub note: Option<String>,
}

/// Shapley weight |S|!(k−|S|−1)!/k! = 1 / (k · C(k−1, |S|)).
fn shapley_weight(k: usize, s: usize) -> f64 {
    let choose = (0..s).fold(1.0, |acc, i| acc * (k - 1 - i) as f64 / (i + 1) as f64);
    1.0 / (k as f64 * choose)
}

/// Exact Shapley value of each trick from a full factorial.
///
/// The value of a set S of tricks is v(S) = mean response of the runs with
/// exactly S on, and φ_i = Σ_{S ⊆ N∖{i}} |S|!(k−|S|−1)!/k! · (v(S∪{i}) − v(S))
/// (Shapley 1953, "A value for n-person games", Contributions to the Theory
/// of Games II, Annals of Mathematics Studies 28:307–317). The φ_i sum to
/// v(N) − v(∅) (efficiency).
///
/// φ_i = Σ_S a_S v(S) is linear in the cell means, so with σ² the pooled
/// within-configuration variance (df = n − 2^k), Var(φ̂_i) = σ²·Σ_S a_S²/n_S
/// and the interval uses Student t on df. Without replicates (df = 0) the
/// intervals are unbounded and `note` says so.
///
/// Errors: a configuration never observed (named by its trick indices).
pub fn shapley_exact(obs: &[Obs], k: usize) -> Result<ShapleyValues, String> {
    check_obs(obs, k)?;
    let cells = group(obs);
    let n_configs = 1usize << k;
    if let Some(missing) = (0..n_configs as Word).find(|c| !cells.contains_key(c)) {
        return Err(format!(
            "configuration {} was never observed; exact Shapley values need all {n_configs} configurations of {k} tricks (run the full factorial)",
            set_label(missing)
        ));
    }
    let means: Vec<f64> = cells
        .values()
        .map(|ys| ys.iter().sum::<f64>() / ys.len() as f64)
        .collect();
    let counts: Vec<f64> = cells.values().map(|ys| ys.len() as f64).collect();
    let df = obs.len() - n_configs;
    let within_ss: f64 = cells
        .values()
        .zip(&means)
        .map(|(ys, m)| ys.iter().map(|y| (y - m).powi(2)).sum::<f64>())
        .sum();
    let weights: Vec<f64> = (0..k).map(|s| shapley_weight(k, s)).collect();
    let t = if df > 0 {
        t_multiplier(CONFIDENCE, df as f64)
    } else {
        f64::NAN
    };
    let values = (0..k)
        .map(|i| {
            let bit = 1u32 << i;
            let (mut phi, mut sum_sq) = (0.0, 0.0);
            for c in 0..n_configs {
                // a_S: +w(|S|−1) where i ∈ S (as S∪{i}), −w(|S|) where i ∉ S.
                let s = c as Word;
                let a = if s & bit != 0 {
                    weights[(s.count_ones() - 1) as usize]
                } else {
                    -weights[s.count_ones() as usize]
                };
                phi += a * means[c];
                sum_sq += a * a / counts[c];
            }
            if df > 0 {
                let se = (within_ss / df as f64 * sum_sq).sqrt();
                Interval::symmetric(phi, t * se)
            } else {
                Interval::unbounded(phi)
            }
        })
        .collect();
    let note = (df == 0).then(|| {
        "no configuration was replicated, so there is no error estimate; run 2 or more seeds per configuration for intervals".to_string()
    });
    Ok(ShapleyValues { values, df, note })
}

/// Check that every order is a permutation of 0..n with n = the first's length.
fn check_orders(orders: &[Vec<usize>]) -> Result<usize, String> {
    let Some(first) = orders.first() else {
        return Err("no orders given; sample some with design::sample_orders".to_string());
    };
    let n = first.len();
    if n == 0 || n > 32 {
        return Err(format!(
            "orders have {n} tricks; sampled Shapley values need 1 to 32 tricks"
        ));
    }
    for (j, o) in orders.iter().enumerate() {
        let mut seen = vec![false; n];
        let ok = o.len() == n
            && o.iter()
                .all(|&i| i < n && !std::mem::replace(&mut seen[i], true));
        if !ok {
            return Err(format!(
                "order {j} {o:?} is not a permutation of 0..{n}; every order must list each trick once"
            ));
        }
    }
    Ok(n)
}

/// Permutation-sampled Shapley values (Castro, Gómez & Tejada 2009,
/// "Polynomial calculation of the Shapley value based on sampling",
/// Computers & Operations Research 36:1726–1730, Sec. 3): for each order,
/// trick i is credited v(prefix ∪ {i}) − v(prefix), where prefix is the set
/// of tricks before i; φ̂_i is the mean over the m orders. The interval is
/// φ̂_i ± t(0.975; m−1)·s_i/√m over the orders (unbounded for m = 1).
///
/// Each order's credits telescope to v(N) − v(∅), so the φ̂_i sum to it
/// exactly. The interval covers only the sampling of orders: measurement
/// noise in `v` is not in it (use replicated means for `v` and
/// [`shapley_exact`] when that matters).
///
/// `v` returns the value of a configuration (bitmask of tricks on), `None`
/// when it was not run; each configuration is asked once.
pub fn shapley_sampled(
    orders: &[Vec<usize>],
    v: impl Fn(Word) -> Option<f64>,
) -> Result<Vec<Interval>, String> {
    let n = check_orders(orders)?;
    let mut cache: HashMap<Word, f64> = HashMap::new();
    let mut value = |c: Word| -> Result<f64, String> {
        if let Some(&x) = cache.get(&c) {
            return Ok(x);
        }
        match v(c) {
            Some(x) if x.is_finite() => {
                cache.insert(c, x);
                Ok(x)
            }
            Some(x) => Err(format!(
                "configuration {} has the non-finite value {x}; rerun it",
                set_label(c)
            )),
            None => Err(format!(
                "configuration {} has no value; run it (design::order_configs lists every configuration the orders need)",
                set_label(c)
            )),
        }
    };
    let mut credits = vec![Vec::with_capacity(orders.len()); n];
    for o in orders {
        let mut prefix: Word = 0;
        let mut before = value(prefix)?;
        for &i in o {
            prefix |= 1 << i;
            let after = value(prefix)?;
            credits[i].push(after - before);
            before = after;
        }
    }
    let m = orders.len();
    let t = if m > 1 {
        t_multiplier(CONFIDENCE, (m - 1) as f64)
    } else {
        f64::NAN
    };
    Ok(credits
        .iter()
        .map(|c| {
            let mean = c.iter().sum::<f64>() / m as f64;
            if m < 2 {
                return Interval::unbounded(mean);
            }
            let var = c.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (m - 1) as f64;
            Interval::symmetric(mean, t * (var / m as f64).sqrt())
        })
        .collect())
}

/// Convergence tolerance and iteration cap of AS 243 (Lenth 1989 uses
/// errmax = 1e-12, itrmax = 1000).
const NCT_ERRMAX: f64 = 1e-12;
const NCT_ITRMAX: usize = 1000;

/// CDF of the noncentral t distribution, P(T ≤ t) for T with `df` degrees
/// of freedom and noncentrality `ncp`.
///
/// Lenth (1989), "Algorithm AS 243: Cumulative distribution function of the
/// non-central t distribution", Applied Statistics 38:185–189: for t ≥ 0,
/// P(T ≤ t) = Φ(−δ) + ½ Σ_j [P_j I_x(j+½, ν/2) + Q_j I_x(j+1, ν/2)] with
/// x = t²/(t²+ν), Poisson-type weights P_j = e^{−δ²/2}(δ²/2)^j/j! and
/// Q_j = δ e^{−δ²/2}(δ²/2)^j/(√2 Γ(j+3/2)); the incomplete beta ratios are
/// updated by their recurrences and the series stops when the remaining
/// Poisson mass bounds the error below 1e-12. Negative t uses
/// P(T ≤ t; δ) = 1 − P(T ≤ −t; −δ). As in R's `pnt` (which implements the
/// same algorithm), (1−x)^{ν/2} is computed as (ν/(t²+ν))^{ν/2} to keep
/// accuracy when t² ≪ ν, and where e^{−δ²/2} would underflow or ν is huge
/// the normal approximation of Abramowitz & Stegun (1964) Eq. 26.7.10 is
/// used.
pub fn noncentral_t_cdf(t: f64, df: f64, ncp: f64) -> f64 {
    if t.is_nan() || ncp.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 1.0 } else { 0.0 };
    }
    let (tt, del, negdel) = if t >= 0.0 {
        (t, ncp, false)
    } else {
        (-t, -ncp, true)
    };
    let lower = if df > 4e5 || del * del > 2.0 * LN_2 * 1021.0 {
        // A&S 26.7.10: T(1 − 1/(4ν)) − δ over √(1 + T²/(2ν)) is ≈ N(0, 1).
        let s = 1.0 / (4.0 * df);
        std_normal_cdf((tt * (1.0 - s) - del) / (1.0 + tt * tt * 2.0 * s).sqrt())
    } else {
        as243_series(tt, df, del) + std_normal_cdf(-del)
    };
    let lower = lower.clamp(0.0, 1.0);
    if negdel { 1.0 - lower } else { lower }
}

/// The series part of AS 243 for t ≥ 0 (everything but Φ(−δ)).
fn as243_series(t: f64, df: f64, del: f64) -> f64 {
    let x = t * t / (t * t + df);
    if x <= 0.0 {
        return 0.0;
    }
    let lambda = del * del;
    let mut p = 0.5 * (-0.5 * lambda).exp();
    let mut q = (FRAC_2_PI).sqrt() * p * del;
    // Remaining Poisson mass ½(1 − e^{−λ/2}); expm1 keeps it accurate for small λ.
    let mut s = -0.5 * (-0.5 * lambda).exp_m1();
    let mut a = 0.5;
    let b = 0.5 * df;
    let rxb = (df / (t * t + df)).powf(b);
    let albeta = 0.5 * PI.ln() + ln_gamma(b) - ln_gamma(0.5 + b);
    let mut xodd = beta_reg(a, b, x);
    let mut godd = 2.0 * rxb * (a * x.ln() - albeta).exp();
    let bx = b * x;
    let mut xeven = if bx < f64::EPSILON { bx } else { 1.0 - rxb };
    let mut geven = bx * rxb;
    let mut tnc = p * xodd + q * xeven;
    for it in 1..=NCT_ITRMAX {
        a += 1.0;
        xodd -= godd;
        xeven -= geven;
        godd *= x * (a + b - 1.0) / a;
        geven *= x * (a + b - 0.5) / (a + 0.5);
        p *= lambda / (2 * it) as f64;
        q *= lambda / (2 * it + 1) as f64;
        tnc += p * xodd + q * xeven;
        s -= p;
        // All Poisson mass used (up to rounding): nothing left to add.
        if s <= 0.0 && it > 1 {
            break;
        }
        let errbd = 2.0 * s * (xodd - godd);
        if errbd.abs() < NCT_ERRMAX {
            break;
        }
    }
    tnc
}

/// Power of a two-sided level-`alpha` t test on `df` degrees of freedom
/// when the statistic is noncentral t with noncentrality `ncp`:
/// P(T > t_{1−α/2}) + P(T < −t_{1−α/2}). (R's `power.t.test` keeps only the
/// first term by default; the second is below 1e-6 whenever power matters.)
pub fn power_t(df: f64, ncp: f64, alpha: f64) -> f64 {
    if !(alpha > 0.0 && alpha < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let crit = t_quantile(1.0 - alpha / 2.0, df);
    (1.0 - noncentral_t_cdf(crit, df, ncp)) + noncentral_t_cdf(-crit, df, ncp)
}

/// Power of the two-sided two-sample t test with `n_per_side` seeds per arm,
/// true difference `delta`, common standard deviation `sd`: df = 2n − 2,
/// ncp = δ/(sd·√(2/n)), the standard noncentral-t power computation (as in
/// R's `stats::power.t.test`). 0 when n < 2 (no test possible); NaN for
/// sd ≤ 0 or alpha outside (0, 1).
pub fn power_two_sample(n_per_side: usize, delta: f64, sd: f64, alpha: f64) -> f64 {
    if sd.is_nan() || sd <= 0.0 {
        return f64::NAN;
    }
    if n_per_side < 2 {
        return 0.0;
    }
    let n = n_per_side as f64;
    power_t(2.0 * n - 2.0, delta / (sd * (2.0 / n).sqrt()), alpha)
}

/// Power of the two-sided paired t test with `n` pairs (seeds run with both
/// settings), true mean difference `delta` and standard deviation of the
/// differences `sd_diff`: df = n − 1, ncp = δ/(sd_diff/√n). 0 when n < 2;
/// NaN for sd_diff ≤ 0 or alpha outside (0, 1).
pub fn power_paired(n: usize, delta: f64, sd_diff: f64, alpha: f64) -> f64 {
    if sd_diff.is_nan() || sd_diff <= 0.0 {
        return f64::NAN;
    }
    if n < 2 {
        return 0.0;
    }
    power_t((n - 1) as f64, delta / (sd_diff / (n as f64).sqrt()), alpha)
}

/// Smallest n in 2..=max with `power_of(n) ≥ target`, assuming power grows
/// with n (true for these t tests: ncp grows and the critical value falls),
/// by bisection. None when even `max` falls short.
fn smallest_n(target: f64, max: usize, power_of: impl Fn(usize) -> f64) -> Option<usize> {
    if max < 2 {
        return None;
    }
    let top = power_of(max);
    if top.is_nan() || top < target {
        return None;
    }
    if power_of(2) >= target {
        return Some(2);
    }
    let (mut lo, mut hi) = (2, max); // power(lo) < target ≤ power(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if power_of(mid) >= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Seeds needed to detect a difference `delta` with probability `power` by a
/// two-sided level-`alpha` t test: per arm for two independent samples, or
/// pairs when `paired` (then `sd` is the sd of the paired differences).
/// Smallest n ≥ 2; None when more than `max` would be needed (or for
/// invalid inputs).
pub fn seeds_needed(
    delta: f64,
    sd: f64,
    alpha: f64,
    power: f64,
    paired: bool,
    max: usize,
) -> Option<usize> {
    smallest_n(power, max, |n| {
        if paired {
            power_paired(n, delta, sd, alpha)
        } else {
            power_two_sample(n, delta, sd, alpha)
        }
    })
}

/// Replicates of a two-level design (each `runs_per_replicate` runs) needed
/// to detect a factorial effect of size `delta` with probability `power` by
/// a two-sided level-`alpha` t test.
///
/// With N = r·runs total runs, the effect (difference of two means of N/2
/// runs each) has SE = 2σ/√N (Montgomery, *Design and Analysis of
/// Experiments*, §6.4), so ncp = δ√N/(2σ). The error
/// d.f. are those of pure error, N − runs = runs·(r−1): the saturated model
/// (every effect the design can estimate), which is what is left when the
/// analysis may fit any of them. Smallest r ≥ 2; None beyond `max`.
pub fn replicates_for_effect(
    delta: f64,
    sigma: f64,
    runs_per_replicate: usize,
    alpha: f64,
    power: f64,
    max: usize,
) -> Option<usize> {
    if sigma.is_nan() || sigma <= 0.0 || runs_per_replicate == 0 {
        return None;
    }
    smallest_n(power, max, |r| {
        let n_total = (r * runs_per_replicate) as f64;
        let df = n_total - runs_per_replicate as f64;
        power_t(df, delta * n_total.sqrt() / (2.0 * sigma), alpha)
    })
}

/// A difference being decided sequentially: its current estimate, standard
/// error and degrees of freedom.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Question {
    /// Current estimate of the difference.
    pub estimate: f64,
    /// Its standard error.
    pub se: f64,
    /// Degrees of freedom of the standard error.
    pub df: f64,
}

/// Outcome of [`decide`] for one question at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Not decided yet: add seeds.
    Open,
    /// The difference is not zero (its sign is known).
    NonZero,
    /// The difference lies within ±`within` (practically no difference).
    WithinMargin,
}

impl Verdict {
    /// In words, for tables.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Open => "open",
            Verdict::NonZero => "non-zero",
            Verdict::WithinMargin => "within the margin",
        }
    }
}

/// Decide a question at look number `look` (1-based) of at most `max_looks`
/// planned looks, at family-wise error rate `alpha`.
///
/// Each look uses the two-sided (1 − α/max_looks) t interval
/// estimate ± t(1 − α/(2·max_looks); df)·se. NonZero when it excludes 0,
/// WithinMargin when it lies inside (−within, +within), Open otherwise (an
/// interval that does both is reported NonZero: the sign is decided, and
/// the caller sees that the size is small).
///
/// Why the error rate holds: a wrong verdict at a look needs that look's
/// interval to miss the true difference (NonZero when it is 0, WithinMargin
/// when |difference| ≥ within). Each planned look's interval misses with
/// probability α/max_looks, so by the Bonferroni (union) bound the chance
/// that any of the max_looks intervals misses — and so of any wrong verdict,
/// however the looks are correlated and whenever sampling stops — is at most
/// α (Bonferroni inequality; the repeated-confidence-interval view of
/// Jennison & Turnbull 2000, *Group Sequential Methods with Applications
/// to Clinical Trials*, Ch. 9). It is
/// conservative: group-sequential boundaries would spend α less wastefully.
/// A look past `max_looks` has no α left and always answers Open.
pub fn decide(q: &Question, look: usize, max_looks: usize, alpha: f64, within: f64) -> Verdict {
    let valid = look >= 1
        && look <= max_looks
        && alpha > 0.0
        && alpha < 1.0
        && q.df > 0.0
        && q.se.is_finite()
        && q.se >= 0.0
        && q.estimate.is_finite();
    if !valid {
        return Verdict::Open;
    }
    let ci = look_interval(q, max_looks, alpha);
    if ci.lo > 0.0 || ci.hi < 0.0 {
        Verdict::NonZero
    } else if ci.lo > -within && ci.hi < within {
        Verdict::WithinMargin
    } else {
        Verdict::Open
    }
}

/// The interval one look of [`decide`] judges: the two-sided
/// (1 − α/max_looks) t interval estimate ± t(1 − α/(2·max_looks); df)·se,
/// α split evenly over the planned looks (Bonferroni). Unbounded where the
/// question carries no error estimate (df ≤ 0 or a non-finite se).
pub fn look_interval(q: &Question, max_looks: usize, alpha: f64) -> Interval {
    if !(q.df > 0.0 && q.se.is_finite() && q.se >= 0.0 && max_looks >= 1) {
        return Interval::unbounded(q.estimate);
    }
    let level = 1.0 - alpha / max_looks as f64;
    Interval::symmetric(q.estimate, t_multiplier(level, q.df) * q.se)
}

/// Sample mean and standard deviation (n − 1 divisor; NaN below 2 values).
fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, if x.len() < 2 { f64::NAN } else { var.sqrt() })
}

/// Two variants' runs matched by seed, by the rule of the report's Δ
/// columns: paired where every seed of the side with fewer seeds ran on
/// both (the seed's data order and initialisation are then shared, and
/// cancel in the difference), else two independent samples.
#[derive(Clone, Debug, PartialEq)]
pub enum Matched {
    /// The per-seed differences this − reference, each seed's runs
    /// averaged first.
    Paired(Vec<f64>),
    /// The two samples as they are.
    Independent { reference: Vec<f64>, this: Vec<f64> },
}

/// Matches `this` against `reference`, each given as (seed, value);
/// non-finite values are left out. `None` when a side has no value.
pub fn match_by_seed(reference: &[(u64, f64)], this: &[(u64, f64)]) -> Option<Matched> {
    let by_seed = |v: &[(u64, f64)]| -> BTreeMap<u64, Vec<f64>> {
        let mut m: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for &(s, x) in v.iter().filter(|(_, x)| x.is_finite()) {
            m.entry(s).or_default().push(x);
        }
        m
    };
    let (a, b) = (by_seed(reference), by_seed(this));
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let avg = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let pairs: Vec<f64> = b
        .iter()
        .filter_map(|(s, xs)| a.get(s).map(|ys| avg(xs) - avg(ys)))
        .collect();
    if pairs.len() == a.len().min(b.len()) {
        return Some(Matched::Paired(pairs));
    }
    Some(Matched::Independent {
        reference: a.into_values().flatten().collect(),
        this: b.into_values().flatten().collect(),
    })
}

impl Matched {
    pub fn is_paired(&self) -> bool {
        matches!(self, Matched::Paired(_))
    }

    /// Pairs, or the smaller side's runs.
    pub fn n(&self) -> usize {
        match self {
            Matched::Paired(d) => d.len(),
            Matched::Independent { reference, this } => reference.len().min(this.len()),
        }
    }

    /// The estimated difference this − reference.
    pub fn estimate(&self) -> f64 {
        match self {
            Matched::Paired(d) => mean_sd(d).0,
            Matched::Independent { reference, this } => mean_sd(this).0 - mean_sd(reference).0,
        }
    }

    /// The difference as a [`Question`]. Paired: the mean difference d̄, se =
    /// s_d/√n on n − 1 d.f. (the paired t). Independent: Welch's se =
    /// √(s₁²/n₁ + s₂²/n₂) on the Welch–Satterthwaite d.f.
    /// (s₁²/n₁ + s₂²/n₂)² / ((s₁²/n₁)²/(n₁−1) + (s₂²/n₂)²/(n₂−1)) (Welch
    /// 1947, Biometrika 34:28–35), n₁ + n₂ − 2 when both spreads are 0.
    /// `None` below 2 pairs or 2 runs a side: no spread to measure.
    pub fn question(&self) -> Option<Question> {
        match self {
            Matched::Paired(d) if d.len() >= 2 => {
                let (m, sd) = mean_sd(d);
                let n = d.len() as f64;
                Some(Question {
                    estimate: m,
                    se: sd / n.sqrt(),
                    df: n - 1.0,
                })
            }
            Matched::Independent { reference, this } if reference.len().min(this.len()) >= 2 => {
                let ((ma, sa), (mb, sb)) = (mean_sd(reference), mean_sd(this));
                let (na, nb) = (reference.len() as f64, this.len() as f64);
                let (va, vb) = (sa * sa / na, sb * sb / nb);
                let se = (va + vb).sqrt();
                let df = if se > 0.0 {
                    (va + vb).powi(2) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0))
                } else {
                    na + nb - 2.0
                };
                Some(Question {
                    estimate: mb - ma,
                    se,
                    df,
                })
            }
            _ => None,
        }
    }

    /// The standard deviation a power calculation for this pair uses: that
    /// of the per-seed differences when paired, else the pooled
    /// s_p = √(((n₁−1)s₁² + (n₂−1)s₂²)/(n₁ + n₂ − 2)) of the two-sample t
    /// test. `None` below 2 pairs or 2 runs a side.
    pub fn spread(&self) -> Option<f64> {
        match self {
            Matched::Paired(d) if d.len() >= 2 => Some(mean_sd(d).1),
            Matched::Independent { reference, this } if reference.len().min(this.len()) >= 2 => {
                let ((_, sa), (_, sb)) = (mean_sd(reference), mean_sd(this));
                let (na, nb) = (reference.len() as f64, this.len() as f64);
                let pooled = ((na - 1.0) * sa * sa + (nb - 1.0) * sb * sb) / (na + nb - 2.0);
                Some(pooled.sqrt())
            }
            _ => None,
        }
    }

    /// Seeds (pairs, or runs a side) that detect a true difference `delta`
    /// with probability `power` by the two-sided level-`alpha` test this
    /// matching calls for, at the measured [`Matched::spread`]: see
    /// [`seeds_needed`]. `None` without a spread, with a zero one, or past
    /// `max`.
    pub fn seeds_needed(&self, delta: f64, alpha: f64, power: f64, max: usize) -> Option<usize> {
        let sd = self.spread()?;
        seeds_needed(delta, sd, alpha, power, self.is_paired(), max)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::design::{fractional, full_factorial, sample_orders};
    use crate::util::splitmix::SplitMix64;

    /// Standard normal draw by Box–Muller (Box & Muller 1958) from SplitMix64.
    fn normal(rng: &mut SplitMix64) -> f64 {
        let u1 = 1.0 - rng.unit_f64(); // in (0, 1], so ln is finite
        let u2 = rng.unit_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
    }

    /// Noise-free planted response: y = μ + Σ_w (e_w/2)·sign_w(config).
    fn truth(config: Word, mu: f64, effects: &[(Word, f64)]) -> f64 {
        mu + effects
            .iter()
            .map(|&(w, e)| e / 2.0 * term_sign(config, w) as f64)
            .sum::<f64>()
    }

    /// `reps` noisy observations of every run of `runs`.
    fn planted(
        runs: &[Word],
        reps: usize,
        mu: f64,
        effects: &[(Word, f64)],
        sigma: f64,
        rng: &mut SplitMix64,
    ) -> Vec<Obs> {
        let mut out = Vec::new();
        for &config in runs {
            for _ in 0..reps {
                let y = truth(config, mu, effects) + sigma * normal(rng);
                out.push(Obs { config, y });
            }
        }
        out
    }

    const A: Word = 1;
    const B: Word = 2;
    const C: Word = 4;
    const D: Word = 8;

    fn mains_and_2fis(k: usize) -> Vec<Word> {
        let mut t: Vec<Word> = (0..k).map(|i| 1 << i).collect();
        for i in 0..k {
            for j in i + 1..k {
                t.push((1 << i) | (1 << j));
            }
        }
        t
    }

    fn effect_of(fit: &Fit, term: Word) -> TermEffect {
        *fit.terms.iter().find(|t| t.term == term).unwrap()
    }

    #[test]
    fn t_quantiles_match_independent_values() {
        // Reference: mpmath (40 digits) root of the regularized incomplete
        // beta form of the t CDF, one-off script (NOTES.md).
        let cases = [
            (0.975, 17.0, 2.10981557783332),
            (0.975, 5.0, 2.57058183563631),
            (0.975, 7.0 / 3.0, 3.76412307208259),
            (0.975, 38.0, 2.02439416391197),
            (0.995, 4.0, 4.60409487134999),
            (0.9975, 12.0, 3.42844424229226),
            (0.975, 1.0, 12.7062047361747),
            (0.975, 2.0, 4.30265272974946),
        ];
        for (p, df, want) in cases {
            let got = t_quantile(p, df);
            assert!(
                (got - want).abs() < 1e-9 * want,
                "t({p}; {df}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn replicated_fit_recovers_planted_effects() {
        let runs = full_factorial(3).unwrap().runs;
        let effects = [
            (A, 2.0),
            (B, -1.0),
            (C, 0.5),
            (A | B, 1.5),
            (A | C, 0.0),
            (B | C, -0.75),
        ];
        let mut rng = SplitMix64(1);
        let mut obs = planted(&runs, 3, 10.0, &effects, 1e-12, &mut rng);
        let terms = mains_and_2fis(3);
        let fit_all = fit(&obs, 3, &terms).unwrap();
        assert_eq!(fit_all.method, ErrorMethod::Replicates { df: 24 - 7 });
        assert!((fit_all.mean - 10.0).abs() < 1e-9);
        for &(w, e) in &effects {
            assert!((effect_of(&fit_all, w).effect.estimate - e).abs() < 1e-9);
        }
        // Unbalanced: drop one observation; least squares still recovers them.
        obs.remove(5);
        let fit_unbal = fit(&obs, 3, &terms).unwrap();
        assert_eq!(fit_unbal.method, ErrorMethod::Replicates { df: 23 - 7 });
        for &(w, e) in &effects {
            assert!((effect_of(&fit_unbal, w).effect.estimate - e).abs() < 1e-9);
        }
    }

    #[test]
    fn unreplicated_unbalanced_main_effects_recovered() {
        let runs: Vec<Word> = full_factorial(4)
            .unwrap()
            .runs
            .into_iter()
            .filter(|&r| r != 6)
            .collect();
        let effects = [(A, 3.0), (B, -2.0), (C, 1.0), (D, 0.25)];
        let obs = planted(&runs, 1, -4.0, &effects, 1e-12, &mut SplitMix64(2));
        let f = fit(&obs, 4, &[A, B, C, D]).unwrap();
        assert_eq!(f.method, ErrorMethod::Replicates { df: 15 - 5 });
        for (t, &(_, e)) in f.terms.iter().zip(&effects) {
            assert!((t.effect.estimate - e).abs() < 1e-9);
        }
    }

    #[test]
    fn balanced_se_is_two_sigma_over_root_n() {
        // Balanced 2^k with N runs: the effect is the difference of two means
        // of N/2 runs, so se(effect) = σ̂·√(2/N·2) = 2σ̂/√N.
        let runs = full_factorial(3).unwrap().runs;
        let obs = planted(&runs, 2, 0.0, &[(A, 1.0)], 1.0, &mut SplitMix64(3));
        let f = fit(&obs, 3, &[A, B, C]).unwrap();
        let sigma = f.sigma.unwrap();
        let mean_at = |sign: i8| {
            let ys: Vec<f64> = obs
                .iter()
                .filter(|o| term_sign(o.config, A) == sign)
                .map(|o| o.y)
                .collect();
            ys.iter().sum::<f64>() / ys.len() as f64
        };
        let a = effect_of(&f, A);
        assert!((a.effect.estimate - (mean_at(1) - mean_at(-1))).abs() < 1e-12);
        assert!((a.se - 2.0 * sigma / 16f64.sqrt()).abs() < 1e-12);
        let half = t_multiplier(0.95, 12.0) * a.se;
        assert!((a.effect.hi - a.effect.estimate - half).abs() < 1e-12);
    }

    #[test]
    fn replicated_intervals_cover_at_nominal_rate() {
        // 2^3 with 3 replicates, 2000 seeded folders: each main effect and
        // 2fi's 95% interval should cover the planted effect 93–97% of the
        // time (binomial sd of the rate is 0.49%, so ±2% is ±4 sd).
        let runs = full_factorial(3).unwrap().runs;
        let effects = [
            (A, 2.0),
            (B, -1.0),
            (C, 0.0),
            (A | B, 1.5),
            (A | C, 0.0),
            (B | C, -0.5),
        ];
        let terms = mains_and_2fis(3);
        let mut hits = [0usize; 6];
        let folders = 2000;
        let mut rng = SplitMix64(2024);
        for _ in 0..folders {
            let obs = planted(&runs, 3, 5.0, &effects, 1.0, &mut rng);
            let f = fit(&obs, 3, &terms).unwrap();
            for (h, &(w, e)) in hits.iter_mut().zip(&effects) {
                *h += effect_of(&f, w).effect.contains(e) as usize;
            }
        }
        let rates: Vec<f64> = hits.iter().map(|&h| h as f64 / folders as f64).collect();
        println!("replicated 2^3 x3 coverage per term (A B C AB AC BC): {rates:?}");
        for (r, &(w, _)) in rates.iter().zip(&effects) {
            assert!((0.93..=0.97).contains(r), "coverage {r} for {}", letters(w));
        }
    }

    #[test]
    fn lenth_pse_by_hand() {
        // 15 effects; |c| sorted: .05 .1 .1 .15 .2 .2 .25 .3 .4 .5 .6 .7 6 8 10.
        // s0 = 1.5·0.3 = 0.45; cut-off 2.5·s0 = 1.125 keeps the 12 small ones,
        // median (0.2 + 0.25)/2 = 0.225, PSE = 1.5·0.225 = 0.3375 (Lenth 1989).
        let effects = [
            10.0, -8.0, 6.0, 0.5, -0.4, 0.3, 0.2, -0.2, 0.1, -0.1, 0.05, 0.6, -0.7, 0.25, 0.15,
        ];
        assert!((lenth_pse(&effects).unwrap() - 0.3375).abs() < 1e-12);
        // The same effects planted in an unreplicated 2^4 go through fit's
        // saturated path: margin = t(0.975; 15/3 = 5)·PSE = 2.5705818356·0.3375.
        let terms: Vec<Word> = (1..16).collect();
        let planted_effects: Vec<(Word, f64)> = terms.iter().copied().zip(effects).collect();
        let obs = planted(
            &full_factorial(4).unwrap().runs,
            1,
            1.0,
            &planted_effects,
            0.0,
            &mut SplitMix64(0),
        );
        let f = fit(&obs, 4, &terms).unwrap();
        assert_eq!(f.method, ErrorMethod::Lenth { df: 5.0 });
        for (t, &e) in f.terms.iter().zip(&effects) {
            assert!((t.effect.estimate - e).abs() < 1e-12);
            assert!((t.se - 0.3375).abs() < 1e-12);
            assert!((t.effect.hi - e - 2.57058183563631 * 0.3375).abs() < 1e-9);
        }
    }

    #[test]
    fn lenth_intervals_cover_null_effects() {
        // Unreplicated 2^4, all 15 effects fitted (saturated → Lenth), three
        // active (A = 6, B = −4, A×C = 3, σ = 1) and twelve null. Lenth's
        // margin of error is approximate: d = m/3 is his simulation-fitted
        // d.f. for the PSE, and the PSE is a trimmed median that active
        // effects near the 2.5·s0 cut-off can inflate (Lenth 1989, Sec. 2),
        // so the rate is near but not exactly 95%; null-effect coverage is
        // asserted in 90–99% (measured: 97.7% pooled, see NOTES.md).
        let terms: Vec<Word> = (1..16).collect();
        let effects = [(A, 6.0), (B, -4.0), (A | C, 3.0)];
        let null_terms: Vec<Word> = terms
            .iter()
            .copied()
            .filter(|&t| effects.iter().all(|e| e.0 != t))
            .collect();
        let runs = full_factorial(4).unwrap().runs;
        let mut hits = vec![0usize; null_terms.len()];
        let folders = 2000;
        let mut rng = SplitMix64(77);
        for _ in 0..folders {
            let obs = planted(&runs, 1, 0.0, &effects, 1.0, &mut rng);
            let f = fit(&obs, 4, &terms).unwrap();
            for (h, &t) in hits.iter_mut().zip(&null_terms) {
                *h += effect_of(&f, t).effect.contains(0.0) as usize;
            }
        }
        let rates: Vec<f64> = hits.iter().map(|&h| h as f64 / folders as f64).collect();
        let pooled = rates.iter().sum::<f64>() / rates.len() as f64;
        println!(
            "Lenth unreplicated 2^4 null-effect coverage: pooled {pooled}, per term {rates:?}"
        );
        assert!((0.90..=0.99).contains(&pooled), "pooled coverage {pooled}");
        for (r, &t) in rates.iter().zip(&null_terms) {
            assert!((0.90..=0.99).contains(r), "coverage {r} for {}", letters(t));
        }
    }

    #[test]
    fn fit_errors_name_the_offending_terms() {
        let half = fractional(3, 1).unwrap(); // I = ABC
        let obs = planted(&half.runs, 2, 0.0, &[(A, 1.0)], 0.1, &mut SplitMix64(4));
        let e = fit(&obs, 3, &[A, B, C, A | B]).unwrap_err();
        assert_eq!(
            e,
            "C and A×B are aliased in this design (I = ABC); drop one or run the full factorial"
        );
        let e = fit(&obs, 3, &[A, A | B | C]).unwrap_err();
        assert!(
            e.starts_with("A×B×C is constant") && e.contains("I = ABC"),
            "{e}"
        );
        // A missing configuration in a 2^2 with the interaction.
        let runs = [0, 1, 2];
        let obs = planted(&runs, 2, 0.0, &[(A, 1.0)], 0.1, &mut SplitMix64(5));
        let e = fit(&obs, 2, &[A, B, A | B]).unwrap_err();
        assert!(
            e.contains("A×B cannot be separated from the mean, A and B"),
            "{e}"
        );
        let full = full_factorial(2).unwrap().runs;
        let obs = planted(&full, 2, 0.0, &[(A, 1.0)], 0.1, &mut SplitMix64(6));
        let cases: Vec<(Vec<Obs>, usize, Vec<Word>, &str)> = vec![
            (obs.clone(), 2, vec![A, A], "term A is listed twice"),
            (obs.clone(), 2, vec![0, A], "term I"),
            (obs.clone(), 2, vec![C], "term C uses a trick beyond the 2"),
            (
                vec![Obs { config: 4, y: 1.0 }],
                2,
                vec![A],
                "observation 0 has configuration {2}",
            ),
            (
                vec![Obs {
                    config: 1,
                    y: f64::NAN,
                }],
                2,
                vec![A],
                "observation 0 (configuration {0}) has a non-finite",
            ),
            (vec![], 2, vec![A], "no observations"),
            (obs.clone(), 17, vec![A], "17 tricks"),
        ];
        for (o, k, t, needle) in cases {
            let e = fit(&o, k, &t).unwrap_err();
            assert!(
                e.contains(needle) && !e.contains('\n'),
                "want {needle:?} in {e}"
            );
        }
    }

    #[test]
    fn lenth_errors() {
        // Saturated but not orthogonal: 2^2 without (A, B) both on, mains only.
        let obs: Vec<Obs> = [0, 1, 2]
            .iter()
            .map(|&c| Obs {
                config: c,
                y: c as f64,
            })
            .collect();
        let e = fit(&obs, 2, &[A, B]).unwrap_err();
        assert!(
            e.contains("not orthogonal and balanced") && e.contains("Lenth"),
            "{e}"
        );
        // Too few effects to pool.
        let obs = [Obs { config: 0, y: 1.0 }, Obs { config: 1, y: 2.0 }];
        let e = fit(&obs, 1, &[A]).unwrap_err();
        assert!(
            e.contains("only 1 effects") && e.contains("replicates"),
            "{e}"
        );
        // Two of three effects exactly zero: PSE = 0.
        let obs: Vec<Obs> = (0..4)
            .map(|c| Obs {
                config: c,
                y: truth(c, 0.0, &[(A, 1.0)]),
            })
            .collect();
        let e = fit(&obs, 2, &[A, B, A | B]).unwrap_err();
        assert!(e.contains("pseudo standard error is zero"), "{e}");
    }

    /// v(S) = noise-free planted truth.
    fn exact_obs(k: usize, effects: &[(Word, f64)]) -> Vec<Obs> {
        (0..1u32 << k)
            .map(|c| Obs {
                config: c,
                y: truth(c, 3.0, effects),
            })
            .collect()
    }

    #[test]
    fn shapley_exact_properties() {
        // Efficiency with noise: Σφ = v(N) − v(∅) (Shapley 1953 axiom).
        let k = 4;
        let effects = [
            (A, 2.0),
            (B, -1.0),
            (A | B, 1.0),
            (B | C | D, 0.5),
            (C, 0.3),
        ];
        let obs = planted(
            &full_factorial(k).unwrap().runs,
            3,
            1.0,
            &effects,
            0.5,
            &mut SplitMix64(8),
        );
        let s = shapley_exact(&obs, k).unwrap();
        let cell_mean = |c: Word| {
            let ys: Vec<f64> = obs.iter().filter(|o| o.config == c).map(|o| o.y).collect();
            ys.iter().sum::<f64>() / ys.len() as f64
        };
        let total: f64 = s.values.iter().map(|v| v.estimate).sum();
        assert!((total - (cell_mean(15) - cell_mean(0))).abs() < 1e-10);
        assert_eq!(s.df, 48 - 16);
        assert!(s.note.is_none() && s.values.iter().all(|v| v.hi > v.lo));
        // Symmetry: A and B play identical roles (A×C and B×C too).
        let sym = [
            (A, 1.0),
            (B, 1.0),
            (A | B, -0.7),
            (A | C, 0.4),
            (B | C, 0.4),
            (C, 2.0),
        ];
        let v = shapley_exact(&exact_obs(k, &sym), k).unwrap();
        assert!((v.values[0].estimate - v.values[1].estimate).abs() < 1e-12);
        assert!((v.values[0].estimate - v.values[2].estimate).abs() > 0.1);
        // Null player: D appears in no effect.
        assert!(v.values[3].estimate.abs() < 1e-12);
        assert_eq!(v.df, 0);
        assert!(v.note.as_deref().unwrap().contains("no error estimate"));
        assert!(v.values[0].lo.is_infinite() && v.values[0].hi.is_infinite());
        // Additive truth: φ_i = e_i (v(S∪i) − v(S) = e_i for every S).
        let add = [(A, 2.5), (B, -1.25), (C, 0.75), (D, 4.0)];
        let v = shapley_exact(&exact_obs(k, &add), k).unwrap();
        for (phi, &(_, e)) in v.values.iter().zip(&add) {
            assert!((phi.estimate - e).abs() < 1e-12);
        }
        // With an interaction its credit is split equally: φ_A = e_A + e_AB/2
        // here (2-player game, symmetric split of the synergy).
        let v = shapley_exact(&exact_obs(2, &[(A, 2.0), (A | B, 1.0)]), 2).unwrap();
        assert!((v.values[0].estimate - 2.0).abs() < 1e-12);
        assert!((v.values[1].estimate - 0.0).abs() < 1e-12);
    }

    #[test]
    fn shapley_exact_intervals_cover() {
        // 2^3 with 2 replicates: the φ interval should cover the noise-free
        // φ about 95% of the time (2000 folders; ±2% is ±4 binomial sd).
        let k = 3;
        let effects = [(A, 2.0), (B, -1.0), (A | B, 1.0), (A | B | C, 0.5)];
        let true_phi = shapley_exact(&exact_obs(k, &effects), k).unwrap();
        let runs = full_factorial(k).unwrap().runs;
        let mut hits = [0usize; 3];
        let mut rng = SplitMix64(99);
        for _ in 0..2000 {
            let obs = planted(&runs, 2, 3.0, &effects, 1.0, &mut rng);
            let s = shapley_exact(&obs, k).unwrap();
            for ((h, got), want) in hits.iter_mut().zip(&s.values).zip(&true_phi.values) {
                *h += got.contains(want.estimate) as usize;
            }
        }
        let rates: Vec<f64> = hits.iter().map(|&h| h as f64 / 2000.0).collect();
        println!("exact Shapley 2^3 x2 coverage: {rates:?}");
        assert!(rates.iter().all(|r| (0.93..=0.97).contains(r)), "{rates:?}");
    }

    #[test]
    fn shapley_exact_errors() {
        let mut obs = exact_obs(3, &[(A, 1.0)]);
        obs.retain(|o| o.config != 5);
        let e = shapley_exact(&obs, 3).unwrap_err();
        assert!(
            e.contains("configuration {0, 2} was never observed") && e.contains("8 configurations"),
            "{e}"
        );
        let e = shapley_exact(&obs, 0).unwrap_err();
        assert!(e.contains("0 tricks"), "{e}");
    }

    #[test]
    fn shapley_sampled_efficiency_and_exactness() {
        let k = 3;
        let effects = [
            (A, 2.0),
            (B, -1.0),
            (A | B, 1.0),
            (A | B | C, 0.5),
            (B | C, -0.25),
        ];
        let v = |c: Word| Some(truth(c, 3.0, &effects));
        let all: Vec<Vec<usize>> = vec![
            vec![0, 1, 2],
            vec![0, 2, 1],
            vec![1, 0, 2],
            vec![1, 2, 0],
            vec![2, 0, 1],
            vec![2, 1, 0],
        ];
        // Over all k! orders the permutation estimator is the Shapley value.
        let sampled = shapley_sampled(&all, v).unwrap();
        let exact = shapley_exact(&exact_obs(k, &effects), k).unwrap();
        for (s, e) in sampled.iter().zip(&exact.values) {
            assert!((s.estimate - e.estimate).abs() < 1e-12);
        }
        // Random orders: estimates still sum to v(N) − v(∅) exactly.
        let orders = sample_orders(k, 5, 3);
        let s = shapley_sampled(&orders, v).unwrap();
        let total: f64 = s.iter().map(|x| x.estimate).sum();
        assert!((total - (v(7).unwrap() - v(0).unwrap())).abs() < 1e-12);
        // Additive truth: every order credits e_i, so the interval is a point.
        let add = [(A, 1.0), (B, 2.0), (C, -3.0)];
        let s = shapley_sampled(&orders, |c| Some(truth(c, 0.0, &add))).unwrap();
        for (x, &(_, e)) in s.iter().zip(&add) {
            assert!((x.estimate - e).abs() < 1e-12 && (x.hi - x.lo).abs() < 1e-12);
        }
        // One order: no spread to estimate.
        let s = shapley_sampled(&orders[..1], v).unwrap();
        assert!(s[0].lo.is_infinite());
    }

    #[test]
    fn shapley_sampled_errors() {
        let v = |c: Word| if c == 0b011 { None } else { Some(c as f64) };
        let e = shapley_sampled(&[vec![0, 1, 2]], v).unwrap_err();
        assert!(e.contains("configuration {0, 1} has no value"), "{e}");
        let e = shapley_sampled(&[vec![0, 1, 2], vec![0, 0, 2]], |c| Some(c as f64)).unwrap_err();
        assert!(
            e.contains("order 1 [0, 0, 2] is not a permutation of 0..3"),
            "{e}"
        );
        let e = shapley_sampled(&[vec![]], |c| Some(c as f64)).unwrap_err();
        assert!(e.contains("orders have 0 tricks"), "{e}");
        let e = shapley_sampled(&[], |c| Some(c as f64)).unwrap_err();
        assert!(e.contains("no orders"), "{e}");
        let e = shapley_sampled(&[vec![1, 0]], |c| Some(if c == 2 { f64::NAN } else { 1.0 }))
            .unwrap_err();
        assert!(
            e.contains("configuration {1} has the non-finite value"),
            "{e}"
        );
    }

    /// Independent check of the noncentral t CDF: F(t; ν, δ) =
    /// ∫_0^∞ Φ(t·s − δ) f_S(s) ds with S = √(χ²_ν/ν), whose density is
    /// f_S(s) = 2(ν/2)^{ν/2}/Γ(ν/2) · s^{ν−1} e^{−νs²/2} (e.g. Johnson, Kotz &
    /// Balakrishnan, Continuous Univariate Distributions vol. 2, §31.1), by
    /// composite Simpson on [0, 1 + 12/√ν + 4] — nothing shared with AS 243
    /// but Φ and ln Γ.
    fn nct_cdf_by_quadrature(t: f64, nu: f64, delta: f64) -> f64 {
        let log_norm = LN_2 + (nu / 2.0) * (nu / 2.0).ln() - ln_gamma(nu / 2.0);
        let density = |s: f64| {
            if s <= 0.0 {
                return 0.0;
            }
            (log_norm + (nu - 1.0) * s.ln() - nu * s * s / 2.0).exp()
        };
        let upper = 1.0 + 12.0 / nu.sqrt() + 4.0;
        let steps = 20_000;
        let h = upper / steps as f64;
        let f = |s: f64| std_normal_cdf(t * s - delta) * density(s);
        let inner: f64 = (1..steps)
            .map(|i| f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 })
            .sum();
        (f(0.0) + inner + f(upper)) * h / 3.0
    }

    #[test]
    fn noncentral_t_cdf_matches_quadrature_and_mpmath() {
        // (t, ν, δ, mpmath 40-digit quadrature of the same integral).
        let cases = [
            (1.0, 5.0, 0.5, 0.666535702687272),
            (2.0, 10.0, 1.0, 0.807611562530375),
            (-1.5, 3.0, 1.0, 0.0181854854091097),
            (3.0, 38.0, 3.1622776601683795, 0.431423927853358),
            (0.5, 2.5, -0.7, 0.87053681164625),
            (4.0, 9.0, 2.0, 0.918934549415101),
            (-2.0, 20.0, -1.0, 0.176126732708907),
            (10.0, 30.0, 8.0, 0.881213492377883),
        ];
        for (t, nu, d, want) in cases {
            let got = noncentral_t_cdf(t, nu, d);
            let quad = nct_cdf_by_quadrature(t, nu, d);
            assert!(
                (got - want).abs() < 1e-10,
                "F({t}; {nu}, {d}) = {got}, mpmath {want}"
            );
            assert!(
                (got - quad).abs() < 1e-8,
                "F({t}; {nu}, {d}) = {got}, quadrature {quad}"
            );
        }
        // δ = 0 is the central t.
        let central = StudentsT::new(0.0, 1.0, 7.0).unwrap();
        for t in [-3.0, -0.5, 0.0, 0.7, 2.5] {
            assert!((noncentral_t_cdf(t, 7.0, 0.0) - central.cdf(t)).abs() < 1e-12);
        }
        // Far tail uses the normal approximation and stays a probability.
        let far = noncentral_t_cdf(45.0, 50.0, 40.0);
        assert!(
            (0.0..=1.0).contains(&far)
                && (far - nct_cdf_by_quadrature(45.0, 50.0, 40.0)).abs() < 1e-3
        );
    }

    #[test]
    fn power_matches_r_power_t_test() {
        // R: power.t.test(n = 20, delta = 1, sd = 1) → power = 0.8689528.
        // mpmath quadrature (NOTES.md): upper tail 0.868952801692, lower
        // tail 2.26e-7; R's default (strict = FALSE) drops the lower tail.
        let p = power_two_sample(20, 1.0, 1.0, 0.05);
        assert!((p - 0.868953027724).abs() < 1e-9, "{p}");
        assert!((p - 0.8689528).abs() < 1e-6);
        // R: power.t.test(n = 10, delta = 1, sd = 1, type = "paired") →
        // 0.8030962; mpmath: upper 0.80309620869, lower 6.48e-7.
        let p = power_paired(10, 1.0, 1.0, 0.05);
        assert!((p - 0.803096856633).abs() < 1e-9, "{p}");
        assert!((p - 0.8030962).abs() < 1e-6);
        // R: power.t.test(delta = 1, sd = 1, power = 0.8) → n = 16.71477 per
        // group (mpmath: 16.71476 upper tail only, 16.71472 both tails), so
        // 17 seeds per arm: power(16) = 0.7813978 < 0.8 ≤ power(17) = 0.8070367.
        assert!((power_two_sample(16, 1.0, 1.0, 0.05) - 0.781397792466).abs() < 1e-9);
        assert!((power_two_sample(17, 1.0, 1.0, 0.05) - 0.807036715147).abs() < 1e-9);
        assert_eq!(seeds_needed(1.0, 1.0, 0.05, 0.8, false, 1000), Some(17));
        assert_eq!(seeds_needed(1.0, 1.0, 0.05, 0.8, false, 16), None);
        assert_eq!(seeds_needed(0.0, 1.0, 0.05, 0.8, false, 1000), None);
        // Paired: power(10) = 0.803 ≥ 0.8 and power(9) must fall short.
        assert!(power_paired(9, 1.0, 1.0, 0.05) < 0.8);
        assert_eq!(seeds_needed(1.0, 1.0, 0.05, 0.8, true, 1000), Some(10));
        assert_eq!(power_two_sample(1, 1.0, 1.0, 0.05), 0.0);
        assert!(power_paired(5, 1.0, 0.0, 0.05).is_nan());
    }

    #[test]
    fn replicates_for_a_factorial_effect() {
        // 2^3 (8 runs): r replicates give N = 8r, ncp = δ√N/(2σ), df = 8(r−1).
        let r = replicates_for_effect(1.0, 1.0, 8, 0.05, 0.8, 100).unwrap();
        let power_at = |r: usize| {
            let n = (8 * r) as f64;
            power_t(n - 8.0, n.sqrt() / 2.0, 0.05)
        };
        assert!(power_at(r) >= 0.8 && power_at(r - 1) < 0.8, "r = {r}");
        // Cross-check against the two-sample formula: the effect compares two
        // halves of N/2 runs, so it needs about 2× the per-arm n of a t test
        // (17 per arm → 34 runs → 5 replicates of 8), up to the d.f. change.
        assert_eq!(r, 5);
        assert_eq!(replicates_for_effect(1.0, 1.0, 8, 0.05, 0.8, 4), None);
        assert_eq!(replicates_for_effect(1.0, 0.0, 8, 0.05, 0.8, 100), None);
    }

    #[test]
    fn decide_verdicts() {
        let q = |estimate, se| Question {
            estimate,
            se,
            df: 20.0,
        };
        assert_eq!(decide(&q(1.0, 0.1), 1, 5, 0.05, 0.5), Verdict::NonZero);
        assert_eq!(
            decide(&q(0.05, 0.1), 1, 5, 0.05, 0.5),
            Verdict::WithinMargin
        );
        assert_eq!(decide(&q(0.3, 0.2), 1, 5, 0.05, 0.5), Verdict::Open);
        assert_eq!(decide(&q(1.0, 0.1), 6, 5, 0.05, 0.5), Verdict::Open);
        // The Bonferroni split matters: est/se = 2.4 clears t(0.975; 20) = 2.086
        // but not t(1 − 0.05/10; 20) = 2.845 (5 looks).
        assert_eq!(decide(&q(0.24, 0.1), 1, 1, 0.05, 0.0), Verdict::NonZero);
        assert_eq!(decide(&q(0.24, 0.1), 1, 5, 0.05, 0.0), Verdict::Open);
    }

    #[test]
    fn sequential_decisions_keep_the_error_rate() {
        // Paired differences with true mean 0 and sd 1; look after 3, 6, …,
        // 30 seeds (10 looks), stop at the first verdict. A NonZero verdict is
        // wrong. Bonferroni bounds the family-wise rate by α = 0.05; testing
        // at α at every look would be far worse (checked below as a control).
        let wrong_rate = |split: bool| {
            let mut wrong = 0;
            let mut rng = SplitMix64(31337);
            let sims = 2000;
            for _ in 0..sims {
                let diffs: Vec<f64> = (0..30).map(|_| normal(&mut rng)).collect();
                for look in 1..=10 {
                    let d = &diffs[..3 * look];
                    let n = d.len() as f64;
                    let mean = d.iter().sum::<f64>() / n;
                    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
                    let q = Question {
                        estimate: mean,
                        se: (var / n).sqrt(),
                        df: n - 1.0,
                    };
                    let max_looks = if split { 10 } else { 1 };
                    let verdict = decide(&q, if split { look } else { 1 }, max_looks, 0.05, 0.0);
                    if verdict == Verdict::NonZero {
                        wrong += 1;
                        break;
                    }
                }
            }
            wrong as f64 / sims as f64
        };
        let bonferroni = wrong_rate(true);
        let naive = wrong_rate(false);
        println!("sequential false NonZero rate: Bonferroni {bonferroni}, naive {naive}");
        assert!(bonferroni <= 0.05, "{bonferroni}");
        assert!(naive > 0.1, "control: naive repeated testing {naive}");
    }

    #[test]
    fn matched_by_seed_gives_the_paired_or_welch_question() {
        // Same seeds: paired, differences [1, 2, 3] → d̄ = 2, s_d = 1,
        // se = 1/√3 on 2 d.f.
        let reference = [(0, 10.0), (1, 20.0), (2, 30.0)];
        let this = [(0, 11.0), (1, 22.0), (2, 33.0)];
        let m = match_by_seed(&reference, &this).unwrap();
        assert!(m.is_paired() && m.n() == 3);
        let q = m.question().unwrap();
        assert!((q.estimate - 2.0).abs() < 1e-12 && q.df == 2.0);
        assert!((q.se - 1.0 / 3f64.sqrt()).abs() < 1e-12);
        assert!((m.spread().unwrap() - 1.0).abs() < 1e-12);
        // Other seeds: Welch. Means 10 and 12, sds 1 and 2, n 5 a side (the
        // values of report::compare's hand-computed test): se = √(1/5 + 4/5)
        // = 1, df = 1/(0.04/4 + 0.64/4) = 5.882.
        let base = [8.5, 9.5, 10.0, 10.5, 11.5];
        let (mb, sb) = mean_sd(&base);
        let base: Vec<f64> = base.iter().map(|x| mb + (x - mb) / sb).collect();
        let cand: Vec<f64> = base.iter().map(|x| 12.0 + 2.0 * (x - 10.0)).collect();
        let r: Vec<(u64, f64)> = base
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u64, x))
            .collect();
        let c: Vec<(u64, f64)> = cand
            .iter()
            .enumerate()
            .map(|(i, &x)| (10 + i as u64, x))
            .collect();
        let m = match_by_seed(&r, &c).unwrap();
        assert!(!m.is_paired());
        let q = m.question().unwrap();
        assert!((q.estimate - 2.0).abs() < 1e-12 && (q.se - 1.0).abs() < 1e-12);
        assert!(
            (q.df - 1.0 / (0.04 / 4.0 + 0.64 / 4.0)).abs() < 1e-9,
            "{q:?}"
        );
        // Pooled sd √((4·1 + 4·4)/8) = √2.5.
        assert!((m.spread().unwrap() - 2.5f64.sqrt()).abs() < 1e-12);
        // One seed a side: a difference but no question.
        let one = match_by_seed(&[(0, 1.0)], &[(0, 2.0)]).unwrap();
        assert!(one.question().is_none() && one.spread().is_none());
        assert!(match_by_seed(&[], &[(0, 2.0)]).is_none());
    }

    #[test]
    fn matched_seeds_needed_are_the_t_tests_sample_sizes() {
        // Pooled sd exactly 1 on different seeds: the two-sample t needs 17 a
        // side for Δ = 1 (R: power.t.test(delta = 1, sd = 1, power = 0.8)).
        let r = [(0, -1.0), (1, 0.0), (2, 1.0)];
        let c = [(5, 0.0), (6, 1.0), (7, 2.0)];
        let m = match_by_seed(&r, &c).unwrap();
        assert_eq!(m.seeds_needed(1.0, 0.05, 0.8, 1000), Some(17));
        // Paired differences with sd exactly 1: 10 pairs (power 0.803).
        let c = [(0, 0.0), (1, 0.0), (2, 3.0)];
        let m = match_by_seed(&r, &c).unwrap();
        assert!((m.spread().unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(m.seeds_needed(1.0, 0.05, 0.8, 1000), Some(10));
        assert_eq!(m.seeds_needed(1.0, 0.05, 0.8, 9), None);
    }

    #[test]
    fn pure_error_pools_the_replicates() {
        // Cells {1, 3}, {10, 14} and {7}: SS = 2 + 8 + 0 = 10 on 5 − 3 = 2
        // d.f. (the unreplicated cell adds a mean and no error).
        let obs = [(0, 1.0), (0, 3.0), (1, 10.0), (1, 14.0), (2, 7.0)]
            .map(|(config, y)| Obs { config, y });
        let (sd, df) = pure_error(&obs).unwrap();
        assert_eq!(df, 2);
        assert!((sd - 5f64.sqrt()).abs() < 1e-12);
        assert!(pure_error(&obs[4..]).is_none());
    }

    #[test]
    fn look_interval_is_the_one_decide_judges() {
        let q = Question {
            estimate: 0.24,
            se: 0.1,
            df: 20.0,
        };
        // t(1 − 0.05/10; 20) = 2.845 (R: qt(0.995, 20) = 2.845340).
        let ci = look_interval(&q, 5, 0.05);
        assert!((ci.hi - 0.24 - 0.2845340).abs() < 1e-6, "{ci:?}");
        assert!(ci.lo < 0.0 && decide(&q, 1, 5, 0.05, 0.0) == Verdict::Open);
        assert!(
            look_interval(&Question { df: 0.0, ..q }, 5, 0.05)
                .hi
                .is_infinite()
        );
    }
}
