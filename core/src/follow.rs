//! Followers: read-only handles on a store that another process (or nobody) holds writable.
//!
//! A follower never takes the lock and never writes a byte. It maps the segments read-only and
//! runs the recovery rule (`log::recovery::scan_committed`) forward from where it stopped, so it
//! publishes only whole committed batches: a torn or in-progress tail fails the rule and stays
//! invisible until it is complete, or until a new writer cuts it back and writes over it (the
//! chained CRCs make the new batches validate only as the continuation of what the follower
//! already accepted). A poll thread does this every [`POLL_INTERVAL`] and publishes the head the
//! same way the writer does, so reads and subscriptions work unchanged.
//!
//! What it accepted must stay the log: if those bytes are cut back or rewritten (a writer that
//! lost them in a crash and wrote new batches in their place), the follower's chain no longer
//! leads anywhere and it would find nothing new forever. So a poll that finds nothing new checks
//! that the last accepted commit marker still holds what was accepted, and now and then that no
//! segment has appeared that does not continue the accepted log; either failing fails the handle
//! (`Published::fail`) with `Corruption`.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::index::SegmentIndex;
use crate::index::tail::TailIndex;
use crate::log::format::{
    FRAME_LEN, HEADER_LEN, MARKER_PAYLOAD_LEN, MARKER_RECORD_LEN, parse_marker, segment_file_name,
};
use crate::log::recovery::{ScanPoint, Tail, scan_committed, scan_records};
use crate::log::segment::{FileBytes, check_header};
use crate::index::file::index_path;
use crate::open::{Rebuilds, cannot_read, gap, index_scanned, list_segments, load_sealed, matching_index_file};
use crate::position::Position;
use crate::read::{Published, SegmentEntry};
use crate::open::RecoveryReport;

/// How often a follower looks for new commits: a new batch is visible within about this long.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How often an idle follower lists the directory for a segment that does not continue its log.
/// Listing costs a pass over every file name, unlike the one `stat` of the next segment's name
/// that each poll pays; a tenth of a second bounds how long such a follower answers stale.
const LISTING_INTERVAL: Duration = Duration::from_millis(100);
/// How long a follower retries an I/O error before it fails its handle with it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(1);

struct FollowedSegment {
    entry: Arc<SegmentEntry>,
    tail: Arc<TailIndex>,
    /// Just after the last batch accepted.
    point: ScanPoint,
}

pub(crate) struct Follower {
    dir: PathBuf,
    published: Arc<Published>,
    /// None until the store's first segment exists.
    active: Option<FollowedSegment>,
    next_position: u64,
    last_listing: Instant,
    /// The directory's mtime at the last listing, and when that listing was made.
    listed: Option<(std::time::SystemTime, std::time::SystemTime)>,
    /// Segments this follower moved past that it still answers from their tail index, with
    /// the base of the segment after each: the writer's sealer publishes their index files a
    /// little later.
    unsealed: Vec<(Arc<SegmentEntry>, u64)>,
}

