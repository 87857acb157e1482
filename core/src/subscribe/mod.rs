//! Subscriptions: catch-up and live tail as one loop over the published head.
//!
//! The loop: scan from the cursor up to the head loaded now, deliver what matches, and when
//! nothing is left, wait for the head to move. Because the live part is the same scan started
//! from the same cursor, there is no seam where an event could be skipped or repeated.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::event::SequencedEvent;
use crate::position::Position;
use crate::query::Query;
use crate::read::{Published, Walk};

/// Wakes waiting subscribers when the head moves. With no one waiting, a commit pays one
/// atomic load here and takes no lock.
#[derive(Default)]
pub(crate) struct Notifier {
    waiters: AtomicUsize,
    lock: Mutex<()>,
    wakeup: Condvar,
}

impl Notifier {
    /// Called after the head (or a closed flag) was stored.
    pub fn notify(&self) {
        // Pairs with the fence in `wait`: either this load sees the waiter, or the waiter's
        // re-check sees the new head.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wakeup.notify_all();
        }
    }

    /// Blocks until `ready()` holds or `deadline` passes (None: no deadline).
    pub fn wait(&self, ready: impl Fn() -> bool, deadline: Option<Instant>) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !ready() {
            match deadline {
                None => guard = self.wakeup.wait(guard).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    guard = self
                        .wakeup
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What [`Subscription::next`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    Event(SequencedEvent),
    /// The timeout passed with nothing new.
    TimedOut,
    /// The subscription or its store was closed.
    Ended,
}

/// A live, ordered feed of the events matching a query. `close()` may be called from any
/// thread and wakes a blocked `next`. Dropping it closes it.
///
/// ```
/// use std::time::Duration;
/// use lapilli_core::{Event, Next, Options, Position, Query, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Options::default())?;
/// store.append(vec![Event::new("Opened", ["account:a1"], vec![])], None)?;
/// let sub = store.subscribe(&Query::for_tags(["account:a1"]), Position::ZERO)?;
/// // History first...
/// let Next::Event(first) = sub.next(Some(Duration::from_secs(5)))? else { panic!("no event") };
/// assert_eq!(first.position.get(), 1);
/// assert!(sub.caught_up());
/// // ...then live commits, through the same loop.
/// store.append(vec![Event::new("Deposited", ["account:a1"], b"10".to_vec())], None)?;
/// let batch = sub.next_batch(100, Some(Duration::from_secs(5)))?.expect("still open");
/// assert_eq!(batch[0].event_type, "Deposited");
/// // The resume cursor: subscribe again with `after` = this to carry on.
/// assert_eq!(sub.position().get(), 2);
/// assert_eq!(sub.next(Some(Duration::from_millis(10)))?, Next::TimedOut);
/// sub.close(); // from any thread: a consumer blocked in `next` wakes with `Ended`
/// assert_eq!(sub.next(None)?, Next::Ended);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Subscription {
    published: Arc<Published>,
    query: Query,
    /// Serialises consumers; `close`, `caught_up` and `position` never take it.
    consumer: Mutex<()>,
    /// Every position up to this one has been examined.
    scanned: AtomicU64,
    /// The last delivered position (the resume cursor).
    delivered: AtomicU64,
    closed: AtomicBool,
}

impl Subscription {
    pub(crate) fn new(published: Arc<Published>, query: Query, after: Position) -> Result<Self> {
        query.validate("query")?;
        let head = published.head();
        if after.get() > head {
            return Err(Error::invalid(format!("after is {after}; the head is {head}")));
        }
        Ok(Subscription {
            published,
            query,
            consumer: Mutex::new(()),
            scanned: AtomicU64::new(after.get()),
            delivered: AtomicU64::new(after.get()),
            closed: AtomicBool::new(false),
        })
    }

    fn ended(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.published.closed.load(Ordering::Acquire)
    }

    /// Up to `max` events. `Ok(None)`: the subscription has ended. `Ok(Some(empty))`: the
    /// timeout passed first. `timeout = None` waits as long as it takes.
    pub fn next_batch(&self, max: usize, timeout: Option<Duration>) -> Result<Option<Vec<SequencedEvent>>> {
        if max == 0 {
            return Err(Error::invalid("max is 0; a batch holds at least one event"));
        }
        // A timeout too long to represent is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let _consumer = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = Vec::with_capacity(max.min(1024));
        loop {
            if self.ended() {
                return Ok(None);
            }
            self.published.check()?;
            let snapshot = self.published.snapshot();
            let head = snapshot.head;
            let mut scanned = self.scanned.load(Ordering::Relaxed);
            let mut walk = Walk::new(snapshot, self.query.clone(), scanned + 1, head, false);
            while batch.len() < max {
                match walk.next_visit(|view| view.to_owned_event())? {
                    Some((_, event)) => batch.push(event),
                    None => break,
                }
            }
            // A full batch stops at its last event; otherwise everything up to the head was seen.
            scanned = match batch.last() {
                Some(last) if batch.len() == max => last.position.get(),
                _ => head.max(scanned),
            };
            self.scanned.store(scanned, Ordering::Release);
            if let Some(last) = batch.last() {
                self.delivered.store(last.position.get(), Ordering::Release);
                return Ok(Some(batch));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Some(batch));
            }
            self.published.notifier.wait(
                || self.ended() || self.published.failed() || self.published.head() > scanned,
                deadline,
            );
        }
    }

    pub fn next(&self, timeout: Option<Duration>) -> Result<Next> {
        Ok(match self.next_batch(1, timeout)? {
            None => Next::Ended,
            Some(mut batch) => match batch.pop() {
                Some(event) => Next::Event(event),
                None => Next::TimedOut,
            },
        })
    }

    /// True when everything committed so far has been delivered.
    pub fn caught_up(&self) -> bool {
        self.scanned.load(Ordering::Acquire) >= self.published.head()
    }

    /// The last delivered position: subscribe again with `after` = this to resume.
    pub fn position(&self) -> Position {
        Position(self.delivered.load(Ordering::Acquire))
    }

    pub fn is_closed(&self) -> bool {
        self.ended()
    }

    /// Ends the subscription; a consumer blocked in `next` wakes with `Ended`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.published.notifier.notify();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.close();
    }
}
