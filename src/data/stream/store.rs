//! A pre-resized image store in FFCV's manner: every image of a folder at most
//! `max_side` px on a side (the aspect ratio kept), as JPEG or raw RGB, in one
//! file that the loader memory-maps. Decoding a 256-px JPEG instead of a
//! 500-px one, and one file instead of a million, is what makes an ImageNet
//! epoch cheap enough to stream (`tricklab data import DIR --max-side N`).
//!
//! Layout (little-endian): `TLSTORE1`, the header's length (u64), the header
//! (JSON: classes, counts, max side, format, source), then one 24-byte record
//! per image (offset u64, length u32, label u32, width u16, height u16, split
//! u8, 3 bytes of padding), then the images' bytes.

use super::decode::{Rgb, decode};
use super::{FolderIndex, Images, OnBadImage, resample};
use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"TLSTORE1";
const RECORD: usize = 24;
pub const STORE_FILE: &str = "images.tlst";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Re-encoded JPEG (quality 90): small, decoded again every epoch.
    Jpeg,
    /// Raw RGB bytes: no decoding, several times larger.
    Raw,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub classes: Vec<String>,
    pub train: usize,
    pub val: usize,
    pub max_side: usize,
    pub format: Format,
    pub source: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    offset: u64,
    len: u32,
    label: u32,
    width: u16,
    height: u16,
    val: bool,
}

impl Record {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.label.to_le_bytes());
        out.extend_from_slice(&self.width.to_le_bytes());
        out.extend_from_slice(&self.height.to_le_bytes());
        out.push(u8::from(self.val));
        out.extend_from_slice(&[0; 3]);
    }

    fn read(b: &[u8]) -> Record {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u16_at = |i: usize| u16::from_le_bytes(b[i..i + 2].try_into().expect("2 bytes"));
        Record {
            offset: u64_at(0),
            len: u32_at(8),
            label: u32_at(12),
            width: u16_at(16),
            height: u16_at(18),
            val: b[20] != 0,
        }
    }
}

/// The image shrunk to fit `max_side` (never enlarged), aspect kept.
fn fit(img: Rgb, max_side: usize) -> Rgb {
    let long = img.width.max(img.height);
    if long <= max_side {
        return img;
    }
    let k = max_side as f64 / long as f64;
    let w = ((img.width as f64 * k).round() as usize).max(1);
    let h = ((img.height as f64 * k).round() as usize).max(1);
    let mut pixels = vec![0u8; w * h * 3];
    let all = resample::CropBox {
        x: 0.0,
        y: 0.0,
        w: img.width as f64,
        h: img.height as f64,
    };
    resample::resample(&img, all, w, h, false, &mut pixels);
    Rgb {
        width: w,
        height: h,
        pixels,
    }
}

