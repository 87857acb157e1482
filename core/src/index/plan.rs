//! The planner: for one segment, one query and one window of relative positions, a lazy walk
//! over the matching positions in either direction.
//!
//! Per query item it picks one of:
//! - **postings**: step through the shortest posting list of the item's tags (a seek per step,
//!   so limits and "newest first" cost one seek, not a walk), keep a candidate when every other
//!   tag's postings contain it and the type column holds one of the item's types;
//! - **type column**: for items with types but no tags, probe the two-byte type ids of the
//!   window, never touching payloads;
//! - **scan**: decode and test every event of the window, when the window is narrower than the
//!   shortest posting list by [`SCAN_RATIO`] (a condition checked at the head, say).
//!
//! Items are merged in position order without duplicates. Every plan gives the same answer; the
//! choice only changes the cost, which the differential tests pin down by forcing each.

use crate::error::Result;
use crate::event::EventView;
use crate::index::file::TYPE_SET_MIN_EVENTS;
use crate::index::postings::Postings;
use crate::index::{IndexView, Planner};
use crate::error::Error;
use crate::log::format::{FRAME_LEN, HEADER_LEN, chain_before, record_crc};
use crate::log::segment::SegmentLog;
use crate::position::Position;
use crate::query::{Query, QueryItem};

/// A window this many times narrower than the shortest posting list is scanned instead.
pub const SCAN_RATIO: u64 = 16;

/// One segment's bytes and index, as a plan reads them.
pub(crate) struct SegmentAccess<'a> {
    pub base: u64,
    /// Loaded by the first event read from it: a walk that only consults the index (a
    /// condition that finds nothing, say) leaves a sealed segment's log unread.
    pub log: &'a SegmentLog,
    pub index: IndexView<'a>,
}

impl SegmentAccess<'_> {
    /// The event at `rel`, its record checksum verified: open does not read sealed segments,
    /// so this is where damage inside one is found (as `Corruption`, never as wrong data).
    pub fn event(&self, rel: u32) -> Result<EventView<'_>> {
        self.event_at(rel, self.index.offset(rel)?)
    }

    /// [`SegmentAccess::event`] for a caller that has looked up the event's `offset` already.
    pub fn event_at(&self, rel: u32, offset: u64) -> Result<EventView<'_>> {
        let log: &[u8] = self.log.bytes()?;
        let offset = offset as usize;
        let position = Position(self.base + rel as u64);
        let bad = |why: &str| Error::corruption(format!("event {position}: {why}"));
        let frame = log.get(offset..offset + FRAME_LEN).ok_or_else(|| bad("lies outside its segment"))?;
        let len_bytes: [u8; 4] = frame[0..4].try_into().unwrap();
        let stored = u32::from_le_bytes(frame[4..8].try_into().unwrap());
        let len = u32::from_le_bytes(len_bytes) as usize;
        let payload = log.get(offset + FRAME_LEN..offset + FRAME_LEN + len).ok_or_else(|| bad("runs past its segment"))?;
        let seed = self.chain_seed(log, rel, offset)?.ok_or_else(|| bad("the record before it is damaged"))?;
        if record_crc(seed, len_bytes, payload) != stored {
            return Err(bad("its bytes do not match their checksum"));
        }
        EventView::decode(position, payload)
    }

    /// The CRC of the record just before the event at `offset`: the segment header's, the
    /// previous event's in the same batch, or the commit marker of the batch before.
    /// None: the bytes that would give it are damaged.
    fn chain_seed(&self, log: &[u8], rel: u32, offset: usize) -> Result<Option<u32>> {
        let crc_at = |at: usize| log.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        if rel > 0 && offset != HEADER_LEN {
            let previous = self.index.offset(rel - 1)? as usize;
            let Some(previous_len) = crc_at(previous) else { return Ok(None) };
            if previous + FRAME_LEN + previous_len as usize == offset {
                return Ok(crc_at(previous + 4));
            }
        }
        Ok(chain_before(log, offset))
    }
}

