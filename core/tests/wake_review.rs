//! From the review of the group's single wake-up (helper-72, 2026-12-05; `writer/answers.rs`):
//! each test here failed on the change as first written (085b784) or on a mutant of it
//! (the second, helper-73, made the shutdown test repeat and the refusals wake before the write).
#![cfg(feature = "fault-injection")]

use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use lapilli_core::fault::{self, Fault};
use lapilli_core::{AppendCondition, Durability, ErrorKind, Event, Options, Query, Store};

/// Fault points are the process's: one test at a time holds them.
static SERIAL: Mutex<()> = Mutex::new(());

/// Disarms every fault point and lets a held one go when the test ends, failed or not.
struct Faults(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Faults {
    fn take() -> Faults {
        Faults(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        fault::disarm_all();
        fault::release_held();
    }
}

fn wait_until_held() {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fault::holding() {
        assert!(Instant::now() < deadline, "the writer never reached the held fault point");
        thread::sleep(Duration::from_millis(1));
    }
}

/// A request the writer refuses (a conflict with an append staged before it in the same group)
/// is no part of the group's write: its blocked caller hears so while the group is still in its
/// fsync. As first written, the refusal's wake waited for the end of the group.
#[test]
fn a_refused_blocked_caller_is_not_held_behind_its_groups_fsync() {
    let _faults = Faults::take();
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Fsync, segment_size: 1 << 20, part_bytes: 1 << 20, ..Options::default() };
    let store = Store::open(dir.path(), options).unwrap();
    store.append(vec![Event::new("E", ["seed"], vec![])], None).unwrap();
    let head = store.head().unwrap();
    // A first group, held in its fsync while the next two requests queue behind it.
    fault::arm("commit.fsync", Fault::Hold, 0);
    let first = store.submit(vec![Event::new("E", ["first"], vec![])], None);
    wait_until_held();
    fault::arm("commit.fsync", Fault::Hold, 0);
    let staged = store.submit(vec![Event::new("E", ["x"], vec![])], None);
    let guarded = store.submit(vec![Event::new("E", ["r"], vec![])], Some(AppendCondition::new(Query::for_tags(["x"])).after(head)));
    let (answer, answered) = channel();
    thread::spawn(move || answer.send(guarded.wait()).unwrap());
    thread::sleep(Duration::from_millis(200)); // the guarded caller is blocked in `wait` by now
    fault::release_held();
    first.wait().unwrap();
    wait_until_held(); // the second group is in its fsync, the guarded request refused before it
    let refused = answered.recv_timeout(Duration::from_secs(3));
    fault::release_held();
    staged.wait().unwrap();
    let refused = refused.expect("the refused caller was not woken while its group's fsync was under way");
    assert!(refused.is_err(), "{refused:?}");
    store.close().unwrap();
}

/// Appends that reach the queue after `close`'s shutdown (they passed the open check before it
/// and were still being encoded) are answered `Closed` as the writer's queue drops, after its
/// last group: only the writer's last flush (`DeferGuard`) wakes their blocked callers. A mutant
/// that dropped those wakes passed every other test. Whether an append lands behind the
/// shutdown is up to the timing (the second review found none in a quarter of single runs), so
/// the scenario runs five times.
#[test]
fn appends_queued_behind_the_shutdown_wake_their_blocked_callers() {
    let _faults = Faults::take();
    for _ in 0..5 {
        close_with_appends_still_arriving();
    }
}

fn close_with_appends_still_arriving() {
    const CALLERS: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Fsync, segment_size: 64 << 20, part_bytes: 64 << 20, ..Options::default() };
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    store.append(vec![Event::new("E", ["seed"], vec![])], None).unwrap();
    fault::arm("commit.fsync", Fault::Hold, 0);
    let first = store.submit(vec![Event::new("E", ["first"], vec![])], None);
    wait_until_held();
    let (answer, answered) = channel();
    for caller in 0..CALLERS {
        let (store, answer) = (store.clone(), answer.clone());
        thread::spawn(move || {
            // Large enough that many are still being encoded when the close queues its shutdown.
            let events: Vec<Event> = (0..3000).map(|i| Event::new("E", [format!("t:{caller}:{i}")], vec![0u8; 64])).collect();
            let result = store.submit(events, None).wait();
            answer.send(result.map(|r| r.first.get()).map_err(|e| e.kind())).unwrap();
        });
    }
    thread::sleep(Duration::from_millis(3));
    let closer = {
        let store = store.clone();
        thread::spawn(move || store.close())
    };
    thread::sleep(Duration::from_millis(300));
    fault::release_held();
    first.wait().unwrap();
    let mut results = Vec::new();
    for _ in 0..CALLERS {
        match answered.recv_timeout(Duration::from_secs(20)) {
            Ok(result) => results.push(result),
            Err(_) => panic!("a blocked caller was never woken; answered so far: {results:?}"),
        }
    }
    closer.join().unwrap().unwrap();
    // Committed before the shutdown, or refused as closed: nothing else.
    for result in &results {
        assert!(matches!(result, Ok(_) | Err(ErrorKind::Closed)), "{results:?}");
    }
}
