//! Opening a store's files: the lock, listing segments, and recovery of the log and its
//! indexes. Shared by the writable open (which may repair: cut a torn tail, recreate a segment
//! whose creation was interrupted, rewrite index files) and by followers (which never write).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::index::SegmentIndex;
use crate::index::file::{self as index_file, IndexFile, index_path};
use crate::index::seal;
use crate::index::tail::TailIndex;
use crate::index::IndexView;
use crate::index::plan::SegmentAccess;
use crate::log::format::{FRAME_LEN, HEADER_LEN, MARKER_RECORD_LEN, chain_before, parse_marker, parse_segment_file_name};
use crate::log::recovery::{ScanPoint, Tail, scan_records};
use crate::log::segment::{
    ActiveSegment, FileBytes, check_header, create_segment, drop_cached_pages, grow_empty_segment, open_with_mode,
    sync_dir,
};
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
    /// Rebuilt index files that could not be written, with the error. Their indexes are kept in
    /// memory by this handle (an index is derived data, so the store opens anyway), and the
    /// next open rebuilds them again.
    pub unwritten_indexes: Vec<(PathBuf, String)>,
    /// Log bytes read at open: the active segment, plus any segment whose index was rebuilt.
    pub scanned_log_bytes: u64,
    /// Index bytes whose checksum open verified: those of indexes it keeps in memory. An index
    /// file found in place has only its header read at open; its body is verified as reads use
    /// it (its block table and dictionaries on first use, each other 4 KiB block on first read).
    pub verified_index_bytes: u64,
}

const LOCK_FILE: &str = "LOCK";

/// Takes the store's exclusive lock (an `flock` on `LOCK`, which the kernel drops if the
/// process dies) and writes our pid into it for the next opener's message.
/// Creates the store directory `dir` if it is missing, with exactly `mode` (see
/// `open_with_mode` for why exactly); one that already exists keeps its mode, which its owner
/// chose. Missing parents are made too, with the mode `mkdir -p` gives them.
///
/// Each level made here has its entry fsynced in its parent, top down, before the open writes
/// anything into it: a new directory's entry is durable only once its parent is fsynced, and a
/// crash that lost it would take every segment fsynced inside it along. If a step fails, the
/// levels made here are removed again (they are still empty), so that a later open does not
/// find a directory whose entry may never have reached the disk and trust it.
pub(crate) fn create_store_dir(dir: &Path, mode: u32) -> Result<()> {
    let mut missing = Vec::new();
    let mut level = dir;
    while !level.exists() {
        missing.push(level);
        match level.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => level = parent,
            _ => break,
        }
    }
    let mut made: Vec<&Path> = Vec::new();
    let result = missing.iter().rev().try_for_each(|&level| {
        let level_mode = if level == dir { mode } else { 0o777 };
        match fs::DirBuilder::new().mode(level_mode).create(level) {
            Ok(()) => made.push(level),
            // Made meanwhile by someone else, whose to make durable.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && level.is_dir() => return Ok(()),
            Err(e) => return Err(Error::io(format_args!("cannot create {}", level.display()), &e)),
        }
        if level == dir {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(format_args!("cannot set the mode of {}", dir.display()), &e))?;
        }
        let parent = level.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        sync_dir(parent)
    });
    if result.is_err() {
        for level in made.iter().rev() {
            let _ = fs::remove_dir(level);
        }
    }
    result
}

/// A `LOCK` made now gets permission bits `mode`; one already there keeps its own.
pub(crate) fn take_lock(dir: &Path, mode: u32) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let existing = || OpenOptions::new().read(true).write(true).open(&path);
    let mut file = match open_with_mode(&path, OpenOptions::new().read(true).write(true).create_new(true), mode) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => existing(),
        created => created,
    }
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

/// An error reading a store's directory or files, which names the path; a refused permission
/// says why a store may refuse it, since by default only its owner may read it.
pub(crate) fn cannot_read(path: &Path, e: &io::Error) -> Error {
    if e.kind() == io::ErrorKind::PermissionDenied {
        return Error::io(
            format_args!(
                "cannot read {}: a store is readable by its owner only, unless its writer opens it \
                 with a wider file_mode (0o640 shares it with the directory's group)",
                path.display()
            ),
            e,
        );
    }
    Error::io(format_args!("cannot read {}", path.display()), e)
}

