//! The server dies under load: writers keep appending 3-event batches while the PostgreSQL
//! server is killed (SIGKILL to every one of its processes at once, no shutdown) and started
//! again, three times: twice back after half a second, once after longer than the writer asks
//! about a commit whose reply was lost (so a commit caught in flight, if the kill catches one,
//! is reported of unknown outcome; the run prints how many were).
//! Afterwards no acknowledged batch is missing or moved, no batch is there in part, none is
//! there twice (the retries carry an existence clause, as the error of an unknown outcome tells
//! them to), positions are gapless, and the handle writes again once the server is back.
//!
//! Kills the server of `scripts/postgres.sh` (found through `LAPILLI_PG_STATE`), so it runs only
//! when `LAPILLI_TEST_POSTGRES_KILL=1` says that server is this test's to kill (`scripts/test.sh`
//! sets it); a test binary of its own, so no other test shares the outage.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapilli_core::{AppendCondition, ErrorKind, Event, Options, Query, ReadOptions, Store};

const THREADS: usize = 4;
const BATCH: usize = 3;

fn server(action: &str) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh");
    let status = Command::new("bash").arg(script).arg(action).status().unwrap();
    assert!(status.success(), "scripts/postgres.sh {action} failed");
}

#[derive(Default)]
struct Tally {
    /// Batch id -> first position, for every batch acknowledged.
    acknowledged: BTreeMap<String, u64>,
    io_errors: u64,
    unknown_outcomes: u64,
    /// Acknowledged after the server came back the last time.
    after_restart: u64,
}

#[test]
fn killing_the_server_loses_no_acknowledged_batch_and_leaves_no_partial_one() {
    let url = std::env::var("LAPILLI_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty());
    let killable = std::env::var("LAPILLI_TEST_POSTGRES_KILL").is_ok_and(|v| v == "1");
    let (Some(base), true) = (url, killable) else {
        assert!(
            std::env::var_os("LAPILLI_REQUIRE_POSTGRES").is_none(),
            "LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL or LAPILLI_TEST_POSTGRES_KILL=1 is not"
        );
        eprintln!("skipped: needs LAPILLI_TEST_POSTGRES_URL and LAPILLI_TEST_POSTGRES_KILL=1");
        return;
    };
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}context=kill_{}_{}", std::process::id(), stamp % 1_000_000_000);
    let store = Arc::new(Store::open(&url, Options::default()).unwrap());
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let restarted = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (store, tally, stop, restarted) = (store.clone(), tally.clone(), stop.clone(), restarted.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                // Whether an earlier attempt at batch n was answered with an unknown outcome:
                // only then may a retry find the batch there. One answered "not committed"
                // must not have been.
                let mut maybe_committed = false;
                while !stop.load(Ordering::Acquire) {
                    let id = format!("batch:{thread}:{n}");
                    let events: Vec<Event> = (0..BATCH)
                        .map(|i| Event::new("Part", [id.clone()], format!("{id}/{i}").into_bytes()))
                        .collect();
                    // The safe retry: never append the same batch twice.
                    let guard = AppendCondition::new(Query::for_tags([id.as_str()])).fail_if_exists(Query::for_tags([id.as_str()]));
                    let back = restarted.load(Ordering::Acquire);
                    match store.append(events, Some(guard)) {
                        Ok(result) => {
                            let mut tally = tally.lock().unwrap();
                            tally.acknowledged.insert(id, result.first.get());
                            if back {
                                tally.after_restart += 1;
                            }
                            n += 1;
                            maybe_committed = false;
                        }
                        // An earlier attempt whose outcome was unknown did commit (the guard's
                        // boundary clause names the same tag, and is reported first).
                        Err(e) if matches!(e.kind(), ErrorKind::AlreadyExists | ErrorKind::Conflict) => {
                            assert!(
                                maybe_committed,
                                "{id} is in the log, but every earlier attempt at it was answered as not committed: {e}"
                            );
                            n += 1;
                            maybe_committed = false;
                        }
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::Io, "{e}");
                            maybe_committed |= !e.message().contains("it was not committed");
                            let mut tally = tally.lock().unwrap();
                            tally.io_errors += 1;
                            if e.message().contains("unknown") {
                                tally.unknown_outcomes += 1;
                            }
                            drop(tally);
                            // Retry the same batch, after a pause.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })
        })
        .collect();
    let wait_for_acks = |at_least: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while tally.lock().unwrap().acknowledged.len() < at_least {
            assert!(Instant::now() < deadline, "the writers stopped making progress");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The writer asks a new connection what became of a commit whose reply was lost for about
    // 8.5 s; a server down for longer leaves that outcome unknown.
    let downtimes = [Duration::from_millis(500), Duration::from_secs(10), Duration::from_millis(500)];
    for (cycle, downtime) in downtimes.iter().enumerate() {
        let before = tally.lock().unwrap().acknowledged.len();
        wait_for_acks(before + 50);
        server("kill");
        std::thread::sleep(*downtime);
        server("restart");
        if cycle == downtimes.len() - 1 {
            restarted.store(true, Ordering::Release);
        }
    }
    // The handle writes again: its writer makes a new connection by itself.
    let before = tally.lock().unwrap().acknowledged.len();
    wait_for_acks(before + 50);
    stop.store(true, Ordering::Release);
    for thread in threads {
        thread.join().unwrap();
    }
    Arc::try_unwrap(store).ok().expect("the threads are done").close().unwrap();

    let tally = tally.lock().unwrap();
    // The kills reached the writers: a server down for 10 s, longer than a group whose commit
    // was in flight waits for it, fails every append meanwhile (a short outage may not: that
    // group may learn its outcome and have held every other append).
    assert!(tally.io_errors > 0, "no append failed while the server was down");
    assert!(tally.after_restart > 0);
    let reopened = Store::open(&url, Options::default()).unwrap();
    let log = reopened.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(log.len() as u64, reopened.head().unwrap().get());
    let mut batches: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (i, event) in log.iter().enumerate() {
        assert_eq!(event.position.get(), i as u64 + 1, "positions are gapless");
        batches.entry(event.tags[0].clone()).or_default().push(event.position.get());
        let id = &event.tags[0];
        let part = batches[id].len() - 1;
        assert_eq!(event.data, format!("{id}/{part}").into_bytes(), "event {} is out of its batch", event.position);
    }
    for (id, positions) in &batches {
        let first = positions[0];
        assert_eq!(positions, &(first..first + BATCH as u64).collect::<Vec<_>>(), "batch {id} is partial or twice");
    }
    for (id, first) in &tally.acknowledged {
        assert_eq!(batches.get(id).map(|p| p[0]), Some(*first), "acknowledged batch {id} is missing or moved");
    }
    eprintln!(
        "{} batches acknowledged ({} after the restart), {} in the log, {} Io errors ({} of unknown outcome)",
        tally.acknowledged.len(),
        tally.after_restart,
        batches.len(),
        tally.io_errors,
        tally.unknown_outcomes
    );
}
