//! The PostgreSQL backend behind PgBouncer in transaction pooling mode (issue 19: "a polling
//! fallback for poolers that drop LISTEN"). Needs `LAPILLI_TEST_POSTGRES_URL` and
//! `LAPILLI_TEST_PGBOUNCER_URL` (`scripts/postgres.sh start` starts both); without them every
//! test says it was skipped, unless `LAPILLI_REQUIRE_POSTGRES` is set.
//!
//! What a LISTEN through the pooler does (PgBouncer 1.18, Debian 12): it is neither refused nor
//! kept. PgBouncer runs it on whichever server connection it lends for that one statement and
//! answers `LISTEN`; the server connection then goes back to the pool, still registered on the
//! channel, and the client is idle with no server connection at all. A NOTIFY reaches that
//! pooled server connection while no client is linked to it, and PgBouncer discards it
//! ("got packet 'A' from server when not linked" in its log). So the listener's LISTEN
//! succeeds, it never hears a notification, and it follows commits by its head poll alone.

mod common;

use common::postgres::{database_url, fresh_context, url_from};

use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;

use lapilli_core::{Event, Next, Options, Position, Query, Store};

/// The direct server's URL and the pooler's, or `None` (skipped) when either is missing.
fn urls() -> Option<(String, String)> {
    Some((database_url()?, url_from("LAPILLI_TEST_PGBOUNCER_URL")?))
}

fn open(base: &str, context: &str, extra: &str) -> Store {
    let separator = if base.contains('?') { '&' } else { '?' };
    Store::open(format!("{base}{separator}context={context}{extra}"), Options::default()).unwrap()
}

/// PgBouncer's part of the story, without the backend: a LISTEN through the pooler is accepted,
/// and a NOTIFY committed afterwards never reaches the listening client. If a PgBouncer ever
/// delivers it, the backend still works (a notification only wakes the head poll early), but
/// the module comment and ARCHITECTURE.md's Postgres section are wrong and must say so.
#[test]
fn a_listen_through_the_pooler_is_accepted_and_never_hears_a_notify() {
    let Some((direct, bouncer)) = urls() else { return };
    let channel = fresh_context("pooler_channel");
    let mut direct_listener = postgres::Client::connect(&direct, postgres::NoTls).unwrap();
    direct_listener.batch_execute(&format!("LISTEN {channel}")).unwrap();
    let mut listener = postgres::Client::connect(&bouncer, postgres::NoTls).unwrap();
    listener.batch_execute(&format!("LISTEN {channel}")).expect("PgBouncer refused the LISTEN");
    let mut notifier = postgres::Client::connect(&direct, postgres::NoTls).unwrap();
    notifier.batch_execute(&format!("NOTIFY {channel}, 'committed'")).unwrap();

    // The same wait, direct, hears it: the server did deliver the NOTIFY.
    let heard = direct_listener.notifications().timeout_iter(Duration::from_secs(30)).next().unwrap();
    assert!(heard.is_some(), "a direct LISTEN did not hear a NOTIFY within 30 s");
    // Time for the pooled server connection that ran the LISTEN to pass it on (to PgBouncer,
    // which drops it) before the next statement links a server connection to the client again.
    std::thread::sleep(Duration::from_millis(500));

    // Through the pooler: a statement makes the client read whatever reached it, and nothing has.
    listener.batch_execute("SELECT 1").unwrap();
    let pooled = listener.notifications().timeout_iter(Duration::from_millis(500)).next().unwrap();
    assert!(pooled.is_none(), "a LISTEN through PgBouncer heard {pooled:?}: the pooler now keeps LISTEN");
}

