//! The index against the scan oracle, index files' integrity, and open without reading sealed
//! log bytes.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::Rng;
use lapilli_core::{
    AppendCondition, Durability, ErrorKind, Event, Options, Planner, Position, Query, QueryItem,
    ReadOptions, SequencedEvent, Store,
};

fn small(segment_size: u64) -> Options {
    Options { durability: Durability::Buffered, segment_size, ..Options::default() }
}

const TYPES: [&str; 4] = ["Opened", "Moved", "Closed", "Noted"];

fn random_event(rng: &mut Rng, entities: u64) -> Event {
    let mut tags = vec![format!("entity:{}", rng.below(entities))];
    if rng.chance(50) {
        tags.push(format!("s10:{}", rng.below(10)));
    }
    if rng.chance(5) {
        tags.push("rare".to_string());
    }
    if rng.chance(60) {
        tags.push("common".to_string());
    }
    let len = rng.below(40) as usize;
    let data = rng.bytes(len);
    Event::new(*rng.pick(&TYPES), tags, data)
}

fn random_query(rng: &mut Rng, entities: u64) -> Query {
    if rng.chance(5) {
        return Query::all();
    }
    let items = (0..rng.range(1, 3))
        .map(|_| {
            let types: Vec<String> = match rng.below(3) {
                0 => vec![],
                1 => vec![rng.pick(&TYPES).to_string()],
                _ => vec![rng.pick(&TYPES).to_string(), "Unknown".to_string()],
            };
            let mut tags: Vec<String> = Vec::new();
            if types.is_empty() || rng.chance(70) {
                match rng.below(5) {
                    0 => tags.push("rare".into()),
                    1 => tags.push("common".into()),
                    2 => tags.push(format!("s10:{}", rng.below(10))),
                    3 => tags.push("absent".into()),
                    _ => tags.push(format!("entity:{}", rng.below(entities))),
                }
                if rng.chance(40) {
                    tags.push(if rng.chance(50) { "common".into() } else { format!("s10:{}", rng.below(10)) });
                    tags.dedup();
                }
            }
            QueryItem { types, tags }
        })
        .collect::<Vec<_>>();
    Query::of(items)
}

fn read_with(store: &Store, planner: Planner, query: &Query, options: ReadOptions) -> Vec<SequencedEvent> {
    store.set_planner(planner);
    let events = store.read(query, options).unwrap().collect_all().unwrap();
    store.set_planner(Planner::Auto);
    events
}

/// Every planner gives the same answer as the scan for `rounds` random reads.
fn assert_planners_agree(store: &Store, rng: &mut Rng, entities: u64, rounds: usize) {
    let head = store.head().unwrap().get();
    for _ in 0..rounds {
        let query = random_query(rng, entities);
        let after = if rng.chance(30) { 0 } else { rng.range(0, head) };
        let until = rng.chance(50).then(|| Position(rng.range(after, head + 5)));
        let options = ReadOptions {
            after: Position(after),
            until,
            limit: rng.chance(50).then(|| rng.below(6)),
            backwards: rng.chance(50),
        };
        let oracle = read_with(store, Planner::ForceScan, &query, options);
        for planner in [Planner::Auto, Planner::ForceIndex] {
            let got = read_with(store, planner, &query, options);
            assert_eq!(got, oracle, "{planner:?} disagrees with the scan for {query:?} {options:?}");
        }
    }
}

