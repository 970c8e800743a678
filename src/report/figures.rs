//! What the charts draw beyond the report's tables, read from the results
//! folders here so that the charts only draw: each finished run's row (the
//! accuracy distribution), the step curves, and the curves against time.

use super::Report;
use super::curves::{Curve, TimeCurve, curves, time_curves};
use crate::store::{Ended, RunRow};
use anyhow::Result;
use std::path::PathBuf;

/// A report's figures: everything `charts::write_all` reads besides the report.
pub struct Figures {
    /// The finished runs behind the tables (noisy ones dropped when the
    /// report dropped them).
    pub runs: Vec<RunRow>,
    pub curves: Vec<Curve>,
    /// Accuracy against seconds, each run on its variant's headline clock.
    pub time_curves: Vec<TimeCurve>,
}

impl Figures {
    pub fn read(r: &Report, dirs: &[PathBuf]) -> Result<Figures> {
        let mut runs = Vec::new();
        for d in dirs {
            runs.extend(
                crate::store::read_runs(&d.join("runs.parquet"))?
                    .into_iter()
                    .filter(|x| x.status == Ended::Done)
                    .filter(|x| !(r.dropped_noisy && x.noisy == Some(true))),
            );
        }
        // Each run on its variant's headline clock, as the tables have it.
        let clock_of = |row: &RunRow| {
            r.rows
                .iter()
                .find(|x| x.matrix == row.matrix && x.index == row.index as usize)
                .map(|x| x.headline)
                .or(r.clock)
                .unwrap_or_else(|| super::clock_of_recipe(&row.recipe))
        };
        Ok(Figures {
            runs,
            curves: curves(dirs)?,
            time_curves: time_curves(dirs, &clock_of, r.dropped_noisy)?,
        })
    }
}
