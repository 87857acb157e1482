//! `Store::submit_borrowed`: appends of events the caller keeps behave as owned ones.

use lapilli_core::{ErrorKind, Event, Options, Query, ReadOptions, Store};

#[test]
fn borrowed_events_commit_as_owned_ones_and_bad_ones_are_refused_alike() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let events = vec![Event::new("A", ["t:1"], b"one".to_vec()), Event::new("B", ["t:2", "t:3"], b"two".to_vec())];
    let refs: Vec<&Event> = events.iter().collect();
    let borrowed = store.submit_borrowed(&refs, None).wait().unwrap();
    let owned = store.append(events.clone(), None).unwrap();
    assert_eq!((borrowed.first.get(), owned.first.get()), (1, 3));
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    for (a, b) in all[..2].iter().zip(&all[2..]) {
        assert_eq!((&a.event_type, &a.tags, &a.data), (&b.event_type, &b.tags, &b.data));
    }
    // The caller still has its events.
    assert_eq!(events[1].tags, ["t:2", "t:3"]);
    let bad = Event::new("", ["t"], vec![]);
    let err = store.submit_borrowed(&[&events[0], &bad], None).wait().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(err.message(), store.append(vec![events[0].clone(), bad.clone()], None).unwrap_err().message());
    assert_eq!(store.head().unwrap().get(), 4, "a refused append changes nothing");
    store.close().unwrap();
}
