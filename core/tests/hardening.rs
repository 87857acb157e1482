//! Defects found by an outside review of the engine, each kept as the test that showed it.
//! (Fault-injected ones, which need the `fault-injection` feature, are in `crash.rs`; growth
//! ratios are in `scale.rs`.)

mod common;

use common::{Rng, buffered};
use lapilli_core::{
    AppendCondition, Durability, ErrorKind, Event, Options, Position, Query, QueryItem, ReadOptions, SequencedEvent, Store,
};

fn all(store: &Store) -> Vec<SequencedEvent> {
    store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap()
}

/// The review's reproduction: an empty active segment smaller than the new `segment_size`.
/// Roll-over targeted the active segment's own file name, `create_new` failed with EEXIST, and
/// the error path removed the live segment; the next append was acknowledged into the unlinked
/// file and lost at reopen.
#[test]
fn a_larger_segment_size_on_reopen_keeps_every_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), buffered(4096)).unwrap().close().unwrap();
    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    let big = store.append(vec![Event::new("Big", ["t"], vec![7u8; 5000])], None).unwrap();
    assert_eq!(big.first.get(), 1);
    let small = store.append(vec![Event::new("Small", ["t"], vec![1u8; 10])], None).unwrap();
    assert_eq!(small.first.get(), 2);
    store.close().unwrap();

    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    assert_eq!(store.head().unwrap().get(), 2);
    let events = all(&store);
    assert_eq!(events[0].data, vec![7u8; 5000]);
    assert_eq!(events[1].data, vec![1u8; 10]);
}

/// Model test: random `segment_size`s (smaller and larger than the segments on disk) at random
/// reopen points, events up to the size a segment allows; every acknowledged append is there,
/// byte-identical, after every reopen, and the store keeps accepting appends.
#[test]
fn acknowledged_appends_survive_any_sequence_of_segment_size_changes() {
    // Some not a whole number of pages (the padding of a group stops at the segment's end;
    // `padding_never_grows_a_segment_whose_size_is_not_whole_pages` checks the files' lengths).
    let sizes = [4096u64, 5003, 8192, 12289, 16384, 65536, 1 << 20];
    for seed in 0..12 {
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for _reopen in 0..8 {
            let size = *rng.pick(&sizes);
            let durability = if rng.chance(50) { Durability::Buffered } else { Durability::Fsync };
            // Parts of the active segment cut after every group, every few KiB, or never
            // before the close: the part files one open wrote are read by the next.
            let part_bytes = *rng.pick(&[1u64, 3000, 4 << 20]);
            let options = Options { durability, segment_size: size, part_bytes, ..Options::default() };
            let store = Store::open(dir.path(), options).unwrap();
            assert_eq!(store.head().unwrap().get(), model.len() as u64, "seed {seed}: head after reopen");
            let events = all(&store);
            assert_eq!(events.len(), model.len(), "seed {seed}");
            for (event, data) in events.iter().zip(&model) {
                assert_eq!(&event.data, data, "seed {seed}: event {}", event.position);
            }
            // Often nothing is appended, so an empty active segment meets the next size.
            let appends = if rng.chance(40) { 0 } else { rng.range(1, 6) };
            for _ in 0..appends {
                let batch: Vec<Vec<u8>> = (0..rng.range(1, 3))
                    .map(|_| {
                        let len = if rng.chance(50) { rng.range(1000, size as u64 / 3) } else { rng.below(64) };
                        rng.bytes(len as usize)
                    })
                    .collect();
                let events = batch.iter().map(|d| Event::new("E", ["t"], d.clone())).collect();
                match store.append(events, None) {
                    Ok(result) => {
                        assert_eq!(result.first.get(), model.len() as u64 + 1, "seed {seed}");
                        model.extend(batch);
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "seed {seed}: {e}");
                    }
                }
            }
            store.close().unwrap();
        }
    }
}

