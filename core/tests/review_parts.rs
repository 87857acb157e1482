//! From the adversarial review of the parts change: short sessions leave no pile of part files,
//! readers, a follower and conditions stay exact while parts are sealed and merged, and a merged
//! index with wide type ids equals the one built from the log.

mod common;

use common::files_with;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lapilli_core::{AppendCondition, Durability, Event, Options, Query, ReadOptions, Store};


fn event(i: u64) -> Event {
    let mut tags = vec![format!("entity:{i}")];
    if i % 2 == 0 {
        tags.push("hot".to_string());
    }
    Event::new(format!("Type{}", i % 7), tags, vec![(i % 251) as u8; 40 + (i % 60) as usize])
}

/// Each open/close of a store writes the last part's file at close, however small: a store
/// used by short sessions (a CLI, a cron job, a test suite) gets one part file per session in
/// its active segment, with no bound from `part_bytes` or `segment_size`. Every later open
/// opens and checks each of them, publishes one segment entry per part, and every read and
/// condition check walks them all; the roll-over merges them all at once.
#[test]
fn part_files_stay_bounded_by_part_bytes_across_short_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 1 << 20, ..Options::default() };
    for i in 0..200u64 {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        store.append(vec![event(i)], None).unwrap();
        store.close().unwrap();
    }
    let parts = files_with(dir.path(), "part");
    // 200 events of ~150 bytes are far below one part (4 MiB) and one segment (1 MiB).
    assert!(parts.len() <= 2, "{} part files for 200 events (~30 KiB of log)", parts.len());
}

/// Readers of both handles (and a follower) and conditions answer exactly while parts are
/// sealed, merged and replaced by their segment's index, parts of every tier included.
#[test]
fn readers_and_conditions_stay_exact_while_parts_are_sealed_and_merged() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 16 << 10, part_bytes: 1, ..Options::default() };
    let store = Arc::new(Store::open(dir.path(), options.clone()).unwrap());
    store.append(vec![event(0)], None).unwrap();
    let follower = Arc::new(Store::open_read_only(dir.path()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for (k, handle) in [store.clone(), store.clone(), follower.clone()].into_iter().enumerate() {
        let stop = stop.clone();
        readers.push(std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                rounds += 1;
                let backwards = rounds % 2 == 1;
                let read = handle.read(&Query::all(), ReadOptions { backwards, ..Default::default() }).unwrap();
                let head = read.head().get();
                let all = read.collect_all().unwrap();
                let mut positions: Vec<u64> = all.iter().map(|e| e.position.get()).collect();
                if backwards {
                    positions.reverse();
                }
                assert_eq!(positions, (1..=head).collect::<Vec<_>>(), "reader {k} backwards {backwards}");
                for e in &all {
                    let expected = event(e.position.get() - 1);
                    assert_eq!((&e.event_type, &e.data), (&expected.event_type, &expected.data), "reader {k}");
                }
                let read = handle.read(&Query::for_tags(["hot"]), ReadOptions { backwards, ..Default::default() }).unwrap();
                let head = read.head().get();
                let hot = read.collect_all().unwrap().len() as u64;
                assert_eq!(hot, head.div_ceil(2), "reader {k}: hot events up to {head}");
            }
            rounds
        }));
    }
    let mut i = 1u64;
    while i < 3000 {
        let n = 1 + i % 3;
        let batch: Vec<Event> = (i..i + n).map(event).collect();
        // A condition on an entity that exists (position i/2 + 1 holds entity i/2) must fail,
        // whichever part or merged segment holds it; one on a fresh entity must pass.
        let old = i / 2;
        let conflict = AppendCondition::new(Query::for_tags([format!("entity:{old}")]));
        let err = store.append(batch.clone(), Some(conflict)).unwrap_err();
        assert!(err.to_string().contains(&format!("{}", old + 1)), "{err}");
        let fresh = AppendCondition::new(Query::for_tags([format!("entity:{}", i + 100_000)]));
        store.append(batch, Some(fresh)).unwrap();
        i += n;
    }
    store.wait_for_sealing();
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    store.close().unwrap();
    let store = Store::open(dir.path(), options).unwrap();
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(all.len() as u64, i);
    assert!(files_with(dir.path(), "log").len() > 10);
}

/// A segment with more than 65 536 types, in parts of fewer: the merged index file takes the
/// wide type column, byte for byte the file built from the log.
#[test]
fn merged_index_with_wide_types_equals_the_one_built_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 8 << 20, part_bytes: 512 << 10, ..Options::default() };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let total = 70_000u64;
    let mut i = 0;
    while i < total {
        let batch: Vec<Event> = (i..(i + 500).min(total))
            .map(|j| {
                let mut tags = vec![format!("e{}", j % 5000)];
                if j % 3 == 0 {
                    tags.push("third".into());
                }
                Event::new(format!("T{j}"), tags, vec![1])
            })
            .collect();
        i += batch.len() as u64;
        store.append(batch, None).unwrap();
    }
    // Into the next segment, so the first is merged.
    let big = Event::new("Big", Vec::<String>::new(), vec![0u8; 7 << 20]);
    let _ = store.append(vec![big], None);
    store.append(vec![Event::new("After", Vec::<String>::new(), vec![1])], None).unwrap();
    store.wait_for_sealing();
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(!indexes.is_empty());
    let merged: Vec<Vec<u8>> = indexes.iter().map(|p| fs::read(p).unwrap()).collect();
    for index in &indexes {
        fs::remove_file(index).unwrap();
    }
    let store = Store::open(dir.path(), options).unwrap();
    store.close().unwrap();
    for (index, merged) in indexes.iter().zip(&merged) {
        assert!(fs::read(index).unwrap() == *merged, "{} differs from the merged file", index.display());
    }
}
