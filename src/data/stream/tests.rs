use super::synth::{SynthSpec, imagenet_like, photo};
use super::*;
use std::sync::Arc;

fn small_spec() -> SynthSpec {
    SynthSpec {
        seed: 7,
        ..SynthSpec::small(4, 6, 2)
    }
}

fn folder(spec: &SynthSpec) -> (tempfile::TempDir, FolderIndex) {
    let dir = tempfile::tempdir().unwrap();
    imagenet_like(dir.path(), spec).unwrap();
    let idx = FolderIndex::open(dir.path()).unwrap();
    (dir, idx)
}

fn epoch(idx: &FolderIndex, pipe: Pipeline, opts: &LoaderOptions) -> Vec<Batch> {
    Loader::new(Arc::new(idx.train.clone()), pipe, opts)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

const TRAIN_PIPE: Pipeline = Pipeline {
    size: 24,
    crop: Crop::TRAIN,
    flip: true,
};

#[test]
fn a_folder_indexes_its_classes_in_name_order_with_train_and_val() {
    let (_d, idx) = folder(&small_spec());
    assert_eq!(
        idx.classes,
        ["n00000000", "n00000001", "n00000002", "n00000003"]
    );
    assert_eq!(idx.train.len(), 24);
    assert_eq!(idx.val.len(), 8);
    assert!(idx.train[..6].iter().all(|e| e.label == 0));
    assert!(idx.val.iter().all(|e| {
        e.path
            .to_string_lossy()
            .contains(&format!("n{:08}", e.label))
    }));
    assert!(idx.notes.is_empty());
}

#[test]
fn the_same_seed_gives_the_same_bytes_whatever_the_thread_count() {
    let (_d, idx) = folder(&small_spec());
    let opts = LoaderOptions {
        batch: 8,
        seed: 3,
        ..LoaderOptions::default()
    };
    let one = epoch(
        &idx,
        TRAIN_PIPE,
        &LoaderOptions {
            workers: 1,
            ..opts.clone()
        },
    );
    let four = epoch(
        &idx,
        TRAIN_PIPE,
        &LoaderOptions {
            workers: 4,
            prefetch: 1,
            ..opts.clone()
        },
    );
    assert_eq!(one.len(), 3);
    for (a, b) in one.iter().zip(&four) {
        assert_eq!(a.labels, b.labels);
        assert_eq!(a.images, b.images);
        assert_eq!(a.images.len(), 8 * 24 * 24 * 3);
    }
    // Another epoch: another order and other crops.
    let next = epoch(&idx, TRAIN_PIPE, &LoaderOptions { epoch: 1, ..opts });
    assert_ne!(
        one.iter()
            .flat_map(|b| b.labels.clone())
            .collect::<Vec<_>>(),
        next.iter()
            .flat_map(|b| b.labels.clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn ranks_split_each_global_batch_and_together_make_it() {
    let (_d, idx) = folder(&small_spec());
    let opts = LoaderOptions {
        batch: 8,
        seed: 1,
        workers: 2,
        ..LoaderOptions::default()
    };
    let whole = epoch(&idx, TRAIN_PIPE, &opts);
    let ranks: Vec<Vec<Batch>> = (0..2)
        .map(|rank| {
            epoch(
                &idx,
                TRAIN_PIPE,
                &LoaderOptions {
                    rank,
                    world: 2,
                    ..opts.clone()
                },
            )
        })
        .collect();
    let px = 24 * 24 * 3;
    for (b, w) in whole.iter().enumerate() {
        for (p, label) in w.labels.iter().enumerate() {
            let r = &ranks[p % 2][b];
            assert_eq!(r.len(), 4);
            assert_eq!(r.labels[p / 2], *label);
            assert_eq!(
                r.images[p / 2 * px..(p / 2 + 1) * px],
                w.images[p * px..(p + 1) * px]
            );
        }
    }
}

#[test]
fn validation_keeps_the_last_partial_batch_in_folder_order() {
    let (_d, idx) = folder(&small_spec());
    let pipe = Pipeline {
        size: 16,
        crop: Crop::VAL,
        flip: false,
    };
    let opts = LoaderOptions {
        batch: 3,
        shuffle: false,
        drop_last: false,
        ..LoaderOptions::default()
    };
    let got: Vec<Batch> = Loader::new(Arc::new(idx.val.clone()), pipe, &opts)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got.iter().map(Batch::len).collect::<Vec<_>>(), [3, 3, 2]);
    let labels: Vec<i64> = got.iter().flat_map(|b| b.labels.clone()).collect();
    assert_eq!(labels, [0, 0, 1, 1, 2, 2, 3, 3]);
}

#[test]
fn random_resized_crops_stay_inside_any_image_and_match_torchvision_fallbacks() {
    let mut g = SplitMix(5);
    for &(w, h) in &[
        (1, 1),
        (500, 375),
        (375, 500),
        (2000, 100),
        (100, 2000),
        (3, 224),
    ] {
        for _ in 0..200 {
            let c = resample::random_resized(w, h, (0.08, 1.0), (0.75, 4.0 / 3.0), || g.unit_f64());
            assert!(c.w >= 1.0 && c.h >= 1.0, "{w}x{h}: {c:?}");
            assert!(c.x >= 0.0 && c.y >= 0.0, "{w}x{h}: {c:?}");
            assert!(
                c.x + c.w <= w as f64 && c.y + c.h <= h as f64,
                "{w}x{h}: {c:?}"
            );
        }
    }
    // 20:1 never fits a 3:4..4:3 box of the area drawn: the fallback clamps
    // the whole image's ratio to 4:3 and centres it, as torchvision does.
    let c = resample::random_resized(2000, 100, (0.08, 1.0), (0.75, 4.0 / 3.0), || 0.99);
    assert_eq!((c.w, c.h), (133.0, 100.0));
    assert_eq!(c.x, ((2000.0 - 133.0) / 2.0_f64).floor());
    let v = resample::centre(400, 300, 0.875);
    assert_eq!((v.w, v.h, v.x, v.y), (262.5, 262.5, 68.75, 18.75));
}

#[test]
fn resampling_keeps_flat_images_flat_copies_at_scale_one_and_mirrors() {
    let flat = decode::Rgb {
        width: 37,
        height: 23,
        pixels: [10u8, 200, 77].repeat(37 * 23),
    };
    let mut out = vec![0u8; 16 * 16 * 3];
    let crop = resample::CropBox {
        x: 3.0,
        y: 2.0,
        w: 30.0,
        h: 19.0,
    };
    resample::resample(&flat, crop, 16, 16, false, &mut out);
    assert!(
        out.chunks(3).all(|p| p == [10, 200, 77]),
        "a flat image stays flat: no black border"
    );
    let mut g = SplitMix(1);
    let ramp = decode::Rgb {
        width: 8,
        height: 4,
        pixels: (0..8 * 4 * 3).map(|_| (g.next_u64() % 256) as u8).collect(),
    };
    let whole = resample::CropBox {
        x: 0.0,
        y: 0.0,
        w: 8.0,
        h: 4.0,
    };
    let mut same = vec![0u8; 8 * 4 * 3];
    resample::resample(&ramp, whole, 8, 4, false, &mut same);
    assert_eq!(same, ramp.pixels, "scale 1 is a copy");
    let mut flipped = vec![0u8; 8 * 4 * 3];
    resample::resample(&ramp, whole, 8, 4, true, &mut flipped);
    for y in 0..4 {
        for x in 0..8 {
            let a = &flipped[(y * 8 + x) * 3..(y * 8 + x) * 3 + 3];
            let b = &ramp.pixels[(y * 8 + 7 - x) * 3..(y * 8 + 7 - x) * 3 + 3];
            assert_eq!(a, b);
        }
    }
    // Downscaling averages: a 1-px checkerboard halves to mid grey, not to
    // whichever pixels a nearest sample would hit.
    let checker = decode::Rgb {
        width: 16,
        height: 16,
        pixels: (0..256)
            .flat_map(|i| [if (i % 16 + i / 16) % 2 == 0 { 0 } else { 255 }; 3])
            .collect(),
    };
    let mut half = vec![0u8; 8 * 8 * 3];
    let all = resample::CropBox {
        x: 0.0,
        y: 0.0,
        w: 16.0,
        h: 16.0,
    };
    resample::resample(&checker, all, 8, 8, false, &mut half);
    assert!(half.iter().all(|&v| (100..=155).contains(&v)), "{half:?}");
}

/// Every kind of bad input the issue lists: each either decodes correctly or
/// is left out with one line naming it, per the user's choice.
#[test]
#[allow(clippy::too_many_lines, reason = "one case per kind of bad input")]
fn bad_images_decode_correctly_or_are_skipped_or_fail_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut g = SplitMix(2);
    let good = photo(0, 64, 48, 90, &mut g).unwrap();
    let a = root.join("train/a");
    let b = root.join("train/b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(root.join("train/empty")).unwrap();
    std::fs::write(a.join("good.JPEG"), &good).unwrap();
    std::fs::write(a.join("truncated.JPEG"), &good[..good.len() / 2]).unwrap();
    std::fs::write(a.join("text.JPEG"), b"this is not an image").unwrap();
    std::fs::write(a.join("notes.txt"), b"left out by name").unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cmyk.jpg"),
        b.join("cmyk.jpg"),
    )
    .unwrap();
    let save = |name: &str, img: image::DynamicImage| img.save(b.join(name)).unwrap();
    save(
        "grey.jpg",
        image::DynamicImage::ImageLuma8(image::GrayImage::from_fn(30, 20, |x, _| {
            image::Luma([(x * 8) as u8])
        })),
    );
    save(
        "deep.png",
        image::DynamicImage::ImageRgb16(image::ImageBuffer::from_fn(20, 10, |x, _| {
            image::Rgb([x as u16 * 3000, 65535, 0])
        })),
    );
    save(
        "alpha.png",
        image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
            12,
            12,
            image::Rgba([200, 100, 50, 0]),
        )),
    );
    save(
        "dot.png",
        image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(1, 1, image::Rgb([9, 99, 199]))),
    );
    save(
        "wide.png",
        image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(
            400,
            20,
            image::Rgb([50, 60, 70]),
        )),
    );

    let idx = FolderIndex::open(root).unwrap();
    assert_eq!(idx.classes, ["a", "b", "empty"]);
    assert_eq!(idx.notes.len(), 2, "{:?}", idx.notes);
    assert!(idx.notes[0].contains("train/empty: no images"));
    assert!(idx.notes[1].contains("1 files not named"));
    assert_eq!(idx.train.len(), 9);

    let pipe = Pipeline {
        size: 8,
        crop: Crop::VAL,
        flip: false,
    };
    let opts = LoaderOptions {
        batch: 9,
        shuffle: false,
        on_bad: OnBadImage::Skip,
        ..LoaderOptions::default()
    };
    let batches: Vec<Batch> = Loader::new(Arc::new(idx.train.clone()), pipe, &opts)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(batches.len(), 1);
    let batch = &batches[0];
    assert_eq!(
        batch.len(),
        7,
        "good, cmyk, grey, 16-bit, alpha, 1x1 and 20:1 decode"
    );
    assert_eq!(batch.skipped.len(), 2, "{:?}", batch.skipped);
    assert!(batch.skipped.iter().any(|s| s.contains("truncated.JPEG")));
    assert!(
        batch
            .skipped
            .iter()
            .any(|s| s.contains("text.JPEG") && s.contains("not a JPEG or PNG"))
    );
    // No image is blank: each decoded one carries its own colours.
    for img in batch.images.chunks(8 * 8 * 3) {
        assert!(img.iter().any(|&v| v != 0), "a black image was fed");
    }
    // The 1x1 dot is its colour everywhere; the 16-bit PNG kept its ramp.
    let kept: Vec<&Entry> = idx
        .train
        .iter()
        .filter(|e| {
            !["truncated.JPEG", "text.JPEG"]
                .iter()
                .any(|n| e.path.ends_with(n))
        })
        .collect();
    let at = kept
        .iter()
        .position(|e| e.path.ends_with("dot.png"))
        .unwrap();
    let dot = &batch.images[at * 192..(at + 1) * 192];
    assert!(dot.chunks(3).all(|p| p == [9, 99, 199]));
    let cmyk = decode::decode(&std::fs::read(b.join("cmyk.jpg")).unwrap()).unwrap();
    assert_eq!((cmyk.width, cmyk.height), (24, 16));
    let red = |x: usize| f64::from(cmyk.pixels[(8 * 24 + x) * 3]);
    assert!(
        red(2) > red(21) + 100.0,
        "cyan grows to the right, red falls: {} {}",
        red(2),
        red(21)
    );

    let fail = Loader::new(
        Arc::new(idx.train.clone()),
        pipe,
        &LoaderOptions {
            on_bad: OnBadImage::Fail,
            ..opts
        },
    )
    .unwrap()
    .find_map(Result::err)
    .expect("fail mode stops");
    let msg = format!("{fail:#}");
    assert!(
        msg.contains(".JPEG") && msg.contains("--on-bad-image skip"),
        "{msg}"
    );
}

