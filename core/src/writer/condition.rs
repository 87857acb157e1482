//! Deciding append conditions, split so that the single writer thread does as little as it can.
//!
//! The log only grows, so a clause checked over `(from, H]` on the caller's thread (against a
//! snapshot whose head is `H`) never needs checking there again: the writer checks only what
//! was committed after `H`, plus the batches staged before the request in its group. A
//! boundary clause that already fails at or below `H` fails for good (`Conflict`, answered on
//! the caller's thread, never reaching the writer). An existence clause that fails at or below
//! `H` is remembered and answered by the writer, because the contract reports the boundary
//! clause first when both fail, and the boundary clause may still fail after `H`.

use std::collections::HashMap;

use crate::NameHasher;
use crate::append::AppendCondition;
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::position::Position;
use crate::query::{Query, QueryItem};
use crate::read::Snapshot;

/// What the caller's thread found for a request's condition.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PreChecked {
    /// Both clauses hold over the log up to here.
    pub through: u64,
    /// The first event matching the existence clause, if one exists at or below `through`.
    pub existing: Option<Position>,
}

/// Checks `condition` against `snapshot` on the caller's thread. `Err` only for a verdict that
/// cannot change (the boundary clause fails) or a read error.
pub(crate) fn pre_check(snapshot: &Snapshot, condition: &AppendCondition) -> Result<PreChecked> {
    let head = snapshot.head;
    let after = condition.after.map_or(0, Position::get);
    if let Some(position) = snapshot.first_match(&condition.fail_if_events_match, after, head)? {
        return Err(conflict(position, after));
    }
    let existing = match &condition.fail_if_exists {
        Some(exists) => snapshot.first_match(exists, 0, head)?,
        None => None,
    };
    Ok(PreChecked { through: head, existing })
}

pub(crate) fn conflict(position: Position, after: u64) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!("append condition failed: event {position} matches fail_if_events_match and is after {after}"),
    )
    .at(position)
}

pub(crate) fn already_exists(position: Position) -> Error {
    Error::new(ErrorKind::AlreadyExists, format!("append condition failed: event {position} matches fail_if_exists"))
        .at(position)
}

/// The staged events of a group by type and tag: a condition checked against the group asks
/// this instead of decoding every staged event again (which made group commits quadratic in
/// the group's size for conditional appends). Built only for groups with a condition in them.
///
/// Per staged event it keeps a type id (an owned copy of its type name, an allocation per
/// event, was a tenth of the writer's time in batched groups) and its index in the lists of
/// those of its tags that a condition of the group names. The only questions asked of it are
/// the group's own conditions, all known before the first event is staged, so a tag no
/// condition names is never looked up and is not kept: a batched group whose events carry an
/// id tag each allocated a key and a list per event for tags nobody asked about (12% of the
/// writer's samples in W1 batch 64, 16 writers, 2026-12-04).
#[derive(Default)]
pub(crate) struct StagedIndex {
    /// Type id of each staged event, in position order (ids index `by_type`).
    type_of: Vec<u32>,
    type_ids: HashMap<Box<str>, u32, NameHasher>,
    /// For each type id, the indices (in `type_of`) of the staged events of that type, ascending.
    by_type: Vec<Vec<u32>>,
    /// For each tag a condition of the group names (and only those: see above), the indices
    /// of the staged events that carry it, ascending.
    by_tag: HashMap<Box<str>, Vec<u32>, NameHasher>,
}

