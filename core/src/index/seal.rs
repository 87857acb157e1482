//! Sealing: building index files off the writer's thread, and rebuilding one at open when it
//! is missing, damaged or does not match its segment.
//!
//! The writer keeps only the newest part of the active segment indexed in memory. Each time
//! that part reaches `part_bytes` of log (and when the store closes), it hands it over here and
//! starts a new one: the sealer writes the part's index file (`<segment>.<part>.part`, the
//! format of a segment's index file, for the events of the part), so the writer's memory stays
//! bounded whatever the segment size, and an open reads only what came after the last part.
//! When the writer leaves a segment, the sealer merges its parts' files into the segment's
//! index file (`<segment>.idx`, the same bytes an index built from the log would have) and
//! removes them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use crate::error::{Error, Result};
use crate::index::SegmentIndex;
use crate::index::file::{self, IndexFile, index_path};
use crate::log::format::{HEADER_LEN, chain_before};
use crate::log::recovery::{Scan, ScanPoint, Stop, scan_committed, scan_committed_with_views};
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
    let header_crc = check_header(log, base, log_path)?;
    let expected = next_base.saturating_sub(base) as usize;
    let (scan, views) = scan_committed_with_views(log, ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: base }, expected);
    check_sealed_end(&scan, next_base, log_path)?;
    Ok(file::encode(&file::SegmentContents::of(base, &scan, views)))
}

/// Runs the recovery rule over a sealed segment's log bytes: its committed prefix must end
/// exactly at `next_base` (the rule of [`encode`]), else `Corruption`.
pub(crate) fn scan_sealed(log: &[u8], base: u64, next_base: u64, log_path: &Path) -> Result<Scan<Stop>> {
    let header_crc = check_header(log, base, log_path)?;
    let scan = scan_committed(log, ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: base });
    check_sealed_end(&scan, next_base, log_path)?;
    Ok(scan)
}

fn check_sealed_end(scan: &Scan<Stop>, next_base: u64, log_path: &Path) -> Result<()> {
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
    Ok(())
}

/// Encodes the index file of a part of a segment: the committed events of `log` (the segment's
/// bytes up to the part's end) from byte `start` (just after a commit marker) on, which must be
/// exactly the positions `base..next_base`.
pub(crate) fn encode_part(log: &[u8], start: usize, base: u64, next_base: u64, log_path: &Path) -> Result<Vec<u8>> {
    let damaged = |why: String| Error::corruption(format!("segment {} {why}", log_path.display()));
    let chain = chain_before(log, start).ok_or_else(|| damaged(format!("has no commit marker before byte {start}")))?;
    let expected = next_base.saturating_sub(base) as usize;
    let (scan, views) = scan_committed_with_views(log, ScanPoint { offset: start, chain, next_position: base }, expected);
    if scan.end.next_position != next_base || scan.end.offset != log.len() {
        let why = match &scan.tail {
            Stop::Torn { reason, record, .. } => format!(" (at byte {record}: {reason})"),
            Stop::Clean => String::new(),
        };
        return Err(damaged(format!(
            "holds positions {base}..{} from byte {start} to {}; the part ends at position {} and byte {}{why}",
            scan.end.next_position - 1,
            scan.end.offset,
            next_base - 1,
            log.len()
        )));
    }
    Ok(file::encode(&file::SegmentContents::of(base, &scan, views)))
}

/// The name of the index file of the part of segment `log_path` that starts at `part_base`.
pub(crate) fn part_path(log_path: &Path, part_base: u64) -> PathBuf {
    log_path.with_extension(format!("{part_base:020}.part"))
}