#[test]
fn a_flat_val_folder_takes_its_labels_from_imagenets_csv() {
    let (d, _) = folder(&small_spec());
    let val = d.path().join("val");
    std::fs::rename(val.join("n00000002/00000.JPEG"), d.path().join("x.JPEG")).unwrap();
    std::fs::remove_dir_all(&val).unwrap();
    std::fs::create_dir(&val).unwrap();
    std::fs::rename(
        d.path().join("x.JPEG"),
        val.join("ILSVRC2012_val_00000001.JPEG"),
    )
    .unwrap();
    let err = FolderIndex::open(d.path()).unwrap_err();
    assert!(
        format!("{err:#}").contains("LOC_val_solution.csv"),
        "{err:#}"
    );
    std::fs::write(
        d.path().join("LOC_val_solution.csv"),
        "ImageId,PredictionString\nILSVRC2012_val_00000001,n00000002 1 2 3 4\n",
    )
    .unwrap();
    let idx = FolderIndex::open(d.path()).unwrap();
    assert_eq!(idx.val.len(), 1);
    assert_eq!(idx.val[0].label, 2);
}

#[test]
fn dropping_a_loader_mid_epoch_ends_its_thread_and_a_batch_converts_to_tensors() {
    let (_d, idx) = folder(&small_spec());
    let opts = LoaderOptions {
        batch: 4,
        prefetch: 1,
        ..LoaderOptions::default()
    };
    let mut l = Loader::new(Arc::new(idx.train.clone()), TRAIN_PIPE, &opts).unwrap();
    let b = l.next().unwrap().unwrap();
    let (x, y) = b.to_tensors(tch::Device::Cpu).unwrap();
    assert_eq!(x.size(), [4, 3, 24, 24]);
    assert_eq!(x.kind(), tch::Kind::Uint8);
    assert_eq!(y.size(), [4]);
    // Channel 0 of pixel (0, 0) of image 0 is the first byte.
    assert_eq!(x.int64_value(&[0, 0, 0, 0]), i64::from(b.images[0]));
    assert_eq!(x.int64_value(&[0, 2, 0, 1]), i64::from(b.images[5]));
    let st = l.stats();
    assert_eq!((st.batches, st.images), (1, 4));
    drop(l); // must not hang on the producer's full queue
}

