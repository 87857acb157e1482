//! The PostgreSQL backend beyond the conformance scenarios: opening by URL, the schema version,
//! handles in several processes deciding against one context (the racing-writer test with its
//! checker), and following another handle's commits.
//!
//! Needs `LAPILLI_TEST_POSTGRES_URL` (`scripts/postgres.sh start`); without it every test says
//! it was skipped, unless `LAPILLI_REQUIRE_POSTGRES` is set (as `scripts/test.sh` does).

mod common;

use common::postgres::{context_url, database_url, fresh_context};

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::Rng;
use lapilli_core::{AppendCondition, ErrorKind, Event, Next, Options, Position, Query, ReadOptions, Store};

#[test]
fn opening_a_url_opens_a_context_and_paths_stay_paths() {
    let Some(base) = database_url() else { return };
    let context = fresh_context("open");
    let url = context_url(&base, &context);
    let store = Store::open(&url, Options::default()).unwrap();
    assert!(store.is_postgres());
    assert!(!store.is_read_only());
    store.append(vec![Event::new("Opened", ["account:a1"], b"x".to_vec())], None).unwrap();
    store.close().unwrap();

    // The same context again, through the other spelling of the scheme.
    let again = Store::open(url.replacen("postgresql://", "postgres://", 1), Options::default()).unwrap();
    let events = again.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "Opened");
    assert_eq!(events[0].data, b"x");
    drop(again);

    // A URL with another scheme is refused, and nothing named after it appears on disk.
    let dir = tempfile::tempdir().unwrap();
    let cwd_file = dir.path().join("mysql:");
    let err = Store::open("mysql://db/events", Options::default()).err().expect("the open succeeded");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("\"mysql\""), "{}", err.message());
    assert!(!std::path::Path::new("mysql:").exists() && !cwd_file.exists());

    // A context name that cannot name a table, named in the error; nothing is created.
    let err = Store::open(context_url(&base, "Bad-Name"), Options::default()).err().expect("the open succeeded");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("Bad-Name"), "{}", err.message());
}

#[test]
fn a_read_only_handle_on_a_url_refuses_appends_and_follows_commits() {
    let Some(base) = database_url() else { return };
    let url = context_url(&base, &fresh_context("ro"));
    // A read-only handle needs an existing context: Io, as for a missing directory, naming it.
    let err = Store::open_read_only(&url).err().expect("the open succeeded");
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.message().contains("does not exist"), "{}", err.message());
    let dir = tempfile::tempdir().unwrap();
    let missing = Store::open_read_only(dir.path().join("missing")).err().expect("the open succeeded");
    assert_eq!(missing.kind(), err.kind(), "the two backends answer a missing store differently");
    let writer = Store::open(&url, Options::default()).unwrap();
    let reader = Store::open_read_only(&url).unwrap();
    assert!(reader.is_read_only());
    let err = reader.append(vec![Event::new("E", ["t"], vec![])], None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly);
    // The reader's subscription sees the writer's commits (another handle: through the
    // listener, as another process would).
    let subscription = reader.subscribe(&Query::for_tags(["t"]), Position::ZERO).unwrap();
    writer.append(vec![Event::new("E", ["t"], vec![1])], None).unwrap();
    writer.append(vec![Event::new("E", ["u"], vec![2]), Event::new("E", ["t"], vec![3])], None).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match subscription.next(Some(Duration::from_secs(30))).unwrap() {
            Next::Event(event) => seen.push(event.position.get()),
            other => panic!("the subscription answered {other:?} before the second event"),
        }
    }
    assert_eq!(seen, [1, 3]);
    assert_eq!(reader.head().unwrap().get(), 3);
}

#[test]
fn a_context_of_a_newer_schema_is_refused() {
    let Some(base) = database_url() else { return };
    let context = fresh_context("newer");
    let url = context_url(&base, &context);
    Store::open(&url, Options::default()).unwrap().close().unwrap();
    let mut client = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    client.execute("UPDATE lapilli_contexts SET schema_version = 99 WHERE name = $1", &[&context]).unwrap();
    let err = Store::open(&url, Options::default()).err().expect("the open succeeded");
    assert_eq!(err.kind(), ErrorKind::Corruption);
    assert!(err.message().contains("schema version 99"), "{}", err.message());
    assert!(err.message().contains("newer Lapilli"), "{}", err.message());
}

#[test]
fn a_lost_server_is_io() {
    if database_url().is_none() {
        return;
    }
    // Nothing listens on port 1.
    let err = Store::open("postgresql://lapilli@127.0.0.1:1/lapilli?context=x", Options::default()).err().expect("the open succeeded");
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.message().contains("127.0.0.1:1"), "{}", err.message());
}