/// The segment base and part base a part index file's name gives.
pub(crate) fn parse_part_file_name(name: &str) -> Option<(u64, u64)> {
    let (segment, part) = name.strip_suffix(".part")?.split_once('.')?;
    let number = |digits: &str| {
        (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
    };
    Some((number(segment)?, number(part)?))
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

/// Work for the sealer thread, in the order the writer made it.
pub(crate) enum SealJob {
    /// A part of the active segment the writer has moved past: write its index file and answer
    /// from it. `start` is the byte it starts at, `end` the byte after its last commit marker,
    /// `next_base` the position after its last event.
    Part { entry: Arc<SegmentEntry>, start: usize, end: usize, next_base: u64 },
    /// The writer has left the active segment (its last part was handed over by a `Part` job
    /// just before, or, if the writer had just started it, is `empty_last`, an entry with no
    /// event). One index file for the segment, merged from its parts' files (or, if one of them
    /// could not be written, built from its log), is published in their place.
    Segment { empty_last: Option<Arc<SegmentEntry>>, next_base: u64 },
}

/// Parts of the active segment are merged in tiers, like the digits of a counter in base
/// `PART_FAN`: a part's tier is how many times `PART_FAN` its log bytes are of `part_bytes`
/// (rounded down, in powers), and whenever the newest `PART_FAN` part files share a tier they are
/// merged into one of the next. So a segment of P parts has at most `PART_FAN - 1` part files
/// per tier (about `(PART_FAN - 1) * log(P)` in all: an open reads a header each, walks and
/// condition checks visit an entry each), and each event's index is rewritten `log(P)` times,
/// not `P / k` times as merging everything every k parts would.
pub(crate) const PART_FAN: usize = 4;

/// The tier of a part that spans `bytes` of log (see [`PART_FAN`]).
fn part_tier(bytes: u64, part_bytes: u64) -> u32 {
    let mut tier = 0;
    let mut size = part_bytes.max(1) * PART_FAN as u64;
    while bytes >= size {
        tier += 1;
        size = size.saturating_mul(PART_FAN as u64);
    }
    tier
}

/// The sealer thread. `parts` are the active segment's parts open found (in position order); the
/// sealer keeps that list as the writer hands over more. A failure is reported and leaves the
/// index in memory in use; the next open rebuilds what is missing.
pub(crate) fn run(
    queue: Receiver<SealJob>,
    published: Arc<Published>,
    mode: u32,
    part_bytes: u64,
    mut parts: Vec<Arc<SegmentEntry>>,
) {
    for job in queue {
        let what = match &job {
            SealJob::Part { entry, .. } => part_path(entry.log.path(), entry.base),
            SealJob::Segment { empty_last, next_base } => match parts.first().or(empty_last.as_ref()) {
                Some(first) => index_path(first.log.path()),
                None => PathBuf::from(format!("of the segment before position {next_base}")),
            },
        };
        // A bug here must cost an index file (rebuilt by the next open), never the thread: the
        // jobs after it, and whoever waits for sealing, would wait forever.
        let sealed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job {
            SealJob::Part { entry, start, end, next_base } => {
                // Listed whether or not its file gets written: a part still answered from memory
                // makes the segment's index be built from the log instead of merged.
                parts.push(entry.clone());
                seal_part(&entry, start, end, next_base, mode, part_bytes)?;
                while merge_newest_tier(&mut parts, &published, mode, part_bytes)? {}
                Ok(())
            }
            SealJob::Segment { empty_last, next_base } => {
                let mut segment = std::mem::take(&mut parts);
                segment.extend(empty_last);
                seal_segment(&segment, next_base, &published, mode)
            }
        }));
        match sealed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => crate::error::report(format_args!("lapilli: cannot build the index {}: {e}", what.display())),
            Err(_) => crate::error::report(format_args!("lapilli: building the index {} panicked; the next open rebuilds it", what.display())),
        }
        published.sealing.fetch_sub(1, Ordering::AcqRel);
    }
    // The writer dropped the queue: the store is closing. Its part files of the first tier were
    // not synced (see `seal_part`); they are now, so after a clean close an open scans nothing,
    // even after a power cut.
    sync_part_files(&parts);
}

/// Fsyncs the index files of `parts`, then their directory. Those of higher tiers were synced
/// when merged, but a tier depends on `part_bytes`, which may have changed since a part found at
/// open was written, and a close can afford a few more syncs. A file that fails is removed;
/// failures are reported, and cost the next open a scan, never an answer.
fn sync_part_files(parts: &[Arc<SegmentEntry>]) {
    let mut dir = None;
    for part in parts {
        let index = part.index.load();
        let SegmentIndex::Sealed(file) = &**index else { continue };
        let path = part_path(part.log.path(), part.base);
        let synced = crate::fault::io_point("index.fsync").and_then(|_| std::fs::File::open(&path)?.sync_all());
        match synced {
            Ok(()) => dir = path.parent().map(Path::to_path_buf),
            // After a failed fsync the disk may not hold what the page cache shows: the file
            // goes, and the next open scans its events (and those of the parts after it).
            // Its body is loaded first, as `seal_segment` does before it removes part files: a
            // read begun before the close may still use it.
            Err(e) => {
                let removed = file.verified().is_ok() && std::fs::remove_file(&path).is_ok();
                crate::error::report(format_args!(
                    "lapilli: cannot sync the index {}: {e}{}",
                    path.display(),
                    if removed { "; removed: the next open scans its events" } else { "" }
                ));
            }
        }
    }
    if let Some(dir) = dir
        && let Err(e) = crate::log::segment::sync_dir(&dir)
    {
        crate::error::report(format_args!("lapilli: {e}"));
    }
}

