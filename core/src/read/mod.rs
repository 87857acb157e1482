//! Reads: snapshots of the published prefix of the log, and bounded, lazy reads over them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::error::{Error, Result};
use crate::event::{EventView, SequencedEvent};
use crate::index::plan::{Purpose, SegmentAccess, SegmentWalk};
use crate::index::{Planner, SegmentIndex};
use crate::index::file::IndexFile;
use crate::log::segment::{FileBytes, PAGE_BYTES, SegmentLog};
use crate::position::Position;
use crate::query::Query;
use crate::subscribe::Notifier;

mod warm;
pub use warm::warmed_segments_on_this_thread;

/// One segment as readers see it: its log and its index, which starts as the in-memory tail
/// index and is swapped for the index file once that is built.
pub(crate) struct SegmentEntry {
    pub base: u64,
    pub log: SegmentLog,
    pub index: ArcSwap<SegmentIndex>,
}

impl SegmentEntry {
    /// A segment whose log is in hand (the active segment, or one being followed).
    pub fn loaded(base: u64, path: PathBuf, log: Arc<FileBytes>, index: SegmentIndex) -> SegmentEntry {
        SegmentEntry { base, log: SegmentLog::loaded(path, log), index: ArcSwap::from_pointee(index) }
    }

    /// A sealed segment, whose log is loaded on first use.
    pub fn sealed(base: u64, path: PathBuf, index: IndexFile) -> SegmentEntry {
        SegmentEntry { base, log: SegmentLog::sealed(path), index: ArcSwap::from_pointee(SegmentIndex::Sealed(index)) }
    }
}

/// What the writer publishes and readers load: the segments (with their indexes) and the head.
/// The writer indexes events and adds segments first and stores the head last (`Release`);
/// readers load the head first (`Acquire`), so everything at or below it is in place.
pub(crate) struct Published {
    pub segments: ArcSwap<Vec<Arc<SegmentEntry>>>,
    /// Held by whoever changes the segment list (the writer adds, the sealer replaces parts),
    /// so that neither change is lost to the other's copy.
    list_changes: Mutex<()>,
    head: AtomicU64,
    pub notifier: Notifier,
    pub closed: AtomicBool,
    planner: AtomicU8,
    /// Sealed segments whose index file is not published yet.
    pub sealing: AtomicU64,
    /// Batches of appends written with one write (and one fsync): a statistic for tests.
    pub commit_groups: AtomicU64,
    /// Staged events indexed for in-group conditions: a statistic for tests (groups without a
    /// condition index none).
    pub staged_events_indexed: AtomicU64,
    /// Groups indexed while the syncer thread synced them: a statistic for tests.
    pub overlapped_syncs: AtomicU64,
    /// Why this handle can no longer answer exactly (a follower whose accepted log was
    /// rewritten under it). Set once; from then on every read, `head()` and subscription fails
    /// with it rather than answer from bytes that are no longer the log.
    failure: Arc<OnceLock<Error>>,
    /// Entries of every segment list stored so far: a statistic for tests (open must build the
    /// list once, not once per segment).
    pub listed_segments: AtomicU64,
    /// What [`crate::Store::stats`] reports (`stats.rs`).
    pub counters: crate::stats::Counters,
    /// A follower's segment and the point after its last accepted batch, stored by its poll
    /// thread after every pass, for the lag `stats()` measures. None for a writable handle.
    pub follow_point: Mutex<Option<(Arc<SegmentEntry>, crate::log::recovery::ScanPoint)>>,
}

impl Published {
    pub fn new() -> Self {
        Published {
            segments: ArcSwap::from_pointee(Vec::new()),
            list_changes: Mutex::new(()),
            head: AtomicU64::new(0),
            notifier: Notifier::default(),
            closed: AtomicBool::new(false),
            planner: AtomicU8::new(0),
            sealing: AtomicU64::new(0),
            commit_groups: AtomicU64::new(0),
            staged_events_indexed: AtomicU64::new(0),
            overlapped_syncs: AtomicU64::new(0),
            failure: Arc::default(),
            listed_segments: AtomicU64::new(0),
            counters: crate::stats::Counters::default(),
            follow_point: Mutex::new(None),
        }
    }

    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    pub fn add_segment(&self, segment: Arc<SegmentEntry>) {
        self.add_segments([segment]);
    }

    /// Appends to the list with one copy of it: open adds all its segments at once, since a
    /// copy per segment made opening quadratic in the number of segments.
    pub fn add_segments(&self, segments: impl IntoIterator<Item = Arc<SegmentEntry>>) {
        let _changing = self.list_changes.lock().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<Arc<SegmentEntry>> = self.segments.load().iter().cloned().collect();
        list.extend(segments);
        self.listed_segments.fetch_add(list.len() as u64, Ordering::Relaxed);
        self.segments.store(Arc::new(list));
    }

