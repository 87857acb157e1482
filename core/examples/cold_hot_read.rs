//! Reads the events of a hot entity (15% of a store's events) with the store's pages evicted
//! after the open: how a cold read of a dense tag goes. `cargo run --release --example
//! cold_hot_read -- DIR [EVENTS]` builds the store in DIR if it is empty. Each read is preceded
//! by dropping the open store's mappings and the files' pages (as the benchmark's scale cells
//! do) and prints its time, major faults and CPU time. Under other device limits:
//! `scripts/with-device-limits.sh DIR 128 128 -- target/release/examples/cold_hot_read DIR`.
mod common;

use std::time::Instant;

use common::{evict, io};

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn usage() -> libc::rusage {
    // SAFETY: `rusage` is plain data; all zeros is a valid value, and the call fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage
}

/// User and system CPU time of the process so far, in ms.
fn cpu_ms() -> (f64, f64) {
    let u = usage();
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    (ms(u.ru_utime), ms(u.ru_stime))
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
        let (read_bytes, faults) = io();
        let (user, system) = cpu_ms();
        let started = Instant::now();
        let mut read = store.read(&query, options).unwrap();
        let n = read.visit(usize::MAX, |_| ()).unwrap();
        let elapsed = started.elapsed();
        let (user_after, system_after) = cpu_ms();
        let (read_bytes_after, faults_after) = io();
        println!(
            "cold {name}: {n} events in {elapsed:?}, {} KiB read, {} major faults, cpu {:.1} ms user {:.1} ms system",
            (read_bytes_after - read_bytes) / 1024,
            faults_after - faults,
            user_after - user,
            system_after - system
        );
    };
    cold("newest of the hot entity", Query::for_tags(["entity:hot"]), ReadOptions { backwards: true, limit: Some(1), ..Default::default() });
    cold("rare entity", Query::for_tags(["entity:12345"]), ReadOptions::default());
    cold("hot entity", Query::for_tags(["entity:hot"]), ReadOptions::default());
    store.close().unwrap();
}
