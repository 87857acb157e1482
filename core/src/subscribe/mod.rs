//! Subscriptions: catch-up and live tail as one loop over the published head.
//!
//! The loop: scan from the cursor up to the head loaded now, deliver what matches, and when
//! nothing is left, wait for the head to move. Because the live part is the same scan started
//! from the same cursor, there is no seam where an event could be skipped or repeated.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::completion::{Completions, Job};
use crate::error::{Error, Result};
use crate::event::{EventView, SequencedEvent};
use crate::position::Position;
use crate::query::Query;
use crate::read::{Published, ReadAhead, Walk};

/// Wakes subscribers when the head moves, the store closes or a follower fails: those blocked
/// in `next_batch` (a condition variable) and those that registered a waker or callback (a
/// list drained at each notification, whose wakers run on the completion thread). With no one
/// waiting or registered, a commit pays one atomic load here and takes no lock.
#[derive(Default)]
pub(crate) struct Notifier {
    /// Blocked waiters plus registered interests: the one load a commit pays.
    listeners: AtomicUsize,
    registered: Mutex<Vec<Arc<Interest>>>,
    wakeup: Condvar,
    /// Where registered wakers run; set at open (unset: on the notifying thread).
    completions: OnceLock<Arc<Completions>>,
}

/// One subscription's registration: at most one entry in the notifier's list however often it
/// registers, holding the latest waker.
#[derive(Default)]
pub(crate) struct Interest {
    queued: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Notifier {
    pub fn set_completions(&self, completions: Arc<Completions>) {
        let _ = self.completions.set(completions);
    }

    /// Called after the head (or a closed or failed flag) was stored.
    pub fn notify(&self) {
        // Pairs with the fences in `wait` and `register`: either this load sees the listener,
        // or the listener's re-check sees the new head.
        fence(Ordering::SeqCst);
        if self.listeners.load(Ordering::Relaxed) == 0 {
            return;
        }
        let drained = {
            let mut registered = self.registered.lock().unwrap_or_else(|p| p.into_inner());
            self.wakeup.notify_all();
            let drained = std::mem::take(&mut *registered);
            self.listeners.fetch_sub(drained.len(), Ordering::SeqCst);
            drained
        };
        let jobs: Vec<Job> = drained
            .into_iter()
            .filter_map(|interest| {
                interest.queued.store(false, Ordering::SeqCst);
                interest.waker.lock().unwrap_or_else(|p| p.into_inner()).take().map(Job::Wake)
            })
            .collect();
        self.dispatch(jobs);
    }

    fn dispatch(&self, jobs: Vec<Job>) {
        match self.completions.get() {
            Some(completions) => completions.dispatch(jobs),
            None => jobs.into_iter().for_each(|job| {
                if let Job::Wake(waker) = job {
                    waker.wake()
                }
            }),
        }
    }

    /// Puts `waker` in `interest` and `interest` in the list (once). The caller re-checks
    /// readiness afterwards: a notification between its check and this one is not missed.
    fn register(&self, interest: &Arc<Interest>, waker: &Waker) {
        let replaced = {
            let mut slot = interest.waker.lock().unwrap_or_else(|p| p.into_inner());
            if slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                None
            } else {
                slot.replace(waker.clone())
            }
        };
        // Another waiter of the same subscription (two consumers taking turns): woken to check
        // again rather than dropped, so that neither waits forever.
        if let Some(replaced) = replaced {
            self.dispatch(vec![Job::Wake(replaced)]);
        }
        if !interest.queued.swap(true, Ordering::SeqCst) {
            let mut registered = self.registered.lock().unwrap_or_else(|p| p.into_inner());
            registered.push(interest.clone());
            self.listeners.fetch_add(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// One subscription closed: wakes the blocked waiters (its consumer may be one of them) and
    /// its own registered waker, and takes it off the list, without waking everyone else's.
    fn closed(&self, interest: &Arc<Interest>) {
        fence(Ordering::SeqCst);
        if self.listeners.load(Ordering::Relaxed) == 0 {
            return;
        }
        {
            let mut registered = self.registered.lock().unwrap_or_else(|p| p.into_inner());
            self.wakeup.notify_all();
            if interest.queued.swap(false, Ordering::SeqCst) {
                let before = registered.len();
                registered.retain(|other| !Arc::ptr_eq(other, interest));
                self.listeners.fetch_sub(before - registered.len(), Ordering::SeqCst);
            }
        }
        let waker = interest.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.dispatch(waker.into_iter().map(Job::Wake).collect());
    }

    /// Blocks until `ready()` holds or `deadline` passes (None: no deadline).
    pub fn wait(&self, ready: impl Fn() -> bool, deadline: Option<Instant>) {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut guard = self.registered.lock().unwrap_or_else(|p| p.into_inner());
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
        self.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A one-shot callback as a waker, for [`Subscription::on_ready`].
struct CallOnce(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Wake for CallOnce {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let callback = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(callback) = callback {
            callback();
        }
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
    /// Serialises consumers; `close`, `caught_up` and `position` never take it. Holds what the
    /// last pass leaves for the next to go on from.
    consumer: Mutex<Carried>,
    /// Every position up to this one has been examined.
    scanned: AtomicU64,
    /// The last delivered position (the resume cursor).
    delivered: AtomicU64,
    closed: AtomicBool,
    /// This subscription's entry in the notifier's list of registered wakers.
    interest: Arc<Interest>,
    source: Source,
}

/// Where a subscription reads what it delivers: the embedded log, or a Postgres context. The
/// loop around it (cursor, head, waiting) is the same for both.
#[derive(Clone)]
pub(crate) enum Source {
    Embedded,
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::postgres::PgShared>),
}

/// What a pass leaves for the next one of the same subscription.
#[derive(Default)]
struct Carried {
    /// Where the embedded walk stopped in its entry and how far it had read ahead
    /// (`Walk::resuming`).
    read_ahead: Option<ReadAhead>,
    /// The Postgres read of the last pass, with the rows of its page not yet delivered, and
    /// the cursor (`scanned`) that pass left, which it goes on from. Without it every pass
    /// began a new read wanting only that pass's `max` events: for a query whose matches are
    /// sparser than the read's probe finds, each pass then looked through the indexes at
    /// every match left in the window to answer `max` of them, so catching up one event at a
    /// time cost the square of the matches (found by the review of 2026-12-04).
    #[cfg(feature = "postgres")]
    postgres: Option<(u64, crate::postgres::PgRead)>,
}

enum ScanWalk {
    Embedded(Walk),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgRead),
}

impl Subscription {
    pub(crate) fn new(published: Arc<Published>, query: Query, after: Position, source: Source) -> Result<Self> {
        query.validate("query")?;
        let head = published.head();
        if after.get() > head {
            return Err(Error::invalid(format!("after is {after}; the head is {head}")));
        }
        published.counters.subscription_opened();
        Ok(Subscription {
            published,
            query,
            consumer: Mutex::new(Carried::default()),
            scanned: AtomicU64::new(after.get()),
            delivered: AtomicU64::new(after.get()),
            closed: AtomicBool::new(false),
            interest: Arc::default(),
            source,
        })
    }

    fn ended(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.published.closed.load(Ordering::Acquire)
    }

    /// Up to `max` events. `Ok(None)`: the subscription has ended. `Ok(Some(empty))`: the
    /// timeout passed first. `timeout = None` waits as long as it takes.
    pub fn next_batch(&self, max: usize, timeout: Option<Duration>) -> Result<Option<Vec<SequencedEvent>>> {
        check_max(max)?;
        // A timeout too long to represent is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut batch = Vec::with_capacity(max.min(1024));
        loop {
            let mut consumer = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
            let Some(scanned) = self.scan(&mut consumer, max, &mut |view| batch.push(view.to_owned_event()))? else {
                return Ok(None);
            };
            if !batch.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Some(batch));
            }
            // Not held while waiting: another consumer of this subscription (a callback on the
            // completion thread taking what is new, say) would wait for this one's next match,
            // and every completion of the store behind it (third review).
            drop(consumer);
            self.published.notifier.wait(|| self.ready_after(scanned), deadline);
        }
    }

    /// Up to `max` events that are there now, without waiting. `Ok(None)`: the subscription
    /// has ended. `Ok(Some(empty))`: nothing new yet; [`Subscription::on_ready`] or
    /// [`Subscription::poll_next_batch`] says when to try again.
    pub fn try_next_batch(&self, max: usize) -> Result<Option<Vec<SequencedEvent>>> {
        check_max(max)?;
        let mut batch = Vec::new();
        let mut consumer = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.scan(&mut consumer, max, &mut |view| batch.push(view.to_owned_event()))?.map(|_| batch))
    }

    /// [`Subscription::try_next_batch`] without copying: `visit` sees up to `max` events in
    /// place (a binding packs them into its own buffer). Answers how many it saw; `Ok(None)`:
    /// the subscription has ended.
    pub fn try_visit(&self, max: usize, mut visit: impl FnMut(&EventView<'_>)) -> Result<Option<usize>> {
        check_max(max)?;
        let mut seen = 0;
        let mut consumer = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self
            .scan(&mut consumer, max, &mut |view| {
                seen += 1;
                visit(view)
            })?
            .map(|_| seen))
    }

    /// The async form of [`Subscription::next_batch`] without a timeout: `Ready` with events
    /// (or `None`: ended), or `Pending` with `cx`'s waker registered, to be woken (on the
    /// store's completion thread) when the head moves, the subscription or store closes, or a
    /// follower fails. No thread waits for it.
    pub fn poll_next_batch(&self, cx: &mut Context<'_>, max: usize) -> Poll<Result<Option<Vec<SequencedEvent>>>> {
        loop {
            match self.try_next_batch(max) {
                Ok(Some(batch)) if batch.is_empty() => {}
                answer => return Poll::Ready(answer),
            }
            self.published.notifier.register(&self.interest, cx.waker());
            if !self.ready() {
                return Poll::Pending;
            }
            // Something arrived between the scan and the registration: scan again.
        }
    }

    /// `poll_next_batch` as a future: `sub.next_batch_async(100).await`.
    pub fn next_batch_async(&self, max: usize) -> impl Future<Output = Result<Option<Vec<SequencedEvent>>>> + '_ {
        std::future::poll_fn(move |cx| self.poll_next_batch(cx, max))
    }