pub(crate) fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    Ok(list_store(dir)?.segments)
}

/// A store directory's files, from one listing.
pub(crate) struct StoreFiles {
    /// Segments by base, in position order.
    pub segments: Vec<(u64, PathBuf)>,
    /// Temporary index files: a crash while an index file was written leaves one behind.
    pub temporaries: Vec<PathBuf>,
    /// Part index files by the base of their segment, each list in position order.
    pub parts: BTreeMap<u64, Vec<(u64, PathBuf)>>,
}

pub(crate) fn list_store(dir: &Path) -> Result<StoreFiles> {
    let mut found = StoreFiles { segments: Vec::new(), temporaries: Vec::new(), parts: BTreeMap::new() };
    let entries = fs::read_dir(dir).map_err(|e| cannot_read(dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| cannot_read(dir, &e))?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else { continue };
        if let Some(base) = parse_segment_file_name(name) {
            found.segments.push((base, entry.path()));
        } else if index_file::is_temporary_name(name) {
            found.temporaries.push(entry.path());
        } else if let Some((segment, part)) = seal::parse_part_file_name(name) {
            found.parts.entry(segment).or_default().push((part, entry.path()));
        }
    }
    found.segments.sort();
    for parts in found.parts.values_mut() {
        parts.sort();
    }
    Ok(found)
}

/// What open does with an index it had to rebuild.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rebuilds {
    /// Write it (a writable open) with permission bits `mode`; keep it in memory only if it
    /// cannot be written.
    Write { mode: u32 },
    /// Keep it in memory (a follower never writes).
    InMemory,
}

/// A sealed segment as open found it.
enum SealedSegment {
    /// Ready to publish: its index file is in place (header checked), or its index is in memory.
    Ready(Arc<SegmentEntry>),
    /// Its index was rebuilt and written under a temporary name, to be renamed into place once
    /// the open has succeeded.
    Written(Box<WrittenIndex>),
}

struct WrittenIndex {
    base: u64,
    next_base: u64,
    path: PathBuf,
    tmp: PathBuf,
}

/// The sealed segments open found, not yet published. Index files rebuilt for them wait under
/// their temporary names until the open has succeeded ([`LoadedSealed::into_entries`]); if it
/// is refused, dropping this removes them, so a refused open changes no file.
pub(crate) struct LoadedSealed {
    segments: Vec<SealedSegment>,
    /// The position after the last sealed segment.
    pub next_position: u64,
}

impl Drop for LoadedSealed {
    fn drop(&mut self) {
        for segment in &self.segments {
            if let SealedSegment::Written(written) = segment {
                let _ = fs::remove_file(&written.tmp);
            }
        }
    }
}

impl LoadedSealed {
    /// Renames the rebuilt index files into place and returns the entries to publish, in
    /// position order. An index whose file cannot be put in place is rebuilt again and kept in
    /// memory: it is derived data, so the report says which and why, and the store opens.
    pub fn into_entries(mut self, report: &mut RecoveryReport) -> Result<Vec<Arc<SegmentEntry>>> {
        let segments = std::mem::take(&mut self.segments);
        let mut renamed_in = None;
        let mut entries = Vec::with_capacity(segments.len() + 1);
        for segment in segments {
            let entry = match segment {
                SealedSegment::Ready(entry) => entry,
                SealedSegment::Written(written) => {
                    let WrittenIndex { base, next_base, path, tmp } = *written;
                    let target = index_path(&path);
                    let index = match index_file::install(&tmp, &target).and_then(|()| IndexFile::open(&target, base)) {
                        Ok(index) => {
                            renamed_in = target.parent().map(Path::to_path_buf);
                            index
                        }
                        Err(e) => {
                            let _ = fs::remove_file(&tmp);
                            report.unwritten_indexes.push((target.clone(), e.to_string()));
                            let bytes = encode_from_log(&path, base, next_base, report)?;
                            IndexFile::from_bytes(&target, bytes, base)?
                        }
                    };
                    Arc::new(SegmentEntry::sealed(base, path, index))
                }
            };
            if let SegmentIndex::Sealed(index) = &**entry.index.load() {
                report.verified_index_bytes += index.verified_bytes();
            }
            entries.push(entry);
        }
        if let Some(dir) = renamed_in {
            // The renamed files serve this handle either way; if a crash loses a rename, the
            // next open rebuilds that index again.
            let _ = sync_dir(&dir);
        }
        Ok(entries)
    }
}

