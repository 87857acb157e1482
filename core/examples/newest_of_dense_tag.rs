//! How long the newest event of a dense tag takes to read when newer segments do not hold the
//! tag (issue 14's R4 at full scale, after the write cells appended a million other events).
//!
//!   cargo run --release -p lapilli-core --example newest_of_dense_tag -- DIR [DENSE_EVENTS] [OTHER_EVENTS] [SINGLES]
//!
//! DENSE_EVENTS carry `s10:<i % 10>` and an entity tag; OTHER_EVENTS (batches of 512) and
//! SINGLES (single-event appends from 16 threads, the write cells' shape) carry tags of their
//! own. An existing DIR is only read.
use std::time::Instant;

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(&args[0]);
    let dense: u64 = args.get(1).map_or(2_000_000, |a| a.parse().unwrap());
    let other: u64 = args.get(2).map_or(1_000_000, |a| a.parse().unwrap());
    let options = Options { durability: Durability::Buffered, ..Options::default() };
    if !dir.exists() {
        let store = Store::open(&dir, options.clone()).unwrap();
        let data = vec![7u8; 256];
        let mut i = 0;
        while i < dense + other {
            let n = 512.min(dense + other - i);
            let batch = (i..i + n)
                .map(|j| {
                    if j < dense {
                        Event::new("E", [format!("entity:{}", j % 20_000), format!("s10:{}", j % 10)], data.clone())
                    } else {
                        Event::new("W", [format!("w:{j}")], data.clone())
                    }
                })
                .collect();
            store.append(batch, None).unwrap();
            i += n;
        }
        // Then single-event appends from 16 threads, each with a tag of its own (the write
        // cells' shape: many small group commits).
        let store = std::sync::Arc::new(store);
        let singles: u64 = args.get(3).map_or(0, |a| a.parse().unwrap());
        let threads: Vec<_> = (0..16u64)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for k in 0..singles / 16 {
                        store.append(vec![Event::new("W", [format!("single:{t}:{k}")], vec![1u8; 256])], None).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        store.wait_for_sealing();
        std::sync::Arc::try_unwrap(store).ok().unwrap().close().unwrap();
    }
    let store = Store::open(&dir, options).unwrap();
    let backwards_one = ReadOptions { limit: Some(1), backwards: true, ..Default::default() };
    for tag in ["s10:3", "entity:7"] {
        let query = Query::for_tags([tag]);
        // Warm.
        for _ in 0..100 {
            store.read(&query, backwards_one).unwrap().collect_all().unwrap();
        }
        let n = 20_000;
        let started = Instant::now();
        let mut found = 0;
        for _ in 0..n {
            let newest = store.read(&query, backwards_one).unwrap().collect_all().unwrap();
            found = newest.first().expect("the store has events of the tag").position.get();
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("{tag}: newest at {found} of {}: {us:.2} us a read", store.head().unwrap().get());
    }
}