#[test]
fn index_equals_scan_across_sealing_and_reopen() {
    for seed in 1..=3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(seed);
        let entities = 30;
        let store = Store::open(dir.path(), small(8192)).unwrap();
        for round in 0..6 {
            for _ in 0..120 {
                let n = rng.range(1, 4) as usize;
                let events = (0..n).map(|_| random_event(&mut rng, entities)).collect();
                store.append(events, None).unwrap();
            }
            // Right after roll-over, sealed segments may still be served by the tail index;
            // then again once every index file is published.
            assert_planners_agree(&store, &mut rng, entities, 40);
            store.wait_for_sealing();
            assert_planners_agree(&store, &mut rng, entities, 40);
            assert!(store.recovery().segments >= 1, "round {round}");
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), small(8192)).unwrap();
        assert!(store.recovery().segments > 5, "expected many segments, got {:?}", store.recovery());
        assert!(store.recovery().rebuilt_indexes.is_empty(), "{:?}", store.recovery());
        assert_planners_agree(&store, &mut rng, entities, 80);
    }
}

#[test]
fn conditions_through_the_index_agree_with_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(42);
    let store = Store::open(dir.path(), small(8192)).unwrap();
    for _ in 0..800 {
        store.append(vec![random_event(&mut rng, 50)], None).unwrap();
    }
    store.wait_for_sealing();
    for _ in 0..200 {
        let query = random_query(&mut rng, 50);
        let head = store.head().unwrap().get();
        let after = rng.range(0, head);
        // The oracle: is there a match after `after`? And anywhere?
        let first_after = read_with(&store, Planner::ForceScan, &query, ReadOptions { after: Position(after), limit: Some(1), ..Default::default() });
        let first_any = read_with(&store, Planner::ForceScan, &query, ReadOptions { limit: Some(1), ..Default::default() });
        let planner = *rng.pick(&[Planner::Auto, Planner::ForceIndex, Planner::ForceScan]);
        store.set_planner(planner);
        let marker = Event::new("Marker", ["marker"], vec![]);
        let boundary = store.append(vec![marker.clone()], Some(AppendCondition::new(query.clone()).after(Position(after))));
        match (&boundary, first_after.first()) {
            (Err(e), Some(first)) => {
                assert_eq!(e.kind(), ErrorKind::Conflict);
                assert_eq!(e.position(), Some(first.position), "{planner:?} {query:?} after {after}");
            }
            (Ok(_), None) => {}
            other => panic!("{planner:?}: boundary clause answered {:?} for {query:?} after {after}", other.0),
        }
        let exists = store.append(
            vec![marker],
            Some(AppendCondition::new(Query::for_tags(["never-there"])).fail_if_exists(query.clone())),
        );
        match (&exists, first_any.first()) {
            (Err(e), Some(first)) => {
                assert_eq!(e.kind(), ErrorKind::AlreadyExists);
                assert_eq!(e.position(), Some(first.position));
            }
            (Ok(_), None) => {}
            other => panic!("{planner:?}: existence clause answered {:?} for {query:?}", other.0),
        }
        store.set_planner(Planner::Auto);
    }
}

#[test]
fn far_back_and_head_first_conditions_on_a_large_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small(4 << 20)).unwrap();
    let total = 100_000u64;
    let mut batch = Vec::new();
    for i in 0..total {
        batch.push(Event::new("Tick", [format!("entity:{}", i % 1000), format!("s100:{}", i % 100)], vec![]));
        if batch.len() == 1000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
    store.wait_for_sealing();
    let head = store.head().unwrap();
    assert_eq!(head.get(), total);
    let entity = Query::for_tags(["entity:7"]);
    // Far back: entity 7's last event is at 99_008 (i = 99_007).
    let err = store
        .append(vec![Event::new("Tick", ["entity:7"], vec![])], Some(AppendCondition::new(entity.clone()).after(Position(10))))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.position(), Some(Position(1008)), "the first match after 10");
    // Head-first: nothing after the head, so it commits.
    let ok = store.append(vec![Event::new("Tick", ["entity:7"], vec![])], Some(AppendCondition::new(entity.clone()).after(head)));
    assert_eq!(ok.unwrap().first, Position(total + 1));
    // Newest event of an entity, through the index from the end.
    let newest = store
        .read(&Query::for_tags(["entity:8"]), ReadOptions { backwards: true, limit: Some(1), ..Default::default() })
        .unwrap()
        .collect_all()
        .unwrap();
    assert_eq!(newest[0].position, Position(99_009));
    for query in [Query::for_tags(["entity:8"]), Query::for_tags(["s100:8", "entity:8"]), Query::for_types(["Tick"])] {
        let options = ReadOptions { after: Position(50_000), limit: Some(30), backwards: true, ..Default::default() };
        let oracle = read_with(&store, Planner::ForceScan, &query, options);
        assert_eq!(read_with(&store, Planner::Auto, &query, options), oracle);
        assert_eq!(read_with(&store, Planner::ForceIndex, &query, options), oracle);
    }
    let absent = store.append(
        vec![Event::new("Tick", ["x"], vec![])],
        Some(AppendCondition::new(Query::for_tags(["entity:1000"])).fail_if_exists(Query::for_tags(["entity:1000"]))),
    );
    assert!(absent.is_ok());
}

