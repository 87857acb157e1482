//! Every bad input of `API.md` returns its typed error, with a message naming the value, and
//! leaves the store byte-identical.

mod common;

use std::time::Duration;

use common::{buffered, fingerprint};
use lapilli_core::{
    AppendCondition, ErrorKind, Event, Options, Position, Query, QueryItem, ReadOptions, Store,
};

fn none() -> Vec<String> {
    Vec::new()
}

fn store_with_history(dir: &std::path::Path) -> Store {
    let options = Options { max_event_bytes: 100, ..buffered(1 << 20) };
    let store = Store::open(dir, options).unwrap();
    for i in 0..5u8 {
        store.append(vec![Event::new("T", ["a"], vec![i])], None).unwrap();
    }
    store
}

/// Runs `op`, which must fail with `kind` and a message containing every one of `names`, and
/// checks that no byte of the store changed and the head did not move.
fn refused<T>(
    store: &Store,
    dir: &std::path::Path,
    what: &str,
    kind: ErrorKind,
    names: &[&str],
    op: impl FnOnce() -> lapilli_core::Result<T>,
) {
    let before = fingerprint(dir);
    let head = store.head().ok();
    let Err(err) = op() else { panic!("{what}: accepted") };
    assert_eq!(err.kind(), kind, "{what}: {err}");
    for name in names {
        assert!(err.message().contains(name), "{what}: message {:?} does not name {name:?}", err.message());
    }
    assert_eq!(fingerprint(dir), before, "{what}: the store's files changed");
    assert_eq!(store.head().ok(), head, "{what}: the head moved");
}

#[test]
fn bad_events_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_history(dir.path());
    let good = || Event::new("T", ["a"], vec![1]);
    let invalid = ErrorKind::InvalidArgument;
    let cases: Vec<(&str, Vec<Event>, Vec<&str>)> = vec![
        ("empty event list", vec![], vec!["events is empty"]),
        ("empty type", vec![good(), Event::new("", ["a"], vec![])], vec!["event 1", "type is empty"]),
        ("oversize type", vec![Event::new("x".repeat(256), none(), vec![])], vec!["type is 256 bytes", "255"]),
        ("empty tag", vec![Event::new("T", ["a", ""], vec![])], vec!["tag 1 is empty"]),
        ("oversize tag", vec![good(), good(), Event::new("T", ["ok".to_string(), "y".repeat(1025)], vec![])], vec!["event 2", "tag 1 is 1025 bytes", "1024"]),
        ("256 tags", vec![Event::new("T", (0..256).map(|i| format!("t{i}")), vec![])], vec!["256 tags", "255"]),
        ("duplicate tag", vec![Event::new("T", ["a", "dup", "b", "dup"], vec![])], vec!["duplicate tag \"dup\""]),
        ("data over max_event_bytes", vec![good(), Event::new("T", ["a"], vec![0; 101])], vec!["data is 101 bytes", "max_event_bytes is 100"]),
        ("bigger than a segment", (0..12_000).map(|_| Event::new("T", ["a"], vec![0; 90])).collect(), vec!["segment_size 1048576"]),
    ];
    for (what, events, names) in cases {
        refused(&store, dir.path(), what, invalid, &names, || store.append(events.clone(), None));
        // The same through submit, answered at once.
        refused(&store, dir.path(), what, invalid, &names, || store.submit(events, None).wait());
    }
    // The limits themselves are fine.
    let edge = Event::new("x".repeat(255), (0..255).map(|i| format!("{i:0>1024}")), vec![0; 100]);
    assert_eq!(store.append(vec![edge], None).unwrap().first.get(), 6);
}

