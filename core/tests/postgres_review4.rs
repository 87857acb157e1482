//! The fourth adversarial review of the PostgreSQL backend (2026-12-04): a subscription's
//! passes on sparse matches, conditions decided against a group's earlier appends, the URL's
//! scheme in capitals, and a database not encoded in UTF-8. Needs `LAPILLI_TEST_POSTGRES_URL`
//! (`scripts/postgres.sh start`); without it every test says it was skipped, unless
//! `LAPILLI_REQUIRE_POSTGRES` is set.

mod common;
use std::collections::BTreeMap;
use std::time::Duration;

use common::postgres::{context_url, fresh_context as fresh};
use lapilli_core::{AppendCondition, ErrorKind, Event, Next, Options, Position, Query, QueryItem, ReadOptions, Store};

fn open(context: &str) -> Store {
    let base = common::postgres::database_url().expect("checked by the caller");
    Store::open(context_url(&base, context), Options::default()).unwrap()
}

fn next_position(sub: &lapilli_core::Subscription) -> u64 {
    match sub.next(Some(Duration::from_secs(10))).unwrap() {
        Next::Event(event) => event.position.get(),
        other => panic!("expected an event, got {other:?}"),
    }
}

/// Finding: every pass of a subscription began a new read wanting only that pass's `max`
/// events. Matches sparser than the read's probe (256 rows) sent each pass through the
/// indexes over every match left in the window: two statements per event taken one at a
/// time, and the cost of each growing with what was left (the square of the matches). The
/// subscription now keeps its read, with the rows of its page, from pass to pass.
#[test]
fn a_subscription_taking_sparse_matches_one_at_a_time_reads_them_in_a_few_statements() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let store = open(&fresh("rv4_sparse"));
    // 40 matches, one every 300 events: the 256 rows after a match never hold the next one.
    let mut expected = Vec::new();
    let mut batch = Vec::new();
    for i in 1..=12_000u64 {
        let rare = i % 300 == 0;
        if rare {
            expected.push(i);
        }
        batch.push(Event::new(if rare { "Rare" } else { "Common" }, [format!("n:{}", i % 7)], vec![1]));
        if batch.len() == 1000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
    let sub = store.subscribe(&Query::for_types(["Rare"]), Position(0)).unwrap();
    let before = store.postgres_looks();
    let taken: Vec<u64> = expected.iter().map(|_| next_position(&sub)).collect();
    assert_eq!(taken, expected);
    let looks = store.postgres_looks() - before;
    assert!(looks <= 4, "{looks} statements to take {} sparse events one at a time", expected.len());

    // Live, after the catch-up: the kept read is done at the old head, and what came after it
    // is read on from there; each new match is delivered once, in order.
    for _ in 0..3 {
        let appended = store
            .append(vec![Event::new("Common", ["n:1"], vec![2]), Event::new("Rare", ["n:2"], vec![3]), Event::new("Common", ["n:3"], vec![4])], None)
            .unwrap();
        assert_eq!(next_position(&sub), appended.first.get() + 1);
    }
    assert_eq!(sub.next(Some(Duration::from_millis(50))).unwrap(), Next::TimedOut);

    // Batches larger than one and smaller than the page: the rest of a page is delivered by
    // later passes, without a repeat or a gap.
    let again = store.subscribe(&Query::for_types(["Rare"]), Position(expected[3])).unwrap();
    let mut seen = Vec::new();
    let mut appended_meanwhile = 0;
    while let Some(batch) = again.try_next_batch(3).unwrap().filter(|batch| !batch.is_empty()) {
        seen.extend(batch.iter().map(|event| event.position.get()));
        // The head moves while the kept read still holds rows of its page.
        if appended_meanwhile < 4 {
            store.append(vec![Event::new("Common", ["n:4"], vec![5]), Event::new("Rare", ["n:5"], vec![6])], None).unwrap();
            appended_meanwhile += 1;
        }
    }
    let all: Vec<u64> = store
        .read(&Query::for_types(["Rare"]), ReadOptions { after: Position(expected[3]), ..ReadOptions::default() })
        .unwrap()
        .collect_all()
        .unwrap()
        .iter()
        .map(|event| event.position.get())
        .collect();
    assert_eq!(seen, all);
    assert_eq!(seen.len(), expected.len() - 4 + 3 + 4);
    store.close().unwrap();
}

