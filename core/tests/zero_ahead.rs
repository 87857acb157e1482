//! The writer's zeroer (`log/zero_ahead.rs`) as a store runs it: in a store's first segment with
//! `fsync` durability, not with `buffered`, not in a prepared segment, and gone once the first
//! segment is full. One test in this file: it counts the process's zeroer threads.
#![cfg(target_os = "linux")]

mod common;

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};
use std::time::{Duration, Instant};

/// Threads of this process named as the zeroer is.
fn zeroers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.as_ref().unwrap().path().join("comm")).unwrap_or_default();
            comm.trim_end() == "lapilli-zeroer"
        })
        .count()
}

fn wait_for_zeroers(count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while zeroers() != count {
        assert!(Instant::now() < deadline, "{} zeroer threads, expected {count}", zeroers());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn event(n: u32) -> Event {
    Event::new("Filled", [format!("n:{n}")], n.to_le_bytes().repeat(256))
}

#[test]
fn the_zeroer_runs_in_a_first_segment_with_fsync_durability_until_it_is_full() {
    let dir = tempfile::tempdir().unwrap();
    if !common::zeroes_ahead_here(dir.path()) {
        return;
    }
    // Larger than the zeroer's window (8 MiB), so it is still at work when the writer is 1 MiB in.
    let options = |durability| Options { durability, segment_size: 16 << 20, ..Options::default() };

    let buffered = Store::open(dir.path().join("buffered"), options(Durability::Buffered)).unwrap();
    for n in 0..200 {
        buffered.append(vec![event(n)], None).unwrap();
    }
    assert_eq!(zeroers(), 0, "with buffered durability no commit waits for a sync");
    buffered.close().unwrap();

    let path = dir.path().join("fsync");
    let store = Store::open(&path, options(Durability::Fsync)).unwrap();
    wait_for_zeroers(1);
    let mut n = 0;
    while store.stats().unwrap().segments == 1 {
        store.append((n..n + 16).map(event).collect(), None).unwrap();
        n += 16;
        if n == 1024 {
            assert_eq!(zeroers(), 1, "1 MiB into a 16 MiB segment, the zeroer is at work");
        }
    }
    // It stopped at the segment's end, or at the roll-over if the writer was ahead of it.
    wait_for_zeroers(0);
    let read: Vec<u32> = store
        .read(&Query::all(), ReadOptions::default())
        .unwrap()
        .map(|e| u32::from_le_bytes(e.unwrap().data[..4].try_into().unwrap()))
        .collect();
    assert_eq!(read, (0..n).collect::<Vec<_>>());
    store.close().unwrap();

    // Reopened, the active segment is the prepared one: written through, nothing to zero.
    let store = Store::open(&path, options(Durability::Fsync)).unwrap();
    for m in n..n + 200 {
        store.append(vec![event(m)], None).unwrap();
    }
    assert_eq!(zeroers(), 0, "a prepared segment has no unwritten space");
    store.close().unwrap();
}
