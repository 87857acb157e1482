//! Looking into a store without changing it: its segments, the vocabulary of types and tags
//! (from the indexes, never a scan of the log), statistics, and [`verify`], which re-checks
//! every byte against the recovery rule and every index file against a scan of its segment.
//! What the `lapilli` command line and the bindings' `stats()` read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::event::EventView;
use crate::index::file::{INDEX_FORMAT_VERSION, IndexFile, VerifiedIndex, index_path};
use crate::index::postings::Postings;
use crate::index::{IndexView, SegmentIndex};
use crate::log::format::{FRAME_LEN, HEADER_LEN};
use crate::log::recovery::{ScanPoint, Stop, scan_committed};
use crate::log::segment::{FileBytes, check_header};
use crate::open::list_store;
use crate::position::Position;
use crate::read::{Published, SegmentEntry};
use crate::stats::Stats;

/// How a segment's events are indexed, as the handle that was asked sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexState {
    /// One index file for the whole segment.
    File,
    /// Index files for parts of it (the active segment, or a sealed one whose parts are not
    /// merged yet), and possibly an in-memory index for the newest events.
    Parts { files: usize, in_memory: bool },
    /// Only in memory: the active segment's newest events, or an index to be rebuilt.
    Memory,
}

/// One segment file of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base: Position,
    /// Its last event visible to the handle; None while it holds none.
    pub last: Option<Position>,
    pub path: PathBuf,
    /// The file's size (segments are preallocated: this is the capacity, not the bytes used).
    pub file_bytes: u64,
    /// False for the last segment, which the writer appends to.
    pub sealed: bool,
    pub index: IndexState,
}

impl SegmentInfo {
    pub fn events(&self) -> u64 {
        self.last.map_or(0, |last| last.get() + 1 - self.base.get())
    }
}

/// The format versions of the files this build reads and writes.
pub const SEGMENT_FORMAT_VERSION: u32 = crate::log::format::FORMAT_VERSION;
pub const INDEX_FILE_FORMAT_VERSION: u32 = INDEX_FORMAT_VERSION;

/// The segments of a snapshot's log, one per file (a segment indexed in parts is several
/// entries of the published list).
pub(crate) fn segments(published: &Published) -> Result<Vec<SegmentInfo>> {
    let head = published.head();
    let entries = published.segments.load_full();
    let mut out: Vec<SegmentInfo> = Vec::new();
    let mut states: Vec<Vec<bool>> = Vec::new(); // per segment: each entry's "is a file"
    for entry in entries.iter() {
        let path = entry.log.path();
        let is_file = matches!(&**entry.index.load(), SegmentIndex::Sealed(_));
        match out.last_mut() {
            Some(last) if last.path == path => states.last_mut().expect("pushed together").push(is_file),
            _ => {
                let file_bytes = std::fs::metadata(path)
                    .map_err(|e| Error::io(format_args!("cannot read {}", path.display()), &e))?
                    .len();
                out.push(SegmentInfo {
                    base: Position(entry.base),
                    last: None,
                    path: path.to_owned(),
                    file_bytes,
                    sealed: true,
                    index: IndexState::Memory,
                });
                states.push(vec![is_file]);
            }
        }
    }
    let bases: Vec<u64> = out.iter().map(|s| s.base.get()).collect();
    let count = out.len();
    for (i, (segment, entries)) in out.iter_mut().zip(&states).enumerate() {
        let end = bases.get(i + 1).map_or(head, |next| next - 1).min(head);
        segment.last = (end >= segment.base.get()).then_some(Position(end));
        segment.sealed = i + 1 < count;
        let files = entries.iter().filter(|&&f| f).count();
        segment.index = match (files, entries.len()) {
            (0, _) => IndexState::Memory,
            (1, 1) if index_path(&segment.path).exists() => IndexState::File,
            (files, n) => IndexState::Parts { files, in_memory: files < n },
        };
    }
    Ok(out)
}

