//! Image-folder data sets: `train/<class>/*.{jpg,jpeg,png}` and `test/<class>/*`,
//! from a folder or a `.tar.gz`, decoded in parallel and (with `import`)
//! cached so later loads skip the decoding.

use super::{CACHE_FILE, CIFAR10_CLASSES, Dataset, Split, content_hash, write_cache};
use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One image file before decoding.
pub(crate) struct RawImage {
    pub test: bool,
    pub class: String,
    /// Path as the user sees it, for messages.
    pub origin: String,
    pub bytes: Vec<u8>,
}

const EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// Reads and decodes an image tree (folder or `.tar.gz`) into a [`Dataset`].
pub fn read_image_tree(path: &Path, name: &str) -> Result<Dataset> {
    let files = if path.is_dir() {
        collect_dir(path)?
    } else {
        collect_targz(path)?
    };
    build(files, name, &path.display().to_string())
}

/// `tricklab data import`: decode once, write `DATA_DIR/NAME/dataset.tlds` atomically.
pub fn import(source: &Path, name: &str, data_dir: &Path) -> Result<(Dataset, PathBuf)> {
    if name.is_empty()
        || name.contains(['/', '\\'])
        || name == "embedded"
        || name.starts_with("synthetic")
    {
        bail!(
            "`{name}` cannot name a data set: use letters, digits, '-' or '_' (not embedded/synthetic)"
        );
    }
    let d = read_image_tree(source, name)?;
    let out = data_dir.join(name).join(CACHE_FILE);
    crate::util::write_atomic_with(&out, |f| write_cache(&d, &mut std::io::BufWriter::new(f)))
        .with_context(|| {
            format!(
                "import of {} into {} failed (disk full?); no cache was left behind",
                source.display(),
                out.display()
            )
        })?;
    Ok((d, out))
}

fn collect_dir(root: &Path) -> Result<Vec<RawImage>> {
    let mut files = Vec::new();
    for (split, test) in [("train", false), ("test", true)] {
        let dir = root.join(split);
        if split == "test" && !dir.is_dir() && root.join("val").is_dir() {
            // ImageNet's layout (train/ and val/) streams: it is imported
            // as a store, not decoded into the in-memory cache.
            bail!(
                "{}: a train/ + val/ folder (ImageNet's layout) streams: import it as a store with `tricklab data import {} --name NAME --max-side 256` (or train on the folder itself with --data {0})",
                root.display(),
                root.display()
            );
        }
        if !dir.is_dir() {
            bail!(
                "{}: missing `{split}/` folder; an image tree needs train/<class>/* and test/<class>/*",
                root.display()
            );
        }
        let rd = std::fs::read_dir(&dir).with_context(|| {
            format!(
                "cannot read folder {} (check its permissions)",
                dir.display()
            )
        })?;
        let mut any_class = false;
        for entry in rd {
            let class_dir = entry
                .with_context(|| format!("cannot read folder {}", dir.display()))?
                .path();
            if !class_dir.is_dir() {
                bail!(
                    "{}: stray file in {split}/ (only class folders belong there): move or delete it",
                    class_dir.display()
                );
            }
            any_class = true;
            let class = class_dir.file_name().unwrap().to_string_lossy().to_string();
            let inner = std::fs::read_dir(&class_dir).with_context(|| {
                format!(
                    "cannot read folder {} (check its permissions)",
                    class_dir.display()
                )
            })?;
            let mut count = 0;
            for f in inner {
                let p = f
                    .with_context(|| format!("cannot read folder {}", class_dir.display()))?
                    .path();
                let bytes = super::read_image_file(&p).with_context(|| p.display().to_string())?;
                files.push(RawImage {
                    test,
                    class: class.clone(),
                    origin: p.display().to_string(),
                    bytes,
                });
                count += 1;
            }
            if count == 0 {
                bail!(
                    "{}: empty class folder; add images or remove the folder",
                    class_dir.display()
                );
            }
        }
        if !any_class {
            bail!(
                "{}: no class folders; expected {split}/<class>/*.jpg",
                dir.display()
            );
        }
    }
    Ok(files)
}

