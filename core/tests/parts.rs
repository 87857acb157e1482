//! The active segment indexed in parts (`Options::part_bytes`): the writer keeps only the newest
//! part in memory, each finished part gets an index file, a segment the writer leaves gets one
//! index file merged from its parts', and an open scans only what follows the last part.

mod common;

use common::files_with;

use std::collections::BTreeSet;
use std::fs;

use lapilli_core::{Durability, Event, Options, Planner, Position, Query, QueryItem, ReadOptions, Store};

/// Segments of 64 KiB in parts of 4 KiB: a few dozen events per part.
fn options(part_bytes: u64) -> Options {
    Options { durability: Durability::Buffered, segment_size: 64 << 10, part_bytes, ..Options::default() }
}

/// Event `i`: a hot tag on every other event, an entity of its own, a type of seven.
fn event(i: u64) -> Event {
    let mut tags = vec![format!("entity:{i}")];
    if i % 2 == 0 {
        tags.push("hot".to_string());
    }
    if i % 97 == 0 {
        tags.push("rare".to_string());
    }
    Event::new(format!("Type{}", i % 7), tags, vec![(i % 251) as u8; 40 + (i % 60) as usize])
}

fn append(store: &Store, from: u64, count: u64) {
    let mut i = from;
    while i < from + count {
        let batch: Vec<Event> = (i..(i + 5).min(from + count)).map(event).collect();
        i += batch.len() as u64;
        store.append(batch, None).unwrap();
    }
}


fn queries() -> Vec<Query> {
    vec![
        Query::all(),
        Query::for_tags(["hot"]),
        Query::for_tags(["rare"]),
        Query::for_tags(["entity:12345"]),
        Query::for_types(["Type3"]),
        Query::of([QueryItem::new(["Type2"], ["hot"]), QueryItem::new(Vec::<String>::new(), ["rare"])]),
    ]
}

/// Every query, both directions, through the index and by scanning every event: the same.
fn check_against_scan(store: &Store, total: u64) {
    let head = store.head().unwrap();
    assert_eq!(head.get(), total);
    for query in queries() {
        for backwards in [false, true] {
            let read = |planner| {
                store.set_planner(planner);
                let options = ReadOptions { backwards, ..ReadOptions::default() };
                store.read(&query, options).unwrap().collect_all().unwrap()
            };
            let indexed = read(Planner::ForceIndex);
            let scanned = read(Planner::ForceScan);
            store.set_planner(Planner::Auto);
            assert_eq!(indexed, scanned, "{query:?} backwards {backwards}");
            assert_eq!(read(Planner::Auto), scanned, "{query:?} backwards {backwards}");
        }
    }
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    for (i, e) in all.iter().enumerate() {
        let expected = event(i as u64);
        assert_eq!((e.position, &e.event_type, &e.data), (Position(i as u64 + 1), &expected.event_type, &expected.data));
    }
}

#[test]
fn reads_across_parts_and_segments_match_a_scan_and_a_clean_close_leaves_nothing_to_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    append(&store, 0, 3000);
    check_against_scan(&store, 3000);
    store.wait_for_sealing();
    // Only the newest part of the active segment is indexed in memory.
    assert_eq!(store.tail_indexed_segments(), 1);
    store.close().unwrap();
    assert!(files_with(dir.path(), "log").len() >= 4, "the events span several segments");

    let store = Store::open(dir.path(), options(4096)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    check_against_scan(&store, 3000);
    // Appends go on after the parts, and their commit times do not go backwards.
    let before = store.read(&Query::all(), ReadOptions { backwards: true, limit: Some(1), ..Default::default() });
    let newest = before.unwrap().collect_all().unwrap()[0].recorded_at;
    append(&store, 3000, 500);
    let after = store.read(&Query::all(), ReadOptions { after: Position(3000), ..Default::default() });
    assert!(after.unwrap().collect_all().unwrap().iter().all(|e| e.recorded_at >= newest));
    check_against_scan(&store, 3500);
    store.close().unwrap();
}