/// Finds the sealed segments `sealed` (every segment but the last, whose base is `end`), each
/// answered by its index file, or by an index rebuilt from the segment when the file is missing,
/// damaged or mismatched (written as it is rebuilt, under its temporary name, or kept in
/// memory: see [`Rebuilds`]). Reads the header of each index file and nothing of the logs,
/// except those whose index it rebuilds.
pub(crate) fn load_sealed(
    sealed: Vec<(u64, PathBuf)>,
    end: u64,
    rebuilds: Rebuilds,
    report: &mut RecoveryReport,
) -> Result<LoadedSealed> {
    let mut loaded = LoadedSealed { segments: Vec::with_capacity(sealed.len()), next_position: 1 };
    let next_bases: Vec<u64> = sealed.iter().skip(1).map(|(base, _)| *base).chain([end]).collect();
    for (_, path) in &sealed {
        prefetch_start(&index_path(path)); // the headers, read together (see `accept_parts`)
    }
    for ((base, path), next_base) in sealed.into_iter().zip(next_bases) {
        if base != loaded.next_position {
            return Err(gap(&path, base, loaded.next_position));
        }
        let log_len = fs::metadata(&path).map_err(|e| cannot_read(&path, &e))?.len();
        let segment = match matching_index_file(&path, log_len, base, next_base) {
            Ok(index) => SealedSegment::Ready(Arc::new(SegmentEntry::sealed(base, path, index))),
            Err(_) => rebuild(path, base, next_base, rebuilds, report)?,
        };
        loaded.segments.push(segment);
        loaded.next_position = next_base;
    }
    Ok(loaded)
}

/// The index file of the sealed segment at `path` (its header checked; the body is verified by
/// its first use), matched against the segment without reading its log: its events reach the
/// next segment's base, and its committed end lies inside the log file of `log_len` bytes.
pub(crate) fn matching_index_file(path: &Path, log_len: u64, base: u64, next_base: u64) -> Result<IndexFile> {
    let index_path = index_path(path);
    let index = IndexFile::open(&index_path, base)?;
    if base + index.count != next_base || index.log_end > log_len {
        return Err(Error::corruption(format!(
            "index {} holds {} events ending at byte {}; its segment holds {} events in {log_len} bytes",
            index_path.display(),
            index.count,
            index.log_end,
            next_base - base
        )));
    }
    Ok(index)
}

/// Rebuilds the index of a sealed segment from its log; its bytes are written or kept, never
/// both, so a store whose every index is rebuilt does not hold them all at once.
fn rebuild(path: PathBuf, base: u64, next_base: u64, rebuilds: Rebuilds, report: &mut RecoveryReport) -> Result<SealedSegment> {
    let target = index_path(&path);
    let bytes = encode_from_log(&path, base, next_base, report)?;
    report.rebuilt_indexes.push(target.clone());
    if let Rebuilds::Write { mode } = rebuilds {
        match index_file::write_temporary(&target, &bytes, mode, index_file::Durable::Synced) {
            Ok(tmp) => return Ok(SealedSegment::Written(Box::new(WrittenIndex { base, next_base, path, tmp }))),
            Err(e) => report.unwritten_indexes.push((target.clone(), e.to_string())),
        }
    }
    let index = IndexFile::from_bytes(&target, bytes, base)?;
    Ok(SealedSegment::Ready(Arc::new(SegmentEntry::sealed(base, path, index))))
}

/// Scans a sealed segment's log and encodes its index; the log's bytes are let go after.
fn encode_from_log(path: &Path, base: u64, next_base: u64, report: &mut RecoveryReport) -> Result<Vec<u8>> {
    let log = FileBytes::load_sealed(path)?;
    report.scanned_log_bytes += log.len() as u64;
    seal::encode(&log, base, next_base, path)
}

