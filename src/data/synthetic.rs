//! A seeded, learnable synthetic data set for tests: each class is a smooth
//! colour template, and every image is its class template, randomly shifted,
//! plus noise. Tiny nets learn it in a few steps, which is what tests need.

use super::{Dataset, Split, content_hash};
use crate::util::splitmix::SplitMix64 as Rng;

/// `train_n` and `test_n` images of `classes` classes, 3×size×size.
pub fn synthetic(train_n: usize, test_n: usize, classes: usize, size: usize, seed: u64) -> Dataset {
    assert!(classes > 0 && size >= 4);
    let mut rng = Rng(seed ^ 0x5EED);
    // 4×4 coarse colour grid per class, upsampled: smooth, distinct, non-trivial.
    let templates: Vec<Vec<f32>> = (0..classes)
        .map(|_| (0..3 * 16).map(|_| 40.0 + 175.0 * rng.unit_f32()).collect())
        .collect();
    let mut make = |n: usize| -> Split {
        let mut images = Vec::with_capacity(n * 3 * size * size);
        let mut labels = Vec::with_capacity(n);
        for i in 0..n {
            let label = i % classes;
            let (dx, dy) = ((rng.next_u64() % 3) as usize, (rng.next_u64() % 3) as usize);
            let t = &templates[label];
            for c in 0..3 {
                for y in 0..size {
                    for x in 0..size {
                        let gy = ((y + dy) * 4 / (size + 2)).min(3);
                        let gx = ((x + dx) * 4 / (size + 2)).min(3);
                        let v = t[c * 16 + gy * 4 + gx] + 60.0 * (rng.unit_f32() - 0.5);
                        images.push(v.clamp(0.0, 255.0) as u8);
                    }
                }
            }
            labels.push(label as u8);
        }
        Split { images, labels }
    };
    let train = make(train_n);
    let test = make(test_n);
    let mut d = Dataset {
        name: format!("synthetic-{seed}"),
        classes: (0..classes).map(|c| format!("class{c}")).collect(),
        channels: 3,
        height: size,
        width: size,
        train,
        test,
        hash: String::new(),
    };
    d.hash = content_hash(&d);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_data_and_balanced_classes() {
        let a = synthetic(100, 20, 10, 32, 7);
        let b = synthetic(100, 20, 10, 32, 7);
        assert_eq!(a, b);
        assert_ne!(a.hash, synthetic(100, 20, 10, 32, 8).hash);
        assert_eq!(a.train.images.len(), 100 * 3 * 32 * 32);
        assert!((0..10u8).all(|c| a.train.labels.iter().filter(|&&l| l == c).count() == 10));
        let s = a.subset(Some(3), Some(1));
        assert_eq!((s.train.len(), s.test.len()), (30, 10));
    }
}
