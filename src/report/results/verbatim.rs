//! Rows moved between results-format files as they were written: a resume's kept and
//! replaced rows, and the rows a shared run's workers sent back for `collect`.

use std::fs::OpenOptions;
use std::path::Path;

/// Writes a results-format file whole (the header, then `rows`' fields verbatim)
/// beside `path`, syncs it, and renames it over `path`: a crash leaves either the old
/// file or the new one.
pub(crate) fn replace_results(
    path: &Path,
    header: &csv::StringRecord,
    rows: &[csv::StringRecord],
) -> std::io::Result<()> {
    let tmp = path.with_extension("csv.tmp");
    {
        let mut w = csv::Writer::from_path(&tmp).map_err(std::io::Error::other)?;
        w.write_record(header).map_err(std::io::Error::other)?;
        for r in rows {
            w.write_record(r).map_err(std::io::Error::other)?;
        }
        w.flush()?;
        w.get_ref().sync_data()?;
    }
    std::fs::rename(&tmp, path)
}

/// A results.csv line with field `index` replaced.
pub(crate) fn with_field(record: &[u8], index: usize, value: &str) -> std::io::Result<Vec<u8>> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(record);
    let mut fields: Vec<String> = match r.records().next() {
        Some(rec) => rec
            .map_err(std::io::Error::other)?
            .iter()
            .map(str::to_string)
            .collect(),
        None => return Ok(record.to_vec()),
    };
    if let Some(f) = fields.get_mut(index) {
        *f = value.to_string();
    }
    let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
    w.write_record(&fields).map_err(std::io::Error::other)?;
    w.into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Writes a results-format file whole: the header, then each line verbatim (a
/// worker's rows as it wrote them), beside `path`, then renamed over it.
pub(crate) fn replace_results_lines<'a>(
    path: &Path,
    header: &[String],
    lines: impl Iterator<Item = &'a [u8]>,
) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header).map_err(std::io::Error::other)?;
    let mut bytes = w
        .into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    for line in lines {
        bytes.extend_from_slice(line);
    }
    let tmp = path.with_extension("csv.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Appends `rows`' fields verbatim to a results-format file, with `header` first when
/// the file is new, and syncs it.
pub(crate) fn append_results(
    path: &Path,
    header: &csv::StringRecord,
    rows: &[csv::StringRecord],
) -> std::io::Result<()> {
    let fresh = !path.exists();
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut w = csv::Writer::from_writer(file);
    if fresh {
        w.write_record(header).map_err(std::io::Error::other)?;
    }
    for r in rows {
        w.write_record(r).map_err(std::io::Error::other)?;
    }
    w.flush()?;
    w.get_ref().sync_data()
}