pub(crate) fn gap(path: &Path, base: u64, next_position: u64) -> Error {
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
    // A segment prepared by an earlier writer but never installed: prepared anew when needed.
    let prepared = dir.join(crate::log::prepare::PREPARED_FILE);
    if prepared.exists() {
        fs::remove_file(&prepared).map_err(|e| Error::io(format_args!("cannot remove {}", prepared.display()), &e))?;
    }
    let mut listed = list_store(dir)?;
    let mut report = RecoveryReport::default();
    if listed.segments.is_empty() {
        create_segment(dir, 1, options.segment_size, options.file_mode)?;
        listed = list_store(dir)?;
    }
    // Temporaries and parts that open does not use are removed once it has succeeded: a
    // refused open changes no file.
    let StoreFiles { mut segments, temporaries: leftover_temporaries, mut parts } = listed;
    let count = segments.len();
    let (base, path) = segments.pop().expect("at least one segment");
    let last_sealed = segments.last().map(|(sealed_base, sealed_path)| (*sealed_base, sealed_path.clone()));
    let sealed = load_sealed(segments, base, Rebuilds::Write { mode: options.file_mode }, &mut report)?;
    let next_position = sealed.next_position;
    if base != next_position {
        return Err(gap(&path, base, next_position));
    }
    let open = |path: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(format_args!("cannot open {}", path.display()), &e))
    };
    let mut file = open(&path)?;
    // Pages cached from before a failed fsync may not be on disk, so what open reads of the
    // active segment is dropped from the page cache before it is read (in whole folios of up to
    // 2 MiB: see `drop_cached_pages`): the header's now, and what open scans once the part
    // files have said where that starts. Not the parts' bytes between: each part's bytes were
    // durable before its file was written, and dropping them (from byte 0, as open did) threw
    // away what the page cache held of the whole active segment at every open, for reads to
    // fetch from the disk again (third review).
    drop_cached_pages(&file, 0, HEADER_LEN as u64);
    // Advised for point reads before anything touches it: a fault would otherwise read around
    // itself as much as the device reads ahead (8 MiB on the review's machine), and the header's
    // and the last part's marker's faults read megabytes of log that open does not need.
    let map = |file: &File| {
        FileBytes::map(&path, file).inspect(|log| log.advise_point_reads())
    };
    let mut log = map(&file)?;
    let header_crc = match check_header(&log, base, &path) {
        Ok(crc) => crc,
        Err(err) => {
            // Whether anything was written after the header must be the disk's answer too.
            drop(log);
            drop_cached_pages(&file, 0, 0);
            log = map(&file)?;
            // A file shorter than a header, or with nothing but zeros after it, has had no
            // record written into it.
            if !log.get(HEADER_LEN..).unwrap_or_default().iter().all(|&b| b == 0) {
                return Err(err);
            }
            // Creation was interrupted before the header was durable, so no record can have
            // been written into it: make it again.
            drop(log);
            drop(file);
            fs::remove_file(&path).map_err(|e| Error::io(format_args!("cannot remove {}", path.display()), &e))?;
            sync_dir(dir)?;
            create_segment(dir, base, options.segment_size, options.file_mode)?;
            report.recreated_segment = Some(path.clone());
            file = open(&path)?;
            log = map(&file)?;
            check_header(&log, base, &path)?
        }
    };
    // The parts of the active segment whose index files were written: their bytes were durable
    // before their files were, so only what follows them is scanned.
    let found_parts = parts.remove(&base).unwrap_or_default();
    let mut accepted = accept_parts(&log, base, &path, header_crc, found_parts);
    let start = accepted.resume;
    // The scan's pages from the disk: the kernel keeps pages that are mapped, so the mapping
    // (which read the last part's closing marker) goes first.
    drop(log);
    drop_cached_pages(&file, start.offset as u64, 0);
    let log = map(&file)?;
    if log.get(start.offset..start.offset + 4).is_some_and(|length| length != [0; 4]) {
        // Something follows the last part (a crash kept its file, or the files of the parts the
        // sealer had not written yet, from being written): read it ahead of the scan rather
        // than a fault per page. Not when nothing follows: reading ahead from there would read
        // megabytes of zeros at every open.
        log.advise_scan_from(start.offset);
    }
    let scan = scan_records(&log, start);
    log.advise_point_reads();
    report.scanned_log_bytes += (scan.end.offset - start.offset) as u64
        + match &scan.tail {
            Tail::Torn(torn) => torn.bytes as u64,
            Tail::Clean => 0,
        };
    // Commit times never go backwards: with no event in the active segment, the writer's clock
    // starts from the newest event before it. Found here, before this open changes any file,
    // so that a damaged segment refuses the open with nothing changed.
    let shared_log = Arc::new(log);
    let last_recorded_at = match (scan.event_offsets.is_empty(), accepted.parts.last(), last_sealed) {
        (false, _, _) => scan.last_recorded_at,
        (true, Some(part), _) => newest_recorded_at(part, &path, &shared_log)?,
        (true, None, Some((sealed_base, sealed_path))) => {
            let sealed_log = FileBytes::load_sealed(&sealed_path)?;
            report.scanned_log_bytes += sealed_log.len() as u64;
            seal::scan_sealed(&sealed_log, sealed_base, base, &sealed_path)?.last_recorded_at
        }
        (true, None, None) => 0,
    };
    let mut log = shared_log;
    if let Tail::Torn(torn) = &scan.tail {
        // Zero the torn run so the tail reads clean. The chained CRC already keeps any byte we
        // miss from being adopted by a later batch.
        file.write_all_at(&vec![0u8; torn.bytes], torn.offset as u64)
            .and_then(|_| file.sync_data())
            .map_err(|e| Error::io(format_args!("cannot cut back {}", path.display()), &e))?;
        report.torn_tail = Some(torn.clone());
    }
    if scan.end.offset == HEADER_LEN && (log.len() as u64) < options.segment_size {
        // An empty active segment from an open with a smaller `segment_size` takes the new size
        // (it cannot roll over: the next segment would have its base, that is, its name).
        grow_empty_segment(&file, &path, options.segment_size)?;
        log = Arc::new(FileBytes::map(&path, &file)?);
    }
    // A last part shorter than `part_bytes` (the close writes whatever the last part holds) is
    // carried on by the writer rather than left as a file of its own: else every session of a
    // store opened and closed often would leave a small part behind. Its events go back into the
    // tail index from its index file, so the open still reads no log byte before `start`.
    let (tail, part_start) = match accepted.parts.last() {
        Some(part) if part.log_end - (part.log_start() as u64) < options.part_bytes => {
            let part = accepted.parts.pop().expect("just seen");
            let tail = TailIndex::from_index(part.verified()?)?;
            index_scanned(&tail, &log, part.base, part.count as u32, &scan.event_offsets)?;
            (Arc::new(tail), (part.base, part.log_start()))
        }
        _ => {
            let tail = TailIndex::new();
            index_scanned(&tail, &log, start.next_position, 0, &scan.event_offsets)?;
            (Arc::new(tail), (start.next_position, start.offset))
        }
    };
    let mut entries = sealed.into_entries(&mut report)?;
    for leftover in leftover_temporaries.into_iter().chain(accepted.rejected).chain(parts.into_values().flatten().map(|(_, p)| p)) {
        // One this open wrote and renamed is gone already; one that cannot be removed (a
        // directory, say) only makes writing that index fail, which is not fatal either.
        let _ = fs::remove_file(leftover);
    }
    // Like a sealed segment's: read by point fetches through the index, and ahead only by the
    // walks that prefetch (a page fault would otherwise read 128 KiB around each event a cold
    // selective read needs).
    log.advise_point_reads();
    let capacity = log.len() as u64;
    let part_entries: Vec<Arc<SegmentEntry>> = accepted
        .parts
        .into_iter()
        .map(|index| {
            Arc::new(SegmentEntry::loaded(index.base, path.clone(), log.clone(), SegmentIndex::Sealed(index)))
        })
        .collect();
    entries.extend(part_entries.iter().cloned());
    let entry = Arc::new(SegmentEntry::loaded(part_start.0, path.clone(), log, SegmentIndex::Tail(tail.clone())));
    entries.push(entry.clone());
    published.add_segments(entries);
    report.segments = count;
    report.head = Position(scan.end.next_position - 1);
    Ok(Recovered {
        active: ActiveSegment { file: Arc::new(file), path, end: scan.end.offset as u64, chain: scan.end.chain, capacity },
        entry,
        tail,
        parts: part_entries,
        part_start: part_start.1,
        report,
        last_recorded_at,
    })
}

