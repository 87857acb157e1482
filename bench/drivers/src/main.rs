//! The Rust reference for the per-runtime drivers: the same shapes as `python_driver.py`,
//! `node_driver.mjs` and `kotlin/`, measured in the same run so every binding's figure is a
//! ratio to this one.
//!
//!   lapilli-drivers prepare read_store=DIR events=200000
//!   lapilli-drivers run read_store=DIR work=DIR batches=N concurrent=N scans=N selective=N catchups=N
//!
//! `run` prints one JSON object per shape: {"runtime","shape","events","seconds","events_per_s"}.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapilli_core::{
    AppendCondition, Durability, Event, Options, Position, Query, QueryItem, ReadOptions, Store,
};

const EVENT_TYPE: &str = "Measured";
const DATA_BYTES: usize = 256;
const BATCH: usize = 512;
const WORKERS: usize = 64;
/// Untimed batches before `append_batched` is timed: the same in every driver, so a JIT or a
/// cold writer is not measured.
const WARM_BATCHES: u64 = 2;
/// Before `append_concurrent` is timed, untimed passes of the same size run until this many
/// seconds have gone by (at least one pass): the same in every driver. One pass was not enough
/// for the JVM, whose timed pass then still ran code being compiled.
const WARM_SECONDS: f64 = 2.0;
/// Entities in the read store: `entity:<n>` selects about 1/1000 of it.
const ENTITIES: u64 = 1000;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("lapilli-drivers: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = args.first().ok_or("usage: lapilli-drivers prepare|run key=value...")?.clone();
    let params: HashMap<String, String> = args[1..]
        .iter()
        .map(|a| a.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or(format!("not key=value: {a}")))
        .collect::<Result<_, _>>()?;
    let get = |k: &str| params.get(k).ok_or_else(|| format!("missing {k}=..."));
    let num = |k: &str| -> Res<u64> { Ok(get(k)?.parse::<u64>().map_err(|e| format!("{k}: {e}"))?) };
    match command.as_str() {
        "prepare" => prepare(Path::new(get("read_store")?), num("events")?),
        "run" => {
            let read_store = PathBuf::from(get("read_store")?);
            let work = PathBuf::from(get("work")?);
            std::fs::create_dir_all(&work)?;
            append_batched(&work.join("rust-batched"), num("batches")?)?;
            append_concurrent(&work.join("rust-concurrent"), num("concurrent")?)?;
            let store = Store::open(&read_store, Options::default())?;
            read_warm_scan(&store, num("scans")?)?;
            read_selective(&store, num("selective")?)?;
            subscribe_catch_up(&store, num("catchups")?)?;
            store.close()?;
            live_subscriptions(&work.join("rust-live"))?;
            Ok(())
        }
        other => Err(format!("unknown command {other}").into()),
    }
}

fn event(i: u64, data: &[u8]) -> Event {
    Event::new(EVENT_TYPE, [format!("entity:{}", i % ENTITIES)], data.to_vec())
}

/// One type and one tag that no event carries: the guarded path, never a conflict.
fn never() -> AppendCondition {
    AppendCondition::new(Query::of([QueryItem::new(["NeverAppended"], ["never:0"])]))
}

fn report(shape: &str, events: u64, seconds: f64) {
    println!(
        "{{\"runtime\":\"rust\",\"shape\":\"{shape}\",\"events\":{events},\"seconds\":{seconds:.6},\"events_per_s\":{:.1}}}",
        events as f64 / seconds
    );
}

/// The read store: `events` events of 256 bytes, `entity:<i % 1000>`, in batches of 512.
fn prepare(dir: &Path, events: u64) -> Res<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    let store = Store::open(dir, Options { durability: Durability::Buffered, ..Options::default() })?;
    let data = vec![7u8; DATA_BYTES];
    let mut i = 0;
    while i < events {
        let n = (events - i).min(BATCH as u64);
        store.append((i..i + n).map(|j| event(j, &data)).collect(), None)?;
        i += n;
    }
    store.wait_for_sealing();
    store.close()?;
    Ok(())
}

fn fresh(dir: &Path) -> Res<Store> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(Store::open(dir, Options::default())?)
}

