//! Review of the side-by-side warm-ups of cold segments (`read::warm`): what repeats a warm-up
//! on a store already warm, what a subscription's batch warms, and exact answers while a writer
//! appends and seals under a follower that opens cold.
//!
//! Counted (`Store::warmed_segments_on_this_thread`), never timed.

mod common;

use std::path::Path;

use common::{buffered as options, expected_positions, files_with, positions_of, Rng};
use lapilli_core::{Event, Position, Query, QueryItem, ReadOptions, SequencedEvent, Store};

const SEGMENT: u64 = 1 << 16;

/// About 14 sealed segments and the active one, appended by `store` (which seals them, and so
/// builds their tag filters): every event tagged with its entity (of 40), "rare" on every 700th;
/// two types.
fn fill(store: &Store, from: u32, to: u32) {
    let mut batch = Vec::new();
    for i in from..to {
        let mut tags = vec![format!("entity:{}", i % 40)];
        if i % 700 == 0 {
            tags.push("rare".into());
        }
        let kind = if i % 3 == 0 { "Opened" } else { "Moved" };
        batch.push(Event::new(kind, tags, i.to_le_bytes().to_vec()));
        if batch.len() == 1000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
    if !batch.is_empty() {
        store.append(batch, None).unwrap();
    }
}

fn many_segments(dir: &Path) -> Vec<SequencedEvent> {
    let store = Store::open(dir, options(SEGMENT)).unwrap();
    fill(&store, 0, 24_000);
    store.wait_for_sealing();
    let all = common::read_all(&store, &Query::all());
    store.close().unwrap();
    assert!(files_with(dir, "idx").len() >= 10, "many sealed segments");
    all
}

/// Segments `read` warmed on this thread, and its positions.
fn warmed_by(store: &Store, query: &Query, options_: ReadOptions) -> (Vec<u64>, u64) {
    let before = Store::warmed_segments_on_this_thread();
    let read = store.read(query, options_).unwrap().collect_all().unwrap();
    (positions_of(&read), Store::warmed_segments_on_this_thread() - before)
}

/// A query whose walk never reads a segment's tag dictionary (no event has the item's type, so
/// the planner answers "never" before any lookup) opens nothing cold after its first read: the
/// segments' indexes are loaded and checked, and nothing else is read. Judged cold by "the
/// dictionary root was never read", every such read would start threads again, for good.
#[test]
fn a_read_that_never_looks_up_the_dictionary_does_not_warm_again_and_again() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let head = all.len() as u64;
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    let query = Query::of([QueryItem::new(["NoSuchType"], ["rare"])]);
    let (got, first) = warmed_by(&store, &query, ReadOptions::default());
    assert_eq!(got, expected_positions(&all, head, &query, ReadOptions::default()));
    assert!(first > 0, "a first cold read warms its segments");
    for round in 0..3 {
        let (got, warmed) = warmed_by(&store, &query, ReadOptions::default());
        assert!(got.is_empty());
        assert_eq!(warmed, 0, "round {round}: the indexes are loaded; nothing is cold");
    }
    store.close().unwrap();
}

/// Segments this handle sealed have their tag filters built at sealing: a tag none of their
/// events carries (an entity that is new, the common case of a decision) is answered by the
/// filter, without reading the dictionary. Reads of it, over and over, must not start threads.
#[test]
fn reads_of_a_tag_the_filters_rule_out_warm_nothing_after_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    fill(&store, 0, 24_000);
    store.wait_for_sealing();
    assert!(files_with(dir.path(), "idx").len() >= 10);
    let new_entity = Query::for_tags(["entity:new"]);
    store.append(vec![Event::new("Opened", ["entity:new"], vec![])], None).unwrap();
    let mut warmed = Vec::new();
    for _ in 0..4 {
        let (got, n) = warmed_by(&store, &new_entity, ReadOptions::default());
        assert_eq!(got.len(), 1);
        warmed.push(n);
    }
    assert!(warmed[1..].iter().all(|&n| n == 0), "segments warmed by each read: {warmed:?}");
    store.close().unwrap();
}

