//! How close one writer's unbatched, fsynced appends come to the disk's floor: the rate of
//! `fdatasync` after a 4 KiB overwrite inside a file already written and synced, measured in the
//! same run on the same file system. Appends are measured in a store's first segment (created
//! with `posix_fallocate`: unwritten extents, whose conversion makes each `fdatasync` commit the
//! file system's journal too) and in a segment the writer prepared ahead (until 2026-12-03
//! written with zeros and synced off the writer's thread, so commits into it were pure data
//! syncs; since, only allocated, with the zeroer ahead of small groups as in the first).
//!
//! ```sh
//! cargo run --release -p lapilli-core --example commit_floor -- [DIR] [SECONDS]
//! ```
//! DIR must be on a real disk (default: `target/commit-floor`, removed at the end).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lapilli_core::{Durability, Event, Options, Store};

/// Appends per second and the median latency in microseconds over `window`.
fn rate(window: Duration, op: impl FnMut()) -> (f64, f64) {
    let (rate, latencies) = timed(window, op);
    (rate, latencies[latencies.len() / 2])
}

/// Operations per second over `window`, and every latency in microseconds, sorted.
fn timed(window: Duration, mut op: impl FnMut()) -> (f64, Vec<f64>) {
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < window {
        let t = Instant::now();
        op();
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    (rate, latencies)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map_or_else(|| PathBuf::from("target/commit-floor"), PathBuf::from);
    let window = Duration::from_secs_f64(args.next().map_or(Ok(3.0), |s| s.parse())?);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;

    // The floor: a 4 KiB overwrite + fdatasync in a 64 MiB file written and synced beforehand.
    let floor_path = dir.join("floor");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&floor_path)?;
    let chunk = vec![0u8; 1 << 20];
    for i in 0..64u64 {
        file.write_all_at(&chunk, i << 20)?;
    }
    file.sync_all()?;
    let page = vec![7u8; 4096];
    let mut at = 0u64;
    let (floor, floor_p50) = rate(window, || {
        file.write_all_at(&page, at).unwrap();
        file.sync_data().unwrap();
        at = (at + 4096) % (64 << 20);
    });

    let segment_size = 64 << 20;
    let options = Options { durability: Durability::Fsync, segment_size, ..Options::default() };
    let event = || vec![Event::new("Appended", ["entity:1"], vec![0u8; 256])];

    let store = Store::open(dir.join("first"), options.clone())?;
    let (first, first_p50) = rate(window, || {
        store.append(event(), None).unwrap();
    });
    store.close()?;

    // Fill a store's first segment past half (the writer then prepares the next), roll over
    // into the prepared segment, and measure there.
    let store = Store::open(dir.join("prepared"), Options { durability: Durability::Buffered, ..options.clone() })?;
    let big = vec![0u8; 4 << 20];
    for _ in 0..((segment_size / (4 << 20)) - 1) {
        store.append(vec![Event::new("Filler", ["filler"], big.clone())], None)?;
    }
    store.close()?;
    let store = Store::open(dir.join("prepared"), options.clone())?;
    store.append(vec![Event::new("Filler", ["filler"], big.clone())], None)?; // rolls over
    let (prepared, prepared_p50) = rate(window, || {
        store.append(event(), None).unwrap();
    });
    store.close()?;

    // Roll-overs under load: 4 KiB events into 4 MiB segments, one roll-over about every
    // thousand appends; the tail of the latency distribution is where roll-over work shows.
    let small = Options { durability: Durability::Fsync, segment_size: 4 << 20, ..Options::default() };
    let store = Store::open(dir.join("rolling"), small)?;
    let (rolling, latencies) = timed(window, || {
        store.append(vec![Event::new("Appended", ["entity:1"], vec![0u8; 4096])], None).unwrap();
    });
    let head = store.head()?.get();
    store.close()?;
    let segments = std::fs::read_dir(dir.join("rolling"))?
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log")))
        .count();
    std::fs::remove_dir_all(&dir)?;
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];

    println!("| where | appends/s | p50 us | / floor rate |");
    println!("|---|---:|---:|---:|");
    println!("| fdatasync of a 4 KiB overwrite (the floor) | {floor:.0} | {floor_p50:.0} | 1.00 |");
    println!("| first segment (fallocated) | {first:.0} | {first_p50:.0} | {:.2} |", first / floor);
    println!("| prepared segment (written ahead) | {prepared:.0} | {prepared_p50:.0} | {:.2} |", prepared / floor);
    println!(
        "\nrolling 4 MiB segments, 4 KiB events: {rolling:.0} appends/s, {head} appends, {segments} segments; \
         latency us p50 {:.0}, p99 {:.0}, p99.9 {:.0}, max {:.0}",
        at(0.5),
        at(0.99),
        at(0.999),
        latencies[latencies.len() - 1]
    );
    Ok(())
}
