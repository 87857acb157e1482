//! 1,000 subscriptions registered for wake-ups (no thread each) are all woken by one commit,
//! and registering them starts no thread. Its own test binary, so no other test's threads are
//! counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::time::Duration;

use lapilli_core::{Event, Options, Position, Query, Store};

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

#[test]
fn one_commit_wakes_a_thousand_registered_subscriptions_without_a_thread_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { durability: lapilli_core::Durability::Buffered, ..Options::default() })
        .unwrap();
    let before = threads();
    let query = Query::for_tags(["room:1"]);
    let subs: Vec<_> = (0..1000).map(|_| store.subscribe(&query, Position::ZERO).unwrap()).collect();
    let woken = Arc::new(AtomicUsize::new(0));
    let (done, all_woken) = channel();
    for sub in &subs {
        assert_eq!(sub.try_next_batch(10).unwrap(), Some(Vec::new()));
        let woken = woken.clone();
        let done = done.clone();
        sub.on_ready(move || {
            if woken.fetch_add(1, Ordering::SeqCst) + 1 == 1000 {
                done.send(std::thread::current().name().map(str::to_string)).unwrap();
            }
        });
    }
    assert_eq!(threads(), before, "registering started no thread");
    let commits = store.group_commits();
    store.append(vec![Event::new("Booked", ["room:1"], vec![])], None).unwrap();
    assert_eq!(store.group_commits(), commits + 1, "one commit");
    let thread = all_woken.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(thread.as_deref(), Some("lapilli-completion"));
    assert_eq!(woken.load(Ordering::SeqCst), 1000);
    for sub in &subs {
        assert_eq!(sub.try_next_batch(10).unwrap().unwrap().len(), 1);
    }
    assert_eq!(threads(), before, "waking started no thread");
}
