//! The in-memory index of a segment that has no index file yet: the active segment, and a
//! just-sealed one until its file is built. Filled by the writer as batches commit, read by
//! anyone without locks up to the published head.
//!
//! Tag postings are chains: every occurrence of a tag records the previous occurrence of the same
//! tag, and each tag keeps its latest occurrence. The newest event of an entity is therefore one
//! map lookup away, and a window is read by walking back from the newest occurrence.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::event::EventView;
use crate::index::chunked::{ChunkedU32, ChunkedU64};

struct TagChain {
    /// Latest occurrence + 1 (0: none yet). Stored with `Release` after the occurrence's slots.
    last: AtomicU32,
    /// Occurrences so far (may run ahead of the published head; used only for planning).
    count: AtomicU32,
}

pub struct TailIndex {
    offsets: ChunkedU64,
    types: ChunkedU32,
    type_ids: papaya::HashMap<Box<str>, u32>,
    next_type_id: AtomicU32,
    tags: papaya::HashMap<Box<str>, TagChain>,
    occurrence_position: ChunkedU32,
    occurrence_previous: ChunkedU32,
    next_occurrence: AtomicU32,
}

impl TailIndex {
    pub fn new() -> Self {
        TailIndex {
            offsets: ChunkedU64::new(),
            types: ChunkedU32::new(),
            type_ids: papaya::HashMap::new(),
            next_type_id: AtomicU32::new(0),
            tags: papaya::HashMap::new(),
            occurrence_position: ChunkedU32::new(),
            occurrence_previous: ChunkedU32::new(),
            next_occurrence: AtomicU32::new(0),
        }
    }

    /// Indexes the event at relative position `rel` (writer only, in position order, before the
    /// head that covers it is published).
    pub fn add(&self, rel: u32, offset: u64, event: &EventView<'_>) {
        self.offsets.set(rel as usize, offset);
        let types = self.type_ids.pin();
        let type_id = match types.get(event.event_type) {
            Some(&id) => id,
            None => {
                let id = self.next_type_id.fetch_add(1, Ordering::Relaxed);
                types.insert(event.event_type.into(), id);
                id
            }
        };
        self.types.set(rel as usize, type_id);
        let tags = self.tags.pin();
        for tag in event.tags() {
            let occurrence = self.next_occurrence.fetch_add(1, Ordering::Relaxed);
            self.occurrence_position.set(occurrence as usize, rel);
            let chain = match tags.get(tag) {
                Some(chain) => chain,
                None => tags.get_or_insert(tag.into(), TagChain { last: AtomicU32::new(0), count: AtomicU32::new(0) }),
            };
            self.occurrence_previous.set(occurrence as usize, chain.last.load(Ordering::Relaxed));
            chain.count.fetch_add(1, Ordering::Relaxed);
            chain.last.store(occurrence + 1, Ordering::Release);
        }
    }

    pub fn offset(&self, rel: u32) -> u64 {
        self.offsets.get(rel as usize)
    }

    pub fn type_id(&self, name: &str) -> Option<u32> {
        self.type_ids.pin().get(name).copied()
    }

    pub fn type_at(&self, rel: u32) -> u32 {
        self.types.get(rel as usize)
    }

    /// How many events carry `tag` (an upper bound for the published part).
    pub fn tag_count(&self, tag: &str) -> u32 {
        self.tags.pin().get(tag).map_or(0, |chain| chain.count.load(Ordering::Relaxed))
    }

    /// The newest occurrence of `tag` (occurrence index + 1; 0: the tag never occurred).
    pub fn newest_occurrence(&self, tag: &str) -> u32 {
        self.tags.pin().get(tag).map_or(0, |chain| chain.last.load(Ordering::Acquire))
    }

    /// The relative position of occurrence `next - 1`, and the occurrence before it (+ 1).
    pub fn occurrence(&self, next: u32) -> (u32, u32) {
        let occurrence = (next - 1) as usize;
        (self.occurrence_position.get(occurrence), self.occurrence_previous.get(occurrence))
    }
}