/// The promise through the pooler: a subscription opened on a pooled handle, from the
/// start of a context that already has history, follows commits appended while it catches up
/// and after, through a direct handle and a second pooled one, and delivers every matching
/// event once, in order, with no error, although the pooler drops its listener's LISTEN.
#[test]
fn a_subscription_through_the_pooler_follows_every_commit_of_other_handles_without_gap_or_duplicate() {
    let Some((direct, bouncer)) = urls() else { return };
    let context = fresh_context("pooler_follow");
    // A short poll so the test is quick; the path is the default's, only more often.
    let subscriber = open(&bouncer, &context, "&poll_ms=50");
    let direct_writer = open(&direct, &context, "");
    let pooled_writer = open(&bouncer, &context, "");

    let mut expected = Vec::new();
    let mut append = |writer: &Store, round: usize| {
        // Two matching events and one that is not, so the seam falls inside and between batches.
        let events = vec![
            Event::new("Placed", ["order"], round.to_le_bytes().to_vec()),
            Event::new("Noise", ["other"], vec![]),
            Event::new("Paid", ["order"], round.to_le_bytes().to_vec()),
        ];
        let appended = writer.append(events, None).unwrap();
        let first = appended.first.get();
        assert_eq!(appended.last.get(), first + 2);
        expected.extend([first, first + 2]);
    };
    for round in 0..40 {
        append(&direct_writer, round);
    }

    let query = Query::for_tags(["order"]);
    let subscription = subscriber.subscribe(&query, Position::ZERO).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    let take = |until: usize, seen: &mut Vec<u64>| {
        while seen.len() < until {
            assert!(Instant::now() < deadline, "after 120 s the subscription had {} of {until} events", seen.len());
            match subscription.next(Some(Duration::from_secs(30))).unwrap() {
                Next::Event(event) => {
                    assert_eq!(event.tags, ["order"], "{event:?} does not match the query");
                    seen.push(event.position.get());
                }
                Next::TimedOut => {}
                Next::Ended => panic!("the subscription ended after {} events", seen.len()),
            }
        }
    };
    // Part of the history, then appends interleaved with the subscriber's reads, alternating the
    // direct and the pooled writer: the catch-up/live seam moves while commits land.
    take(10, &mut seen);
    for round in 40..100 {
        let writer = if round % 2 == 0 { &direct_writer } else { &pooled_writer };
        append(writer, round);
        if round % 10 == 0 {
            take(seen.len() + 3, &mut seen);
        }
    }
    take(expected.len(), &mut seen);
    assert_eq!(seen, expected, "the subscription's positions differ from the appended ones");

    // And nothing more: no duplicate arrives late.
    assert!(matches!(subscription.next(Some(Duration::from_millis(300))).unwrap(), Next::TimedOut));
    subscriber.close().unwrap();
    direct_writer.close().unwrap();
    pooled_writer.close().unwrap();
}

/// The poll is the pooled subscriber's only path, and it is enough on its own: with the
/// notifications dropped, a commit reaches a subscriber that is already waiting live (no
/// catch-up left) within a few poll intervals, and `close` ends it promptly.
#[test]
fn a_live_subscriber_through_the_pooler_wakes_by_the_poll_and_closes() {
    let Some((direct, bouncer)) = urls() else { return };
    let context = fresh_context("pooler_live");
    let subscriber = open(&bouncer, &context, "&poll_ms=100");
    let writer = open(&direct, &context, "");
    let subscription = subscriber.subscribe(&Query::All, Position::ZERO).unwrap();
    assert!(matches!(subscription.next(Some(Duration::from_millis(200))).unwrap(), Next::TimedOut));
    for n in 1..=5u64 {
        let appended = writer.append(vec![Event::new("E", ["t"], vec![n as u8])], None).unwrap();
        match subscription.next(Some(Duration::from_secs(30))).unwrap() {
            Next::Event(event) => assert_eq!(event.position, appended.first),
            other => panic!("commit {n}: the subscription answered {other:?} within 30 s"),
        }
    }
    let closing = Instant::now();
    subscriber.close().unwrap();
    assert!(matches!(subscription.next(Some(Duration::from_secs(30))).unwrap(), Next::Ended));
    assert!(closing.elapsed() < Duration::from_secs(20), "close took {:?}", closing.elapsed());
    writer.close().unwrap();
}
