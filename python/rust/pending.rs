//! `PendingAppend`: an append handed to the writer without waiting, so that many concurrent
//! (asyncio) appends share one group commit and nothing blocks an event loop.
//!
//! The engine answers through `core::PendingAppend::on_complete`, on the store's completion
//! thread (never the writer). The answer is kept here for `result()` and `done()`; the thread
//! attaches to the interpreter only if someone asked to hear of it: a loop callback
//! (`call_soon_when_done`, what `lapilli.aio` uses: only `call_soon_threadsafe` runs there) or a
//! plain done-callback (`add_done_callback`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use lapilli_core as core;
use pyo3::prelude::*;

use crate::blocking::{detached, lock};
use crate::errors::to_py;
use crate::values::AppendResult;
use crate::wake::LoopCallback;

/// Longest single wait in `result()` with the interpreter released before signals are checked.
const SLICE: Duration = Duration::from_millis(100);

enum Callback {
    /// `add_done_callback`: called on the thread that delivers the answer.
    Call(Py<PyAny>),
    /// `call_soon_when_done`: scheduled on an event loop.
    OnLoop(LoopCallback),
}

#[derive(Default)]
struct TaskState {
    result: Option<core::Result<core::AppendResult>>,
    callbacks: Vec<Callback>,
}

struct Task {
    state: Mutex<TaskState>,
    done: Condvar,
}

impl Task {
    /// Stores the answer, wakes blocked `result()` calls, then runs what was registered.
    fn complete(&self, result: core::Result<core::AppendResult>) {
        let callbacks = {
            let mut state = lock(&self.state);
            state.result = Some(result);
            std::mem::take(&mut state.callbacks)
        };
        self.done.notify_all();
        run_callbacks(callbacks);
    }
}

/// Runs callbacks registered before the answer, or at once after it. Never called with the
/// task's lock held: attaching to the interpreter while holding it could deadlock against a
/// Python thread waiting for the lock.
fn run_callbacks(callbacks: Vec<Callback>) {
    if callbacks.is_empty() {
        return;
    }
    let mut plain = Vec::new();
    for callback in callbacks {
        match callback {
            Callback::OnLoop(on_loop) => on_loop.schedule(),
            Callback::Call(callback) => plain.push(callback),
        }
    }
    if plain.is_empty() {
        return;
    }
    let mut plain = Some(plain);
    let _ = Python::try_attach(|py| {
        for callback in plain.take().into_iter().flatten() {
            if let Err(e) = callback.call0(py) {
                e.write_unraisable(py, Some(callback.bind(py)));
            }
        }
    });
    // Not attached (the interpreter is finalizing): leak rather than drop without it.
    std::mem::forget(plain);
}

/// An append submitted with `Store.submit`: it commits (or is refused) whether or not anyone
/// waits. `add_done_callback(fn)` calls `fn()` once it is answered (from a lapilli thread, or at
/// once if it already is); `result()` then returns the `AppendResult` or raises.
#[pyclass(frozen, module = "lapilli")]
pub struct PendingAppend {
    task: Arc<Task>,
}

impl PendingAppend {
    pub fn new(mut future: core::PendingAppend) -> Self {
        let task = Arc::new(Task { state: Mutex::new(TaskState::default()), done: Condvar::new() });
        // An answer that is there already (bad input, a closed store) is taken now, so that
        // `Store.submit` can raise input errors where the input was passed; only an append
        // still on its way registers for the completion thread.
        match Pin::new(&mut future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(result) => task.complete(result),
            Poll::Pending => {
                let answered = task.clone();
                future.on_complete(move |result| answered.complete(result));
            }
        }
        PendingAppend { task }
    }

    fn answer(&self) -> Option<PyResult<AppendResult>> {
        // Copied out first: converting an error runs Python, which must not happen under the lock.
        let result = lock(&self.task.state).result.clone();
        result.map(|r| r.map(AppendResult::from).map_err(to_py))
    }

    /// Registers `callback`, or runs it now if the append is answered already.
    fn when_done(&self, callback: Callback) {
        {
            let mut state = lock(&self.task.state);
            if state.result.is_none() {
                state.callbacks.push(callback);
                return;
            }
        }
        run_callbacks(vec![callback]);
    }
}

#[pymethods]
impl PendingAppend {
    /// True once the append was committed or refused.
    fn done(&self) -> bool {
        lock(&self.task.state).result.is_some()
    }

    /// Calls `callback()` (no arguments) once the append is answered: on lapilli's completion
    /// thread (keep it short), or at once if it already is.
    fn add_done_callback(&self, callback: Py<PyAny>) {
        self.when_done(Callback::Call(callback));
    }

    /// Schedules `callback()` on the asyncio `event_loop` (`event_loop.call_soon_threadsafe`)
    /// once the append is answered; what `lapilli.aio` awaits an append with. No Python runs on
    /// lapilli's threads but that call.
    fn call_soon_when_done(&self, event_loop: Py<PyAny>, callback: Py<PyAny>) {
        self.when_done(Callback::OnLoop(LoopCallback { event_loop, callback }));
    }

    /// The outcome: the `AppendResult`, or the append's error raised. Waits (interpreter
    /// released) up to `timeout` seconds, or as long as it takes with None or `float("inf")`;
    /// raises `TimeoutError` if it passes first.
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<AppendResult> {
        crate::errors::guard(|| {
            let deadline = match timeout {
                Some(t) if t.is_nan() => {
                    return Err(crate::errors::invalid(format!(
                        "timeout is {t}; it must be a number of seconds or None"
                    )));
                }
                // Too far to represent (inf, 1e300): the same as no deadline.
                Some(t) => Duration::try_from_secs_f64(t.max(0.0)).ok().and_then(|d| Instant::now().checked_add(d)),
                None => None,
            };
            if let Some(answer) = self.answer() {
                return answer;
            }
            loop {
                let task = &self.task;
                detached(py, || {
                    let state = lock(&task.state);
                    // Short slices: Ctrl-C is checked between them.
                    let slice = deadline.map_or(SLICE, |d| SLICE.min(d.saturating_duration_since(Instant::now())));
                    let _answered = task
                        .done
                        .wait_timeout_while(state, slice, |s| s.result.is_none())
                        .unwrap_or_else(|p| p.into_inner());
                    Ok(())
                })?;
                if let Some(answer) = self.answer() {
                    return answer;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(pyo3::exceptions::PyTimeoutError::new_err(
                        "the append was not answered within the timeout",
                    ));
                }
            }
        })
    }

    fn __repr__(&self) -> String {
        match &lock(&self.task.state).result {
            None => "PendingAppend(pending)".into(),
            Some(Ok(r)) => format!("PendingAppend(first={}, last={})", r.first, r.last),
            Some(Err(e)) => format!("PendingAppend(error={:?})", e.kind().code()),
        }
    }
}

impl PendingAppend {
    /// The engine's answer if there is one yet.
    pub fn peek(&self) -> Option<core::Result<core::AppendResult>> {
        lock(&self.task.state).result.clone()
    }
}
