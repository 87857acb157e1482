//! The second adversarial review of the PostgreSQL backend (issue 19): reads whose plan shape
//! changed (small limits, large events). Needs `LAPILLI_TEST_POSTGRES_URL`
//! (`scripts/postgres.sh start`); without it every test says it was skipped, unless
//! `LAPILLI_REQUIRE_POSTGRES` is set.

mod common;

use common::postgres::{context_url, database_url, fresh_context, url_from};

use lapilli_core::{ErrorKind, Event, Options, Position, Query, QueryItem, ReadOptions, SequencedEvent, Store};

fn open_fresh(base: &str, prefix: &str) -> Store {
    Store::open(context_url(base, &fresh_context(prefix)), Options::default()).unwrap()
}

/// `query` against a read event: the model the backend's SQL must agree with.
fn model_matches(query: &Query, event: &SequencedEvent) -> bool {
    match query {
        Query::All => true,
        Query::Items(items) => items.iter().any(|item| {
            (item.types.is_empty() || item.types.iter().any(|t| *t == event.event_type))
                && item.tags.iter().all(|tag| event.tags.contains(tag))
        }),
    }
}

/// What a read must answer, from the whole log.
fn model_read(log: &[SequencedEvent], query: &Query, options: &ReadOptions) -> Vec<u64> {
    let until = options.until.map_or(u64::MAX, Position::get);
    let mut found: Vec<u64> = log
        .iter()
        .filter(|e| e.position.get() > options.after.get() && e.position.get() <= until && model_matches(query, e))
        .map(|e| e.position.get())
        .collect();
    if options.backwards {
        found.reverse();
    }
    found.truncate(options.limit.map_or(usize::MAX, |l| l as usize));
    found
}

fn item(types: &[&str], tags: &[&str]) -> QueryItem {
    QueryItem::new(types.iter().map(|t| t.to_string()), tags.iter().map(|t| t.to_string()))
}

