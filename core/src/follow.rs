//! Followers: read-only handles on a store that another process (or nobody) holds writable.
//!
//! A follower never takes the lock and never writes a byte. It maps the segments read-only and
//! runs the recovery rule (`log::recovery::scan_records`) forward from where it stopped, so it
//! publishes only whole committed batches: a torn or in-progress tail fails the rule and stays
//! invisible until it is complete, or until a new writer cuts it back and writes over it (the
//! chained CRCs make the new batches validate only as the continuation of what the follower
//! already accepted). A poll thread does this every [`POLL_INTERVAL`] and publishes the head the
//! same way the writer does, so reads and subscriptions work unchanged.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::index::SegmentIndex;
use crate::index::tail::TailIndex;
use crate::log::format::{HEADER_LEN, segment_file_name};
use crate::log::recovery::{ScanPoint, Tail, scan_records};
use crate::log::segment::{FileBytes, check_header};
use crate::open::{Rebuilds, gap, index_scanned, list_segments, load_sealed};
use crate::position::Position;
use crate::read::{Published, SegmentEntry};
use crate::open::RecoveryReport;

/// How often a follower looks for new commits: a new batch is visible within about this long.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

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
}

impl Follower {
    /// Loads what is committed now. Sealed segments come from their index files (or an index
    /// rebuilt in memory); the last segment with a valid header is followed.
    pub fn open(dir: &Path, published: Arc<Published>) -> Result<(Follower, RecoveryReport)> {
        if !dir.is_dir() {
            return Err(Error::io(
                format_args!("no store at {}", dir.display()),
                &std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let mut segments = list_segments(dir)?;
        // A last segment still being created (no durable header yet) is not there yet.
        while let Some((base, path)) = segments.last() {
            if segment_header_is_valid(path, *base) {
                break;
            }
            segments.pop();
        }
        let mut report = RecoveryReport::default();
        let mut follower = Follower { dir: dir.to_owned(), published, active: None, next_position: 1 };
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

    /// Maps the segment based at `base` if it exists with a valid header, and publishes it
    /// (empty: the head does not cover it yet).
    fn open_segment(&self, base: u64) -> Result<Option<FollowedSegment>> {
        let path = self.dir.join(segment_file_name(base));
        let Ok(file) = OpenOptions::new().read(true).open(&path) else { return Ok(None) };
        let log = FileBytes::map(&path, &file)?;
        let Ok(chain) = check_header(&log, base, &path) else { return Ok(None) };
        let tail = Arc::new(TailIndex::new());
        let entry = Arc::new(SegmentEntry::loaded(base, path, log, SegmentIndex::Tail(tail.clone())));
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
            accept(active)?;
            self.next_position = active.point.next_position;
            // The writer syncs a segment before it creates the next one and never writes into it
            // again, so once the next exists, one more pass over this one sees all of it.
            // (A segment is only ever created to hold an event, so an empty one is never sealed.)
            let next_exists = self.next_position > active.entry.base
                && self.dir.join(segment_file_name(self.next_position)).exists();
            if next_exists {
                accept(active)?;
                self.next_position = active.point.next_position;
                if let Some(next) = self.open_segment(self.next_position)? {
                    self.published.publish_head(self.next_position - 1);
                    self.active = Some(next);
                    continue;
                }
            }
            let head = self.next_position - 1;
            if head != self.published.head() {
                self.published.publish_head(head);
            }
            return Ok(());
        }
    }

    /// Polls until the store handle is closed (which unparks this thread).
    pub fn run(mut self) {
        let mut reported = false;
        while !self.published.closed.load(Ordering::Acquire) {
            match self.advance() {
                Ok(()) => reported = false,
                Err(e) if !reported => {
                    eprintln!("lapilli: follower of {} cannot advance: {e}", self.dir.display());
                    reported = true;
                }
                Err(_) => {}
            }
            std::thread::park_timeout(POLL_INTERVAL);
        }
    }
}

fn accept(segment: &mut FollowedSegment) -> Result<()> {
    let bytes = segment.entry.log.bytes()?;
    let scan = scan_records(bytes, segment.point);
    if scan.event_offsets.is_empty() {
        return Ok(());
    }
    let first_rel = (segment.point.next_position - segment.entry.base) as u32;
    index_scanned(&segment.tail, bytes, segment.entry.base, first_rel, &scan.event_offsets)?;
    segment.point = scan.end;
    Ok(())
}

fn segment_header_is_valid(path: &Path, base: u64) -> bool {
    let mut header = [0u8; HEADER_LEN];
    std::fs::File::open(path)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut header, 0))
        .is_ok()
        && check_header(&header, base, path).is_ok()
}
