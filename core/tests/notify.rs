//! Registered completions and wake-ups (`completion.rs`, `PendingAppend::on_complete`,
//! `Subscription::on_ready` / `poll_next_batch`): they run on the store's completion thread,
//! never on the writer, in the order the writer answered, and closing wakes what is registered.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use lapilli_core::{AppendCondition, ErrorKind, Event, Options, Position, Query, Store};

const PATIENCE: Duration = Duration::from_secs(30);

fn store(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path(), Options { durability: lapilli_core::Durability::Buffered, ..Options::default() }).unwrap()
}

fn event(tag: &str) -> Vec<Event> {
    vec![Event::new("Happened", [tag], b"x".to_vec())]
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("<unnamed>").to_string()
}

/// A waker that sends the name of the thread that woke it.
struct NamedWake(Mutex<std::sync::mpsc::Sender<String>>);

impl Wake for NamedWake {
    fn wake(self: Arc<Self>) {
        let _ = self.0.lock().unwrap().send(thread_name());
    }
}

fn named_waker() -> (Waker, Receiver<String>) {
    let (tx, rx) = channel();
    (Waker::from(Arc::new(NamedWake(Mutex::new(tx)))), rx)
}

#[test]
fn append_callbacks_run_on_the_completion_thread_in_commit_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let (tx, rx) = channel();
    for i in 0..200 {
        let tx = tx.clone();
        store.submit(event(&format!("n:{i}")), None).on_complete(move |result| {
            tx.send((thread_name(), std::thread::current().id(), result.unwrap().first.get())).unwrap();
        });
    }
    let answers: Vec<_> = (0..200).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    let caller = std::thread::current().id();
    for (name, id, _) in &answers {
        assert_eq!(name, "lapilli-completion");
        assert_ne!(*id, caller);
    }
    // One thread submitted them in order, so the writer committed them in order, and the
    // callbacks ran in the order the writer answered.
    let positions: Vec<u64> = answers.iter().map(|a| a.2).collect();
    assert_eq!(positions, (1..=200).collect::<Vec<_>>());
    // All on one thread.
    assert!(answers.windows(2).all(|w| w[0].1 == w[1].1));
}

#[test]
fn an_append_already_answered_calls_back_on_the_completion_thread_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let (tx, rx) = channel();
    store.submit(Vec::new(), None).on_complete(move |result| {
        tx.send((thread_name(), result.unwrap_err().kind())).unwrap();
    });
    let (name, kind) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(name, "lapilli-completion");
    assert_eq!(kind, ErrorKind::InvalidArgument);
    // Once the store is closed there is no completion thread: the caller's own thread.
    store.close().unwrap();
    let (tx, rx) = channel();
    store.submit(event("a:1"), None).on_complete(move |result| {
        tx.send((thread_name(), result.unwrap_err().kind())).unwrap();
    });
    assert_eq!(rx.try_recv().unwrap(), (thread_name(), ErrorKind::Closed));
}

#[test]
fn refused_appends_call_back_with_their_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    store.append(event("course:c1"), None).unwrap();
    let (tx, rx) = channel();
    let condition = AppendCondition::new(Query::for_tags(["course:c1"])).after(Position::ZERO);
    store.submit(event("course:c1"), Some(condition)).on_complete(move |result| {
        tx.send((thread_name(), result)).unwrap();
    });
    let (name, result) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(name, "lapilli-completion");
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.position(), Some(Position(1)));
    assert_eq!(store.head().unwrap().get(), 1, "the refused append changed nothing");
}

#[test]
fn the_futures_waker_fires_on_the_completion_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    // Hold the writer up with a first append so the second is still pending when polled:
    // whether it is or not, a waker that fires must fire off the writer.
    let mut pending = Box::pin(store.submit(event("a:1"), None));
    let (waker, woken) = named_waker();
    let mut cx = Context::from_waker(&waker);
    match pending.as_mut().poll(&mut cx) {
        Poll::Ready(result) => assert_eq!(result.unwrap().first.get(), 1),
        Poll::Pending => {
            assert_eq!(woken.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
            let Poll::Ready(result) = pending.as_mut().poll(&mut cx) else { panic!("woken but not ready") };
            assert_eq!(result.unwrap().first.get(), 1);
        }
    }
}

use std::future::Future;

#[test]
fn a_panicking_callback_does_not_stop_later_completions() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let (tx, rx) = channel();
    store.submit(event("a:1"), None).on_complete(|_| panic!("a binding's bug"));
    store.submit(event("a:2"), None).on_complete(move |result| tx.send(result.unwrap().first.get()).unwrap());
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 2);
}

