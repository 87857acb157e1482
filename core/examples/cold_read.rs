//! Diagnostic: what a cold read of one tag costs (time, bytes read from the device, major page
//! faults), after evicting the store's files from the page cache with the store open.
//!   cargo run --release --example cold_read -- [--writable] DIR TAG [TAG...]   (TAG `*`: every event)
//! Read-only by default (a follower); `--writable` opens it as its writer does, as the benchmark's
//! scale cells do (the active segment's parts are then read through their index files).
mod common;

use common::{evict, io};

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let writable = args.get(1).is_some_and(|a| a == "--writable");
    if writable {
        args.remove(1);
    }
    let dir = std::path::Path::new(&args[1]);
    evict(dir);
    let t = std::time::Instant::now();
    let store = if writable {
        lapilli_core::Store::open(dir, lapilli_core::Options::default()).unwrap()
    } else {
        lapilli_core::Store::open_read_only(dir).unwrap()
    };
    println!("open {:?} head {}", t.elapsed(), store.head().unwrap());
    for tag in &args[2..] {
        evict(dir);
        let (b0, f0) = io();
        let t = std::time::Instant::now();
        let query = if tag == "*" { lapilli_core::Query::all() } else { lapilli_core::Query::for_tags([tag.as_str()]) };
        let mut read = store.read(&query, lapilli_core::ReadOptions::default()).unwrap();
        // Visited in place (no copy of each event), as a subscription's consumer would.
        let mut events = Vec::new();
        while read.visit(4096, |event| events.push(event.position)).unwrap() > 0 {}
        let (b1, f1) = io();
        println!(
            "{tag}: {} events in {:?}; {} KiB read, {} major faults, {} index bytes verified",
            events.len(),
            t.elapsed(),
            (b1 - b0) / 1024,
            f1 - f0,
            store.verified_index_bytes()
        );
    }
}