enum ItemPlan {
    /// A type or tag of the item does not occur in this segment.
    Never,
    /// `Query::all()`.
    Every,
    TypeColumn { type_ids: Vec<u32> },
    Postings {
        driver: Postings,
        others: Vec<Postings>,
        /// None: any type.
        type_ids: Option<Vec<u32>>,
    },
    Scan(QueryItem),
}

struct ItemWalk {
    plan: ItemPlan,
    /// Next relative position to consider, in walk order; None when exhausted.
    from: Option<u32>,
    peeked: Option<u32>,
}

/// What a segment's walk is for, as far as its planning may spend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A condition check (its first match): builds a sealed segment's tag filter on first use
    /// (reads use one only once it is built).
    Condition,
    /// A walk that yields at most one more event (a `limit: 1` read's, a subscription's batch
    /// of one): it reads one event's offset, so a short list's lookup does not ask the page
    /// cache whether to fetch its events' offsets together (a subscription taking one event at
    /// a time plans anew for each: that was a `mincore` an event).
    One,
    /// A walk that wants two events or more: a short list whose page is not in memory has its
    /// events' offsets asked for together (one `mincore` per lookup).
    Many,
}

/// Matching relative positions of one segment inside `lo..=hi`.
pub(crate) struct SegmentWalk {
    items: Vec<ItemWalk>,
    lo: u32,
    hi: u32,
    backwards: bool,
    primed: bool,
}

impl SegmentWalk {
    pub fn new(
        segment: &SegmentAccess<'_>,
        query: &Query,
        lo: u32,
        hi: u32,
        backwards: bool,
        planner: Planner,
        purpose: Purpose,
    ) -> Result<SegmentWalk> {
        let start = if backwards { hi } else { lo };
        let plans = match query {
            Query::All => vec![ItemPlan::Every],
            Query::Items(items) => {
                let mut plans = Vec::with_capacity(items.len());
                for item in items {
                    plans.push(plan_item(segment, item, lo, hi, planner, purpose)?);
                }
                plans
            }
        };
        let items = plans
            .into_iter()
            .filter(|plan| !matches!(plan, ItemPlan::Never))
            .map(|plan| ItemWalk { plan, from: Some(start), peeked: None })
            .collect();
        Ok(SegmentWalk { items, lo, hi, backwards, primed: false })
    }

    /// The relative positions this walk may visit, when they are few: every item is driven by
    /// a postings list of at most `max` entries (a rare tag's). Sorted, deduplicated, inside
    /// the window; an item's other tags and types may still reject some. None otherwise.
    pub fn few_candidates(&self, max: usize) -> Option<Vec<u32>> {
        if self.items.is_empty() {
            return None;
        }
        let mut rels = Vec::new();
        for item in &self.items {
            let ItemPlan::Postings { driver, .. } = &item.plan else { return None };
            if driver.count() > max {
                return None;
            }
            driver.for_each_up_to(self.hi, |rel| {
                if rel >= self.lo {
                    rels.push(rel);
                }
            });
        }
        rels.sort_unstable();
        rels.dedup();
        Some(rels)
    }

    /// Of [`SegmentWalk::few_candidates`], those the walk will yield, in walk order, up to
    /// `wanted` of them: what the walk itself would check on its way to its `wanted`-th event
    /// (an item's type column and other tags reject a candidate from the index alone, and a
    /// walk stopped by a limit reads no further). None where few_candidates is None, or a
    /// check fails (the walk meets the damage itself, if it gets there).
    pub fn few_matches(&self, segment: &SegmentAccess<'_>, max: usize, wanted: u64) -> Option<Vec<u32>> {
        let mut rels = self.few_candidates(max)?;
        if self.backwards {
            rels.reverse();
        }
        let mut matches = Vec::new();
        for rel in rels {
            if matches.len() as u64 >= wanted {
                break;
            }
            let mut accepted = false;
            for item in &self.items {
                let ItemPlan::Postings { driver, .. } = &item.plan else { return None };
                if driver.contains(rel) && accepts(&item.plan, segment, rel).ok()? {
                    accepted = true;
                    break;
                }
            }
            if accepted {
                matches.push(rel);
            }
        }
        Some(matches)
    }