/// Part files of a segment the writer left are merged into its index file and removed; the
/// merged file is byte for byte the one an open rebuilds from the log.
#[test]
fn a_left_segment_gets_one_index_file_equal_to_the_one_built_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(2048)).unwrap();
    append(&store, 0, 2500);
    store.wait_for_sealing();
    store.close().unwrap();
    let logs = files_with(dir.path(), "log");
    let active_base = logs.last().unwrap().file_stem().unwrap().to_string_lossy().into_owned();
    let parts: BTreeSet<String> = files_with(dir.path(), "part")
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().split('.').next().unwrap().to_string())
        .collect();
    assert_eq!(parts, BTreeSet::from([active_base]), "only the active segment has part files");
    let indexes = files_with(dir.path(), "idx");
    assert_eq!(indexes.len(), logs.len() - 1);
    let merged: Vec<Vec<u8>> = indexes.iter().map(|p| fs::read(p).unwrap()).collect();
    for index in &indexes {
        fs::remove_file(index).unwrap();
    }
    let store = Store::open(dir.path(), options(2048)).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, indexes);
    store.close().unwrap();
    for (index, merged) in indexes.iter().zip(&merged) {
        assert!(fs::read(index).unwrap() == *merged, "{} differs from the merged file", index.display());
    }
}

/// The child half of `a_crash_scans_only_what_follows_the_last_part`: appends in small groups
/// with `fsync` durability, says how far it got, and dies without closing.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("LAPILLI_PARTS_CHILD") else { return };
    let store = Store::open(&dir, Options { durability: Durability::Fsync, ..options(4096) }).unwrap();
    append(&store, 0, 1203);
    store.wait_for_sealing();
    println!("ACK {}", store.head().unwrap().get());
    std::process::abort();
}

#[test]
fn a_crash_scans_only_what_follows_the_last_part() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::child_test("crash_child").env("LAPILLI_PARTS_CHILD", dir.path()).output().unwrap();
    assert!(!out.status.success(), "the child aborts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ACK 1203"), "{stdout}");
    let store = Store::open(dir.path(), options(4096)).unwrap();
    let report = store.recovery().clone();
    // At most one part's bytes, and the group that crossed its end.
    assert!(report.scanned_log_bytes > 0 && report.scanned_log_bytes < 4096 + 1024, "{report:?}");
    check_against_scan(&store, 1203);
    store.close().unwrap();
}

/// A part file that is not what it should be is never trusted: one whose header is damaged is
/// dropped (with every part after it) and its events are scanned from the log again; one whose
/// body is damaged is answered from an index rebuilt from its part of the log.
#[test]
fn damaged_part_files_cost_a_scan_never_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    append(&store, 0, 300); // fewer parts than the sealer lets pile up before merging them
    store.close().unwrap();
    let parts = files_with(dir.path(), "part");
    assert!(parts.len() >= 2, "{parts:?}");

    // The body of the first part: answers stay exact.
    let mut bytes = fs::read(&parts[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    fs::write(&parts[0], &bytes).unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0);
    check_against_scan(&store, 300);
    store.close().unwrap();

    // The header of the second part: it and every later part are dropped and scanned again.
    let mut bytes = fs::read(&parts[1]).unwrap();
    bytes[20] ^= 0x01;
    fs::write(&parts[1], &bytes).unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    assert!(store.recovery().scanned_log_bytes > 0, "{:?}", store.recovery());
    check_against_scan(&store, 300);
    append(&store, 300, 100);
    check_against_scan(&store, 400);
    store.close().unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "the close wrote the parts again");
    check_against_scan(&store, 400);
    store.close().unwrap();
}

/// Part files of the first tier are not synced (`seal::seal_part`), so a power cut can leave
/// one missing while a later one is there (written back first), or there but empty (its rename
/// reached the disk, its bytes did not). Either costs the open a scan of at most the first
/// tier's parts (fewer than `PART_FAN`, plus the part being filled), never an answer.
#[test]
fn first_tier_part_files_lost_to_a_power_cut_cost_a_bounded_scan() {
    for lose in ["the middle one missing", "the first one empty"] {
        let (dir, total, parts) = closed_store_with_parts(2, 0);
        assert_eq!(parts.len(), 3, "two parts and the close's short one, all of the first tier: {parts:?}");
        match lose {
            "the middle one missing" => fs::remove_file(&parts[1]).unwrap(),
            _ => fs::File::create(&parts[0]).map(drop).unwrap(),
        }
        let report = reopened_and_checked(dir.path(), total);
        // Each part ends with the group of 5 events that took it past 4096 bytes.
        assert!(report.scanned_log_bytes > 0 && report.scanned_log_bytes < 3 * (4096 + 1024), "{lose}: {report:?}");
        let report = reopened_and_checked(dir.path(), total);
        assert_eq!(report.scanned_log_bytes, 0, "{lose}: the close wrote the parts again");
    }
}

/// Keeps a part file's header (its first 128 bytes: ARCHITECTURE.md, "Index file") and zeroes
/// its body, as a power cut can leave a file whose size and first block reached the disk and
/// whose other blocks did not.
fn zero_body(path: &std::path::Path) {
    let mut bytes = fs::read(path).unwrap();
    bytes[128..].fill(0);
    fs::write(path, &bytes).unwrap();
}