/// A subscription's batch is a walk that wants at most `max` events: a batch of one wants one
/// event, as a `limit: 1` read does, and warms nothing; a batch of two warms as a `limit: 2` read
/// (4 segments at first), not every cold segment of the store.
#[test]
fn a_subscription_batch_warms_no_more_than_a_read_of_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let rare: Vec<u64> = expected_positions(&all, all.len() as u64, &Query::for_tags(["rare"]), ReadOptions::default());
    for (max, most) in [(1usize, 0u64), (2, 4)] {
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        let subscription = store.subscribe(&Query::for_tags(["rare"]), Position(0)).unwrap();
        let before = Store::warmed_segments_on_this_thread();
        let batch = subscription.next_batch(max, Some(std::time::Duration::ZERO)).unwrap().unwrap();
        let warmed = Store::warmed_segments_on_this_thread() - before;
        assert_eq!(positions_of(&batch), rare[..max]);
        assert!(warmed <= most, "a batch of {max} warmed {warmed} segments");
        drop(subscription);
        store.close().unwrap();
    }
}

/// A follower opened cold while a writer appends and seals: every read (any window, direction,
/// limit, several query shapes) answers what the model answers up to the read's head.
#[test]
fn cold_followers_answer_exactly_while_a_writer_appends_and_seals() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), options(SEGMENT)).unwrap();
    fill(&writer, 0, 12_000);
    writer.wait_for_sealing();
    let queries = [
        Query::for_tags(["rare"]),
        Query::for_tags(["entity:3"]),
        Query::of([QueryItem::new(["Opened"], ["rare"]), QueryItem::new(Vec::<String>::new(), ["entity:11"])]),
        Query::of([QueryItem::new(["Moved"], ["entity:7", "rare"]), QueryItem::new(["Opened"], ["entity:8"])]),
        Query::for_tags(["late"]),
    ];
    let mut rng = Rng::new(seed());
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = &writer;
        let done = &done;
        scope.spawn(move || {
            let mut i = 12_000;
            while i < 30_000 {
                fill(writer, i, i + 500);
                if i % 3000 == 0 {
                    writer.append(vec![Event::new("Moved", ["late", "rare"], vec![])], None).unwrap();
                }
                i += 500;
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut rounds = 0;
        while rounds < 12 || !done.load(std::sync::atomic::Ordering::Acquire) {
            rounds += 1;
            let follower = Store::open_read_only(dir.path()).unwrap();
            let query = rng.pick(&queries).clone();
            let read = follower.read(&query, ReadOptions::default()).unwrap();
            let head = read.head().get();
            drop(read);
            let after = if rng.chance(30) { 0 } else { rng.below(head) };
            let until = if rng.chance(50) { None } else { Some(Position(rng.range(after, head))) };
            let limit = if rng.chance(50) { None } else { Some(rng.range(2, 300)) };
            let options_ = ReadOptions { after: Position(after), until, limit, backwards: rng.chance(50) };
            let result = follower.read(&query, options_).unwrap();
            let head = result.head().get();
            let got = positions_of(&result.collect_all().unwrap());
            // The model: every event up to this read's head, read whole from the follower.
            let all = common::read_all(&follower, &Query::all());
            assert!(all.len() as u64 >= head);
            assert_eq!(got, expected_positions(&all, head, &query, options_), "round {rounds}: {query:?} {options_:?}");
            follower.close().unwrap();
            if rounds > 200 {
                break;
            }
        }
    });
    writer.close().unwrap();
}

const fn seed() -> u64 {
    0x2026_1202
}

/// Index files larger than 64 KiB (mapped, not copied), in segments this handle sealed (their
/// tag filters built at sealing), with their pages evicted (a service after a quiet night). A
/// read of a new entity is answered by each segment's filter, never reading its dictionary: its
/// root's page stays out of memory, and judged by that page every such read warmed every
/// segment again, on 16 threads, for good. After the first read, none may warm anything.
#[test]
fn after_eviction_reads_the_filters_answer_warm_up_once_not_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    common::append_entities_with_rare(&store);
    store.wait_for_sealing();
    store.append(vec![Event::new("E", ["entity:new"], vec![])], None).unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(indexes.len() >= 3, "{} sealed segments", indexes.len());
    assert!(indexes.iter().all(|p| std::fs::metadata(p).unwrap().len() > 64 << 10), "index files are mapped");
    let new_entity = Query::for_tags(["entity:new"]);
    let absent_type = Query::of([QueryItem::new(["NoSuchType"], ["entity:1"])]);
    // Loaded and used once before the eviction.
    for query in [&new_entity, &absent_type] {
        let _ = warmed_by(&store, query, ReadOptions::default());
    }
    for query in [&new_entity, &absent_type] {
        assert!(common::evict_store_pages(dir.path()), "this test needs a file system that evicts (not tmpfs)");
        let mut warmed = Vec::new();
        for _ in 0..3 {
            let (got, n) = warmed_by(&store, query, ReadOptions::default());
            assert_eq!(got.len(), usize::from(query == &new_entity));
            warmed.push(n);
        }
        assert!(warmed[1..].iter().all(|&n| n == 0), "{query:?}: segments warmed by each read: {warmed:?}");
    }
    store.close().unwrap();
}

