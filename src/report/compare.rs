//! `tricklab compare BASE CANDIDATE`: per variant, did the candidate get
//! slower or less accurate than allowed? For overnight ladder regressions.

use super::Report;

#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub variant: String,
    pub base_time: f64,
    pub cand_time: f64,
    pub base_acc: f64,
    pub cand_acc: f64,
    /// Why it regressed, if it did.
    pub regression: Option<String>,
}

pub fn compare(
    base: &Report,
    cand: &Report,
    max_slowdown: f64,
    max_acc_drop: f64,
) -> Vec<Comparison> {
    base.rows
        .iter()
        .filter(|b| b.n > 0)
        .filter_map(|b| {
            let c = cand
                .rows
                .iter()
                .find(|c| c.variant == b.variant && c.n > 0)?;
            let (bt, ct) = (b.time().mean, c.time().mean);
            let mut why = Vec::new();
            if ct > bt * (1.0 + max_slowdown) {
                why.push(format!(
                    "{:.1}% slower ({bt:.2} s → {ct:.2} s)",
                    100.0 * (ct / bt - 1.0)
                ));
            }
            if b.acc_tta_mean - c.acc_tta_mean > max_acc_drop {
                why.push(format!(
                    "accuracy {:.2}% → {:.2}%",
                    100.0 * b.acc_tta_mean,
                    100.0 * c.acc_tta_mean
                ));
            }
            Some(Comparison {
                variant: b.variant.clone(),
                base_time: bt,
                cand_time: ct,
                base_acc: b.acc_tta_mean,
                cand_acc: c.acc_tta_mean,
                regression: (!why.is_empty()).then(|| why.join(", ")),
            })
        })
        .collect()
}
