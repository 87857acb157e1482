//! The in-memory index of a segment that has no index file yet: the active segment, and a
//! just-sealed one until its file is built. Filled by the writer as batches commit, read by
//! anyone without locks up to the published head.
//!
//! Each tag keeps its occurrences as a sorted array of relative positions (positions only grow,
//! so appending keeps it sorted): a read seeks it by binary search in either direction, so
//! reading k events of a tag costs O(k log k) however the walk moves, and the newest event of a
//! tag is the array's last slot. The first occurrence is kept inline, since most tags (an
//! entity's id) occur once or a few times per segment; the array is allocated at the second and
//! grows by doubling. Readers load the count (`Acquire`) and then the array, which the writer
//! swapped in before storing that count (`Release`), so every slot below the count is there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arc_swap::ArcSwapOption;

use crate::NameHasher;
use crate::event::EventView;
use crate::index::chunked::{ChunkedU32, ChunkedU64};
use crate::error::Result;
use crate::index::file::VerifiedIndex;
use crate::index::postings::SortedList;

/// The relative positions of one tag's events in the segment, ascending.
struct TagPostings {
    /// How many events carry the tag; stored (`Release`) after the slot it covers.
    count: AtomicU32,
    /// The first occurrence.
    first: u32,
    /// Every occurrence, once there are two or more; grown by doubling (copied into a new array
    /// that readers pick up on their next load; an old one stays valid for whoever holds it).
    all: ArcSwapOption<Box<[AtomicU32]>>,
}

/// Smallest array a tag gets at its second occurrence.
const FIRST_ARRAY_SLOTS: usize = 4;

pub struct TailIndex {
    offsets: ChunkedU64,
    types: ChunkedU32,
    type_ids: papaya::HashMap<Box<str>, u32, NameHasher>,
    next_type_id: AtomicU32,
    tags: papaya::HashMap<Box<str>, TagPostings, NameHasher>,
}

impl TailIndex {
    pub fn new() -> Self {
        TailIndex {
            offsets: ChunkedU64::new(),
            types: ChunkedU32::new(),
            type_ids: papaya::HashMap::with_hasher(NameHasher::new()),
            next_type_id: AtomicU32::new(0),
            tags: papaya::HashMap::with_hasher(NameHasher::new()),
        }
    }

    /// A tail index holding the events of `index` (a part of the active segment that open
    /// gives back to the writer to carry on), built from the index alone: no log byte is read.
    pub fn from_index(index: &VerifiedIndex) -> Result<TailIndex> {
        index.prefetch_whole();
        let tail = TailIndex::new();
        let mut next_type_id = 0;
        {
            let type_ids = tail.type_ids.pin();
            for (name, id) in index.type_names() {
                type_ids.insert(name.into(), id);
                next_type_id = next_type_id.max(id + 1);
            }
        }
        tail.next_type_id.store(next_type_id, Ordering::Relaxed);
        for rel in 0..index.count() as u32 {
            tail.offsets.set(rel as usize, index.offset(rel)?);
            tail.types.set(rel as usize, index.type_at(rel)?);
        }
        let last = (index.count() as u32).saturating_sub(1);
        let tags = tail.tags.pin();
        index.each_tag(|tag, postings| {
            let Ok(tag) = std::str::from_utf8(tag) else { return };
            postings.for_each_up_to(last, |rel| match tags.get(tag) {
                Some(list) => list.push(rel),
                None => {
                    tags.insert(tag.into(), TagPostings { count: AtomicU32::new(1), first: rel, all: ArcSwapOption::empty() });
                }
            });
        })?;
        drop(tags);
        Ok(tail)
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
            match tags.get(tag) {
                Some(postings) => postings.push(rel),
                None => {
                    tags.insert(
                        tag.into(),
                        TagPostings { count: AtomicU32::new(1), first: rel, all: ArcSwapOption::empty() },
                    );
                }
            }
        }
    }

    pub fn offset(&self, rel: u32) -> u64 {
        self.offsets.get(rel as usize)
    }

    /// Every type indexed so far with its segment-local id.
    pub fn type_names(&self) -> Vec<(String, u32)> {
        self.type_ids.pin().iter().map(|(name, &id)| (name.to_string(), id)).collect()
    }

    /// Every tag indexed so far with how many of its events are at or below `last` (the
    /// reader's head, relative to the segment), unordered.
    pub fn tag_counts_up_to(&self, last: u32, prefix: &str) -> Vec<(String, u64)> {
        let tags = self.tags.pin();
        let mut out = Vec::new();
        for (tag, postings) in tags.iter() {
            if !tag.starts_with(prefix) {
                continue;
            }
            let count = postings.count.load(Ordering::Acquire) as usize;
            let visible = if count == 1 {
                (postings.first <= last) as u64
            } else {
                let all = postings.all.load_full().expect("a tag seen twice has its array");
                all[..count].partition_point(|rel| rel.load(Ordering::Relaxed) <= last) as u64
            };
            if visible > 0 {
                out.push((tag.to_string(), visible));
            }
        }
        out
    }

    pub fn type_id(&self, name: &str) -> Option<u32> {
        self.type_ids.pin().get(name).copied()
    }

    pub fn type_at(&self, rel: u32) -> u32 {
        self.types.get(rel as usize)
    }

    /// How many events carry `tag` (an upper bound for the published part).
    pub fn tag_count(&self, tag: &str) -> u32 {
        self.tags.pin().get(tag).map_or(0, |postings| postings.count.load(Ordering::Acquire))
    }

    /// The positions of `tag`'s events indexed so far, ascending (None: the tag never occurred).
    /// May reach past a reader's snapshot head; walks bound themselves by their window.
    pub fn postings(&self, tag: &str) -> Option<SortedList> {
        let tags = self.tags.pin();
        let postings = tags.get(tag)?;
        let count = postings.count.load(Ordering::Acquire) as usize;
        if count == 1 {
            return Some(SortedList::Owned(Arc::from([postings.first])));
        }
        let all = postings.all.load_full().expect("a tag seen twice has its array");
        Some(SortedList::Atomic { list: all, len: count })
    }
}