impl Follower {
    /// Loads what is committed now. Sealed segments come from their index files (or an index
    /// rebuilt in memory); the last segment with a valid header is followed.
    pub fn open(dir: &Path, published: Arc<Published>) -> Result<(Follower, RecoveryReport)> {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(no_store(dir, io::ErrorKind::NotADirectory)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_store(dir, e.kind())),
            Err(e) => return Err(cannot_read(dir, &e)),
        }
        let mut segments = list_segments(dir)?;
        // A last segment still being created (no durable header yet) is not there yet.
        while let Some((base, path)) = segments.last() {
            if segment_header_is_valid(path, *base)? {
                break;
            }
            segments.pop();
        }
        let mut report = RecoveryReport::default();
        let mut follower = Follower {
            dir: dir.to_owned(),
            published,
            active: None,
            next_position: 1,
            last_listing: Instant::now(),
            listed: None,
            unsealed: Vec::new(),
        };
        if let Some((base, path)) = segments.pop() {
            let sealed = load_sealed(segments, base, Rebuilds::InMemory, &mut report)?;
            if base != sealed.next_position {
                return Err(gap(&path, base, sealed.next_position));
            }
            follower.next_position = sealed.next_position;
            follower.published.add_segments(sealed.into_entries(&mut report)?);
            follower.active = follower.open_segment(base)?;
        }
        follower.advance()?;
        follower.share_point();
        report.segments = follower.published.segments.load().len();
        report.head = Position(follower.published.head());
        if let Some(active) = &follower.active {
            let log = active.entry.log.bytes()?;
            report.scanned_log_bytes += log.len() as u64;
            if let Tail::Torn(torn) = scan_records(log, active.point).tail {
                report.torn_tail = Some(torn);
            }
        }
        Ok((follower, report))
    }

    /// Stores where this follower stands for `Store::stats`, which measures the lag from it.
    pub(crate) fn share_point(&self) {
        let point = self.active.as_ref().map(|active| (active.entry.clone(), active.point));
        *self.published.follow_point.lock().unwrap_or_else(|p| p.into_inner()) = point;
    }

    /// Maps the segment based at `base` if it exists with a valid header, and publishes it
    /// (empty: the head does not cover it yet).
    fn open_segment(&self, base: u64) -> Result<Option<FollowedSegment>> {
        let path = self.dir.join(segment_file_name(base));
        let file = match OpenOptions::new().read(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // Never taken for "not created yet": that would answer an empty log.
            Err(e) => return Err(cannot_read(&path, &e)),
        };
        let log = FileBytes::map(&path, &file)?;
        let Ok(chain) = check_header(&log, base, &path) else { return Ok(None) };
        let tail = Arc::new(TailIndex::new());
        let entry = Arc::new(SegmentEntry::loaded(base, path, Arc::new(log), SegmentIndex::Tail(tail.clone())));
        self.published.add_segment(entry.clone());
        Ok(Some(FollowedSegment {
            entry,
            tail,
            point: ScanPoint { offset: HEADER_LEN, chain, next_position: base },
        }))
    }

    /// Accepts every batch committed since the last call, across roll-overs, and publishes the
    /// new head.
    pub fn advance(&mut self) -> Result<()> {
        loop {
            let Some(active) = &mut self.active else {
                self.active = self.open_segment(self.next_position)?;
                if self.active.is_none() {
                    return Ok(());
                }
                continue;
            };
            let mut moved = catch_up(active)?;
            if !moved && runs_past_mapping(active) {
                // A writer that reopened with a larger `segment_size` grew this segment (it was
                // empty then) and has written past the size this follower mapped.
                if let Some(grown) = remap_if_grown(active)? {
                    self.published.replace_segment(&active.entry, grown.clone());
                    active.entry = grown;
                    moved = catch_up(active)?;
                }
            }
            self.next_position = active.point.next_position;
            // The writer syncs a segment before it creates the next one and never writes into it
            // again, so once the next exists, one more pass over this one sees all of it.
            // (A segment is only ever created to hold an event, so an empty one is never sealed.)
            let next_exists = self.next_position > active.entry.base
                && segment_exists(&self.dir, self.next_position);
            if next_exists {
                catch_up(active)?;
                self.next_position = active.point.next_position;
                // Everything of this segment is accepted: show it before touching the next one,
                // whose open may fail.
                if self.next_position - 1 != self.published.head() {
                    self.published.publish_head(self.next_position - 1);
                }
                if let Some(next) = self.open_segment(self.next_position)? {
                    if let Some(sealed) = self.active.replace(next) {
                        self.unsealed.push((sealed.entry, self.next_position));
                    }
                    continue;
                }
            }
            if !moved && self.last_listing.elapsed() >= LISTING_INTERVAL {
                self.check_no_stray_segment()?;
            }
            let head = self.next_position - 1;
            if head != self.published.head() {
                self.published.publish_head(head);
            }
            self.adopt_index_files();
            return Ok(());
        }
    }

    /// Publishes each segment moved past anew, as a sealed segment with the index file the
    /// writer wrote for it, once that file exists, in place of the followed entry with its tail
    /// index and mapping (a reader that pinned them keeps them until done). Checking is one
    /// `stat` a poll for each segment still waiting, usually none or one: the writer writes the
    /// file under a temporary name and renames it into place, so once the name exists the file
    /// is whole; it is still verified as open verifies it. One that does not verify is left
    /// alone: the tail index answers correctly, and the next writer's open rebuilds the file.
    fn adopt_index_files(&mut self) {
        self.unsealed.retain(|(entry, next_base)| {
            let path = entry.log.path();
            if !index_path(path).exists() {
                return true;
            }
            // Published anew, as open publishes a sealed segment: its log loaded by the first
            // read that needs it. Keeping the followed entry (only its index swapped) kept its
            // mapping for the handle's life, one more for every segment followed, until a
            // long-running follower of a store of small segments could map no next segment
            // (review of 2026-12-04, late; `core/tests/mappings.rs`).
            let adopted = entry.log.bytes().and_then(|log| {
                let index = matching_index_file(path, log.len() as u64, entry.base, *next_base)?;
                let sealed = Arc::new(SegmentEntry::sealed(entry.base, path.to_path_buf(), index));
                self.published.replace_segment(entry, sealed);
                Ok(())
            });
            if let Err(e) = adopted {
                crate::error::report(format_args!("lapilli: follower keeps the in-memory index of {}: {e}", path.display()));
            }
            false
        });
    }

    /// A segment after the active one must start where the accepted log ends. One based
    /// elsewhere means the writer rolled over from a log that is not the one this follower
    /// accepted (it rewound past what was accepted, then filled a segment), and the segment this
    /// follower waits for will never come.
    fn check_no_stray_segment(&mut self) -> Result<()> {
        self.last_listing = Instant::now();
        let Some(active) = &mut self.active else { return Ok(()) };
        // A listing reads every name in the directory; skip it while the directory has not
        // changed since one. Only an mtime comfortably older than that listing counts as
        // unchanged: a file made in the same clock tick as the listing leaves the mtime equal.
        let mtime = std::fs::metadata(&self.dir).and_then(|m| m.modified()).ok();
        if let (Some(mtime), Some((listed_mtime, listed_at))) = (mtime, self.listed) {
            let settled = listed_at.duration_since(mtime).is_ok_and(|age| age >= Duration::from_secs(1));
            if mtime == listed_mtime && settled {
                return Ok(());
            }
        }
        self.listed = mtime.map(|mtime| (mtime, std::time::SystemTime::now()));
        let segments = list_segments(&self.dir)?;
        let Some((base, path)) = segments.into_iter().find(|(base, _)| *base > active.entry.base) else {
            return Ok(());
        };
        if base != active.point.next_position {
            // The writer may have finished this segment and rolled over since the last pass.
            catch_up(active)?;
            self.next_position = active.point.next_position;
        }
        if base == self.next_position {
            return Ok(());
        }
        // A listing is no snapshot: a name renamed into the directory while it is read may be
        // missed, so a busy writer's next segment can be absent from it while a later one is
        // there. The writer makes segments in position order and never removes one it has
        // filled, so if the segment this follower waits for exists now, nothing was rewritten.
        if base > self.next_position && segment_exists(&self.dir, self.next_position) {
            return Ok(());
        }
        Err(Error::corruption(format!(
            "segment {} starts at position {base}, but the log this follower accepted ends at \
             position {} (byte {} of segment {}): the log was rewritten under it; reopen the \
             handle to follow the log as it is now",
            path.display(),
            self.next_position - 1,
            active.point.offset,
            active.entry.log.path().display()
        )))
    }

    /// Polls until the store handle is closed (which unparks this thread), or until the log it
    /// accepted turns out to have been rewritten, which fails the handle: no later poll can
    /// make its answers exact again.
    ///
    /// A follower that cannot follow says so instead of answering a stale head as if the log
    /// had stopped: `Corruption` and a refused permission (a segment it must read and cannot:
    /// no retry will change that) fail the handle at once; any other error fails it once it has
    /// lasted [`GIVE_UP_AFTER`] (a transient one, such as running out of descriptors, is
    /// retried until then).
    pub fn run(mut self) {
        let mut failing_since: Option<std::time::Instant> = None;
        while !self.published.closed.load(Ordering::Acquire) {
            match self.advance() {
                Ok(()) => {
                    failing_since = None;
                    self.share_point();
                }
                Err(e)
                    if e.kind() == ErrorKind::Corruption
                        || e.io_kind() == Some(io::ErrorKind::PermissionDenied)
                        || failing_since.is_some_and(|since| since.elapsed() >= GIVE_UP_AFTER) =>
                {
                    self.published.fail(e);
                    return;
                }
                Err(e) => {
                    if failing_since.is_none() {
                        crate::error::report(format_args!("lapilli: follower of {} cannot advance (retrying): {e}", self.dir.display()));
                        failing_since = Some(std::time::Instant::now());
                    }
                }
            }
            std::thread::park_timeout(POLL_INTERVAL);
        }
    }
}

