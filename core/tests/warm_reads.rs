//! A warm read asks the kernel for what lies ahead of it a bounded number of times (each ask is
//! up to two `mincore` calls and an `madvise`), not once per event. The JVM face's profile found
//! a scan paying two asks an event over the last 32K index entries of every sealed part (and a
//! backwards walk near the start of a segment's log): 48 % of its reading thread's CPU, and the
//! Rust figure it was measured against 4 to 5 times too low.

mod common;

use common::buffered;
use lapilli_core::{Event, Query, ReadOptions, Store};

fn asks_during(read: impl FnOnce() -> usize) -> (u64, usize) {
    let before = Store::prefetch_requests_on_this_thread();
    let events = read();
    (Store::prefetch_requests_on_this_thread() - before, events)
}

#[test]
fn a_warm_read_asks_ahead_a_bounded_number_of_times() {
    let dir = tempfile::tempdir().unwrap();
    // 4 MiB segments of about 60-byte records: several sealed segments of ~60K events each.
    let store = Store::open(dir.path(), buffered(4 << 20)).unwrap();
    let total = 200_000u64;
    for start in (0..total).step_by(5000) {
        let batch = (start..start + 5000)
            .map(|i| Event::new("E", ["hot".to_string(), format!("n:{}", i % 7)], vec![1; 16]))
            .collect();
        store.append(batch, None).unwrap();
    }
    store.wait_for_sealing();
    let count = |query: &Query, backwards: bool| {
        let mut read = store.read(query, ReadOptions { backwards, ..ReadOptions::default() }).unwrap();
        read.visit(usize::MAX, |_| ()).unwrap()
    };
    for query in [Query::all(), Query::for_tags(["hot"]), Query::for_tags(["n:3"])] {
        for backwards in [false, true] {
            count(&query, backwards); // warm
            let (asks, events) = asks_during(|| count(&query, backwards));
            assert!(events > 20_000, "{query:?}: {events} events");
            // About one ask per 2 MiB of log and per 32K index entries, two per segment start:
            // a few dozen here; once per event would be hundreds of thousands.
            assert!(asks < 200, "{query:?} backwards {backwards}: {asks} prefetch asks for {events} events");
        }
    }
    store.close().unwrap();
}
