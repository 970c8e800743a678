//! One file's bytes to 8-bit RGB, or the reason it is not an image.
//!
//! JPEG goes through zune-jpeg directly (the decoder the `image` crate wraps)
//! in strict mode: a truncated file is an error rather than a picture whose
//! missing rows are grey. PNG goes through `image`; 16-bit channels are scaled
//! to 8 and alpha is dropped, as torchvision's `Image.convert("RGB")` does.
//! Greyscale and CMYK JPEGs come out as RGB.

use anyhow::{Result, bail};
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

pub use super::rgb::Rgb;

/// This build's decoders, as a pipeline's description names them.
#[cfg(feature = "turbojpeg")]
pub const DECODERS: &str =
    "libjpeg-turbo, only the crop's part and at 1/2, 1/4 or 1/8 where the crop allows; png";
#[cfg(not(feature = "turbojpeg"))]
pub const DECODERS: &str = "zune-jpeg / png";

/// The largest side accepted: a guard against a header that claims a huge
/// image (a bomb, or garbage read as a header), far above any photo.
const MAX_SIDE: usize = 1 << 14;

pub fn decode(bytes: &[u8]) -> Result<Rgb> {
    // The header's checks first, in the words `data check` uses.
    header(bytes)?;
    if bytes.starts_with(&[0xFF, 0xD8]) {
        decode_jpeg(bytes)
    } else {
        decode_png(bytes)
    }
}

/// Width and height from a JPEG's frame header or a PNG's IHDR, after the
/// checks every reader makes before decoding: an end marker (a cut-off
/// file), sides within [`MAX_SIDE`] (a bomb), a JPEG or PNG at all. The
/// loader, `data check` and the session's pre-check all call this, so a
/// file gets the same words from each. `bytes` may be the file's two ends
/// (`read_image_ends`).
pub fn header(bytes: &[u8]) -> Result<(usize, usize)> {
    let (kind, w, h) = if bytes.starts_with(&[0xFF, 0xD8]) {
        if !ends_with_eoi(bytes) {
            bail!("JPEG: truncated (no end-of-image marker)");
        }
        let mut d = zune_jpeg::JpegDecoder::new(ZCursor::new(bytes));
        d.decode_headers()
            .map_err(|e| anyhow::anyhow!("JPEG header: {e:?}"))?;
        let (w, h) = d
            .dimensions()
            .ok_or_else(|| anyhow::anyhow!("JPEG header without dimensions"))?;
        ("JPEG", w, h)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        if bytes.len() < 24 || &bytes[12..16] != b"IHDR" {
            bail!("PNG: truncated (no IHDR header)");
        }
        if !ends_with_iend(bytes) {
            bail!("PNG: truncated (no IEND chunk)");
        }
        let be =
            |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        ("PNG", be(16) as usize, be(20) as usize)
    } else {
        bail!("not a JPEG or PNG ({})", first_bytes(bytes))
    };
    if w > MAX_SIDE || h > MAX_SIDE || w == 0 || h == 0 {
        bail!(
            "{kind}: {w}x{h} is not a picture's size (at most {MAX_SIDE} px a side): a bomb or a damaged header"
        );
    }
    Ok((w, h))
}

/// A file's first bytes as hex and as text, to tell an HTML error page,
/// a text file or an empty file from a damaged image.
fn first_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "the file is empty".into();
    }
    let head = &bytes[..bytes.len().min(8)];
    let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = head
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    format!("the file starts with {} \"{text}\"", hex.join(" "))
}

/// A PNG's IEND chunk near its end (trailing bytes after it are allowed).
fn ends_with_iend(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    tail.windows(4).any(|w| w == b"IEND")
}

fn decode_jpeg(bytes: &[u8]) -> Result<Rgb> {
    let opts = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(MAX_SIDE)
        .set_max_height(MAX_SIDE)
        .jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), opts);
    let pixels = d.decode().map_err(|e| anyhow::anyhow!("JPEG: {e:?}"))?;
    let (w, h) = d
        .dimensions()
        .ok_or_else(|| anyhow::anyhow!("JPEG: no dimensions after decoding"))?;
    // A truncated scan that the decoder still accepted would leave rows
    // unwritten: refuse a buffer that is not exactly the picture.
    if pixels.len() != w * h * 3 {
        bail!(
            "JPEG: {} bytes decoded for a {w}x{h} RGB picture",
            pixels.len()
        );
    }
    Ok(Rgb {
        width: w,
        height: h,
        pixels,
    })
}

