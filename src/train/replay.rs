//! A golden trajectory replayed through the engine (tests only set it):
//! the weights each named variable starts from, every data-side draw in the
//! engine's order, and copies of the variables at the steps it asks for, so
//! that a run can be compared step by step with the published script's own.

use crate::native;
use anyhow::{Result, bail};
use tch::{Tensor, nn};

/// What a golden trajectory puts into a run: the weights every named
/// variable starts from (after the whitening fit, where the references put
/// them) and every data-side draw, in the engine's order.
#[derive(Debug, Default)]
pub struct Injection {
    pub weights: Vec<(String, Tensor)>,
    pub draws: Vec<(String, native::Draw)>,
    /// After these optimiser steps (1-based, averaging applied), a copy of
    /// every variable by name goes into `snapshots`.
    pub at_steps: Vec<u64>,
    pub snapshots: std::cell::RefCell<Vec<(u64, Named)>>,
}

/// Tensors by variable name.
pub type Named = Vec<(String, Tensor)>;

impl Injection {
    /// The variables to copy at the checkpoints, if any are asked for.
    pub(super) fn vars_to_copy(&self, vs: &nn::VarStore) -> Option<Named> {
        (!self.at_steps.is_empty()).then(|| vs.variables().into_iter().collect())
    }

    /// A copy of every variable after optimiser step `step`, when asked.
    pub(super) fn copy_at(&self, step: u64, vars: &Named) {
        if self.at_steps.contains(&step) {
            let copy = vars.iter().map(|(n, t)| (n.clone(), t.copy())).collect();
            self.snapshots.borrow_mut().push((step, copy));
        }
    }
}

/// Overwrites the named variables with `weights`; every name must exist
/// with the same shape, and every variable must be named.
pub(super) fn inject_weights(vs: &nn::VarStore, weights: &[(String, Tensor)]) -> Result<()> {
    let mut vars = vs.variables();
    for (name, w) in weights {
        let Some(mut v) = vars.remove(name) else {
            bail!("injected weight `{name}`: the net has no such variable");
        };
        if v.size() != w.size() {
            bail!(
                "injected weight `{name}`: shape {:?}, the net's is {:?}",
                w.size(),
                v.size()
            );
        }
        tch::no_grad(|| v.copy_(w));
    }
    if !vars.is_empty() {
        let mut left: Vec<_> = vars.into_keys().collect();
        left.sort();
        bail!(
            "injected weights leave {} variable(s) as built: {}",
            left.len(),
            left.join(", ")
        );
    }
    Ok(())
}