fn index_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect();
    files.sort();
    files
}

fn filled_store(dir: &Path) -> Vec<SequencedEvent> {
    let store = Store::open(dir, small(4096)).unwrap();
    let mut rng = Rng::new(9);
    for _ in 0..300 {
        store.append(vec![random_event(&mut rng, 20)], None).unwrap();
    }
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    store.close().unwrap();
    all
}

#[test]
fn damaged_index_files_are_detected_and_rebuilt_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let all = filled_store(dir.path());
    let files = index_files(dir.path());
    assert!(files.len() >= 4, "expected sealed segments, got {files:?}");
    let originals: Vec<Vec<u8>> = files.iter().map(|f| fs::read(f).unwrap()).collect();

    // A bit flip in the body, a truncation, a removal, and a flipped header bit.
    let mut flipped = originals[0].clone();
    let at = flipped.len() - 3;
    flipped[at] ^= 0x10;
    fs::write(&files[0], &flipped).unwrap();
    fs::write(&files[1], &originals[1][..originals[1].len() / 2]).unwrap();
    fs::remove_file(&files[2]).unwrap();
    let mut header = originals[3].clone();
    header[20] ^= 1;
    fs::write(&files[3], &header).unwrap();

    // Open reads headers only: it rebuilds the three it can tell are wrong, and the body's
    // damage is found by the first read that uses that segment, which answers from an index
    // rebuilt from the segment in memory (the index is derived data): exact answers either way.
    let store = Store::open(dir.path(), small(4096)).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, files[1..4], "{:?}", store.recovery());
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
    store.set_planner(lapilli_core::Planner::ForceIndex);
    for tag in ["entity:3", "common", "rare"] {
        let expected: Vec<_> = all.iter().filter(|e| e.tags.iter().any(|t| t == tag)).cloned().collect();
        assert_eq!(store.read(&Query::for_tags([tag]), ReadOptions::default()).unwrap().collect_all().unwrap(), expected);
    }
    store.close().unwrap();

    // The index is derived: without the damaged file, the next open rebuilds it.
    fs::remove_file(&files[0]).unwrap();
    let store = Store::open(dir.path(), small(4096)).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, files[..1], "{:?}", store.recovery());
    let again = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(again, all);
    store.close().unwrap();
    for (file, original) in files.iter().zip(&originals) {
        assert_eq!(&fs::read(file).unwrap(), original, "{} was not rebuilt identically", file.display());
    }
}

