//! Sealing: building the index file of a segment the writer has left, off the writer's thread,
//! and rebuilding one at open when it is missing, damaged or does not match its segment.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use crate::error::{Error, Result};
use crate::index::SegmentIndex;
use crate::index::file::{self, IndexFile, index_path};
use crate::log::format::HEADER_LEN;
use crate::log::recovery::{Scan, ScanPoint, Stop, scan_committed};
use crate::log::segment::check_header;
use crate::read::{Published, SegmentEntry};
use std::sync::atomic::Ordering;

/// Scans a sealed segment's log bytes (every record's checksum is verified on the way) and
/// encodes its index file. `next_base` is the base of the segment after it.
///
/// The segment is accepted when its committed prefix ends exactly at `next_base`, whatever
/// bytes follow the prefix: the writer syncs a segment before it creates the next one at its
/// head + 1, so a matching end proves no committed batch is missing. What follows can be the
/// leftovers of an unacknowledged group that reached the disk with a hole before them (open
/// stops at the hole without reading further, so they survive until the segment is sealed).
/// A prefix that ends earlier lost a committed batch: `Corruption`.
pub(crate) fn encode(log: &[u8], base: u64, next_base: u64, log_path: &Path) -> Result<Vec<u8>> {
    let scan = scan_sealed(log, base, next_base, log_path)?;
    let contents = file::contents_of(log, base, &scan.event_offsets, scan.end.offset as u64)?;
    Ok(file::encode(&contents))
}

/// Runs the recovery rule over a sealed segment's log bytes: its committed prefix must end
/// exactly at `next_base` (the rule of [`encode`]), else `Corruption`.
pub(crate) fn scan_sealed(log: &[u8], base: u64, next_base: u64, log_path: &Path) -> Result<Scan<Stop>> {
    let header_crc = check_header(log, base, log_path)?;
    let scan = scan_committed(log, ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: base });
    if scan.end.next_position != next_base {
        let why = match &scan.tail {
            Stop::Torn { reason, .. } => format!("is damaged at byte {}: {reason}", scan.end.offset),
            Stop::Clean => "ends early".to_string(),
        };
        return Err(Error::corruption(format!(
            "sealed segment {} {why}; its committed events end at position {}, the next segment starts at {next_base}",
            log_path.display(),
            scan.end.next_position - 1,
        )));
    }
    Ok(scan)
}

/// Encodes and writes (durably) the index file of a sealed segment, and opens it: like an
/// index file found at open, its body is verified by the first read that uses it.
/// Files get permission bits `mode`.
pub(crate) fn build(log: &[u8], base: u64, next_base: u64, log_path: &Path, mode: u32) -> Result<IndexFile> {
    let bytes = encode(log, base, next_base, log_path)?;
    let path = index_path(log_path);
    file::write(&path, &bytes, mode)?;
    IndexFile::open(&path, base)
}

/// The sealer thread: builds each handed-over segment's index file (the writer hands over the
/// base of the segment it rolled over to with it) and publishes it in place of the tail index.
/// A failure is reported and leaves the tail index in use; the next open rebuilds the file.
pub(crate) fn run(queue: Receiver<(Arc<SegmentEntry>, u64)>, published: Arc<Published>, mode: u32) {
    for (entry, next_base) in queue {
        let sealed = entry.log.bytes().and_then(|log| {
            let file = build(log, entry.base, next_base, entry.log.path(), mode)?;
            // Its bytes are in the page cache now: verify it and build the condition checks'
            // tag filter while that is cheap.
            file.verified()?.tag_filter();
            entry.index.store(Arc::new(SegmentIndex::Sealed(file)));
            log.advise_point_reads();
            Ok(())
        });
        if let Err(e) = sealed {
            eprintln!("lapilli: cannot build the index of {}: {e}", entry.log.path().display());
        }
        published.sealing.fetch_sub(1, Ordering::AcqRel);
    }
}
