//! From the third adversarial review (of the parts' tiers and backpressure, open's part
//! handling, and waiting without threads): each test here failed before the fix named in its
//! comment.

mod common;

use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::Duration;

use lapilli_core::{Event, Options, Store};

fn event(i: u64, data_len: usize) -> Event {
    Event::new(format!("Type{}", i % 5), [format!("entity:{i}"), "hot".to_string()], vec![(i % 251) as u8; data_len])
}

/// `close` holds the handle's thread lock until it has joined the completion thread. A
/// callback on that thread that closes the store too (an error handler, say) while another
/// thread's close is under way waited for that lock, and that close waited for the callback:
/// both hung forever.
#[test]
fn a_callback_that_closes_the_store_during_a_close_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), Options::default()).unwrap());
    let (closed_in_callback, callback_done) = channel();
    let in_callback = store.clone();
    store.submit(vec![event(0, 10)], None).on_complete(move |result| {
        result.unwrap();
        // Until the other close has begun (it marks the handle closed first)...
        while in_callback.head().is_ok() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // ...then close from here too.
        closed_in_callback.send(in_callback.close()).unwrap();
    });
    let closer = store.clone();
    let (closed, close_done) = channel();
    std::thread::spawn(move || closed.send(closer.close()).unwrap());
    // A generous bound for a loaded machine: both closes take milliseconds when they do not hang.
    let outer = close_done.recv_timeout(Duration::from_secs(60)).expect("close hung");
    outer.unwrap();
    callback_done.recv_timeout(Duration::from_secs(60)).expect("the callback's close hung").unwrap();
    // The store is closed: the lock is free.
    drop(store);
    Store::open(dir.path(), Options::default()).unwrap().close().unwrap();
}