#[test]
fn a_store_keeps_every_image_shrunk_to_its_max_side_in_folder_order() {
    let (d, idx) = folder(&small_spec());
    let out = d.path().join("store/images.tlst");
    let r = store::build(d.path(), &out, 32, 1.0, OnBadImage::Fail).unwrap();
    assert_eq!((r.train, r.val, r.skipped.len()), (24, 8, 0));
    assert!(
        !out.with_extension("tlst.part").exists(),
        "no side file left behind"
    );
    let s = store::Store::open(&out).unwrap();
    assert_eq!(s.header.classes, idx.classes);
    let train = s.split(false);
    assert_eq!(train.count(), 24);
    for i in 0..24 {
        assert_eq!(train.label(i), idx.train[i].label);
        let orig = decode::decode(&std::fs::read(&idx.train[i].path).unwrap()).unwrap();
        let img = train.pixels(i).unwrap();
        assert_eq!(img.width.max(img.height), 32, "the long side shrinks to 32");
        let (a, b) = (
            orig.width as f64 / orig.height as f64,
            img.width as f64 / img.height as f64,
        );
        assert!((a / b - 1.0).abs() < 0.1, "aspect kept: {a} vs {b}");
    }
    // The loader reads it as it reads the folder: same labels, same order.
    let opts = LoaderOptions {
        batch: 8,
        seed: 2,
        workers: 2,
        ..LoaderOptions::default()
    };
    let from_store: Vec<i64> = Loader::new(train, TRAIN_PIPE, &opts)
        .unwrap()
        .flat_map(|b| b.unwrap().labels)
        .collect();
    let from_folder: Vec<i64> = epoch(&idx, TRAIN_PIPE, &opts)
        .into_iter()
        .flat_map(|b| b.labels)
        .collect();
    assert_eq!(from_store, from_folder);
    // Raw: the shrunk pixels exactly, no re-encoding.
    let raw = d.path().join("raw.tlst");
    store::build(d.path(), &raw, 32, 0.0, OnBadImage::Fail).unwrap();
    let v = store::Store::open(&raw).unwrap().split(true);
    let orig = decode::decode(&std::fs::read(&idx.val[3].path).unwrap()).unwrap();
    let got = v.pixels(3).unwrap();
    let mut want = vec![0u8; got.width * got.height * 3];
    let all = resample::CropBox {
        x: 0.0,
        y: 0.0,
        w: orig.width as f64,
        h: orig.height as f64,
    };
    resample::resample(&orig, all, got.width, got.height, false, &mut want);
    assert_eq!(got.pixels, want);
}