fn collect_targz(archive: &Path) -> Result<Vec<RawImage>> {
    let file = std::fs::File::open(archive)
        .with_context(|| format!("cannot open {}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let mut files = Vec::new();
    let entries = tar
        .entries()
        .with_context(|| format!("{}: not a readable .tar.gz", archive.display()))?;
    for entry in entries {
        let mut entry = entry.with_context(|| {
            format!(
                "{}: truncated or corrupt archive; download it again",
                archive.display()
            )
        })?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.to_path_buf();
        let parts: Vec<String> = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().to_string())
            .filter(|c| c != ".")
            .collect();
        // Accept an optional single top-level folder around train/ and test/.
        let parts = match parts.iter().position(|p| p == "train" || p == "test") {
            Some(i) => &parts[i..],
            None => continue,
        };
        if parts.len() != 3 {
            bail!(
                "{}: {} is not at <split>/<class>/<file>; move it or delete it",
                archive.display(),
                path.display()
            );
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).with_context(|| {
            format!(
                "{}: truncated or corrupt archive at {}; download it again",
                archive.display(),
                path.display()
            )
        })?;
        files.push(RawImage {
            test: parts[0] == "test",
            class: parts[1].clone(),
            origin: format!("{}:{}", archive.display(), path.display()),
            bytes,
        });
    }
    if files.is_empty() {
        bail!(
            "{}: no images under train/<class>/ or test/<class>/",
            archive.display()
        );
    }
    Ok(files)
}

/// Class order: CIFAR-10's when the names are exactly CIFAR-10's, else sorted.
pub(crate) fn class_order(names: &[String]) -> Vec<String> {
    let mut sorted: Vec<String> = names.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut cifar: Vec<String> = CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect();
    cifar.sort();
    if sorted == cifar {
        CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect()
    } else {
        sorted
    }
}

/// Validates the tree, decodes every image in parallel and assembles the data set.
#[allow(
    clippy::too_many_lines,
    reason = "the import in one pass: decode, check, class-mixed order, cache"
)]
pub(crate) fn build(mut files: Vec<RawImage>, name: &str, origin: &str) -> Result<Dataset> {
    let mut train_classes: Vec<String> = files
        .iter()
        .filter(|f| !f.test)
        .map(|f| f.class.clone())
        .collect();
    let mut test_classes: Vec<String> = files
        .iter()
        .filter(|f| f.test)
        .map(|f| f.class.clone())
        .collect();
    train_classes.sort();
    train_classes.dedup();
    test_classes.sort();
    test_classes.dedup();
    if train_classes.is_empty() || test_classes.is_empty() {
        bail!("{origin}: needs images in both train/<class>/ and test/<class>/");
    }
    if train_classes != test_classes {
        let only_train: Vec<_> = train_classes
            .iter()
            .filter(|c| !test_classes.contains(c))
            .collect();
        let only_test: Vec<_> = test_classes
            .iter()
            .filter(|c| !train_classes.contains(c))
            .collect();
        bail!(
            "{origin}: class folders differ between train/ and test/ (only in train: {only_train:?}, only in test: {only_test:?}); make them match"
        );
    }
    if train_classes.len() > 256 {
        bail!(
            "{origin}: {} classes; at most 256 are supported",
            train_classes.len()
        );
    }
    let classes = class_order(&train_classes);
    let index: BTreeMap<&str, u8> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as u8))
        .collect();
    for f in &files {
        let ext = Path::new(&f.origin)
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if !EXTENSIONS.contains(&ext.as_str()) {
            bail!(
                "{}: not an image (.jpg, .jpeg or .png); remove it from the tree",
                f.origin
            );
        }
    }
    files.sort_by(|a, b| (a.test, &a.class, &a.origin).cmp(&(b.test, &b.class, &b.origin)));
    let decoded: Vec<(usize, usize, Vec<u8>)> = files
        .par_iter()
        .map(|f| {
            decode_chw(&f.bytes)
                .with_context(|| format!("{}: cannot decode image; replace or remove it", f.origin))
        })
        .collect::<Result<_>>()?;
    let (h, w) = (decoded[0].0, decoded[0].1);
    let mut train = Split {
        images: Vec::new(),
        labels: Vec::new(),
    };
    let mut test = Split {
        images: Vec::new(),
        labels: Vec::new(),
    };
    for (f, (fh, fw, px)) in files.iter().zip(decoded) {
        if (fh, fw) != (h, w) {
            bail!(
                "{}: image is {fw}x{fh} but {} is {w}x{h}; all images must share one size",
                f.origin,
                files[0].origin
            );
        }
        let split = if f.test { &mut test } else { &mut train };
        split.images.extend_from_slice(&px);
        split.labels.push(index[f.class.as_str()]);
    }
    let bytes = 3 * h * w;
    let (train, test) = (
        super::interleave_classes(&train, classes.len(), bytes),
        super::interleave_classes(&test, classes.len(), bytes),
    );
    let mut d = Dataset {
        name: name.to_string(),
        classes,
        channels: 3,
        height: h,
        width: w,
        train,
        test,
        hash: String::new(),
    };
    d.hash = content_hash(&d);
    Ok(d)
}

