//! Group commits under N unbatched writers: appends/s, groups/s, events per group, fsync and
//! append latency. Each writer appends one 256-byte event at a time (two tags, no condition) with
//! `fsync` durability, into a new store's first segment (only allocated: the writer zeros ahead
//! of itself in it, `log/zero_ahead.rs`), or with `PREFILL=1` into a prepared second segment
//! (the first, of 64 MiB, filled beforehand). Since 2026-12-03 a prepared segment is only
//! allocated too, with a zeroer of its own that the writer's first group in it sets going (or,
//! while the groups are large, not: the prefill's large groups pause it until about six small
//! groups have come), so the two differ only in that. `BATCH=n` makes each append n events
//! (W1's batched cells) instead of one; `SPIN=n` keeps n other threads of the process busy; `CPU=1` prints
//! each engine thread's CPU time at the end. `EVICT=1` (with `PREFILL=1`) then drops the store's pages from the
//! page cache before the writers start, as other I/O or a long run would.
//!
//! ```sh
//! cargo run --release -p lapilli-core --example group_probe -- [WRITERS] [SECONDS] [DIR]
//! ```
//! The store is made in a new directory inside DIR (default: `target`), removed at the end; DIR
//! must be on a real disk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lapilli_core::{Event, Options, Store};

fn main() {
    let mut args = std::env::args().skip(1);
    let writers: usize = args.next().map_or(16, |s| s.parse().unwrap());
    let secs: f64 = args.next().map_or(3.0, |s| s.parse().unwrap());
    let parent = args.next().map_or_else(|| std::path::PathBuf::from("target"), std::path::PathBuf::from);
    let dir = parent.join(format!("group-probe-{}", std::process::id()));
    let prefill = std::env::var_os("PREFILL").is_some();
    let mut options = Options::default();
    if prefill {
        options.segment_size = 64 << 20;
    }
    // PART_MIB=n: parts of n MiB, to see what the sealer's part files cost the commits.
    if let Some(mib) = std::env::var("PART_MIB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options.part_bytes = mib << 20;
    }
    // BATCH=n: each append carries n events (W1's batched cells), not one.
    let batch: usize = std::env::var("BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let store = Arc::new(Store::open(&dir, options).unwrap());
    if prefill {
        // Fills the first segment in large batches, so the measured appends land in the next.
        for _ in 0..70 {
            let batch: Vec<Event> = (0..16).map(|_| Event::new("Filler", ["filler"], vec![0u8; 60_000])).collect();
            store.append(batch, None).unwrap();
        }
        std::thread::sleep(Duration::from_secs(2));
        if std::env::var_os("EVICT").is_some() {
            evict(&dir);
        }
    }
    // SPIN=n: n threads of the process spin at normal priority meanwhile (a busy application).
    let spinners: usize = std::env::var("SPIN").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let spinning = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let spin_threads: Vec<_> = (0..spinners)
        .map(|_| {
            let spinning = spinning.clone();
            std::thread::spawn(move || {
                while spinning.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let before = store.stats().unwrap();
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while Instant::now() < stop {
                    let t = Instant::now();
                    let events: Vec<Event> = (0..batch)
                        .map(|j| Event::new("Probe", [format!("w{w}"), format!("u{w}-{i}-{j}")], vec![7u8; 256]))
                        .collect();
                    store.append(events, None).unwrap();
                    latencies.push(t.elapsed().as_micros() as u64);
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    spinning.store(false, std::sync::atomic::Ordering::Relaxed);
    for spinner in spin_threads {
        spinner.join().unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let after = store.stats().unwrap();
    let events = after.events_appended - before.events_appended;
    let groups = after.group_commits - before.group_commits;
    // The fsync percentiles are the handle's (with PREFILL, the filler's fsyncs are in them).
    println!(
        "writers {writers}, batch {batch}: {:.0} events/s, {:.0} groups/s, {:.2} events/group, fsync p50 {} us, p99 {} us; append p50 {} us, p99 {} us",
        events as f64 / elapsed,
        groups as f64 / elapsed,
        events as f64 / groups as f64,
        after.fsync_p50_micros,
        after.fsync_p99_micros,
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100],
    );
    // CPU=1: each engine thread's CPU time (user + system, from /proc) once the sealer has
    // caught up with what the window appended, so sealing counts whole whichever part sizes.
    if std::env::var_os("CPU").is_some() {
        store.wait_for_sealing();
        println!("cpu ms: {}", engine_thread_cpu_ms().join(", "));
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `name ms` for each thread of the process named `lapilli-*`, from `/proc/self/task/*/stat`.
fn engine_thread_cpu_ms() -> Vec<String> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else { continue };
        // Fields after the parenthesised name: state is the 3rd field, utime the 14th, stime the 15th.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let cpu = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        if name.starts_with("lapilli-") {
            out.push(format!("{name} {:.0}", cpu * 1000.0 / ticks));
        }
    }
    out
}

/// `POSIX_FADV_DONTNEED` on every file of the store (the zeros ahead of the writer are not
/// mapped by anyone, so this drops them).
fn evict(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        file.sync_all().unwrap();
        // SAFETY: plain syscall on a descriptor we own.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}