/// A page is now found in up to three looks (the rows at the window's near end, a walk by the
/// key as long as the density found there predicts, the rest through the indexes), so that a
/// small-limit read of a rare query no longer walks the whole primary key. Every query shape
/// (common, rare, never-matching pairs of common values, clustered far from the window's near
/// end, matches only near it, `Query::all()`, several items) in both directions, with limits
/// that stop in each look and windows that cut the log, must answer what the log holds.
#[test]
fn bounded_reads_of_rare_common_and_clustered_queries_are_exact() {
    let Some(base) = database_url() else { return };
    let store = open_fresh(&base, "looks");
    const EVENTS: u64 = 6000;
    let mut batch = Vec::new();
    for i in 1..=EVENTS {
        let mut tags = vec![format!("a:{}", i % 3), format!("b:{}", i % 7)];
        if [7, 1500, 5990].contains(&i) {
            tags.push("rare".into());
        }
        if (4000..4100).contains(&i) {
            tags.push("cluster".into());
        }
        if i <= 40 || i > EVENTS - 40 {
            tags.push("ends".into());
        }
        // Type T0 goes only with a:0 and b:0 ... never with "c:odd"; "c:odd" goes only with T1.
        let ty = format!("T{}", i % 5);
        if i % 5 == 1 && i % 2 == 1 {
            tags.push("c:odd".into());
        }
        batch.push(Event::new(ty, tags, i.to_le_bytes().to_vec()));
        if batch.len() == 1000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
    let log = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(log.len() as u64, EVENTS);

    let queries = [
        Query::all(),
        Query::for_tags(["a:1"]),
        Query::of([item(&["T2"], &["a:0", "b:3"])]),
        Query::for_tags(["rare"]),
        Query::for_tags(["cluster"]),
        Query::for_tags(["ends"]),
        Query::for_tags(["missing"]),
        // Each common, never together.
        Query::of([item(&["T0"], &["c:odd"])]),
        Query::for_tags(["a:1", "c:odd"]),
        Query::of([item(&["T3"], &["rare"]), item(&[], &["cluster", "b:2"]), item(&["T4", "T0"], &["ends"])]),
    ];
    // Also the empty windows: `after` at the head, and `until` equal to `after` (a read whose
    // first look never runs still learns the head).
    let windows = [(0, None), (100, Some(5000)), (3990, Some(4200)), (5999, None), (0, Some(1)), (6000, None), (4000, Some(4000))];
    let limits = [Some(0), Some(1), Some(2), Some(10), Some(300), Some(2000), None];
    for query in &queries {
        for &(after, until) in &windows {
            for limit in limits {
                for backwards in [false, true] {
                    let options = ReadOptions { after: Position(after), until: until.map(Position), limit, backwards };
                    let result = store.read(query, options).unwrap();
                    assert_eq!(result.head().get(), EVENTS, "the pinned head of {query:?} {options:?}");
                    let read: Vec<u64> = result
                        .collect_all()
                        .unwrap()
                        .iter()
                        .map(|e| e.position.get())
                        .collect();
                    assert_eq!(read, model_read(&log, query, &options), "{query:?} {options:?}");
                }
            }
        }
    }
    store.close().unwrap();
}

/// Pages are bounded by bytes as well as by rows: a page stops taking rows once it holds 4 MiB
/// and the next asks for as many as fit. Events of 300 KiB (48 of them: 14 MiB, pages of 256
/// and more rows before) read in every direction, with limits and a query, must come back
/// whole, each once, in order.
#[test]
fn reads_of_large_events_are_exact_across_byte_bounded_pages() {
    let Some(base) = database_url() else { return };
    let store = open_fresh(&base, "large");
    const EVENTS: u64 = 48;
    const SIZE: usize = 300 << 10;
    let data_of = |i: u64| {
        let mut data = vec![(i % 251) as u8; SIZE];
        data[..8].copy_from_slice(&i.to_le_bytes());
        data
    };
    for chunk in (1..=EVENTS).collect::<Vec<_>>().chunks(8) {
        let events = chunk
            .iter()
            .map(|&i| Event::new("Big", vec![format!("mod:{}", i % 3)], data_of(i)))
            .collect();
        store.append(events, None).unwrap();
    }
    let log: Vec<SequencedEvent> = (1..=EVENTS)
        .map(|i| SequencedEvent {
            position: Position(i),
            recorded_at: 0,
            event_type: "Big".into(),
            tags: vec![format!("mod:{}", i % 3)],
            data: data_of(i),
        })
        .collect();
    for query in [Query::all(), Query::for_tags(["mod:1"])] {
        for limit in [None, Some(1), Some(20), Some(30)] {
            for backwards in [false, true] {
                let options = ReadOptions { limit, backwards, ..ReadOptions::default() };
                let read = store.read(&query, options).unwrap().collect_all().unwrap();
                let expected = model_read(&log, &query, &options);
                assert_eq!(read.iter().map(|e| e.position.get()).collect::<Vec<_>>(), expected, "{query:?} {options:?}");
                for event in &read {
                    assert!(event.data == data_of(event.position.get()), "data of {} differs", event.position.get());
                }
            }
        }
    }
    store.close().unwrap();
}

/// A store opened through PgBouncer (a pooler the issue names; the backend already polls for the
/// poolers that drop `LISTEN`) must work. The backend turned JIT off with `-c jit=off` in the
/// startup packet's `options`, and PgBouncer refuses `options` at its default settings
/// ("unsupported startup parameter: options" up to 1.19; from 1.20 every `-c` of a parameter it
/// does not track): no connection could be made at all. Runs when
/// `LAPILLI_TEST_PGBOUNCER_URL` names a PgBouncer (transaction pooling) in front of the test
/// server (`scripts/postgres.sh start` starts one); skipped otherwise, unless
/// `LAPILLI_REQUIRE_POSTGRES` is set.
#[test]
fn a_store_opens_appends_and_reads_through_pgbouncer() {
    let Some(bouncer) = url_from("LAPILLI_TEST_PGBOUNCER_URL") else { return };
    let store = open_fresh(&bouncer, "bouncer");
    let key = Query::for_tags(["order:1"]);
    store.append(vec![Event::new("Placed", ["order:1"], vec![1])], None).unwrap();
    let refused = store.append(
        vec![Event::new("Placed", ["order:1"], vec![2])],
        Some(lapilli_core::AppendCondition::new(key.clone()).after(Position(0))),
    );
    let refused = refused.unwrap_err();
    assert_eq!(refused.kind(), lapilli_core::ErrorKind::Conflict, "{refused:?}");
    let read = store.read(&key, ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(read.len(), 1);
    store.close().unwrap();
}

/// `after` beyond the head is `InvalidArgument` naming both, as for the embedded store, now
/// that the head is read in the read's first statement; the store is unchanged.
#[test]
fn a_read_after_beyond_the_head_is_invalid_argument() {
    let Some(base) = database_url() else { return };
    let store = open_fresh(&base, "after_head");
    store.append(vec![Event::new("T", ["k:1"], vec![1])], None).unwrap();
    for backwards in [false, true] {
        for query in [Query::all(), Query::for_tags(["k:1"])] {
            let options = ReadOptions { after: Position(5), backwards, ..ReadOptions::default() };
            let error = store.read(&query, options).err().expect("a read after the head was accepted");
            assert_eq!(error.kind(), ErrorKind::InvalidArgument);
            assert!(error.message().contains("after is 5; the head is 1"), "{}", error.message());
        }
    }
    assert_eq!(store.head().unwrap().get(), 1);
    store.close().unwrap();
}
