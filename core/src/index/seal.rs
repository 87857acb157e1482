//! Sealing: building the index file of a segment the writer has left, off the writer's thread,
//! and rebuilding one at open when it is missing, damaged or does not match its segment.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use crate::error::{Error, Result};
use crate::index::SegmentIndex;
use crate::index::file::{self, IndexFile, index_path};
use crate::log::format::{HEADER_LEN, decode_header};
use crate::log::recovery::{ScanPoint, Stop, scan_committed};
use crate::read::{Published, SegmentEntry};
use std::sync::atomic::Ordering;

/// Scans a sealed segment's log bytes (every record's checksum is verified on the way) and
/// encodes its index file. Returns the file's bytes and the next position after the segment.
pub(crate) fn encode(log: &[u8], base: u64, log_path: &Path) -> Result<(Vec<u8>, u64)> {
    let header = decode_header(log)
        .map_err(|e| Error::corruption(format!("segment {}: {}", log_path.display(), e.message())))?;
    let scan = scan_committed(log, ScanPoint { offset: HEADER_LEN, chain: header.crc, next_position: base });
    if let Stop::Torn { reason, .. } = &scan.tail {
        return Err(Error::corruption(format!(
            "sealed segment {} is damaged at byte {}: {reason}",
            log_path.display(),
            scan.end.offset
        )));
    }
    let contents = file::contents_of(log, base, &scan.event_offsets, scan.end.offset as u64)?;
    Ok((file::encode(&contents), scan.end.next_position))
}

/// Encodes, writes (durably) and maps the index file of a sealed segment.
pub(crate) fn build(log: &[u8], base: u64, log_path: &Path, mode: u32) -> Result<IndexFile> {
    let (bytes, _) = encode(log, base, log_path)?;
    let path = index_path(log_path);
    file::write(&path, &bytes, mode)?;
    IndexFile::open(&path, base)
}

/// The sealer thread: builds each handed-over segment's index file and publishes it in place of
/// the tail index. A failure is reported and leaves the tail index in use; the next open
/// rebuilds the file. Files get permission bits `mode`.
pub(crate) fn run(queue: Receiver<Arc<SegmentEntry>>, published: Arc<Published>, mode: u32) {
    for entry in queue {
        match build(entry.log.bytes(), entry.base, &entry.path, mode) {
            Ok(file) => {
                // Its tag dictionary is in the page cache now: build the condition checks'
                // filter while it is cheap.
                file.tag_filter();
                entry.index.store(Arc::new(SegmentIndex::Sealed(Arc::new(file))));
                entry.log.advise_point_reads();
            }
            Err(e) => eprintln!("lapilli: cannot build the index of {}: {e}", entry.path.display()),
        }
        published.sealing.fetch_sub(1, Ordering::AcqRel);
    }
}