/// The index files answering `indexes`, or None if one of them is still in memory.
fn index_files(indexes: &[Arc<SegmentIndex>]) -> Option<Vec<&IndexFile>> {
    indexes
        .iter()
        .map(|index| match &**index {
            SegmentIndex::Sealed(file) => Some(file),
            SegmentIndex::Tail(_) => None,
        })
        .collect()
}

/// Merges the newest parts into one part file, if they all have their index files, and returns
/// whether it did: the newest `PART_FAN` parts when they share a tier (see [`PART_FAN`]), or,
/// when the newest part is of a higher tier than the parts just before it, those parts and the
/// newest. A part can be of a higher tier from the start (one group of more than `PART_FAN`
/// times `part_bytes`, a bulk load's big batch); without the second rule the smaller parts
/// before it never merged again, and a big group after every few parts left the segment a part
/// file per part (third review). With it, tiers never grow towards the newest part, so there are
/// at most `PART_FAN - 1` part files per tier. The merged file takes the first one's name, which
/// it replaces (their bodies are verified, so loaded, before it is written); it is published in
/// their place and the others' files are removed.
fn merge_newest_tier(parts: &mut Vec<Arc<SegmentEntry>>, published: &Published, mode: u32, part_bytes: u64) -> Result<bool> {
    let tier_of = |part: &Arc<SegmentEntry>| match &**part.index.load() {
        SegmentIndex::Sealed(file) => Some(part_tier(file.log_end - file.log_start() as u64, part_bytes)),
        SegmentIndex::Tail(_) => None,
    };
    let Some(newest) = parts.last().and_then(tier_of) else { return Ok(false) };
    let mut from = parts.len() - 1;
    while from > 0 && tier_of(&parts[from - 1]).is_some_and(|tier| tier < newest) {
        from -= 1;
    }
    if from == parts.len() - 1 {
        let Some(counter) = parts.len().checked_sub(PART_FAN) else { return Ok(false) };
        if !parts[counter..].iter().all(|part| tier_of(part) == Some(newest)) {
            return Ok(false);
        }
        from = counter;
    }
    let indexes: Vec<Arc<SegmentIndex>> = parts[from..].iter().map(|p| p.index.load_full()).collect();
    let Some(files) = index_files(&indexes) else { return Ok(false) };
    let merged = &parts[from..];
    let first = &merged[0];
    let log_path = first.log.path();
    let verified: Vec<&file::VerifiedIndex> = files.iter().map(|f| f.verified()).collect::<Result<_>>()?;
    let path = part_path(log_path, first.base);
    let log_end = files.last().expect("two parts or more").log_end;
    file::merge_parts(&verified, first.base, log_end, &path, mode)?;
    let index = IndexFile::open_part(&path, first.base, log_path, files[0].log_start())?;
    index.verified()?; // its tag filter on first need, as for a part
    let log = first.log.shared().expect("parts share the active segment's mapping");
    let entry = Arc::new(SegmentEntry::loaded(first.base, log_path.to_path_buf(), log, SegmentIndex::Sealed(index)));
    published.replace_parts(merged, entry.clone());
    for part in &merged[1..] {
        let _ = std::fs::remove_file(part_path(log_path, part.base));
    }
    drop(files);
    parts.truncate(from);
    parts.push(entry);
    Ok(true)
}

