//! Opening a store's files: the lock, listing segments, and recovery of the log and its
//! indexes. Shared by the writable open (which may repair: cut a torn tail, recreate a segment
//! whose creation was interrupted, rewrite index files) and by followers (which never write).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::index::SegmentIndex;
use crate::index::file::{self as index_file, IndexFile, index_path};
use crate::index::seal;
use crate::index::tail::TailIndex;
use crate::log::format::{FRAME_LEN, HEADER_LEN, parse_segment_file_name};
use crate::log::recovery::{ScanPoint, Tail, scan_records};
use crate::log::segment::{ActiveSegment, MappedSegment, check_header, create_segment, sync_dir};
use crate::position::Position;
use crate::read::{Published, SegmentEntry};
use crate::log::recovery::TornTail;
use crate::options::Options;

/// What opening found at the end of the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    pub head: Position,
    /// A torn or unfinished write that was cut back (never an acknowledged batch).
    pub torn_tail: Option<TornTail>,
    /// A segment file whose creation was interrupted before any record went into it, and
    /// which was therefore made again.
    pub recreated_segment: Option<PathBuf>,
    /// Index files that were missing, damaged or mismatched and were rebuilt from their log.
    pub rebuilt_indexes: Vec<PathBuf>,
    /// Log bytes read at open: the active segment, plus any segment whose index was rebuilt.
    pub scanned_log_bytes: u64,
}

const LOCK_FILE: &str = "LOCK";

/// Takes the store's exclusive lock (an `flock` on `LOCK`, which the kernel drops if the
/// process dies) and writes our pid into it for the next opener's message.
pub(crate) fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io(format_args!("cannot open {}", path.display()), &e))?;
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { "another handle".to_string() } else { format!("process {holder}") };
            return Err(Error::new(
                ErrorKind::StoreLocked,
                format!("store {} is locked by {who}", dir.display()),
            ));
        }
        return Err(Error::io(format_args!("cannot lock {}", path.display()), &e));
    }
    let pid = std::process::id().to_string();
    file.set_len(0)
        .and_then(|_| file.write_all_at(pid.as_bytes(), 0))
        .and_then(|_| file.flush())
        .map_err(|e| Error::io(format_args!("cannot write {}", path.display()), &e))?;
    Ok(file)
}

