//! Shapley credit per trick over a two-level design: exact from every
//! configuration, or sampled from random orders (each a ladder).

use std::collections::HashMap;

use super::design::Word;
use super::fit::{Obs, check_obs, group, set_label};
use super::{CONFIDENCE, Interval, t_multiplier};

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
