//! Subscriptions under concurrent writers (every matching event exactly once, in order, across
//! the catch-up/live seam), and ending them: `close()` from another thread, closing the store.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{Rng, buffered};
use lapilli_core::{ErrorKind, Event, Next, Position, Query, QueryItem, ReadOptions, Store, Subscription};

const TAGS: [&str; 4] = ["t0", "t1", "t2", "t3"];

/// Consumes until the `End` event arrives, in random batch sizes and short timeouts.
fn consume(sub: &Subscription, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let mut got = Vec::new();
    loop {
        let timeout = Some(Duration::from_millis(rng.range(0, 20)));
        let batch = sub.next_batch(rng.range(1, 50) as usize, timeout).unwrap().expect("ended early");
        for e in batch {
            got.push(e.position.get());
            if e.event_type == "End" {
                return got;
            }
        }
    }
}

#[test]
fn every_matching_event_exactly_once_in_order_under_concurrent_writers() {
    const WRITERS: usize = 6;
    const APPENDS: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), buffered(64 << 10)).unwrap());
    // Some history first, so that early subscribers start with a catch-up.
    for i in 0..300u32 {
        store.append(vec![Event::new(if i % 5 == 0 { "X" } else { "Y" }, [TAGS[i as usize % 4]], i.to_le_bytes().to_vec())], None).unwrap();
    }
    let queries = [
        Query::all(),
        Query::for_tags(["t1"]),
        Query::of([QueryItem::new(["X", "End"], Vec::<String>::new()), QueryItem::new(Vec::<String>::new(), ["t3"])]),
        Query::for_tags(["t2"]),
    ];
    let start = Arc::new(Barrier::new(WRITERS + 1));
    // Writers keep going until every subscriber exists, and a little after, so that the late
    // ones really join a log that is moving.
    let all_subscribed = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, start, all_subscribed) = (store.clone(), start.clone(), all_subscribed.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(w as u64);
                start.wait();
                let mut after_subscribed = 0;
                for n in 0.. {
                    if n >= APPENDS && all_subscribed.load(Ordering::Acquire) {
                        after_subscribed += 1;
                        if after_subscribed > 20 {
                            break;
                        }
                    }
                    let events: Vec<Event> = (0..rng.range(1, 3))
                        .map(|_| Event::new(if rng.chance(20) { "X" } else { "Y" }, [*rng.pick(&TAGS)], rng.bytes(8)))
                        .collect();
                    store.append(events, None).unwrap();
                    if rng.chance(10) {
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    // Subscribers: two from the start of history, two joining while the writers run (one of
    // them at the head of that moment, so it starts live).
    let mut consumers = Vec::new();
    for (i, query) in queries.iter().enumerate() {
        if i == 2 {
            start.wait();
            thread::sleep(Duration::from_millis(5));
        }
        let after = if i < 2 { Position(rng_after(i)) } else { store.head().unwrap() };
        let sub = store.subscribe(query, after).unwrap();
        let query = query.clone();
        consumers.push(thread::spawn(move || (query, after, consume(&sub, i as u64 + 100))));
    }
    all_subscribed.store(true, Ordering::Release);
    for w in writers {
        w.join().unwrap();
    }
    store.append(vec![Event::new("End", TAGS, vec![])], None).unwrap();
    let head = store.head().unwrap();
    for c in consumers {
        let (query, after, got) = c.join().unwrap();
        let want: Vec<u64> =
            store.read(&query, ReadOptions { after, ..Default::default() }).unwrap().map(|e| e.unwrap().position.get()).collect();
        assert_eq!(got, want, "subscription {query:?} after {after}");
        assert_eq!(*got.last().unwrap(), head.get());
        assert!(head.get() - after.get() > 100, "subscription after {after} saw too little live traffic");
    }
}

fn rng_after(i: usize) -> u64 {
    [0, 137][i]
}

#[test]
fn close_from_another_thread_wakes_a_blocked_next() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    store.append(vec![Event::new("T", ["a"], vec![])], None).unwrap();
    let sub = Arc::new(store.subscribe(&Query::for_tags(["b"]), Position::ZERO).unwrap());
    let (tx, rx) = mpsc::channel();
    let consumer = {
        let sub = sub.clone();
        thread::spawn(move || tx.send(sub.next(None)).unwrap())
    };
    // It is blocked, not finished.
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err());
    assert!(sub.caught_up());
    sub.close();
    let woke = rx.recv_timeout(Duration::from_secs(5)).expect("a closed subscription left next() blocked");
    assert_eq!(woke.unwrap(), Next::Ended);
    consumer.join().unwrap();
    assert!(sub.is_closed());
    assert_eq!(sub.next_batch(10, None).unwrap(), None);
    // The store itself is unaffected.
    store.append(vec![Event::new("T", ["b"], vec![])], None).unwrap();
    assert_eq!(sub.next(Some(Duration::ZERO)).unwrap(), Next::Ended);
}