/// Writes the index file of a finished part. A part of the first tier is not synced: it lives
/// until `PART_FAN` parts make one of the next tier (synced, with the directory), and then its
/// file is removed, at the rates where syncs cost most before the kernel has written it back.
/// Each sync cost the writer: the device flushed the sealer's files between its commits' syncs,
/// and `group_probe`'s append p99 at 64 writers fell from 2.1 to 2.7 ms to 1.5 to 1.6 ms without
/// them (bench/README.md, "The sealer's syncs"). What a power cut takes of them costs the next
/// open a scan or a rebuild of their log, never an answer: open trusts part files only while
/// each header continues the one before and the log's commit marker closes the last, and a
/// body is checked at first use (a damaged one is rebuilt from the log). A process crash loses
/// none of them: they are in the page cache.
///
/// An unsynced part answers from the bytes encoded here, not from its file: no fsync reports a
/// failed writeback of the file, after which a page evicted and read again could come back
/// stale from the disk, past the checks its block had passed. The merge that replaces it, and
/// the close, sync.
fn seal_part(entry: &SegmentEntry, start: usize, end: usize, next_base: u64, mode: u32, part_bytes: u64) -> Result<()> {
    let log = entry.log.bytes()?;
    let log_path = entry.log.path();
    let bytes = encode_part(&log[..end], start, entry.base, next_base, log_path)?;
    let path = part_path(log_path, entry.base);
    let index = if part_tier((end - start) as u64, part_bytes) == 0 {
        file::write_unsynced(&path, &bytes, mode)?;
        IndexFile::part_from_bytes(&path, bytes, entry.base, log_path, start)?
    } else {
        file::write(&path, &bytes, mode)?;
        let index = IndexFile::open_part(&path, entry.base, log_path, start)?;
        // In the page cache now: verify it while that is cheap.
        index.verified()?;
        index
    };
    // Its tag filter is left to the first condition that needs it: parts are merged soon, and
    // building a filter per part and per merge took a fifth of the sealer's time, which bounds
    // how fast appends can go.
    entry.index.store(Arc::new(SegmentIndex::Sealed(index)));
    Ok(())
}

fn seal_segment(parts: &[Arc<SegmentEntry>], next_base: u64, published: &Published, mode: u32) -> Result<()> {
    let first = &parts[0];
    let (base, log_path) = (first.base, first.log.path());
    let log = first.log.bytes()?;
    let path = index_path(log_path);
    // The parts that hold events (the last one is empty when the writer left the segment right
    // after starting a part), each answered by its index file.
    let bases: Vec<u64> = parts.iter().map(|p| p.base).chain([next_base]).collect();
    let indexes: Vec<Arc<SegmentIndex>> =
        parts.iter().zip(bases.windows(2)).filter(|(_, b)| b[0] < b[1]).map(|(p, _)| p.index.load_full()).collect();
    let files = index_files(&indexes);
    let merged = files.and_then(|files| {
        let verified: Result<Vec<&file::VerifiedIndex>> = files.iter().map(|f| f.verified()).collect();
        let log_end = files.last().map_or(HEADER_LEN as u64, |f| f.log_end);
        verified.and_then(|v| file::merge_parts(&v, base, log_end, &path, mode)).ok()
    });
    let index = match merged {
        Some(()) => IndexFile::open(&path, base)?,
        None => build(log, base, next_base, log_path, mode)?,
    };
    index.verified()?.tag_filter();
    // Published as open publishes a sealed segment: its log loaded by the first read that
    // needs it (a copy if it is small, else a mapping). The writer's mapping goes with the last
    // reader of the parts; it was kept for the handle's life, one more mapping at every
    // roll-over, until a long-running writer with small segments met `vm.max_map_count` and
    // could map no next segment (review of 2026-12-04, late; `core/tests/mappings.rs`). Copied
    // at once instead, the small segments' bytes grew the heap with every roll-over, read or
    // not (the second review).
    let entry = Arc::new(SegmentEntry::sealed(base, log_path.to_path_buf(), index));
    published.replace_parts(parts, entry);
    for part in parts {
        // A read that took its snapshot before holds the part's entry, and an index file's body
        // is loaded on first use, by path: a part found at open and not used since (the index
        // built from the log instead of merged from the parts loads none of them) would answer
        // that read "No such file" once its file is gone. So a body is loaded before its file
        // goes; one that cannot be loaded now keeps its file, which the next open removes.
        let unneeded = match &**part.index.load() {
            SegmentIndex::Sealed(file) => file.verified().is_ok(),
            SegmentIndex::Tail(_) => true,
        };
        if unneeded {
            let _ = std::fs::remove_file(part_path(log_path, part.base));
        }
    }
    Ok(())
}
