//! A damaged Parquet file refused before polars decodes it. polars-parquet
//! 0.55 trusts a page header's value count and reserves that many bits
//! before it reads a value: one flipped byte in a header asked for 2^61
//! bytes and aborted the process (the fuzz test's runs table, once its
//! columns moved). Every page header of every column chunk is read here
//! with the Parquet format's own Thrift reader, and a count beyond what the
//! row group can hold, or a page beyond its chunk, is an error.

use anyhow::{Result, anyhow, bail};
use polars_parquet_format::PageHeader;
use polars_parquet_format::thrift::protocol::TCompactInputProtocol;

/// Values a page may hold for each row of its row group: a list column (a
/// run's tricks) holds tens a row; a damaged header claims billions.
const VALUES_PER_ROW: usize = 4096;
/// The most bytes one page header may take to read.
const MAX_HEADER: usize = 1 << 20;
/// The largest page the store writes is far under this.
const MAX_PAGE: usize = 1 << 30;

/// A page's stored size, or why its header claims more than a row group
/// of `rows` rows can hold.
fn fits(header: &PageHeader, rows: usize) -> Result<usize> {
    let most = rows.max(1).saturating_mul(VALUES_PER_ROW);
    let counts = [
        header.data_page_header.as_ref().map(|h| h.num_values),
        header.dictionary_page_header.as_ref().map(|h| h.num_values),
        header.data_page_header_v2.as_ref().map(|h| h.num_values),
    ];
    for n in counts.into_iter().flatten() {
        if usize::try_from(n).map_or(true, |v| v > most) {
            bail!("a page claims {n} values for {rows} rows");
        }
    }
    let size = |s: i32| usize::try_from(s).ok().filter(|&s| s <= MAX_PAGE);
    match (
        size(header.compressed_page_size),
        size(header.uncompressed_page_size),
    ) {
        (Some(stored), Some(_)) => Ok(stored),
        _ => bail!(
            "a page claims a size of {} bytes ({} stored)",
            header.uncompressed_page_size,
            header.compressed_page_size
        ),
    }
}

/// Refuses, naming why, a file whose pages claim more than it can hold.
pub(super) fn check(bytes: &[u8]) -> Result<()> {
    let meta = polars_parquet::parquet::read::read_metadata(&mut std::io::Cursor::new(bytes))
        .map_err(|e| anyhow!("its footer does not parse: {e}"))?;
    let len = bytes.len();
    for rg in &meta.row_groups {
        let rows = rg.num_rows();
        // Even a constant column costs a row a bit somewhere in the file.
        if rows > len.saturating_mul(8) {
            bail!("a row group claims {rows} rows in a file of {len} bytes");
        }
        let most = rows.max(1).saturating_mul(VALUES_PER_ROW);
        for col in rg.parquet_columns() {
            let range = col.byte_range();
            let (start, end) = (range.start as usize, range.end as usize);
            if start > end || end > len {
                bail!("a column chunk lies outside the file's {len} bytes");
            }
            if usize::try_from(col.num_values()).map_or(true, |v| v > most) {
                bail!(
                    "a column chunk claims {} values for {rows} rows",
                    col.num_values()
                );
            }
            let mut pos = start;
            while pos < end {
                let mut rest = &bytes[pos..end];
                let before = rest.len();
                let header = {
                    let mut p = TCompactInputProtocol::new(&mut rest, MAX_HEADER);
                    PageHeader::read_from_in_protocol(&mut p)
                        .map_err(|e| anyhow!("a page header does not parse: {e}"))?
                };
                let stored = fits(&header, rows)?;
                pos += (before - rest.len()) + stored;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use polars_parquet_format::{DataPageHeader, Encoding, PageHeader, PageType};

    #[test]
    fn a_page_claiming_more_values_than_its_rows_can_hold_is_refused_and_a_sound_file_passes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("runs.parquet");
        let rows: Vec<crate::store::RunRow> = (0..4)
            .map(|i| crate::store::RunRow {
                matrix: "m".into(),
                variant: format!("v{i}"),
                repeat: i,
                acc: Some(0.5),
                ..Default::default()
            })
            .collect();
        crate::store::write_runs(&path, &rows).unwrap();
        super::check(&std::fs::read(&path).unwrap()).unwrap();
        let page = |n: i32| {
            let data = DataPageHeader::new(n, Encoding::PLAIN, Encoding::RLE, Encoding::RLE, None);
            PageHeader::new(PageType::DATA_PAGE, 64, 48, None, data, None, None, None)
        };
        assert_eq!(super::fits(&page(4), 4).unwrap(), 48);
        // A header claiming billions of values (one flipped byte of the fuzz
        // test's runs table made polars reserve 2^61 bytes and abort).
        let e = super::fits(&page(i32::MAX), 4).unwrap_err().to_string();
        assert_eq!(e, "a page claims 2147483647 values for 4 rows");
        assert!(super::fits(&page(-1), 4).is_err());
    }
}
