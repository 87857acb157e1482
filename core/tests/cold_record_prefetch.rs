//! A cold read's few records are asked for whole, ahead of the walk. Alone in its test binary:
//! it reads a process-wide counter (the asks are made on the warm-up's threads too), which a
//! cold read of another test running beside it would move.

mod common;


use common::buffered;
use lapilli_core::{Event, Query, ReadOptions, Store};

/// A cold read of a rare tag asks for each of its records whole before touching any: records
/// of 1,500 bytes, most of which cross a page, were asked for 512 bytes at a time (a guess: the
/// length is in the record), so each one starting in its page's last 1.5 KiB faulted again on
/// its second page, synchronously. The pages are dropped with the store closed (no mapping
/// keeps them), so the read finds its sealed segments cold.
#[test]
fn a_cold_rare_read_asks_for_each_record_whole() {
    const RARE_DATA: u64 = 1500;
    // Its frame (8 bytes), the payload's fixed fields (11) and its type and tag with their
    // lengths: "Rare", "rare".
    const RARE_RECORD: u64 = 8 + 11 + 2 + 4 + 4 + RARE_DATA;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    for start in (0..40_000u64).step_by(1000) {
        let batch = (start..start + 1000)
            .map(|i| {
                if i % 500 == 250 {
                    Event::new("Rare", ["rare"], vec![2; RARE_DATA as usize])
                } else {
                    Event::new("A", ["hot"], vec![1; 100])
                }
            })
            .collect();
        store.append(batch, None).unwrap();
    }
    store.wait_for_sealing();
    store.close().unwrap();
    drop(store);
    if !common::evict_store_pages(dir.path()) {
        return;
    }
    // Rare events sit at positions 251, 751, ...; those below the active segment's base are in
    // sealed segments, each followed by a plain event of its batch, so the next offset bounds
    // each record exactly. (The active segment's index is in memory: nothing to ask ahead.)
    let active_base = *common::segment_bases(dir.path()).last().unwrap();
    let cold_rare = (0..80u64).map(|k| 251 + 500 * k).filter(|&p| p < active_base).count() as u64;
    assert!(cold_rare >= 40, "only {cold_rare} rare events in sealed segments");
    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    let before = Store::record_prefetch_bytes();
    let rare = store.read(&Query::for_tags(["rare"]), ReadOptions::default()).unwrap().visit(usize::MAX, |_| ()).unwrap();
    let asked = Store::record_prefetch_bytes() - before;
    assert_eq!(rare, 80);
    // Each record whole, once; or twice for a segment whose warm-up ask (on a `warm.rs` thread)
    // left its first page out of memory, so that the walk asked again: where `madvise` is
    // ignored (qemu-user) or readahead gave up under memory pressure. Asked 512 bytes at a
    // time, the total is no multiple of the record.
    let once = cold_rare * RARE_RECORD;
    assert!(
        asked % RARE_RECORD == 0 && (once..=2 * once).contains(&asked),
        "asked {asked} bytes ahead for {cold_rare} cold records of {RARE_RECORD} bytes (once: {once})"
    );
    store.close().unwrap();
}
