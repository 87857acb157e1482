//! The writer's zeroer (`log/zero_ahead.rs`) as a store runs it: in every segment with `fsync`
//! durability (one at work at a time; a prepared segment's waits beside it), not with `buffered`, from the first page of a segment the writer
//! rolled over into, and writing no zeros ahead of a bulk load's large groups. One test in this
//! file: it counts the process's zeroer threads. Its stores are on the disk
//! (`common::disk_tempdir`): where that is not ext4 or XFS it has nothing to check and says so.
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

/// The first hole (unwritten or sparse space) of the file at or after `from`, and whether any
/// data (written blocks) follows it.
fn hole_and_data_after(path: &std::path::Path, from: u64) -> (i64, bool) {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: plain syscalls on a descriptor we own.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), from as libc::off_t, libc::SEEK_HOLE) };
    let data = unsafe { libc::lseek(file.as_raw_fd(), hole, libc::SEEK_DATA) };
    (hole, data >= 0)
}

#[test]
fn the_zeroer_runs_in_each_segment_with_fsync_durability_and_not_ahead_of_large_groups() {
    let dir = common::disk_tempdir();
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

    // Groups of 16 KiB: small, zeroed ahead of.
    let path = dir.path().join("fsync");
    let store = Store::open(&path, options(Durability::Fsync)).unwrap();
    wait_for_zeroers(1);
    let mut n = 0;
    while store.stats().unwrap().segments == 1 {
        store.append((n..n + 16).map(event).collect(), None).unwrap();
        n += 16;
        if n == 1024 {
            assert_eq!(zeroers(), 1, "1 MiB into a 16 MiB segment, the zeroer is at work");
            // The writer is about 1.1 MiB in; the zeroer keeps up to 8 MiB past it written.
            let deadline = Instant::now() + Duration::from_secs(10);
            while hole_and_data_after(&common::segment_path(&path, 1), 4096).0 < 4 << 20 {
                assert!(Instant::now() < deadline, "no zeros were written ahead of small groups");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    // The first segment's zeroer stopped at the roll-over, the second segment has its own (the
    // preparer's thread started it; it waits for the writer's first group in the segment).
    wait_for_zeroers(1);
    // And it zeros from the segment's first free page on: one group after the one that rolled
    // over, the first unwritten block is megabytes past them, not a lead's gap after them that
    // only the writer's own commits would fill.
    store.append((n..n + 16).map(event).collect(), None).unwrap();
    n += 16;
    let second = common::segment_files(&path).pop().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while hole_and_data_after(&second, 4096).0 < 4 << 20 {
        let (hole, _) = hole_and_data_after(&second, 4096);
        assert!(Instant::now() < deadline, "the segment rolled over into has unwritten space at {hole}, near its start");
        std::thread::sleep(Duration::from_millis(5));
    }
    let read: Vec<u32> = store
        .read(&Query::all(), ReadOptions::default())
        .unwrap()
        .map(|e| u32::from_le_bytes(e.unwrap().data[..4].try_into().unwrap()))
        .collect();
    assert_eq!(read, (0..n).collect::<Vec<_>>(), "the zeroer wrote over committed bytes");
    store.close().unwrap();
    assert_eq!(zeroers(), 0, "closing the store stops its zeroer");

    // A bulk load (groups of 256 KiB) into its second segment leaves the free space after its
    // bytes unwritten: the preparer writes no zeros, and the zeroer none ahead of large groups.
    // (That the writer keeps their average over the roll-over is not what this shows: the
    // group that rolls over is large and would set a new average whole.)
    let bulk = dir.path().join("bulk");
    let store = Store::open(&bulk, options(Durability::Fsync)).unwrap();
    let big = |m: u32| Event::new("Big", [format!("n:{m}")], m.to_le_bytes().repeat(1024));
    let mut m = 0;
    while store.stats().unwrap().segments == 1 {
        store.append((m..m + 64).map(big).collect(), None).unwrap();
        m += 64;
    }
    let second = common::segment_files(&bulk).pop().unwrap();
    let (hole, _) = hole_and_data_after(&second, 4096);
    for _ in 0..16 {
        store.append((m..m + 64).map(big).collect(), None).unwrap();
        m += 64;
    }
    std::thread::sleep(Duration::from_millis(100));
    let (hole_after, data_after) = hole_and_data_after(&second, 4096);
    assert!(hole < 1 << 20, "the second segment was written ahead before the bulk load reached it ({hole})");
    assert!((4 << 20..6 << 20).contains(&hole_after), "the bulk load's 4 MiB and no more were written (up to {hole_after})");
    assert!(!data_after, "zeros were written ahead of large groups, past {hole_after}");
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().count(), m as usize);
    store.close().unwrap();

    // Reopened, the active segment has unwritten space past its end: a zeroer again.
    let store = Store::open(&path, options(Durability::Fsync)).unwrap();
    wait_for_zeroers(1);
    for k in n..n + 200 {
        store.append(vec![event(k)], None).unwrap();
    }
    store.close().unwrap();
    assert_eq!(zeroers(), 0, "closing the store stops its zeroer");
}
