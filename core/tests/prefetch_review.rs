//! Review of 566fb73 (a walk stops asking ahead once it asked to the end in its direction):
//! which read paths still ask (`FileBytes::prefetch`, up to two `mincore` calls and an
//! `madvise` each) once per event or per batch, and whether a cold read lost an ask it needs.
//! Counts asks with the hidden per-thread counter; nothing here is timed.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{buffered, files_with};
use lapilli_core::{Durability, Event, Options, Position, Query, ReadOptions, Store};

fn asks_during<T>(read: impl FnOnce() -> T) -> (u64, T) {
    let before = Store::prefetch_requests_on_this_thread();
    let out = read();
    (Store::prefetch_requests_on_this_thread() - before, out)
}

/// Event `i`: type A or B (a type-only query matches half), "hot" on all, "n:k" on a seventh.
fn event(i: u64) -> Event {
    Event::new(["A", "B"][(i % 2) as usize], ["hot".to_string(), format!("n:{}", i % 7)], vec![1; 16])
}

fn fill(store: &Store, total: u64) {
    for start in (0..total).step_by(5000) {
        store.append((start..(start + 5000).min(total)).map(event).collect(), None).unwrap();
    }
}

fn count(store: &Store, query: &Query, options: ReadOptions) -> usize {
    store.read(query, options).unwrap().visit(usize::MAX, |_| ()).unwrap()
}

fn queries() -> Vec<Query> {
    vec![Query::all(), Query::for_tags(["hot"]), Query::for_tags(["n:3"]), Query::for_types(["B"])]
}

/// 200K events in sealed 4 MiB segments (one part each, some 60K events).
fn sealed_store(dir: &Path) -> Store {
    let store = Store::open(dir, buffered(4 << 20)).unwrap();
    fill(&store, 200_000);
    store.wait_for_sealing();
    store
}

/// Windows that start and end mid-segment, limits, both directions, every kind of query: a
/// warm read asks a bounded number of times (one per 2 MiB of log and 32K entries, a few per
/// segment), not once per event.
#[test]
fn windows_and_limits_mid_segment_ask_a_bounded_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    let b = common::segment_bases(dir.path());
    assert!(b.len() >= 3, "several segments: {b:?}");
    let windows = [
        (b[0] + 30_000, Some(b[2] + 10_000)),
        (b[1] - 100, Some(b[1] + 100)),
        (b[1] + 5, Some(b[2] - 5)),
        (0, Some(b[1] - 2)),
        (b[1], None),
    ];
    for query in queries() {
        for backwards in [false, true] {
            for (after, until) in windows {
                for limit in [None, Some(40_000)] {
                    let options = ReadOptions { after: Position(after), until: until.map(Position), limit, backwards };
                    count(&store, &query, options);
                    let (asks, events) = asks_during(|| count(&store, &query, options));
                    assert!(
                        asks < 60,
                        "{query:?} {options:?}: {asks} asks for {events} events"
                    );
                }
            }
        }
    }
    store.close().unwrap();
}

/// A consumer catching up in batches of 64 over sealed segments: each batch is a new walk.
fn subscription_asks(query: Query, max: usize) -> (u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    let b = common::segment_bases(dir.path());
    // The first sealed segment's events: about 60K.
    let until = b[1] - 1;
    let wanted = count(&store, &query, ReadOptions { until: Some(Position(until)), ..Default::default() });
    catch_up(store, &query, max, wanted)
}

/// The prefetch asks of a subscription to `query` from 0 taking batches of `max` until it has
/// seen `wanted` events, and how many it saw; closes `store`.
fn catch_up(store: Store, query: &Query, max: usize, wanted: usize) -> (u64, usize) {
    let subscription = store.subscribe(query, Position(0)).unwrap();
    let (asks, seen) = asks_during(|| {
        let mut seen = 0;
        while seen < wanted {
            seen += subscription.next_batch(max, Some(Duration::ZERO)).unwrap().unwrap().len();
        }
        seen
    });
    drop(subscription);
    store.close().unwrap();
    (asks, seen)
}

/// As `subscription_asks`, on a store opened afresh (no index block read yet, as after a
/// restart): the first batch finds its segment cold, the later ones resume where it left off.
fn subscription_asks_after_reopen(query: Query, max: usize) -> (u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    sealed_store(dir.path()).close().unwrap();
    let store = Store::open(dir.path(), buffered(4 << 20)).unwrap();
    let b = common::segment_bases(dir.path());
    // The first segment's matches, counted from `event`, not through `store` (its blocks stay
    // unread); by one at a time, the first 5000.
    let is_b = query == Query::for_types(["B"]);
    let wanted = (1..b[1]).filter(|&p| !is_b || p % 2 == 0).count().min(if max == 1 { 5000 } else { usize::MAX });
    catch_up(store, &query, max, wanted)
}