fn encode(img: &Rgb, format: Format) -> Result<Vec<u8>> {
    match format {
        Format::Raw => Ok(img.pixels.clone()),
        Format::Jpeg => {
            use image::ImageEncoder;
            let mut out = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
                .write_image(
                    &img.pixels,
                    img.width as u32,
                    img.height as u32,
                    image::ExtendedColorType::Rgb8,
                )
                .context("encoding the resized JPEG")?;
            Ok(out)
        }
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What an import did.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    pub train: usize,
    pub val: usize,
    pub bytes: u64,
    /// One line per file left out (`--on-bad-image skip`).
    pub skipped: Vec<String>,
}

/// Builds `out` from the folder `src`: decodes each image, shrinks it to
/// `max_side` and stores it; written atomically. Images go through in chunks,
/// so memory holds a chunk's images, not the data set's.
pub fn build(
    src: &Path,
    out: &Path,
    max_side: usize,
    format: Format,
    on_bad: OnBadImage,
) -> Result<Imported> {
    if !(16..=u16::MAX as usize).contains(&max_side) {
        bail!("--max-side {max_side}: choose 16 to 65535 px");
    }
    let index = FolderIndex::open(src)?;
    let all: Vec<(&super::Entry, bool)> = index
        .train
        .iter()
        .map(|e| (e, false))
        .chain(index.val.iter().map(|e| (e, true)))
        .collect();
    let mut records = Vec::with_capacity(all.len());
    let mut imported = Imported::default();
    // Images first into a side file, the index after: the index's size is
    // known only once bad files are left out.
    let blob_path = out.with_extension("tlst.part");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create folder {}", dir.display()))?;
    }
    let mut blob = std::io::BufWriter::new(
        std::fs::File::create(&blob_path)
            .with_context(|| format!("cannot write {}", blob_path.display()))?,
    );
    // Gone however this ends: the store is the only thing left behind.
    let _part = RemoveOnDrop(blob_path.clone());
    let mut offset = 0u64;
    for chunk in all.chunks(1024) {
        let done: Vec<Result<(Vec<u8>, usize, usize)>> = chunk
            .par_iter()
            .map(|(e, _)| {
                let bytes = std::fs::read(&e.path).context("cannot read it")?;
                let img = fit(decode(&bytes)?, max_side);
                Ok((encode(&img, format)?, img.width, img.height))
            })
            .collect();
        for ((e, val), r) in chunk.iter().zip(done) {
            match r {
                Ok((bytes, w, h)) => {
                    blob.write_all(&bytes).with_context(|| {
                        format!("cannot write {} (disk full?)", blob_path.display())
                    })?;
                    records.push(Record {
                        offset,
                        len: bytes.len() as u32,
                        label: e.label,
                        width: w as u16,
                        height: h as u16,
                        val: *val,
                    });
                    offset += bytes.len() as u64;
                    if *val {
                        imported.val += 1;
                    } else {
                        imported.train += 1;
                    }
                }
                Err(err) if on_bad == OnBadImage::Skip => imported
                    .skipped
                    .push(format!("skipped {}: {err:#}", e.path.display())),
                Err(err) => {
                    bail!(
                        "{}: {err:#}; fix or remove it, or pass --on-bad-image skip to leave such files out",
                        e.path.display()
                    );
                }
            }
        }
    }
    blob.flush()?;
    drop(blob);
    let header = Header {
        classes: index.classes.clone(),
        train: imported.train,
        val: imported.val,
        max_side,
        format,
        source: src.display().to_string(),
    };
    write_store(out, &header, &records, &blob_path)?;
    imported.bytes = std::fs::metadata(out).map_or(0, |m| m.len());
    Ok(imported)
}

/// Header, index and the images written so far, into `out` atomically.
fn write_store(out: &Path, header: &Header, records: &[Record], blob_path: &Path) -> Result<()> {
    let head = serde_json::to_vec(header)?;
    crate::util::write_atomic_with(out, |f| {
        let mut w = std::io::BufWriter::new(f);
        w.write_all(MAGIC)?;
        w.write_all(&(head.len() as u64).to_le_bytes())?;
        w.write_all(&head)?;
        let mut table = Vec::with_capacity(records.len() * RECORD);
        records.iter().for_each(|r| r.write(&mut table));
        w.write_all(&table)?;
        std::io::copy(&mut std::fs::File::open(blob_path)?, &mut w)?;
        w.flush()?;
        Ok(())
    })
    .with_context(|| {
        format!(
            "cannot write {} (disk full?); nothing was left behind",
            out.display()
        )
    })
}

/// An opened store: its header, its records, the mapped file.
pub struct Store {
    pub path: PathBuf,
    pub header: Header,
    records: Vec<Record>,
    data_start: usize,
    map: memmap2::Mmap,
}