/// FFCV's mixed store: each image JPEG with the asked probability (a draw
/// fixed by its position), the rest raw; both kinds read back, the raw ones
/// exactly; the loader reads it as it reads the folder.
#[test]
fn a_mixed_store_keeps_a_share_of_its_images_as_jpeg_and_the_rest_raw() {
    // The draw: about the share asked, and the same every import.
    let share =
        |f: f64| (0..20_000).filter(|&i| store::stored_as_jpeg(i, f)).count() as f64 / 20_000.0;
    assert!((share(0.1) - 0.1).abs() < 0.01 && (share(0.5) - 0.5).abs() < 0.02);
    assert_eq!((share(0.0), share(1.0)), (0.0, 1.0));
    let (d, idx) = folder(&small_spec());
    let out = d.path().join("mixed/images.tlst");
    let r = store::build(d.path(), &out, 32, 0.5, OnBadImage::Fail).unwrap();
    assert_eq!((r.train, r.val), (24, 8));
    let s = store::Store::open(&out).unwrap();
    assert_eq!(
        (s.header.format, s.header.jpeg_fraction),
        (store::Format::Mixed, Some(0.5))
    );
    let [(jpeg, jpeg_b), (raw, raw_b)] = s.composition();
    let want: usize = (0..32).filter(|&i| store::stored_as_jpeg(i, 0.5)).count();
    assert_eq!((jpeg, raw), (want, 32 - want));
    assert!(jpeg > 0 && raw > 0, "both kinds in 32 images at 0.5");
    assert!(
        raw_b / raw as u64 > jpeg_b / jpeg as u64,
        "raw images are the larger"
    );
    let train = s.split(false);
    for i in 0..24 {
        let orig = decode::decode(&std::fs::read(&idx.train[i].path).unwrap()).unwrap();
        let got = train.pixels(i).unwrap();
        let mut want = vec![0u8; got.width * got.height * 3];
        let all = resample::CropBox {
            x: 0.0,
            y: 0.0,
            w: orig.width as f64,
            h: orig.height as f64,
        };
        resample::resample(&orig, all, got.width, got.height, false, &mut want);
        let off = got
            .pixels
            .iter()
            .zip(&want)
            .map(|(a, b)| f64::from(a.abs_diff(*b)))
            .sum::<f64>()
            / want.len() as f64;
        if s.is_jpeg(i) {
            assert!(
                off > 0.0 && off < 12.0,
                "image {i}: JPEG q90 is close ({off})"
            );
        } else {
            assert_eq!(off, 0.0, "image {i}: raw is exact");
        }
    }
    let opts = LoaderOptions {
        batch: 8,
        seed: 2,
        workers: 2,
        ..LoaderOptions::default()
    };
    let labels: Vec<i64> = Loader::new(train, TRAIN_PIPE, &opts)
        .unwrap()
        .flat_map(|b| b.unwrap().labels)
        .collect();
    let from_folder: Vec<i64> = epoch(&idx, TRAIN_PIPE, &opts)
        .into_iter()
        .flat_map(|b| b.labels)
        .collect();
    assert_eq!(labels, from_folder);
}