/// Every event type with how many events have it, by name.
pub(crate) fn types(published: &Published) -> Result<Vec<(String, u64)>> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    each_visible_index(published, |index, last| {
        match index {
            IndexView::Sealed(file) => {
                file.prefetch_whole();
                let mut per_id: HashMap<u32, u64> = HashMap::new();
                for rel in 0..=last {
                    *per_id.entry(file.type_at(rel)?).or_default() += 1;
                }
                for (name, id) in file.type_names() {
                    if let Some(n) = per_id.get(&id) {
                        *counts.entry(name.to_owned()).or_default() += n;
                    }
                }
            }
            IndexView::Tail(tail) => {
                let mut per_id: HashMap<u32, u64> = HashMap::new();
                for rel in 0..=last {
                    *per_id.entry(tail.type_at(rel)).or_default() += 1;
                }
                for (name, id) in tail.type_names() {
                    if let Some(n) = per_id.get(&id) {
                        *counts.entry(name).or_default() += n;
                    }
                }
            }
        }
        Ok(())
    })?;
    Ok(counts.into_iter().collect())
}

/// Every tag starting with `prefix` with how many events carry it, by name.
pub(crate) fn tags(published: &Published, prefix: &str) -> Result<Vec<(String, u64)>> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    each_visible_index(published, |index, last| {
        match index {
            IndexView::Sealed(file) => file.each_tag_with_prefix(prefix, |tag, postings| {
                let n = visible_count(&postings, last, file.count());
                if n > 0 {
                    *counts.entry(String::from_utf8_lossy(tag).into_owned()).or_default() += n;
                }
            })?,
            IndexView::Tail(tail) => {
                for (tag, n) in tail.tag_counts_up_to(last, prefix) {
                    *counts.entry(tag).or_default() += n;
                }
            }
        }
        Ok(())
    })?;
    Ok(counts.into_iter().collect())
}

fn visible_count(postings: &Postings, last: u32, events: u64) -> u64 {
    if last as u64 + 1 >= events {
        return postings.count() as u64;
    }
    let mut n = 0;
    postings.for_each_up_to(last, |_| n += 1);
    n
}

/// Calls `visit` with the index of every published entry (segment or part) holding events at
/// or below the head, and the last relative position of it the head covers.
fn each_visible_index(published: &Published, mut visit: impl FnMut(IndexView<'_>, u32) -> Result<()>) -> Result<()> {
    published.check()?;
    let head = published.head();
    let entries = published.segments.load_full();
    for (i, entry) in entries.iter().enumerate() {
        let end = entries.get(i + 1).map_or(head, |next| next.base - 1).min(head);
        if end < entry.base {
            continue;
        }
        let index = entry.index.load_full();
        visit(index.view()?, (end - entry.base) as u32)?;
    }
    Ok(())
}

/// Bytes of the index files (whole segments and parts) in `dir`.
fn index_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".idx") || name.ends_with(".part")
        })
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.len())
        .sum()
}

pub(crate) fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn stats(published: &Published, dir: &Path, read_only: bool) -> Result<Stats> {
    let counters = &published.counters;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    let head = published.head();
    let events_appended = counters.events_appended();
    let group_commits = published.commit_groups.load(relaxed);
    let segments = {
        let entries = published.segments.load();
        let mut paths: Vec<&Path> = entries.iter().map(|e| e.log.path()).collect();
        paths.dedup();
        paths.len() as u64
    };
    let (follower_lag_positions, follower_lag_millis) = if read_only {
        let point = published.follow_point.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (positions, millis) = match point {
            Some((entry, point)) => follower_lag(&entry, point, head)?,
            None => (0, 0),
        };
        (Some(positions), Some(millis))
    } else {
        (None, None)
    };
    let [fsync_p50, fsync_p99] = counters.fsync_micros.quantiles([0.50, 0.99]);
    Ok(Stats {
        head,
        events_appended,
        bytes_appended: counters.bytes_appended(),
        group_commits,
        events_per_commit_mean: if group_commits == 0 { 0.0 } else { events_appended as f64 / group_commits as f64 },
        events_per_commit_max: counters.events_per_commit_max(),
        fsyncs: counters.fsync_micros.count(),
        fsync_p50_micros: fsync_p50,
        fsync_p99_micros: fsync_p99,
        fsync_max_micros: counters.fsync_micros.max(),
        queue_depth: counters.queue_depth(),
        queue_depth_max: counters.queue_depth_max(),
        segments,
        index_bytes: index_bytes(dir),
        subscriptions: counters.subscriptions(),
        follower_lag_positions,
        follower_lag_millis,
    })
}