impl TagPostings {
    /// Writer only: `rel` is above every position already in the list.
    fn push(&self, rel: u32) {
        let count = self.count.load(Ordering::Relaxed) as usize;
        let current = self.all.load();
        match current.as_deref() {
            Some(all) if count < all.len() => all[count].store(rel, Ordering::Relaxed),
            _ => {
                let slots = (count * 2).max(FIRST_ARRAY_SLOTS);
                let grown: Box<[AtomicU32]> = (0..slots)
                    .map(|i| {
                        AtomicU32::new(match (i, current.as_deref()) {
                            (i, Some(all)) if i < count => all[i].load(Ordering::Relaxed),
                            (0, None) => self.first,
                            (i, _) if i == count => rel,
                            _ => 0,
                        })
                    })
                    .collect();
                self.all.store(Some(Arc::new(grown)));
            }
        }
        self.count.store(count as u32 + 1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, encode_payload, validate_event};
    use crate::position::Position;

    fn add(index: &TailIndex, rel: u32, tags: &[String]) {
        let event = Event::new("T", tags.to_vec(), vec![]);
        let order = validate_event(0, &event, 1 << 20).unwrap();
        let mut payload = Vec::new();
        encode_payload(&event, &order, &mut payload);
        index.add(rel, rel as u64 * 100, &EventView::decode(Position(rel as u64 + 1), &payload).unwrap());
    }

    /// Many tags per event and tags of every frequency: each tag's list is exactly its events,
    /// ascending, whatever the growth steps (there is no store-wide occurrence counter to wrap).
    #[test]
    fn every_tag_lists_exactly_its_events() {
        let index = TailIndex::new();
        let tag_names: Vec<String> = (0..300).map(|t| format!("t{t}")).collect();
        for rel in 0..2000u32 {
            let tags: Vec<String> =
                tag_names.iter().enumerate().filter(|(t, _)| rel as usize % (t + 1) == 0).map(|(_, n)| n.clone()).take(255).collect();
            add(&index, rel, &tags);
        }
        for (t, name) in tag_names.iter().enumerate() {
            let expected: Vec<u32> = (0..2000u32)
                .filter(|rel| {
                    *rel as usize % (t + 1) == 0
                        && (0..=t).filter(|u| *rel as usize % (u + 1) == 0).count() <= 255
                })
                .collect();
            let list = index.postings(name).unwrap();
            let got: Vec<u32> = (0..list.len()).map(|i| list.get(i)).collect();
            assert_eq!(got, expected, "tag {name}");
            assert_eq!(index.tag_count(name) as usize, expected.len());
        }
        assert!(index.postings("missing").is_none());
    }
}
