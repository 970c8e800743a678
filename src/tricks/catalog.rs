//! Every trick, once. Facts from ../shared/TRICKS.md (section 4 and the part-8 ladder).

use super::*;

pub static CATALOG: &[TrickSpec] = &[TrickSpec {
    key: "label_smoothing",
    ids: &["T24", "B3"],
    name: "Label smoothing",
    help: "Mix the one-hot target with the uniform distribution: (1-a)*CE + a*mean_c(-log p_c).",
    source: "Page part 8, rung B3 (59 s); airbench and hlb use the same 0.2",
    category: Category::Regularisation,
    off: "a = 0 (plain cross-entropy)",
    on: "a = 0.2",
    params: &[ParamSpec {
        name: "alpha",
        help: "smoothing weight",
        default: ParamValue::Float(0.2),
        range: Some((0.0, 1.0)),
        choices: &[],
    }],
    requires: &[],
    conflicts: &[],
}];