/// Whether the segment based at `base` exists in `dir`.
fn segment_exists(dir: &Path, base: u64) -> bool {
    dir.join(segment_file_name(base)).exists()
}

/// Whether the records written after the accepted part (followed by their lengths, up to the
/// first all-zero frame) run past this mapping: only then can the file have grown under us, so
/// only then is it worth a `stat`. Usually the first frame is zeros and this reads 8 bytes.
fn runs_past_mapping(segment: &FollowedSegment) -> bool {
    let Ok(bytes) = segment.entry.log.bytes() else { return false };
    let mut at = segment.point.offset;
    loop {
        let Some(frame) = bytes.get(at..at + FRAME_LEN) else { return true };
        if frame.iter().all(|&b| b == 0) {
            return false;
        }
        let len = u32::from_le_bytes(frame[0..4].try_into().unwrap()) as usize;
        if len == 0 {
            return false;
        }
        match (at + FRAME_LEN).checked_add(len) {
            Some(end) if end <= bytes.len() => at = end,
            _ => return true,
        }
    }
}

/// A new mapping of `segment` if its file has grown past the current one. Only an empty
/// segment is ever grown (by a writer that reopened with a larger `segment_size`), and mappings
/// never change size, so without this the follower would stop at the end of the old size.
fn remap_if_grown(segment: &FollowedSegment) -> Result<Option<Arc<SegmentEntry>>> {
    let entry = &segment.entry;
    let path = entry.log.path();
    let file = OpenOptions::new().read(true).open(path).map_err(|e| cannot_read(path, &e))?;
    let len = file.metadata().map_err(|e| cannot_read(path, &e))?.len();
    if len <= entry.log.bytes()?.len() as u64 {
        return Ok(None);
    }
    let log = FileBytes::map(path, &file)?;
    let index = SegmentIndex::Tail(segment.tail.clone());
    Ok(Some(Arc::new(SegmentEntry::loaded(entry.base, path.to_path_buf(), Arc::new(log), index))))
}