/// Appends groups of 5 until the store has `parts` part files (the part being filled then holds
/// the group that finished the one before); returns the event count.
fn append_until_parts(store: &Store, dir: &std::path::Path, from: u64, parts: usize) -> u64 {
    let mut total = from;
    while files_with(dir, "part").len() < parts {
        append(store, total, 5);
        total += 5;
        store.wait_for_sealing();
    }
    total
}

/// A new store in parts of 4 KiB with `parts` part files and then `extra` more events, closed:
/// its directory, its event count and its part files.
fn closed_store_with_parts(parts: usize, extra: u64) -> (tempfile::TempDir, u64, Vec<std::path::PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    let total = append_until_parts(&store, dir.path(), 0, parts);
    append(&store, total, extra);
    store.close().unwrap();
    let files = files_with(dir.path(), "part");
    (dir, total + extra, files)
}

/// Opens the store in `dir` (parts of 4 KiB), checks its `total` events against a scan, closes
/// it, and returns what the open recovered.
fn reopened_and_checked(dir: &std::path::Path, total: u64) -> lapilli_core::RecoveryReport {
    let store = Store::open(dir, options(4096)).unwrap();
    let report = store.recovery().clone();
    check_against_scan(&store, total);
    store.close().unwrap();
    report
}

/// What else a power cut can leave of unsynced part files, each costing a rebuild or a scan
/// and no answer: the newest with its header and a zeroed body, as the short part an open
/// carries on and as a full part with nothing after it; and a short part's older file back in
/// place of its rewrite under the same name (lost), behind a later part that was not.
#[test]
fn a_zeroed_newest_part_or_a_lost_rewrite_of_a_carried_part_costs_no_answer() {
    // The short part an open carries on.
    let (dir, total, parts) = closed_store_with_parts(2, 3);
    assert_eq!(parts.len(), 3, "{parts:?}");
    zero_body(&parts[2]);
    reopened_and_checked(dir.path(), total);

    // A full part with nothing after it (its last group took it past `part_bytes`, and no
    // group came after to finish it, so the close wrote it whole): the open reads its last
    // event's commit time.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    let total = append_until_parts(&store, dir.path(), 0, 2);
    store.append((total..total + 60).map(event).collect(), None).unwrap();
    let total = total + 60;
    store.close().unwrap();
    let parts = files_with(dir.path(), "part");
    assert_eq!(parts.len(), 3, "{parts:?}");
    zero_body(&parts[2]);
    let store = Store::open(dir.path(), options(4096)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    check_against_scan(&store, total);
    append(&store, total, 5);
    check_against_scan(&store, total + 5);
    store.close().unwrap();

    // A lost rewrite: the short part of the first session comes back in place of the full one
    // the second wrote under its name, with the second session's next part after it.
    let (dir, mut total, parts) = closed_store_with_parts(1, 3);
    assert_eq!(parts.len(), 2, "{parts:?}");
    let short = fs::read(&parts[1]).unwrap();
    let store = Store::open(dir.path(), options(4096)).unwrap();
    while fs::read(&parts[1]).unwrap() == short {
        append(&store, total, 5);
        total += 5;
        store.wait_for_sealing();
    }
    store.close().unwrap(); // writes the part after it, short: three parts of the first tier
    let now = files_with(dir.path(), "part");
    assert_eq!(now.len(), 3, "no merge: {now:?}");
    assert_eq!(now[1], parts[1]);
    fs::write(&now[1], &short).unwrap();
    let report = reopened_and_checked(dir.path(), total);
    assert!(report.scanned_log_bytes > 0, "{report:?}");
}

/// A part file of the first tier is not synced, so what its file holds on the disk may differ
/// from what the sealer wrote (a failed writeback is reported to no one, and a page evicted and
/// read again comes from the disk): such a part answers from the bytes the sealer encoded,
/// whatever happens to its file afterwards. The file is large enough that an index would be
/// mapped rather than copied.
#[test]
fn an_unsynced_part_answers_from_what_the_sealer_encoded_not_from_its_file() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { segment_size: 8 << 20, ..options(1 << 20) }).unwrap();
    let total = append_until_parts(&store, dir.path(), 0, 1);
    let part = &files_with(dir.path(), "part")[0];
    let len = fs::metadata(part).unwrap().len();
    assert!(len > 64 << 10, "a part file of {len} bytes would be copied, not mapped");
    check_against_scan(&store, total);
    let file = fs::OpenOptions::new().write(true).open(part).unwrap();
    file.write_all_at(&vec![0u8; len as usize - 128], 128).unwrap();
    check_against_scan(&store, total);
    store.close().unwrap();
}

