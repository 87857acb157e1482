//! `Subscription`: a blocking iterator over history then live commits. Waits happen in short
//! slices with the interpreter released, so `close()` from another thread and Ctrl-C (checked
//! between slices) both end a blocked wait.
//!
//! For asyncio (`lapilli.aio`) nothing waits: `next_batch(max, timeout=0)` answers at once, and
//! `call_soon_when_ready(loop, callback)` registers a one-shot wake-up with the engine
//! (`core::Subscription::on_ready`), which schedules `callback` on the loop from the store's
//! completion thread when there may be something new.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapilli_core as core;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::blocking::{detached, lock};
use crate::values::SequencedEvent;
use crate::wake::LoopCallback;

/// One registered wake-up: emptied when it fires, or when its waiter gives up
/// (`cancel_call_soon`), which drops the loop and callback at once rather than when the engine
/// next notifies.
type Registration = Arc<Mutex<Option<LoopCallback>>>;

/// Longest single wait with the interpreter released before signals are checked again.
const SLICE: Duration = Duration::from_millis(100);
/// Events fetched per crossing when iterating one at a time.
const ITER_BATCH: usize = 256;

/// A live, ordered feed of the events matching a query: first the history after `after`, then
/// new commits, with no gap and no duplicate. Iterate it (blocking), or call `next(timeout)` /
/// `next_batch(max, timeout)`. `close()` works from any thread and ends a blocked wait.
#[pyclass(frozen, module = "lapilli")]
pub struct Subscription {
    inner: core::Subscription,
    /// Fetched from the engine but not yet handed to Python.
    buffer: Mutex<VecDeque<core::SequencedEvent>>,
    /// How many events `buffer` holds, readable without its lock (which a blocked consumer
    /// holds while it waits).
    buffered: AtomicUsize,
    /// The last position handed to Python: the resume cursor.
    delivered: AtomicU64,
    /// The latest `call_soon_when_ready` registration.
    registration: Mutex<Option<Registration>>,
}

impl Subscription {
    pub fn new(inner: core::Subscription, after: u64) -> Self {
        Subscription {
            inner,
            buffer: Mutex::new(VecDeque::new()),
            buffered: AtomicUsize::new(0),
            delivered: AtomicU64::new(after),
            registration: Mutex::new(None),
        }
    }

    /// Up to `max` events for Python. `None`: ended. Empty: the timeout passed.
    fn take(&self, py: Python<'_>, max: usize, fetch: usize, timeout: Option<Duration>) -> PyResult<Option<Vec<core::SequencedEvent>>> {
        if max == 0 {
            return Err(crate::errors::invalid("max is 0; a batch holds at least one event"));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let slice = match deadline {
                None => SLICE,
                Some(d) => SLICE.min(d.saturating_duration_since(Instant::now())),
            };
            let step = detached(py, || {
                let mut buffer = lock(&self.buffer);
                if self.inner.is_closed() {
                    // Closed means ended, even with fetched events not yet handed out.
                    buffer.clear();
                    self.buffered.store(0, Ordering::Release);
                    return Ok(None);
                }
                if buffer.is_empty() {
                    match self.inner.next_batch(fetch.max(max), Some(slice))? {
                        None => return Ok(None),
                        Some(batch) => buffer.extend(batch),
                    }
                }
                let n = buffer.len().min(max);
                let taken = buffer.drain(..n).collect::<Vec<_>>();
                self.buffered.store(buffer.len(), Ordering::Release);
                Ok(Some(taken))
            })?;
            match step {
                None => return Ok(None),
                Some(events) if !events.is_empty() => {
                    let last = events.last().unwrap().position.get();
                    self.delivered.store(last, Ordering::Release);
                    return Ok(Some(events));
                }
                Some(empty) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(Some(empty));
                    }
                }
            }
        }
    }
}

fn timeout_arg(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(crate::errors::invalid(format!("timeout is {t}; it must be a non-negative number of seconds or None"))),
    }
}

#[pymethods]
impl Subscription {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Blocks until the next event; stops when the subscription or its store is closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<SequencedEvent>> {
        Ok(self.take(py, 1, ITER_BATCH, None)?.and_then(|mut v| v.pop()).map(|inner| SequencedEvent { inner }))
    }

    /// The next event, or None if `timeout` seconds passed first or the subscription ended
    /// (`closed` tells which). `timeout=None` waits as long as it takes.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<SequencedEvent>> {
        let timeout = timeout_arg(timeout)?;
        Ok(self.take(py, 1, ITER_BATCH, timeout)?.and_then(|mut v| v.pop()).map(|inner| SequencedEvent { inner }))
    }

    /// Up to `max` events as soon as at least one is there: a non-empty list; an empty list if
    /// `timeout` seconds passed first (0 means do not wait); None once the subscription ended.
    #[pyo3(signature = (max=1024, timeout=None))]
    fn next_batch<'py>(&self, py: Python<'py>, max: usize, timeout: Option<f64>) -> PyResult<Option<Bound<'py, PyList>>> {
        let timeout = timeout_arg(timeout)?;
        match self.take(py, max, max, timeout)? {
            None => Ok(None),
            Some(events) => Ok(Some(PyList::new(py, events.into_iter().map(|inner| SequencedEvent { inner }))?)),
        }
    }

    /// True when everything committed so far has been handed out.
    #[getter]
    fn caught_up(&self) -> bool {
        // Like the engine's own flag, this may say True a moment before a fetched batch is
        // handed over; never True while fetched events wait in the buffer.
        self.buffered.load(Ordering::Acquire) == 0 && self.inner.caught_up()
    }

    /// The last position handed out: subscribe again with `after=position` to resume.
    #[getter]
    fn position(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// True once the subscription or its store was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Schedules `callback()` once on the asyncio `event_loop` (through
    /// `event_loop.call_soon_threadsafe`, from lapilli's completion thread) as soon as
    /// `next_batch(max, timeout=0)` may have something new to answer: new commits past what was
    /// scanned, the end (this subscription or its store closed), or a follower's failure; right
    /// away if that holds already. No thread waits meanwhile. A later registration replaces
    /// this one, whose callback is then scheduled too (its waiter checks again).
    fn call_soon_when_ready(&self, py: Python<'_>, event_loop: Py<PyAny>, callback: Py<PyAny>) -> PyResult<()> {
        let registration: Registration = Arc::new(Mutex::new(Some(LoopCallback { event_loop, callback })));
        *lock(&self.registration) = Some(registration.clone());
        detached(py, move || {
            self.inner.on_ready(move || {
                let fired = lock(&registration).take();
                if let Some(on_loop) = fired {
                    on_loop.schedule();
                }
            });
            Ok(())
        })
    }

    /// Forgets the latest `call_soon_when_ready` registration that has not fired (its waiter
    /// was cancelled or timed out): its loop and callback are released now, and it will not be
    /// scheduled.
    fn cancel_call_soon(&self) {
        let registration = lock(&self.registration).take();
        // Dropped here, attached: the loop and callback references go with the interpreter held.
        let _forgotten = registration.and_then(|r| lock(&r).take());
    }

    /// Ends the subscription; safe from any thread; a blocked wait wakes and ends.
    fn close(&self) {
        self.inner.close();
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.inner.close();
        false
    }

    fn __repr__(&self) -> String {
        format!("Subscription(position={}, closed={})", self.position(), self.closed())
    }
}