impl StagedIndex {
    /// An empty index for a group whose conditions ask `queries` (every query that will be
    /// given to [`first_match`](Self::first_match)).
    pub fn for_queries<'q>(queries: impl IntoIterator<Item = &'q Query>) -> StagedIndex {
        let mut index = StagedIndex::default();
        for query in queries {
            let Query::Items(items) = query else { continue };
            for tag in items.iter().flat_map(|item| &item.tags) {
                if !index.by_tag.contains_key(tag.as_str()) {
                    index.by_tag.insert(tag.as_str().into(), Vec::new());
                }
            }
        }
        index
    }

    /// The same index with nothing staged, for the rest of a group after a roll-over (its
    /// conditions, so its tags, are the same).
    pub fn emptied(mut self) -> StagedIndex {
        self.type_of.clear();
        self.type_ids.clear();
        self.by_type.clear();
        self.by_tag.values_mut().for_each(Vec::clear);
        self
    }

    pub fn add(&mut self, event: &EventView<'_>) {
        let index = self.type_of.len() as u32;
        let type_id = match self.type_ids.get(event.event_type) {
            Some(&id) => id,
            None => {
                let id = self.by_type.len() as u32;
                self.type_ids.insert(event.event_type.into(), id);
                self.by_type.push(Vec::new());
                id
            }
        };
        self.type_of.push(type_id);
        self.by_type[type_id as usize].push(index);
        if self.by_tag.is_empty() {
            return;
        }
        for tag in event.tags() {
            if let Some(list) = self.by_tag.get_mut(tag) {
                list.push(index);
            }
        }
    }

    /// The position of the first staged event `query` matches, the first staged event being at
    /// `first_position`.
    pub fn first_match(&self, query: &Query, first_position: u64) -> Option<Position> {
        let index = match query {
            Query::All => (!self.type_of.is_empty()).then_some(0),
            Query::Items(items) => items.iter().filter_map(|item| self.first_item_match(item)).min(),
        }?;
        Some(Position(first_position + index as u64))
    }

    /// Index of the first staged event `item` matches: a lookup per type or tag, then a walk
    /// of the shortest list only (each candidate checked by binary search in the others).
    fn first_item_match(&self, item: &QueryItem) -> Option<usize> {
        let staged_type_ids = || item.types.iter().filter_map(|t| self.type_ids.get(t.as_str()).copied());
        if item.tags.is_empty() {
            return staged_type_ids().map(|id| self.by_type[id as usize][0] as usize).min();
        }
        let mut lists = Vec::with_capacity(item.tags.len());
        for tag in &item.tags {
            // Every tag the group's conditions name has its list, empty when no staged event
            // carries it. A tag without one was not named when the index was made, so no
            // staged event could be ruled out for it: a bug, and a panic (the writer's failure,
            // answered to every caller) is better than a conflict missed.
            let list = self.by_tag.get(tag.as_str()).unwrap_or_else(|| {
                panic!("the staged index was not made for a query naming tag {tag:?}")
            });
            if list.is_empty() {
                return None;
            }
            lists.push(list);
        }
        // Looked up once, compared as integers per candidate.
        let type_ids: Vec<u32> = staged_type_ids().collect();
        if !item.types.is_empty() && type_ids.is_empty() {
            return None;
        }
        lists.sort_by_key(|list| list.len());
        let type_ok = |i: usize| item.types.is_empty() || type_ids.contains(&self.type_of[i]);
        lists[0]
            .iter()
            .map(|&i| i as usize)
            .find(|&i| type_ok(i) && lists[1..].iter().all(|list| list.binary_search(&(i as u32)).is_ok()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::event::{Event, encode_payload, validate_event};

    fn staged(events: usize) -> StagedIndex {
        let mut index = StagedIndex::for_queries([&Query::of([QueryItem::new(["Type7"], ["hot"])])]);
        for i in 0..events {
            let event = Event::new(format!("Type{}", i % 50), [format!("entity:{i}"), "hot".to_string()], vec![]);
            let order = validate_event(0, &event, 1 << 20).unwrap();
            let mut payload = Vec::new();
            encode_payload(&event, &order, &mut payload);
            index.add(&EventView::decode(Position(i as u64 + 1), &payload).unwrap());
        }
        index
    }

    /// Every shape of query item (types only, tags only, both, a name never staged, several
    /// items, `All`) finds exactly the first staged event a decoded walk of the group finds.
    #[test]
    fn agrees_with_a_walk_of_the_staged_events() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut payloads = Vec::new();
        for _ in 0..300 {
            let mut tags: Vec<String> = (0..next(4)).map(|_| format!("t{}", next(12))).collect();
            tags.sort();
            tags.dedup();
            let event = Event::new(format!("T{}", next(5)), tags, vec![]);
            let order = validate_event(0, &event, 1 << 20).unwrap();
            let mut payload = Vec::new();
            encode_payload(&event, &order, &mut payload);
            payloads.push(payload);
        }
        let views: Vec<EventView<'_>> =
            payloads.iter().enumerate().map(|(i, p)| EventView::decode(Position(i as u64 + 1), p).unwrap()).collect();
        let mut queries = vec![Query::All];
        for _ in 0..400 {
            let item = |next: &mut dyn FnMut(u64) -> u64| {
                let types: Vec<String> = (0..next(3)).map(|_| format!("T{}", next(7))).collect();
                let tags: Vec<String> = (0..next(3)).map(|_| format!("t{}", next(14))).collect();
                QueryItem::new(types, tags)
            };
            let items = (0..1 + next(2)).map(|_| item(&mut next)).filter(|item| !(item.types.is_empty() && item.tags.is_empty()));
            let query = Query::of(items.collect::<Vec<_>>());
            if matches!(&query, Query::Items(items) if !items.is_empty()) {
                queries.push(query);
            }
        }
        let mut index = StagedIndex::for_queries(&queries);
        for (staged, view) in views.iter().enumerate() {
            index.add(view);
            for query in &queries {
                let walked = views[..=staged].iter().position(|v| query.matches(v)).map(|i| Position(10 + i as u64));
                assert_eq!(index.first_match(query, 10), walked, "{query:?} over {} staged", staged + 1);
            }
        }
    }

    /// Only the tags the group's conditions name get a list: an event's other tags (an id per
    /// event, in a batched group) cost no key and no list. Emptied for the rest of a group after
    /// a roll-over, the index keeps those lists, answers nothing staged before, and indexes
    /// what comes after.
    #[test]
    fn keeps_only_the_tags_the_conditions_name() {
        let asked = Query::of([QueryItem::new(Vec::<String>::new(), ["hot"])]);
        let other = Query::of([QueryItem::new(["Type3"], Vec::<String>::new())]);
        let mut index = StagedIndex::for_queries([&asked, &other, &Query::All]);
        let add = |index: &mut StagedIndex, i: usize| {
            let event = Event::new(format!("Type{i}"), [format!("entity:{i}"), "hot".to_string()], vec![]);
            let order = validate_event(0, &event, 1 << 20).unwrap();
            let mut payload = Vec::new();
            encode_payload(&event, &order, &mut payload);
            index.add(&EventView::decode(Position(i as u64 + 1), &payload).unwrap());
        };
        for i in 0..100 {
            add(&mut index, i);
        }
        assert_eq!(index.by_tag.keys().map(|k| &**k).collect::<Vec<_>>(), ["hot"]);
        assert_eq!(index.by_tag["hot"].len(), 100);
        assert_eq!(index.first_match(&asked, 10), Some(Position(10)));
        assert_eq!(index.first_match(&other, 10), Some(Position(13)));
        let mut index = index.emptied();
        assert_eq!(index.first_match(&asked, 10), None);
        assert_eq!(index.first_match(&other, 10), None);
        assert_eq!(index.first_match(&Query::All, 10), None);
        add(&mut index, 3);
        assert_eq!(index.first_match(&asked, 50), Some(Position(50)));
        assert_eq!(index.first_match(&other, 50), Some(Position(50)));
        assert_eq!(index.by_tag.len(), 1);
    }

    /// A query naming a tag the index was not made for has no answer it could trust.
    #[test]
    #[should_panic(expected = "not made for a query naming tag \"entity:1\"")]
    fn refuses_a_query_it_was_not_made_for() {
        let index = StagedIndex::for_queries([&Query::of([QueryItem::new(Vec::<String>::new(), ["hot"])])]);
        index.first_match(&Query::of([QueryItem::new(Vec::<String>::new(), ["entity:1"])]), 1);
    }

    /// A types-only item is a lookup per type, not a walk over the group: checking a group
    /// twice as large costs the same (it cost twice as much when every check walked the group).
    #[test]
    fn types_only_checks_do_not_grow_with_the_group() {
        let query = Query::for_types(["Absent", "Type49"]);
        let time = |index: &StagedIndex| {
            let started = Instant::now();
            for _ in 0..2000 {
                assert!(index.first_match(&query, 1).is_some());
                assert!(index.first_match(&Query::for_types(["Absent"]), 1).is_none());
            }
            started.elapsed()
        };
        let (small, large) = (staged(20_000), staged(80_000));
        let mut ratios: Vec<f64> = (0..3).map(|_| time(&large).as_secs_f64() / time(&small).as_secs_f64()).collect();
        ratios.sort_by(f64::total_cmp);
        // A walk over the group would cost 4 times as much; a lookup, the same. The bound sits
        // between them, away from both, for loaded machines.
        assert!(ratios[1] < 2.8, "a group 4 times larger took {:.2} times as long", ratios[1]);
        assert_eq!(large.first_match(&Query::for_types(["Type7"]), 10), Some(Position(17)));
        assert_eq!(large.first_match(&Query::of([QueryItem::new(["Type7"], ["hot"])]), 10), Some(Position(17)));
    }
}