/// How far the follower's published `head` is behind what is committed in the segment it
/// follows (the recovery rule run once more, from the point it last accepted), in positions,
/// and how long ago the first event it has not published was committed, in ms. The head is
/// read before the point, so a pass of the poll thread in between only makes the answer
/// newer, never negative.
fn follower_lag(entry: &Arc<SegmentEntry>, point: ScanPoint, head: u64) -> Result<(u64, u64)> {
    let log = entry.log.bytes()?;
    let scan = scan_committed(log, point);
    let committed = scan.end.next_position - 1;
    if committed <= head {
        return Ok((0, 0));
    }
    // The first unpublished event: in this scan, or (head behind the point) already accepted.
    let rel = (head + 1).saturating_sub(point.next_position) as usize;
    let millis = match scan.event_offsets.get(rel) {
        Some(&offset) => {
            let len = u32::from_le_bytes(log[offset..offset + 4].try_into().unwrap()) as usize;
            let view = EventView::decode(Position(head + 1), &log[offset + FRAME_LEN..offset + FRAME_LEN + len])?;
            now_micros().saturating_sub(view.recorded_at) / 1000
        }
        None => 0,
    };
    Ok((committed - head, millis))
}

/// The first thing [`verify`] found wrong: where it is and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The segment file (or, for an index, the index file).
    pub file: PathBuf,
    /// The byte of the segment's log where the damage starts (for an index, the log offset of
    /// the first event it answers wrongly, or 0 for the file as a whole).
    pub offset: u64,
    /// The position of the first event affected.
    pub position: Position,
    pub reason: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}, position {}: {}", self.file.display(), self.offset, self.position, self.reason)
    }
}

/// What [`verify`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub segments: u64,
    /// Committed events whose records were checked.
    pub events: u64,
    /// Index files (whole segments and parts) checked against their segment.
    pub index_files: u64,
    /// Log bytes read.
    pub log_bytes: u64,
    /// None when the store is intact.
    pub fault: Option<Fault>,
}