/// A segment size that is not a whole number of pages: the group that reaches the last, partial
/// page is padded to the segment's end, not to the page's, so no segment file ever grows past
/// the size it was made with (and every event reads back after a reopen).
#[test]
fn padding_never_grows_a_segment_whose_size_is_not_whole_pages() {
    const SIZE: u64 = 5003;
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(5003);
    let mut model = Vec::new();
    let store = Store::open(dir.path(), buffered(SIZE)).unwrap();
    while common::segment_files(dir.path()).len() < 6 {
        let len = rng.range(10, 1500) as usize;
        let data = rng.bytes(len);
        store.append(vec![Event::new("E", ["t"], data.clone())], None).unwrap();
        model.push(data);
    }
    store.close().unwrap();
    for path in common::segment_files(dir.path()) {
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE, "{}", path.display());
    }
    let store = Store::open(dir.path(), buffered(SIZE)).unwrap();
    let events = all(&store);
    assert_eq!(events.iter().map(|e| e.data.clone()).collect::<Vec<_>>(), model);
}

/// Rewrites every event's `recorded_at` in a closed store's segment to `micros`, re-chaining the
/// CRCs, and removes its index file (rebuilt at open): a clock that has since gone back.
fn stamp_segment(path: &std::path::Path, micros: u64) {
    use lapilli_core::log::format::{FRAME_LEN, HEADER_LEN, record_crc};
    let mut bytes = std::fs::read(path).unwrap();
    let mut chain = u32::from_le_bytes(bytes[HEADER_LEN - 4..HEADER_LEN].try_into().unwrap());
    let mut at = HEADER_LEN;
    loop {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let payload = at + FRAME_LEN;
        if bytes[payload] == 1 {
            bytes[payload + 1..payload + 9].copy_from_slice(&micros.to_le_bytes());
        }
        chain = record_crc(chain, (len as u32).to_le_bytes(), &bytes[payload..payload + len]);
        bytes[at + 4..at + 8].copy_from_slice(&chain.to_le_bytes());
        at = payload + len;
    }
    std::fs::write(path, bytes).unwrap();
    let _ = std::fs::remove_file(path.with_extension("idx"));
}

/// `recorded_at` is the commit time, never earlier than any event before it, also across a
/// restart whose active segment is empty (the newest event then lies in a sealed segment).
#[test]
fn recorded_at_never_decreases_across_a_restart_with_an_empty_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(4096)).unwrap();
    for i in 0..5u8 {
        store.append(vec![Event::new("E", ["t"], vec![i; 100])], None).unwrap();
    }
    store.close().unwrap();
    // Reopen with a smaller segment size is not possible (4096 is the minimum); instead seal the
    // first segment by hand: its events get a future timestamp, and an empty second segment
    // follows it, as a roll-over leaves it.
    let first = common::segment_path(dir.path(), 1);
    let future = 4_000_000_000_000_000u64; // year 2096
    stamp_segment(&first, future);
    let second = common::segment_path(dir.path(), 6);
    let mut header = vec![0u8; 4096];
    header[..lapilli_core::log::format::HEADER_LEN].copy_from_slice(&lapilli_core::log::format::encode_header(6));
    std::fs::write(&second, header).unwrap();

    let store = Store::open(dir.path(), buffered(4096)).unwrap();
    assert_eq!(store.head().unwrap().get(), 5);
    store.append(vec![Event::new("E", ["t"], vec![])], None).unwrap();
    let stamps: Vec<u64> = all(&store).iter().map(|e| e.recorded_at).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "timestamps went backwards: {stamps:?}");
    store.close().unwrap();
}