#[test]
fn after_a_reopen_a_subscription_catching_up_by_64_asks_a_bounded_number_of_times() {
    for query in [Query::all(), Query::for_types(["B"])] {
        let (asks, seen) = subscription_asks_after_reopen(query.clone(), 64);
        assert!(asks < 60, "{query:?} by 64 after a reopen: {asks} asks for {seen} events");
        let (asks, seen) = subscription_asks_after_reopen(query.clone(), 1);
        assert!(asks < 60, "{query:?} by 1 after a reopen: {asks} asks for {seen} events");
    }
}

#[test]
fn a_subscription_catching_up_by_64_over_all_asks_a_bounded_number_of_times() {
    let (asks, seen) = subscription_asks(Query::all(), 64);
    assert!(asks < 60, "Query::all by 64: {asks} asks for {seen} events");
}

#[test]
fn a_subscription_catching_up_by_64_over_a_type_asks_a_bounded_number_of_times() {
    let (asks, seen) = subscription_asks(Query::for_types(["B"]), 64);
    assert!(asks < 60, "a type by 64: {asks} asks for {seen} events");
}

#[test]
fn a_subscription_catching_up_by_64_over_a_hot_tag_asks_a_bounded_number_of_times() {
    let (asks, seen) = subscription_asks(Query::for_tags(["hot"]), 64);
    assert!(asks < 60, "a hot tag by 64: {asks} asks for {seen} events");
}

/// The case `PREFETCH_AFTER` was made for ("a subscription resumed for one event at a time
/// would otherwise pay two `mincore` calls an event"), over a sealed segment.
#[test]
fn a_subscription_resumed_one_event_at_a_time_does_not_ask_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    let subscription = store.subscribe(&Query::all(), Position(0)).unwrap();
    let (asks, seen) = asks_during(|| (0..5000).map(|_| subscription.next_batch(1, Some(Duration::ZERO)).unwrap().unwrap().len()).sum::<usize>());
    assert_eq!(seen, 5000);
    assert!(asks < 60, "Query::all one at a time: {asks} asks for {seen} events");
    store.close().unwrap();
}

/// Paging through a sealed segment with `after` and `limit: 64`.
#[test]
fn paging_by_64_asks_a_bounded_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    let b = common::segment_bases(dir.path());
    let (asks, seen) = asks_during(|| {
        let mut after = 0;
        let mut seen = 0;
        while after < b[1] - 1 {
            let page = store
                .read(&Query::all(), ReadOptions { after: Position(after), limit: Some(64), ..Default::default() })
                .unwrap()
                .collect_all()
                .unwrap();
            seen += page.len();
            after = page.last().unwrap().position.get();
        }
        seen
    });
    assert!(asks < 60, "Query::all pages of 64: {asks} asks for {seen} events");
    store.close().unwrap();
}

/// The active segment indexed in parts of 256 KiB (some 4K events each, merged in tiers: a
/// few part files of different sizes; the newest part is a tail index): a bounded number of
/// asks per part, not per event.
#[test]
fn a_segment_in_several_parts_asks_a_bounded_number_of_times_per_part() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 64 << 20, part_bytes: 256 << 10, ..Options::default() };
    let store = Store::open(dir.path(), options).unwrap();
    fill(&store, 200_000);
    store.wait_for_sealing();
    let parts = files_with(dir.path(), "part").len() as u64;
    assert!(parts >= 2, "several parts: {parts}");
    assert_eq!(common::segment_bases(dir.path()).len(), 1, "one (active) segment");
    for query in queries() {
        for backwards in [false, true] {
            let options = ReadOptions { backwards, ..Default::default() };
            count(&store, &query, options);
            let (asks, events) = asks_during(|| count(&store, &query, options));
            assert!(events > 20_000);
            assert!(asks <= 4 * parts + 20, "{query:?} backwards {backwards}: {asks} asks over {parts} parts for {events} events");
        }
    }
    store.close().unwrap();
}

/// An active segment with a tail index only (a copy of a live store, opened: its log, some
/// 12 MB, mapped and scanned, nothing indexed on disk): `prefetch_entries` answers `None` at
/// once, yet the log is still asked for ahead of the walk, both ways, about once per 2 MiB.
#[test]
fn an_active_segment_with_a_tail_index_still_has_its_log_asked_for() {
    let live = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 64 << 20, part_bytes: 64 << 20, ..Options::default() };
    let store = Store::open(live.path(), options.clone()).unwrap();
    fill(&store, 200_000);
    let dir = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(live.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    store.close().unwrap();
    assert!(files_with(dir.path(), "part").is_empty() && files_with(dir.path(), "idx").is_empty());
    let store = Store::open(dir.path(), options).unwrap();
    for backwards in [false, true] {
        let (asks, events) = asks_during(|| count(&store, &Query::all(), ReadOptions { backwards, ..Default::default() }));
        assert_eq!(events, 200_000);
        assert!((3..=12).contains(&asks), "backwards {backwards}: {asks} log asks over the log");
    }
    store.close().unwrap();
}