/// Decodes a JPEG or PNG into planar RGB (C×H×W), returning (height, width, bytes).
pub(crate) fn decode_chw(bytes: &[u8]) -> Result<(usize, usize, Vec<u8>)> {
    let img = image::load_from_memory(bytes)?.to_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    let raw = img.as_raw();
    let mut out = vec![0u8; 3 * h * w];
    for (i, px) in raw.chunks_exact(3).enumerate() {
        out[i] = px[0];
        out[h * w + i] = px[1];
        out[2 * h * w + i] = px[2];
    }
    Ok((h, w, out))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a PNG of `w`×`h` filled with `v` (tests build trees from these).
    pub fn png(w: u32, h: u32, v: u8) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(w, h, image::Rgb([v, v / 2, 255 - v]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    pub fn make_tree(root: &Path, classes: &[&str], per: usize) {
        for split in ["train", "test"] {
            for (ci, c) in classes.iter().enumerate() {
                let d = root.join(split).join(c);
                std::fs::create_dir_all(&d).unwrap();
                for i in 0..per {
                    std::fs::write(
                        d.join(format!("{i:04}.png")),
                        png(8, 8, (ci * 40 + i) as u8),
                    )
                    .unwrap();
                }
            }
        }
    }

    fn err(root: &Path) -> String {
        format!("{:#}", read_image_tree(root, "t").unwrap_err())
    }

    #[test]
    fn reads_a_tree_with_sorted_classes() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path(), &["b", "a"], 3);
        let d = read_image_tree(dir.path(), "t").unwrap();
        assert_eq!(d.classes, vec!["a", "b"]);
        assert_eq!(
            (d.train.len(), d.test.len(), d.height, d.width),
            (6, 6, 8, 8)
        );
        // The import order: the classes interleaved (IMPORT_ORDER).
        assert_eq!(d.train.labels, vec![0, 1, 0, 1, 0, 1]);
        // Planar layout: first pixel of the red plane, then green plane.
        assert_eq!(d.train.images[0], 40);
        assert_eq!(d.train.images[64], 20);
    }

    #[test]
    fn cifar_names_keep_cifar_order() {
        let names: Vec<String> = [
            "truck",
            "airplane",
            "cat",
            "bird",
            "automobile",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            class_order(&names)[0..3],
            ["airplane", "automobile", "bird"]
        );
    }

    #[test]
    fn bad_trees_give_one_line_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path(), &["a", "b"], 2);
        std::fs::create_dir_all(dir.path().join("train/c")).unwrap();
        let e = err(dir.path());
        assert!(
            e.contains("train/c") && e.contains("empty class folder"),
            "{e}"
        );

        std::fs::write(dir.path().join("train/c/x.png"), png(8, 8, 1)).unwrap();
        let e = err(dir.path());
        assert!(
            e.contains("differ between train/ and test/") && e.contains("\"c\""),
            "{e}"
        );
        std::fs::remove_dir_all(dir.path().join("train/c")).unwrap();

        std::fs::write(dir.path().join("train/a/notes.txt"), b"hi").unwrap();
        let e = err(dir.path());
        assert!(e.contains("notes.txt") && e.contains("not an image"), "{e}");
        std::fs::remove_file(dir.path().join("train/a/notes.txt")).unwrap();

        std::fs::write(dir.path().join("train/a/bad.jpg"), b"\xff\xd8garbage").unwrap();
        let e = err(dir.path());
        assert!(e.contains("bad.jpg") && e.contains("cannot decode"), "{e}");
        std::fs::remove_file(dir.path().join("train/a/bad.jpg")).unwrap();

        std::fs::write(dir.path().join("test/b/big.png"), png(9, 8, 1)).unwrap();
        let e = err(dir.path());
        assert!(e.contains("big.png") && e.contains("share one size"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn import_writes_a_cache_that_reloads_identically() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(&dir.path().join("tree"), &["a", "b"], 2);
        let data = dir.path().join("data");
        let (d, path) = import(&dir.path().join("tree"), "mini", &data).unwrap();
        assert_eq!(path, data.join("mini").join(CACHE_FILE));
        let again = crate::data::load(path.to_str().unwrap()).unwrap();
        assert_eq!(d, again);
        assert!(import(&dir.path().join("tree"), "a/b", &data).is_err());
    }
}
