//! Regressions found by the crash harness (`tests/crash.rs`), kept in the default test run.

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn options() -> Options {
    Options { durability: Durability::Buffered, segment_size: 4096, ..Options::default() }
}

/// Killed between creating the next segment file and preallocating it: the file is empty. Found
/// by the kill loop; recovery used to refuse the store with `Corruption` ("segment header is 0
/// bytes"). Nothing can have been written into such a file, so it is made again.
#[test]
fn an_empty_segment_file_left_by_a_crash_during_creation_is_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    for i in 0..10u8 {
        store.append(vec![Event::new("T", ["t"], vec![i])], None).unwrap();
    }
    store.close().unwrap();
    let next = dir.path().join(format!("{:020}.log", 11));
    std::fs::File::create(&next).unwrap();

    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.recovery().recreated_segment.as_deref(), Some(next.as_path()));
    assert_eq!(store.head().unwrap().get(), 10);
    assert_eq!(store.append(vec![Event::new("T", ["t"], vec![])], None).unwrap().first.get(), 11);
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(all.len(), 11);
    store.close().unwrap();
    assert_eq!(std::fs::metadata(&next).unwrap().len(), 4096, "recreated at full size");
}

/// Found by the JVM binding's tests: a timeout too long to add to `Instant::now()` panicked.
/// It now means "no timeout", and a close still ends the wait.
#[test]
fn a_huge_subscription_timeout_waits_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(dir.path(), options()).unwrap());
    let subscription = std::sync::Arc::new(store.subscribe(&Query::all(), lapilli_core::Position::ZERO).unwrap());
    let waiter = {
        let subscription = subscription.clone();
        std::thread::spawn(move || subscription.next_batch(10, Some(std::time::Duration::MAX)))
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    store.append(vec![Event::new("T", ["t"], vec![])], None).unwrap();
    let batch = waiter.join().expect("no panic").unwrap().expect("not ended");
    assert_eq!(batch.len(), 1);
    let waiter = {
        let subscription = subscription.clone();
        std::thread::spawn(move || subscription.next_batch(10, Some(std::time::Duration::MAX)))
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    subscription.close();
    assert_eq!(waiter.join().unwrap().unwrap(), None, "close ends a wait with no deadline");
}
