//! From the second adversarial review of the parts change: merging parts costs what the parts
//! cost (not their square), and type sets of frequent tags stay exact across merged, carried
//! and covered parts.

mod common;

use common::files_with;
use std::fs;
use std::sync::Mutex;

use lapilli_core::{Durability, Event, Options, Planner, Query, QueryItem, ReadOptions, Store};

/// Tests here measure process-wide I/O counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());


fn event(i: u64) -> Event {
    let mut tags = vec![format!("entity:{i}")];
    if i % 2 == 0 {
        tags.push("hot".to_string());
    }
    Event::new(format!("Type{}", i % 7), tags, vec![(i % 251) as u8; 40])
}

fn append(store: &Store, from: u64, count: u64) {
    let mut i = from;
    while i < from + count {
        let batch: Vec<Event> = (i..(i + 20).min(from + count)).map(event).collect();
        i += batch.len() as u64;
        store.append(batch, None).unwrap();
    }
}

/// Bytes this process has handed to write(2) and friends so far (all threads).
fn written_bytes() -> u64 {
    let io = fs::read_to_string("/proc/self/io").unwrap();
    io.lines().find_map(|l| l.strip_prefix("wchar: ")).unwrap().trim().parse().unwrap()
}

/// The sealer merges the leading parts into the first one's file each time more than 8 pile up:
/// the merged file is rewritten (and fsynced, and loaded to verify) whole every 8 parts, so the
/// index bytes written for a segment grow with the square of its number of parts. Two equal
/// halves of one segment's events must cost about the same writes; the second costs several
/// times the first.
#[test]
fn compaction_writes_grow_linearly_with_the_segment() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 8 << 20, part_bytes: 8192, ..Options::default() };
    let store = Store::open(dir.path(), options).unwrap();
    let half = 25_000;
    let before = written_bytes();
    append(&store, 0, half);
    store.wait_for_sealing();
    let first = written_bytes() - before;
    let before = written_bytes();
    append(&store, half, half);
    store.wait_for_sealing();
    let second = written_bytes() - before;
    assert_eq!(files_with(dir.path(), "log").len(), 1, "one segment: no roll-over in the measure");
    store.close().unwrap();
    eprintln!("first half wrote {first} bytes, second half {second}");
    assert!(
        (second as f64) < 1.5 * first as f64,
        "the second half of the segment's events wrote {second} bytes, the first {first}: {:.2}x",
        second as f64 / first as f64
    );
}

fn positions(store: &Store, query: &Query, backwards: bool, planner: Planner) -> Vec<u64> {
    store.set_planner(planner);
    let events = store.read(query, ReadOptions { backwards, ..Default::default() }).unwrap().collect_all().unwrap();
    store.set_planner(Planner::Auto);
    events.into_iter().map(|e| e.position.get()).collect()
}

/// A hot entity whose types change over time, in small parts that the sealer merges: the
/// planner's "never" for a frequent tag (its type set found per part, merged part and sealed
/// segment) must agree with a scan, for reads and conditions, before and after a reopen that
/// carries the short last part on from its index file, and with a covered part file left by a
/// crash between a merge's rename and the removal of what it covered.
#[test]
fn type_sets_of_frequent_tags_stay_exact_across_merged_and_carried_parts() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 2 << 20, part_bytes: 16 << 10, ..Options::default() };
    let hot_event = |j: u64| {
        // Phases of 3,000 events: the hot entity is A, then B, then C; others are D.
        let kind = ["A", "B", "C"][((j / 3000) % 3) as usize];
        if j % 2 == 0 {
            Event::new(kind, ["entity:hot".to_string(), format!("n:{}", j % 5)], vec![1u8; 16])
        } else {
            Event::new("D", [format!("entity:{j}")], vec![2u8; 16])
        }
    };
    let check = |store: &Store, label: &str| {
        for types in [vec!["A"], vec!["B"], vec!["C"], vec!["D"], vec!["C", "D"]] {
            let query = Query::of([QueryItem::new(types.clone(), ["entity:hot"])]);
            for backwards in [false, true] {
                let scanned = positions(store, &query, backwards, Planner::ForceScan);
                assert_eq!(positions(store, &query, backwards, Planner::Auto), scanned, "{label} {types:?} {backwards}");
                assert_eq!(positions(store, &query, backwards, Planner::ForceIndex), scanned, "{label} {types:?} {backwards}");
            }
        }
    };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let mut i = 0;
    while i < 14_000 {
        let batch: Vec<Event> = (i..i + 50).map(hot_event).collect();
        store.append(batch, None).unwrap();
        i += 50;
    }
    store.wait_for_sealing();
    check(&store, "live");
    store.close().unwrap();
    let parts = files_with(dir.path(), "part");
    assert!(!parts.is_empty());
    // A crash after a merge's rename, before the parts it covered were removed.
    let name = parts[0].file_name().unwrap().to_string_lossy().into_owned();
    let mut pieces: Vec<&str> = name.split('.').collect();
    let covered = format!("{:020}", pieces[1].parse::<u64>().unwrap() + 3);
    pieces[1] = &covered;
    fs::copy(&parts[0], dir.path().join(pieces.join("."))).unwrap();
    let store = Store::open(dir.path(), options.clone()).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    check(&store, "reopened");
    store.append((i..i + 3000).map(hot_event).collect(), None).unwrap();
    store.wait_for_sealing();
    check(&store, "carried on");
    store.close().unwrap();
}