/// One sealed segment whose index file is mapped (over 64 KiB), and the active one: tags
/// `e0`..`e3` on every event, "rare" on every 512th (a short list). Returns how many rare events
/// lie in the sealed segment.
fn one_mapped_segment(dir: &Path) -> usize {
    let store = Store::open(dir, options(1 << 20)).unwrap();
    let mut i = 0u32;
    while files_with(dir, "log").len() < 2 {
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
    let indexes = files_with(dir, "idx");
    assert_eq!(indexes.len(), 1);
    assert!(std::fs::metadata(&indexes[0]).unwrap().len() > 64 << 10, "the index file is mapped");
    let mut logs = files_with(dir, "log");
    logs.sort();
    let active_base: u64 = logs[1].file_stem().unwrap().to_str().unwrap().parse().unwrap();
    (0..i).filter(|i| i % 512 == 100 && u64::from(*i) + 1 < active_base).count()
}

/// A subscription taking one event at a time walks anew for each: on a warm store, what it pays
/// in `mincore` must not grow with the events it delivers (the offsets prefetch of a short list,
/// judged by whether the list's page is in memory, asked once per lookup, that is per event).
#[test]
fn a_warm_subscription_taking_one_event_at_a_time_pays_no_mincore_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let in_sealed = one_mapped_segment(dir.path());
    assert!(in_sealed >= 16, "{in_sealed} rare events in the sealed segment");
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let rare = Query::for_tags(["rare"]);
    // Warm: read once whole.
    let all = common::read_all(&store, &rare);
    let subscription = store.subscribe(&rare, Position(0)).unwrap();
    let before = Store::residency_checks_on_this_thread();
    for event in &all[..in_sealed] {
        let batch = subscription.next_batch(1, Some(std::time::Duration::ZERO)).unwrap().unwrap();
        assert_eq!(positions_of(&batch), [event.position.get()]);
    }
    let checks = Store::residency_checks_on_this_thread() - before;
    assert!(checks <= 4, "{checks} mincore calls for {in_sealed} events delivered one at a time from a warm segment");
    drop(subscription);
    store.close().unwrap();
}

/// A warm read across many sealed segments pays its residency hints per segment it opens, never
/// per event. ARCHITECTURE.md ("Cold is what is not in memory"): one `mincore` per segment for
/// each of three hints (the warm-up's look ahead, the short list's page, the first record's
/// page), so at most 3 a sealed segment for a read driven by short lists. A long list's walk
/// asks ahead by bytes (two per ask), far fewer than its events.
#[test]
fn a_warm_read_pays_mincore_per_segment_not_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    fill(&store, 0, 100_000);
    store.wait_for_sealing();
    store.close().unwrap();
    let sealed = files_with(dir.path(), "idx").len() as u64;
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    for (query, short) in [
        (Query::for_tags(["rare"]), true),
        (Query::for_tags(["entity:0", "rare"]), true),
        (Query::for_tags(["entity:3"]), false),
    ] {
        let _ = common::read_all(&store, &query);
        let before = Store::residency_checks_on_this_thread();
        let events = common::read_all(&store, &query).len() as u64;
        let checks = Store::residency_checks_on_this_thread() - before;
        assert!(events > 2 * sealed, "{events} events");
        if short {
            assert!(checks <= 3 * sealed, "{query:?}: {checks} mincore calls in {sealed} sealed segments");
        } else {
            assert!(checks * 50 < events, "{query:?}: {checks} mincore calls for {events} events");
        }
    }
    store.close().unwrap();
}

/// The bases of a store's segments, ascending (from their log files' names).
fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> =
        files_with(dir, "log").iter().map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap()).collect();
    bases.sort();
    bases
}