    /// Puts `new` where `old` is in the segment list (a follower's new mapping of a grown
    /// segment, or its entry for a segment sealed behind it). A snapshot taken before keeps the
    /// old entry.
    pub fn replace_segment(&self, old: &Arc<SegmentEntry>, new: Arc<SegmentEntry>) {
        let _changing = self.list_changes.lock().unwrap_or_else(|p| p.into_inner());
        let list: Vec<Arc<SegmentEntry>> =
            self.segments.load().iter().map(|s| if Arc::ptr_eq(s, old) { new.clone() } else { s.clone() }).collect();
        self.segments.store(Arc::new(list));
    }

    /// Puts `new` (a sealed segment's one entry) in place of `parts` (the entries of its
    /// parts, consecutive in the list). A snapshot taken before keeps the parts.
    pub fn replace_parts(&self, parts: &[Arc<SegmentEntry>], new: Arc<SegmentEntry>) {
        let _changing = self.list_changes.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.segments.load();
        // The parts are consecutive: one search, one splice, whatever their number.
        let Some(first) = current.iter().position(|entry| Arc::ptr_eq(entry, &parts[0])) else { return };
        let end = (first + parts.len()).min(current.len());
        debug_assert!(current[first..end].iter().zip(parts).all(|(a, b)| Arc::ptr_eq(a, b)));
        let mut list = Vec::with_capacity(current.len() + 1 - (end - first));
        list.extend_from_slice(&current[..first]);
        list.push(new);
        list.extend_from_slice(&current[end..]);
        self.segments.store(Arc::new(list));
    }

    /// Makes everything up to `head` visible and wakes subscribers (if there are any).
    pub fn publish_head(&self, head: u64) {
        self.head.store(head, Ordering::Release);
        self.notifier.notify();
    }

    /// Publishes `head` unless a later one is published already: the Postgres backend's
    /// writer and listener both learn of commits, in either order.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn publish_head_at_least(&self, head: u64) {
        if self.head.fetch_max(head, Ordering::AcqRel) < head {
            self.notifier.notify();
        }
    }

    /// Fails every later read and subscription with `error` (the first failure stays), and
    /// wakes the waiters so a blocked consumer sees it instead of waiting for a head that will
    /// never move.
    pub fn fail(&self, error: Error) {
        let _ = self.failure.set(error);
        self.notifier.notify();
    }

    pub fn failed(&self) -> bool {
        self.failure.get().is_some()
    }

    /// `Err` once the handle has failed.
    pub fn check(&self) -> Result<()> {
        self.failure.get().map_or(Ok(()), |e| Err(e.clone()))
    }

    pub fn set_planner(&self, planner: Planner) {
        self.planner.store(planner as u8, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let head = self.head();
        let planner = match self.planner.load(Ordering::Relaxed) {
            1 => Planner::ForceIndex,
            2 => Planner::ForceScan,
            _ => Planner::Auto,
        };
        Snapshot { head, segments: self.segments.load_full(), planner, failure: self.failure.clone() }
    }
}

/// A consistent view of the log up to `head`. Holding one keeps its segments mapped.
#[derive(Clone)]
pub(crate) struct Snapshot {
    pub head: u64,
    segments: Arc<Vec<Arc<SegmentEntry>>>,
    planner: Planner,
    /// The handle's failure: a walk under way when it is set stops with it, since the bytes
    /// below its head may no longer be the log it pinned.
    failure: Arc<OnceLock<Error>>,
}

impl Snapshot {
    /// Index in `segments` of the segment holding `position`.
    fn segment_of(&self, position: u64) -> usize {
        self.segments.partition_point(|s| s.base <= position) - 1
    }

    /// Last position of segment `i` visible in this snapshot.
    fn segment_last(&self, i: usize) -> u64 {
        self.segments.get(i + 1).map_or(self.head, |next| next.base - 1).min(self.head)
    }

    /// The first event matching `query` in `(after, until]`: what a condition check asks.
    pub fn first_match(&self, query: &Query, after: u64, until: u64) -> Result<Option<Position>> {
        let mut walk = Walk::new(self.clone(), query.clone(), after + 1, until, false);
        walk.build_filters = true;
        walk.wanted = 1;
        walk.next(|_| ())
    }

