//! The embedded default data set: a real-image CIFAR-10 subset compiled into
//! the binary (assets/embedded-cifar10.tlej, made by scripts/make_embedded.py),
//! so every command works offline from any folder.

use super::folder::decode_chw;
use super::{Dataset, Split, content_hash, interleave_classes};
use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use std::sync::OnceLock;

pub static EMBEDDED: &[u8] = include_bytes!("../../assets/embedded-cifar10.tlej");

#[derive(serde::Deserialize)]
struct Header {
    name: String,
    classes: Vec<String>,
    height: usize,
    width: usize,
    train: usize,
    test: usize,
}

/// Decoded once per process; later calls clone the cached copy.
pub fn load_embedded() -> Result<Dataset> {
    static CACHE: OnceLock<Dataset> = OnceLock::new();
    if let Some(d) = CACHE.get() {
        return Ok(d.clone());
    }
    let d = parse(EMBEDDED).context("the embedded data set is damaged; rebuild tricklab")?;
    Ok(CACHE.get_or_init(|| d).clone())
}

/// Parses a `.tlej` container: JSON header, then (label u8, length u32, JPEG bytes) records.
pub fn make_embedded(bytes: &[u8]) -> Result<Dataset> {
    parse(bytes)
}

fn parse(bytes: &[u8]) -> Result<Dataset> {
    if bytes.len() < 16 || &bytes[..8] != b"TLEJ\x01\0\0\0" {
        bail!("not an embedded data container");
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into()?) as usize;
    let h: Header = serde_json::from_slice(bytes.get(16..16 + len).context("short header")?)?;
    let mut pos = 16 + len;
    let mut records = Vec::with_capacity(h.train + h.test);
    for _ in 0..h.train + h.test {
        let label = *bytes.get(pos).context("short record")?;
        let n = u32::from_le_bytes(
            bytes
                .get(pos + 1..pos + 5)
                .context("short record")?
                .try_into()?,
        ) as usize;
        records.push((
            label,
            bytes.get(pos + 5..pos + 5 + n).context("short record")?,
        ));
        pos += 5 + n;
    }
    let decoded: Vec<Vec<u8>> = records
        .par_iter()
        .map(|(_, jpeg)| {
            let (ih, iw, px) = decode_chw(jpeg)?;
            if (ih, iw) != (h.height, h.width) {
                bail!("image of {iw}x{ih}, expected {}x{}", h.width, h.height);
            }
            Ok(px)
        })
        .collect::<Result<_>>()?;
    // The container lists the images class by class; the data set takes the
    // import order (`IMPORT_ORDER`), so its first images mix every class.
    let (bytes, classes) = (3 * h.height * h.width, h.classes.len());
    let split = |range: std::ops::Range<usize>| {
        let by_class = Split {
            images: decoded[range.clone()].concat(),
            labels: records[range].iter().map(|r| r.0).collect(),
        };
        interleave_classes(&by_class, classes, bytes)
    };
    let mut d = Dataset {
        name: h.name,
        classes: h.classes,
        channels: 3,
        height: h.height,
        width: h.width,
        train: split(0..h.train),
        test: split(h.train..h.train + h.test),
        hash: String::new(),
    };
    d.hash = content_hash(&d);
    Ok(d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_is_balanced_real_cifar() {
        let d = super::load_embedded().unwrap();
        assert_eq!((d.train.len(), d.test.len()), (4000, 1000));
        assert_eq!(d.classes[0], "airplane");
        assert!(d.class_counts(&d.train).iter().all(|&c| c == 400));
        assert!(d.class_counts(&d.test).iter().all(|&c| c == 100));
        // Real photos: far from constant.
        let px = &d.train.images[..3072];
        assert!(px.iter().max().unwrap() - px.iter().min().unwrap() > 50);
        assert_eq!(super::load_embedded().unwrap().hash, d.hash);
        assert!(super::make_embedded(b"nope").is_err());
    }
}
