//! Costs that must stay linear in what a read returns: a tag carried by every event of the
//! active segment (a hot entity), read forwards and backwards, against `Query::all()` over the
//! same events. Ratios of medians, so the test says "linear", not "fast on this machine".

mod common;

use std::time::{Duration, Instant};

use common::buffered;
use lapilli_core::{Event, Position, Query, ReadOptions, Store};

const K: u64 = 50_000;

/// The tests of this file time things: one at a time, so they do not time each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn store_with_hot_tag(events: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    // One segment holds everything: the events stay in the active segment's in-memory index.
    let store = Store::open(dir.path(), buffered(256 << 20)).unwrap();
    let mut next = 0u64;
    while next < events {
        let batch = (next..(next + 1000).min(events))
            .map(|i| Event::new("E", vec!["hot".to_string(), format!("entity:{i}")], vec![]))
            .collect();
        next = store.append(batch, None).unwrap().last.get();
    }
    (dir, store)
}

/// Median time to visit every match of `query`, and how many there were.
fn read_time(store: &Store, query: &Query, backwards: bool) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut count = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let mut read = store.read(query, ReadOptions { backwards, ..ReadOptions::default() }).unwrap();
        count = read.visit(usize::MAX, |_| ()).unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    (times[2], count)
}

#[test]
fn reading_a_hot_tag_in_the_active_segment_is_linear() {
    let _serial = serial();
    let (_small_dir, small) = store_with_hot_tag(K);
    let (_large_dir, large) = store_with_hot_tag(2 * K);
    let hot = Query::for_tags(["hot"]);
    for backwards in [false, true] {
        let (k_time, k_count) = read_time(&small, &hot, backwards);
        let (two_k_time, two_k_count) = read_time(&large, &hot, backwards);
        assert_eq!((k_count, two_k_count), (K as usize, 2 * K as usize));
        let ratio = two_k_time.as_secs_f64() / k_time.as_secs_f64();
        assert!(ratio < 2.5, "backwards {backwards}: 2k events took {ratio:.2} times k ({two_k_time:?} vs {k_time:?})");

        let (all_time, all_count) = read_time(&large, &Query::all(), backwards);
        assert_eq!(all_count, 2 * K as usize);
        let ratio = two_k_time.as_secs_f64() / all_time.as_secs_f64();
        assert!(ratio <= 3.0, "backwards {backwards}: the hot tag took {ratio:.2} times Query::all ({two_k_time:?} vs {all_time:?})");
    }
}

/// A condition over the hot tag at a stale `after`, and a subscription's catch-up over it, are
/// the same walk: linear too (checked against the same walk over half the events), in the small
/// batches a consumer takes (each batch resumes the walk from its cursor).
#[test]
fn catch_up_over_a_hot_tag_in_the_active_segment_is_linear() {
    let _serial = serial();
    let (_small_dir, small) = store_with_hot_tag(K);
    let (_large_dir, large) = store_with_hot_tag(2 * K);
    let catch_up = |store: &Store| {
        let mut times = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let sub = store.subscribe(&Query::for_tags(["hot"]), Position::ZERO).unwrap();
            let mut seen = 0;
            while !sub.caught_up() || seen == 0 {
                seen += sub.next_batch(64, Some(Duration::from_secs(10))).unwrap().unwrap().len();
            }
            assert_eq!(seen as u64, store.head().unwrap().get());
            times.push(started.elapsed());
        }
        times.sort();
        times[1]
    };
    let (k_time, two_k_time) = (catch_up(&small), catch_up(&large));
    let ratio = two_k_time.as_secs_f64() / k_time.as_secs_f64();
    assert!(ratio < 2.5, "catch-up of 2k events took {ratio:.2} times k ({two_k_time:?} vs {k_time:?})");
}