    /// Index bytes whose checksums this snapshot's sealed segments have verified so far, for
    /// tests of what a read costs.
    pub fn verified_index_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| match &**s.index.load() {
                SegmentIndex::Sealed(file) => file.verified_bytes(),
                SegmentIndex::Tail(_) => 0,
            })
            .sum()
    }

    /// Tag-dictionary lookups made so far in this snapshot's sealed segments, for tests.
    pub fn tag_lookups(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| match &**s.index.load() {
                SegmentIndex::Sealed(file) => file.tag_lookups(),
                SegmentIndex::Tail(_) => 0,
            })
            .sum()
    }
}

/// How far ahead of a sequential walk the log is prefetched, and how much at a time.
const PREFETCH_BYTES: usize = 4 << 20;
/// Index entries (event offsets, type ids) prefetched ahead of such a walk at a time: 512 KiB
/// of offsets.
const INDEX_PREFETCH_ENTRIES: u32 = 64 << 10;

/// Up to this many candidates in a cold segment have their log records asked for together.
const FEW_RECORDS: usize = 64;
/// How much of a record is asked for when its length is not at hand (the index's last event,
/// a part's or a segment's; the next entry in an offsets block not read yet), or past
/// `MAX_SEGMENT_RECORD_PREFETCH`.
const FEW_RECORD_BYTES: usize = 512;
/// The most of one record asked for ahead: larger records are still read whole, by faults.
const MAX_RECORD_PREFETCH: u64 = 1 << 20;
/// The most asked for whole in one segment: with records of a MiB, 64 of them in each of the
/// 32 segments a cold read warms at once would otherwise ask for 2 GiB.
const MAX_SEGMENT_RECORD_PREFETCH: usize = 4 << 20;

/// A rare tag's few events in a cold sealed segment lie a page apart or more each: fetched one
/// after another, each is a synchronous fault (a cold read of 108 events at 10M events took 235
/// major faults, 108 of them for records). Their offsets are known before the first is read, so
/// their pages are asked for at once and the device reads them together. Only when the first
/// of those records is not in memory: a warm read would pay two `mincore` calls per event for
/// nothing. Only the events the walk will yield, up to
/// the `wanted` it still wants (a limit, a condition's first match): a candidate the index
/// rejects (another type, a missing tag) or one past the limit would cost an offsets block and
/// a record read the walk never needs, and a walk the index alone answers leaves the log
/// unloaded. A hint: what fails here (a damaged block, a log that cannot be loaded) is left
/// for the walk to meet, or not, as it would have.
fn prefetch_few_records(access: &SegmentAccess<'_>, walk: &SegmentWalk, wanted: u64) {
    if wanted < 2 {
        return;
    }
    if !matches!(access.index, crate::index::IndexView::Sealed(_)) {
        return;
    }
    let Some(rels) = walk.few_matches(access, FEW_RECORDS, wanted) else { return };
    if rels.len() < 2 {
        return;
    }
    // Cold is judged by the page of the first record the walk will fetch (one `mincore`): not
    // by whether its index entries were read before, since pages read once may be evicted
    // since (the scale benchmark's rare read, after its hot read had read every offsets block,
    // went record by record: two synchronous faults an event).
    let Ok(log) = access.log.bytes() else { return };
    let mut asked = 0;
    for (nth, rel) in rels.into_iter().enumerate() {
        let Ok(offset) = access.index.offset(rel) else { return };
        if nth == 0 && log.is_resident(offset as usize) {
            return;
        }
        // The whole record, so that one crossing into the next page does not fault there (a
        // cold read at 10M events took a fault for one record in three per segment). Its length
        // is in its first bytes, not read yet; the next event's offset bounds it instead.
        let span = match record_span(&access.index, rel, offset) {
            span if asked + span <= MAX_SEGMENT_RECORD_PREFETCH => span,
            span => span.min(FEW_RECORD_BYTES),
        };
        asked += span;
        RECORD_PREFETCH_BYTES.fetch_add(span as u64, std::sync::atomic::Ordering::Relaxed);
        log.prefetch(offset as usize, span);
    }
}

