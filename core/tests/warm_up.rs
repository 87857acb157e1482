//! Cold tag reads across many sealed segments look the segments up side by side
//! (`read::warm`): when a read does that, how many segments it hands over, and that its answers
//! are the walk's own, whatever the window, direction, limit or damage.
//!
//! Counted (`Store::warmed_segments_on_this_thread`), never timed.

mod common;

use std::fs;
use std::path::Path;

use common::{buffered as options, expected_positions, files_with, positions_of, u64_at, Rng};
use lapilli_core::{AppendCondition, Event, Position, Query, QueryItem, ReadOptions, SequencedEvent, Store};

const SEGMENT: u64 = 1 << 16;

/// About 14 sealed segments (and the active one): every event tagged with its entity (of 40),
/// "rare" on every 700th, "odd" on every other; two types.
fn many_segments(dir: &Path) -> Vec<SequencedEvent> {
    let store = Store::open(dir, options(SEGMENT)).unwrap();
    let mut batch = Vec::new();
    for i in 0..24_000u32 {
        let mut tags = vec![format!("entity:{}", i % 40)];
        if i % 700 == 0 {
            tags.push("rare".into());
        }
        if i % 2 == 1 {
            tags.push("odd".into());
        }
        let kind = if i % 3 == 0 { "Opened" } else { "Moved" };
        batch.push(Event::new(kind, tags, i.to_le_bytes().to_vec()));
        if batch.len() == 1000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
    store.wait_for_sealing();
    let all = common::read_all(&store, &Query::all());
    store.close().unwrap();
    let sealed = files_with(dir, "idx").len();
    assert!(sealed >= 10, "the store has many sealed segments: {sealed}");
    all
}

/// A read on a store just opened (every index cold): its positions, and the segments it warmed.
fn cold_read(dir: &Path, query: &Query, options_: ReadOptions) -> (Vec<u64>, u64) {
    let store = Store::open(dir, options(SEGMENT)).unwrap();
    let before = Store::warmed_segments_on_this_thread();
    let read = store.read(query, options_).unwrap().collect_all().unwrap();
    let warmed = Store::warmed_segments_on_this_thread() - before;
    store.close().unwrap();
    (positions_of(&read), warmed)
}

fn rare() -> Query {
    Query::for_tags(["rare"])
}

#[test]
fn a_cold_read_of_a_rare_tag_warms_every_cold_segment_of_its_window_once() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let sealed = files_with(dir.path(), "idx").len() as u64;
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    let before = Store::warmed_segments_on_this_thread();
    let first = store.read(&rare(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&first), expected_positions(&all, u64::MAX, &rare(), ReadOptions::default()));
    assert_eq!(Store::warmed_segments_on_this_thread() - before, sealed, "every sealed segment, once");
    // Looked up once, the segments are warm: the same read, or another tag's, warms none.
    let before = Store::warmed_segments_on_this_thread();
    let again = store.read(&rare(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&again), positions_of(&first));
    let other = Query::for_tags(["entity:7"]);
    let read = store.read(&other, ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&read), expected_positions(&all, u64::MAX, &other, ReadOptions::default()));
    assert_eq!(Store::warmed_segments_on_this_thread() - before, 0);
    store.close().unwrap();
}

#[test]
fn reads_that_want_one_event_or_look_no_tag_up_warm_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let newest = ReadOptions { backwards: true, limit: Some(1), ..Default::default() };
    let types = Query::for_types(["Opened"]);
    for (query, options_) in [
        (rare(), newest),
        (rare(), ReadOptions { limit: Some(1), ..Default::default() }),
        (Query::all(), ReadOptions::default()),
        (types.clone(), ReadOptions::default()),
    ] {
        let (got, warmed) = cold_read(dir.path(), &query, options_);
        assert_eq!(got, expected_positions(&all, u64::MAX, &query, options_), "{query:?} {options_:?}");
        assert_eq!(warmed, 0, "{query:?} {options_:?}");
    }
    // A condition's check wants its first match only.
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    let before = Store::warmed_segments_on_this_thread();
    let condition = AppendCondition::new(Query::for_tags(["absent"])).after(Position(1));
    store.append(vec![Event::new("Opened", ["absent"], vec![])], Some(condition)).unwrap();
    assert_eq!(Store::warmed_segments_on_this_thread() - before, 0);
    store.close().unwrap();
}

