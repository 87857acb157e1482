//! From the third adversarial review (of the parts' tiers and backpressure, open's part
//! handling, and waiting without threads): each test here failed before the fix named in its
//! comment.

mod common;

use common::{files_with, segment_path};

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
