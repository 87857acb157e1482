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
use lapilli_core::{AppendCondition, ErrorKind, Event, Next, Options, Position, Query, QueryItem, ReadOptions, Store};

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
// The racing writers: 8 processes x 500 conditional appends on one context, each process
// submitting 1 to 4 at once, so that its writer's groups hold several decisions.

const WRITERS: u64 = 8;
const ATTEMPTS: u64 = 500;
/// Entities every writer decides on (overlapping queries: real conflicts).
const SHARED_ENTITIES: u64 = 4;
/// Entities of each writer (nobody else writes them).
const OWN_ENTITIES: u64 = 3;
/// Entities every writer may decide on, each seldom: boundary clauses far below the head that
/// still hold.
const RARE_ENTITIES: u64 = 256;
/// Idempotency keys drawn by every writer (existence clauses that do fire).
const UNIQUE_KEYS: u64 = 300;
/// How far below the head the Postgres writer checks a boundary clause against its one fetch
/// of recent events; an `after` further below is checked by a subquery of its own
/// (`RECENT_WINDOW` in core/src/postgres/writer.rs).
const RECENT_WINDOW: u64 = 1024;

/// What an attempt's boundary clause asks about its entity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// Every event with the entity's tag.
    Any,
    /// Events of type "Decided" with the entity's tag (not the "Noted" ones).
    Decided,
    /// Events of a type no event has with the entity's tag: never a conflict.
    Never,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Any => "any",
            Kind::Decided => "Decided",
            Kind::Never => "Never",
        }
    }

    fn parse(name: &str) -> Kind {
        match name {
            "any" => Kind::Any,
            "Decided" => Kind::Decided,
            "Never" => Kind::Never,
            other => panic!("unknown kind {other}"),
        }
    }

    fn query(self, entity: &str) -> Query {
        match self {
            Kind::Any => Query::for_tags([entity]),
            Kind::Decided => Query::of([QueryItem::new(["Decided"], [entity])]),
            Kind::Never => Query::of([QueryItem::new(["Never"], [entity])]),
        }
    }
}

/// One attempt as its writer reports it: the condition it appended under and what it got.
#[derive(Debug)]
struct Attempt {
    writer: u64,
    attempt: u64,
    /// The writer's batch (appends submitted one after the other, then waited for) and the
    /// place in it.
    batch: u64,
    slot: u64,
    /// The head the writer read before submitting the batch, and after its last answer.
    seen: u64,
    settled: u64,
    entity: String,
    kind: Kind,
    event_type: String,
    after: u64,
    unique: Option<String>,
    /// For the second of two appends of the batch about one entity, both with `after` = `seen`
    /// and the first's event of type "Decided": the first's slot.
    pair_of: Option<u64>,
    outcome: Outcome,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Appended(u64),
    Conflict(u64),
    AlreadyExists(u64),
}

