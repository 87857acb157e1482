//! Many threads appending at once: dense unique positions, one winner per real conflict, no
//! false conflicts inside a group commit, no lost update in read-decide-append loops.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::buffered;
use lapilli_core::{AppendCondition, Durability, ErrorKind, Event, Options, Position, Query, QueryItem, ReadOptions, Store};

fn open(dir: &std::path::Path) -> Arc<Store> {
    Arc::new(Store::open(dir, buffered(1 << 20)).unwrap())
}

/// Runs `work(store, i)` on `threads` threads released together by a barrier, so their appends
/// really contend; returns each thread's result, in thread order.
fn race<T: Send + 'static>(
    store: &Arc<Store>,
    threads: usize,
    work: impl Fn(&Store, usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let barrier = Arc::new(Barrier::new(threads));
    let work = Arc::new(work);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (store, barrier, work) = (store.clone(), barrier.clone(), work.clone());
            thread::spawn(move || {
                barrier.wait();
                work(&store, i)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn exactly_one_winner_when_every_thread_guards_the_same_tag() {
    const THREADS: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(vec![Event::new("Seed", ["other"], vec![])], None).unwrap();
    for round in 0..6u64 {
        let seen = store.head().unwrap();
        let results = race(&store, THREADS, move |store, i| {
            let event = Event::new("Claimed", ["hot".to_string(), format!("thread:{i}")], round.to_le_bytes().to_vec());
            store.append(vec![event], Some(AppendCondition::new(Query::for_tags(["hot"])).after(seen)))
        });
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let won_at = winners[0].first;
        assert_eq!(won_at.get(), seen.get() + 1, "round {round}");
        for r in &results {
            if let Err(e) = r {
                assert_eq!(e.kind(), ErrorKind::Conflict, "round {round}: {e}");
                assert_eq!(e.position(), Some(won_at), "round {round}");
            }
        }
        assert_eq!(store.head().unwrap(), won_at);
    }
}

#[test]
fn exactly_one_winner_per_uniqueness_key() {
    const THREADS: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Each thread registers the same four usernames; each name must be taken exactly once.
    let results: Vec<_> = race(&store, THREADS, |store, i| {
        (0..4)
            .map(|name| {
                let key = format!("username:{name}");
                let event = Event::new("Registered", [key.clone(), format!("thread:{i}")], vec![]);
                let guard = AppendCondition::new(Query::for_tags(["never-used"])).fail_if_exists(Query::for_tags([key]));
                store.append(vec![event], Some(guard))
            })
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
        }
    }
    for name in 0..4 {
        let q = Query::for_tags([format!("username:{name}")]);
        assert_eq!(store.read(&q, ReadOptions::default()).unwrap().count(), 1);
    }
}

#[test]
fn disjoint_guards_all_succeed_even_when_they_share_a_group() {
    const THREADS: usize = 32;
    const APPENDS: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    // fsync durability, so that requests pile up behind each fsync and share groups.
    let store = Arc::new(Store::open(dir.path(), Options { durability: Durability::Fsync, ..buffered(1 << 20) }).unwrap());
    race(&store, THREADS, |store, i| {
        let own = format!("own:{i}");
        let mut last_seen = Position::ZERO;
        for n in 0..APPENDS {
            // The boundary guards this thread's tag since its own last event; the existence
            // guard a tag no one writes. Neither truly conflicts.
            let guard = AppendCondition::new(Query::of([
                QueryItem::new(["Counted"], [own.as_str()]),
                QueryItem::new(Vec::<String>::new(), [format!("elsewhere:{i}")]),
            ]))
            .after(last_seen)
            .fail_if_exists(Query::for_tags([format!("never:{i}")]));
            let r = store
                .append(vec![Event::new("Counted", [own.clone(), "shared".into()], (n as u32).to_le_bytes().to_vec())], Some(guard))
                .unwrap_or_else(|e| panic!("thread {i} append {n}: {e}"));
            last_seen = r.last;
        }
    });
    assert_eq!(store.head().unwrap().get(), (THREADS * APPENDS) as u64);
    // Some groups held several of these requests, so the staged-events check really ran.
    assert!(store.group_commits() < (THREADS * APPENDS) as u64, "{} groups", store.group_commits());
    for i in 0..THREADS {
        let mine = store.read(&Query::for_tags([format!("own:{i}")]), ReadOptions::default()).unwrap().collect_all().unwrap();
        let counts: Vec<u32> = mine.iter().map(|e| u32::from_le_bytes(e.data[..].try_into().unwrap())).collect();
        assert_eq!(counts, (0..APPENDS as u32).collect::<Vec<_>>(), "thread {i}");
    }
}

#[test]
fn positions_are_dense_unique_and_hold_what_was_appended() {
    const THREADS: usize = 48;
    const APPENDS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut ranges: Vec<(u64, u64, usize, usize)> = race(&store, THREADS, |store, t| {
        let mut mine = Vec::new();
        for n in 0..APPENDS {
            let count = 1 + (t + n) % 3;
            let events: Vec<Event> =
                (0..count).map(|k| Event::new("E", [format!("t:{t}")], format!("{t}/{n}/{k}").into_bytes())).collect();
            let r = store.append(events, None).unwrap();
            assert_eq!(r.last.get() - r.first.get() + 1, count as u64);
            mine.push((r.first.get(), r.last.get(), t, n));
        }
        // One thread's appends land in the order it made them.
        assert!(mine.windows(2).all(|w| w[0].1 < w[1].0));
        mine
    })
    .into_iter()
    .flatten()
    .collect();
    ranges.sort();
    let mut next = 1;
    for &(first, last, _, _) in &ranges {
        assert_eq!(first, next, "a gap or an overlap at {first}");
        next = last + 1;
    }
    let head = store.head().unwrap().get();
    assert_eq!(head, next - 1);
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(all.len() as u64, head);
    for &(first, last, t, n) in &ranges {
        for p in first..=last {
            let e = &all[p as usize - 1];
            assert_eq!(e.position.get(), p);
            assert_eq!(e.data, format!("{t}/{n}/{}", p - first).into_bytes());
        }
    }
    assert!(all.windows(2).all(|w| w[0].recorded_at <= w[1].recorded_at));
}

#[test]
fn read_decide_append_loops_lose_no_update() {
    const THREADS: usize = 16;
    const INCREMENTS: usize = 12;
    const COUNTERS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let conflicts: usize = race(&store, THREADS, |store, t| {
        let mut conflicts = 0;
        for n in 0..INCREMENTS {
            let counter = format!("counter:{}", (t + n) % COUNTERS);
            let query = Query::for_tags([counter.as_str()]);
            loop {
                let read = store.read(&query, ReadOptions::default()).unwrap();
                let seen = read.head();
                let value = read.count() as u64;
                let event = Event::new("Incremented", [counter.as_str()], (value + 1).to_le_bytes().to_vec());
                match store.append(vec![event], Some(AppendCondition::new(query.clone()).after(seen))) {
                    Ok(_) => break,
                    Err(e) if e.kind() == ErrorKind::Conflict => conflicts += 1,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        conflicts
    })
    .into_iter()
    .sum();
    let mut total = 0;
    for c in 0..COUNTERS {
        let events = store.read(&Query::for_tags([format!("counter:{c}")]), ReadOptions::default()).unwrap().collect_all().unwrap();
        let values: Vec<u64> = events.iter().map(|e| u64::from_le_bytes(e.data[..].try_into().unwrap())).collect();
        assert_eq!(values, (1..=values.len() as u64).collect::<Vec<_>>(), "counter {c}: a lost or doubled update");
        total += values.len();
    }
    assert_eq!(total, THREADS * INCREMENTS);
    // Contention was real: some decisions had to be retried.
    assert!(conflicts > 0);
}

#[test]
fn concurrent_fsync_appends_share_group_commits() {
    const THREADS: usize = 32;
    const APPENDS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options { durability: Durability::Fsync, ..buffered(1 << 20) }).unwrap());
    assert_eq!(store.group_commits(), 0);
    store.append(vec![Event::new("Alone", ["a"], vec![])], None).unwrap();
    assert_eq!(store.group_commits(), 1, "one append alone is one group");
    race(&store, THREADS, |store, t| {
        for n in 0..APPENDS {
            store.append(vec![Event::new("E", [format!("t:{t}")], vec![n as u8])], None).unwrap();
        }
    });
    let appends = (THREADS * APPENDS) as u64;
    let groups = store.group_commits() - 1;
    assert_eq!(store.head().unwrap().get(), appends + 1);
    // Each thread waits for its fsync before its next append, so while one group syncs the
    // others queue up: far fewer fsyncs than appends.
    assert!(groups * 4 <= appends, "{groups} group commits for {appends} appends");
    eprintln!("{groups} group commits for {appends} fsync appends from {THREADS} threads");
}

/// Wakes the blocked thread: enough of an executor to drive `PendingAppend` as a `Future`.
struct ThreadWaker(thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Arc::new(ThreadWaker(thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => return output,
            std::task::Poll::Pending => thread::park(),
        }
    }
}

#[test]
fn submitted_appends_share_groups_and_resolve_as_futures() {
    const APPENDS: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options { durability: Durability::Fsync, ..buffered(1 << 20) }).unwrap();
    // One thread submits them all without waiting: they queue behind the first fsync.
    let pending: Vec<_> = (0..APPENDS).map(|i| store.submit(vec![Event::new("E", ["t"], i.to_le_bytes().to_vec())], None)).collect();
    for (i, p) in pending.into_iter().enumerate().rev() {
        let r = block_on(p).unwrap();
        assert_eq!(r.first.get(), i as u64 + 1, "submission order is commit order");
    }
    assert!(store.group_commits() * 4 <= APPENDS, "{} group commits for {APPENDS} submitted appends", store.group_commits());
    // A future of a refused append is ready at once.
    assert!(block_on(store.submit(vec![], None)).is_err());
}

/// Runs `work` on a thread of its own and fails if it has not finished in `limit`: a blocked
/// waiter that is never woken hangs instead of failing, so the hang is turned into a failure.
fn finishes_within<T: Send + 'static>(limit: std::time::Duration, what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    thread::spawn(move || done.send(work()).unwrap());
    finished.recv_timeout(limit).unwrap_or_else(|_| panic!("{what}: not finished in {limit:?}; a blocked waiter was never woken"))
}

// Blocked waiters sleep on the store's answer words with a bit per thread, woken once per group
// (`writer/answers.rs`); there are 256 bits, so past 256 living threads that have waited, a
// thread waits on its own slot's condition variable instead. Both kinds share groups here.

#[test]
fn blocked_callers_with_and_without_answer_bits_all_get_their_own_answers() {
    const THREADS: usize = 300;
    const APPENDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options { durability: Durability::Fsync, ..buffered(1 << 20) }).unwrap());
    let answered = {
        let store = store.clone();
        finishes_within(std::time::Duration::from_secs(60), "300 blocking callers", move || {
            race(&store, THREADS, |store, t| {
                (0..APPENDS)
                    .map(|n| {
                        let payload = format!("{t}/{n}").into_bytes();
                        let result = store.append(vec![Event::new("E", [format!("t:{t}")], payload.clone())], None).unwrap();
                        (result.first, payload)
                    })
                    .collect::<Vec<_>>()
            })
        })
    };
    assert_eq!(store.head().unwrap().get(), (THREADS * APPENDS) as u64);
    // Each answer names the position of the caller's own event, never a neighbour's.
    let all = common::read_all(&store, &Query::all());
    for (t, answers) in answered.iter().enumerate() {
        assert!(answers.windows(2).all(|w| w[0].0 < w[1].0), "thread {t}: positions not increasing");
        for (position, payload) in answers {
            let held = &all[position.get() as usize - 1];
            assert_eq!(held.position, *position);
            assert_eq!(&held.data, payload, "thread {t} was answered with position {position:?}, which holds another event");
        }
    }
    assert!(store.group_commits() * 2 <= (THREADS * APPENDS) as u64, "callers should have shared groups");
}