/// A limited read warms 4 segments first, then 8, 16, 32 (each batch from the segment the walk
/// is about to open, counting only its cold sealed segments, and only when two or more, while
/// the walk wants two events or more): for every limit, both directions, the segments warmed
/// are exactly those of the batches the walk entered. Judged against the rule for limits ending
/// in each segment, so that a batch that does not grow (4, 4, 4) or starts elsewhere is seen.
#[test]
fn a_limited_read_warms_exactly_the_growing_batches_it_enters() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let bases = segment_bases(dir.path());
    let sealed = files_with(dir.path(), "idx").len();
    assert_eq!(sealed + 1, bases.len(), "every segment but the active one is sealed");
    let rare = Query::for_tags(["rare"]);
    let segment_of = |position: u64| bases.iter().rposition(|&b| b <= position).unwrap();
    for backwards in [false, true] {
        let found = expected_positions(&all, all.len() as u64, &rare, ReadOptions { backwards, ..Default::default() });
        // Segments in walk order.
        let order: Vec<usize> = if backwards { (0..bases.len()).rev().collect() } else { (0..bases.len()).collect() };
        let rank = |segment: usize| order.iter().position(|&s| s == segment).unwrap();
        let mut seen_walked = std::collections::BTreeSet::new();
        for limit in 2..=found.len() as u64 {
            let options_ = ReadOptions { limit: Some(limit), backwards, ..Default::default() };
            // The walk opens segments up to the one holding its last event.
            let walked = rank(segment_of(found[limit as usize - 1])) + 1;
            if !seen_walked.insert(walked) {
                continue;
            }
            // Entering the segment of rank `from`, the walk wants the limit less what earlier
            // segments gave.
            let wanted_at =
                |from: usize| limit - found[..limit as usize].iter().filter(|&&p| rank(segment_of(p)) < from).count() as u64;
            let (mut batch, mut from, mut rule) = (4usize, 0usize, 0u64);
            while from < walked && wanted_at(from) >= 2 {
                let cold = order[from..(from + batch).min(order.len())].iter().filter(|&&s| s < sealed).count() as u64;
                if cold >= 2 {
                    rule += cold;
                }
                from += batch;
                batch = (batch * 2).min(32);
            }
            let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
            let (got, warmed) = warmed_by(&store, &rare, options_);
            store.close().unwrap();
            assert_eq!(got, found[..limit as usize]);
            assert_eq!(warmed, rule, "limit {limit}, backwards {backwards}: the walk opened {walked} segments");
            assert!(warmed as usize <= 2 * walked + 4, "warms at most about as many again as it walked");
        }
        assert!(seen_walked.len() >= 6, "limits ending in {} different segments", seen_walked.len());
    }
}

/// A dictionary node may span two blocks (a node's bytes are checked over the most a node can
/// take, more than a block): two unchecked blocks are asked for at once before they are
/// checked (`BlockChecks::check_range`). Lookups of tags of one event each (their postings in
/// the dictionary's value) in a cold mapped index of many tags, with a limit of 1 (no warm-up,
/// no record batch, no postings read), ask only for that. (Absent tags would not do: the
/// segment's tag filter answers them without a lookup.)
#[test]
fn a_cold_dictionary_lookup_asks_for_a_nodes_blocks_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    // Tags that share little but their prefix, so the dictionary does not compress to a few
    // blocks.
    let mut rng = Rng::new(seed());
    let mut tags = Vec::new();
    while files_with(dir.path(), "log").len() < 2 {
        let batch: Vec<Event> = (0..1000)
            .map(|_| {
                tags.push(format!("order:{:016x}", rng.next_u64()));
                Event::new("E", [tags.last().unwrap().clone()], vec![])
            })
            .collect();
        store.append(batch, None).unwrap();
    }
    store.wait_for_sealing();
    store.close().unwrap();
    let index = &files_with(dir.path(), "idx")[0];
    assert!(std::fs::metadata(index).unwrap().len() > 256 << 10, "a mapped index of many blocks");
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let one = ReadOptions { limit: Some(1), ..Default::default() };
    // The index is loaded and checked (header, table, dictionary footer) by a first lookup.
    assert!(warmed_by(&store, &Query::for_tags(["absent"]), one).0.is_empty());
    let before = Store::prefetch_requests_on_this_thread();
    for n in (0..tags.len()).step_by(997) {
        assert_eq!(warmed_by(&store, &Query::for_tags([&tags[n]]), one).0, [n as u64 + 1]);
    }
    let asked = Store::prefetch_requests_on_this_thread() - before;
    assert!(asked >= 1, "no node's blocks were asked for together");
    store.close().unwrap();
}