/// The part index files of the active segment open trusts, and where its scan resumes.
struct AcceptedParts {
    parts: Vec<IndexFile>,
    resume: ScanPoint,
    /// Part files that do not continue the accepted ones: removed once the open succeeds.
    rejected: Vec<PathBuf>,
}

/// Accepts the part index files `found` (in position order) of the active segment `log` that
/// continue one another from the segment's base (each starts at the position after the last),
/// the last of them ending at a commit marker of the log that closes exactly its events. A
/// part covered by an earlier one (left by a crash while the sealer merged parts) is skipped;
/// the first that breaks the chain, and every part after it, is rejected. Only the headers, and
/// the page of the last part's closing marker, are read (a part file's body is verified by its
/// first use, like a sealed segment's).
fn accept_parts(log: &[u8], base: u64, log_path: &Path, header_crc: u32, found: Vec<(u64, PathBuf)>) -> AcceptedParts {
    let start = ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: base };
    // Each header is a small read, and cold each costs a device round trip: ask for all of them
    // first, so the device serves them together rather than one after another (measured on a
    // 10M-event store: six part files, 6 to 12 ms each read in turn).
    for (_, path) in &found {
        prefetch_start(path);
    }
    let mut chained: Vec<(IndexFile, PathBuf)> = Vec::new();
    let mut rejected = Vec::new();
    let (mut next_position, mut offset) = (base, HEADER_LEN);
    let mut broken = false;
    for (part_base, path) in found {
        if broken || part_base > next_position {
            broken = true;
            rejected.push(path);
            continue;
        }
        if part_base < next_position {
            rejected.push(path); // covered by a merged part
            continue;
        }
        let header = IndexFile::open_part(&path, part_base, log_path, offset).ok().filter(|index| {
            index.count > 0 && usize::try_from(index.log_end).is_ok_and(|end| end > offset && end <= log.len())
        });
        match header {
            Some(index) => {
                next_position = part_base + index.count;
                offset = index.log_end as usize;
                chained.push((index, path));
            }
            None => {
                broken = true;
                rejected.push(path);
            }
        }
    }
    // The scan resumes after the last part: its end must be a commit marker closing exactly its
    // events, whose checksum seeds the scan. If not, fall back to the part before it.
    while let Some((last, _)) = chained.last() {
        let end = last.log_end as usize;
        let closes = chain_before(log, end).and_then(|chain| {
            let (first, count) = parse_marker(&log[end - MARKER_RECORD_LEN + FRAME_LEN..end])?;
            let next_position = last.base + last.count;
            (first + count as u64 == next_position).then_some(ScanPoint { offset: end, chain, next_position })
        });
        if let Some(resume) = closes {
            return AcceptedParts { parts: chained.into_iter().map(|(index, _)| index).collect(), resume, rejected };
        }
        let (_, path) = chained.pop().expect("just seen");
        rejected.push(path);
    }
    AcceptedParts { parts: Vec::new(), resume: start, rejected }
}