#[test]
fn open_reads_no_sealed_log_bytes() {
    let dir = tempfile::tempdir().unwrap();
    filled_store(dir.path());
    let store = Store::open(dir.path(), small(4096)).unwrap();
    let report = store.recovery().clone();
    assert!(report.segments >= 4);
    assert!(report.rebuilt_indexes.is_empty());
    // No log byte was scanned: the sealed segments have their index files, and the close
    // wrote the active segment's last part's.
    assert_eq!(report.scanned_log_bytes, 0, "{report:?}");
    store.close().unwrap();

    // And the proof by permissions: sealed logs unreadable would not matter to open... except
    // that they are mapped; so instead check that a sealed log whose records are destroyed still
    // opens (nothing read it), while the damage is found when its index must be rebuilt.
    let mut logs: Vec<PathBuf> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let first_log = &logs[0];
    let mut bytes = fs::read(first_log).unwrap();
    bytes[40] ^= 0xff; // inside the first record of the first sealed segment
    fs::write(first_log, &bytes).unwrap();
    let store = Store::open(dir.path(), small(4096)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0);
    store.close().unwrap();
    fs::remove_file(first_log.with_extension("idx")).unwrap();
    let err = Store::open(dir.path(), small(4096)).err().expect("rebuilding must find the damage");
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
}

/// The store the golden index files were taken from: its first sealed segment's index.
fn golden_store(dir: &Path) -> Store {
    let store = Store::open(dir, small(4096)).unwrap();
    let mut i = 0u32;
    while store.recovery().segments == 1 && index_files(dir).is_empty() {
        let tags = match i % 4 {
            0 => vec!["solo".to_string(), format!("entity:{}", i % 3)],
            _ => vec![format!("entity:{}", i % 3), "dense".to_string()],
        };
        let tags: Vec<String> = if i == 5 { vec!["once".into()] } else { tags };
        store.append(vec![Event::new(TYPES[(i % 3) as usize], tags, vec![i as u8; (i % 5) as usize])], None).unwrap();
        store.wait_for_sealing();
        i += 1;
    }
    store
}

/// The index file format, locked: if this fails, the format changed. Bump
/// `INDEX_FORMAT_VERSION` (and keep reading the old version, or say why not) — never regenerate
/// the bytes to make it pass. Version 1's bytes are kept in `golden/index_v1.hex`, read by
/// [`the_version_1_golden_index_file_still_reads`].
#[test]
fn index_file_golden_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let _store = golden_store(dir.path());
    let bytes = fs::read(&index_files(dir.path())[0]).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let golden_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/index_v2.hex");
    if std::env::var_os("LAPILLI_WRITE_GOLDEN").is_some() {
        fs::write(&golden_path, &hex).unwrap();
    }
    let golden = fs::read_to_string(&golden_path).expect("golden file");
    assert_eq!(hex, golden.trim(), "the index file format changed");
}

/// The version 1 golden file, put in place of the version 2 file of the same segment, is
/// accepted at open and answers every lookup as the scan does.
#[test]
fn the_version_1_golden_index_file_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    golden_store(dir.path()).close().unwrap();
    let golden = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/index_v1.hex")).unwrap();
    let golden = golden.trim();
    let v1: Vec<u8> = (0..golden.len()).step_by(2).map(|i| u8::from_str_radix(&golden[i..i + 2], 16).unwrap()).collect();
    assert_eq!(u32::from_le_bytes(v1[8..12].try_into().unwrap()), 1);
    let index = &index_files(dir.path())[0];
    fs::write(index, &v1).unwrap();
    let store = Store::open(dir.path(), small(4096)).unwrap();
    assert!(store.recovery().rebuilt_indexes.is_empty(), "{:?}", store.recovery());
    store.set_planner(Planner::ForceScan);
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    store.set_planner(Planner::ForceIndex);
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
    for tag in ["solo", "dense", "once", "entity:0", "entity:1", "entity:2"] {
        let expected: Vec<_> = all.iter().filter(|e| e.tags.iter().any(|t| t == tag)).cloned().collect();
        assert_eq!(store.read(&Query::for_tags([tag]), ReadOptions::default()).unwrap().collect_all().unwrap(), expected, "{tag}");
    }
    for t in TYPES {
        let expected: Vec<_> = all.iter().filter(|e| e.event_type == t).cloned().collect();
        assert_eq!(store.read(&Query::for_types([t]), ReadOptions::default()).unwrap().collect_all().unwrap(), expected, "{t}");
    }
    store.close().unwrap();
    // Untouched: a valid version 1 file is read, not rewritten.
    assert_eq!(fs::read(index).unwrap(), v1);
}