pub(crate) fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    let entries =
        fs::read_dir(dir).map_err(|e| Error::io(format_args!("cannot list {}", dir.display()), &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format_args!("cannot list {}", dir.display()), &e))?;
        if let Some(base) = entry.file_name().to_str().and_then(parse_segment_file_name) {
            found.push((base, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Publishes every segment but the last as sealed, answered by its index file, or by an index
/// rebuilt in memory from the segment when the file is missing, damaged or mismatched. Returns
/// the position after the sealed segments and the rebuilt files' bytes (for the caller to write
/// once the whole open has succeeded, if it may write at all).
pub(crate) fn load_sealed(
    segments: &[(u64, PathBuf)],
    published: &Published,
    report: &mut RecoveryReport,
) -> Result<(u64, Vec<(PathBuf, Vec<u8>)>)> {
    let mut next_position = 1u64;
    let mut rebuilt: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for pair in segments.windows(2) {
        let [(base, path), (next_base, _)] = pair else { unreachable!() };
        let (base, next_base) = (*base, *next_base);
        if base != next_position {
            return Err(gap(path, base, next_position));
        }
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|e| Error::io(format_args!("cannot open {}", path.display()), &e))?;
        let log = MappedSegment::map(path, &file)?;
        let index = match IndexFile::open(&index_path(path), base) {
            // Matched without reading the log: the next segment's base, and the log's length.
            Ok(index) if base + index.count == next_base && index.log_end <= log.bytes().len() as u64 => index,
            _ => {
                let bytes = seal::encode(log.bytes(), base, next_base, path)?;
                report.scanned_log_bytes += log.bytes().len() as u64;
                let index = IndexFile::from_bytes(&bytes, base)?;
                rebuilt.push((index_path(path), bytes));
                index
            }
        };
        next_position = next_base;
        log.advise_point_reads();
        published.add_segment(Arc::new(SegmentEntry {
            base,
            path: path.clone(),
            log,
            index: ArcSwap::from_pointee(SegmentIndex::Sealed(Arc::new(index))),
        }));
    }
    Ok((next_position, rebuilt))
}

fn gap(path: &Path, base: u64, next_position: u64) -> Error {
    Error::corruption(format!(
        "segment {} starts at position {base}; the log before it ends at {}",
        path.display(),
        next_position - 1
    ))
}

/// Indexes the committed events `scan` found in a segment into its tail index.
pub(crate) fn index_scanned(tail: &TailIndex, log: &[u8], base: u64, first_rel: u32, offsets: &[usize]) -> Result<()> {
    for (i, &offset) in offsets.iter().enumerate() {
        let rel = first_rel + i as u32;
        let len = u32::from_le_bytes(log[offset..offset + 4].try_into().unwrap()) as usize;
        let payload = &log[offset + FRAME_LEN..offset + FRAME_LEN + len];
        let view = EventView::decode(Position(base + rel as u64), payload)?;
        tail.add(rel, offset as u64, &view);
    }
    Ok(())
}

/// Recovers the log in `dir` into `published`; returns the writer's active segment.
///
/// Sealed segments are not read: their index files (verified by checksum, and matched against
/// the next segment's base) give offsets, types and postings. Only the active segment is
/// scanned. A sealed segment whose index file is missing, damaged or mismatched is scanned and
/// its index file rebuilt; if the scan finds damage, the store refuses to open.
pub(crate) fn recover(dir: &Path, options: &Options, published: &Published) -> Result<Recovered> {
    let mut segments = list_segments(dir)?;
    let mut report = RecoveryReport::default();
    if segments.is_empty() {
        create_segment(dir, 1, options.segment_size)?;
        segments = list_segments(dir)?;
    }
    let count = segments.len();
    let (sealed, rebuilt) = load_sealed(&segments, published, &mut report)?;
    let next_position = sealed;
    let (base, path) = segments.pop().expect("at least one segment");
    if base != next_position {
        return Err(gap(&path, base, next_position));
    }
    // Written only once the whole log has recovered: a refused open changes nothing.
    let open = |path: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(format_args!("cannot open {}", path.display()), &e))
    };
    let mut file = open(&path)?;
    let mut log = MappedSegment::map(&path, &file)?;
    let header_crc = match check_header(log.bytes(), base, &path) {
        Ok(crc) => crc,
        // A file shorter than a header, or with nothing but zeros after it, has had no record
        // written into it.
        Err(_) if log.bytes().get(HEADER_LEN..).unwrap_or_default().iter().all(|&b| b == 0) => {
            // Creation was interrupted before the header was durable, so no record can have
            // been written into it: make it again.
            drop(log);
            drop(file);
            fs::remove_file(&path).map_err(|e| Error::io(format_args!("cannot remove {}", path.display()), &e))?;
            sync_dir(dir)?;
            create_segment(dir, base, options.segment_size)?;
            report.recreated_segment = Some(path.clone());
            file = open(&path)?;
            log = MappedSegment::map(&path, &file)?;
            check_header(log.bytes(), base, &path)?
        }
        Err(err) => return Err(err),
    };
    let scan = scan_records(log.bytes(), ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: base });
    report.scanned_log_bytes += log.bytes().len() as u64;
    if let Tail::Torn(torn) = &scan.tail {
        // Zero the torn run so the tail reads clean. The chained CRC already keeps any byte we
        // miss from being adopted by a later batch.
        file.write_all_at(&vec![0u8; torn.bytes], torn.offset as u64)
            .and_then(|_| file.sync_data())
            .map_err(|e| Error::io(format_args!("cannot cut back {}", path.display()), &e))?;
        report.torn_tail = Some(torn.clone());
    }
    for (path, bytes) in rebuilt {
        index_file::write(&path, &bytes)?;
        report.rebuilt_indexes.push(path);
    }
    let tail = Arc::new(TailIndex::new());
    index_scanned(&tail, log.bytes(), base, 0, &scan.event_offsets)?;
    let capacity = log.bytes().len() as u64;
    let entry = Arc::new(SegmentEntry {
        base,
        path: path.clone(),
        log,
        index: ArcSwap::from_pointee(SegmentIndex::Tail(tail.clone())),
    });
    published.add_segment(entry.clone());
    report.segments = count;
    report.head = Position(scan.end.next_position - 1);
    Ok(Recovered {
        active: ActiveSegment { file, path, end: scan.end.offset as u64, chain: scan.end.chain, capacity },
        entry,
        tail,
        report,
        last_recorded_at: scan.last_recorded_at,
    })
}

/// What recovery hands to the writer.
pub(crate) struct Recovered {
    pub active: ActiveSegment,
    pub entry: Arc<SegmentEntry>,
    pub tail: Arc<TailIndex>,
    pub report: RecoveryReport,
    pub last_recorded_at: u64,
}