/// A limited read may end in its first segments: its first warm-up covers 4 of them, each later
/// one twice as many (up to 32), so it warms at most about as many again as it walked.
#[test]
fn a_limited_read_warms_a_few_segments_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let sealed = files_with(dir.path(), "idx").len() as u64;
    // "rare" is on every 700th event, 2 or 3 a segment: 2 events lie in the first segment.
    let two = ReadOptions { limit: Some(2), ..Default::default() };
    let (got, warmed) = cold_read(dir.path(), &rare(), two);
    assert_eq!(got, expected_positions(&all, u64::MAX, &rare(), two));
    assert_eq!(warmed, 4);
    // Half the rare events: the walk goes on past the first 4 segments and warms 8 more.
    let half = expected_positions(&all, u64::MAX, &rare(), ReadOptions::default()).len() / 2;
    let some = ReadOptions { limit: Some(half as u64), ..Default::default() };
    let (got, warmed) = cold_read(dir.path(), &rare(), some);
    assert_eq!(got, expected_positions(&all, u64::MAX, &rare(), some));
    assert_eq!(warmed, 12.min(sealed));
}

/// Every window, both directions, limits and several queries: the positions a walk warmed by
/// other threads returns are those of the events the query matches, on a store reopened (all
/// cold) before each read.
#[test]
fn warmed_reads_answer_exactly_for_any_window() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let head = all.len() as u64;
    let queries = [
        rare(),
        Query::for_tags(["entity:3"]),
        Query::for_tags(["entity:3", "odd"]),
        Query::of([QueryItem::new(["Opened"], ["rare"]), QueryItem::new(Vec::<String>::new(), ["entity:11"])]),
        Query::for_tags(["absent"]),
    ];
    let mut rng = Rng::new(0x5eed_0f_2026);
    let mut warmed_any = 0;
    for round in 0..24 {
        let query = rng.pick(&queries).clone();
        let after = if rng.chance(30) { 0 } else { rng.below(head) };
        let until = if rng.chance(50) { None } else { Some(Position(rng.range(after, head + 1))) };
        let limit = if rng.chance(50) { None } else { Some(rng.range(1, 200)) };
        let options_ = ReadOptions { after: Position(after), until, limit, backwards: rng.chance(50) };
        let (got, warmed) = cold_read(dir.path(), &query, options_);
        assert_eq!(got, expected_positions(&all, u64::MAX, &query, options_), "round {round}: {query:?} {options_:?}");
        warmed_any += warmed;
    }
    assert!(warmed_any > 0, "some of the reads warmed segments");
}

/// Damage met by a warm-up thread is answered as the walk answers it: the index is rebuilt from
/// the log and the read is exact.
#[test]
fn damage_in_a_dictionary_met_while_warming_is_answered_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let mut indexes = files_with(dir.path(), "idx");
    indexes.sort();
    for index in [&indexes[1], &indexes[5]] {
        let mut bytes = fs::read(index).unwrap();
        // The dictionary's last bytes before its 20-byte footer: the root node's block.
        let postings_at = u64_at(&bytes, 72);
        bytes[postings_at - 24] ^= 0x5a;
        fs::write(index, bytes).unwrap();
    }
    let (got, warmed) = cold_read(dir.path(), &rare(), ReadOptions::default());
    assert_eq!(got, expected_positions(&all, u64::MAX, &rare(), ReadOptions::default()));
    assert!(warmed >= 2);
    let backwards = ReadOptions { backwards: true, ..Default::default() };
    let (got, _) = cold_read(dir.path(), &Query::for_tags(["entity:5"]), backwards);
    assert_eq!(got, expected_positions(&all, u64::MAX, &Query::for_tags(["entity:5"]), backwards));
}

