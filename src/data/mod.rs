//! Data sets: every source loads into one in-memory form, [`Dataset`].

mod synthetic;

pub use synthetic::synthetic;

use sha2::{Digest, Sha256};

/// Images of one split, uint8, laid out N×C×H×W (CIFAR's own record layout).
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub name: String,
    pub classes: Vec<String>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub train: Split,
    pub test: Split,
    /// Hex sha256 over shapes, class names, images and labels (see [`content_hash`]).
    pub hash: String,
}

impl Dataset {
    pub fn image_bytes(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// The first `train_per_class` / `test_per_class` images of each class, in
    /// the original order; the hash is recomputed.
    pub fn subset(&self, train_per_class: Option<usize>, test_per_class: Option<usize>) -> Dataset {
        let take = |split: &Split, per: Option<usize>| -> Split {
            let Some(per) = per else { return split.clone() };
            let mut counts = vec![0usize; self.classes.len()];
            let sz = self.image_bytes();
            let mut out = Split {
                images: Vec::new(),
                labels: Vec::new(),
            };
            for (i, &l) in split.labels.iter().enumerate() {
                let c = &mut counts[l as usize];
                if *c < per {
                    *c += 1;
                    out.labels.push(l);
                    out.images
                        .extend_from_slice(&split.images[i * sz..(i + 1) * sz]);
                }
            }
            out
        };
        let mut d = Dataset {
            name: self.name.clone(),
            classes: self.classes.clone(),
            channels: self.channels,
            height: self.height,
            width: self.width,
            train: take(&self.train, train_per_class),
            test: take(&self.test, test_per_class),
            hash: String::new(),
        };
        d.hash = content_hash(&d);
        d
    }
}

/// A hash of everything that defines the data, so results can name exactly what they trained on.
pub fn content_hash(d: &Dataset) -> String {
    let mut h = Sha256::new();
    h.update(
        format!(
            "{}x{}x{};{}",
            d.channels,
            d.height,
            d.width,
            d.classes.join(",")
        )
        .as_bytes(),
    );
    for s in [&d.train, &d.test] {
        h.update((s.len() as u64).to_le_bytes());
        h.update(&s.labels);
        h.update(&s.images);
    }
    hex::encode(h.finalize())
}

#[derive(clap::Args, Debug)]
pub struct DataArgs {}

pub fn cmd_data(_args: DataArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`tricklab data` is not built yet")
}

/// Where imported and downloaded data sets live: `$TRICKLAB_DATA`, else `./data`.
pub fn data_dir() -> std::path::PathBuf {
    std::env::var_os("TRICKLAB_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("data"))
}
