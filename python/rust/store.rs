//! `Store`: the front door. One `Store` may be shared by many threads; every call that can
//! block (fsync, recovery, joining the writer) runs with the interpreter released.

use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use lapilli_core as core;
use pyo3::exceptions::{PyResourceWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::blocking::detached;
use crate::errors::guard;
use crate::convert::{self, type_name};
use crate::pending::PendingAppend;
use crate::read::ReadResult;
use crate::subscription::Subscription;
use crate::values::{AppendCondition, AppendResult, Event, query_arg};

/// An open store: one directory, one global order of events. Use as a context manager, or call
/// `close()`.
#[pyclass(frozen, module = "lapilli")]
pub struct Store {
    inner: core::Store,
    /// Set by `close()`: a store dropped without it warns (`ResourceWarning`), as an unclosed
    /// file or sqlite3 connection does.
    closed: AtomicBool,
}

impl Store {
    fn new(inner: core::Store) -> Self {
        Store { inner, closed: AtomicBool::new(false) }
    }
}

impl Drop for Store {
    /// The last reference went without `close()`: warn, then close with the interpreter
    /// released (closing joins the writer and fsyncs; the engine's own drop would do that while
    /// this thread holds the interpreter, stopping every other Python thread meanwhile).
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let inner = &self.inner;
        // `try_attach`: nothing to warn through once the interpreter is finalizing.
        let attached = Python::try_attach(|py| {
            let message = format!(
                "unclosed lapilli.Store({:?}): close it, or open it with `with Store.open(...) as store:`",
                inner.path().display().to_string()
            );
            let warned = CString::new(message)
                .map_err(|e| PyValueError::new_err(e.to_string()))
                .and_then(|m| PyErr::warn(py, py.get_type::<PyResourceWarning>().as_any(), &m, 1));
            if let Err(e) = warned {
                e.write_unraisable(py, None);
            }
            let _ = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.close())));
        });
        if attached.is_none() {
            let _ = catch_unwind(AssertUnwindSafe(|| inner.close()));
        }
    }
}

fn path_arg(path: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let os = path.py().import("os")?;
    let fspath = os
        .call_method1("fspath", (path,))
        .map_err(|_| PyTypeError::new_err(format!("path must be str or os.PathLike, not {}", type_name(path))))?;
    fspath
        .extract::<PathBuf>()
        .map_err(|_| PyTypeError::new_err(format!("path must be str or os.PathLike, not {}", type_name(path))))
}

/// The `Event` objects of `events`, kept alive (and, being frozen, unchanged) while the engine
/// reads their inner events in place: nothing is cloned before it encodes them.
fn events_arg<'py>(events: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, Event>>> {
    if events.is_instance_of::<Event>() {
        return Err(PyTypeError::new_err("events must be a list of Event, not a single Event (wrap it: [event])"));
    }
    let iter = events
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("events must be a list of Event, not {}", type_name(events))))?;
    let mut out = Vec::with_capacity(iter.size_hint().0);
    for (i, item) in iter.enumerate() {
        let item = item?;
        let event = item
            .cast_into::<Event>()
            .map_err(|e| PyTypeError::new_err(format!("events[{i}] must be Event, not {}", type_name(e.into_inner().as_any()))))?;
        out.push(event);
    }
    Ok(out)
}

/// The engine's events, borrowed from the Python objects.
fn borrowed<'a>(events: &'a [Bound<'_, Event>]) -> Vec<&'a core::Event> {
    events.iter().map(|e| &e.get().inner).collect()
}

fn condition_arg(condition: Option<&Bound<'_, PyAny>>) -> PyResult<Option<core::AppendCondition>> {
    match condition {
        None => Ok(None),
        Some(c) if c.is_none() => Ok(None),
        Some(c) => match c.cast::<AppendCondition>() {
            Ok(c) => Ok(Some(c.get().inner.clone())),
            Err(_) => Err(PyTypeError::new_err(format!("condition must be AppendCondition or None, not {}", type_name(c)))),
        },
    }
}

fn bool_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    match value.cast::<pyo3::types::PyBool>() {
        Ok(b) => Ok(b.is_true()),
        Err(_) => Err(PyTypeError::new_err(format!("{what} must be bool, not {}", type_name(value)))),
    }
}