/// A read of a tag whose events are all in the active segment, forwards and backwards, with a
/// condition and a subscription over it: the same answer as the scan oracle (the tail's
/// postings were rewritten as per-tag sorted lists).
#[test]
fn hot_tag_in_the_active_segment_reads_like_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(64 << 20)).unwrap();
    let mut rng = Rng::new(5);
    for _ in 0..40 {
        let batch = (0..100)
            .map(|i| {
                let mut tags = vec!["hot".to_string(), format!("unique:{}", rng.next_u64())];
                if i % 3 == 0 {
                    tags.push("third".into());
                }
                if rng.chance(5) {
                    tags.push("rare".into());
                }
                Event::new(if i % 2 == 0 { "Even" } else { "Odd" }, tags, vec![i as u8])
            })
            .collect();
        store.append(batch, None).unwrap();
    }
    let queries = [
        Query::for_tags(["hot"]),
        Query::for_tags(["hot", "third"]),
        Query::for_tags(["rare", "hot"]),
        Query::of([QueryItem::new(Vec::<String>::new(), ["third"]), QueryItem::new(Vec::<String>::new(), ["rare"])]),
        Query::of([QueryItem::new(["Odd"], ["hot", "third"])]),
    ];
    for query in &queries {
        for backwards in [false, true] {
            for (after, until, limit) in [(0, None, None), (123, Some(3456), None), (7, None, Some(17)), (3999, None, None)] {
                let options = ReadOptions { after: Position(after), until: until.map(Position), limit, backwards };
                store.set_planner(lapilli_core::Planner::ForceScan);
                let oracle: Vec<u64> = store.read(query, options).unwrap().map(|e| e.unwrap().position.get()).collect();
                store.set_planner(lapilli_core::Planner::Auto);
                let got: Vec<u64> = store.read(query, options).unwrap().map(|e| e.unwrap().position.get()).collect();
                assert_eq!(got, oracle, "{query:?} {options:?}");
            }
        }
    }
    let conflict = store
        .append(
            vec![Event::new("E", ["x"], vec![])],
            Some(AppendCondition::new(Query::for_tags(["rare", "hot"])).after(Position(1))),
        )
        .unwrap_err();
    let first_rare = store.read(&Query::for_tags(["rare"]), ReadOptions { after: Position(1), ..ReadOptions::default() }).unwrap().next().unwrap().unwrap();
    assert_eq!(conflict.position(), Some(first_rare.position));
}

/// `max_event_bytes` is bounded so that an event's encoded length always fits the frame's
/// 32-bit length field, whatever its tags (it used to accept `u32::MAX`, where a length could
/// truncate and the writer panic).
#[test]
fn max_event_bytes_is_bounded_by_the_frame_length() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [u32::MAX as usize, u32::MAX as usize - 1000, usize::MAX] {
        let err = Store::open(dir.path().join("s"), Options { max_event_bytes: bad, ..Options::default() })
            .err()
            .expect("rejected");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
    }
    assert!(!dir.path().join("s").exists(), "a refused open creates nothing");
    let ok = Options { max_event_bytes: lapilli_core::MAX_EVENT_BYTES_LIMIT, ..Options::default() };
    Store::open(dir.path().join("s"), ok).unwrap().close().unwrap();
}

/// A condition with no `after`, or an existence clause, asks every sealed segment; a sealed
/// segment's tag filter answers "not here" from memory instead of a tag-dictionary lookup in
/// its (possibly cold) index file. The first check builds the filters of the segments it
/// touches; after that, a tag found in no segment costs only the filters' false positives.
#[test]
fn conditions_rule_out_sealed_segments_without_their_tag_dictionaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(4096)).unwrap();
    for i in 0..6000u32 {
        let mut tags = vec![format!("entity:{i}")];
        if i == 3000 {
            tags.push("rare".into());
        }
        store.append(vec![Event::new("E", tags, vec![0u8; 40])], None).unwrap();
    }
    store.close().unwrap();
    // Reopened: no filter is built yet (open reads no index body).
    let store = Store::open(dir.path(), buffered(4096)).unwrap();
    let sealed = store.recovery().segments as u64 - 1;
    assert!(sealed >= 100, "{sealed} sealed segments");
    let unique = AppendCondition::new(Query::for_tags(["nobody"])).fail_if_exists(Query::for_tags(["rare"]));
    let err = store.append(vec![Event::new("E", ["x"], vec![])], Some(unique)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert_eq!(err.position(), Some(Position(3001)));

    let before = store.tag_lookups();
    let absent = AppendCondition::new(Query::for_tags(["absent"])).fail_if_exists(Query::for_tags(["also-absent"]));
    store.append(vec![Event::new("E", ["y"], vec![])], Some(absent)).unwrap();
    let lookups = store.tag_lookups() - before;
    // Two clauses over every sealed segment: 2 x sealed lookups without filters.
    assert!(lookups * 20 < 2 * sealed, "{lookups} tag-dictionary lookups for 2 x {sealed} segment checks");
    store.close().unwrap();
}