/// Asks the kernel to start reading the first page of the file at `path` (a hint: errors
/// change nothing but speed).
fn prefetch_start(path: &Path) {
    #[cfg(target_os = "linux")]
    if let Ok(file) = File::open(path) {
        // SAFETY: plain syscall on a descriptor we own for the duration of the call.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 4096, libc::POSIX_FADV_WILLNEED) };
    }
    // Elsewhere (macOS) there is no such hint: open reads the header when it needs it.
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// The commit time of the last event of a part of the active segment, its record checked.
fn newest_recorded_at(part: &IndexFile, log_path: &Path, log: &Arc<FileBytes>) -> Result<u64> {
    let segment_log = crate::log::segment::SegmentLog::loaded(log_path.to_path_buf(), log.clone());
    let access = SegmentAccess { base: part.base, log: &segment_log, index: IndexView::Sealed(part.verified()?) };
    Ok(access.event(part.count as u32 - 1)?.recorded_at)
}

/// What recovery hands to the writer.
pub(crate) struct Recovered {
    pub active: ActiveSegment,
    pub entry: Arc<SegmentEntry>,
    pub tail: Arc<TailIndex>,
    /// The active segment's parts answered by their index files, and where the part `entry`
    /// indexes in memory starts.
    pub parts: Vec<Arc<SegmentEntry>>,
    pub part_start: usize,
    pub report: RecoveryReport,
    pub last_recorded_at: u64,
}