fn append_batched(dir: &Path, batches: u64) -> Res<()> {
    let store = fresh(dir)?;
    let data = vec![7u8; DATA_BYTES];
    let batch = |b: u64| -> Vec<Event> {
        let first = b * BATCH as u64;
        (first..first + BATCH as u64).map(|i| event(i, &data)).collect()
    };
    for b in 0..WARM_BATCHES {
        store.append(batch(b), Some(never()))?;
    }
    let started = Instant::now();
    for b in WARM_BATCHES..WARM_BATCHES + batches {
        store.append(batch(b), Some(never()))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    check(store.head()?.get(), (WARM_BATCHES + batches) * BATCH as u64, "append_batched head")?;
    store.close()?;
    std::fs::remove_dir_all(dir)?;
    report("append_batched", batches * BATCH as u64, seconds);
    Ok(())
}

fn append_concurrent(dir: &Path, per_worker: u64) -> Res<()> {
    let store = Arc::new(fresh(dir)?);
    let total = WORKERS as u64 * per_worker;
    let (warm, mut passes) = (Instant::now(), 0);
    while passes == 0 || warm.elapsed().as_secs_f64() < WARM_SECONDS {
        concurrent_appends(&store, per_worker, passes * total)?;
        passes += 1;
    }
    let seconds = concurrent_appends(&store, per_worker, passes * total)?;
    check(store.head()?.get(), (passes + 1) * total, "append_concurrent head")?;
    Arc::try_unwrap(store).map_err(|_| "store still shared")?.close()?;
    std::fs::remove_dir_all(dir)?;
    report("append_concurrent", total, seconds);
    Ok(())
}

/// 64 threads, each appending `per_worker` single events in turn; the seconds from the moment
/// all are started and waiting until the last append returned.
fn concurrent_appends(store: &Arc<Store>, per_worker: u64, offset: u64) -> Res<f64> {
    let gate = Arc::new(std::sync::Barrier::new(WORKERS + 1));
    let threads: Vec<_> = (0..WORKERS as u64)
        .map(|w| {
            let (store, gate) = (store.clone(), gate.clone());
            std::thread::spawn(move || -> lapilli_core::Result<()> {
                let data = vec![7u8; DATA_BYTES];
                gate.wait();
                for i in 0..per_worker {
                    store.append(vec![event(offset + w * per_worker + i, &data)], Some(never()))?;
                }
                Ok(())
            })
        })
        .collect();
    gate.wait();
    let started = Instant::now();
    for t in threads {
        t.join().map_err(|_| "append thread panicked")??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Iterates the read (owned `SequencedEvent`s, what every binding hands its caller); also the
/// zero-copy `visit` as a second figure.
fn read_warm_scan(store: &Store, scans: u64) -> Res<()> {
    let head = store.head()?.get();
    // Warm the page cache (and the index) once, untimed.
    scan_iter(store, head)?;
    let started = Instant::now();
    for _ in 0..scans {
        scan_iter(store, head)?;
    }
    report("read_warm_scan", scans * head, started.elapsed().as_secs_f64());
    let started = Instant::now();
    for _ in 0..scans {
        let mut read = store.read(&Query::all(), ReadOptions::default())?;
        let (mut n, mut bytes) = (0u64, 0u64);
        loop {
            let seen = read.visit(1024, |e| {
                n += 1;
                bytes += e.data.len() as u64;
            })?;
            if seen == 0 {
                break;
            }
        }
        check(n, head, "visit count")?;
        check(bytes, head * DATA_BYTES as u64, "visit bytes")?;
    }
    report("read_warm_scan_visit", scans * head, started.elapsed().as_secs_f64());
    Ok(())
}

fn scan_iter(store: &Store, head: u64) -> Res<()> {
    let (mut n, mut bytes) = (0u64, 0u64);
    for event in store.read(&Query::all(), ReadOptions::default())? {
        let event = event?;
        n += 1;
        bytes += event.data.len() as u64;
    }
    check(n, head, "scan count")?;
    check(bytes, head * DATA_BYTES as u64, "scan bytes")
}

fn read_selective(store: &Store, reads: u64) -> Res<()> {
    let head = store.head()?.get();
    let expected = |k: u64| head / ENTITIES + u64::from(k < head % ENTITIES);
    let started = Instant::now();
    let mut total = 0;
    for r in 0..reads {
        let k = (r * 7919) % ENTITIES;
        let mut n = 0;
        for event in store.read(&Query::for_tags([format!("entity:{k}")]), ReadOptions::default())? {
            event?;
            n += 1;
        }
        check(n, expected(k), "selective count")?;
        total += n;
    }
    report("read_selective", total, started.elapsed().as_secs_f64());
    Ok(())
}

fn subscribe_catch_up(store: &Store, passes: u64) -> Res<()> {
    let head = store.head()?.get();
    let started = Instant::now();
    for _ in 0..passes {
        let sub = store.subscribe(&Query::all(), Position::ZERO)?;
        let mut n = 0;
        while n < head {
            let batch = sub.next_batch(1024, None)?.ok_or("subscription ended early")?;
            n += batch.len() as u64;
        }
        check(sub.position().get(), head, "subscription position")?;
        sub.close();
    }
    report("subscribe_catch_up", passes * head, started.elapsed().as_secs_f64());
    Ok(())
}

/// Subscriptions waiting at once for each commit in `live_subscriptions`, and its timed commits
/// (after one untimed): the same in every driver.
const SUBSCRIBERS: usize = 1000;
const LIVE_ROUNDS: usize = 5;

/// 1,000 subscriptions to one tag, all waiting, then one commit of an event with that tag per
/// round: the delivery latency (append called to the event in the subscriber's hands) over
/// every delivery, and the process's threads while they wait. Rust's figure is the engine's own
/// wake-up (`on_ready`, no thread per subscription) with one thread taking the batches.
fn live_subscriptions(dir: &Path) -> Res<()> {
    let store = fresh(dir)?;
    let query = Query::for_tags(["ping"]);
    let subs = (0..SUBSCRIBERS).map(|_| store.subscribe(&query, Position::ZERO)).collect::<Result<Vec<_>, _>>()?;
    let (ready, woken) = std::sync::mpsc::channel::<usize>();
    let (mut latencies, mut threads_waiting, mut seconds) = (Vec::new(), 0, 0.0);
    for round in 0..=LIVE_ROUNDS {
        for (i, sub) in subs.iter().enumerate() {
            check(sub.try_next_batch(10)?.ok_or("subscription ended")?.len() as u64, 0, "events before the commit")?;
            let ready = ready.clone();
            sub.on_ready(move || {
                let _ = ready.send(i);
            });
        }
        std::thread::sleep(Duration::from_millis(LIVE_SETTLE_MS));
        threads_waiting = threads_waiting.max(thread_count()?);
        let started = Instant::now();
        store.append(vec![Event::new("Ping", ["ping"], vec![7u8; DATA_BYTES])], None)?;
        for _ in 0..SUBSCRIBERS {
            let i = woken.recv_timeout(Duration::from_secs(60))?;
            let batch = subs[i].try_next_batch(10)?.ok_or("subscription ended")?;
            check(batch.len() as u64, 1, "events of one commit")?;
            if round > 0 {
                latencies.push(started.elapsed().as_secs_f64());
            }
        }
        if round > 0 {
            seconds += started.elapsed().as_secs_f64();
        }
    }
    drop(subs);
    store.close()?;
    std::fs::remove_dir_all(dir)?;
    latencies.sort_by(f64::total_cmp);
    let at = |q: usize| latencies[latencies.len() * q / 100] * 1e6;
    println!(
        "{{\"runtime\":\"rust\",\"shape\":\"live_subscriptions\",\"events\":{},\"seconds\":{seconds:.6},\"events_per_s\":{:.1},\"threads_waiting\":{threads_waiting},\"latency_p50_us\":{:.1},\"latency_p99_us\":{:.1}}}",
        latencies.len(),
        latencies.len() as f64 / seconds,
        at(50),
        at(99)
    );
    Ok(())
}

/// The pause before each commit of `live_subscriptions`, so every subscriber is waiting again.
const LIVE_SETTLE_MS: u64 = 50;

fn thread_count() -> Res<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("Threads:")).ok_or("no Threads: in /proc/self/status")?;
    Ok(line["Threads:".len()..].trim().parse()?)
}

fn check(got: u64, want: u64, what: &str) -> Res<()> {
    if got != want {
        return Err(format!("{what}: got {got}, expected {want}").into());
    }
    Ok(())
}
