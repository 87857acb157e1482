//! `PendingAppend`: an append handed to the writer without waiting, so that many concurrent
//! (asyncio) appends share one group commit and nothing blocks an event loop.
//!
//! The engine's `PendingAppend` is a `Future`. Its waker here never runs Python on the writer's
//! thread: waking only queues the task for one completion thread of this module, which polls it
//! and then calls the Python done-callbacks with the interpreter attached.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use lapilli_core as core;
use pyo3::prelude::*;

use crate::blocking::{detached, lock};
use crate::errors::to_py;
use crate::values::AppendResult;

#[derive(Default)]
struct TaskState {
    future: Option<core::PendingAppend>,
    result: Option<core::Result<core::AppendResult>>,
    callbacks: Vec<Py<PyAny>>,
}

struct Task {
    state: Mutex<TaskState>,
    done: Condvar,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        completions().send(self).ok();
    }
}

fn completions() -> &'static Sender<Arc<Task>> {
    static SENDER: OnceLock<Sender<Arc<Task>>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (sender, receiver) = channel::<Arc<Task>>();
        std::thread::Builder::new()
            .name("lapilli-completions".into())
            .spawn(move || {
                for task in receiver {
                    task.poll();
                }
            })
            .expect("cannot start the lapilli completion thread");
        sender
    })
}

impl Task {
    /// Polls the engine future; on completion stores the result and runs the callbacks.
    fn poll(self: &Arc<Self>) {
        let callbacks = {
            let mut state = lock(&self.state);
            let Some(future) = state.future.as_mut() else { return };
            let waker = Waker::from(self.clone());
            match Pin::new(future).poll(&mut Context::from_waker(&waker)) {
                Poll::Pending => return,
                Poll::Ready(result) => {
                    state.future = None;
                    state.result = Some(result);
                    std::mem::take(&mut state.callbacks)
                }
            }
        };
        self.done.notify_all();
        if !callbacks.is_empty() {
            Python::attach(|py| run_callbacks(py, callbacks));
        }
    }
}

fn run_callbacks(py: Python<'_>, callbacks: Vec<Py<PyAny>>) {
    for callback in callbacks {
        if let Err(e) = callback.call0(py) {
            e.write_unraisable(py, Some(callback.bind(py)));
        }
    }
}

/// An append submitted with `Store.submit`: it commits (or is refused) whether or not anyone
/// waits. `add_done_callback(fn)` calls `fn()` once it is answered (from a lapilli thread, or at
/// once if it already is); `result()` then returns the `AppendResult` or raises.
#[pyclass(frozen, module = "lapilli")]
pub struct PendingAppend {
    task: Arc<Task>,
}

impl PendingAppend {
    pub fn new(future: core::PendingAppend) -> Self {
        let task = Arc::new(Task {
            state: Mutex::new(TaskState { future: Some(future), ..TaskState::default() }),
            done: Condvar::new(),
        });
        task.poll();
        PendingAppend { task }
    }

    fn answer(&self) -> Option<PyResult<AppendResult>> {
        // Copied out first: converting an error runs Python, which must not happen under the lock.
        let result = lock(&self.task.state).result.clone();
        result.map(|r| r.map(AppendResult::from).map_err(to_py))
    }
}

#[pymethods]
impl PendingAppend {
    /// True once the append was committed or refused.
    fn done(&self) -> bool {
        lock(&self.task.state).result.is_some()
    }

    /// Calls `callback()` (no arguments) once the append is answered.
    fn add_done_callback(&self, py: Python<'_>, callback: Py<PyAny>) {
        {
            let mut state = lock(&self.task.state);
            if state.result.is_none() {
                state.callbacks.push(callback);
                return;
            }
        }
        run_callbacks(py, vec![callback]);
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
                    let slice = Duration::from_millis(100);
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
