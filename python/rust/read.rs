//! `ReadResult`: a lazy, ordered read over a snapshot. Iterating fetches events from the engine
//! in batches; `to_arrow()` and friends build Arrow columns in Rust from zero-copy views.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use lapilli_core as core;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrow::ArrowStream;
use crate::blocking::{detached, lock};
use crate::values::SequencedEvent;

/// Events taken from the engine per crossing when iterating.
const ITER_BATCH: usize = 1024;

pub struct ReadState {
    pub inner: core::ReadResult,
    /// Fetched but not yet handed to Python (iteration), drained first by every consumer.
    pub buffer: VecDeque<core::SequencedEvent>,
}

/// The answer to `Store.read`. Iterate it (once), or take everything with `to_list()`,
/// `to_arrow()`, `to_pandas()`, `to_polars()` or `to_arrow_batches()`; each continues where the
/// previous consumer stopped. `head` is the store head pinned when the read began.
#[pyclass(frozen, module = "lapilli")]
pub struct ReadResult {
    #[pyo3(get)]
    head: u64,
    state: Arc<Mutex<ReadState>>,
}

impl ReadResult {
    pub fn new(inner: core::ReadResult) -> Self {
        ReadResult {
            head: inner.head().get(),
            state: Arc::new(Mutex::new(ReadState { inner, buffer: VecDeque::new() })),
        }
    }
}

fn import_or_explain<'py>(py: Python<'py>, module: &str, method: &str, extra: &str) -> PyResult<Bound<'py, PyModule>> {
    py.import(module).map_err(|e| {
        pyo3::exceptions::PyImportError::new_err(format!(
            "{method} needs {module}, which is not installed: pip install 'lapilli[{extra}]' ({e})"
        ))
    })
}

#[pymethods]
impl ReadResult {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<SequencedEvent>> {
        if let Ok(mut state) = self.state.try_lock() {
            if let Some(event) = state.buffer.pop_front() {
                return Ok(Some(SequencedEvent { inner: event }));
            }
        }
        let state = &self.state;
        let event = detached(py, || {
            let mut state = lock(state);
            if state.buffer.is_empty() {
                let batch = state.inner.next_batch(ITER_BATCH)?;
                state.buffer.extend(batch);
            }
            Ok(state.buffer.pop_front())
        })?;
        Ok(event.map(|inner| SequencedEvent { inner }))
    }

    /// Up to `max` further events; an empty list when the read is exhausted.
    #[pyo3(signature = (max=1024))]
    fn next_batch<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        let state = &self.state;
        let events = detached(py, || {
            let mut state = lock(state);
            let mut out: Vec<core::SequencedEvent> = Vec::new();
            while out.len() < max {
                match state.buffer.pop_front() {
                    Some(e) => out.push(e),
                    None => break,
                }
            }
            if out.len() < max {
                out.extend(state.inner.next_batch(max - out.len())?);
            }
            Ok(out)
        })?;
        PyList::new(py, events.into_iter().map(|inner| SequencedEvent { inner }))
    }

    /// Every remaining event, as a list.
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let state = &self.state;
        let events = detached(py, || {
            let mut state = lock(state);
            let mut out: Vec<core::SequencedEvent> = state.buffer.drain(..).collect();
            state.inner.visit(usize::MAX, |view| out.push(view.to_owned_event()))?;
            Ok(out)
        })?;
        PyList::new(py, events.into_iter().map(|inner| SequencedEvent { inner }))
    }

    /// The remaining events as an Arrow C stream (the Arrow PyCapsule interface), so
    /// `pyarrow.table(result)` or `polars.DataFrame(result)` take the columns without a Python
    /// object per event.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        ArrowStream::new(self.state.clone(), crate::arrow::DEFAULT_BATCH_ROWS).__arrow_c_stream__(py, requested_schema)
    }

    /// The remaining events as a `pyarrow.Table` (columns position, type, tags, data,
    /// recorded_at).
    fn to_arrow<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_arrow_batches(py, crate::arrow::DEFAULT_BATCH_ROWS)?.call_method0("read_all")
    }

    /// The remaining events as a streaming `pyarrow.RecordBatchReader` of at most `batch_rows`
    /// rows per batch, for reads larger than memory.
    #[pyo3(signature = (batch_rows=16384))]
    fn to_arrow_batches<'py>(&self, py: Python<'py>, batch_rows: usize) -> PyResult<Bound<'py, PyAny>> {
        if batch_rows == 0 {
            return Err(crate::errors::invalid("batch_rows is 0; a batch holds at least one row"));
        }
        let pyarrow = import_or_explain(py, "pyarrow", "to_arrow()", "arrow")?;
        let stream = Bound::new(py, ArrowStream::new(self.state.clone(), batch_rows))?;
        pyarrow.getattr("RecordBatchReader")?.call_method1("from_stream", (stream,))
    }

    /// The remaining events as a `pandas.DataFrame` (through pyarrow).
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        import_or_explain(py, "pandas", "to_pandas()", "pandas")?;
        import_or_explain(py, "pyarrow", "to_pandas()", "pandas")?;
        self.to_arrow(py)?.call_method0("to_pandas")
    }

    /// The remaining events as a `polars.DataFrame` (through the Arrow C stream; no pyarrow
    /// needed).
    fn to_polars<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let polars = import_or_explain(py, "polars", "to_polars()", "polars")?;
        let stream = Bound::new(py, ArrowStream::new(self.state.clone(), crate::arrow::DEFAULT_BATCH_ROWS))?;
        polars.getattr("DataFrame")?.call1((stream,))
    }

    fn __repr__(&self) -> String {
        format!("ReadResult(head={})", self.head)
    }
}