/// The boundaries of a sealed segment: a scan of its last 100 events forward (the walk asks
/// its window's entries, to the index's end, then the log once past 64 events), and of its
/// first 100 backwards (near the log's start: the log is asked for once, from byte 0, and not
/// again). Two asks for the entries, one for the log: exactly three each.
#[test]
fn a_scan_at_a_segments_ends_asks_for_the_log_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    let b = common::segment_bases(dir.path());
    let cases = [
        ("forward, last 100", ReadOptions { after: Position(b[1] - 101), until: Some(Position(b[1] - 1)), ..Default::default() }),
        ("backwards, first 100", ReadOptions { after: Position(0), until: Some(Position(100)), backwards: true, ..Default::default() }),
        ("backwards, second segment's first 100", ReadOptions { after: Position(b[1] - 1), until: Some(Position(b[1] + 99)), backwards: true, ..Default::default() }),
    ];
    for (name, options) in cases {
        let (asks, events) = asks_during(|| count(&store, &Query::all(), options));
        assert_eq!(events, 100);
        assert_eq!(asks, 3, "{name}: {asks} asks");
    }
    // A window one short of the index's end (`to < last`) asks once more for the entries (past
    // the window: to the index's end), then stops: five at most.
    let options = ReadOptions { after: Position(b[1] - 102), until: Some(Position(b[1] - 2)), ..Default::default() };
    let (asks, events) = asks_during(|| count(&store, &Query::all(), options));
    assert_eq!(events, 100);
    assert!(asks <= 5, "forward, to = last - 1: {asks} asks");
    store.close().unwrap();
}

/// A sealed segment whose index was found damaged after first use and rebuilt in memory: its
/// walks ask (a no-op on a copy, counted the same) a bounded number of times.
#[test]
fn a_sealed_segment_with_an_index_rebuilt_in_memory_asks_a_bounded_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    store.close().unwrap();
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 2, "a version-2 file");
    let types_at = u64::from_le_bytes(bytes[48..56].try_into().unwrap()) as usize;
    // The last offsets block: met by a read of the segment, after open.
    bytes[types_at - 8] ^= 0x01;
    fs::write(&index, &bytes).unwrap();
    let store = Store::open(dir.path(), buffered(4 << 20)).unwrap();
    let b = common::segment_bases(dir.path());
    let first = ReadOptions { until: Some(Position(b[1] - 1)), ..Default::default() };
    assert_eq!(count(&store, &Query::all(), first) as u64, b[1] - 1);
    for query in queries() {
        for backwards in [false, true] {
            let options = ReadOptions { backwards, ..first };
            let (asks, events) = asks_during(|| count(&store, &query, options));
            assert!(events > 5000);
            assert!(asks < 20, "rebuilt, {query:?} backwards {backwards}: {asks} asks for {events} events");
        }
    }
    store.close().unwrap();
}

/// What a walk resumed mid-segment no longer asks for, a cold scan still does: on a store
/// opened afresh, a scan of a segment asks for its window's entries (offsets and type column,
/// two asks) before its first event, the first page of a paged read likewise; the second page,
/// resuming where the first left off, asks nothing before its first event.
#[test]
fn a_cold_scan_still_asks_for_its_window_before_its_first_event() {
    let dir = tempfile::tempdir().unwrap();
    sealed_store(dir.path()).close().unwrap();
    let store = Store::open(dir.path(), buffered(4 << 20)).unwrap();
    let b = common::segment_bases(dir.path());
    // First use of every index (header, table, dictionaries: asks of their own), no entry read:
    // absent from every segment, neither query is a scan.
    for absent in [Query::for_tags(["absent"]), Query::for_types(["Absent"])] {
        assert_eq!(count(&store, &absent, ReadOptions::default()), 0);
    }
    // Forward from a segment's start, backwards from its end: entries no other case reads.
    let cases = [
        (Query::all(), ReadOptions { after: Position(0), ..Default::default() }),
        (Query::all(), ReadOptions { until: Some(Position(b[1] - 1)), backwards: true, ..Default::default() }),
        (Query::for_types(["B"]), ReadOptions { after: Position(b[1] - 1), ..Default::default() }),
        (Query::for_types(["B"]), ReadOptions { until: Some(Position(b[2] - 1)), backwards: true, ..Default::default() }),
    ];
    for (query, options) in cases {
        let options = ReadOptions { limit: Some(64), ..options };
        let mut read = store.read(&query, options).unwrap();
        let (asks, first) = asks_during(|| read.next_batch(1).unwrap());
        assert_eq!(first.len(), 1);
        assert_eq!(asks, 2, "{query:?} {options:?}: {asks} asks before the first event of a cold scan");
        let last = read.collect_all().unwrap().last().unwrap().position;
        let next = match options.backwards {
            false => ReadOptions { after: last, ..options },
            true => ReadOptions { until: Some(Position(last.get() - 1)), ..options },
        };
        let mut read = store.read(&query, next).unwrap();
        let (asks, _) = asks_during(|| read.next_batch(1).unwrap());
        assert_eq!(asks, 0, "{query:?} {next:?}: the next page asked {asks} times before its first event");
    }
    store.close().unwrap();
}