/// A store's index is checked when it is opened: an altered byte fails its
/// checksum; a label past the classes or a raw image of the wrong size
/// (the checksum made to match) is named, with `data import` as the fix.
#[test]
fn a_store_with_a_damaged_index_is_refused_when_opened() {
    let (d, _) = folder(&small_spec());
    let out = d.path().join("s/images.tlst");
    store::build(d.path(), &out, 32, 0.0, OnBadImage::Fail).unwrap();
    let good = std::fs::read(&out).unwrap();
    let head = 16 + u64::from_le_bytes(good[8..16].try_into().unwrap()) as usize;
    // Record 3's label (bytes 12..16 of its 24) and its length (8..12).
    let with = |at: usize, v: u32, fix_sum: bool| {
        let mut b = good.clone();
        b[head + 3 * 24 + at..head + 3 * 24 + at + 4].copy_from_slice(&v.to_le_bytes());
        if fix_sum {
            let h: serde_json::Value = serde_json::from_slice(&good[16..head]).unwrap();
            let n = h["train"].as_u64().unwrap() + h["val"].as_u64().unwrap();
            let table = &b[head..head + 24 * n as usize];
            let sum = {
                use sha2::Digest;
                hex::encode(sha2::Sha256::digest(table))
            };
            let old = h["index_sha256"].as_str().unwrap().to_string();
            let text = String::from_utf8(b[16..head].to_vec())
                .unwrap()
                .replace(&old, &sum);
            b[16..head].copy_from_slice(text.as_bytes());
        }
        std::fs::write(&out, b).unwrap();
        format!("{:#}", store::Store::open(&out).err().expect("refused"))
    };
    let e = with(12, 999, false);
    assert!(
        e.contains("images.tlst") && e.contains("checksum") && e.contains("data import"),
        "{e}"
    );
    let e = with(12, 999, true);
    assert!(
        e.contains("image 3 has label 999 but the store has 4 classes"),
        "{e}"
    );
    let e = with(8, 5, true);
    assert!(
        e.contains("image 3 is raw") && e.contains("holds 5 bytes"),
        "{e}"
    );
    std::fs::write(&out, &good).unwrap();
    assert!(store::Store::open(&out).is_ok());
}

#[test]
fn a_store_refuses_a_bad_image_or_skips_it_and_a_cut_store_is_named() {
    let (d, idx) = folder(&small_spec());
    let bad = &idx.train[5].path;
    let bytes = std::fs::read(bad).unwrap();
    std::fs::write(bad, &bytes[..bytes.len() / 2]).unwrap();
    let out = d.path().join("s/images.tlst");
    let e = store::build(d.path(), &out, 32, 1.0, OnBadImage::Fail).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("00005.JPEG") && msg.contains("--on-bad-image skip"),
        "{msg}"
    );
    assert!(!out.exists() && !out.with_extension("tlst.part").exists());
    let r = store::build(d.path(), &out, 32, 1.0, OnBadImage::Skip).unwrap();
    assert_eq!((r.train, r.skipped.len()), (23, 1));
    // An empty class folder is named, as the cache import names it.
    let empty = d.path().join("train/zzz-empty");
    std::fs::create_dir(&empty).unwrap();
    let e = store::build(
        d.path(),
        &d.path().join("e.tlst"),
        32,
        1.0,
        OnBadImage::Skip,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("zzz-empty: empty class folder"),
        "{e}"
    );
    std::fs::remove_dir(&empty).unwrap();
    assert!(r.skipped[0].contains("00005.JPEG"));
    // A store cut short (a copy that stopped) is refused with its name and the fix.
    let all = std::fs::read(&out).unwrap();
    std::fs::write(&out, &all[..all.len() - 100]).unwrap();
    let e = store::Store::open(&out)
        .err()
        .expect("a cut store is refused");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("images.tlst") && msg.contains("truncated") && msg.contains("--max-side"),
        "{msg}"
    );
}