/// Accepts what was committed since the last pass; returns whether there was anything. When
/// there was not, checks that what was accepted is still there.
fn catch_up(segment: &mut FollowedSegment) -> Result<bool> {
    let bytes = segment.entry.log.bytes()?;
    let scan = scan_committed(bytes, segment.point);
    if scan.event_offsets.is_empty() {
        check_accepted(segment)?;
        return Ok(false);
    }
    let first_rel = (segment.point.next_position - segment.entry.base) as u32;
    index_scanned(&segment.tail, bytes, segment.entry.base, first_rel, &scan.event_offsets)?;
    segment.point = scan.end;
    Ok(true)
}

/// The commit marker that ends the accepted part of the segment must still be the one that was
/// accepted: the checksum it stores (chained from every record before it, so a marker written
/// after any other history stores another) and the positions it closes. Bytes cut back are
/// zeroed from the end of the writer's committed prefix through the end of the torn run, which
/// reaches at least this marker, and new batches are written from that same start: either way
/// these 21 bytes change, so checking them alone, on a poll that found nothing new, is enough.
fn check_accepted(segment: &FollowedSegment) -> Result<()> {
    let point = segment.point;
    if point.next_position == segment.entry.base {
        return Ok(());
    }
    let start = point.offset - MARKER_RECORD_LEN;
    let record = &segment.entry.log.bytes()?[start..point.offset];
    let len = u32::from_le_bytes(record[0..4].try_into().unwrap()) as usize;
    let stored = u32::from_le_bytes(record[4..8].try_into().unwrap());
    let closes = parse_marker(&record[FRAME_LEN..]).map(|(first, count)| first + count as u64);
    if len == MARKER_PAYLOAD_LEN && stored == point.chain && closes == Some(point.next_position) {
        return Ok(());
    }
    Err(Error::corruption(format!(
        "segment {}: the commit marker at byte {start}, which ended the batches up to position {} \
         that this follower accepted, no longer holds what was accepted: the log was cut back or \
         rewritten under it; reopen the handle to follow the log as it is now",
        segment.entry.log.path().display(),
        point.next_position - 1
    )))
}