/// An append a child is about to submit.
struct Plan {
    entity: String,
    kind: Kind,
    event_type: &'static str,
    after: u64,
    unique: Option<String>,
    pair_of: Option<u64>,
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
    // Keys of this writer's accepted appends: an existence clause on one of them fails.
    let mut taken_keys: Vec<String> = Vec::new();
    let mut seen = store.head().unwrap().get();
    let (mut attempt, mut batch) = (0, 0);
    while attempt < ATTEMPTS {
        let size = rng.range(1, 4).min(ATTEMPTS - attempt);
        // Often two appends of the batch about one entity, both decided on the head just read:
        // once the first is accepted, the second is refused for it (a real conflict, within
        // the writer's group when both are in one).
        let pair = (size >= 2 && rng.chance(60)).then(|| {
            let first = rng.below(size - 1);
            (first, rng.range(first + 1, size - 1))
        });
        let mut plans: Vec<Plan> = Vec::new();
        for slot in 0..size {
            let event_type = if rng.chance(70) { "Decided" } else { "Noted" };
            let plan = match pair {
                Some((first, second)) if second == slot => {
                    let first_plan = &plans[first as usize];
                    // The existence clause fails too, sometimes: on the first's key (within
                    // the group, if it has one) or on a key committed before; Conflict is
                    // reported.
                    let unique = match rng.below(3) {
                        0 => Some(first_plan.unique.clone().unwrap_or_else(|| format!("unique:{}", rng.below(UNIQUE_KEYS)))),
                        1 if !taken_keys.is_empty() => Some(rng.pick(&taken_keys).clone()),
                        _ => None,
                    };
                    let (entity, kind) = (first_plan.entity.clone(), first_plan.kind);
                    Plan { entity, kind, event_type, after: seen, unique, pair_of: Some(first) }
                }
                _ => {
                    let first_of_pair = pair.is_some_and(|(first, _)| first == slot);
                    let entity = match rng.below(100) {
                        0..30 => format!("shared:{}", rng.below(SHARED_ENTITIES)),
                        30..65 => format!("own:{writer}:{}", rng.below(OWN_ENTITIES)),
                        _ => format!("rare:{}", rng.below(RARE_ENTITIES)),
                    };
                    let kind = match rng.below(100) {
                        0..45 => Kind::Any,
                        45..80 => Kind::Decided,
                        // The first of a pair must refuse the second.
                        _ if first_of_pair => Kind::Decided,
                        _ => Kind::Never,
                    };
                    let after = match rng.below(100) {
                        _ if first_of_pair => seen,
                        // Far below the head, once it is past the window: checked by subqueries.
                        0..45 if seen > RECENT_WINDOW + 1 => rng.below(seen - RECENT_WINDOW - 1),
                        // A little below the head: within the window.
                        45..60 => seen - rng.below(seen.min(200) + 1),
                        _ => seen,
                    };
                    let unique = rng.chance(25).then(|| format!("unique:{}", rng.below(UNIQUE_KEYS)));
                    let event_type = if first_of_pair { "Decided" } else { event_type };
                    Plan { entity, kind, event_type, after, unique, pair_of: None }
                }
            };
            plans.push(plan);
        }
        let pending: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(slot, plan)| {
                let mut condition = AppendCondition::new(plan.kind.query(&plan.entity)).after(Position(plan.after));
                let mut tags = vec![plan.entity.clone(), format!("writer:{writer}")];
                if let Some(unique) = &plan.unique {
                    condition = condition.fail_if_exists(Query::for_tags([unique.as_str()]));
                    tags.push(unique.clone());
                }
                let data = format!("{writer}/{}", attempt + slot as u64).into_bytes();
                store.submit(vec![Event::new(plan.event_type, tags, data)], Some(condition))
            })
            .collect();
        let outcomes: Vec<String> = pending
            .into_iter()
            .enumerate()
            .map(|(slot, pending)| match pending.wait() {
                Ok(result) => format!("appended {}", result.first.get()),
                Err(e) if e.kind() == ErrorKind::Conflict => format!("conflict {}", e.position().unwrap().get()),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => format!("exists {}", e.position().unwrap().get()),
                Err(e) => panic!("writer {writer} attempt {}: {e}", attempt + slot as u64),
            })
            .collect();
        let settled = store.head().unwrap().get();
        for (slot, (plan, outcome)) in plans.iter().zip(&outcomes).enumerate() {
            if let (Some(unique), true) = (&plan.unique, outcome.starts_with("appended")) {
                taken_keys.push(unique.clone());
            }
            report.push_str(&format!(
                "ATTEMPT {writer} {} {batch} {slot} {seen} {settled} {} {} {} {} {} {} {outcome}\n",
                attempt + slot as u64,
                plan.entity,
                plan.kind.name(),
                plan.event_type,
                plan.after,
                plan.unique.as_deref().unwrap_or("-"),
                plan.pair_of.map_or("-".to_string(), |first| first.to_string()),
            ));
        }
        seen = settled;
        attempt += size;
        batch += 1;
    }
    store.close().unwrap();
    // On a line of its own: the test harness has printed "test racing_writer_child ... " before.
    print!("\n{report}");
}

/// The writer of a racing writer's event: its data is "writer/attempt".
fn writer_of(event: &lapilli_core::SequencedEvent) -> &[u8] {
    event.data.split(|&b| b == b'/').next().unwrap()
}

