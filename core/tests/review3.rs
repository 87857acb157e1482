//! From the third adversarial review (of the parts' tiers and backpressure, open's part
//! handling, and waiting without threads): each test here failed before the fix named in its
//! comment.

mod common;

use common::{files_with, segment_path};

use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::Duration;

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn event(i: u64, data_len: usize) -> Event {
    Event::new(format!("Type{}", i % 5), [format!("entity:{i}"), "hot".to_string()], vec![(i % 251) as u8; data_len])
}

/// The parts of a segment are merged like the digits of a counter: only when the newest four
/// share a tier. A part that is already of a higher tier when it is written (one group larger
/// than four times `part_bytes`, a bulk load's big batch) stops the smaller parts before it
/// from ever merging: with a big group after every three ordinary parts, no four newest parts
/// ever share a tier, and the part files grow with the segment (an open reads a header each,
/// every walk and condition visits an entry each), not with the log of it.
#[test]
fn part_files_stay_few_when_big_groups_follow_small_parts() {
    let dir = tempfile::tempdir().unwrap();
    let part_bytes = 4096;
    let options = Options { durability: Durability::Buffered, segment_size: 8 << 20, part_bytes, ..Options::default() };
    let store = Store::open(dir.path(), options).unwrap();
    let mut i = 0u64;
    for _round in 0..40 {
        // Three parts of one ordinary group each (each group takes its part past part_bytes)...
        for _ in 0..3 {
            store.append(vec![event(i, part_bytes as usize + 100)], None).unwrap();
            i += 1;
        }
        // ...then one part made by one big group, of the next tier at once.
        store.append(vec![event(i, 5 * part_bytes as usize)], None).unwrap();
        i += 1;
    }
    store.wait_for_sealing();
    assert_eq!(files_with(dir.path(), "log").len(), 1, "one segment: no roll-over merged the parts");
    let parts = files_with(dir.path(), "part").len();
    // 160 parts of 4 to 20 KiB (about 1.1 MiB of log): the tiers of 4 KiB parts up to 1 MiB
    // are 0 to 4, at most 3 files each.
    assert!(parts <= 16, "{parts} part files for 160 parts of one segment");
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(all.len() as u64, i);
    store.close().unwrap();
    let store = Store::open(dir.path(), Options { part_bytes, ..Options::default() }).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    let hot = store.read(&Query::for_tags(["hot"]), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(hot.len() as u64, i);
    store.close().unwrap();
}

/// When a segment's index cannot be merged from its parts (a part whose file could not be
/// written is still answered from memory), the sealer builds it from the log and removes every
/// part file. A read that began before (its snapshot holds the parts' entries) and had not yet
/// used a part found at open (its body is loaded on first use, by path) then failed with
/// "cannot read ... No such file or directory" instead of answering.
#[test]
fn a_read_begun_before_a_segment_is_built_from_its_log_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 64 << 10, part_bytes: 1, ..Options::default() };
    // First session: every append its own part; parts merge; close.
    let store = Store::open(dir.path(), options.clone()).unwrap();
    for i in 0..40 {
        store.append(vec![event(i, 100)], None).unwrap();
    }
    store.close().unwrap();
    assert!(files_with(dir.path(), "part").len() >= 2, "parts left for the next open to find");

    // Second session: the parts are found (headers only); the next part's file cannot be
    // written (its temporary name is taken by a directory), so the segment's index will be
    // built from the log.
    let store = Store::open(dir.path(), options).unwrap();
    let head = store.head().unwrap().get();
    let log = segment_path(dir.path(), 1);
    let blocked = log.with_extension(format!("{:020}.idx.tmp", head + 1));
    std::fs::create_dir(&blocked).unwrap();
    let read = store.read(&Query::all(), ReadOptions::default()).unwrap();
    let mut i = head;
    // Fill the segment and roll over.
    while files_with(dir.path(), "log").len() < 2 {
        store.append(vec![event(i, 1000)], None).unwrap();
        i += 1;
    }
    store.wait_for_sealing();
    assert!(files_with(dir.path(), "idx").len() == 1, "the first segment is sealed");
    let answered = read.collect_all().map(|events| events.len() as u64);
    std::fs::remove_dir(&blocked).unwrap();
    assert_eq!(answered.unwrap(), head);
    store.close().unwrap();
}