/// The walk alone, without warm-ups: the window read one segment at a time (a window inside
/// one segment has one cold segment at most, which is never handed to a thread), each on a
/// store just opened, in walk order, until the limit is met or a segment's read fails.
fn walk_alone(dir: &Path, bases: &[u64], head: u64, query: &Query, options_: ReadOptions) -> Result<Vec<u64>, String> {
    let low = options_.after.get() + 1;
    let high = options_.until.map_or(head, |u| u.get().min(head));
    let mut windows: Vec<(u64, u64)> = bases
        .iter()
        .enumerate()
        .map(|(i, &base)| (base.max(low), bases.get(i + 1).map_or(head, |&next| next - 1).min(high)))
        .filter(|(first, last)| first <= last)
        .collect();
    if options_.backwards {
        windows.reverse();
    }
    let mut got = Vec::new();
    for (first, last) in windows {
        let remaining = options_.limit.map(|l| l - got.len() as u64);
        if remaining == Some(0) {
            break;
        }
        let store = Store::open(dir, options(SEGMENT)).unwrap();
        let one = ReadOptions { after: Position(first - 1), until: Some(Position(last)), limit: remaining, backwards: options_.backwards };
        let before = Store::warmed_segments_on_this_thread();
        let read = store.read(query, one).unwrap().collect_all();
        assert_eq!(Store::warmed_segments_on_this_thread(), before, "a one-segment window warms nothing");
        store.close().unwrap();
        match read {
            Ok(events) => got.extend(positions_of(&events)),
            Err(e) => return Err(format!("{:?}: {}", e.kind(), e.message())),
        }
    }
    Ok(got)
}

/// Damage met by warm-up threads gives the answer or the error the walk alone gives: two
/// dictionaries damaged (rebuilt from the log), and one of them in a segment whose log is
/// damaged too (its rebuild fails: Corruption for the reads that reach it), for random windows,
/// limits and directions. A warm-up meets the failed rebuild first and keeps it: a read that
/// ends before that segment must still succeed, and one that reaches it fail as the walk would.
#[test]
fn damage_met_by_warm_ups_answers_as_the_walk_alone_does() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let head = all.len() as u64;
    let bases = segment_bases(dir.path());
    let indexes = files_with(dir.path(), "idx");
    for index in [&indexes[2], &indexes[6]] {
        let mut bytes = std::fs::read(index).unwrap();
        let postings_at = common::u64_at(&bytes, 72);
        bytes[postings_at - 24] ^= 0x5a;
        std::fs::write(index, bytes).unwrap();
    }
    // A payload in segment 6's log, of an event no query below returns (entity 39, not rare).
    let victim = (bases[6]..bases[7]).map(|p| (p - 1) as u32).find(|i| i % 40 == 39 && i % 700 != 0).unwrap();
    let log = common::segment_path(dir.path(), bases[6]);
    let mut bytes = std::fs::read(&log).unwrap();
    let needle = victim.to_le_bytes();
    let at: Vec<usize> = bytes.windows(4).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "the victim's payload is found once");
    bytes[at[0] + 1] ^= 0x77;
    std::fs::write(&log, bytes).unwrap();
    let queries = [
        Query::for_tags(["rare"]),
        Query::for_tags(["entity:5"]),
        Query::of([QueryItem::new(["Opened"], ["entity:3"]), QueryItem::new(Vec::<String>::new(), ["rare"])]),
    ];
    let mut rng = Rng::new(seed() + 1);
    let (mut failed, mut answered) = (0, 0);
    for round in 0..24 {
        let query = rng.pick(&queries).clone();
        let after = if rng.chance(40) { 0 } else { rng.below(head) };
        let until = if rng.chance(50) { None } else { Some(Position(rng.range(after, head))) };
        let limit = if rng.chance(40) { None } else { Some(rng.range(2, 120)) };
        let options_ = ReadOptions { after: Position(after), until, limit, backwards: rng.chance(50) };
        let alone = walk_alone(dir.path(), &bases, head, &query, options_);
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        let warmed = store
            .read(&query, options_)
            .unwrap()
            .collect_all()
            .map(|events| positions_of(&events))
            .map_err(|e| format!("{:?}: {}", e.kind(), e.message()));
        store.close().unwrap();
        assert_eq!(warmed, alone, "round {round}: {query:?} {options_:?}");
        if let Ok(got) = &alone {
            assert_eq!(*got, expected_positions(&all, head, &query, options_), "round {round}");
            answered += 1;
        } else {
            failed += 1;
        }
    }
    assert!(failed > 0 && answered > 0, "{failed} reads failed, {answered} answered");
}

