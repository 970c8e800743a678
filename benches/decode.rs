//! The JPEG decoders a streaming ImageNet pipeline could use, side by side on
//! the same files in one run (issue 35: measure them, pick the fastest, and
//! use DCT-domain downscaling where the crop allows it):
//! - zune-jpeg (pure Rust; what the `image` crate decodes JPEGs with today);
//! - jpeg-decoder (pure Rust), full size and with its DCT-domain scaling;
//! - libjpeg-turbo through its TurboJPEG API (Debian's libturbojpeg, which
//!   `make bench` installs), full size and with its DCT scaling factors.
//!
//! The files: ImageNet-like JPEGs made here (no ImageNet on this machine):
//! sizes drawn around ImageNet's (~400×350 on average, aspect ratios 3:4 to
//! 16:9), textured so that quality 90 gives ~110 KB a file, as ImageNet's
//! average. One thread, images per second over every file, best of 3.

use image::ImageEncoder;
use std::ffi::{c_char, c_int, c_uchar, c_ulong, c_void};
use std::time::Instant;

#[link(name = "turbojpeg")]
unsafe extern "C" {
    fn tjInitDecompress() -> *mut c_void;
    fn tjDestroy(handle: *mut c_void) -> c_int;
    fn tjDecompressHeader3(
        handle: *mut c_void,
        buf: *const c_uchar,
        size: c_ulong,
        width: *mut c_int,
        height: *mut c_int,
        subsamp: *mut c_int,
        colorspace: *mut c_int,
    ) -> c_int;
    fn tjDecompress2(
        handle: *mut c_void,
        buf: *const c_uchar,
        size: c_ulong,
        dst: *mut c_uchar,
        width: c_int,
        pitch: c_int,
        height: c_int,
        pixel_format: c_int,
        flags: c_int,
    ) -> c_int;
    fn tjGetErrorStr2(handle: *mut c_void) -> *const c_char;
}

/// TurboJPEG's RGB pixel format (TJPF_RGB).
const TJPF_RGB: c_int = 0;

/// Decodes with libjpeg-turbo at the largest DCT reduction (1/1, 1/2, 1/4,
/// 1/8: the factors its IDCT scales by for free) that keeps the short side
/// at least `min_side`; returns RGB bytes and the decoded size.
fn turbo(h: *mut c_void, bytes: &[u8], min_side: u32) -> (Vec<u8>, u32, u32) {
    let (mut w, mut hh, mut ss, mut cs) = (0, 0, 0, 0);
    // SAFETY: a live handle and a buffer of `bytes.len()` bytes.
    let ok = unsafe {
        tjDecompressHeader3(
            h,
            bytes.as_ptr(),
            bytes.len() as c_ulong,
            &raw mut w,
            &raw mut hh,
            &raw mut ss,
            &raw mut cs,
        )
    };
    assert_eq!(ok, 0, "header: {}", turbo_error(h));
    let short = w.min(hh) as u32;
    let denom = [8, 4, 2, 1]
        .into_iter()
        .find(|d| short.div_ceil(*d) >= min_side)
        .unwrap_or(1);
    let (sw, sh) = ((w as u32).div_ceil(denom), (hh as u32).div_ceil(denom));
    let mut out = vec![0u8; (sw * sh * 3) as usize];
    // SAFETY: `out` holds the scaled image at 3 bytes a pixel.
    let ok = unsafe {
        tjDecompress2(
            h,
            bytes.as_ptr(),
            bytes.len() as c_ulong,
            out.as_mut_ptr(),
            sw as c_int,
            0,
            sh as c_int,
            TJPF_RGB,
            0,
        )
    };
    assert_eq!(ok, 0, "decode: {}", turbo_error(h));
    (out, sw, sh)
}

fn turbo_error(h: *mut c_void) -> String {
    // SAFETY: TurboJPEG keeps the message alive with the handle.
    unsafe { std::ffi::CStr::from_ptr(tjGetErrorStr2(h)) }
        .to_string_lossy()
        .into_owned()
}

fn zune(bytes: &[u8]) -> (Vec<u8>, u32, u32) {
    let mut d = zune_jpeg::JpegDecoder::new(zune_core::bytestream::ZCursor::new(bytes));
    let px = d.decode().expect("zune-jpeg");
    let (w, h) = d.dimensions().expect("dimensions");
    (px, w as u32, h as u32)
}