fn no_store(dir: &Path, kind: io::ErrorKind) -> Error {
    Error::io(format_args!("no store at {}", dir.display()), &io::Error::from(kind))
}

/// Whether the segment at `path` has a durable header yet. A file that cannot be read is an
/// error, not a segment still being created: taking it for one would answer an empty log.
fn segment_header_is_valid(path: &Path, base: u64) -> Result<bool> {
    let mut header = [0u8; HEADER_LEN];
    match std::fs::File::open(path).and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut header, 0)) {
        Ok(()) => Ok(check_header(&header, base, path).is_ok()),
        // Removed since it was listed (a writer making it again), or shorter than a header.
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::UnexpectedEof) => Ok(false),
        Err(e) => Err(cannot_read(path, &e)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;

    use super::Follower;
    use crate::log::format::{HEADER_LEN, decode_header, segment_file_name};
    use crate::log::recovery::{EXTENTS_MEASURED, ScanPoint, scan_records};
    use crate::read::Published;
    use crate::{Durability, Event, Options, Store};

    fn measured() -> u64 {
        EXTENTS_MEASURED.with(|n| n.get())
    }

    /// A poll over a batch still being written only needs to know that nothing new is
    /// committed; following the torn run's frame lengths to measure it is for the report.
    #[test]
    fn polls_over_an_unfinished_write_do_not_measure_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options { durability: Durability::Buffered, ..Options::default() }).unwrap();
        for i in 0..3 {
            store.append(vec![Event::new("N", [format!("n:{i}")], vec![1; 10])], None).unwrap();
        }
        store.close().unwrap();
        let path = dir.path().join(segment_file_name(1));
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut head = [0u8; HEADER_LEN];
        file.read_exact_at(&mut head, 0).unwrap();
        let chain = decode_header(&head).unwrap().crc;
        let mut bytes = vec![0u8; 4096];
        file.read_exact_at(&mut bytes, 0).unwrap();
        let end = scan_records(&bytes, ScanPoint { offset: HEADER_LEN, chain, next_position: 1 }).end.offset;
        // A record frame whose checksum is not written yet, and no marker after it.
        let mut unfinished = 100u32.to_le_bytes().to_vec();
        unfinished.extend_from_slice(&[0; 4]);
        unfinished.extend_from_slice(&[0xab; 100]);
        file.write_all_at(&unfinished, end as u64).unwrap();

        let before = measured();
        let (mut follower, report) = Follower::open(dir.path(), Arc::new(Published::new())).unwrap();
        let torn = report.torn_tail.expect("the open reports the unfinished write");
        assert_eq!((torn.offset, torn.bytes), (end, unfinished.len()));
        let after_open = measured();
        assert!(after_open > before);
        for _ in 0..100 {
            follower.advance().unwrap();
        }
        assert_eq!(measured(), after_open, "polls measured the torn run");
    }
}