/// An index read once and evicted since (a service's store after a quiet night) is cold again:
/// judged by whether its dictionary root is in memory, not by whether it was ever read. Index
/// files larger than 64 KiB (smaller ones are copied into memory, warm for good).
#[test]
fn segments_read_before_and_evicted_since_are_warmed_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    common::append_entities_with_rare(&store);
    store.wait_for_sealing();
    let all = common::read_all(&store, &Query::all());
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(indexes.len() >= 3, "{} sealed segments", indexes.len());
    assert!(indexes.iter().all(|p| fs::metadata(p).unwrap().len() > 64 << 10), "index files are mapped, not copied");
    let sealed = indexes.len() as u64;
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let entity = Query::for_tags(["entity:1"]);
    let read = store.read(&entity, ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&read), expected_positions(&all, u64::MAX, &entity, ReadOptions::default()));
    let before = Store::warmed_segments_on_this_thread();
    let read = store.read(&rare(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&read), expected_positions(&all, u64::MAX, &rare(), ReadOptions::default()));
    assert_eq!(Store::warmed_segments_on_this_thread() - before, 0, "warm: nothing to warm");
    if !common::evict_store_pages(dir.path()) {
        return;
    }
    let before = Store::warmed_segments_on_this_thread();
    let read = store.read(&rare(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(positions_of(&read), expected_positions(&all, u64::MAX, &rare(), ReadOptions::default()));
    assert_eq!(Store::warmed_segments_on_this_thread() - before, sealed, "evicted: every sealed segment again");
    store.close().unwrap();
}

/// After a read through a frequent tag has read every offsets block of a segment and the pages
/// were evicted, a rare tag's few events there still have their offsets and records asked for
/// together: judged by what is in memory, not by which blocks were ever checked (the scale
/// benchmark's rare read, after its hot read, went two synchronous faults an event).
#[test]
fn a_rare_read_after_eviction_asks_for_its_records_together() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    // Appended until the second segment starts: one sealed segment, the rest in the active one.
    let mut i = 0u32;
    while files_with(dir.path(), "log").len() < 2 {
        let batch: Vec<Event> = (i..i + 1000)
            .map(|i| {
                let mut tags = vec![format!("e{}", i % 4)];
                if i % 512 == 100 {
                    tags.push("rare".into());
                }
                Event::new("E", tags, vec![7; 24])
            })
            .collect();
        store.append(batch, None).unwrap();
        i += 1000;
    }
    store.wait_for_sealing();
    store.close().unwrap();
    assert_eq!(files_with(dir.path(), "idx").len(), 1, "one sealed segment: no warm-up, the walk asks itself");
    let mut logs = files_with(dir.path(), "log");
    logs.sort();
    let active_base: u64 = logs[1].file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    // A quarter of the events: every offsets block of the sealed segment is read and checked.
    assert_eq!(common::read_all(&store, &Query::for_tags(["e0"])).len() as u32, i / 4);
    if !common::evict_store_pages(dir.path()) {
        return;
    }
    let asked = Store::prefetch_requests_on_this_thread();
    let rare_events = common::read_all(&store, &rare());
    let asked = Store::prefetch_requests_on_this_thread() - asked;
    let in_sealed = rare_events.iter().filter(|e| e.position.get() < active_base).count();
    assert_eq!(rare_events.len() as u32, (i - 100).div_ceil(512));
    assert!(in_sealed >= 16, "{in_sealed} rare events in the sealed segment");
    // Each rare event's offsets entry lies in a page of its own (512 entries of 8 bytes apart):
    // one ask for each offsets page and one for each record.
    assert!(
        asked as usize >= 2 * in_sealed,
        "{asked} prefetch requests for {in_sealed} rare events in the evicted sealed segment"
    );
    store.close().unwrap();
}