/// Eight reads at once on a store just opened (every segment cold, each read warming on its
/// own threads), the store closed after every read has begun and before any has walked: each
/// read answers exactly from its snapshot or fails with `Closed`, and none panics or hangs.
#[test]
fn reads_warming_at_once_on_a_cold_store_closed_under_them_answer_or_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let head = all.len() as u64;
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    let queries: Vec<Query> = (0..8)
        .map(|k| if k % 2 == 0 { Query::for_tags(["rare"]) } else { Query::for_tags([format!("entity:{k}")]) })
        .collect();
    let begun = std::sync::Barrier::new(queries.len() + 1);
    let (store, begun, all) = (&store, &begun, &all);
    type Outcome = (Query, ReadOptions, lapilli_core::Result<Vec<SequencedEvent>>, u64);
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let readers: Vec<_> = queries
            .iter()
            .enumerate()
            .map(|(k, query)| {
                scope.spawn(move || {
                    let options_ = ReadOptions { backwards: k % 3 == 0, limit: (k % 4 == 1).then_some(50), ..Default::default() };
                    let read = store.read(query, options_).unwrap();
                    begun.wait();
                    begun.wait();
                    let before = Store::warmed_segments_on_this_thread();
                    let outcome = read.collect_all();
                    (query.clone(), options_, outcome, Store::warmed_segments_on_this_thread() - before)
                })
            })
            .collect();
        begun.wait();
        store.close().unwrap();
        begun.wait();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut warmed = 0;
    for (query, options_, outcome, n) in outcomes {
        match outcome {
            Ok(events) => assert_eq!(positions_of(&events), expected_positions(all, head, &query, options_), "{query:?} {options_:?}"),
            Err(e) => assert_eq!(e.kind(), lapilli_core::ErrorKind::Closed, "{query:?}: {e}"),
        }
        warmed += n;
    }
    // Reads begun before the close walk their snapshots: they warmed, after the close.
    assert!(warmed > 0, "no read warmed a segment");
}

/// Segments indexed in parts (`Options::part_bytes`): a writable reopen of a store whose active
/// segment has part index files, then appends that seal segments (their parts merged) while the
/// same handle reads, and a fresh open at the end. Every read (random windows, limits,
/// directions, query shapes) answers as the model over everything up to the read's head.
#[test]
fn reads_over_segments_in_parts_answer_exactly_while_segments_seal_and_merge() {
    let parts = |dir: &Path| Store::open(dir, lapilli_core::Options { part_bytes: 4 << 10, ..options(SEGMENT) }).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = parts(dir.path());
    fill(&store, 0, 14_500);
    store.wait_for_sealing();
    store.close().unwrap();
    assert!(!files_with(dir.path(), "part").is_empty(), "the active segment has part index files");
    let queries = [
        Query::for_tags(["rare"]),
        Query::for_tags(["entity:3"]),
        Query::of([QueryItem::new(["Opened"], ["rare"]), QueryItem::new(Vec::<String>::new(), ["entity:11"])]),
        Query::of([QueryItem::new(["Moved"], ["entity:7", "rare"]), QueryItem::new(["Opened"], ["entity:8"])]),
    ];
    let mut rng = Rng::new(seed() + 2);
    let mut check = |store: &Store, rounds: usize| {
        for round in 0..rounds {
            let query = rng.pick(&queries).clone();
            let head = store.head().unwrap().get();
            let after = if rng.chance(30) { 0 } else { rng.below(head) };
            let until = if rng.chance(50) { None } else { Some(Position(rng.range(after, head))) };
            let limit = if rng.chance(50) { None } else { Some(rng.range(2, 300)) };
            let options_ = ReadOptions { after: Position(after), until, limit, backwards: rng.chance(50) };
            let result = store.read(&query, options_).unwrap();
            let head = result.head().get();
            let got = positions_of(&result.collect_all().unwrap());
            let all = common::read_all(store, &Query::all());
            assert_eq!(got, expected_positions(&all, head, &query, options_), "round {round}: {query:?} {options_:?}");
        }
    };
    let store = parts(dir.path());
    check(&store, 12);
    std::thread::scope(|scope| {
        let writer = &store;
        let appending = scope.spawn(move || fill(writer, 14_500, 40_000));
        while !appending.is_finished() {
            check(&store, 1);
        }
        appending.join().unwrap();
    });
    store.wait_for_sealing();
    check(&store, 12);
    store.close().unwrap();
    let store = parts(dir.path());
    check(&store, 12);
    store.close().unwrap();
}

