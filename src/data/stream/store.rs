//! A pre-resized image store in FFCV's manner: every image of a folder at most
//! `max_side` px on a side (the aspect ratio kept), as JPEG or raw RGB, in one
//! file that the loader memory-maps. Decoding a 256-px JPEG instead of a
//! 500-px one, and one file instead of a million, is what makes an ImageNet
//! epoch cheap enough to stream (`tricklab data import DIR --max-side N`).
//!
//! Like FFCV's `RGBImageField`, a store keeps every image as JPEG, every one
//! raw, or a mix (its `write_mode='proportion'`): each image JPEG with
//! probability F, else raw, so that only that share is decoded each epoch
//! (FFCV's ResNet-18 store: 400 px, 10% JPEG; ResNet-50: 500 px, 50% JPEG
//! at quality 90).
//!
//! Layout (little-endian): `TLSTORE1`, the header's length (u64), the header
//! (JSON: classes, counts, max side, format, source, the index's SHA-256),
//! then one 24-byte record per image (offset u64, length u32, label u32,
//! width u16, height u16, split u8, how it is stored u8: 0 the header's
//! format, 1 JPEG, 2 raw; 2 bytes of padding), then the images' bytes.

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
    /// Each image JPEG or raw, as its record says (`--jpeg-fraction`).
    #[value(skip)]
    Mixed,
}

impl Format {
    /// The share of images a store of this format keeps as JPEG (a mixed
    /// store's own share is in its header).
    pub fn jpeg_fraction(self) -> f64 {
        match self {
            Format::Jpeg => 1.0,
            Format::Raw | Format::Mixed => 0.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub classes: Vec<String>,
    pub train: usize,
    pub val: usize,
    pub max_side: usize,
    pub format: Format,
    pub source: String,
    /// A mixed store's share of JPEG images, as asked (`--jpeg-fraction`).
    #[serde(default)]
    pub jpeg_fraction: Option<f64>,
    /// SHA-256 of the index table, checked when the store is opened (stores
    /// written before it have none).
    #[serde(default)]
    pub index_sha256: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    offset: u64,
    len: u32,
    label: u32,
    width: u16,
    height: u16,
    val: bool,
    /// 0: the header's format; 1: JPEG; 2: raw.
    mode: u8,
}

const AS_HEADER: u8 = 0;
const AS_JPEG: u8 = 1;
const AS_RAW: u8 = 2;

impl Record {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.label.to_le_bytes());
        out.extend_from_slice(&self.width.to_le_bytes());
        out.extend_from_slice(&self.height.to_le_bytes());
        out.push(u8::from(self.val));
        out.push(self.mode);
        out.extend_from_slice(&[0; 2]);
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
            mode: b[21],
        }
    }
}