/// A consumer catching up in batches (each pass a new walk) asks for the log ahead of itself
/// as one walk through the same events does: each pass goes on from where the last stopped
/// (`Walk::resuming`). Before, a pass of 64 never got past `PREFETCH_AFTER` and a pass of one
/// never asked, so on a cold store each page of a sealed log was a fault of its own (a cold
/// catch-up of 10M events by 64 ran at 0.2M events/s); a pass of 1,024 asked again for the
/// 4 MiB the pass before had asked for. Counted, not timed: the bytes the walks asked for,
/// resident or not.
#[test]
fn a_subscription_catching_up_in_batches_asks_ahead_as_one_walk_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(8 << 20)).unwrap();
    fill(&store, 300_000);
    store.wait_for_sealing();
    let b = common::segment_bases(dir.path());
    assert!(b.len() >= 2, "a sealed segment: {b:?}");
    // Bytes asked, and times a pass found the asks of the one before evicted and asked again
    // (possible on a busy machine: then the asks of a new 4 MiB are expected).
    let asked_during = |consume: &dyn Fn()| {
        let (bytes, renewals) = (Store::read_ahead_bytes_on_this_thread(), Store::read_ahead_renewals_on_this_thread());
        consume();
        (Store::read_ahead_bytes_on_this_thread() - bytes, Store::read_ahead_renewals_on_this_thread() - renewals)
    };
    for (max, wanted) in [(64, 200_000), (1_024, 200_000), (1, 50_000)] {
        let (one_walk, _) = asked_during(&|| {
            let options = ReadOptions { limit: Some(wanted as u64), ..Default::default() };
            assert_eq!(count(&store, &Query::all(), options), wanted);
        });
        let (batches, renewals) = asked_during(&|| {
            let subscription = store.subscribe(&Query::all(), Position(0)).unwrap();
            let mut seen = 0;
            while seen < wanted {
                seen += subscription.next_batch(max.min(wanted - seen), Some(Duration::ZERO)).unwrap().unwrap().len();
            }
        });
        assert!(one_walk >= 4 << 20, "one walk through {wanted} events asked for {one_walk} bytes");
        assert!(
            batches * 10 >= one_walk * 9 && batches * 10 <= one_walk * 11 + renewals * (40 << 20),
            "by {max}: {batches} bytes asked ahead for {wanted} events ({renewals} renewals), against {one_walk} by one walk"
        );
    }
    store.close().unwrap();
}

/// A consumer whose read-ahead was evicted between two batches asks for it again at the next
/// batch (judged by a page past its last event), rather than faulting through what it had asked
/// for before it reaches the far end of it; by 1,024 and by 64.
#[test]
fn a_subscription_whose_read_ahead_was_evicted_between_batches_asks_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_store(dir.path());
    for max in [1_024, 64] {
        let subscription = store.subscribe(&Query::all(), Position(0)).unwrap();
        let pass = || {
            let before = Store::read_ahead_bytes_on_this_thread();
            assert_eq!(subscription.next_batch(max, Some(Duration::ZERO)).unwrap().unwrap().len(), max);
            Store::read_ahead_bytes_on_this_thread() - before
        };
        // Past the first ask, to a pass that asks nothing (its read-ahead still well ahead).
        let mut passes = 0;
        while pass() > 0 || passes < 2 {
            passes += 1;
            assert!(passes < 100, "by {max}: every pass asked");
        }
        if !common::evict_store_pages(dir.path()) {
            return;
        }
        let asked = pass();
        assert!(asked >= 4 << 20, "by {max}: after eviction the next batch asked for {asked} bytes ahead");
    }
    store.close().unwrap();
}