/// An index rebuilt from its log (a block failed its check) answers from memory: its lists'
/// and offsets' pages in the damaged file say nothing of what a lookup will fault on. Judged by
/// them (never read again, so out of memory after an eviction), every lookup of a short list
/// asked the kernel to read the damaged file's offsets pages, one ask per event here, for
/// nothing. After the eviction only the records are asked for (one ask each).
#[test]
fn a_rebuilt_index_does_not_ask_for_the_damaged_files_pages() {
    let dir = tempfile::tempdir().unwrap();
    let in_sealed = one_mapped_segment(dir.path());
    let index = &files_with(dir.path(), "idx")[0];
    // The offsets entry of the first rare event (position 101): its block fails its check when
    // a lookup first reads it, after the index was loaded, and the index is rebuilt then.
    let mut bytes = std::fs::read(index).unwrap();
    let offsets_at = common::u64_at(&bytes, 40);
    bytes[offsets_at + 8 * 100 + 6] ^= 0x5a;
    std::fs::write(index, bytes).unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let rare = Query::for_tags(["rare"]);
    let all = common::read_all(&store, &rare);
    assert!(common::evict_store_pages(dir.path()), "this test needs a file system that evicts (not tmpfs)");
    let asked = Store::prefetch_requests_on_this_thread();
    assert_eq!(positions_of(&common::read_all(&store, &rare)), positions_of(&all));
    let asked = Store::prefetch_requests_on_this_thread() - asked;
    assert!(asked as usize <= in_sealed, "{asked} prefetch asks for {in_sealed} events of a rebuilt index");
    store.close().unwrap();
}

/// Two segments whose indexes cannot be loaded (a dictionary block damaged, and the log too, so
/// the rebuild from it fails): a read that ends before them never meets them, but they lie in
/// its first warm-up's batch. Each such read handed them to threads again, and each thread
/// encoded the whole segment again to fail again (a segment's worth of work per read per
/// damaged segment, which the walk alone never pays): a warm-up that could not load an index
/// leaves it to the walk.
#[test]
fn indexes_a_warm_up_could_not_load_are_not_warmed_again_by_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let all = many_segments(dir.path());
    let head = all.len() as u64;
    let bases = segment_bases(dir.path());
    let indexes = files_with(dir.path(), "idx");
    for segment in [2, 3] {
        let mut bytes = std::fs::read(&indexes[segment]).unwrap();
        let postings_at = common::u64_at(&bytes, 72);
        bytes[postings_at - 24] ^= 0x5a;
        std::fs::write(&indexes[segment], bytes).unwrap();
        let victim = (bases[segment]..bases[segment + 1]).map(|p| (p - 1) as u32).find(|i| i % 40 == 39 && i % 700 != 0).unwrap();
        let log = common::segment_path(dir.path(), bases[segment]);
        let mut bytes = std::fs::read(&log).unwrap();
        let at: Vec<usize> = bytes.windows(4).enumerate().filter(|(_, w)| *w == victim.to_le_bytes()).map(|(i, _)| i).collect();
        assert_eq!(at.len(), 1);
        bytes[at[0] + 1] ^= 0x77;
        std::fs::write(&log, bytes).unwrap();
    }
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    // Reaching them fails, as the walk alone would.
    let error = store.read(&Query::for_tags(["rare"]), ReadOptions::default()).unwrap().collect_all().unwrap_err();
    assert_eq!(error.kind(), lapilli_core::ErrorKind::Corruption);
    // Reads that end in the first segment: answered, and the damaged segments warmed no more.
    let entity = Query::for_tags(["entity:1"]);
    let two = ReadOptions { limit: Some(2), ..Default::default() };
    let mut warmed = Vec::new();
    for _ in 0..3 {
        let (got, n) = warmed_by(&store, &entity, two);
        assert_eq!(got, expected_positions(&all, head, &entity, two));
        warmed.push(n);
    }
    assert_eq!(warmed, [0, 0, 0], "segments warmed by each read");
    store.close().unwrap();
}