#[test]
fn rectangular_validation_sorts_by_aspect_and_crops_each_batch_to_its_rectangle() {
    // By hand, from imagenet18's sort_ar / map_idx2ar / CropArTfm.
    let dims = [(400, 300), (300, 400), (500, 500), (640, 360)];
    let p = rect::plan(&dims, 2, 224);
    assert_eq!(p.order, [1, 2, 0, 3]);
    // (0.75 + 1) / 2 = 0.875: 224 wide, int(224 / 0.875) = 256 high.
    // (1.33333 + 1.77778) / 2 = 1.55556: 224 high, int(348.45) = 348 → 344 wide.
    assert_eq!(p.sizes, [(256, 224), (224, 344)]);
    // 640x360 resized to 453x255 (short side int(224·1.14) = 255), centre
    // crop 344x224: left round(54.5) = 54 (Python's round), top round(15.5) = 16.
    let c = rect::crop_box(640, 360, 224, 344, 224);
    let (sx, sy) = (640.0 / 453.0, 360.0 / 255.0);
    for (got, want) in [
        (c.x, 54.0 * sx),
        (c.y, 16.0 * sy),
        (c.w, 344.0 * sx),
        (c.h, 224.0 * sy),
    ] {
        assert!((got - want).abs() < 1e-9, "{c:?}");
    }
    // A rectangle wider than the resized image stops at its edge: no black border.
    let c = rect::crop_box(300, 400, 224, 600, 224);
    assert!(c.x >= 0.0 && (c.x + c.w - 300.0).abs() < 1e-9, "{c:?}");

    let (_d, idx) = folder(&small_spec());
    let val: Arc<dyn Images> = Arc::new(idx.val.clone());
    let dims: Vec<(usize, usize)> = (0..val.count()).map(|i| val.dims(i).unwrap()).collect();
    let plan = rect::plan(&dims, 3, 16);
    let sorted: Arc<dyn Images> = Arc::new(Subset {
        inner: val,
        ids: plan.order.clone(),
    });
    let pipe = Pipeline {
        size: 16,
        crop: Crop::Rect,
        flip: false,
    };
    let opts = LoaderOptions {
        batch: 3,
        shuffle: false,
        drop_last: false,
        rect: Some(Arc::new(plan.sizes.clone())),
        ..LoaderOptions::default()
    };
    let batches: Vec<Batch> = Loader::new(sorted, pipe, &opts)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(batches.len(), 3);
    let mut labels = Vec::new();
    for (b, want) in batches.iter().zip(&plan.sizes) {
        assert_eq!((b.height, b.width), *want);
        assert_eq!(b.images.len(), b.len() * want.0 * want.1 * 3);
        assert!(want.0.min(want.1) == 16 && want.0.max(want.1) % 8 == 0);
        labels.extend(b.labels.iter().copied());
    }
    labels.sort_unstable();
    assert_eq!(labels, [0, 0, 1, 1, 2, 2, 3, 3]);
    // Rectangles are asked for, and checked.
    let wrong = LoaderOptions {
        rect: Some(Arc::new(vec![(16, 16)])),
        ..opts
    };
    assert!(Loader::new(Arc::new(idx.val.clone()), pipe, &wrong).is_err());
}