/// Checks the store in `dir` without opening it or changing a byte: every segment header, every
/// record's chained CRC and every commit marker (the recovery rule over the whole log; each
/// sealed segment's committed events must reach the next segment's base), and each index file
/// (whole segment or part) against a scan of its events: checksum, count, offsets, types and
/// every tag's postings. Stops at the first fault.
///
/// `writer_running`: a writer holds the store, so bytes after the last committed batch may be a
/// write in progress and are not a fault, nor is a part of the active segment not yet indexed.
/// Without a writer, such bytes are a torn write (the next writable open would cut them back)
/// and reported. `progress` is called with the log bytes checked so far and the total.
pub fn verify(dir: &Path, writer_running: bool, mut progress: impl FnMut(u64, u64)) -> Result<VerifyReport> {
    let files = list_store(dir)?;
    let mut report = VerifyReport::default();
    let mut sizes = Vec::with_capacity(files.segments.len());
    for (_, path) in &files.segments {
        sizes.push(std::fs::metadata(path).map_err(|e| Error::io(format_args!("cannot read {}", path.display()), &e))?.len());
    }
    let total: u64 = sizes.iter().sum();
    let mut expected_base = 1u64;
    let count = files.segments.len();
    for (i, (base, path)) in files.segments.iter().enumerate() {
        let fault = |offset: usize, position: u64, reason: String| Fault {
            file: path.clone(),
            offset: offset as u64,
            position: Position(position),
            reason,
        };
        report.segments += 1;
        if *base != expected_base {
            report.fault = Some(fault(0, expected_base, format!("segment starts at position {base}; the log before it ends at {}", expected_base - 1)));
            return Ok(report);
        }
        let log = FileBytes::load_sealed(path)?;
        let header_crc = match check_header(&log, *base, path) {
            Ok(crc) => crc,
            Err(e) => {
                report.fault = Some(fault(0, *base, format!("segment header: {}", e.message())));
                return Ok(report);
            }
        };
        let scan = scan_committed(&log, ScanPoint { offset: HEADER_LEN, chain: header_crc, next_position: *base });
        let last_segment = i + 1 == count;
        if !last_segment {
            let next_base = files.segments[i + 1].0;
            if scan.end.next_position != next_base {
                let (offset, position, reason) = match &scan.tail {
                    Stop::Torn { reason, record, positions } => {
                        (*record, torn_position(scan.end.next_position, positions), reason.clone())
                    }
                    Stop::Clean => (scan.end.offset, scan.end.next_position, "the committed events end early".to_string()),
                };
                report.fault = Some(fault(
                    offset,
                    position,
                    format!("{reason}; the committed events end at position {}, the next segment starts at {next_base}", scan.end.next_position - 1),
                ));
                return Ok(report);
            }
        } else if let (Stop::Torn { reason, record, positions }, false) = (&scan.tail, writer_running) {
            report.fault = Some(fault(
                *record,
                torn_position(scan.end.next_position, positions),
                format!(
                    "{reason}; the committed events end at position {} (byte {}), and what follows is a torn write the next writable open would cut back",
                    scan.end.next_position - 1,
                    scan.end.offset
                ),
            ));
            return Ok(report);
        }
        report.events += scan.event_offsets.len() as u64;
        report.log_bytes += sizes[i];
        expected_base = scan.end.next_position;
        // The index files of this segment: its own, or its parts'.
        let whole = index_path(path);
        if !last_segment && whole.exists() {
            report.index_files += 1;
            if let Some(fault) = check_index(&log, &scan.event_offsets, *base, *base, &whole, None)? {
                report.fault = Some(fault);
                return Ok(report);
            }
        }
        if let Some(parts) = files.parts.get(base) {
            for (j, (part_base, part_path)) in parts.iter().enumerate() {
                let part_end = parts.get(j + 1).map(|(next, _)| *next);
                report.index_files += 1;
                let committed_end = scan.end.next_position;
                if *part_base < *base || *part_base >= committed_end {
                    if writer_running && last_segment {
                        continue; // indexes a batch this verify's scan began before
                    }
                    report.fault = Some(Fault {
                        file: part_path.clone(),
                        offset: 0,
                        position: Position(*part_base),
                        reason: format!("part index starts at position {part_base}; the segment's committed events are {base}..{}", committed_end - 1),
                    });
                    return Ok(report);
                }
                if let Some(fault) = check_index(&log, &scan.event_offsets, *base, *part_base, part_path, part_end)? {
                    report.fault = Some(fault);
                    return Ok(report);
                }
            }
        }
        progress(report.log_bytes, total);
    }
    Ok(report)
}

/// The position of the record a torn run failed at: after the run's events that validated (a
/// marker that fails gets the position after the events it would have committed).
fn torn_position(next_position: u64, validated: &Option<(Position, Position)>) -> u64 {
    validated.map_or(next_position, |(_, last)| last.get() + 1)
}