    /// Whether this walk reads the window in order (no postings to seek through): the caller
    /// then prefetches ahead of it, the whole window's index entries at once. A walk with no
    /// item (each one `Never` here: a rare tag absent from this segment) reads nothing and is
    /// not sequential; taken for one, it had a cold rare read at 10M events ask for 8.4 MB of
    /// offsets and type column in every segment the tag is absent from.
    pub fn is_sequential(&self) -> bool {
        !self.items.is_empty() && self.items.iter().all(|item| !matches!(item.plan, ItemPlan::Postings { .. }))
    }

    /// The next matching relative position, in walk order.
    pub fn next(&mut self, segment: &SegmentAccess<'_>) -> Result<Option<u32>> {
        if !self.primed {
            for i in 0..self.items.len() {
                self.items[i].peeked = self.advance(i, segment)?;
            }
            self.primed = true;
        }
        let best = self
            .items
            .iter()
            .filter_map(|item| item.peeked)
            .reduce(|a, b| if self.backwards { a.max(b) } else { a.min(b) });
        let Some(best) = best else { return Ok(None) };
        for i in 0..self.items.len() {
            if self.items[i].peeked == Some(best) {
                self.items[i].peeked = self.advance(i, segment)?;
            }
        }
        Ok(Some(best))
    }

    fn step(&self, rel: u32) -> Option<u32> {
        if self.backwards {
            rel.checked_sub(1).filter(|&r| r >= self.lo)
        } else {
            rel.checked_add(1).filter(|&r| r <= self.hi)
        }
    }

    fn advance(&mut self, i: usize, segment: &SegmentAccess<'_>) -> Result<Option<u32>> {
        let (lo, hi, backwards) = (self.lo, self.hi, self.backwards);
        loop {
            let Some(from) = self.items[i].from else { return Ok(None) };
            let candidate = match &self.items[i].plan {
                ItemPlan::Never => None,
                ItemPlan::Every | ItemPlan::TypeColumn { .. } | ItemPlan::Scan(_) => Some(from),
                ItemPlan::Postings { driver, .. } => {
                    if backwards { driver.last_in(lo, from) } else { driver.first_in(from, hi) }
                }
            };
            let Some(rel) = candidate else {
                self.items[i].from = None;
                return Ok(None);
            };
            self.items[i].from = self.step(rel);
            if accepts(&self.items[i].plan, segment, rel)? {
                return Ok(Some(rel));
            }
        }
    }
}

fn accepts(plan: &ItemPlan, segment: &SegmentAccess<'_>, rel: u32) -> Result<bool> {
    Ok(match plan {
        ItemPlan::Never => false,
        ItemPlan::Every => true,
        ItemPlan::TypeColumn { type_ids } => type_ids.contains(&segment.index.type_at(rel)?),
        ItemPlan::Postings { others, type_ids, .. } => {
            let type_matches = match type_ids {
                None => true,
                Some(ids) => ids.contains(&segment.index.type_at(rel)?),
            };
            type_matches && others.iter().all(|p| p.contains(rel))
        }
        ItemPlan::Scan(item) => item.matches(&segment.event(rel)?),
    })
}