/// The first of `positions` (ascending) above `after`.
fn first_after(positions: &[u64], after: u64) -> Option<u64> {
    positions.get(positions.partition_point(|&p| p <= after)).copied()
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
                batch: number(2),
                slot: number(3),
                seen: number(4),
                settled: number(5),
                entity: f[6].to_string(),
                kind: Kind::parse(f[7]),
                event_type: f[8].to_string(),
                after: number(9),
                unique: (f[10] != "-").then(|| f[10].to_string()),
                pair_of: (f[11] != "-").then(|| number(11)),
                outcome: match f[12] {
                    "appended" => Outcome::Appended(number(13)),
                    "conflict" => Outcome::Conflict(number(13)),
                    "exists" => Outcome::AlreadyExists(number(13)),
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
    // The positions of the events each query matches, ascending (every query here is about
    // one tag: the events carrying it, through the model of a query).
    let mut by_tag: HashMap<&str, Vec<u64>> = HashMap::new();
    for event in &log {
        for tag in &event.tags {
            by_tag.entry(tag.as_str()).or_default().push(event.position.get());
        }
    }
    let mut matching_cache: HashMap<(Kind, &str), Vec<u64>> = HashMap::new();
    let mut matching = |kind: Kind, tag: &str| -> Vec<u64> {
        let Some((&tag, carrying)) = by_tag.get_key_value(tag) else { return Vec::new() };
        let query = kind.query(tag);
        matching_cache
            .entry((kind, tag))
            .or_insert_with(|| carrying.iter().copied().filter(|&p| common::query_matches(at(p), &query)).collect())
            .clone()
    };
    // The attempts of each batch, in the order they were submitted.
    let mut batches: BTreeMap<(u64, u64), Vec<&Attempt>> = BTreeMap::new();
    for attempt in &attempts {
        batches.entry((attempt.writer, attempt.batch)).or_default().push(attempt);
    }
    for batch in batches.values_mut() {
        batch.sort_by_key(|a| a.slot);
        assert!(batch.iter().enumerate().all(|(i, a)| a.slot == i as u64), "a batch lost an attempt: {batch:?}");
    }

    let mut appended = 0;
    let mut refusals: BTreeMap<&str, u64> = BTreeMap::new();
    let mut count: BTreeMap<&str, u64> = BTreeMap::new();
    let mut note = |what: &'static str| *count.entry(what).or_default() += 1;
    for batch in batches.values() {
        let accepted_at = |a: &Attempt| match a.outcome {
            Outcome::Appended(position) => Some(position),
            _ => None,
        };
        for attempt in batch {
            // Where the writer decided the attempt: the head then (committed, plus the events
            // accepted before it in its group) lies in `low..=high`. It is at least the head
            // read before the batch, and the position of an earlier append of the batch that
            // was accepted (one handle decides its appends in the order they are submitted);
            // at most the head read after the batch's last answer, and below an accepted later
            // one.
            let earlier = &batch[..attempt.slot as usize];
            let later = &batch[attempt.slot as usize + 1..];
            let low = earlier.iter().filter_map(|a| accepted_at(a)).fold(attempt.seen, u64::max);
            let high = later.iter().filter_map(|a| accepted_at(a)).map(|p| p - 1).fold(attempt.settled, u64::min);
            let boundary = matching(attempt.kind, &attempt.entity);
            let existence = attempt.unique.as_deref().map(|key| matching(Kind::Any, key)).unwrap_or_default();
            let first_boundary = first_after(&boundary, attempt.after);
            // Checked by a subquery: the head at the decision is at least `seen`.
            let stale = attempt.seen - attempt.after > RECENT_WINDOW;
            match attempt.outcome {
                Outcome::Appended(position) => {
                    appended += 1;
                    let event = at(position);
                    assert_eq!(event.data, format!("{}/{}", attempt.writer, attempt.attempt).into_bytes(), "{attempt:?}");
                    let mut tags = vec![attempt.entity.clone(), format!("writer:{}", attempt.writer)];
                    tags.extend(attempt.unique.clone());
                    tags.sort();
                    assert_eq!((&event.event_type, &event.tags), (&attempt.event_type, &tags), "{attempt:?}");
                    assert!(low < position && position <= high, "{attempt:?} was placed outside {low}..={high}: {batch:?}");
                    // The boundary clause held at its position: nothing it matches between
                    // `after` and the append.
                    if let Some(p) = first_boundary.filter(|&p| p < position) {
                        panic!("{attempt:?} was accepted over event {p} ({:?})", at(p));
                    }
                    // The existence clause held: nothing it matches anywhere before.
                    if let Some(&p) = existence.first().filter(|&&p| p < position) {
                        panic!("{attempt:?} was accepted over event {p} ({:?})", at(p));
                    }
                    if stale {
                        note("stale accepted");
                    }
                    // Its types mattered: an event of the entity of another type lies between.
                    if attempt.kind == Kind::Decided
                        && first_after(&matching(Kind::Any, &attempt.entity), attempt.after).is_some_and(|p| p < position)
                    {
                        note("typed accepted over another type");
                    }
                }
                Outcome::Conflict(position) => {
                    *refusals.entry("conflict").or_default() += 1;
                    // Disjoint queries never conflict: a type no event has; an entity of this
                    // writer decided on the head it just read, no other append of its batch
                    // about it (nobody else writes it, and its earlier batches are all answered).
                    assert_ne!(attempt.kind, Kind::Never, "a false conflict: {attempt:?}");
                    let own = attempt.entity.starts_with("own:");
                    let alone = batch.iter().filter(|a| a.entity == attempt.entity).count() == 1;
                    assert!(!(own && attempt.after == attempt.seen && alone), "a false conflict: {attempt:?} ({batch:?})");
                    // No refusal is false: it names a real event the boundary query matches,
                    // after `after`, committed before the decision; the first such, as the
                    // contract says.
                    let window = attempt.after + 1..=high;
                    assert!(window.contains(&position), "{attempt:?}: event {position} is outside {window:?}");
                    let event = at(position);
                    assert!(boundary.binary_search(&position).is_ok(), "{attempt:?}: event {position} does not match ({event:?})");
                    assert_eq!(first_boundary, Some(position), "{attempt:?}: an earlier event conflicts");
                    if attempt.entity.starts_with("shared:") {
                        note("shared conflicts");
                    }
                    if stale {
                        note("stale conflicts");
                    }
                    if attempt.kind == Kind::Decided {
                        note("typed conflicts");
                    }
                    // The existence clause failed too (a match before the decision): the
                    // boundary clause is the one reported.
                    if existence.first().is_some_and(|&p| p <= low) {
                        note("both failed");
                    }
                    // Refused for an earlier append of its own batch: in the same group when
                    // a later one was accepted in it too (one commit time per group).
                    if earlier.iter().any(|a| accepted_at(a) == Some(position)) {
                        note("refused by its batch");
                        let recorded_at = at(position).recorded_at;
                        if later.iter().filter_map(|a| accepted_at(a)).any(|p| at(p).recorded_at == recorded_at) {
                            note("refused within its group");
                            // And its key was committed before the group: the writer found the
                            // existence clause failing in the table, the boundary in the group.
                            if existence.first().is_some_and(|&p| at(p).recorded_at < recorded_at) {
                                note("both failed, the boundary within its group");
                            }
                        }
                    }
                }
                Outcome::AlreadyExists(position) => {
                    *refusals.entry("exists").or_default() += 1;
                    let unique = attempt.unique.as_ref().expect("an existence clause");
                    // No refusal is false: a real event carrying the key, committed before the
                    // decision.
                    assert!(position <= high, "{attempt:?}: event {position} is after {high}");
                    let event = at(position);
                    assert!(existence.binary_search(&position).is_ok(), "{attempt:?}: event {position} lacks {unique} ({event:?})");
                    // The boundary clause held at the decision, or it would be the one reported
                    // (`Conflict` when both fail): nothing it matches after `after`, up to the
                    // head then, which is at least `low` and above the key's event.
                    if let Some(p) = first_boundary.filter(|&p| p <= low.max(position)) {
                        panic!("{attempt:?}: both clauses failed (the boundary clause at {p}); AlreadyExists was reported");
                    }
                    if stale {
                        note("stale exists");
                    }
                }
            }
            if let Some(first) = attempt.pair_of {
                // The second of two appends about one entity on the same head: once the first
                // is accepted, the second is refused for it (or for an event before it).
                if let Some(p) = accepted_at(batch[first as usize]) {
                    assert!(
                        matches!(attempt.outcome, Outcome::Conflict(c) if c <= p),
                        "{attempt:?} was not refused for its batch's append at {p}"
                    );
                    note("pairs refused");
                }
            }
            if stale {
                note("stale");
            }
        }
    }
    assert_eq!(appended, head, "every event in the log was acknowledged to its writer");
    // Groups of several decisions: appends committed together share a commit time (and a writer).
    let groups = log
        .chunk_by(|a, b| a.recorded_at == b.recorded_at && writer_of(a) == writer_of(b))
        .filter(|group| group.len() > 1)
        .count();
    // The workload really raced: shared entities conflicted and keys collided; far boundaries
    // (subqueries) answered both ways; types decided; a batch's later append was refused for
    // its earlier one; both clauses failed together; groups held several appends.
    let counted = |what: &str| count.get(what).copied().unwrap_or(0);
    assert!(counted("shared conflicts") > 0, "no conflict at all: the writers did not race ({refusals:?})");
    assert!(refusals.get("exists").copied().unwrap_or(0) > 0, "no key collided ({refusals:?})");
    for what in [
        "stale accepted",
        "stale conflicts",
        "typed conflicts",
        "typed accepted over another type",
        "refused by its batch",
        "refused within its group",
        "both failed",
    ] {
        assert!(counted(what) > 0, "no {what}: {count:?}");
    }
    assert!(groups > 0, "no group committed more than one append");
    let by_writer: BTreeMap<u64, usize> = log.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(String::from_utf8_lossy(&e.data).split('/').next().unwrap().parse().unwrap()).or_default() += 1;
        m
    });
    eprintln!(
        "{head} appended, refusals {refusals:?}, {groups} groups of several, {count:?}, events per writer {by_writer:?}"
    );
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