// ---------------------------------------------------------------------------------------------
// The racing writers: 8 processes x 500 conditional appends on one context.

const WRITERS: u64 = 8;
const ATTEMPTS: u64 = 500;
/// Entities every writer decides on (overlapping queries: real conflicts).
const SHARED_ENTITIES: u64 = 4;
/// Idempotency keys drawn by every writer (existence clauses that do fire).
const UNIQUE_KEYS: u64 = 300;

/// One attempt as its writer reports it: the condition it appended under and what it got.
#[derive(Debug)]
struct Attempt {
    writer: u64,
    attempt: u64,
    entity: String,
    after: u64,
    unique: Option<String>,
    outcome: Outcome,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Appended(u64),
    Conflict(u64),
    AlreadyExists(u64),
}

/// The child's side: run by `racing_writers_leave_a_log_that_proves_every_verdict` in other
/// processes of this test binary (ignored when run directly).
#[test]
#[ignore = "a child process of the racing-writer test"]
fn racing_writer_child() {
    let Ok(url) = std::env::var("LAPILLI_RACE_URL") else { return };
    let writer: u64 = std::env::var("LAPILLI_RACE_WRITER").unwrap().parse().unwrap();
    let store = Store::open(&url, Options::default()).unwrap();
    let mut rng = Rng::new(writer * 7919 + 13);
    let mut report = String::new();
    for attempt in 0..ATTEMPTS {
        // Half the decisions are about an entity every writer touches, half about one of its
        // own (those must never conflict with the others').
        let entity = if rng.chance(50) {
            format!("shared:{}", rng.below(SHARED_ENTITIES))
        } else {
            format!("own:{writer}:{}", rng.below(3))
        };
        let unique = rng.chance(25).then(|| format!("unique:{}", rng.below(UNIQUE_KEYS)));
        let query = Query::for_tags([entity.as_str()]);
        let after = store.read(&query, ReadOptions { limit: Some(0), ..ReadOptions::default() }).unwrap().head();
        let mut condition = AppendCondition::new(query).after(after);
        let mut tags = vec![entity.clone(), format!("writer:{writer}")];
        if let Some(unique) = &unique {
            condition = condition.fail_if_exists(Query::for_tags([unique.as_str()]));
            tags.push(unique.clone());
        }
        let data = format!("{writer}/{attempt}").into_bytes();
        let outcome = match store.append(vec![Event::new("Decided", tags, data)], Some(condition)) {
            Ok(result) => format!("appended {}", result.first.get()),
            Err(e) if e.kind() == ErrorKind::Conflict => format!("conflict {}", e.position().unwrap().get()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => format!("exists {}", e.position().unwrap().get()),
            Err(e) => panic!("writer {writer} attempt {attempt}: {e}"),
        };
        let unique = unique.as_deref().unwrap_or("-");
        report.push_str(&format!("ATTEMPT {writer} {attempt} {entity} {} {unique} {outcome}\n", after.get()));
    }
    store.close().unwrap();
    // On a line of its own: the test harness has printed "test racing_writer_child ... " before.
    print!("\n{report}");
}

#[test]
fn racing_writers_leave_a_log_that_proves_every_verdict() {
    let Some(base) = database_url() else { return };
    let url = context_url(&base, &fresh_context("race"));
    // The context exists before the writers race to open it (they would also be fine racing
    // to create it: that is serialised by an advisory lock).
    Store::open(&url, Options::default()).unwrap().close().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|writer| {
            common::this_test_binary()
                .args(["--ignored", "--exact", "racing_writer_child", "--nocapture", "--test-threads=1"])
                .env("LAPILLI_RACE_URL", &url)
                .env("LAPILLI_RACE_WRITER", writer.to_string())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut attempts = Vec::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "a writer failed: {}", String::from_utf8_lossy(&output.stdout));
        for line in String::from_utf8(output.stdout).unwrap().lines() {
            let Some(rest) = line.strip_prefix("ATTEMPT ") else { continue };
            let f: Vec<&str> = rest.split(' ').collect();
            let number = |i: usize| f[i].parse::<u64>().unwrap();
            attempts.push(Attempt {
                writer: number(0),
                attempt: number(1),
                entity: f[2].to_string(),
                after: number(3),
                unique: (f[4] != "-").then(|| f[4].to_string()),
                outcome: match f[5] {
                    "appended" => Outcome::Appended(number(6)),
                    "conflict" => Outcome::Conflict(number(6)),
                    "exists" => Outcome::AlreadyExists(number(6)),
                    other => panic!("unknown outcome {other}"),
                },
            });
        }
    }
    assert_eq!(attempts.len() as u64, WRITERS * ATTEMPTS, "every attempt is reported");

    // The checker: replay the log and prove every verdict against it.
    let store = Store::open(&url, Options::default()).unwrap();
    let log = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    let head = store.head().unwrap().get();
    assert_eq!(log.len() as u64, head);
    for (i, event) in log.iter().enumerate() {
        assert_eq!(event.position.get(), i as u64 + 1, "positions are gapless");
    }
    let at = |position: u64| &log[position as usize - 1];
    let has = |position: u64, tag: &str| at(position).tags.iter().any(|t| t == tag);
    let mut appended = 0;
    let mut refusals: HashMap<&str, u64> = HashMap::new();
    let mut shared_conflicts = 0;
    for attempt in &attempts {
        match attempt.outcome {
            Outcome::Appended(position) => {
                appended += 1;
                let event = at(position);
                assert_eq!(event.data, format!("{}/{}", attempt.writer, attempt.attempt).into_bytes(), "{attempt:?}");
                // The boundary clause held at its position: nothing about the entity between
                // what the writer read and the append.
                for p in attempt.after + 1..position {
                    assert!(!has(p, &attempt.entity), "{attempt:?} was accepted over event {p}");
                }
                // The existence clause held: the key appears nowhere before.
                if let Some(unique) = &attempt.unique {
                    for p in 1..position {
                        assert!(!has(p, unique), "{attempt:?} was accepted over event {p} ({unique})");
                    }
                }
            }
            Outcome::Conflict(position) => {
                *refusals.entry("conflict").or_default() += 1;
                if attempt.entity.starts_with("shared:") {
                    shared_conflicts += 1;
                }
                assert!(position > attempt.after && position <= head, "{attempt:?}");
                assert!(has(position, &attempt.entity), "{attempt:?}: event {position} is not about the entity");
                // The first such event, as the contract says.
                for p in attempt.after + 1..position {
                    assert!(!has(p, &attempt.entity), "{attempt:?}: event {p} conflicts earlier");
                }
                // Entities of one writer are decided by that writer alone, one at a time: a
                // conflict there would be a false one.
                assert!(!attempt.entity.starts_with("own:"), "a false conflict: {attempt:?}");
            }
            Outcome::AlreadyExists(position) => {
                *refusals.entry("exists").or_default() += 1;
                let unique = attempt.unique.as_ref().expect("an existence clause");
                assert!(has(position, unique), "{attempt:?}: event {position} does not carry {unique}");
            }
        }
    }
    assert_eq!(appended, head, "every event in the log was acknowledged to its writer");
    // The workload really raced: shared entities conflicted and keys collided.
    assert!(shared_conflicts > 0, "no conflict at all: the writers did not race ({refusals:?})");
    assert!(refusals.get("exists").copied().unwrap_or(0) > 0, "no key collided ({refusals:?})");
    let by_writer: BTreeMap<u64, usize> = log.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(String::from_utf8_lossy(&e.data).split('/').next().unwrap().parse().unwrap()).or_default() += 1;
        m
    });
    eprintln!("{head} appended, refusals {refusals:?}, events per writer {by_writer:?}");
}

