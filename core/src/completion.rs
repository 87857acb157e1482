//! The completion thread: where callbacks and wakers registered on pending appends and on
//! subscriptions run, never on the writer thread.
//!
//! Why a thread of its own: a binding's callback can be slow (a JNA upcall that attaches a
//! thread to the JVM, a Python `call_soon_threadsafe` that takes the GIL, a Node threadsafe
//! function call). Run on the writer, each one would delay the next group commit, and the writer
//! would depend on the foreign runtime's health. The writer instead hands the group's jobs
//! over in one push once the group's answers are filled (its refusals before its write, what
//! is left at its end), and this thread runs them in the order the writer answered them. Blocking waiters are still woken by the writer itself, without the hop: an
//! append's (`PendingAppend::wait`) with one futex wake for the group (`writer/answers.rs`),
//! a subscription's (`Subscription::next_batch`) through its condition variable. A wake costs
//! less than the hop, and a callback that blocks on an append (on this thread) must not wait
//! for itself.
//!
//! One per store handle, writable or read-only, started at open and stopped (after its queue is
//! drained) by `close`; after that, jobs run on the thread that produces them, which is never
//! the writer (it has stopped by then).

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::thread::{JoinHandle, ThreadId};

use crate::error::{Error, Result};

/// One thing to do on the completion thread.
pub(crate) enum Job {
    Wake(Waker),
    Run(Box<dyn FnOnce() + Send>),
}

impl Job {
    fn run(self) {
        // A panicking callback is the binding's bug; it must not take the thread (and every
        // later completion of the store) with it.
        let _ = catch_unwind(AssertUnwindSafe(|| match self {
            Job::Wake(waker) => waker.wake(),
            Job::Run(callback) => callback(),
        }));
    }
}

pub(crate) struct Completions {
    /// None once stopped.
    queue: Mutex<Option<Sender<Vec<Job>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    /// Where the store's blocking append waiters sleep (`answers.rs`).
    pub(crate) answers: crate::writer::answers::Answers,
}

thread_local! {
    /// Set on the writer thread: jobs produced there are collected here and handed over in one
    /// push per group (`flush_deferred`).
    static DEFERRED: RefCell<Option<(Arc<Completions>, Vec<Job>)>> = const { RefCell::new(None) };
}

impl Completions {
    pub fn start() -> Result<Arc<Completions>> {
        let (queue, jobs) = channel::<Vec<Job>>();
        let thread = std::thread::Builder::new()
            .name("lapilli-completion".into())
            .spawn(move || {
                for batch in jobs {
                    for job in batch {
                        job.run();
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the completion thread", &e))?;
        Ok(Arc::new(Completions {
            queue: Mutex::new(Some(queue)),
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            answers: crate::writer::answers::Answers::default(),
        }))
    }

    /// Runs `jobs` on the completion thread, in order: collected for the end of the group when
    /// called on the writer thread, pushed now otherwise; run right here once stopped.
    pub fn dispatch(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let jobs = match defer(jobs) {
            Ok(()) => return,
            Err(jobs) => jobs,
        };
        let rejected = match &*self.queue.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(queue) => queue.send(jobs).err().map(|e| e.0),
            None => Some(jobs),
        };
        for job in rejected.into_iter().flatten() {
            job.run();
        }
    }

    /// Makes the calling thread (the writer) collect the jobs it produces until the guard drops;
    /// `flush_deferred` hands them over.
    pub fn defer_here(self: &Arc<Self>) -> DeferGuard {
        DEFERRED.with(|d| *d.borrow_mut() = Some((self.clone(), Vec::new())));
        DeferGuard
    }

    /// Lets the thread finish what is queued, and joins it (unless called from it: a callback
    /// that closes its store). Later jobs run on the thread that produces them. A second call
    /// racing the first returns once the thread has ended too.
    pub fn stop(&self) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        if std::thread::current().id() == self.thread_id {
            return;
        }
        // Held while joining, so that a racing `stop` waits for the end as well.
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(thread) = thread.take() {
            let _ = thread.join();
        }
    }
}

/// Collects `jobs` if this thread defers; gives them back otherwise.
fn defer(jobs: Vec<Job>) -> std::result::Result<(), Vec<Job>> {
    DEFERRED.with(|d| match &mut *d.borrow_mut() {
        Some((_, pending)) => {
            pending.extend(jobs);
            Ok(())
        }
        None => Err(jobs),
    })
}

/// One job with no store at hand (an append answer): deferred on the writer thread, run right
/// here on any other (the answer was produced by the caller's own thread, e.g. for bad input).
pub(crate) fn run_or_defer(job: Job) {
    if let Err(jobs) = defer(vec![job]) {
        for job in jobs {
            job.run();
        }
    }
}

/// Whether this thread defers the jobs and wake-ups of `completions` (it is that store's writer).
pub(crate) fn defers_for(completions: &Arc<Completions>) -> bool {
    DEFERRED.with(|d| d.borrow().as_ref().is_some_and(|(c, _)| Arc::ptr_eq(c, completions)))
}

/// Wakes the blocked callers whose answers the writer filled since the last call (one wake per
/// answer word) and hands the callbacks and wakers it collected to the completion thread, in one
/// push. Called several times in a group: before its write (its refusals), once its answers
/// are filled, and at its end.
pub(crate) fn flush_deferred() {
    DEFERRED.with(|d| {
        if let Some((completions, _)) = &*d.borrow() {
            completions.answers.wake_pending();
        }
    });
    let flushed = DEFERRED.with(|d| {
        d.borrow_mut().as_mut().and_then(|(completions, pending)| {
            (!pending.is_empty()).then(|| (completions.clone(), std::mem::take(pending)))
        })
    });
    if let Some((completions, jobs)) = flushed {
        let rejected = match &*completions.queue.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(queue) => queue.send(jobs).err().map(|e| e.0),
            None => Some(jobs),
        };
        // Stopped (or its thread gone): nothing else would run them.
        for job in rejected.into_iter().flatten() {
            job.run();
        }
    }
}

pub(crate) struct DeferGuard;

impl Drop for DeferGuard {
    /// Flushes what is left (the `Closed` answers of requests still queued when the writer
    /// stopped) and stops deferring.
    fn drop(&mut self) {
        flush_deferred();
        DEFERRED.with(|d| *d.borrow_mut() = None);
    }
}