/// What a reader of an image wants once it knows the full sides: at most
/// 1/`reduce` of them, and of that only what covers `keep` (a box in full
/// pixels), where the decoder can leave the rest undecoded.
#[derive(Clone, Copy, Debug, Default)]
pub struct Want {
    pub reduce: usize,
    pub keep: Option<super::resample::CropBox>,
}

/// A decoded picture: the image at 1/`d` of its sides, or the part of it
/// that starts at `origin` (in those reduced pixels).
#[derive(Debug)]
pub struct Decoded {
    pub img: Rgb,
    pub d: usize,
    pub origin: (usize, usize),
}

impl Decoded {
    fn whole(img: Rgb, d: usize) -> Decoded {
        Decoded {
            img,
            d,
            origin: (0, 0),
        }
    }
}

/// The image, at 1/d of its sides where the decoder can shrink it for free
/// (libjpeg-turbo's IDCT, with the `turbojpeg` feature: d = 2, 4 or 8), d
/// from `choose`, which is told the full sides first; with that feature,
/// only the rows and columns around `keep` are decoded to pixels. Returns
/// the picture, its d (1 for PNG, and for JPEG without the feature) and
/// where it starts.
pub fn decode_reduced(
    bytes: &[u8],
    choose: &mut dyn FnMut(usize, usize) -> Want,
) -> Result<Decoded> {
    #[cfg(feature = "turbojpeg")]
    if bytes.starts_with(&[0xFF, 0xD8])
        && let Some((w, h, rgb)) = super::turbo::header(bytes)
        && rgb
        && w <= MAX_SIDE
        && h <= MAX_SIDE
    {
        // Called once: it draws the crop.
        let want = choose(w, h);
        let d = [8, 4, 2, 1]
            .into_iter()
            .find(|&d| d <= want.reduce)
            .unwrap_or(1);
        if !ends_with_eoi(bytes) {
            bail!("JPEG: truncated (no end-of-image marker)");
        }
        let (sw, sh) = (w.div_ceil(d), h.div_ceil(d));
        if let Some(k) = want.keep {
            // The box at 1/d, outward to whole pixels, inside the picture.
            let df = d as f64;
            let x0 = ((k.x / df).floor().max(0.0) as usize).min(sw - 1);
            let y0 = ((k.y / df).floor().max(0.0) as usize).min(sh - 1);
            let x1 = (((k.x + k.w) / df).ceil() as usize).clamp(x0 + 1, sw);
            let y1 = (((k.y + k.h) / df).ceil() as usize).clamp(y0 + 1, sh);
            if (x1 - x0) * (y1 - y0) < sw * sh
                && let Some((img, origin)) =
                    super::turbo::region(bytes, d, (x0, y0, x1 - x0, y1 - y0))?
            {
                return Ok(Decoded { img, d, origin });
            }
        }
        return Ok(Decoded::whole(super::turbo::decode(bytes, d)?, d));
    }
    let img = decode(bytes)?;
    choose(img.width, img.height);
    Ok(Decoded::whole(img, 1))
}

/// JPEG files end with FF D9; some writers pad after it, so look at the tail.
pub(crate) fn ends_with_eoi(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    tail.windows(2).any(|w| w == [0xFF, 0xD9])
}

fn decode_png(bytes: &[u8]) -> Result<Rgb> {
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Png)
        .map_err(|e| anyhow::anyhow!("PNG: {e}"))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w > MAX_SIDE || h > MAX_SIDE {
        bail!("PNG: {w}x{h} is larger than {MAX_SIDE} px on a side");
    }
    Ok(Rgb {
        width: w,
        height: h,
        pixels: img.to_rgb8().into_raw(),
    })
}