/// `close` holds the handle's thread lock until it has joined the completion thread. A
/// callback on that thread that closes the store too (an error handler, say) while another
/// thread's close is under way waited for that lock, and that close waited for the callback:
/// both hung forever.
#[test]
fn a_callback_that_closes_the_store_during_a_close_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options::default()).unwrap());
    let (closed_in_callback, callback_done) = channel();
    let in_callback = store.clone();
    store.submit(vec![event(0, 10)], None).on_complete(move |result| {
        result.unwrap();
        // Until the other close has begun (it marks the handle closed first)...
        while in_callback.head().is_ok() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // ...then close from here too.
        closed_in_callback.send(in_callback.close()).unwrap();
    });
    let closer = store.clone();
    let (closed, close_done) = channel();
    std::thread::spawn(move || closed.send(closer.close()).unwrap());
    // A generous bound for a loaded machine: both closes take milliseconds when they do not hang.
    let outer = close_done.recv_timeout(Duration::from_secs(60)).expect("close hung");
    outer.unwrap();
    callback_done.recv_timeout(Duration::from_secs(60)).expect("the callback's close hung").unwrap();
    // The store is closed: the lock is free.
    drop(store);
    Store::open(dir.path(), Options::default()).unwrap().close().unwrap();
}

/// Bytes of `path`'s first `len` bytes in the page cache (mincore on a mapping made for the
/// question: a mapping reads no page in until it is touched).
fn resident_bytes(path: &Path, len: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only view of a file nobody writes meanwhile; only its residency is read.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let page = 4096;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: the mapping covers at least `len` bytes and `resident` has a byte per page.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, resident.as_mut_ptr()) };
    assert_eq!(rc, 0);
    resident.iter().filter(|&&r| r & 1 != 0).count() * page
}

/// Drops `path`'s pages from the page cache (they are clean: the store fsynced them).
fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// Open dropped the whole active segment's cached pages (`DONTNEED` from byte 0), to be sure
/// that what it scans after the last part file is what the disk holds, and only then mapped the
/// segment and read its header and the last part's closing marker and last event through the
/// mapping, before advising it for point reads: each of those faults read around itself as much
/// as the device's read-ahead (8 MiB on this machine). So after a clean close, with
/// `scanned_log_bytes` 0, an open read megabytes of log from the disk, and an open of a store
/// whose active segment was cached threw that cache away (up to `segment_size`, 256 MiB by
/// default) for reads to fetch again. What needs dropping is only what open reads: the header,
/// and from the folio the last part ends in.
#[test]
fn reopening_reads_no_log_it_does_not_scan_and_keeps_the_cached_parts() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        Options { durability: Durability::Buffered, segment_size: 64 << 20, part_bytes: 256 << 10, ..Options::default() };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let mut i = 0;
    while i < 16_000 {
        store.append((i..i + 100).map(|j| event(j, 500)).collect(), None).unwrap();
        i += 100;
    }
    store.close().unwrap();
    // Gone, as in a restarted process: its mappings would keep the pages they touched cached.
    drop(store);
    let log = segment_path(dir.path(), 1);
    let measured = 8 << 20;

    // Cold: nothing of the log cached before the open.
    evict(&log);
    assert_eq!(resident_bytes(&log, 64 << 20), 0);
    let store = Store::open(dir.path(), options.clone()).unwrap();
    assert_eq!(store.recovery().scanned_log_bytes, 0, "{:?}", store.recovery());
    let read_at_open = resident_bytes(&log, 64 << 20);
    store.close().unwrap();
    drop(store);
    assert!(read_at_open <= 256 << 10, "a cold open that scanned no log read {read_at_open} bytes of it");

    // Warm: the log cached before the open stays cached.
    let _ = std::fs::read(&log).unwrap();
    let before = resident_bytes(&log, measured);
    assert_eq!(before, measured);
    let store = Store::open(dir.path(), options).unwrap();
    let after = resident_bytes(&log, measured);
    store.close().unwrap();
    // Open drops the header's 2 MiB (the largest folio: the kernel drops whole folios only)
    // and what it scans; the other parts' pages stay.
    let kept = before - (2 << 20);
    assert!(after as f64 > 0.9 * kept as f64, "{after} bytes of the log cached after a reopen, {before} before");
}

/// The writer waits for the sealer when more than 4 of its jobs are pending, inside the commit
/// of the group that started a part: after it has answered that group's blocking waiters, but
/// before it hands the group's callbacks and wakers to the completion thread. An append
/// answered through `on_complete` (every async face's) stayed unanswered, committed, for as
/// long as the sealer took (a segment's merge: seconds), and a subscription waiting without a
/// thread was not woken for it either.
#[test]
fn an_append_committed_while_the_writer_waits_for_the_sealer_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 1 << 20, part_bytes: 1, ..Options::default() };
    let store = Store::open(dir.path(), options).unwrap();
    // The sealer's first job stalls: opening a FIFO for writing waits for a reader.
    let stall = segment_path(dir.path(), 1).with_extension(format!("{:020}.idx.tmp", 1));
    let fifo = std::ffi::CString::new(stall.to_str().unwrap()).unwrap();
    // SAFETY: plain syscall with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    for i in 0..4 {
        store.append(vec![event(i, 10)], None).unwrap();
    }
    // The fifth part takes the sealer's backlog past 4: the writer waits for it.
    let subscription = store.subscribe(&Query::for_tags(["entity:4"]), lapilli_core::Position::ZERO).unwrap();
    let (woken, wake) = channel();
    subscription.on_ready(move || woken.send(()).unwrap());
    let (answered, answer) = channel();
    store.submit(vec![event(4, 10)], None).on_complete(move |result| answered.send(result).unwrap());
    let got_answer = answer.recv_timeout(Duration::from_secs(10));
    let got_wake = wake.recv_timeout(Duration::from_secs(10));
    // Let the sealer go on (it fails on the FIFO, and answers that part from memory).
    let reader = std::thread::spawn(move || std::fs::read(&stall));
    let _ = reader.join();
    assert_eq!(got_answer.expect("the append's callback never ran").unwrap().first.get(), 5);
    got_wake.expect("the subscription was not woken");
    assert_eq!(subscription.try_next_batch(10).unwrap().unwrap().len(), 1);
    store.close().unwrap();
}