#[test]
fn an_append_waited_on_by_another_thread_is_woken() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options { durability: Durability::Fsync, ..buffered(1 << 20) }).unwrap());
    finishes_within(std::time::Duration::from_secs(60), "appends handed to other threads", move || {
        for round in 0..50u64 {
            // Submitted here, waited on by threads that did not submit them (the sleeper's bit is
            // the waiting thread's), some of them before their group is written.
            let pending: Vec<_> = (0..8u64).map(|i| store.submit(vec![Event::new("E", ["t"], vec![i as u8])], None)).collect();
            let waiters: Vec<_> = pending.into_iter().map(|p| thread::spawn(move || p.wait().unwrap().first.get())).collect();
            let mut firsts: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
            firsts.sort_unstable();
            assert_eq!(firsts, (round * 8 + 1..=round * 8 + 8).collect::<Vec<_>>());
        }
    });
}

#[test]
fn a_waiter_whose_answer_came_before_it_waited_does_not_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), buffered(1 << 20)).unwrap());
    finishes_within(std::time::Duration::from_secs(60), "waits after the answer", move || {
        let pending = store.submit(vec![Event::new("E", ["t"], vec![])], None);
        // Committed before anyone waits: nothing was woken, and the wait must not sleep for it.
        while store.head().unwrap().get() < 1 {
            thread::yield_now();
        }
        assert_eq!(pending.wait().unwrap().first.get(), 1);
        // Refused before the queue (answered on this thread): the same.
        assert_eq!(store.submit(vec![], None).wait().unwrap_err().kind(), ErrorKind::InvalidArgument);
        // Closed with appends blocked in `wait` on other threads: each gets an answer.
        let blocked: Vec<_> = (0..40)
            .map(|i| {
                let store = store.clone();
                thread::spawn(move || store.append(vec![Event::new("E", [format!("c:{i}")], vec![])], None).map(|r| r.first.get()))
            })
            .collect();
        store.close().unwrap();
        for b in blocked {
            match b.join().unwrap() {
                Ok(first) => assert!(first > 1),
                Err(e) => assert_eq!(e.kind(), ErrorKind::Closed),
            }
        }
    });
}
