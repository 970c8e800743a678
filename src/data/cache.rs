//! The binary cache of an imported data set: a JSON header (with the content
//! hash, so a reload need not rehash 180 MB) followed by raw bytes.

use super::{Dataset, IMPORT_ORDER, Split, content_hash, interleave_classes};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"TLDS\x01\0\0\0";

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Header {
    pub name: String,
    pub classes: Vec<String>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub train: usize,
    pub test: usize,
    pub hash: String,
    /// How the images are ordered (`IMPORT_ORDER`); absent in caches written
    /// before the import interleaved the classes.
    #[serde(default)]
    pub order: Option<String>,
}

/// Streams the data set into `w`. Any write error (a full disk) comes back as
/// an error; the caller writes through a temp file so no partial cache survives.
pub fn write_cache(d: &Dataset, w: &mut impl Write) -> Result<()> {
    let header = Header {
        name: d.name.clone(),
        classes: d.classes.clone(),
        channels: d.channels,
        height: d.height,
        width: d.width,
        train: d.train.len(),
        test: d.test.len(),
        hash: d.hash.clone(),
        order: Some(IMPORT_ORDER.to_string()),
    };
    let json = serde_json::to_vec(&header)?;
    w.write_all(MAGIC)?;
    w.write_all(&(json.len() as u64).to_le_bytes())?;
    w.write_all(&json)?;
    for s in [&d.train, &d.test] {
        w.write_all(&s.images)?;
        w.write_all(&s.labels)?;
    }
    w.flush()?;
    Ok(())
}

pub(crate) fn read_header(path: &Path) -> Result<Header> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read_header_from(&mut f, path)
}

fn read_header_from(r: &mut impl Read, path: &Path) -> Result<Header> {
    let bad = || {
        format!(
            "{}: not a tricklab data cache (or damaged); re-run `tricklab data import`",
            path.display()
        )
    };
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).with_context(bad)?;
    if &magic != MAGIC {
        bail!(bad());
    }
    let mut len = [0u8; 8];
    r.read_exact(&mut len).with_context(bad)?;
    let len = u64::from_le_bytes(len) as usize;
    if len > 1 << 24 {
        bail!(bad());
    }
    let mut json = vec![0u8; len];
    r.read_exact(&mut json).with_context(bad)?;
    serde_json::from_slice(&json).with_context(bad)
}

pub fn read_cache(path: &Path) -> Result<Dataset> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut cur = std::io::Cursor::new(&bytes[..]);
    let h = read_header_from(&mut cur, path)?;
    let mut pos = cur.position() as usize;
    let sz = h.channels * h.height * h.width;
    let need = pos + (h.train + h.test) * (sz + 1);
    if bytes.len() != need {
        bail!(
            "{}: cache is {} bytes but its header promises {need}; it is truncated or damaged, re-run `tricklab data import`",
            path.display(),
            bytes.len()
        );
    }
    let mut take = |n: usize| {
        let s = bytes[pos..pos + n].to_vec();
        pos += n;
        s
    };
    let train = Split {
        images: take(h.train * sz),
        labels: take(h.train),
    };
    let test = Split {
        images: take(h.test * sz),
        labels: take(h.test),
    };
    if let Some(l) = train
        .labels
        .iter()
        .chain(&test.labels)
        .find(|&&l| l as usize >= h.classes.len())
    {
        bail!(
            "{}: label {l} out of range for {} classes; re-run `tricklab data import`",
            path.display(),
            h.classes.len()
        );
    }
    let d = Dataset {
        name: h.name,
        classes: h.classes,
        channels: h.channels,
        height: h.height,
        width: h.width,
        train,
        test,
        hash: h.hash,
    };
    match h.order.as_deref() {
        Some(IMPORT_ORDER) => Ok(d),
        Some(other) => bail!(
            "{}: images in `{other}` order, which this tricklab does not know; re-run `tricklab data import`",
            path.display()
        ),
        None => reorder_old_cache(d, path),
    }
}

