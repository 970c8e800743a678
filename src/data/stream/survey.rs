//! `tricklab data check DIR` on a streaming folder: images per class and the
//! spread of their sizes, from the files' headers alone (an ImageNet-sized
//! folder is not decoded to be checked), and the files whose header is not
//! an image's or that end before a JPEG's end-of-image marker.

use super::{Entry, FolderIndex};
use anyhow::Result;
use rayon::prelude::*;

/// Width and height from a JPEG's frame header or a PNG's IHDR, with the
/// loader's own checks and words (`decode::header`).
pub fn dimensions(bytes: &[u8]) -> Result<(usize, usize)> {
    super::decode::header(bytes)
}

/// Nearest-rank percentiles of a sorted slice.
fn pct(sorted: &[usize], q: f64) -> usize {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// A file's width, height and bytes, or why its header is not an image's.
type Header = Result<(usize, usize, u64)>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplitSurvey {
    /// Images a class, in the index's class order.
    pub per_class: Vec<usize>,
    /// Short and long sides, sorted.
    pub short: Vec<usize>,
    pub long: Vec<usize>,
    /// Long over short side, as 1000ths, sorted.
    pub aspect_milli: Vec<usize>,
    pub bytes: u64,
    /// One line per file whose header is not an image's.
    pub bad: Vec<String>,
}

impl SplitSurvey {
    fn of(entries: &[Entry], classes: usize) -> SplitSurvey {
        let read: Vec<(u32, Header)> = entries
            .par_iter()
            .map(|e| {
                let r = crate::data::read_image_file(&e.path)
                    .and_then(|b| dimensions(&b).map(|(w, h)| (w, h, b.len() as u64)));
                (e.label, r)
            })
            .collect();
        let mut s = SplitSurvey {
            per_class: vec![0; classes],
            ..SplitSurvey::default()
        };
        for ((label, r), e) in read.into_iter().zip(entries) {
            match r {
                Ok((w, h, n)) => {
                    s.per_class[label as usize] += 1;
                    let (lo, hi) = (w.min(h).max(1), w.max(h));
                    s.short.push(lo);
                    s.long.push(hi);
                    s.aspect_milli.push(hi * 1000 / lo);
                    s.bytes += n;
                }
                Err(err) => s.bad.push(format!("{}: {err:#}", e.path.display())),
            }
        }
        s.short.sort_unstable();
        s.long.sort_unstable();
        s.aspect_milli.sort_unstable();
        s
    }

    pub fn images(&self) -> usize {
        self.short.len()
    }

    /// "short side 240 / 333 / 500 px (5% / median / 95%)" and the like.
    pub fn spread(&self) -> String {
        let p = |v: &[usize]| format!("{} / {} / {}", pct(v, 0.05), pct(v, 0.5), pct(v, 0.95));
        let a = |q: f64| pct(&self.aspect_milli, q) as f64 / 1000.0;
        format!(
            "short side {} px, long side {} px, long:short {:.2} / {:.2} / {:.2} (5% / median / 95%), largest {:.1}:1; {:.0} KB a file",
            p(&self.short),
            p(&self.long),
            a(0.05),
            a(0.5),
            a(0.95),
            a(1.0),
            self.bytes as f64 / self.images().max(1) as f64 / 1024.0
        )
    }
}

#[derive(Clone, Debug)]
pub struct Survey {
    pub train: SplitSurvey,
    pub val: SplitSurvey,
}

pub fn survey(index: &FolderIndex) -> Survey {
    Survey {
        train: SplitSurvey::of(&index.train, index.classes.len()),
        val: SplitSurvey::of(&index.val, index.classes.len()),
    }
}

/// Problems worth stopping for: files whose header is not an image's and
/// empty classes. Uneven classes are not one here (ImageNet's train classes
/// hold 732 to 1,300 images); `data check` prints the range instead.
pub fn problems(index: &FolderIndex, s: &Survey) -> Vec<String> {
    let mut out = Vec::new();
    for (name, split) in [("train", &s.train), ("val", &s.val)] {
        out.extend(split.bad.iter().cloned());
        if split.images() == 0 {
            if name == "train" {
                out.push("train: no readable images".into());
            }
            continue;
        }
        for (c, &n) in split.per_class.iter().enumerate() {
            if n == 0 {
                out.push(format!("{name}: class {} has no images", index.classes[c]));
            }
        }
    }
    out
}
