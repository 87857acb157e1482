//! The memory a read of large events holds: appends `count` events of `kib` KiB to a new
//! Postgres context, reads them all back (forwards) and prints the process's peak resident set
//! (`VmHWM`) before and after the read. bench/results/postgres-explain-2026-12-01.md records a run.
//!
//! ```sh
//! eval "$(scripts/postgres.sh start)"
//! cargo run --release -p lapilli-core --features postgres --example postgres_large_read -- 600 300
//! ```

use lapilli_core::{Event, Options, Query, ReadOptions, Store};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(600);
    let kib: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(300);
    let base = std::env::var("LAPILLI_TEST_POSTGRES_URL").map_err(|_| "set LAPILLI_TEST_POSTGRES_URL")?;
    let context = format!("large_{}", std::process::id());
    let separator = if base.contains('?') { '&' } else { '?' };
    let store = Store::open(format!("{base}{separator}context={context}"), Options::default())?;
    for first in (0..count).step_by(8) {
        let events = (first..count.min(first + 8)).map(|i| Event::new("Big", [format!("n:{i}")], vec![(i % 251) as u8; kib << 10])).collect();
        store.append(events, None)?;
    }
    let before = peak_rss_kib();
    let started = std::time::Instant::now();
    let read = store.read(&Query::all(), ReadOptions::default())?;
    let mut events = 0u64;
    let mut bytes = 0usize;
    for event in read {
        let event = event?;
        events += 1;
        bytes += event.data.len();
    }
    println!(
        "{events} events of {kib} KiB ({} MiB) read in {:.2} s; peak RSS {} MiB before the read, {} MiB after",
        bytes >> 20,
        started.elapsed().as_secs_f64(),
        before >> 10,
        peak_rss_kib() >> 10
    );
    store.close()?;
    let mut client = postgres::Client::connect(&base, postgres::NoTls)?;
    client.batch_execute(&format!("DROP TABLE \"lapilli_events_{context}\"; DROP FUNCTION IF EXISTS \"lapilli_merge_{context}\"(); DELETE FROM lapilli_contexts WHERE name = '{context}'"))?;
    Ok(())
}