/// Boundary clauses far below the head (checked by subqueries, not the group's fetch of recent
/// events) and near it, in one group, give the same verdicts.
#[test]
fn stale_and_recent_boundaries_in_one_group() {
    let Some(base) = database_url() else { return };
    let store = Store::open(context_url(&base, &fresh_context("stale")), Options::default()).unwrap();
    let filler: Vec<Event> = (0..1500).map(|i| Event::new("Filler", [format!("n:{i}")], vec![])).collect();
    store.append(vec![Event::new("Start", ["entity:a"], vec![])], None).unwrap();
    store.append(filler, None).unwrap();
    store.append(vec![Event::new("Late", ["entity:b"], vec![])], None).unwrap();
    let head = store.head().unwrap().get();
    assert_eq!(head, 1502);
    let guard = |tag: &str, after: u64| Some(AppendCondition::new(Query::for_tags([tag])).after(Position(after)));
    let submitted = vec![
        // Stale, conflicting at 1: refused.
        store.submit(vec![Event::new("E", ["x"], vec![])], guard("entity:a", 0)),
        // Stale, nothing after 1 about entity:a: accepted.
        store.submit(vec![Event::new("E", ["x"], vec![])], guard("entity:a", 1)),
        // Recent, conflicting at 1502: refused.
        store.submit(vec![Event::new("E", ["x"], vec![])], guard("entity:b", 1501)),
        // Stale, conflicting at 1502.
        store.submit(vec![Event::new("E", ["x"], vec![])], guard("entity:b", 10)),
        // Recent, nothing: accepted.
        store.submit(vec![Event::new("E", ["entity:c"], vec![])], guard("entity:c", 1500)),
        // Stale, conflicting with the append just accepted in the same group (or before it).
        store.submit(vec![Event::new("E", ["y"], vec![])], guard("entity:c", 5)),
    ];
    let outcomes: Vec<_> = submitted
        .into_iter()
        .map(|p| match p.wait() {
            Ok(r) => format!("ok {}", r.first.get()),
            Err(e) => format!("{:?} {}", e.kind(), e.position().map_or(0, |p| p.get())),
        })
        .collect();
    assert_eq!(outcomes[0], "Conflict 1");
    assert!(outcomes[1].starts_with("ok "), "{outcomes:?}");
    assert_eq!(outcomes[2], "Conflict 1502");
    assert_eq!(outcomes[3], "Conflict 1502");
    assert!(outcomes[4].starts_with("ok "), "{outcomes:?}");
    let c_at: u64 = outcomes[4][3..].parse().unwrap();
    assert_eq!(outcomes[5], format!("Conflict {c_at}"));
}

