//! The third adversarial review of the PostgreSQL backend: TLS parameters (8ff1b17), the read
//! connection cap, and reads whose head came with their first look (d782e5c, since reverted;
//! its error-order and missing-row tests stay, as properties any read path must keep). Needs
//! `LAPILLI_TEST_POSTGRES_URL` and `LAPILLI_TEST_POSTGRES_CA` (`scripts/postgres.sh start`);
//! without them every test says it was skipped, unless `LAPILLI_REQUIRE_POSTGRES` is set.

mod common;
use std::time::{Duration, Instant};

use common::postgres::{context_url, fresh_context as fresh};
use lapilli_core::{ErrorKind, Event, Options, Position, Query, ReadOptions, Store};

fn base() -> String {
    std::env::var("LAPILLI_TEST_POSTGRES_URL").expect("LAPILLI_TEST_POSTGRES_URL")
}
fn ca() -> String {
    std::env::var("LAPILLI_TEST_POSTGRES_CA").expect("LAPILLI_TEST_POSTGRES_CA")
}
fn url(context: &str, extra: &str) -> String {
    format!("{}{extra}", context_url(&base(), context))
}
/// (TLS connections, all connections) of this application name, seen by the server.
fn connections(application: &str) -> (i64, i64) {
    common::postgres::connections_of(&base(), application)
}

/// Finding: a later `sslmode=disable` undoes `sslmode=verify-full` (the driver takes the last
/// one), and the new "sslrootcert without an sslmode asking for TLS is refused" check does not
/// see it: the handle opens and talks plain text while its URL names a CA and verify-full.
#[test]
fn verify_full_then_disable_is_refused_or_encrypted() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let application = fresh("rv_tls_dup");
    let context = fresh("rv_tls_dup");
    let u = url(&context, &format!("&sslmode=verify-full&sslrootcert={}&sslmode=disable&application_name={application}", ca()));
    match Store::open(&u, Options::default()) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}", e.message()),
        Ok(store) => {
            store.append(vec![Event::new("T", ["k:1"], vec![1])], None).unwrap();
            let (ssl, all) = connections(&application);
            store.close().unwrap();
            assert!(all >= 1);
            assert_eq!(ssl, all, "verify-full + a CA in the URL, yet {ssl} of {all} connections use TLS");
        }
    }
}

/// Finding: a read still walking when the handle is closed opens a new connection for its next
/// page and puts it back in the idle pool that close() already emptied: the closed (not yet
/// dropped) handle keeps a server connection open for as long as the Store value lives.
#[test]
fn a_closed_handle_keeps_no_server_connection() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let application = fresh("rv_close");
    let context = fresh("rv_close");
    let store = Store::open(url(&context, &format!("&application_name={application}")), Options::default()).unwrap();
    let events: Vec<Event> = (0..600).map(|i| Event::new("T", [format!("k:{}", i % 3)], vec![0; 16])).collect();
    store.append(events, None).unwrap();
    let mut read = store.read(&Query::all(), ReadOptions::default()).unwrap();
    assert_eq!(read.visit(10, |_| {}).unwrap(), 10);
    store.close().unwrap();
    // The rest of the read (its next page) after close: allowed, as for the embedded store.
    let rest = read.visit(usize::MAX, |_| {}).unwrap();
    assert_eq!(rest, 590);
    drop(read);
    std::thread::sleep(Duration::from_millis(300));
    let (_, open) = connections(&application);
    assert_eq!(open, 0, "{open} server connection(s) still open for a closed handle");
    drop(store);
}

/// Check (expected to pass): with a cap of 1, interleaved reads, head() and a subscription whose
/// callback reads do not deadlock.
#[test]
fn a_cap_of_one_does_not_deadlock_interleaved_reads() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let context = fresh("rv_cap1");
    let store = std::sync::Arc::new(Store::open(url(&context, "&max_connections=1"), Options::default()).unwrap());
    let events: Vec<Event> = (0..2000).map(|i| Event::new("T", [format!("k:{}", i % 7)], vec![0; 16])).collect();
    store.append(events, None).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut a = store.read(&Query::all(), ReadOptions::default()).unwrap();
            let mut b = store.read(&Query::for_tags(["k:3"]), ReadOptions { backwards: true, ..ReadOptions::default() }).unwrap();
            let sub = store.subscribe(&Query::for_tags(["k:1"]), Position(0)).unwrap();
            let mut total = 0;
            loop {
                let x = a.visit(300, |_| {}).unwrap();
                let y = b.visit(50, |_| {}).unwrap();
                let _ = store.head().unwrap();
                let s = sub
                    .try_visit(100, |_| {
                        let _ = store.read(&Query::for_tags(["k:2"]), ReadOptions { limit: Some(3), ..ReadOptions::default() }).unwrap().collect_all().unwrap();
                    })
                    .unwrap()
                    .unwrap_or(0);
                total += x + y + s;
                if x == 0 && y == 0 && s == 0 {
                    break;
                }
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            total
        })
    };
    let start = Instant::now();
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        assert!(start.elapsed() < Duration::from_secs(60), "deadlock at max_connections=1");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(worker.join().unwrap(), 2000 + 286 + 286);
    store.close().unwrap();
}

