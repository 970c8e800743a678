//! A data set written out as raw bytes for other programs: the parity
//! harness feeds the published reference scripts exactly the images tricklab
//! trains on, in the same order, through this layout.

use super::{Dataset, Split};
use anyhow::{Context, Result};
use std::path::Path;

/// Writes `meta.json`, then `{train,test}_images.u8` (N×H×W×C uint8, the
/// layout of torchvision's `CIFAR10.data`) and `{train,test}_labels.u8`
/// (one byte each), every file atomically.
pub fn export_raw(d: &Dataset, dir: &Path, order: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create {}; pick a writable --out", dir.display()))?;
    for (name, split) in [("train", &d.train), ("test", &d.test)] {
        let hwc = to_hwc(split, d.channels, d.height * d.width);
        let write = |file: String, bytes: &[u8]| {
            crate::util::write_atomic_with(&dir.join(&file), |f| {
                std::io::Write::write_all(f, bytes).map_err(Into::into)
            })
            .with_context(|| format!("writing {} (disk full?)", dir.join(&file).display()))
        };
        write(format!("{name}_images.u8"), &hwc)?;
        write(format!("{name}_labels.u8"), &split.labels)?;
    }
    let meta = serde_json::json!({
        "name": d.name,
        "classes": d.classes,
        "channels": d.channels,
        "height": d.height,
        "width": d.width,
        "train": d.train.len(),
        "test": d.test.len(),
        "hash": d.hash,
        "order": order,
        "layout": "N x H x W x C uint8 (torchvision CIFAR10.data); labels one byte each",
    });
    crate::util::write_atomic_with(&dir.join("meta.json"), |f| {
        serde_json::to_writer_pretty(f, &meta).map_err(Into::into)
    })
}

/// Planar C×H×W images → interleaved H×W×C.
fn to_hwc(split: &Split, channels: usize, pixels: usize) -> Vec<u8> {
    let size = channels * pixels;
    let mut out = vec![0u8; split.images.len()];
    for (img, dst) in split.images.chunks(size).zip(out.chunks_mut(size)) {
        for p in 0..pixels {
            for c in 0..channels {
                dst[p * channels + c] = img[c * pixels + p];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_writes_hwc_bytes_labels_and_meta() {
        let d = crate::data::synthetic(12, 4, 3, 8, 5);
        let dir = tempfile::tempdir().unwrap();
        export_raw(&d, dir.path(), "synthetic").unwrap();
        let train = std::fs::read(dir.path().join("train_images.u8")).unwrap();
        assert_eq!(train.len(), 12 * 8 * 8 * 3);
        // Image 1, pixel (row 2, col 5), channel 1 (green), both ways.
        let planar = d.train.images[(3 * 64) + 64 + 2 * 8 + 5];
        assert_eq!(train[(64 * 3) + (2 * 8 + 5) * 3 + 1], planar);
        let labels = std::fs::read(dir.path().join("test_labels.u8")).unwrap();
        assert_eq!(labels, d.test.labels);
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["train"], 12);
        assert_eq!(meta["hash"], d.hash.as_str());
        assert_eq!(meta["order"], "synthetic");
    }
}
