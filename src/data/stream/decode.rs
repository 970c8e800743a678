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

/// The largest side accepted: a guard against a header that claims a huge
/// image (a bomb, or garbage read as a header), far above any photo.
const MAX_SIDE: usize = 1 << 14;

pub fn decode(bytes: &[u8]) -> Result<Rgb> {
    if bytes.starts_with(&[0xFF, 0xD8]) {
        decode_jpeg(bytes)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes)
    } else {
        bail!(
            "not a JPEG or PNG (the file starts with {:02x?})",
            &bytes[..bytes.len().min(4)]
        )
    }
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
    if !ends_with_eoi(bytes) {
        bail!("JPEG: truncated (no end-of-image marker)");
    }
    Ok(Rgb {
        width: w,
        height: h,
        pixels,
    })
}

/// The image, at 1/d of its sides where the decoder can shrink it for free
/// (libjpeg-turbo's IDCT, with the `turbojpeg` feature: d = 2, 4 or 8), d
/// from `choose`, which is told the full sides first; returns the picture
/// and the d it was decoded at (1 for PNG, and for JPEG without the feature).
pub fn decode_reduced(
    bytes: &[u8],
    choose: &mut dyn FnMut(usize, usize) -> usize,
) -> Result<(Rgb, usize)> {
    #[cfg(feature = "turbojpeg")]
    if bytes.starts_with(&[0xFF, 0xD8])
        && let Some((w, h, rgb)) = super::turbo::header(bytes)
        && rgb
        && w <= MAX_SIDE
        && h <= MAX_SIDE
    {
        // Called once: it draws the crop.
        let most = choose(w, h);
        let d = [8, 4, 2, 1].into_iter().find(|&d| d <= most).unwrap_or(1);
        if !ends_with_eoi(bytes) {
            bail!("JPEG: truncated (no end-of-image marker)");
        }
        return Ok((super::turbo::decode(bytes, d)?, d));
    }
    let img = decode(bytes)?;
    choose(img.width, img.height);
    Ok((img, 1))
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
