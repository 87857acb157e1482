//! Reads the events of a hot entity (15% of a store's events) with the store's pages evicted
//! after the open: how a cold read of a dense tag goes. `cargo run --release --example
//! cold_hot_read -- DIR [EVENTS]` builds the store in DIR if it is empty. Root evicts with
//! `drop_caches`; otherwise `posix_fadvise(DONTNEED)` on every file.
use std::time::Instant;

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn evict(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        use std::os::unix::io::AsRawFd;
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let events: u64 = args.get(2).map_or(1_000_000, |n| n.parse().unwrap());
    let options = Options { durability: Durability::Buffered, ..Options::default() };
    if !dir.join("LOCK").exists() {
        let store = Store::open(&dir, options.clone()).unwrap();
        let mut i = 0;
        while i < events {
            let batch: Vec<Event> = (i..i + 1000)
                .map(|j| {
                    let entity = if j % 7 == 0 { "entity:hot".to_string() } else { format!("entity:{j}") };
                    Event::new("E", [entity], vec![(j % 251) as u8; 256])
                })
                .collect();
            store.append(batch, None).unwrap();
            i += 1000;
        }
        store.close().unwrap();
    }
    let started = Instant::now();
    let store = Store::open(&dir, options).unwrap();
    println!("open {:?} {:?}", started.elapsed(), store.recovery().scanned_log_bytes);
    let cold = |name: &str, query: Query, options: ReadOptions| {
        evict(&dir);
        let started = Instant::now();
        let mut read = store.read(&query, options).unwrap();
        let n = read.visit(usize::MAX, |_| ()).unwrap();
        println!("cold {name}: {n} events in {:?}", started.elapsed());
    };
    cold("newest of the hot entity", Query::for_tags(["entity:hot"]), ReadOptions { backwards: true, limit: Some(1), ..Default::default() });
    cold("rare entity", Query::for_tags(["entity:12345"]), ReadOptions::default());
    cold("hot entity", Query::for_tags(["entity:hot"]), ReadOptions::default());
    store.close().unwrap();
}