/// Open reads no sealed log bytes, so damage inside a sealed segment that still has its index
/// file is found by the read that touches it: `Corruption`, never altered data.
#[test]
fn damage_in_a_sealed_segment_is_an_error_when_read_never_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let all = filled_store(dir.path());
    let first_log = dir.path().join(format!("{:020}.log", 1));
    let mut bytes = fs::read(&first_log).unwrap();
    let last_data = 32 + 8 + 20; // inside the first event's payload
    bytes[last_data] ^= 0x01;
    fs::write(&first_log, &bytes).unwrap();
    let store = Store::open(dir.path(), small(4096)).unwrap();
    let err = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    assert!(err.message().contains("event 1"), "{err}");
    // Events elsewhere still read, and equal what was written.
    let later = store
        .read(&Query::all(), ReadOptions { after: Position(all.len() as u64 - 5), ..Default::default() })
        .unwrap()
        .collect_all()
        .unwrap();
    assert_eq!(later, all[all.len() - 5..]);
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

const MANY: usize = 20_000;

/// A store whose first segment holds `MANY` events, each with its own tag, of `types` types
/// (event i has type `T{i % types}`), sealed; returns it with how long the sealing took.
fn sealed_segment_of_types(dir: &Path, types: usize) -> (Store, f64) {
    let store = Store::open(dir, small(1 << 20)).unwrap();
    let events: Vec<Event> = (0..MANY).map(|i| Event::new(format!("T{}", i % types), [format!("e{i}")], vec![])).collect();
    store.append(events, None).unwrap();
    let start = std::time::Instant::now();
    // Does not fit beside the batch: rolls over, and the first segment goes to the sealer.
    store.append(vec![Event::new("Big", ["big"], vec![0; 600 << 10])], None).unwrap();
    store.wait_for_sealing();
    let took = start.elapsed().as_secs_f64();
    assert!(fs::metadata(dir.join(format!("{:020}.idx", 1))).is_ok(), "the first segment was sealed");
    (store, took)
}

/// Sealing assigns segment-local type ids, and a sealed segment answers "which id has this
/// type": both must be lookups, not searches through the types seen so far (quadratic in the
/// number of types). Sealing a segment of 20,000 events of 20,000 distinct types must cost
/// about what sealing 20,000 events of one type does (at most 3 times: medians of 3 runs); a
/// linear search makes it hundreds of times as much in a debug build.
#[test]
fn sealing_many_distinct_types_costs_what_one_type_costs() {
    let mut one = Vec::new();
    let mut distinct = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        one.push(sealed_segment_of_types(dir.path(), 1).1);
        let dir = tempfile::tempdir().unwrap();
        distinct.push(sealed_segment_of_types(dir.path(), MANY).1);
    }
    let (one, distinct) = (median(one), median(distinct));
    assert!(distinct <= 3.0 * one, "sealing {MANY} types took {distinct:.3}s; one type took {one:.3}s");
}

/// Reading by the type that came last into a sealed segment's dictionary of 20,000 types costs
/// what reading by the first one does (at most 3 times, medians of 3 rounds of 2,000 reads).
#[test]
fn a_type_lookup_in_a_sealed_segment_does_not_search_its_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = sealed_segment_of_types(dir.path(), MANY);
    let read_of = |i: usize| {
        Query::of([QueryItem::new([format!("T{i}")], [format!("e{i}")])])
    };
    let (first, last) = (read_of(0), read_of(MANY - 1));
    let time = |query: &Query| {
        let start = std::time::Instant::now();
        for _ in 0..2000 {
            let found = store.read(query, ReadOptions::default()).unwrap().collect_all().unwrap();
            assert_eq!(found.len(), 1);
        }
        start.elapsed().as_secs_f64()
    };
    time(&first);
    let (mut by_first, mut by_last) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        by_first.push(time(&first));
        by_last.push(time(&last));
    }
    let (by_first, by_last) = (median(by_first), median(by_last));
    assert!(by_last <= 3.0 * by_first, "reads by the last type took {by_last:.3}s; by the first {by_first:.3}s");
}