/// `purpose`: see [`Purpose`].
fn plan_item(
    segment: &SegmentAccess<'_>,
    item: &QueryItem,
    lo: u32,
    hi: u32,
    planner: Planner,
    purpose: Purpose,
) -> Result<ItemPlan> {
    let build_filters = purpose == Purpose::Condition;
    if planner == Planner::ForceScan {
        return Ok(ItemPlan::Scan(item.clone()));
    }
    let index = segment.index;
    if let IndexView::Sealed(file) = index {
        if item.tags.iter().any(|tag| !file.may_contain_tag(tag, build_filters)) {
            return Ok(ItemPlan::Never);
        }
    }
    let type_ids: Option<Vec<u32>> = (!item.types.is_empty())
        .then(|| item.types.iter().filter_map(|t| index.type_id(t)).collect());
    if type_ids.as_ref().is_some_and(Vec::is_empty) {
        return Ok(ItemPlan::Never);
    }
    if item.tags.is_empty() {
        return Ok(ItemPlan::TypeColumn { type_ids: type_ids.unwrap_or_default() });
    }
    let mut counted = Vec::with_capacity(item.tags.len());
    for tag in &item.tags {
        counted.push((index.tag_count(tag, purpose == Purpose::Many)?, tag));
    }
    counted.sort();
    let shortest = counted[0].0;
    if shortest == 0 {
        return Ok(ItemPlan::Never);
    }
    let width = (hi - lo) as u64 + 1;
    if planner == Planner::Auto && width * SCAN_RATIO <= shortest as u64 {
        return Ok(ItemPlan::Scan(item.clone()));
    }
    let Some(driver) = index.postings(counted[0].1)? else { return Ok(ItemPlan::Never) };
    // A frequent tag whose events have none of the item's types here (a stale condition on a
    // hot entity, asking for a type it never had) is answered without walking its events: the
    // types each frequent tag occurs with are found once per segment and kept.
    if let (IndexView::Sealed(file), Some(type_ids)) = (index, &type_ids) {
        if shortest >= TYPE_SET_MIN_EVENTS {
            let with_tag = file.types_with_tag(counted[0].1, &driver)?;
            if !type_ids.iter().any(|id| with_tag.binary_search(id).is_ok()) {
                return Ok(ItemPlan::Never);
            }
        }
    }
    let mut others = Vec::new();
    for &(_, tag) in &counted[1..] {
        match index.postings(tag)? {
            Some(postings) => others.push(postings),
            None => return Ok(ItemPlan::Never),
        }
    }
    Ok(ItemPlan::Postings { driver, others, type_ids })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::postings::SortedList;

    fn walk(plans: Vec<ItemPlan>) -> SegmentWalk {
        let items = plans.into_iter().map(|plan| ItemWalk { plan, from: Some(0), peeked: None }).collect();
        SegmentWalk { items, lo: 0, hi: 9, backwards: false, primed: false }
    }

    #[test]
    fn only_a_walk_that_reads_its_window_in_order_is_sequential() {
        assert!(!walk(vec![]).is_sequential(), "a walk with nothing to read");
        assert!(walk(vec![ItemPlan::Every]).is_sequential());
        assert!(walk(vec![ItemPlan::TypeColumn { type_ids: vec![1] }]).is_sequential());
        let postings = || ItemPlan::Postings { driver: Postings::List(SortedList::Owned(vec![3, 7].into())), others: vec![], type_ids: None };
        assert!(!walk(vec![postings()]).is_sequential());
        assert!(!walk(vec![postings(), ItemPlan::Every]).is_sequential());
    }

    #[test]
    fn few_candidates_are_the_short_drivers_entries_inside_the_window() {
        let list = |rels: &[u32]| ItemPlan::Postings { driver: Postings::List(SortedList::Owned(rels.into())), others: vec![], type_ids: None };
        let mut w = walk(vec![list(&[1, 4, 12]), list(&[4, 7])]);
        (w.lo, w.hi) = (2, 9);
        assert_eq!(w.few_candidates(64), Some(vec![4, 7]));
        assert_eq!(w.few_candidates(2), None, "a driver longer than the bound");
        assert_eq!(walk(vec![list(&[1]), ItemPlan::Every]).few_candidates(64), None, "an item that walks everything");
        assert_eq!(walk(vec![]).few_candidates(64), None);
    }
}