/// Checks the index file at `index` (of the segment whose committed events start at
/// `segment_base` at `offsets`) for the events from `first`: `None` when it answers exactly as
/// the scan does. `part_end`, for a part that is not the segment's last, is where the next part
/// starts: the part must reach it exactly.
fn check_index(
    log: &[u8],
    offsets: &[usize],
    segment_base: u64,
    first: u64,
    index: &Path,
    part_end: Option<u64>,
) -> Result<Option<Fault>> {
    let log_path = index.with_extension("").with_extension("log");
    let first_rel = (first - segment_base) as usize;
    let log_start = if first == segment_base { HEADER_LEN } else { offsets[first_rel] };
    let fault = |offset: u64, position: u64, reason: String| {
        Ok(Some(Fault { file: index.to_owned(), offset, position: Position(position), reason }))
    };
    let opened = if first == segment_base && index.extension().is_some_and(|e| e == "idx") {
        IndexFile::open(index, first)
    } else {
        IndexFile::open_part(index, first, &log_path, log_start)
    };
    let verified: VerifiedIndex = match opened.and_then(|file| file.verify_file()) {
        Ok(verified) => verified,
        Err(e) => return fault(log_start as u64, first, e.message().to_owned()),
    };
    let count = verified.count() as usize;
    let available = offsets.len() - first_rel;
    // A whole segment's index, or a part followed by another, must cover exactly its events; a
    // segment's last part may stop short (the writer indexes the newest events in memory until
    // the part is full or the store closes) but never run past the scan.
    let whole = first == segment_base && part_end.is_none() && index.extension().is_some_and(|e| e == "idx");
    let expected = match part_end {
        Some(end) => Some((end - first) as usize),
        None if whole => Some(available),
        None => None,
    };
    if expected.is_some_and(|expected| count != expected) || count > available {
        return fault(
            log_start as u64,
            first,
            format!("holds {count} events; the segment's scan has {} from position {first}", expected.unwrap_or(available)),
        );
    }
    let names: HashMap<u32, &str> = verified.type_names().map(|(name, id)| (id, name)).collect();
    let mut expected_tags: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for rel in 0..count {
        let offset = offsets[first_rel + rel];
        let position = first + rel as u64;
        let len = u32::from_le_bytes(log[offset..offset + 4].try_into().unwrap()) as usize;
        let view = EventView::decode(Position(position), &log[offset + FRAME_LEN..offset + FRAME_LEN + len])?;
        let indexed_offset = verified.offset(rel as u32)?;
        if indexed_offset != offset as u64 {
            return fault(offset as u64, position, format!("gives byte {indexed_offset} for the event"));
        }
        let indexed_type = names.get(&verified.type_at(rel as u32)?).copied();
        if indexed_type != Some(view.event_type) {
            return fault(offset as u64, position, format!("gives type {indexed_type:?}; the event's type is {:?}", view.event_type));
        }
        for tag in view.tags() {
            expected_tags.entry(tag).or_default().push(rel as u32);
        }
    }
    let mut damage = None;
    let mut seen = 0usize;
    verified.each_tag(|tag, postings| {
        if damage.is_some() {
            return;
        }
        seen += 1;
        let tag = String::from_utf8_lossy(tag);
        let mut listed = Vec::with_capacity(postings.count());
        postings.for_each_up_to(u32::MAX, |rel| listed.push(rel));
        let wanted = expected_tags.get(&*tag).map(Vec::as_slice).unwrap_or(&[]);
        if listed != wanted {
            let rel = listed.iter().zip(wanted).find(|(a, b)| a != b).map_or_else(
                || *listed.get(wanted.len()).or(wanted.get(listed.len())).unwrap_or(&0),
                |(a, b)| *a.min(b),
            );
            damage = Some((rel, format!("lists {} events for tag {tag:?}; the scan finds {}", listed.len(), wanted.len())));
        }
    })?;
    if damage.is_none() && seen != expected_tags.len() {
        damage = Some((0, format!("has {seen} tags; the scan finds {}", expected_tags.len())));
    }
    if let Some((rel, reason)) = damage {
        let rel = (rel as usize).min(count.saturating_sub(1));
        let offset = offsets.get(first_rel + rel).copied().unwrap_or(log_start);
        return fault(offset as u64, first + rel as u64, reason);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::follow::Follower;
    use crate::read::Published;
    use crate::{Durability, Event, Options, Store};

    /// A follower that has not polled since the writer committed reports exactly what it has
    /// not published, and nothing once it has.
    #[test]
    fn follower_lag_counts_committed_events_not_yet_published() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Store::open(dir.path(), Options { durability: Durability::Buffered, ..Options::default() }).unwrap();
        writer.append(vec![Event::new("A", ["x:1"], vec![])], None).unwrap();
        let published = Arc::new(Published::new());
        let (mut follower, _) = Follower::open(dir.path(), published.clone()).unwrap();
        let stats = super::stats(&published, dir.path(), true).unwrap();
        assert_eq!((stats.head, stats.follower_lag_positions), (1, Some(0)));
        let events = (0..3).map(|i| Event::new("B", [format!("x:{i}")], vec![])).collect();
        writer.append(events, None).unwrap();
        writer.append(vec![Event::new("C", ["x:9"], vec![])], None).unwrap();
        let stats = super::stats(&published, dir.path(), true).unwrap();
        assert_eq!((stats.head, stats.follower_lag_positions), (1, Some(4)));
        let millis = stats.follower_lag_millis.unwrap();
        assert!(millis < 60_000, "lag of {millis} ms for events committed just now");
        follower.advance().unwrap();
        follower.share_point();
        let stats = super::stats(&published, dir.path(), true).unwrap();
        assert_eq!((stats.head, stats.follower_lag_positions, stats.follower_lag_millis), (5, Some(0), Some(0)));
        writer.close().unwrap();
    }
}