#[pymethods]
impl Store {
    /// Opens (creating if missing) the store in the directory `path`. `durability` is "fsync"
    /// (default: an append returns once its batch is on disk) or "buffered" (tests and
    /// throwaway data). Raises `StoreLockedError` if another handle holds it.
    #[staticmethod]
    #[pyo3(signature = (path, *, durability=None, segment_size=None, max_event_bytes=None))]
    #[pyo3(text_signature = "(path, *, durability='fsync', segment_size=None, max_event_bytes=None)")]
    fn open(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        durability: Option<&Bound<'_, PyAny>>,
        segment_size: Option<&Bound<'_, PyAny>>,
        max_event_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Store> {
        let path = path_arg(path)?;
        let durability: core::Durability = match durability {
            Some(d) if !d.is_none() => convert::string(d, "durability")?.parse().map_err(crate::errors::to_py)?,
            _ => core::Durability::Fsync,
        };
        let mut options = core::Options { durability, ..core::Options::default() };
        if let Some(size) = convert::optional_position(segment_size, "segment_size")? {
            options.segment_size = size;
        }
        if let Some(max) = convert::optional_position(max_event_bytes, "max_event_bytes")? {
            options.max_event_bytes = usize::try_from(max).unwrap_or(usize::MAX);
        }
        let inner = detached(py, move || core::Store::open(path, options))?;
        Ok(Store::new(inner))
    }

    /// A read-only handle (a follower) on a store another process may be writing: it never
    /// takes the lock or writes a byte, sees whole committed batches only and follows new
    /// commits within milliseconds. Appends on it raise ReadOnlyError.
    #[staticmethod]
    fn open_read_only(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Store> {
        let path = path_arg(path)?;
        let inner = detached(py, move || core::Store::open_read_only(path))?;
        Ok(Store::new(inner))
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// The position of the last committed event (0 for an empty store).
    fn head(&self) -> PyResult<u64> {
        guard(|| self.inner.head().map(|p| p.get()).map_err(crate::errors::to_py))
    }

    /// How this handle is doing, as a dict (`lapilli.Stats`): head, what it appended since it
    /// was opened, group commits, events per commit, fsync latency, queue depth, segments,
    /// index bytes, open subscriptions, and for a follower its lag.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let store = &self.inner;
        // Lists the store directory (index bytes), and a follower scans for its lag: off the GIL.
        let s = detached(py, move || store.stats())?;
        let stats = pyo3::types::PyDict::new(py);
        stats.set_item("head", s.head)?;
        stats.set_item("events_appended", s.events_appended)?;
        stats.set_item("bytes_appended", s.bytes_appended)?;
        stats.set_item("group_commits", s.group_commits)?;
        stats.set_item("events_per_commit_mean", s.events_per_commit_mean)?;
        stats.set_item("events_per_commit_max", s.events_per_commit_max)?;
        stats.set_item("fsyncs", s.fsyncs)?;
        stats.set_item("fsync_p50_micros", s.fsync_p50_micros)?;
        stats.set_item("fsync_p99_micros", s.fsync_p99_micros)?;
        stats.set_item("fsync_max_micros", s.fsync_max_micros)?;
        stats.set_item("queue_depth", s.queue_depth)?;
        stats.set_item("queue_depth_max", s.queue_depth_max)?;
        stats.set_item("segments", s.segments)?;
        stats.set_item("index_bytes", s.index_bytes)?;
        stats.set_item("subscriptions", s.subscriptions)?;
        stats.set_item("follower_lag_positions", s.follower_lag_positions)?;
        stats.set_item("follower_lag_millis", s.follower_lag_millis)?;
        Ok(stats)
    }

    /// Appends `events` atomically at consecutive positions if `condition` holds, and returns
    /// once they are committed. Raises `ConflictError` / `AlreadyExistsError` when the condition
    /// fails (nothing is written).
    #[pyo3(signature = (events, condition=None))]
    fn append(
        &self,
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
        condition: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AppendResult> {
        let events = guard(|| events_arg(events))?;
        let events = borrowed(&events);
        let condition = condition_arg(condition)?;
        let store = &self.inner;
        detached(py, move || store.submit_borrowed(&events, condition).wait()).map(AppendResult::from)
    }

    /// Hands an append to the writer without waiting for it (what `lapilli.aio` uses): returns a
    /// `PendingAppend`. Bad input is raised here; a failed condition by `PendingAppend.result()`.
    #[pyo3(signature = (events, condition=None))]
    fn submit(
        &self,
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
        condition: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PendingAppend> {
        let events = guard(|| events_arg(events))?;
        let events = borrowed(&events);
        let condition = condition_arg(condition)?;
        let store = &self.inner;
        let pending = detached(py, move || Ok(store.submit_borrowed(&events, condition)))?;
        let pending = PendingAppend::new(pending);
        // Input errors are known at once: raise them here, where the caller passed the input.
        if let Some(Err(e)) = pending.peek() {
            if e.kind() != core::ErrorKind::Conflict && e.kind() != core::ErrorKind::AlreadyExists {
                return Err(crate::errors::to_py(e));
            }
        }
        Ok(pending)
    }

    /// The events matching `query` in the window `(after, until]` (until defaults to the head
    /// now), ascending, or descending with `backwards=True`, at most `limit` of them.
    #[pyo3(signature = (query, *, after=None, until=None, limit=None, backwards=None))]
    #[pyo3(text_signature = "($self, query, *, after=0, until=None, limit=None, backwards=False)")]
    fn read(
        &self,
        query: &Bound<'_, PyAny>,
        after: Option<&Bound<'_, PyAny>>,
        until: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        backwards: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ReadResult> {
        let query = query_arg(query, "query")?;
        let options = core::ReadOptions {
            after: core::Position(convert::optional_position(after, "after")?.unwrap_or(0)),
            until: convert::optional_position(until, "until")?.map(core::Position),
            limit: convert::optional_position(limit, "limit")?,
            backwards: match backwards {
                Some(b) if !b.is_none() => bool_arg(b, "backwards")?,
                _ => false,
            },
        };
        let inner = guard(|| self.inner.read(&query, options).map_err(crate::errors::to_py))?;
        Ok(ReadResult::new(inner))
    }

    /// Every event matching `query` after `after`: history first, then new commits as they
    /// happen.
    #[pyo3(signature = (query, *, after=None))]
    #[pyo3(text_signature = "($self, query, *, after=0)")]
    fn subscribe(&self, query: &Bound<'_, PyAny>, after: Option<&Bound<'_, PyAny>>) -> PyResult<Subscription> {
        let query = query_arg(query, "query")?;
        let after = convert::optional_position(after, "after")?.unwrap_or(0);
        let inner = guard(|| self.inner.subscribe(&query, core::Position(after)).map_err(crate::errors::to_py))?;
        Ok(Subscription::new(inner, after))
    }

    /// Answers every queued append, flushes, ends every subscription and releases the lock.
    /// Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Marked first: whatever close answers, the store is released and must not warn later.
        self.closed.store(true, Ordering::Release);
        let store = &self.inner;
        detached(py, move || store.close())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.inner.path().display().to_string())
    }
}
