//! Appends events of three tags (one unique per event) in batches of 1000, as the benchmark's
//! writer-memory cell does, and prints the process's anonymous memory and how many segment
//! entries are still indexed in memory (the part being filled, plus parts the sealer has not
//! written yet) every half second. `cargo run --release -p lapilli-core --example
//! writer_memory -- DIR EVENTS`; `PART_MIB=n` sets parts of n MiB instead of the default,
//! `PAYLOAD=n` events of n bytes of data instead of 256.
use std::time::{Duration, Instant};

use lapilli_core::{Durability, Event, Options, Store};

fn rss_anon_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status.lines().find_map(|l| l.strip_prefix("RssAnon:")).unwrap().trim().trim_end_matches(" kB").trim().parse().unwrap();
    kib / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: u64 = args.get(2).map_or(2_000_000, |n| n.parse().unwrap());
    let mut options = Options { durability: Durability::Buffered, ..Options::default() };
    if let Some(mib) = std::env::var("PART_MIB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options.part_bytes = mib << 20;
    }
    let store = Store::open(&args[1], options).unwrap();
    let payload: usize = std::env::var("PAYLOAD").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let started = Instant::now();
    let mut last = Instant::now();
    let mut i = 0;
    while i < events {
        let batch: Vec<Event> = (i..i + 1000)
            .map(|j| Event::new("E", [format!("unique:{j}"), format!("entity:{}", j % 10_000), format!("kind:{}", j % 10)], vec![7u8; payload]))
            .collect();
        store.append(batch, None).unwrap();
        i += 1000;
        if last.elapsed() >= Duration::from_millis(500) {
            println!("{:6.1} s {:>9} events  RssAnon {:7.1} MiB  in memory {}", started.elapsed().as_secs_f64(), i, rss_anon_mib(), store.tail_indexed_segments());
            last = Instant::now();
        }
    }
    store.wait_for_sealing();
    println!("sealed: RssAnon {:.1} MiB, in memory {}", rss_anon_mib(), store.tail_indexed_segments());
    store.close().unwrap();
}