impl Store {
    pub fn open(path: &Path) -> Result<Arc<Store>> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // Safety: the store is written once, atomically, and never modified
        // in place; a concurrent re-import replaces the file by rename, which
        // leaves this mapping on the old inode.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        let bad = |why: &str| {
            anyhow::anyhow!(
                "{}: {why}; import it again with `tricklab data import DIR --name NAME --max-side N`",
                path.display()
            )
        };
        if map.len() < 16 || &map[..8] != MAGIC {
            return Err(bad("not a tricklab image store"));
        }
        let head_len = u64::from_le_bytes(map[8..16].try_into().expect("8 bytes")) as usize;
        let header: Header = map
            .get(16..16 + head_len)
            .and_then(|h| serde_json::from_slice(h).ok())
            .ok_or_else(|| bad("its header is cut off or unreadable"))?;
        let n = header.train + header.val;
        let table = 16 + head_len;
        let data_start = table + n * RECORD;
        let records: Vec<Record> = map
            .get(table..data_start)
            .ok_or_else(|| bad("its index is cut off"))?
            .chunks_exact(RECORD)
            .map(Record::read)
            .collect();
        let end = records
            .iter()
            .map(|r| r.offset + u64::from(r.len))
            .max()
            .unwrap_or(0) as usize;
        if data_start + end > map.len() {
            return Err(bad(&format!(
                "it is truncated ({} of {} bytes)",
                map.len(),
                data_start + end
            )));
        }
        Ok(Arc::new(Store {
            path: path.to_path_buf(),
            header,
            records,
            data_start,
            map,
        }))
    }

    /// One split as loader input.
    pub fn split(self: &Arc<Store>, val: bool) -> Arc<StoreSplit> {
        let ids = (0..self.records.len())
            .filter(|&i| self.records[i].val == val)
            .collect();
        Arc::new(StoreSplit {
            store: Arc::clone(self),
            ids,
        })
    }

    /// The index table as stored (every image's offset, length, label and
    /// sides): with the header, what identifies the store's content.
    pub fn index_bytes(&self) -> &[u8] {
        &self.map[self.data_start - self.records.len() * RECORD..self.data_start]
    }

    /// The sides of image `i`: (width, height).
    pub fn size(&self, i: usize) -> (usize, usize) {
        let r = &self.records[i];
        (usize::from(r.width), usize::from(r.height))
    }
}

/// The images of one split of a store, in import order.
pub struct StoreSplit {
    store: Arc<Store>,
    ids: Vec<usize>,
}

impl Images for StoreSplit {
    fn count(&self) -> usize {
        self.ids.len()
    }
    fn label(&self, i: usize) -> u32 {
        self.store.records[self.ids[i]].label
    }
    fn name(&self, i: usize) -> String {
        format!("{} image {}", self.store.path.display(), self.ids[i])
    }
    fn dims(&self, i: usize) -> Result<(usize, usize)> {
        Ok(self.store.size(self.ids[i]))
    }
    fn pixels_reduced(
        &self,
        i: usize,
        choose: &mut dyn FnMut(usize, usize) -> usize,
    ) -> Result<(Rgb, usize)> {
        match self.store.header.format {
            Format::Jpeg => {
                let r = self.store.records[self.ids[i]];
                let at = self.store.data_start + r.offset as usize;
                super::decode::decode_reduced(&self.store.map[at..at + r.len as usize], choose)
            }
            Format::Raw => {
                let img = self.pixels(i)?;
                choose(img.width, img.height);
                Ok((img, 1))
            }
        }
    }
    fn pixels(&self, i: usize) -> Result<Rgb> {
        let r = self.store.records[self.ids[i]];
        let at = self.store.data_start + r.offset as usize;
        let bytes = &self.store.map[at..at + r.len as usize];
        match self.store.header.format {
            Format::Jpeg => decode(bytes),
            Format::Raw => {
                let (w, h) = (usize::from(r.width), usize::from(r.height));
                if bytes.len() != w * h * 3 {
                    bail!("a raw image of {} bytes for {w}x{h}", bytes.len());
                }
                Ok(Rgb {
                    width: w,
                    height: h,
                    pixels: bytes.to_vec(),
                })
            }
        }
    }
}