/// The `turbojpeg` feature's decoder: libjpeg-turbo at a DCT reduction the
/// crop allows gives the picture at 1/d of its sides, close to the full
/// decode shrunk (the IDCT's own scaling, not the same filter); a truncated
/// file is refused as zune-jpeg refuses it; CMYK goes to zune-jpeg, whole.
#[cfg(feature = "turbojpeg")]
#[test]
fn turbojpeg_decodes_at_a_dct_reduction_and_refuses_a_truncated_file() {
    use super::decode::{Want, decode, decode_reduced};
    let mut g = SplitMix(3);
    let bytes = photo(2, 400, 304, 90, &mut g).unwrap();
    let full = decode(&bytes).unwrap();
    let reduce = |d| Want {
        reduce: d,
        keep: None,
    };
    for d in [1usize, 2, 4, 8] {
        let got = decode_reduced(&bytes, &mut |w, h| {
            assert_eq!((w, h), (400, 304));
            reduce(d)
        })
        .unwrap();
        let (img, got) = (got.img, got.d);
        assert_eq!((got, img.width, img.height), (d, 400 / d, 304 / d));
        // Against the full decode averaged over d x d blocks.
        let mut err = 0.0;
        for y in 0..img.height {
            for x in 0..img.width {
                for c in 0..3 {
                    let mut s = 0.0;
                    for dy in 0..d {
                        for dx in 0..d {
                            let i = ((y * d + dy) * full.width + x * d + dx) * 3 + c;
                            s += f64::from(full.pixels[i]);
                        }
                    }
                    let v = f64::from(img.pixels[(y * img.width + x) * 3 + c]);
                    err += (v - s / (d * d) as f64).abs();
                }
            }
        }
        let mean = err / (img.width * img.height * 3) as f64;
        assert!(mean < 6.0, "1/{d}: mean difference {mean:.2} levels");
    }
    let cut = &bytes[..bytes.len() / 2];
    assert!(decode_reduced(cut, &mut |_, _| reduce(2)).is_err());
    let cmyk = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cmyk.jpg"
    ))
    .unwrap();
    let got = decode_reduced(&cmyk, &mut |_, _| reduce(4)).unwrap();
    let (img, d) = (got.img, got.d);
    assert_eq!((d, img.pixels.len()), (1, img.width * img.height * 3));
}

/// With the `turbojpeg` feature only the part of a JPEG around the crop is
/// decoded (libjpeg's skipped rows and cropped columns): its pixels are the
/// whole decode's, at every reduction and with 4:2:0 chroma (the upsampling
/// reaches across the part's edges); a part that would be the whole image
/// is decoded whole.
#[cfg(feature = "turbojpeg")]
#[test]
fn turbojpeg_decodes_only_the_part_around_a_crop_with_the_whole_decodes_pixels() {
    use super::decode::{Want, decode_reduced};
    use super::resample::CropBox;
    let mut g = SplitMix(5);
    let bytes = photo(1, 500, 375, 90, &mut g).unwrap();
    for d in [1usize, 2, 4] {
        let whole = decode_reduced(&bytes, &mut |_, _| Want {
            reduce: d,
            keep: None,
        })
        .unwrap()
        .img;
        let boxes = [
            (100.0, 90.0, 210.0, 150.0),
            (0.0, 200.0, 120.0, 175.0),
            (333.0, 1.0, 167.0, 60.0),
            (17.0, 300.5, 400.0, 74.5),
        ];
        for keep in boxes.map(|(x, y, w, h)| CropBox { x, y, w, h }) {
            let part = decode_reduced(&bytes, &mut |_, _| Want {
                reduce: d,
                keep: Some(keep),
            })
            .unwrap();
            let (ox, oy) = part.origin;
            assert_eq!(part.d, d);
            assert!(part.img.width * part.img.height < whole.width * whole.height);
            // The part covers the box at 1/d, and its pixels are the whole's.
            let df = d as f64;
            assert!(ox as f64 <= (keep.x / df).floor() && oy as f64 <= (keep.y / df).floor());
            assert!(
                (ox + part.img.width) as f64
                    >= ((keep.x + keep.w) / df).ceil().min(whole.width as f64)
                    && (oy + part.img.height) as f64
                        >= ((keep.y + keep.h) / df).ceil().min(whole.height as f64),
                "{keep:?} at 1/{d}: {}x{} at {ox},{oy}",
                part.img.width,
                part.img.height
            );
            for y in 0..part.img.height {
                let a = &part.img.pixels[y * part.img.width * 3..(y + 1) * part.img.width * 3];
                let at = ((oy + y) * whole.width + ox) * 3;
                let b = &whole.pixels[at..at + part.img.width * 3];
                assert!(
                    a == b,
                    "{keep:?} at 1/{d}: row {y} differs from the whole decode"
                );
            }
        }
    }
    // A box over the whole picture: decoded whole.
    let all = decode_reduced(&bytes, &mut |_, _| Want {
        reduce: 1,
        keep: Some(CropBox {
            x: -5.0,
            y: -5.0,
            w: 600.0,
            h: 400.0,
        }),
    })
    .unwrap();
    assert_eq!(
        (all.origin, all.img.width, all.img.height),
        ((0, 0), 500, 375)
    );
}