/// Whether the image at `position` (import order) is stored as JPEG in a
/// store of `jpeg_fraction`. FFCV draws `np.random.rand() < p` per image;
/// this is the same Bernoulli draw from a hash of the position, so an
/// import of the same folder gives the same store.
pub fn stored_as_jpeg(position: usize, jpeg_fraction: f64) -> bool {
    jpeg_fraction >= 1.0
        || (jpeg_fraction > 0.0
            && crate::util::splitmix::SplitMix64(0x7472_6963_6b6c_6162 ^ position as u64)
                .unit_f64()
                < jpeg_fraction)
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

fn encode(img: &Rgb, jpeg: bool) -> Result<Vec<u8>> {
    match jpeg {
        false => Ok(img.pixels.clone()),
        true => {
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
/// `max_side` and stores it, a `jpeg_fraction` share of them as JPEG (1:
/// every one, 0: every one raw); written atomically. Images go through in
/// chunks, so memory holds a chunk's images, not the data set's. After the
/// first chunk the store's size is estimated and a disk that cannot hold it
/// is refused before more is written.
pub fn build(
    src: &Path,
    out: &Path,
    max_side: usize,
    jpeg_fraction: f64,
    on_bad: OnBadImage,
) -> Result<Imported> {
    if !(16..=u16::MAX as usize).contains(&max_side) {
        bail!("--max-side {max_side}: choose 16 to 65535 px");
    }
    if !(0.0..=1.0).contains(&jpeg_fraction) {
        bail!("--jpeg-fraction {jpeg_fraction}: choose a share from 0 (all raw) to 1 (all JPEG)");
    }
    // The file `out` names (through a link), before any image is read: a
    // FIFO or device there is refused now, and the side file and the disk
    // check are then the target's own.
    let out = &crate::util::output_target(out)?;
    let index = FolderIndex::open(src)?;
    refuse_empty_class(&index, src)?;
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
    for (c, chunk) in all.chunks(1024).enumerate() {
        let done = encode_chunk(chunk, c * 1024, max_side, jpeg_fraction);
        if c == 0 {
            room_for(out, &done, all.len())?;
        }
        for ((e, val), r) in chunk.iter().zip(done) {
            match r {
                Ok(st) => {
                    blob.write_all(&st.bytes).with_context(|| {
                        format!("cannot write {} (disk full?)", blob_path.display())
                    })?;
                    records.push(Record {
                        offset,
                        len: st.bytes.len() as u32,
                        label: e.label,
                        width: st.width as u16,
                        height: st.height as u16,
                        val: *val,
                        mode: if st.jpeg { AS_JPEG } else { AS_RAW },
                    });
                    offset += st.bytes.len() as u64;
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
    let (header, table) = finish(&index, src, max_side, jpeg_fraction, &imported, &records);
    write_store(out, &header, &table, &blob_path)?;
    imported.bytes = std::fs::metadata(out).map_or(0, |m| m.len());
    Ok(imported)
}

/// An empty class would be a label no image carries: refused, as the
/// cache import and torchvision's ImageFolder refuse it.
fn refuse_empty_class(index: &FolderIndex, src: &Path) -> Result<()> {
    let mut per_class = vec![0usize; index.classes.len()];
    index
        .train
        .iter()
        .for_each(|e| per_class[e.label as usize] += 1);
    if let Some(c) = per_class.iter().position(|&n| n == 0) {
        bail!(
            "{}: empty class folder; add images or remove the folder",
            src.join("train").join(&index.classes[c]).display()
        );
    }
    Ok(())
}

/// The store's header and index table once every image is in.
fn finish(
    index: &FolderIndex,
    src: &Path,
    max_side: usize,
    jpeg_fraction: f64,
    imported: &Imported,
    records: &[Record],
) -> (Header, Vec<u8>) {
    let format = match jpeg_fraction {
        f if f >= 1.0 => Format::Jpeg,
        f if f <= 0.0 => Format::Raw,
        _ => Format::Mixed,
    };
    let mut table = Vec::with_capacity(records.len() * RECORD);
    records.iter().for_each(|r| r.write(&mut table));
    let header = Header {
        classes: index.classes.clone(),
        train: imported.train,
        val: imported.val,
        max_side,
        format,
        source: src.display().to_string(),
        jpeg_fraction: (format == Format::Mixed).then_some(jpeg_fraction),
        index_sha256: Some(sha256_hex(&table)),
    };
    (header, table)
}

/// One image as it goes into a store.
struct Stored {
    bytes: Vec<u8>,
    width: usize,
    height: usize,
    jpeg: bool,
}

/// A chunk of the import, in parallel: each image read, shrunk to
/// `max_side` and encoded as JPEG or raw by its position (from `first`).
fn encode_chunk(
    chunk: &[(&super::Entry, bool)],
    first: usize,
    max_side: usize,
    jpeg_fraction: f64,
) -> Vec<Result<Stored>> {
    chunk
        .par_iter()
        .enumerate()
        .map(|(k, (e, _))| {
            let bytes = crate::data::read_image_file(&e.path)?;
            let img = fit(decode(&bytes)?, max_side);
            let jpeg = stored_as_jpeg(first + k, jpeg_fraction);
            Ok(Stored {
                bytes: encode(&img, jpeg)?,
                width: img.width,
                height: img.height,
                jpeg,
            })
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Refuses a store the disk cannot hold, estimated from the first chunk's
/// images: they are written twice (the side file, then the store), so the
/// store needs about twice its size free while it is built.
fn room_for(out: &Path, first: &[Result<Stored>], images: usize) -> Result<()> {
    let sized: Vec<usize> = first.iter().flatten().map(|s| s.bytes.len()).collect();
    if sized.is_empty() {
        return Ok(());
    }
    let per = sized.iter().sum::<usize>() as f64 / sized.len() as f64;
    let need = 2.0 * per * images as f64;
    let dir = out.parent().unwrap_or(Path::new("."));
    // A file system that cannot say its free space is left to the writes.
    let Ok(free) = crate::util::free_bytes(dir) else {
        return Ok(());
    };
    if need > free as f64 {
        bail!(
            "{} would take about {:.1} GB while it is built ({images} images at {:.0} KB each, written twice), and {} has {:.1} GB free: free space, lower --max-side or raise --jpeg-fraction",
            out.display(),
            need / 1e9,
            per / 1024.0,
            dir.display(),
            free as f64 / 1e9
        );
    }
    Ok(())
}

/// Header, index and the images written so far, into `out` atomically.
fn write_store(out: &Path, header: &Header, table: &[u8], blob_path: &Path) -> Result<()> {
    let head = serde_json::to_vec(header)?;
    crate::util::write_atomic_with(out, |f| {
        let mut w = std::io::BufWriter::new(f);
        w.write_all(MAGIC)?;
        w.write_all(&(head.len() as u64).to_le_bytes())?;
        w.write_all(&head)?;
        w.write_all(table)?;
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
        if let Some(want) = &header.index_sha256
            && sha256_hex(&map[table..data_start]) != *want
        {
            return Err(bad(
                "its index does not match its checksum (the file was altered or damaged)",
            ));
        }
        if let Some(why) = records
            .iter()
            .enumerate()
            .find_map(|(i, r)| record_problem(i, r, &header))
        {
            return Err(bad(&why));
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

    /// Whether image `i` is stored as JPEG (else raw RGB).
    pub fn is_jpeg(&self, i: usize) -> bool {
        match self.records[i].mode {
            AS_JPEG => true,
            AS_RAW => false,
            _ => self.header.format == Format::Jpeg,
        }
    }

    /// (JPEG, raw) images and their bytes: what `data check` reports.
    pub fn composition(&self) -> [(usize, u64); 2] {
        let mut out = [(0, 0); 2];
        for (i, r) in self.records.iter().enumerate() {
            let k = usize::from(!self.is_jpeg(i));
            out[k].0 += 1;
            out[k].1 += u64::from(r.len);
        }
        out
    }

    /// The sides of image `i`: (width, height).
    pub fn size(&self, i: usize) -> (usize, usize) {
        let r = &self.records[i];
        (usize::from(r.width), usize::from(r.height))
    }
}

/// What is wrong with record `i` of a store with `header`, if anything: a
/// label past the classes, no sides, an unknown storage, a raw image whose
/// bytes are not its sides' pixels.
fn record_problem(i: usize, r: &Record, header: &Header) -> Option<String> {
    let classes = header.classes.len();
    let raw = match (r.mode, header.format) {
        (AS_JPEG, _) => false,
        (AS_RAW, _) => true,
        (AS_HEADER, Format::Jpeg) => false,
        (AS_HEADER, Format::Raw) => true,
        (m, _) => return Some(format!("image {i} is stored in an unknown way ({m})")),
    };
    if r.label as usize >= classes {
        return Some(format!(
            "image {i} has label {} but the store has {classes} classes",
            r.label
        ));
    }
    if r.width == 0 || r.height == 0 {
        return Some(format!(
            "image {i} has no pixels ({}x{})",
            r.width, r.height
        ));
    }
    let want = 3 * usize::from(r.width) * usize::from(r.height);
    (raw && r.len as usize != want).then(|| {
        format!(
            "image {i} is raw {}x{} but holds {} bytes, not {want}",
            r.width, r.height, r.len
        )
    })
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
        choose: &mut dyn FnMut(usize, usize) -> super::decode::Want,
    ) -> Result<super::decode::Decoded> {
        if self.store.is_jpeg(self.ids[i]) {
            let r = self.store.records[self.ids[i]];
            let at = self.store.data_start + r.offset as usize;
            super::decode::decode_reduced(&self.store.map[at..at + r.len as usize], choose)
        } else {
            let img = self.pixels(i)?;
            choose(img.width, img.height);
            Ok(super::decode::Decoded {
                img,
                d: 1,
                origin: (0, 0),
            })
        }
    }
    fn pixels(&self, i: usize) -> Result<Rgb> {
        let r = self.store.records[self.ids[i]];
        let at = self.store.data_start + r.offset as usize;
        let bytes = &self.store.map[at..at + r.len as usize];
        if self.store.is_jpeg(self.ids[i]) {
            return decode(bytes);
        }
        // Its size was checked against its sides when the store opened.
        Ok(Rgb {
            width: usize::from(r.width),
            height: usize::from(r.height),
            pixels: bytes.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store the disk cannot hold (estimated from its first images,
    /// written twice) is refused with both numbers and the ways out.
    #[test]
    fn a_store_too_large_for_the_disk_is_refused_before_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("images.tlst");
        let first = [Ok(Stored {
            bytes: vec![0u8; 1 << 20],
            width: 512,
            height: 682,
            jpeg: false,
        })];
        assert!(room_for(&out, &first, 3).is_ok());
        let e = room_for(&out, &first, 1 << 40).unwrap_err().to_string();
        assert!(
            e.contains("images.tlst would take about")
                && e.contains("GB free")
                && e.contains("--max-side")
                && e.contains("--jpeg-fraction"),
            "{e}"
        );
    }
}
