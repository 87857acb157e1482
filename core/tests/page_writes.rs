//! The writer writes whole pages: a group that reaches a new page is padded with zeros to that
//! page's end, so appending into free space the page cache has let go reads nothing from disk
//! first (`Writer::write_group`). One test in this file: it reads the I/O counters of the
//! store's writer thread (and, for its probe, of its own thread), which a test running beside
//! it could disturb.
#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

/// Bytes a thread has had read from storage so far (`/proc/thread-self/io` for this one, or
/// the `io` of a task of this process): the read a partial page write makes is counted to the
/// thread that writes.
fn read_bytes(task: &Path) -> u64 {
    let io = std::fs::read_to_string(task.join("io")).unwrap();
    let line = io.lines().find(|l| l.starts_with("read_bytes:")).unwrap();
    line["read_bytes:".len()..].trim().parse().unwrap()
}

/// The task directory of the store's writer thread (only one store is open at a time here).
/// A new thread names itself once it runs, which may be after `Store::open` returns: waited for.
fn writer_task() -> std::path::PathBuf {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let writers: Vec<_> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| Some(task.ok()?.path()))
            .filter(|task| std::fs::read_to_string(task.join("comm")).unwrap_or_default().trim_end() == "lapilli-writer")
            .collect();
        if writers.len() == 1 {
            return writers[0].clone();
        }
        assert!(writers.len() < 2 && std::time::Instant::now() < deadline, "writer threads: {writers:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn evict(file: &std::fs::File) {
    file.sync_all().unwrap();
    // SAFETY: plain syscall on a descriptor we own.
    assert_eq!(unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
}

/// Whether, in `dir`, writing part of a page the cache does not hold reads that page: what the
/// test is about. Not on tmpfs (no disk under it), where there is nothing to test.
fn partial_page_writes_read_here(dir: &Path) -> bool {
    let path = dir.join("probe");
    let file = OpenOptions::new().create_new(true).read(true).write(true).open(&path).unwrap();
    file.write_all_at(&[7u8; 4 * 4096], 0).unwrap();
    evict(&file);
    let this_thread = Path::new("/proc/thread-self");
    let before = read_bytes(this_thread);
    for page in 0..4 {
        file.write_all_at(&[1u8; 100], page * 4096 + 10).unwrap();
    }
    let read = read_bytes(this_thread) - before;
    std::fs::remove_file(&path).unwrap();
    if read == 0 {
        eprintln!("skipped: in {} a partial write of an evicted page reads nothing", dir.display());
    }
    read > 0
}

#[test]
fn appending_into_written_zeros_the_cache_let_go_reads_no_page_of_them() {
    let dir = common::disk_tempdir();
    if !partial_page_writes_read_here(dir.path()) {
        return;
    }
    let store_dir = dir.path().join("store");
    let options = Options { durability: Durability::Buffered, segment_size: 1 << 20, ..Options::default() };
    let store = Store::open(&store_dir, options.clone()).unwrap();
    store.append(vec![Event::new("First", ["n:0"], vec![1u8; 64])], None).unwrap();
    store.close().unwrap();
    // The free space as the zeroer's window (or a segment prepared before 2026-12-03) has it: zeros written and
    // on disk (an unwritten extent would read nothing either way).
    let segment = common::segment_path(&store_dir, 1);
    let file = OpenOptions::new().read(true).write(true).open(&segment).unwrap();
    let capacity = file.metadata().unwrap().len();
    file.write_all_at(&vec![0u8; (capacity - 8192) as usize], 8192).unwrap();
    evict(&file);

    let store = Store::open(&store_dir, options).unwrap();
    assert!(common::evict_store_pages(&store_dir));
    assert_eq!(common::resident_pages(&file), 0, "the segment's pages are out of the cache");
    let writer = writer_task();
    let before = read_bytes(&writer);
    // 48 appends of about 1 KiB, one by one: a dozen new pages, each met by a group that ends
    // inside it.
    for n in 1..=48u32 {
        store.append(vec![Event::new("Next", [format!("n:{n}")], vec![n as u8; 1000])], None).unwrap();
    }
    let read = read_bytes(&writer) - before;
    // The page that held the first event is read once, for the first group that writes into
    // it; with a group's last page written only in part, each of the dozen pages was read.
    assert!(read <= 4096, "appending read {read} bytes of the segment from disk");

    let events = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(events.len(), 49);
    assert!(events[1..].iter().enumerate().all(|(i, e)| e.data == vec![i as u8 + 1; 1000]));
    store.close().unwrap();
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), capacity, "the padding never grows the segment");
}