/// Finding: a condition was checked against the appends accepted earlier in its group by
/// walking all their events (appends times events per group). It now asks an index of them by
/// type and by the tags the group's conditions name, as the embedded writer does. Whatever
/// the grouping, exactly the first append of each key is accepted, and every other one is
/// refused for that key's event and no other: no false conflicts between keys.
#[test]
fn appends_submitted_at_once_are_decided_exactly_against_each_other() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let context = fresh("rv4_group");
    let store = open(&context);
    // Something committed first, of the same keys but another type: no boundary clause below
    // names it, and no existence clause matches it.
    store.append((0..10).map(|k| Event::new("Old", [format!("key:{k}")], vec![])).collect(), None).unwrap();
    let head = store.head().unwrap();
    // The context's row held by another connection while the appends are submitted: the
    // writer's first group waits for it, and the rest queue behind, so they are decided
    // against each other in large groups (as under load), not one by one.
    let base = common::postgres::database_url().unwrap();
    let mut holder = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let mut hold = holder.transaction().unwrap();
    hold.query("SELECT head FROM lapilli_contexts WHERE name = $1 FOR UPDATE", &[&context]).unwrap();
    let groups_before = store.stats().unwrap().group_commits;
    // Boundary clauses: one type of two and the key's tag, with a batch of filler events (none
    // with a key) before the guarded one, so groups hold many events.
    let pending: Vec<_> = (0..300)
        .map(|i| {
            let key = format!("key:{}", i % 10);
            let guard = AppendCondition::new(Query::of([QueryItem::new(["Even", "Odd"], [key.clone()])])).after(head);
            let mut events: Vec<Event> = (0..20).map(|j| Event::new("Filler", [format!("f:{j}")], vec![])).collect();
            events.push(Event::new(if i % 2 == 0 { "Even" } else { "Odd" }, [key, format!("id:{i}")], vec![]));
            store.submit(events, Some(guard))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    hold.rollback().unwrap();
    let mut accepted_at = BTreeMap::new();
    let mut refusals = Vec::new();
    for (i, pending) in pending.into_iter().enumerate() {
        match pending.wait() {
            Ok(result) => assert!(accepted_at.insert(i % 10, result.last).is_none(), "two appends of key {} accepted", i % 10),
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Conflict, "{}", error.message());
                refusals.push((i, error));
            }
        }
    }
    assert_eq!(accepted_at.len(), 10);
    let groups = store.stats().unwrap().group_commits - groups_before;
    assert!(groups <= 3, "300 appends queued behind a held lock were committed in {groups} groups");
    for (i, error) in &refusals {
        assert!(*i >= 10, "append {i}, the first of its key, was refused: {}", error.message());
        assert_eq!(error.position(), Some(accepted_at[&(i % 10)]), "append {i}: {}", error.message());
    }

    // Existence clauses, with a boundary clause that never matches: the first append of each
    // id is accepted; the `Old` events of the keys above are not ids.
    let pending: Vec<_> = (0..200)
        .map(|i| {
            let id = format!("unique:{}", i % 25);
            let guard = AppendCondition::new(Query::for_tags(["nothing:here"])).fail_if_exists(Query::for_tags([id.clone()]));
            store.submit(vec![Event::new("Made", [id], vec![])], Some(guard))
        })
        .collect();
    let mut made = BTreeMap::new();
    for (i, pending) in pending.into_iter().enumerate() {
        match pending.wait() {
            Ok(result) => {
                assert!(i < 25, "append {i} accepted although unique:{} exists", i % 25);
                made.insert(i % 25, result.last);
            }
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{}", error.message());
                assert_eq!(error.position(), Some(made[&(i % 25)]));
            }
        }
    }
    assert_eq!(made.len(), 25);
    // The log agrees: one guarded event per key and one per id.
    for k in 0..10 {
        let guarded = Query::of([QueryItem::new(["Even", "Odd"], [format!("key:{k}")])]);
        assert_eq!(store.read(&guarded, ReadOptions::default()).unwrap().collect_all().unwrap().len(), 1);
    }
    for id in 0..25 {
        assert_eq!(store.read(&Query::for_tags([format!("unique:{id}")]), ReadOptions::default()).unwrap().collect_all().unwrap().len(), 1);
    }
    store.close().unwrap();
}

/// Finding: `PostgreSQL://...` was taken for a Postgres URL and handed to the driver as
/// written, which knows the scheme in lower case only ("not a PostgreSQL URL the driver
/// accepts"). Schemes are case-insensitive.
#[test]
fn a_url_whose_scheme_is_in_capitals_opens_the_same_context() {
    let Some(base) = common::postgres::database_url() else { return };
    let context = fresh("rv4_scheme");
    let store = open(&context);
    store.append(vec![Event::new("T", ["k:1"], vec![7])], None).unwrap();
    store.close().unwrap();
    let shouted = context_url(&base, &context).replacen("postgresql://", "PostgreSQL://", 1).replacen("postgres://", "POSTGRES://", 1);
    assert!(!shouted.starts_with("postgres"), "{shouted}");
    let again = Store::open(&shouted, Options::default()).unwrap();
    assert_eq!(again.head().unwrap(), Position(1));
    again.close().unwrap();
}

/// Finding: a database in another encoding than UTF-8 opened, and a type or tag it cannot
/// hold then failed its whole group on the server (every append in it answered `Io`). It is
/// refused at open now, naming the encoding, and nothing is created in it.
#[test]
fn a_database_not_encoded_in_utf8_is_refused_at_open() {
    let Some(base) = common::postgres::database_url() else { return };
    /// Drops the database however the test ends.
    struct Dropped(postgres::Client, String);
    impl Drop for Dropped {
        fn drop(&mut self) {
            // WITH (FORCE) needs PostgreSQL 13; without it, nothing should be connected anyway.
            if self.0.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.1)).is_err() {
                let _ = self.0.batch_execute(&format!("DROP DATABASE IF EXISTS {}", self.1));
            }
        }
    }
    let database = fresh("rv4_latin1");
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {database} TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"))
        .unwrap();
    let _dropped = Dropped(admin, database.clone());
    // The test server's URL is postgresql://user@host:port/database, with no parameters.
    let (server, _) = base.rsplit_once('/').unwrap();
    let latin1_url = format!("{server}/{database}");
    let url = context_url(&latin1_url, "courses");
    let error = Store::open(&url, Options::default()).map(|_| ()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{}", error.message());
    assert!(error.message().contains("LATIN1"), "{}", error.message());
    let mut latin1 = postgres::Client::connect(&latin1_url, postgres::NoTls).unwrap();
    let tables: bool = latin1.query_one("SELECT to_regclass('lapilli_contexts') IS NOT NULL", &[]).unwrap().get(0);
    assert!(!tables, "the refused open created lapilli_contexts");
    // Read-only, it opens (with a warning) so that what an earlier version wrote there can be
    // read; here there is no context, which a read-only handle does not create.
    let error = Store::open_read_only(&url).map(|_| ()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io, "{}", error.message());
    assert!(error.message().contains("does not exist"), "{}", error.message());
    drop(latin1);
}