/// The writer indexes a group's staged events (type and tags) only so that later requests of
/// the same group can check their conditions against them: a group without any condition no
/// longer pays for it (every staged event was decoded and hashed before).
#[test]
fn groups_without_a_condition_index_nothing_for_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    let pending: Vec<_> =
        (0..200u32).map(|i| store.submit(vec![Event::new("E", [format!("e:{i}")], vec![])], None)).collect();
    for p in pending {
        p.wait().unwrap();
    }
    assert_eq!(store.staged_events_indexed(), 0, "unconditional groups indexed their staged events");
    let guarded = AppendCondition::new(Query::for_tags(["nobody"]));
    store.append(vec![Event::new("E", ["x"], vec![]), Event::new("E", ["y"], vec![])], Some(guarded)).unwrap();
    assert_eq!(store.staged_events_indexed(), 2, "a group with a condition indexes what it stages");
    store.close().unwrap();
}

/// With `fsync` durability a group of 256 events or more is indexed while the sync thread syncs
/// it. What it indexes must be exactly what a reopen rebuilds from the log, visible to readers
/// only once synced, and seen by the next group's conditions; small groups take the old path.
/// Threads append batches of 300 (every other one guarded by a condition on the writer's own
/// tag after its last position, which the groups before answer): once all in one part, read
/// from the tail index the writer built, and once across parts and roll-overs.
#[test]
fn large_groups_indexed_during_their_sync_read_back_as_a_reopen_rebuilds_them() {
    large_groups_read_back(Options { durability: Durability::Fsync, segment_size: 4 << 20, ..Options::default() });
    large_groups_read_back(Options {
        durability: Durability::Fsync,
        segment_size: 256 << 10,
        part_bytes: 24 << 10,
        ..Options::default()
    });
}

fn large_groups_read_back(options: Options) {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(dir.path(), options.clone()).unwrap());
    store.append(vec![Event::new("Small", ["s"], vec![1])], None).unwrap();
    assert_eq!(store.overlapped_syncs(), 0, "a one-event group is synced on the writer");
    let threads: Vec<_> = (0..4u32)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut last = Position::ZERO;
                for seq in 0..12u32 {
                    let events: Vec<Event> = (0..300u32)
                        .map(|i| {
                            let tags = vec![format!("writer:{w}"), format!("id:{w}:{seq}:{i}")];
                            Event::new(format!("T{}", i % 3), tags, vec![w as u8, seq as u8, i as u8])
                        })
                        .collect();
                    let guard = (seq % 2 == 1)
                        .then(|| AppendCondition::new(Query::for_tags([format!("writer:{w}")])).after(last));
                    last = store.append(events, guard).unwrap().last;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(store.overlapped_syncs() > 0, "no group was indexed during its sync");
    // A condition after the newest event but one of writer 0 conflicts with it. (The caller's
    // check decides this one, the events being published; the writer's own check against a
    // group whose sync is under way is in crash.rs, `nothing_of_a_group_shows_while_...`.)
    let last_of_writer_0 = store
        .read(&Query::for_tags(["writer:0"]), ReadOptions { backwards: true, limit: Some(1), ..Default::default() })
        .unwrap()
        .collect_all()
        .unwrap()[0]
        .position;
    let stale = AppendCondition::new(Query::for_tags(["writer:0"])).after(Position(last_of_writer_0.get() - 1));
    let err = store.append(vec![Event::new("Small", ["s"], vec![2])], Some(stale)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let before = (all(&store), tag_reads(&store));
    assert_eq!(before.0.len(), 1 + 4 * 12 * 300);
    let store = std::sync::Arc::into_inner(store).unwrap();
    store.close().unwrap();
    let reopened = Store::open(dir.path(), options).unwrap();
    assert_eq!((all(&reopened), tag_reads(&reopened)), before, "the index built during the syncs differs from the log");
    reopened.close().unwrap();
}

/// Positions of each writer's tag, of one id tag, and of each type, forwards and backwards.
fn tag_reads(store: &Store) -> Vec<Vec<u64>> {
    let mut queries: Vec<Query> = (0..4).map(|w| Query::for_tags([format!("writer:{w}")])).collect();
    queries.push(Query::for_tags(["id:2:7:99"]));
    queries.extend((0..3).map(|t| Query::for_types([format!("T{t}")])));
    queries.push(Query::of([QueryItem::new(["T1"], ["writer:3"])]));
    let mut out = Vec::new();
    for query in &queries {
        for backwards in [false, true] {
            let read = store.read(query, ReadOptions { backwards, ..Default::default() }).unwrap();
            out.push(read.collect_all().unwrap().iter().map(|e| e.position.get()).collect());
        }
    }
    out
}
