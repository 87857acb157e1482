//! What a long-running handle keeps mapped does not grow with the segments its writer has
//! sealed, where open would copy them: alone in its test binary, since it counts the process's
//! mappings (`/proc/self/maps`), which other tests' stores would move.

mod common;

use common::buffered;
use lapilli_core::{Event, Query, ReadOptions, Store};

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

/// Segments of 16 KiB, which open copies into memory rather than maps (`COPY_UP_TO_BYTES`):
/// the writer's mapping of each was kept once it was sealed, one more at every roll-over (from
/// 58 to 729 mappings over 667 segments), until `vm.max_map_count` (65,530 by default) left the
/// writer unable to map its next segment. Found by the review of 2026-12-04 (late).
#[cfg(target_os = "linux")]
#[test]
fn sealed_small_segments_keep_no_mapping_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(16 << 10)).unwrap();
    let before = mappings();
    for i in 0..2000u32 {
        let batch = (0..4).map(|j| Event::new("Medium", [format!("m:{i}:{j}")], vec![(i ^ j) as u8; 1000])).collect();
        store.append(batch, None).unwrap();
    }
    store.wait_for_sealing();
    let segments = common::segment_bases(dir.path()).len();
    assert!(segments > 500, "only {segments} segments");
    let grown = mappings().saturating_sub(before);
    assert!(grown < 50, "{grown} more mappings after {segments} segments were sealed");
    // Every event still reads back, from the copies.
    assert_eq!(store.read(&Query::all(), ReadOptions::default()).unwrap().count(), 8000);
    store.close().unwrap();
}