/// jpeg-decoder, scaled in the DCT domain to at least `min_side` on the
/// short side (`scale` picks 1/1 to 1/8; 0 = full size).
fn jpeg_decoder(bytes: &[u8], min_side: u32) -> (Vec<u8>, u32, u32) {
    let mut d = jpeg_decoder::Decoder::new(bytes);
    d.read_info().expect("jpeg-decoder header");
    let info = d.info().expect("info");
    let (w, h) = (u32::from(info.width), u32::from(info.height));
    if min_side > 0 {
        // `scale` takes the smallest factor whose size reaches the request.
        let k = f64::from(min_side) / f64::from(w.min(h));
        let req = |v: u32| ((f64::from(v) * k).ceil() as u16).max(1);
        d.scale(req(w), req(h)).expect("scale");
    }
    let px = d.decode().expect("jpeg-decoder");
    let info = d.info().expect("info");
    (px, u32::from(info.width), u32::from(info.height))
}

/// An ImageNet-like photo stand-in: smooth shapes plus fine texture.
fn make_jpegs(n: usize) -> Vec<Vec<u8>> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as u32
    };
    (0..n)
        .map(|i| {
            let w = 330 + next() % 170; // 330..500
            let h = (f64::from(w) * [0.75, 0.5625, 0.8, 1.0, 1.333][i % 5]) as u32;
            let (fx, fy) = (1.0 + f64::from(next() % 7), 1.0 + f64::from(next() % 5));
            let mut px = Vec::with_capacity((w * h * 3) as usize);
            for y in 0..h {
                for x in 0..w {
                    let (u, v) = (f64::from(x) / f64::from(w), f64::from(y) / f64::from(h));
                    let base = 128.0 + 60.0 * (fx * 6.3 * u).sin() * (fy * 6.3 * v).cos();
                    for c in 0..3 {
                        let grain = f64::from(next() % 56) - 28.0;
                        let tint = [0.0, 25.0 * u, -25.0 * v][c];
                        px.push((base + tint + grain).clamp(0.0, 255.0) as u8);
                    }
                }
            }
            let mut out = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
                .write_image(&px, w, h, image::ExtendedColorType::Rgb8)
                .expect("encoding a test JPEG");
            out
        })
        .collect()
}

/// Images a second over `files`, best of 3 passes, and the decoded short
/// side on average.
fn rate(files: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> (Vec<u8>, u32, u32)) -> (f64, f64) {
    let mut best = f64::INFINITY;
    let mut short = 0.0;
    for _ in 0..3 {
        let t = Instant::now();
        short = 0.0;
        for b in files {
            let (px, w, h) = f(b);
            assert_eq!(px.len(), (w * h * 3) as usize);
            short += f64::from(w.min(h));
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    (files.len() as f64 / best, short / files.len() as f64)
}

fn main() {
    let files = make_jpegs(96);
    let kb = files.iter().map(Vec::len).sum::<usize>() as f64 / files.len() as f64 / 1024.0;
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    println!("## decode ({cpu}, one thread)\n");
    println!(
        "{} JPEGs made here, 330–500 px wide, aspect 0.56–1.33, quality 90, {kb:.0} KB on average.\n",
        files.len()
    );
    println!("| decoder | output | images/s | × zune-jpeg |");
    println!("|---|---|---|---|");
    // SAFETY: one handle for the whole run, destroyed at the end.
    let h = unsafe { tjInitDecompress() };
    assert!(!h.is_null(), "tjInitDecompress failed");
    let (base, _) = rate(&files, zune);
    let rows: Vec<(&str, String, f64)> = vec![
        (
            "zune-jpeg 0.5 (what `image` uses)",
            "full size".into(),
            base,
        ),
        {
            let (r, s) = rate(&files, |b| jpeg_decoder(b, 0));
            (
                "jpeg-decoder 0.3",
                format!("full size (short side {s:.0})"),
                r,
            )
        },
        {
            let (r, _) = rate(&files, |b| turbo(h, b, u32::MAX));
            ("libjpeg-turbo (TurboJPEG API)", "full size".into(), r)
        },
        {
            let (r, s) = rate(&files, |b| jpeg_decoder(b, 160));
            (
                "jpeg-decoder 0.3, DCT scaling",
                format!("short side ≥ 160 (mean {s:.0})"),
                r,
            )
        },
        {
            let (r, s) = rate(&files, |b| turbo(h, b, 160));
            (
                "libjpeg-turbo, DCT scaling",
                format!("short side ≥ 160 (mean {s:.0})"),
                r,
            )
        },
        {
            let (r, s) = rate(&files, |b| turbo(h, b, 128));
            (
                "libjpeg-turbo, DCT scaling",
                format!("short side ≥ 128 (mean {s:.0})"),
                r,
            )
        },
    ];
    // SAFETY: the handle is not used after this.
    unsafe { tjDestroy(h) };
    for (name, out, r) in rows {
        println!("| {name} | {out} | {r:.0} | {:.2} |", r / base);
    }
}