/// `stats()` on a Postgres store counts what this handle appended (the `fsync` figures are the
/// COMMIT's round trip); the segment listing and the index vocabulary are embedded-only and say so.
#[test]
fn stats_count_a_postgres_handles_appends_and_file_listings_are_refused() {
    let Some(base) = database_url() else { return };
    let url = context_url(&base, &fresh_context("stats"));
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(vec![Event::new("A", ["k:1"], b"12345".to_vec()), Event::new("B", ["k:2"], vec![])], None).unwrap();
    store.append(vec![Event::new("A", ["k:1"], vec![])], None).unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(stats.head, 3);
    assert_eq!(stats.events_appended, 3);
    assert_eq!(stats.bytes_appended, (1 + 3 + 5) + (1 + 3) + (1 + 3));
    assert_eq!(stats.group_commits, 2);
    assert_eq!(stats.fsyncs, 2);
    assert!(stats.fsync_max_micros > 0);
    assert_eq!(stats.queue_depth, 0);
    assert_eq!((stats.segments, stats.index_bytes), (0, 0));
    assert_eq!(stats.follower_lag_positions, None);
    for err in [store.types().err(), store.tags("").err(), store.segments().err()] {
        let err = err.expect("a file listing answered on Postgres");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("PostgreSQL"), "{}", err.message());
    }
    store.close().unwrap();
    assert_eq!(store.stats().err().map(|e| e.kind()), Some(ErrorKind::Closed));
}

/// The server connections with this application name.
fn server_connections(base: &str, application: &str) -> i64 {
    common::postgres::connections_of(base, application).1
}

/// `?max_connections=` caps the connections a handle lends to reads at once: 8 threads reading
/// together queue for 2 rather than open 8 server processes (the server refuses past its own
/// `max_connections`, and every process of a service would hit that at once).
#[test]
fn reads_share_at_most_max_connections_connections() {
    let Some(base) = database_url() else { return };
    let context = fresh_context("cap");
    let writer = Store::open(context_url(&base, &context), Options::default()).unwrap();
    for i in 0..50 {
        writer.append(vec![Event::new("A", [format!("k:{}", i % 5)], vec![7; 64])], None).unwrap();
    }
    let application = fresh_context("lapilli_cap");
    let url = format!("{}&max_connections=2&application_name={application}", context_url(&base, &context));
    let reader = std::sync::Arc::new(Store::open_read_only(&url).unwrap());
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (base, application, peak, done) = (base.clone(), application.clone(), peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                peak.fetch_max(server_connections(&base, &application), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let readers: Vec<_> = (0..8)
        .map(|t| {
            let reader = reader.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let query = Query::for_tags([format!("k:{}", (t + i) % 5)]);
                    let events = reader.read(&query, ReadOptions::default()).unwrap().collect_all().unwrap();
                    assert_eq!(events.len(), 10);
                }
            })
        })
        .collect();
    for thread in readers {
        thread.join().unwrap();
    }
    // Whatever the watcher saw, and what stays open now: the listener's connection and at most
    // two kept for reads.
    let after = server_connections(&base, &application);
    done.store(true, std::sync::atomic::Ordering::Release);
    watcher.join().unwrap();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed).max(after);
    assert!(after >= 1, "no connection of the reader was seen");
    assert!(peak <= 3, "{peak} connections at once (listener + 2 allowed)");
    reader.close().unwrap();
    writer.close().unwrap();
}
