//! Reads: snapshots of the published prefix of the log, and bounded, lazy reads over them.

pub(crate) mod directory;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::error::{Error, Result};
use crate::event::{EventView, SequencedEvent};
use crate::log::format::FRAME_LEN;
use crate::log::segment::MappedSegment;
use crate::position::Position;
use crate::query::Query;
use crate::subscribe::Notifier;
use directory::{Directory, DirectorySnapshot, Locator};

/// What the writer publishes and readers load: mapped segments, the position directory and the
/// head. The writer updates segments and directory first and the head last (`Release`); readers
/// load the head first (`Acquire`), so everything at or below it is in place.
pub(crate) struct Published {
    pub segments: ArcSwap<Vec<Arc<MappedSegment>>>,
    pub directory: Directory,
    head: AtomicU64,
    pub notifier: Notifier,
    pub closed: AtomicBool,
}

impl Published {
    pub fn new() -> Self {
        Published {
            segments: ArcSwap::from_pointee(Vec::new()),
            directory: Directory::new(),
            head: AtomicU64::new(0),
            notifier: Notifier::default(),
            closed: AtomicBool::new(false),
        }
    }

    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    pub fn add_segment(&self, segment: Arc<MappedSegment>) -> usize {
        let mut list: Vec<Arc<MappedSegment>> = self.segments.load().iter().cloned().collect();
        list.push(segment);
        let number = list.len() - 1;
        self.segments.store(Arc::new(list));
        number
    }

    pub fn record(&self, position: u64, locator: Locator) {
        self.directory.set(position, locator);
    }

    /// Makes everything up to `head` visible and wakes subscribers (if there are any).
    pub fn publish_head(&self, head: u64) {
        self.head.store(head, Ordering::Release);
        self.notifier.notify();
    }

    pub fn snapshot(&self) -> Snapshot {
        let head = self.head();
        Snapshot {
            head,
            segments: self.segments.load_full(),
            directory: self.directory.snapshot(),
        }
    }
}

/// A consistent view of the log up to `head`. Holding one keeps its segments mapped.
#[derive(Clone)]
pub(crate) struct Snapshot {
    pub head: u64,
    segments: Arc<Vec<Arc<MappedSegment>>>,
    directory: DirectorySnapshot,
}

impl Snapshot {
    /// The event at `position` (1..=head), borrowed from its mapped segment.
    pub fn event(&self, position: u64) -> Result<EventView<'_>> {
        debug_assert!(position >= 1 && position <= self.head);
        let Locator { segment, offset } = self.directory.get(position);
        let bytes = self.segments[segment].bytes();
        let len = bytes
            .get(offset..offset + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or_else(|| Error::corruption(format!("event {position} lies past its segment")))?;
        let payload = bytes
            .get(offset + FRAME_LEN..offset + FRAME_LEN + len)
            .ok_or_else(|| Error::corruption(format!("event {position} runs past its segment")))?;
        EventView::decode(Position(position), payload)
    }

    /// The first event matching `query` in `(after, until]`, by scanning. This is the oracle the
    /// condition checks use; the index answers the same question faster where it exists.
    pub fn first_match(&self, query: &Query, after: u64, until: u64) -> Result<Option<Position>> {
        for position in after + 1..=until {
            if query.matches(&self.event(position)?) {
                return Ok(Some(Position(position)));
            }
        }
        Ok(None)
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
    snapshot: Snapshot,
    query: Query,
    /// Next position to examine.
    cursor: u64,
    /// Lowest position (inclusive) of the window; the window is empty when `low > high`.
    low: u64,
    high: u64,
    remaining: u64,
    backwards: bool,
}

impl ReadResult {
    pub(crate) fn new(snapshot: Snapshot, query: Query, options: ReadOptions) -> Result<ReadResult> {
        query.validate("query")?;
        let head = snapshot.head;
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
        let low = after + 1;
        let cursor = if options.backwards { high } else { low };
        Ok(ReadResult {
            snapshot,
            query,
            cursor,
            low,
            high,
            remaining: options.limit.unwrap_or(u64::MAX),
            backwards: options.backwards,
        })
    }

    /// The store head pinned when the read began: the `after` for a decision built on it.
    pub fn head(&self) -> Position {
        Position(self.snapshot.head)
    }

    /// Visits up to `max` further matching events, in order, without copying them; returns how
    /// many were visited (0 means the read is exhausted, when `max > 0`).
    pub fn visit(&mut self, max: usize, mut visit: impl FnMut(&EventView<'_>)) -> Result<usize> {
        let mut seen = 0;
        while seen < max && self.remaining > 0 {
            let position = self.cursor;
            if self.backwards {
                // `low` is at least 1, so `position - 1` cannot underflow.
                if position < self.low {
                    break;
                }
                self.cursor = position - 1;
            } else {
                if position > self.high {
                    break;
                }
                self.cursor = position + 1;
            }
            let view = self.snapshot.event(position)?;
            if self.query.matches(&view) {
                visit(&view);
                seen += 1;
                self.remaining -= 1;
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
            Err(e) => {
                self.remaining = 0;
                Some(Err(e))
            }
        }
    }
}