/// Parts of uneven sizes (groups from one small event to many times `part_bytes`), so that
/// parts are merged by both rules, at every tier: the segment index merged from them is byte
/// for byte the one built from the log, and reads answer the same from either.
#[test]
fn a_segment_merged_from_uneven_parts_equals_the_one_built_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 1 << 20, part_bytes: 4096, ..Options::default() };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let mut rng = common::Rng::new(3);
    let mut i = 0u64;
    while files_with(dir.path(), "log").len() < 4 {
        let (count, size) = match rng.below(10) {
            0 => (rng.range(20, 80), rng.range(200, 600) as usize),
            1..=3 => (rng.range(5, 20), rng.range(100, 300) as usize),
            _ => (1, rng.range(10, 200) as usize),
        };
        store.append((i..i + count).map(|j| event(j % 3000, size)).collect(), None).unwrap();
        i += count;
    }
    store.wait_for_sealing();
    let expected: Vec<u64> = store
        .read(&Query::for_tags(["entity:7"]), ReadOptions::default())
        .unwrap()
        .collect_all()
        .unwrap()
        .iter()
        .map(|e| e.position.get())
        .collect();
    store.close().unwrap();
    drop(store);
    let indexes = files_with(dir.path(), "idx");
    assert_eq!(indexes.len(), 3);
    let merged: Vec<Vec<u8>> = indexes.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for index in &indexes {
        std::fs::remove_file(index).unwrap();
    }
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes.len(), 3);
    let read: Vec<u64> = store
        .read(&Query::for_tags(["entity:7"]), ReadOptions::default())
        .unwrap()
        .collect_all()
        .unwrap()
        .iter()
        .map(|e| e.position.get())
        .collect();
    assert_eq!(read, expected);
    store.close().unwrap();
    for (index, merged) in indexes.iter().zip(&merged) {
        assert!(std::fs::read(index).unwrap() == *merged, "{} differs from the merged file", index.display());
    }
}

const BROKEN_STDERR_CHILD: &str = "LAPILLI_REVIEW3_BROKEN_STDERR";

/// The child's side of the next test (a no-op when run as an ordinary test): a store whose
/// first part's index file cannot be written, appended to and closed.
#[test]
fn broken_stderr_child() {
    let Some(dir) = std::env::var_os(BROKEN_STDERR_CHILD) else { return };
    let dir = Path::new(&dir);
    let options = Options { durability: Durability::Buffered, segment_size: 1 << 20, part_bytes: 1, ..Options::default() };
    let store = Store::open(dir, options).unwrap();
    std::fs::create_dir(segment_path(dir, 1).with_extension(format!("{:020}.idx.tmp", 1))).unwrap();
    for i in 0..20 {
        store.append(vec![event(i, 10)], None).unwrap();
    }
    store.close().unwrap();
    println!("closed");
}