#[test]
fn try_next_batch_answers_what_is_there_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    store.append(event("a:1"), None).unwrap();
    let sub = store.subscribe(&Query::for_tags(["a:1"]), Position::ZERO).unwrap();
    assert_eq!(sub.try_next_batch(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let batch = sub.try_next_batch(10).unwrap().unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(sub.try_next_batch(10).unwrap(), Some(Vec::new()));
    store.append(event("a:1"), None).unwrap();
    let mut positions = Vec::new();
    assert_eq!(sub.try_visit(10, |view| positions.push(view.position.get())).unwrap(), Some(1));
    assert_eq!(positions, vec![2]);
    assert_eq!(sub.position().get(), 2);
    sub.close();
    assert_eq!(sub.try_next_batch(10).unwrap(), None);
}

#[test]
fn on_ready_fires_on_the_completion_thread_when_the_head_moves() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let sub = store.subscribe(&Query::for_tags(["a:1"]), Position::ZERO).unwrap();
    assert_eq!(sub.try_next_batch(10).unwrap(), Some(Vec::new()));
    let (tx, rx) = channel();
    sub.on_ready(move || tx.send(thread_name()).unwrap());
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "nothing committed yet");
    store.append(event("a:1"), None).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
    assert_eq!(sub.try_next_batch(10).unwrap().unwrap().len(), 1);
    // Registering when something is already there fires at once, on the same thread.
    store.append(event("a:1"), None).unwrap();
    let (tx, rx) = channel();
    sub.on_ready(move || tx.send(thread_name()).unwrap());
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
}

#[test]
fn closing_wakes_what_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let query = Query::for_tags(["a:1"]);
    // A subscription closed by its own close, one by the store's.
    let own = store.subscribe(&query, Position::ZERO).unwrap();
    let by_store = store.subscribe(&query, Position::ZERO).unwrap();
    let (tx, rx) = channel();
    let tx2 = tx.clone();
    own.on_ready(move || tx.send("own").unwrap());
    let (waker, woken) = named_waker();
    assert!(by_store.poll_next_batch(&mut Context::from_waker(&waker), 10).is_pending());
    let by_store_cb = store.subscribe(&query, Position::ZERO).unwrap();
    by_store_cb.on_ready(move || tx2.send("store").unwrap());
    own.close();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "own");
    assert!(woken.try_recv().is_err(), "one subscription's close wakes only its own waker");
    assert_eq!(own.try_next_batch(10).unwrap(), None);
    store.close().unwrap();
    // Close runs what it woke before it returns.
    assert_eq!(rx.try_recv().unwrap(), "store");
    assert_eq!(woken.try_recv().unwrap(), "lapilli-completion");
    assert!(matches!(by_store.poll_next_batch(&mut Context::from_waker(&waker), 10), Poll::Ready(Ok(None))));
}

#[test]
fn poll_next_batch_delivers_history_then_live_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    store.append(event("a:1"), None).unwrap();
    store.append(event("b:1"), None).unwrap();
    let sub = store.subscribe(&Query::for_tags(["a:1"]), Position::ZERO).unwrap();
    let (waker, woken) = named_waker();
    let mut cx = Context::from_waker(&waker);
    let Poll::Ready(Ok(Some(batch))) = sub.poll_next_batch(&mut cx, 10) else { panic!("history is there") };
    assert_eq!(batch.iter().map(|e| e.position.get()).collect::<Vec<_>>(), vec![1]);
    assert!(sub.poll_next_batch(&mut cx, 10).is_pending());
    // An event the query does not match moves the head: a wake-up, then nothing to deliver.
    store.append(event("b:1"), None).unwrap();
    assert_eq!(woken.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
    assert!(sub.poll_next_batch(&mut cx, 10).is_pending());
    store.append(event("a:1"), None).unwrap();
    assert_eq!(woken.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
    let Poll::Ready(Ok(Some(batch))) = sub.poll_next_batch(&mut cx, 10) else { panic!("woken but not ready") };
    assert_eq!(batch.iter().map(|e| e.position.get()).collect::<Vec<_>>(), vec![4]);
    // Polled again and again without a commit: still one registration, one wake-up.
    for _ in 0..100 {
        assert!(sub.poll_next_batch(&mut cx, 10).is_pending());
    }
    store.append(event("a:1"), None).unwrap();
    assert_eq!(woken.recv_timeout(PATIENCE).unwrap(), "lapilli-completion");
    assert!(woken.recv_timeout(Duration::from_millis(50)).is_err(), "registered once, woken once");
}

#[test]
fn a_blocking_wait_inside_a_callback_completes() {
    // The writer wakes blocking waiters itself, so a callback on the completion thread may block
    // on another append without waiting for itself.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store(&dir));
    let (tx, rx) = channel();
    let inner = store.clone();
    store.submit(event("a:1"), None).on_complete(move |_| {
        tx.send(inner.append(event("a:2"), None).map(|r| r.first.get())).unwrap();
    });
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap().unwrap(), 2);
}

#[test]
fn a_second_registration_calls_the_first_so_no_waiter_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let sub = store.subscribe(&Query::for_tags(["a:1"]), Position::ZERO).unwrap();
    let (tx, rx) = channel();
    let first = tx.clone();
    sub.on_ready(move || first.send("first").unwrap());
    sub.on_ready(move || tx.send("second").unwrap());
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "first", "replaced: called to check again");
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "the second waits for a commit");
    store.append(event("a:1"), None).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "second");
}