/// Cosmetic: the rule a read breaks first is named differently by the two backends when `after`
/// is beyond the head and `until` below `after` (embedded: after; Postgres now: until).
#[test]
fn error_precedence_matches_the_embedded_store() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(fresh("rv_embedded"));
    let embedded = Store::open(&dir, Options::default()).unwrap();
    let pg = Store::open(url(&fresh("rv_prec"), ""), Options::default()).unwrap();
    let options = ReadOptions { after: Position(5), until: Some(Position(3)), ..ReadOptions::default() };
    let a = embedded.read(&Query::all(), options).err().unwrap();
    let b = pg.read(&Query::all(), options).err().unwrap();
    embedded.close().unwrap();
    pg.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(a.message(), b.message());
}

/// Cosmetic: a context whose row went away answers Io with limit 0 (fetch_head) and Corruption
/// with limit 1 (first_look).
#[test]
fn a_missing_context_row_is_one_kind_of_error() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let context = fresh("rv_gone");
    let store = Store::open(url(&context, ""), Options::default()).unwrap();
    store.append(vec![Event::new("T", ["k:1"], vec![1])], None).unwrap();
    let mut client = postgres::Client::connect(&base(), postgres::NoTls).unwrap();
    client.execute("DELETE FROM lapilli_contexts WHERE name = $1", &[&context]).unwrap();
    let zero = store.read(&Query::all(), ReadOptions { limit: Some(0), ..ReadOptions::default() }).err().unwrap();
    let one = store.read(&Query::all(), ReadOptions { limit: Some(1), ..ReadOptions::default() }).err().unwrap();
    client.execute("INSERT INTO lapilli_contexts (name, schema_version, head) VALUES ($1, 1, 1)", &[&context]).unwrap();
    store.close().unwrap();
    assert_eq!(zero.kind(), one.kind(), "limit 0: {} / limit 1: {}", zero.message(), one.message());
}

/// Finding (pre-existing, reachable through the new check too): keys are not percent-decoded by
/// Lapilli but are by the driver: `ssl%6Dode=disable` turns TLS off behind verify-full, and
/// `pass%77ord=` is a password the redaction does not see.
#[test]
fn percent_encoded_keys_neither_downgrade_tls_nor_leak_a_password() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let application = fresh("rv_tls_enc");
    let u = url(&fresh("rv_tls_enc"), &format!("&sslmode=verify-full&sslrootcert={}&ssl%6Dode=disable&application_name={application}", ca()));
    if let Ok(store) = Store::open(&u, Options::default()) {
        let (ssl, all) = connections(&application);
        store.close().unwrap();
        assert_eq!(ssl, all, "{ssl} of {all} connections use TLS");
    }
}

#[test]
fn an_encoded_password_key_is_redacted() {
    if common::postgres::database_url().is_none() {
        return;
    }
    // Trust auth ignores the password; the path and a refusal's message must not show it.
    let u = url(&fresh("rv_pw"), "&pass%77ord=hunter2&poll_ms=0");
    let error = Store::open(&u, Options::default()).err().unwrap();
    assert!(!error.message().contains("hunter2"), "{}", error.message());
}

#[test]
fn the_untrusted_certificate_message() {
    if common::postgres::database_url().is_none() {
        return;
    }
    let u = url(&fresh("rv_untrusted"), "&sslmode=verify-full&password=hunter2");
    let error = Store::open(&u, Options::default()).err().unwrap();
    eprintln!("MESSAGE: {}", error.message());
    assert!(!error.message().contains("hunter2"));
}
