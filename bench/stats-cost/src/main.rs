//! The write cells of the quick benchmark (W1: batches of 1/64/512 events from 16 and 64
//! writers; W2: single-event appends from 1/8/64/128 writers; fsync durability, each append
//! guarded by a condition on a new tag, 256-byte events), plus single-event appends from one
//! writer with buffered durability, where per-append overhead shows most. Prints one JSON line
//! per cell: events/s over a window, and the process's CPU time per event (what the counters
//! add to directly; less disturbed than throughput by how the threads happened to be scheduled
//! around the fsyncs). `run.sh` runs this binary built against two cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lapilli_core::{AppendCondition, Durability, Event, Options, Position, Query, Store};

/// CPU time of the whole process (every thread, user and system), in nanoseconds.
fn process_cpu_nanos() -> u128 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant of the platform.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

/// Events/s over the window, and CPU nanoseconds per event over it.
fn cell(dir: &std::path::Path, durability: Durability, writers: usize, batch: usize, secs: f64) -> (f64, f64) {
    let store = Store::open(dir, Options { durability, segment_size: 64 << 20, ..Options::default() }).unwrap();
    let seen = AtomicU64::new(0);
    let events = AtomicU64::new(0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let cpu_start = process_cpu_nanos();
    std::thread::scope(|s| {
        for w in 0..writers {
            let (store, seen, events) = (&store, &seen, &events);
            s.spawn(move || {
                let mut seq = 0u64;
                while Instant::now() < end {
                    let tag = format!("w:{w}:{seq}");
                    seq += 1;
                    let batch: Vec<Event> =
                        (0..batch).map(|i| Event::new("Written", [tag.clone()], vec![(i % 251) as u8; 256])).collect();
                    let condition = AppendCondition::new(Query::of([lapilli_core::QueryItem::new(["Written"], [tag.clone()])]))
                        .after(Position(seen.load(Ordering::Relaxed)));
                    let result = store.append(batch, Some(condition)).unwrap();
                    seen.fetch_max(result.last.get(), Ordering::Relaxed);
                    events.fetch_add((result.last.get() - result.first.get() + 1) as u64, Ordering::Relaxed);
                }
            });
        }
    });
    let cpu = (process_cpu_nanos() - cpu_start) as f64;
    let events = events.load(Ordering::Relaxed) as f64;
    let rate = events / start.elapsed().as_secs_f64();
    store.close().unwrap();
    (rate, cpu / events)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let data = std::path::PathBuf::from(args.get(1).expect("usage: lapilli-stats-cost DATA_DIR [SECS]"));
    let secs: f64 = args.get(2).map_or(0.5, |s| s.parse().expect("SECS is a number"));
    let cells: &[(&str, Durability, usize, usize)] = &[
        ("W1 batch 1, 16 writers", Durability::Fsync, 16, 1),
        ("W1 batch 64, 16 writers", Durability::Fsync, 16, 64),
        ("W1 batch 512, 16 writers", Durability::Fsync, 16, 512),
        ("W1 batch 1, 64 writers", Durability::Fsync, 64, 1),
        ("W1 batch 64, 64 writers", Durability::Fsync, 64, 64),
        ("W2 single, 1 writer", Durability::Fsync, 1, 1),
        ("W2 single, 8 writers", Durability::Fsync, 8, 1),
        ("W2 single, 128 writers", Durability::Fsync, 128, 1),
        ("buffered single, 1 writer", Durability::Buffered, 1, 1),
        ("buffered single, 16 writers", Durability::Buffered, 16, 1),
    ];
    for (i, (name, durability, writers, batch)) in cells.iter().enumerate() {
        let dir = data.join(format!("cell-{i}"));
        let _ = std::fs::remove_dir_all(&dir);
        let (rate, cpu_ns) = cell(&dir, *durability, *writers, *batch, secs);
        let _ = std::fs::remove_dir_all(&dir);
        println!("{{\"cell\":\"{name}\",\"events_per_s\":{rate:.1},\"cpu_ns_per_event\":{cpu_ns:.1}}}");
    }
}
