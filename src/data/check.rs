//! `tricklab data check`: what a researcher wants to know before trusting a data set.

use super::{Dataset, Split};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct Problem(pub String);

/// Class imbalance (> 10% from the mean), constant images, duplicate images
/// within a split and images shared between train and test.
pub fn check(d: &Dataset) -> Vec<Problem> {
    let mut out = Vec::new();
    let sz = d.image_bytes();
    for (name, split) in [("train", &d.train), ("test", &d.test)] {
        if split.is_empty() {
            out.push(Problem(format!("{name}: no images")));
            continue;
        }
        let counts = d.class_counts(split);
        let mean = split.len() as f64 / d.classes.len() as f64;
        for (c, &n) in counts.iter().enumerate() {
            if (n as f64 - mean).abs() > 0.1 * mean {
                out.push(Problem(format!(
                    "{name}: class {} has {n} images, the mean is {mean:.0}",
                    d.classes[c]
                )));
            }
        }
        let constant = (0..split.len()).filter(|&i| {
            let img = &split.images[i * sz..(i + 1) * sz];
            img.iter().all(|&v| v == img[0])
        });
        let n_const = constant.count();
        if n_const > 0 {
            out.push(Problem(format!(
                "{name}: {n_const} constant (blank) images"
            )));
        }
        let dups = duplicates(split, sz);
        if dups > 0 {
            out.push(Problem(format!("{name}: {dups} duplicate images")));
        }
    }
    let train: std::collections::HashSet<&[u8]> = d.train.images.chunks_exact(sz).collect();
    let leaked = d
        .test
        .images
        .chunks_exact(sz)
        .filter(|img| train.contains(img))
        .count();
    if leaked > 0 {
        out.push(Problem(format!(
            "{leaked} test images also appear in train"
        )));
    }
    out
}

fn duplicates(split: &Split, sz: usize) -> usize {
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for img in split.images.chunks_exact(sz) {
        *seen.entry(img).or_default() += 1;
    }
    seen.values().map(|n| n - 1).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_imbalance_duplicates_and_leaks() {
        let d = crate::data::synthetic(100, 20, 10, 8, 3);
        assert!(check(&d).is_empty(), "{:?}", check(&d));
        let mut bad = d.clone();
        let sz = bad.image_bytes();
        let first = bad.train.images[..sz].to_vec();
        bad.train.images[sz..2 * sz].copy_from_slice(&first);
        bad.test.images[..sz].copy_from_slice(&first);
        bad.train.labels.truncate(80);
        bad.train.images.truncate(80 * sz);
        let p: Vec<String> = check(&bad).into_iter().map(|p| p.0).collect();
        assert!(p.iter().any(|s| s.contains("duplicate")), "{p:?}");
        assert!(
            p.iter().any(|s| s.contains("also appear in train")),
            "{p:?}"
        );
        let mut unbalanced = d.clone();
        unbalanced
            .train
            .labels
            .iter_mut()
            .take(30)
            .for_each(|l| *l = 0);
        assert!(
            check(&unbalanced)
                .iter()
                .any(|p| p.0.contains("class class0 has"))
        );
    }
}