/// Log bytes this process asked for ahead of cold segments' few records, for a test that a
/// record is asked for whole. For the whole process, not per thread: a cold read's first
/// segments are opened side by side on short-lived threads (`warm.rs`), which ask for them.
static RECORD_PREFETCH_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See `RECORD_PREFETCH_BYTES`.
pub(crate) fn record_prefetch_bytes() -> u64 {
    RECORD_PREFETCH_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The bytes from `offset`, the record of `rel`, to the next event's record (the record, and
/// its batch's commit marker when it is the batch's last), at most `MAX_RECORD_PREFETCH`. A
/// fixed guess (512 bytes) left every 1 KiB record starting in a page's last 1 KiB to fault on
/// its second page: a cold read of 1 KiB events took 1.14 reads an event where its peers took
/// one. The next entry is almost always in the same offsets block, read already; when it is
/// not (1 in 512), the guess stands: reading and checking a block the walk may never need would
/// stall the asks on a synchronous read, and meet damage the walk might not.
fn record_span(index: &crate::index::IndexView<'_>, rel: u32, offset: u64) -> usize {
    let crate::index::IndexView::Sealed(file) = index else { return FEW_RECORD_BYTES };
    if u64::from(rel) + 1 >= file.count() || file.entry_is_cold(rel + 1) {
        return FEW_RECORD_BYTES;
    }
    match file.offset(rel + 1) {
        Ok(next) if next > offset => (next - offset).min(MAX_RECORD_PREFETCH) as usize,
        _ => FEW_RECORD_BYTES,
    }
}
/// Events a walk yields from a segment before it starts prefetching (counting those of the
/// walks before it that it carries on from, see `ReadAhead`).
const PREFETCH_AFTER: u32 = 64;
/// A walk through postings whose matches so far lie closer than this on average (a hot tag's)
/// reads ahead like a scan: it touches most pages anyway, and with sealed logs advised for point
/// reads each page would otherwise be a fault and a 4 KiB read of its own (1.45M events of a
/// hot entity read cold took 26 s at 10M events, against 2 s for a store that reads ahead).
const DENSE_GAP_BYTES: u64 = 64 << 10;

/// How far ahead of a walk its segment's index entries have been asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ahead {
    Nothing,
    /// Through this entry (the lowest one asked for, walking backwards).
    Through(u32),
    /// To the index's end in the walk's direction.
    ToTheEnd,
}

impl Ahead {
    fn after(asked: Option<u32>) -> Ahead {
        asked.map_or(Ahead::ToTheEnd, Ahead::Through)
    }
}