/// A cache from before the import interleaved the classes holds them class
/// by class (the old import sorted by class, then file name), so the new
/// order follows from it exactly: reorder, rewrite the cache (when the folder
/// is writable) and say so once.
fn reorder_old_cache(mut d: Dataset, path: &Path) -> Result<Dataset> {
    let sorted = |l: &[u8]| l.windows(2).all(|w| w[0] <= w[1]);
    if !sorted(&d.train.labels) || !sorted(&d.test.labels) {
        bail!(
            "{}: an old cache whose images are not in class order; re-run `tricklab data import` on its source",
            path.display()
        );
    }
    let bytes = d.image_bytes();
    d.train = interleave_classes(&d.train, d.classes.len(), bytes);
    d.test = interleave_classes(&d.test, d.classes.len(), bytes);
    d.hash = content_hash(&d);
    let rewritten =
        crate::util::write_atomic_with(path, |f| write_cache(&d, &mut std::io::BufWriter::new(f)));
    eprintln!(
        "note: {} was imported in class order; its classes are now interleaved ({}), data hash {}",
        path.display(),
        match rewritten {
            Ok(()) => "cache rewritten".to_string(),
            Err(e) => format!("in memory only: {}", crate::util::one_line(&e)),
        },
        &d.hash[..12]
    );
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FullDisk(usize);
    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 < buf.len() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "No space left on device",
                ));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_class_ordered_cache_from_an_older_import_is_interleaved_and_rewritten() {
        let mut d = crate::data::synthetic(30, 10, 3, 8, 2);
        // The old import's layout: sorted by class, no order in the header.
        let mut idx: Vec<usize> = (0..d.train.len()).collect();
        idx.sort_by_key(|&i| d.train.labels[i]);
        let sz = d.image_bytes();
        d.train = Split {
            images: idx
                .iter()
                .flat_map(|&i| d.train.images[i * sz..(i + 1) * sz].to_vec())
                .collect(),
            labels: idx.iter().map(|&i| d.train.labels[i]).collect(),
        };
        d.test.labels.sort();
        d.hash = content_hash(&d);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.tlds");
        crate::util::write_atomic_with(&p, |f| write_cache(&d, f)).unwrap();
        // Strip `order` from the header, as an older tricklab wrote it.
        let bytes = std::fs::read(&p).unwrap();
        let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let mut h: serde_json::Value = serde_json::from_slice(&bytes[16..16 + len]).unwrap();
        h.as_object_mut().unwrap().remove("order");
        let h = serde_json::to_vec(&h).unwrap();
        let mut old = b"TLDS\x01\0\0\0".to_vec();
        old.extend((h.len() as u64).to_le_bytes());
        old.extend(&h);
        old.extend(&bytes[16 + len..]);
        std::fs::write(&p, &old).unwrap();

        let got = read_cache(&p).unwrap();
        assert_eq!(&got.train.labels[..6], &[0, 1, 2, 0, 1, 2]);
        assert_ne!(got.hash, d.hash);
        assert_eq!(
            read_header(&p).unwrap().order.as_deref(),
            Some(IMPORT_ORDER)
        );
        assert_eq!(read_cache(&p).unwrap(), got);
    }

    #[test]
    fn roundtrip_truncation_and_full_disk() {
        let d = crate::data::synthetic(20, 10, 10, 8, 1);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tlds");
        crate::util::write_atomic_with(&p, |f| write_cache(&d, f)).unwrap();
        assert_eq!(read_cache(&p).unwrap(), d);

        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 7]).unwrap();
        let e = format!("{:#}", read_cache(&p).unwrap_err());
        assert!(e.contains("truncated") && e.contains("x.tlds"), "{e}");

        let e = write_cache(&d, &mut FullDisk(1000)).unwrap_err();
        assert!(format!("{e:#}").contains("No space left"));
        // Through the atomic writer, a failing fill leaves the old cache untouched.
        std::fs::write(&p, &bytes).unwrap();
        let r = crate::util::write_atomic_with(&p, |_| write_cache(&d, &mut FullDisk(10)));
        assert!(r.is_err());
        assert_eq!(read_cache(&p).unwrap(), d);
    }
}