#[test]
fn closing_the_store_ends_its_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), buffered(1 << 20)).unwrap());
    store.append(vec![Event::new("T", ["a"], vec![1])], None).unwrap();
    let blocked = Arc::new(store.subscribe(&Query::all(), Position(1)).unwrap());
    let behind = store.subscribe(&Query::all(), Position::ZERO).unwrap();
    let (tx, rx) = mpsc::channel();
    let consumer = {
        let blocked = blocked.clone();
        thread::spawn(move || tx.send(blocked.next_batch(16, None)).unwrap())
    };
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err());
    store.close().unwrap();
    let woke = rx.recv_timeout(Duration::from_secs(5)).expect("closing the store left next_batch() blocked");
    assert_eq!(woke.unwrap(), None);
    consumer.join().unwrap();
    // A subscription with undelivered history ends too, and new ones cannot start.
    assert_eq!(behind.next(Some(Duration::from_secs(1))).unwrap(), Next::Ended);
    assert!(behind.is_closed());
    assert_eq!(store.subscribe(&Query::all(), Position::ZERO).err().map(|e| e.kind()), Some(ErrorKind::Closed));
}

#[test]
fn next_times_out_and_live_events_arrive_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), buffered(1 << 20)).unwrap());
    let sub = store.subscribe(&Query::for_tags(["live"]), Position::ZERO).unwrap();
    let started = Instant::now();
    assert_eq!(sub.next(Some(Duration::from_millis(60))).unwrap(), Next::TimedOut);
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert_eq!(sub.next_batch(4, Some(Duration::ZERO)).unwrap(), Some(vec![]));
    assert_eq!(sub.position(), Position::ZERO);
    // A commit while the consumer waits without a deadline wakes it.
    let writer = {
        let store = store.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            store.append(vec![Event::new("T", ["other"], vec![])], None).unwrap();
            store.append(vec![Event::new("T", ["live"], vec![7])], None).unwrap();
        })
    };
    let Next::Event(e) = sub.next(None).unwrap() else { panic!("expected an event") };
    assert_eq!((e.position.get(), e.data), (2, vec![7]));
    assert_eq!(sub.position(), Position(2));
    assert!(sub.caught_up());
    writer.join().unwrap();
}

#[test]
fn resuming_from_position_neither_skips_nor_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), buffered(4096)).unwrap();
    for i in 0..200u32 {
        store.append(vec![Event::new("T", [TAGS[i as usize % 4]], i.to_le_bytes().to_vec())], None).unwrap();
    }
    let query = Query::for_tags(["t2"]);
    let mut got = Vec::new();
    let mut after = Position::ZERO;
    let mut rng = Rng::new(3);
    loop {
        let sub = store.subscribe(&query, after).unwrap();
        let batch = sub.next_batch(rng.range(1, 9) as usize, Some(Duration::ZERO)).unwrap().unwrap();
        if batch.is_empty() {
            break;
        }
        got.extend(batch.iter().map(|e| e.position.get()));
        after = sub.position();
        assert_eq!(after.get(), *got.last().unwrap());
    }
    assert_eq!(got, (0..50).map(|k| 4 * k + 3).collect::<Vec<u64>>());
}