/// The sealer reports an index file it cannot write on stderr, with `eprintln!`, which panics
/// when stderr cannot be written (a daemon whose log pipe's reader is gone: EPIPE). That panic
/// was outside the sealer's guard: the thread died with its job still counted as pending, the
/// writer then waited for it forever at the next part (the backlog bound), and every append and
/// `close` with it. A message that cannot be printed must cost the message only.
#[test]
fn a_sealer_failure_with_stderr_gone_does_not_stop_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::child_test("broken_stderr_child")
        .env(BROKEN_STDERR_CHILD, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads the child's stderr: its writes fail with EPIPE.
    drop(child.stderr.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = status.expect("the child's appends or close hung");
    assert!(status.success() && stdout.contains("closed"), "{status}: {stdout}");
}

/// Lost wake-ups: consumers that wait without a thread (take what is there, else register
/// `on_ready` and sleep until it fires, as the Node and asyncio faces do) race commits from two
/// appending threads; every consumer must see every event, and none may be left waiting.
#[test]
fn consumers_waiting_through_on_ready_miss_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 256 << 10, part_bytes: 8192, ..Options::default() };
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let per_writer = 3000u64;
    let consumers: Vec<_> = (0..6)
        .map(|k| {
            let subscription = store.subscribe(&Query::for_tags(["hot"]), lapilli_core::Position::ZERO).unwrap();
            std::thread::spawn(move || {
                let mut seen = 0u64;
                let mut last = 0u64;
                while seen < 2 * per_writer {
                    let batch = subscription.try_next_batch(1 + k * 50).unwrap().expect("not closed");
                    if batch.is_empty() {
                        let (ready, wait) = channel();
                        subscription.on_ready(move || {
                            let _ = ready.send(());
                        });
                        wait.recv_timeout(Duration::from_secs(60)).expect("a consumer was never woken");
                        continue;
                    }
                    for event in batch {
                        assert!(event.position.get() > last);
                        last = event.position.get();
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    store.submit(vec![event(w * per_writer + i, 20)], None).wait().unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    for consumer in consumers {
        assert_eq!(consumer.join().unwrap(), 2 * per_writer);
    }
    store.close().unwrap();
}

/// `part_bytes` and durability changed between sessions (parts from one session get other
/// tiers under the next one's `part_bytes`, a last part short under one is not under the next):
/// every open reads no log after a clean close, the part files stay few, and reads by index
/// answer what a scan does.
#[test]
fn parts_stay_exact_and_few_when_part_bytes_change_between_opens() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = common::Rng::new(14);
    let mut i = 0u64;
    for session in 0..12 {
        let part_bytes = [1, 4096, 1 << 20, 700, 64 << 10][session % 5];
        let durability = if session % 3 == 0 { Durability::Fsync } else { Durability::Buffered };
        let options = Options { durability, segment_size: 4 << 20, part_bytes, ..Options::default() };
        let store = Store::open(dir.path(), options).unwrap();
        assert_eq!(store.recovery().scanned_log_bytes, 0, "session {session}: {:?}", store.recovery());
        assert_eq!(store.head().unwrap().get(), i);
        for _ in 0..60 {
            let count = if rng.chance(10) { rng.range(30, 120) } else { rng.range(1, 6) };
            store.append((i..i + count).map(|j| event(j % 500, 120)).collect(), None).unwrap();
            i += count;
        }
        store.wait_for_sealing();
        for query in [Query::all(), Query::for_tags(["entity:7"]), Query::for_tags(["hot"])] {
            store.set_planner(lapilli_core::Planner::ForceScan);
            let scanned = store.read(&query, ReadOptions::default()).unwrap().collect_all().unwrap();
            store.set_planner(lapilli_core::Planner::ForceIndex);
            let indexed = store.read(&query, ReadOptions::default()).unwrap().collect_all().unwrap();
            assert_eq!(indexed, scanned, "session {session}");
        }
        store.close().unwrap();
        let parts = files_with(dir.path(), "part").len();
        assert!(parts <= 24, "session {session}: {parts} part files");
    }
    assert_eq!(files_with(dir.path(), "log").len(), 1, "one segment: its parts were never merged away by a roll-over");
}

/// `next_batch` held the subscription's consumer lock while it waited for a matching event. A
/// callback on the completion thread taking what is new on the same subscription
/// (`try_next_batch`, as a face waiting through `on_ready` does) then waited for that event too,
/// and every callback and waker of the store queued behind it: an append's `on_complete` was not
/// called although the append was committed.
#[test]
fn a_blocked_consumer_does_not_stall_the_completion_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options::default()).unwrap());
    let subscription = Arc::new(store.subscribe(&Query::for_tags(["rare"]), lapilli_core::Position::ZERO).unwrap());
    let blocked = subscription.clone();
    let consumer = std::thread::spawn(move || blocked.next_batch(10, Some(Duration::from_secs(120))));
    // Let the consumer reach its wait.
    std::thread::sleep(Duration::from_millis(200));
    let in_callback = subscription.clone();
    let (took, taken) = channel();
    subscription.on_ready(move || took.send(in_callback.try_next_batch(10).map(|b| b.map(|b| b.len()))).unwrap());
    let (answered, answer) = channel();
    store.append(vec![event(1, 10)], None).unwrap();
    store.submit(vec![event(2, 10)], None).on_complete(move |result| answered.send(result).unwrap());
    let got_answer = answer.recv_timeout(Duration::from_secs(10));
    subscription.close();
    let _ = consumer.join().unwrap();
    assert_eq!(got_answer.expect("an append's callback waited for a blocked consumer of a subscription").unwrap().first.get(), 2);
    assert_eq!(taken.recv_timeout(Duration::from_secs(10)).unwrap().unwrap(), Some(0));
    store.close().unwrap();
}
