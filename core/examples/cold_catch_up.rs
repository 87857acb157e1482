//! A consumer catching up on every event of a store, or one read of them all, timed from a
//! cold page cache: how fast each reads ahead. `cargo run --release --example cold_catch_up --
//! DIR (sub BATCH | read)` on an existing store (the benchmark's scale store: `lapilli-bench
//! scale-child lapilli DIR build --events 10000000 --segment-size 268435456 --secs 3 --out
//! build.json`). The store's pages are evicted after the open, as the benchmark's cold cells
//! do. A subscription takes batches of BATCH events (`try_visit`, as the benchmark's catch-up);
//! each batch is a new walk that goes on from where the last stopped.
mod common;

use std::time::Instant;

use common::{evict, io};

use lapilli_core::{Options, Position, Query, ReadOptions, Store};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let how = args.get(2).map_or("sub", String::as_str);
    let batch: usize = args.get(3).map_or(1024, |b| b.parse().unwrap());
    let store = Store::open(&dir, Options::default()).unwrap();
    let head = store.head().unwrap().get();
    evict(&dir);
    let (read_bytes, faults) = io();
    let started = Instant::now();
    let mut seen = 0u64;
    match how {
        "sub" => {
            let subscription = store.subscribe(&Query::all(), Position(0)).unwrap();
            while seen < head {
                let taken = subscription.try_visit(batch, |_| seen += 1).unwrap().expect("open");
                assert!(taken > 0, "stalled at {seen} of {head}");
            }
        }
        "read" => {
            let mut read = store.read(&Query::all(), ReadOptions::default()).unwrap();
            seen = read.visit(usize::MAX, |_| ()).unwrap() as u64;
        }
        other => panic!("sub or read, not {other}"),
    }
    let seconds = started.elapsed().as_secs_f64();
    let (read_bytes_after, faults_after) = io();
    println!(
        "{how} {batch}: {seen} events in {seconds:.3} s, {:.2}M events/s, {} MiB read, {} major faults",
        seen as f64 / seconds / 1e6,
        (read_bytes_after - read_bytes) >> 20,
        faults_after - faults
    );
    store.close().unwrap();
}