    /// Calls `callback` once, on the store's completion thread (never the writer), as soon as
    /// [`Subscription::try_next_batch`] may have something new to answer: events past what was
    /// scanned, the end, or a follower's failure. Right away (on that thread) if that already
    /// holds. A later registration (of any kind) on the same subscription calls an earlier one
    /// that has not fired yet, so that its waiter checks again. For bindings
    /// whose runtime has its own event loop: register, and call `try_next_batch` when called.
    pub fn on_ready(&self, callback: impl FnOnce() + Send + 'static) {
        let waker = Waker::from(Arc::new(CallOnce(Mutex::new(Some(Box::new(callback))))));
        self.published.notifier.register(&self.interest, &waker);
        if self.ready() {
            // Taken back from the list's entry so it fires once, through the completion thread.
            let waker = self.interest.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
            self.published.notifier.dispatch(waker.into_iter().map(Job::Wake).collect());
        }
    }

    /// One pass: what lies between the cursor and the head now, up to `max` matches.
    /// `None`: ended. `Some(scanned)`: the cursor after the pass.
    /// `carried`: the consumer's, from pass to pass.
    fn scan(&self, carried: &mut Carried, max: usize, visit: &mut dyn FnMut(&EventView<'_>)) -> Result<Option<u64>> {
        if self.ended() {
            *carried = Carried::default();
            return Ok(None);
        }
        self.published.check()?;
        let mut scanned = self.scanned.load(Ordering::Relaxed);
        let (mut walk, head) = match &self.source {
            Source::Embedded => {
                let snapshot = self.published.snapshot();
                let head = snapshot.head;
                // The pass takes at most `max` events: a batch of one warms no segments ahead,
                // as a `limit: 1` read (`read::warm`). It goes on with what the pass before
                // asked of the log ahead (`read::ReadAhead`) if it starts where that one stopped.
                let walk = Walk::new(snapshot, self.query.clone(), scanned + 1, head, false)
                    .wanting(max as u64)
                    .resuming(carried.read_ahead.take());
                (ScanWalk::Embedded(walk), head)
            }
            // The head this handle knows of (its own commits, and others' through the
            // listener): committed, so everything up to it is there to read.
            #[cfg(feature = "postgres")]
            Source::Postgres(shared) => {
                let head = self.published.head();
                let read = match carried.postgres.take() {
                    // Its window ends at the head of an earlier pass; what lies after it is read
                    // next, in the loop below.
                    Some((from, read)) if from == scanned => read,
                    _ => crate::postgres::PgRead::new(shared.clone(), &self.query, scanned + 1, head, false, head, u64::MAX),
                };
                (ScanWalk::Postgres(read), head)
            }
        };
        let mut found = 0;
        let mut last = None;
        while found < max {
            let visit_one = |view: &EventView<'_>| {
                visit(view);
                view.position.get()
            };
            let next = match &mut walk {
                ScanWalk::Embedded(walk) => walk.next_visit(visit_one)?,
                #[cfg(feature = "postgres")]
                ScanWalk::Postgres(read) => match read.next(visit_one)? {
                    // A read carried from an earlier pass is done up to that pass's head: the
                    // rest, up to this one's, is a read of its own (at the page size reached).
                    None if read.head < head => {
                        *read = read.continued(&self.query, head);
                        continue;
                    }
                    next => next,
                },
            };
            match next {
                Some((_, position)) => {
                    found += 1;
                    last = Some(position);
                }
                None => break,
            }
        }
        // A full batch stops at its last event; otherwise everything up to the head was seen.
        scanned = match last {
            Some(last) if found == max => last,
            _ => head.max(scanned),
        };
        match walk {
            ScanWalk::Embedded(walk) => carried.read_ahead = walk.read_ahead(),
            // Not kept once closed: `close` may have found the consumer busy with this pass.
            #[cfg(feature = "postgres")]
            ScanWalk::Postgres(read) => carried.postgres = (!self.ended()).then_some((scanned, read)),
        }
        self.scanned.store(scanned, Ordering::Release);
        if let Some(last) = last {
            self.delivered.store(last, Ordering::Release);
        }
        Ok(Some(scanned))
    }

    fn ready_after(&self, scanned: u64) -> bool {
        self.ended() || self.published.failed() || self.published.head() > scanned
    }

    fn ready(&self) -> bool {
        self.ready_after(self.scanned.load(Ordering::Acquire))
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
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.published.counters.subscription_closed();
        }
        // What a pass kept for the next (a Postgres read's page): none will come. Not waited
        // for if a consumer is in a pass; that pass finds the subscription ended next time.
        match self.consumer.try_lock() {
            Ok(mut carried) => *carried = Carried::default(),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => *poisoned.into_inner() = Carried::default(),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        self.published.notifier.closed(&self.interest);
    }
}

fn check_max(max: usize) -> Result<()> {
    if max == 0 {
        return Err(Error::invalid("max is 0; a batch holds at least one event"));
    }
    Ok(())
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.close();
    }
}
