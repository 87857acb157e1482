//! What a long-running handle keeps mapped does not grow with the segments sealed while it
//! runs: alone in its test binary, since it counts the process's mappings (`/proc/self/maps`),
//! which other tests' stores would move; its own tests run one at a time for the same reason.

mod common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::buffered;
use lapilli_core::{Event, Query, ReadOptions, Store};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

/// Appends 2,000 batches of four 1 KB events to `store`, whose segments are 16 KiB: some 667
/// segments sealed.
fn fill_small_segments(store: &Store) {
    for i in 0..2000u32 {
        let batch = (0..4).map(|j| Event::new("Medium", [format!("m:{i}:{j}")], vec![(i ^ j) as u8; 1000])).collect();
        store.append(batch, None).unwrap();
    }
}

/// The writer's mapping of each segment was kept once the segment was sealed, one more at
/// every roll-over (from 58 to 729 mappings over 667 segments), until `vm.max_map_count`
/// (65,530 by default) left the writer unable to map its next segment. A sealed segment is now
/// published as open publishes one, its log loaded by the first read that needs it. Found by
/// the review of 2026-12-04 (late).
#[cfg(target_os = "linux")]
#[test]
fn the_writer_keeps_no_mapping_per_segment_it_sealed() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(16 << 10)).unwrap();
    let before = mappings();
    fill_small_segments(&store);
    store.wait_for_sealing();
    let segments = common::segment_bases(dir.path()).len();
    assert!(segments > 500, "only {segments} segments");
    let grown = mappings().saturating_sub(before);
    assert!(grown < 50, "{grown} more mappings after {segments} segments were sealed");
    // Every event still reads back (small segments are copied by the read that loads them).
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().count(), 8000);
    assert!(mappings().saturating_sub(before) < 50, "the full read mapped the small segments");
    store.close().unwrap();
}

/// The same for a read-only handle following the writer: the segment it followed kept its
/// mapping once the writer's index file for it was adopted (671 more mappings after 667
/// segments). Found by the second review of 2026-12-04 (late).
#[cfg(target_os = "linux")]
#[test]
fn a_follower_keeps_no_mapping_per_segment_it_followed() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(16 << 10)).unwrap();
    store.append(vec![Event::new("Medium", ["first"], vec![1u8; 10])], None).unwrap();
    let follower = Store::open_read_only(dir.path()).unwrap();
    let before = mappings();
    fill_small_segments(&store);
    store.wait_for_sealing();
    let head = store.head().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while follower.head().unwrap() < head {
        assert!(Instant::now() < deadline, "the follower did not catch up");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its polls adopt the index files of the segments behind the head.
    let deadline = Instant::now() + Duration::from_secs(30);
    while follower.tail_indexed_segments() > 2 {
        assert!(Instant::now() < deadline, "{} segments still indexed in memory", follower.tail_indexed_segments());
        std::thread::sleep(Duration::from_millis(20));
    }
    let segments = common::segment_bases(dir.path()).len();
    let grown = mappings().saturating_sub(before);
    assert!(grown < 50, "{grown} more mappings after the follower followed {segments} segments");
    assert_eq!(follower.read(&Query::all(), ReadOptions::default()).unwrap().count(), 8001);
    follower.close().unwrap();
    store.close().unwrap();
}
