//! The writer's zeroer (`log/zero_ahead.rs`) as a store runs it: in a store's first segment with
//! `fsync` durability, not with `buffered`, not in a prepared segment, and gone after the
//! roll-over. One test in this file: it counts the process's zeroer threads.

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

/// Whether `dir` is on ext4 or XFS, where the zeroer runs.
fn zeroes_here(dir: &std::path::Path) -> bool {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain syscall filling a struct we own.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    let kind = fs.f_type as i64;
    kind == libc::EXT4_SUPER_MAGIC as i64 || kind == libc::XFS_SUPER_MAGIC as i64
}

fn event(n: u32) -> Event {
    Event::new("Filled", [format!("n:{n}")], n.to_le_bytes().repeat(256))
}

#[test]
fn the_zeroer_runs_in_a_first_segment_with_fsync_durability_and_stops_at_roll_over() {
    let dir = tempfile::tempdir().unwrap();
    if !zeroes_here(dir.path()) {
        eprintln!("skipped: {} is not on ext4 or XFS", dir.path().display());
        return;
    }
    let options = |durability| Options { durability, segment_size: 1 << 20, ..Options::default() };

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
        store.append(vec![event(n)], None).unwrap();
        n += 1;
    }
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