thread_local! {
    /// Log bytes this thread's walks asked for ahead of themselves (`prefetch`, whether or not
    /// they were resident), for tests of how a walk reads ahead.
    static READ_AHEAD_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// See `READ_AHEAD_BYTES`.
pub(crate) fn read_ahead_bytes_on_this_thread() -> u64 {
    READ_AHEAD_BYTES.with(|n| n.get())
}

thread_local! {
    /// Times this thread's walks found what a walk before had asked for evicted and asked again
    /// (see `Walk::next_visit`), for tests that count asks.
    static READ_AHEAD_RENEWALS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// See `READ_AHEAD_RENEWALS`.
pub(crate) fn read_ahead_renewals_on_this_thread() -> u64 {
    READ_AHEAD_RENEWALS.with(|n| n.get())
}

/// Keeps `PREFETCH_BYTES` ahead of a sequential walk at `offset` prefetched (behind it, for a
/// backward walk); returns the new far end of the prefetched range.
fn prefetch(log: &FileBytes, offset: usize, backwards: bool, done: Option<usize>) -> Option<usize> {
    let ask = |start: usize, len: usize, backwards: bool| {
        READ_AHEAD_BYTES.with(|n| n.set(n.get() + len as u64));
        log.prefetch_toward(start, len, backwards);
    };
    if backwards {
        match done {
            // Asked from the log's start: nothing is left behind the walk to ask for.
            Some(start) if start == 0 || offset >= start + PREFETCH_BYTES / 2 => done,
            _ => {
                let start = offset.saturating_sub(PREFETCH_BYTES);
                ask(start, offset - start + 1, true);
                Some(start)
            }
        }
    } else {
        match done {
            Some(end) if offset + PREFETCH_BYTES / 2 <= end => done,
            // Ask only for what was not asked for already.
            _ => {
                let from = done.map_or(offset, |end| end.max(offset));
                ask(from, offset + PREFETCH_BYTES - from, false);
                Some(offset + PREFETCH_BYTES)
            }
        }
    }
}

/// Where a forward walk stopped in a segment and how far ahead of itself it had asked: what the
/// next pass of a subscription (a new walk, from where this one stopped) takes over, so that a
/// consumer catching up in batches reads ahead as one long walk does. Without it each pass
/// began again: a pass of 64 events never got past `PREFETCH_AFTER` and a pass of one never
/// asked, so each page of a cold sealed log was a fault of its own (a cold catch-up of 10M
/// events by 64 ran at 0.2M events/s, against 3.2M to 4.5M with it); a pass of 1,024 asked for
/// the 4 MiB ahead that the pass before had mostly asked for already (2.6M to 3.4M events/s,
/// against 3.6M to 4.4M). Hints only: what a walk yields never depends on it.
#[derive(Clone, Debug)]
pub(crate) struct ReadAhead {
    /// The entry's first position (a segment's, or a part's): the log bytes at the offsets
    /// below are the same file's in every snapshot that has an entry with this base.
    base: u64,
    /// The position the next walk must start at for this to be its own (the one after the last
    /// this walk yielded), and the log offset of that last event.
    resume_at: u64,
    last_offset: u64,
    /// The index the entries below were asked of: an entry keeps its base when its tail index
    /// is sealed into a part or its parts are merged, but the new index's entries were not
    /// asked for. (A weak reference keeps the allocation, so its address is not reused.)
    index: std::sync::Weak<SegmentIndex>,
    in_segment: u32,
    first_offset: u64,
    prefetched: Option<usize>,
    index_prefetched: Ahead,
}

/// Matching positions of a query over a window of a snapshot, segment by segment, in either
/// direction, through the planner.
pub(crate) struct Walk {
    snapshot: Snapshot,
    query: Query,
    /// Window, inclusive; empty when `low > high`.
    low: u64,
    high: u64,
    backwards: bool,
    /// Segment being walked, with its index pinned and its walk.
    current: Option<(usize, Arc<SegmentIndex>, SegmentWalk)>,
    /// For a sequential walk, the log bytes already prefetched (the byte range's far end).
    prefetched: Option<usize>,
    /// For a walk through many of a sealed segment's events, the index entries (offsets, type
    /// column) already prefetched (the far end's relative position).
    index_prefetched: Ahead,
    /// Next segment to open, in walk order; None when done.
    next_segment: Option<usize>,
    /// A condition check: builds sealed segments' tag filters on first use.
    build_filters: bool,
    /// Events this walk has yielded from the current entry, with those of the walks before it
    /// that it carries on from (`resuming`).
    in_segment: u32,
    /// Log offset of the first of them.
    first_offset: u64,
    /// Events the caller still wants from this walk (a read's limit less what it yielded; 1 for
    /// a condition's first match): the few-records prefetch asks for no more.
    wanted: u64,
    /// Whether the query looks tags up (only such walks warm segments up, see `warm`).
    looks_tags_up: bool,
    /// The last segment (in walk order) that a warm-up has covered, and the size of the next.
    warmed_through: Option<usize>,
    warm_batch: usize,
    /// Taken over from the walk before (`resuming`), for the segment it names.
    carried: Option<ReadAhead>,
    /// The position of the last event this walk yielded (0: none yet), and its log offset.
    yielded_through: u64,
    yielded_offset: u64,
}

impl Walk {
    pub fn new(snapshot: Snapshot, query: Query, low: u64, high: u64, backwards: bool) -> Walk {
        let high = high.min(snapshot.head);
        let next_segment = (low <= high && low >= 1)
            .then(|| if backwards { snapshot.segment_of(high) } else { snapshot.segment_of(low) });
        let looks_tags_up = warm::looks_tags_up(&query);
        Walk {
            snapshot,
            query,
            low,
            high,
            backwards,
            current: None,
            prefetched: None,
            index_prefetched: Ahead::Nothing,
            next_segment,
            build_filters: false,
            in_segment: 0,
            first_offset: 0,
            wanted: u64::MAX,
            looks_tags_up,
            warmed_through: None,
            warm_batch: warm::FIRST_SEGMENTS,
            carried: None,
            yielded_through: 0,
            yielded_offset: 0,
        }
    }

    /// A walk whose caller takes at most `wanted` events from it (a subscription's batch of
    /// `max`): warm-ups and the few-records prefetch plan for that many, as for a read's limit.
    pub fn wanting(mut self, wanted: u64) -> Walk {
        self.wanted = wanted;
        self
    }

    /// Goes on from where a walk before stopped (`read_ahead` of it): if this walk starts right
    /// after the last event that one yielded, in the same entry, it counts on what that one
    /// asked for rather than asking again. Forward walks only; anything else starts afresh.
    pub fn resuming(mut self, read_ahead: Option<ReadAhead>) -> Walk {
        self.carried = read_ahead.filter(|c| !self.backwards && c.resume_at == self.low);
        self
    }

    /// Where this forward walk is in its current entry and how far it has asked ahead, for the
    /// next walk to resume from. None between entries, walking backwards, before its first
    /// event, and once it has walked its whole window (a pass that took fewer events than it
    /// could: a subscription waiting at the head carries nothing from pass to pass).
    pub fn read_ahead(&self) -> Option<ReadAhead> {
        let (i, index, _) = self.current.as_ref().filter(|_| !self.backwards && self.yielded_through > 0)?;
        Some(ReadAhead {
            base: self.snapshot.segments[*i].base,
            resume_at: self.yielded_through + 1,
            last_offset: self.yielded_offset,
            index: Arc::downgrade(index),
            in_segment: self.in_segment,
            first_offset: self.first_offset,
            prefetched: self.prefetched,
            index_prefetched: self.index_prefetched,
        })
    }

    /// Sets the read-ahead state for the entry this walk is opening (segment `i`, its index
    /// `index`): afresh, or what the walk before asked if it stopped in this entry (`resuming`).
    /// Answers whether the index entries it asked are this index's (so not to be asked again).
    fn take_over_read_ahead(&mut self, i: usize, index: &Arc<SegmentIndex>) -> bool {
        let entry = &self.snapshot.segments[i];
        let carried = self.carried.take().filter(|c| c.base == entry.base);
        let same_index = carried.as_ref().is_some_and(|c| std::ptr::eq(c.index.as_ptr(), Arc::as_ptr(index)));
        self.prefetched = carried.as_ref().and_then(|c| c.prefetched);
        self.index_prefetched = match &carried {
            Some(c) if same_index => c.index_prefetched,
            _ => Ahead::Nothing,
        };
        (self.in_segment, self.first_offset) = carried.as_ref().map_or((0, 0), |c| (c.in_segment, c.first_offset));
        // What was asked may have been evicted since (a consumer slow between batches), and the
        // walk would fault through up to 4 MiB before it asked again: judged by the first page
        // wholly past the last event's record if under a page (asked first of what is left, so
        // evicted first; not touched by the walk), once per 64 events the passes take. (Not by
        // the far end's page: asked last, so evicted last.) Then both are asked again.
        if let Some(carried) = &carried {
            let carried_events = u64::from(carried.in_segment);
            let probe_due = carried_events / 64 != (carried_events + self.wanted.min(64)) / 64;
            let probe = (carried.last_offset / PAGE_BYTES + 2) * PAGE_BYTES;
            if probe_due
                && self.prefetched.is_some_and(|end| probe < end as u64)
                && entry.log.bytes().is_ok_and(|log| probe < log.len() as u64 && !log.is_resident(probe as usize))
            {
                READ_AHEAD_RENEWALS.with(|n| n.set(n.get() + 1));
                self.prefetched = None;
                self.index_prefetched = Ahead::Nothing;
            }
        }
        same_index
    }

    /// The segment after `i` in walk order that holds some of the window, if any.
    fn segment_after(&self, i: usize) -> Option<usize> {
        if self.backwards {
            i.checked_sub(1).filter(|&j| self.snapshot.segment_last(j) >= self.low)
        } else {
            Some(i + 1).filter(|&j| j < self.snapshot.segments.len() && self.snapshot.segments[j].base <= self.high)
        }
    }

    /// The window's part of segment `i`, as relative positions; None when empty.
    fn window_in(&self, i: usize) -> Option<(u32, u32)> {
        let entry = &self.snapshot.segments[i];
        let first = entry.base.max(self.low);
        let last = self.snapshot.segment_last(i).min(self.high);
        (first <= last).then(|| ((first - entry.base) as u32, (last - entry.base) as u32))
    }

    /// Before a walk that looks tags up opens segment `i` and wants more than one event: if the
    /// next few segments (from `i`, in walk order) were not covered by a warm-up yet and two or
    /// more of them are cold, their lookups run side by side first (see `warm`).
    fn warm_up_from(&mut self, i: usize) {
        if !self.looks_tags_up || self.wanted < 2 {
            return;
        }
        let covered = self.warmed_through.is_some_and(|w| if self.backwards { i >= w } else { i <= w });
        if covered {
            return;
        }
        // A read without a limit walks its whole window: no segment it warms goes unused.
        if self.wanted == u64::MAX {
            self.warm_batch = warm::MOST_SEGMENTS;
        }
        let mut parts = Vec::new();
        let mut at = Some(i);
        for _ in 0..self.warm_batch {
            let Some(j) = at else { break };
            self.warmed_through = Some(j);
            let entry = &self.snapshot.segments[j];
            if let Some((lo, hi)) = self.window_in(j).filter(|_| warm::is_cold(entry)) {
                parts.push(warm::Part { entry: entry.clone(), lo, hi });
            }
            at = self.segment_after(j);
        }
        self.warm_batch = (self.warm_batch * 2).min(warm::MOST_SEGMENTS);
        // One cold segment alone gains nothing from a thread: the walk opens it itself.
        if parts.len() >= 2 {
            warm::warm_up(&parts, &self.query, self.backwards, self.snapshot.planner, self.wanted);
        }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The next matching position; `visit` sees the event when one is found.
    pub fn next<T>(&mut self, visit: impl FnOnce(&EventView<'_>) -> T) -> Result<Option<Position>> {
        Ok(self.next_visit(visit)?.map(|(position, _)| position))
    }

    pub fn next_visit<T>(&mut self, visit: impl FnOnce(&EventView<'_>) -> T) -> Result<Option<(Position, T)>> {
        if let Some(failure) = self.snapshot.failure.get() {
            return Err(failure.clone());
        }
        loop {
            if self.current.is_none() {
                let Some(i) = self.next_segment else { return Ok(None) };
                self.next_segment = self.segment_after(i);
                let Some((from, to)) = self.window_in(i) else { continue };
                self.warm_up_from(i);
                let index = self.snapshot.segments[i].index.load_full();
                let same_index = self.take_over_read_ahead(i, &index);
                let entry = &self.snapshot.segments[i];
                let access = SegmentAccess { base: entry.base, log: &entry.log, index: index.view()? };
                let walk = SegmentWalk::new(
                    &access,
                    &self.query,
                    from,
                    to,
                    self.backwards,
                    self.snapshot.planner,
                    match (self.build_filters, self.wanted) {
                        (true, _) => Purpose::Condition,
                        (false, 0 | 1) => Purpose::One,
                        (false, _) => Purpose::Many,
                    },
                )?;
                prefetch_few_records(&access, &walk, self.wanted);
                let start = if self.backwards { to } else { from };
                // The entry just before the window in walk order, if the segment has one.
                let before = if self.backwards {
                    (self.snapshot.segment_last(i) > entry.base + u64::from(to)).then(|| to + 1)
                } else {
                    from.checked_sub(1)
                };
                // A scan reads the type column (or every offset) of its whole window: ask for it
                // at once rather than fault through it page by page. Not when the walk resumes
                // where one left off (the entry before its window read already: a subscription's
                // next batch, a read's next page): those asked twice per walk, per event for
                // `Subscription::next` (`core/tests/prefetch_review.rs`); past `PREFETCH_AFTER`
                // events such a walk asks ahead of itself like any other, and one that carries
                // on from the walk before (`resuming`) goes on with what that one asked. (Not judged by the
                // window's own first entry: the offsets' last block holds the type column's
                // first entries too, read by any type scan from the segment's start.)
                let resumed = same_index || before.is_some_and(|rel| !access.index.entry_is_cold(rel));
                if walk.is_sequential() && !resumed {
                    self.index_prefetched = Ahead::after(access.index.prefetch_entries(start, to - from, self.backwards));
                }
                self.current = Some((i, index, walk));
            }
            let (i, index, walk) = self.current.as_mut().expect("set above");
            let entry = &self.snapshot.segments[*i];
            let access = SegmentAccess { base: entry.base, log: &entry.log, index: index.view()? };
            match walk.next(&access)? {
                Some(rel) => {
                    self.in_segment += 1;
                    let offset = access.index.offset(rel)?;
                    if self.in_segment == 1 {
                        self.first_offset = offset;
                    }
                    // Only a walk that has gone some way is worth read-ahead (counted with the
                    // passes before it that it carries on from): a read of a few events would
                    // otherwise ask for 4 MiB it never reaches. Past that, `prefetch` asks only
                    // near the far end of what was asked, so a subscription taking one event at
                    // a time pays no `mincore` per event.
                    let dense = || offset.abs_diff(self.first_offset) / self.in_segment as u64 <= DENSE_GAP_BYTES;
                    if self.in_segment > PREFETCH_AFTER && (walk.is_sequential() || dense()) {
                        let log = entry.log.bytes()?;
                        self.prefetched = prefetch(log, offset as usize, self.backwards, self.prefetched);
                        // The index entries the walk reads on the way, likewise ahead of it.
                        let due = match self.index_prefetched {
                            Ahead::Nothing => true,
                            Ahead::ToTheEnd => false,
                            Ahead::Through(end) if self.backwards => rel <= end.saturating_add(INDEX_PREFETCH_ENTRIES / 2),
                            Ahead::Through(end) => rel.saturating_add(INDEX_PREFETCH_ENTRIES / 2) >= end,
                        };
                        if due {
                            self.index_prefetched =
                                Ahead::after(access.index.prefetch_entries(rel, INDEX_PREFETCH_ENTRIES, self.backwards));
                        }
                    }
                    let event = access.event_at(rel, offset)?;
                    self.wanted = self.wanted.saturating_sub(1);
                    (self.yielded_through, self.yielded_offset) = (event.position.get(), offset);
                    return Ok(Some((event.position, visit(&event))));
                }
                None => self.current = None,
            }
        }
    }
}

/// Options of [`crate::Store::read`]: the window `(after, until]`, a cap and a direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub after: Position,
    /// Upper bound (inclusive); defaults to the head when the read starts and is clamped to it.
    pub until: Option<Position>,
    /// At most this many events; `Some(0)` returns none.
    pub limit: Option<u64>,
    /// Descend from the upper end of the window.
    pub backwards: bool,
}

/// The answer to a read: a lazy, ordered walk over a snapshot. Iterate it, or take events in
/// batches with [`ReadResult::next_batch`] (what the bindings do, to cross their FFI in bulk).
pub struct ReadResult {
    source: ReadSource,
    remaining: u64,
}

/// Where a read's events come from: the embedded log, or a Postgres context.
enum ReadSource {
    Embedded(Walk),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgRead),
}

impl ReadSource {
    fn next(&mut self, visit: impl FnOnce(&EventView<'_>)) -> Result<Option<Position>> {
        match self {
            ReadSource::Embedded(walk) => walk.next(visit),
            #[cfg(feature = "postgres")]
            ReadSource::Postgres(read) => Ok(read.next(visit)?.map(|(position, _)| position)),
        }
    }
}

impl ReadResult {
    pub(crate) fn new(snapshot: Snapshot, query: Query, options: ReadOptions) -> Result<ReadResult> {
        let head = snapshot.head;
        let (low, high) = Self::window(&query, &options, head)?;
        let mut walk = Walk::new(snapshot, query, low, high, options.backwards);
        walk.wanted = options.limit.unwrap_or(u64::MAX);
        Ok(ReadResult {
            source: ReadSource::Embedded(walk),
            remaining: options.limit.unwrap_or(u64::MAX),
        })
    }

    /// A read of a Postgres context whose head was read as `head`.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(
        shared: Arc<crate::postgres::PgShared>,
        query: Query,
        options: ReadOptions,
        head: u64,
    ) -> Result<ReadResult> {
        let (low, high) = Self::window(&query, &options, head)?;
        let remaining = options.limit.unwrap_or(u64::MAX);
        let read = crate::postgres::PgRead::new(shared, &query, low, high, options.backwards, head, remaining);
        Ok(ReadResult { source: ReadSource::Postgres(read), remaining })
    }

    /// The rules of a read's window (`API.md`, "Read"): the inclusive range of positions.
    fn window(query: &Query, options: &ReadOptions, head: u64) -> Result<(u64, u64)> {
        query.validate("query")?;
        let after = options.after.get();
        if after > head {
            return Err(Error::invalid(format!("after is {after}; the head is {head}")));
        }
        if let Some(until) = options.until {
            if until.get() < after {
                return Err(Error::invalid(format!(
                    "until is {until}; it must not be below after ({after})"
                )));
            }
        }
        let high = options.until.map_or(head, |u| u.get().min(head));
        Ok((after + 1, high))
    }

    /// The store head pinned when the read began: the `after` for a decision built on it.
    pub fn head(&self) -> Position {
        match &self.source {
            ReadSource::Embedded(walk) => Position(walk.snapshot().head),
            #[cfg(feature = "postgres")]
            ReadSource::Postgres(read) => Position(read.head),
        }
    }

    /// Visits up to `max` further matching events, in order, without copying them; returns how
    /// many were visited (0 means the read is exhausted, when `max > 0`).
    pub fn visit(&mut self, max: usize, mut visit: impl FnMut(&EventView<'_>)) -> Result<usize> {
        let mut seen = 0;
        while seen < max && self.remaining > 0 {
            match self.source.next(&mut visit) {
                Ok(Some(_)) => {
                    seen += 1;
                    self.remaining -= 1;
                }
                Ok(None) => {
                    self.remaining = 0;
                    break;
                }
                Err(e) => {
                    self.remaining = 0;
                    return Err(e);
                }
            }
        }
        Ok(seen)
    }

    /// Up to `max` further events, owned.
    pub fn next_batch(&mut self, max: usize) -> Result<Vec<SequencedEvent>> {
        let mut out = Vec::with_capacity(max.min(1024));
        self.visit(max, |view| out.push(view.to_owned_event()))?;
        Ok(out)
    }

    /// Everything that remains, owned.
    pub fn collect_all(mut self) -> Result<Vec<SequencedEvent>> {
        let mut out = Vec::new();
        self.visit(usize::MAX, |view| out.push(view.to_owned_event()))?;
        Ok(out)
    }
}

impl Iterator for ReadResult {
    type Item = Result<SequencedEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut found = None;
        match self.visit(1, |view| found = Some(view.to_owned_event())) {
            Ok(_) => found.map(Ok),
            Err(e) => Some(Err(e)),
        }
    }
}