/// Open writes each index it rebuilds and keeps none of them: after an open that rebuilt every
/// index file of a store, no index is held in memory (open verified none).
#[test]
fn rebuilt_indexes_are_written_not_kept_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let all = filled_store(dir.path());
    let files = index_files(dir.path());
    let originals: Vec<Vec<u8>> = files.iter().map(|f| fs::read(f).unwrap()).collect();
    for file in &files {
        fs::remove_file(file).unwrap();
    }
    let store = Store::open(dir.path(), small(4096)).unwrap();
    let report = store.recovery().clone();
    assert_eq!(report.rebuilt_indexes, files, "{report:?}");
    assert!(report.unwritten_indexes.is_empty(), "{report:?}");
    assert_eq!(report.verified_index_bytes, 0, "{report:?}");
    for (file, original) in files.iter().zip(&originals) {
        assert_eq!(&fs::read(file).unwrap(), original, "{} was not rebuilt identically", file.display());
    }
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
}

/// The index is derived data: a rebuilt index that cannot be written is kept in memory, the
/// report says which and why, and the store opens. Here one index file's name is taken by a
/// directory (a rename cannot replace it, even for root), and another's temporary name is.
#[test]
fn an_index_that_cannot_be_written_is_kept_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let all = filled_store(dir.path());
    let files = index_files(dir.path());
    fs::remove_file(&files[0]).unwrap();
    fs::create_dir(&files[0]).unwrap();
    fs::write(files[0].join("occupied"), b"x").unwrap();
    fs::remove_file(&files[1]).unwrap();
    fs::create_dir(files[1].with_extension("idx.tmp")).unwrap();
    for _ in 0..2 {
        let store = Store::open(dir.path(), small(4096)).unwrap_or_else(|e| panic!("open: {e}"));
        let report = store.recovery().clone();
        assert_eq!(report.rebuilt_indexes, files[..2], "{report:?}");
        let mut unwritten: Vec<&Path> = report.unwritten_indexes.iter().map(|(path, _)| path.as_path()).collect();
        unwritten.sort();
        assert_eq!(unwritten, [files[0].as_path(), files[1].as_path()], "{report:?}");
        assert!(report.unwritten_indexes.iter().all(|(_, why)| !why.is_empty()));
        assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
        let entity = Query::for_tags(["entity:3"]);
        let want: Vec<SequencedEvent> = all.iter().filter(|e| e.tags.iter().any(|t| t == "entity:3")).cloned().collect();
        assert_eq!(store.read(&entity, ReadOptions::default()).unwrap().collect_all().unwrap(), want);
        store.close().unwrap();
    }
}

/// A crash while an index file is written leaves its temporary behind. A writable open removes
/// such leftovers; a read-only handle never writes, so it leaves them.
#[test]
fn leftover_index_temporaries_are_removed_by_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    let all = filled_store(dir.path());
    let leftovers = [dir.path().join(format!("{:020}.idx.tmp", 1)), dir.path().join(format!("{:020}.idx.tmp", 99_999))];
    for leftover in &leftovers {
        fs::write(leftover, b"half an index").unwrap();
    }
    let follower = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(follower.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
    follower.close().unwrap();
    assert!(leftovers.iter().all(|l| l.exists()), "a read-only handle removed a file");
    let store = Store::open(dir.path(), small(4096)).unwrap();
    assert!(store.recovery().rebuilt_indexes.is_empty(), "{:?}", store.recovery());
    for leftover in &leftovers {
        assert!(!leftover.exists(), "{} is still there", leftover.display());
    }
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap(), all);
}
