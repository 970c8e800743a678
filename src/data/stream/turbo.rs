//! JPEG decoding through the system's libjpeg-turbo (its TurboJPEG API;
//! the `turbojpeg` build feature), with DCT-domain downscaling: the IDCT
//! produces 1/2, 1/4 or 1/8 of the image for less than a full decode, which
//! a crop that is shrunk anyway can take (`benches/decode.rs` measured the
//! decoders side by side: libjpeg-turbo 1.17× zune-jpeg at full size). A
//! crop's part alone goes through libjpeg's API (`region`, in
//! src/native/jpeg_region.c): the rows above it skipped, the columns beside
//! it left out, the rows below it never read.
//!
//! Strict as the zune-jpeg path is: libjpeg-turbo's warnings (a truncated
//! scan, corrupt data) are errors, so a damaged file is never a picture with
//! grey rows. CMYK and YCCK files, which TurboJPEG will not turn into RGB,
//! go to zune-jpeg.

use super::rgb::Rgb;
use anyhow::{Result, bail};
use std::ffi::{c_char, c_int, c_uchar, c_ulong, c_void};

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

// src/native/jpeg_region.c, through libjpeg's API.
unsafe extern "C" {
    fn tricklab_jpeg_region(
        buf: *const c_uchar,
        len: c_ulong,
        denom: c_int,
        x: c_int,
        y: c_int,
        w: c_int,
        h: c_int,
        out: *mut c_uchar,
        cap: c_ulong,
        ox: *mut c_int,
        oy: *mut c_int,
        ow: *mut c_int,
        oh: *mut c_int,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
}

/// TJPF_RGB: 3 bytes a pixel.
const TJPF_RGB: c_int = 0;
/// TJFLAG_STOPONWARNING: a warning (a truncated or corrupt scan) fails.
const TJFLAG_STOPONWARNING: c_int = 8192;
/// TJCS_CMYK and TJCS_YCCK.
const TJCS_CMYK: c_int = 3;
const TJCS_YCCK: c_int = 4;

/// One decompressor a decoding thread, made at its first image.
struct Handle(*mut c_void);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: made by tjInitDecompress, destroyed once.
        unsafe {
            tjDestroy(self.0);
        }
    }
}

thread_local! {
    static HANDLE: Handle = Handle(unsafe { tjInitDecompress() });
}

fn error(h: *mut c_void) -> String {
    // SAFETY: TurboJPEG keeps the message alive with the handle.
    unsafe { std::ffi::CStr::from_ptr(tjGetErrorStr2(h)) }
        .to_string_lossy()
        .into_owned()
}

/// A JPEG's sides without decoding it, and whether TurboJPEG can give it
/// as RGB; `None` where the header is not one it reads.
pub fn header(bytes: &[u8]) -> Option<(usize, usize, bool)> {
    HANDLE.with(|h| {
        let (mut w, mut hh, mut ss, mut cs) = (0, 0, 0, 0);
        // SAFETY: a live handle and a buffer of `bytes.len()` bytes.
        let ok = unsafe {
            tjDecompressHeader3(
                h.0,
                bytes.as_ptr(),
                bytes.len() as c_ulong,
                &raw mut w,
                &raw mut hh,
                &raw mut ss,
                &raw mut cs,
            )
        };
        (ok == 0 && w > 0 && hh > 0).then_some((
            w as usize,
            hh as usize,
            cs != TJCS_CMYK && cs != TJCS_YCCK,
        ))
    })
}

/// The JPEG at 1/`denom` of its sides (1, 2, 4 or 8), as RGB.
pub fn decode(bytes: &[u8], denom: usize) -> Result<Rgb> {
    let Some((w, h, _)) = header(bytes) else {
        bail!("JPEG: libjpeg-turbo cannot read its header");
    };
    let (sw, sh) = (w.div_ceil(denom), h.div_ceil(denom));
    let mut pixels = vec![0u8; sw * sh * 3];
    HANDLE.with(|hd| {
        // SAFETY: `pixels` holds the scaled picture at 3 bytes a pixel;
        // TurboJPEG picks the scaling factor whose output is sw x sh.
        let ok = unsafe {
            tjDecompress2(
                hd.0,
                bytes.as_ptr(),
                bytes.len() as c_ulong,
                pixels.as_mut_ptr(),
                sw as c_int,
                0,
                sh as c_int,
                TJPF_RGB,
                TJFLAG_STOPONWARNING,
            )
        };
        if ok != 0 {
            bail!("JPEG: {}", error(hd.0));
        }
        Ok(())
    })?;
    Ok(Rgb {
        width: sw,
        height: sh,
        pixels,
    })
}

/// The region (x, y, w, h) of the JPEG at 1/`denom` of its sides (1, 2, 4
/// or 8), as RGB, with where it lies in that picture: its left edge moved
/// to an iMCU boundary (so it may be wider). Only the region's rows are
/// decoded to pixels, and none below it is read (src/native/jpeg_region.c).
/// `None` for CMYK and YCCK files, which libjpeg does not turn into RGB.
pub fn region(
    bytes: &[u8],
    denom: usize,
    (x, y, w, h): (usize, usize, usize, usize),
) -> Result<Option<(Rgb, (usize, usize))>> {
    let Some((fw, _, _)) = header(bytes) else {
        bail!("JPEG: libjpeg-turbo cannot read its header");
    };
    // The region widens only to its left, within the picture's width.
    let mut pixels = vec![0u8; fw.div_ceil(denom) * h * 3];
    let (mut ox, mut oy, mut ow, mut oh) = (0, 0, 0, 0);
    let mut err = [0 as c_char; 200];
    let to_int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    // SAFETY: `pixels` holds `cap` bytes, which the shim checks the region
    // against; `err` holds `err_len` bytes.
    let r = unsafe {
        tricklab_jpeg_region(
            bytes.as_ptr(),
            bytes.len() as c_ulong,
            to_int(denom),
            to_int(x),
            to_int(y),
            to_int(w),
            to_int(h),
            pixels.as_mut_ptr(),
            pixels.len() as c_ulong,
            &raw mut ox,
            &raw mut oy,
            &raw mut ow,
            &raw mut oh,
            err.as_mut_ptr(),
            err.len() as c_int,
        )
    };
    match r {
        0 => {
            let (ow, oh) = (ow as usize, oh as usize);
            pixels.truncate(ow * oh * 3);
            let img = Rgb {
                width: ow,
                height: oh,
                pixels,
            };
            Ok(Some((img, (ox as usize, oy as usize))))
        }
        1 => Ok(None),
        _ => {
            // SAFETY: the shim wrote a NUL-terminated message into `err`.
            let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
            bail!("JPEG: {why}")
        }
    }
}