#[test]
fn bad_queries_and_windows_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_history(dir.path());
    let invalid = ErrorKind::InvalidArgument;
    let event = || vec![Event::new("T", ["a"], vec![])];
    let bad_queries: Vec<(&str, Query, Vec<&str>)> = vec![
        ("empty query", Query::of([]), vec!["no items"]),
        ("item with neither", Query::of([QueryItem::new(["T"], none()), QueryItem::new(none(), none())]), vec!["item 1 has neither types nor tags"]),
        ("empty type in a query", Query::for_types(["T", ""]), vec!["item 0: type 1 is empty"]),
        ("oversize tag in a query", Query::for_tags(["z".repeat(1025)]), vec!["tag 0 is 1025 bytes"]),
        ("oversize type in a query", Query::for_types(["z".repeat(256)]), vec!["type 0 is 256 bytes"]),
    ];
    for (what, query, names) in bad_queries {
        let mut names = names;
        refused(&store, dir.path(), &format!("read: {what}"), invalid, &names, || store.read(&query, ReadOptions::default()));
        refused(&store, dir.path(), &format!("subscribe: {what}"), invalid, &names, || store.subscribe(&query, Position::ZERO));
        names.push("fail_if_events_match");
        refused(&store, dir.path(), &format!("condition: {what}"), invalid, &names, || {
            store.append(event(), Some(AppendCondition::new(query.clone())))
        });
        names.pop();
        names.push("fail_if_exists");
        refused(&store, dir.path(), &format!("existence clause: {what}"), invalid, &names, || {
            store.append(event(), Some(AppendCondition::new(Query::for_tags(["a"])).after(Position(5)).fail_if_exists(query.clone())))
        });
    }
    // `after` beyond the head (5): nobody can have seen it.
    refused(&store, dir.path(), "append after beyond head", invalid, &["after is 9", "head is 5"], || {
        store.append(event(), Some(AppendCondition::new(Query::for_tags(["zzz"])).after(Position(9))))
    });
    refused(&store, dir.path(), "read after beyond head", invalid, &["after is 6", "head is 5"], || {
        store.read(&Query::all(), ReadOptions { after: Position(6), ..Default::default() })
    });
    refused(&store, dir.path(), "subscribe after beyond head", invalid, &["after is 7", "head is 5"], || {
        store.subscribe(&Query::all(), Position(7))
    });
    refused(&store, dir.path(), "until below after", invalid, &["until is 2", "after (3)"], || {
        store.read(&Query::all(), ReadOptions { after: Position(3), until: Some(Position(2)), ..Default::default() })
    });
    let sub = store.subscribe(&Query::all(), Position::ZERO).unwrap();
    refused(&store, dir.path(), "next_batch of 0", invalid, &["max is 0"], || sub.next_batch(0, Some(Duration::ZERO)));
    // `after` equal to the head is fine, and the store still works after all of that.
    assert_eq!(store.read(&Query::all(), ReadOptions { after: Position(5), ..Default::default() }).unwrap().count(), 0);
    let r = store.append(event(), Some(AppendCondition::new(Query::for_tags(["a"])).after(Position(5)))).unwrap();
    assert_eq!(r.first.get(), 6);
}

#[test]
fn everything_after_close_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_history(dir.path());
    let sub = store.subscribe(&Query::all(), Position::ZERO).unwrap();
    store.close().unwrap();
    store.close().unwrap(); // idempotent
    let closed = ErrorKind::Closed;
    let event = || vec![Event::new("T", ["a"], vec![])];
    refused(&store, dir.path(), "append", closed, &["closed"], || store.append(event(), None));
    refused(&store, dir.path(), "submit", closed, &["closed"], || store.submit(event(), None).wait());
    refused(&store, dir.path(), "read", closed, &["closed"], || store.read(&Query::all(), ReadOptions::default()));
    refused(&store, dir.path(), "head", closed, &["closed"], || store.head());
    refused(&store, dir.path(), "subscribe", closed, &["closed"], || store.subscribe(&Query::all(), Position::ZERO));
    // Closed is checked before the arguments: a bad input on a closed store is still Closed.
    refused(&store, dir.path(), "bad append on a closed store", closed, &["closed"], || store.append(vec![], None));
    assert_eq!(sub.next_batch(3, Some(Duration::ZERO)).unwrap(), None);
    // Everything written before the close is still there.
    let reopened = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    assert_eq!(reopened.head().unwrap().get(), 5);
}

#[test]
fn bad_options_and_read_only_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for size in [0u64, 4095] {
        let err = Store::open(dir.path().join("s"), Options { segment_size: size, ..Options::default() }).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains(&format!("segment_size is {size}")), "{err}");
    }
    assert!(!dir.path().join("s").exists(), "a refused open created the directory");
    let err = "sometimes".parse::<lapilli_core::Durability>().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("\"sometimes\""));
    // A follower needs the directory to exist (it never creates anything)...
    let missing = dir.path().join("missing");
    let err = Store::open_read_only(&missing).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.message().contains(&missing.display().to_string()), "{err}");
    assert!(!missing.exists());
    // ...and refuses appends with ReadOnly, naming the store, leaving it unchanged.
    let follower = Store::open_read_only(dir.path()).unwrap();
    let err = follower.append(vec![lapilli_core::Event::new("T", ["t"], vec![])], None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly);
    assert!(err.message().contains(&dir.path().display().to_string()));
    assert_eq!(follower.head().unwrap().get(), 0);
    follower.close().unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "a follower wrote into the store");
}