/// With the `turbojpeg` feature the loader's crops from parts of JPEGs are
/// its crops from the whole images, byte for byte (the part covers the
/// resampler's reach around the crop).
#[cfg(feature = "turbojpeg")]
#[test]
fn turbojpeg_crops_from_parts_equal_crops_from_whole_images() {
    use super::decode::{Want, decode_reduced};
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec {
        long_side: (300, 500),
        seed: 4,
        ..SynthSpec::small(2, 6, 1)
    };
    super::synth::imagenet_like(dir.path(), &spec).unwrap();
    let idx = FolderIndex::open(dir.path()).unwrap();
    struct Whole(Vec<super::Entry>);
    impl Images for Whole {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn label(&self, i: usize) -> u32 {
            self.0[i].label
        }
        fn name(&self, i: usize) -> String {
            self.0.name(i)
        }
        fn pixels(&self, i: usize) -> anyhow::Result<super::decode::Rgb> {
            self.0.pixels(i)
        }
        // The same decoder at the same reduction, whole.
        fn pixels_reduced(
            &self,
            i: usize,
            choose: &mut dyn FnMut(usize, usize) -> Want,
        ) -> anyhow::Result<super::decode::Decoded> {
            let bytes = std::fs::read(&self.0[i].path)?;
            decode_reduced(&bytes, &mut |w, h| Want {
                keep: None,
                ..choose(w, h)
            })
        }
    }
    let pipe = Pipeline {
        size: 64,
        crop: Crop::TRAIN,
        flip: true,
    };
    let opts = LoaderOptions {
        batch: 4,
        workers: 1,
        ..LoaderOptions::default()
    };
    let batches = |images: Arc<dyn Images>| -> Vec<Vec<u8>> {
        Loader::new(images, pipe, &opts)
            .unwrap()
            .map(|b| b.unwrap().images)
            .collect()
    };
    let parts = batches(Arc::new(idx.train.clone()));
    let wholes = batches(Arc::new(Whole(idx.train.clone())));
    assert!(!parts.is_empty());
    assert!(
        parts == wholes,
        "a crop from a part differs from one from the whole image"
    );
}

/// `data check`, the session's pre-check and the loader read a file's header
/// with one function, so a file gets the same words from each: a cut-off
/// JPEG or PNG, a bomb's sides, and a file that is no image at all shown by
/// its first bytes, in hex and as text.
#[test]
fn every_reader_gives_a_bad_file_the_same_words() {
    use super::decode::{decode, header};
    let mut png = Vec::new();
    image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(4, 3, image::Rgb([1, 2, 3])))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let mut jpeg = Vec::new();
    image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(8, 8, image::Rgb([1, 2, 3])))
        .write_to(
            &mut std::io::Cursor::new(&mut jpeg),
            image::ImageFormat::Jpeg,
        )
        .unwrap();
    assert_eq!(header(&png).unwrap(), (4, 3));
    assert_eq!(header(&jpeg).unwrap(), (8, 8));
    let words = |b: &[u8]| {
        let (h, d) = (header(b).unwrap_err(), decode(b).unwrap_err());
        assert_eq!(format!("{h:#}"), format!("{d:#}"));
        format!("{h:#}")
    };
    assert_eq!(
        words(&jpeg[..jpeg.len() - 10]),
        "JPEG: truncated (no end-of-image marker)"
    );
    assert_eq!(
        words(&png[..png.len() - 12]),
        "PNG: truncated (no IEND chunk)"
    );
    // A PNG whose IHDR claims 100,000 × 100,000 pixels: refused unread.
    let mut bomb = png.clone();
    bomb[16..20].copy_from_slice(&100_000u32.to_be_bytes());
    bomb[20..24].copy_from_slice(&100_000u32.to_be_bytes());
    assert!(
        words(&bomb).starts_with("PNG: 100000x100000 is not a picture's size"),
        "{}",
        words(&bomb)
    );
    assert_eq!(
        words(b"<html><body>404</body>"),
        "not a JPEG or PNG (the file starts with 3c 68 74 6d 6c 3e 3c 62 \"<html><b\")"
    );
    assert_eq!(words(b""), "not a JPEG or PNG (the file is empty)");
    // The two ends alone (the pre-check's read) say what the whole file
    // says: a noisy 300 × 300 PNG, far longer than the head read.
    let mut x = 1u32;
    let noise = image::RgbImage::from_fn(300, 300, |_, _| {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let b = x.to_le_bytes();
        image::Rgb([b[1], b[2], b[3]])
    });
    let mut long = Vec::new();
    image::DynamicImage::ImageRgb8(noise)
        .write_to(
            &mut std::io::Cursor::new(&mut long),
            image::ImageFormat::Png,
        )
        .unwrap();
    assert!(long.len() > 64 << 10, "{}", long.len());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("long.png");
    std::fs::write(&f, &long).unwrap();
    let ends = crate::data::read_image_ends(&f, 4096).unwrap();
    assert!(ends.len() <= 4096 + 1024);
    assert_eq!(header(&ends).unwrap(), (300, 300));
    std::fs::write(&f, &long[..long.len() - 12]).unwrap();
    let ends = crate::data::read_image_ends(&f, 4096).unwrap();
    assert_eq!(
        format!("{:#}", header(&ends).unwrap_err()),
        "PNG: truncated (no IEND chunk)"
    );
}