/// The sealer merges parts in tiers (`PART_FAN` = 4 parts of a tier make one of the next), so
/// part files stay few: at most 3 per tier; a crash after a merge's rename leaves the parts it
/// covered, which open skips.
#[test]
fn finished_parts_are_merged_so_their_files_stay_few() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { segment_size: 4 << 20, ..options(1024) }).unwrap();
    for round in 0..10 {
        append(&store, round * 200, 200);
        store.wait_for_sealing();
        let parts = files_with(dir.path(), "part").len();
        // 2,000 events of about 90 bytes in parts of 1 KiB: under 4^4 parts, so 4 tiers.
        assert!(parts <= 3 * 4, "round {round}: {parts} part files");
    }
    check_against_scan(&store, 2000);
    store.close().unwrap();
    let parts = files_with(dir.path(), "part");
    // A merge whose covered parts were not removed yet (a crash): put one back.
    let covered = parts[0].with_extension(format!("{:020}.part", 7));
    let covered = covered.with_file_name(covered.file_name().unwrap().to_string_lossy().replacen(".00000000000000000001.", ".", 1));
    fs::copy(&parts[0], &covered).unwrap();
    let store = Store::open(dir.path(), options(1024)).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    assert!(!covered.exists(), "open removes a covered part file");
    check_against_scan(&store, 2000);
    store.close().unwrap();
}

/// `part_bytes` changed between opens: parts written under one size are read under another.
#[test]
fn parts_survive_a_changed_part_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut total = 0;
    for part_bytes in [1u64, 50_000, 700, 4 << 20, 1] {
        let store = Store::open(dir.path(), options(part_bytes)).unwrap();
        check_against_scan(&store, total);
        append(&store, total, 301);
        total += 301;
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), options(4096)).unwrap();
    check_against_scan(&store, total);
    store.close().unwrap();
}

/// Items with types and a frequent tag: a sealed segment where the tag never occurs with the
/// item's types answers "none" from the types the tag occurs with (found once, kept); where it
/// does, the walk finds the exact events. Both directions, conditions and reads, against a scan.
#[test]
fn types_with_a_frequent_tag_answer_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { segment_size: 160 << 10, ..options(4 << 20) }).unwrap();
    let mut i = 0u64;
    while i < 12_000 {
        // The hot entity has types A and B; C occurs only on other entities, and A on the hot
        // entity only in the first 5,000 events.
        let batch: Vec<Event> = (i..i + 100)
            .map(|j| {
                let (entity, kind) = if j % 3 == 0 {
                    ("entity:hot".to_string(), if j < 5000 && j % 2 == 0 { "A" } else { "B" })
                } else {
                    (format!("entity:{j}"), "C")
                };
                Event::new(kind, [entity], vec![1u8; 8])
            })
            .collect();
        store.append(batch, None).unwrap();
        i += 100;
    }
    store.wait_for_sealing();
    let sealed = files_with(dir.path(), "idx");
    assert!(sealed.len() >= 2, "the hot tag spans sealed segments: {:?}", fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>());
    for types in [vec!["C"], vec!["A"], vec!["B"], vec!["A", "C"]] {
        let query = Query::of([QueryItem::new(types.clone(), ["entity:hot"])]);
        for backwards in [false, true] {
            let read = |planner| {
                store.set_planner(planner);
                let events = store.read(&query, ReadOptions { backwards, ..Default::default() }).unwrap().collect_all().unwrap();
                store.set_planner(Planner::Auto);
                events.into_iter().map(|e| e.position.get()).collect::<Vec<_>>()
            };
            let scanned = read(Planner::ForceScan);
            assert_eq!(read(Planner::Auto), scanned, "{types:?} backwards {backwards}");
            assert_eq!(read(Planner::ForceIndex), scanned, "{types:?} backwards {backwards}");
        }
        let first = store.read(&query, ReadOptions { limit: Some(1), ..Default::default() }).unwrap().collect_all().unwrap();
        let condition = lapilli_core::AppendCondition::new(query.clone()).after(Position(0));
        let outcome = store.append(vec![Event::new("D", ["guarded"], vec![])], Some(condition));
        match first.first() {
            Some(event) => assert_eq!(outcome.unwrap_err().position(), Some(event.position), "{types:?}"),
            None => assert!(outcome.is_ok(), "{types:?}: nothing matches, so the condition holds"),
        }
    }
    store.close().unwrap();
}
