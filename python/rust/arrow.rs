//! Arrow export: columns built in Rust straight from zero-copy event views and handed over
//! through the Arrow C stream interface (a PyCapsule named `arrow_array_stream`).

use std::sync::{Arc, Mutex};

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder, UInt64Builder};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::read::ReadState;

/// Rows per Arrow batch by default: large enough to amortise the crossing, small enough that a
/// batch being built stays in cache (measured: 16K rows of 256-byte events beat 64K by 2x).
pub const DEFAULT_BATCH_ROWS: usize = 16384;
/// A batch also ends once its data column passes this many bytes (binary offsets are i32).
const MAX_BATCH_DATA_BYTES: usize = 512 << 20;
/// Events visited per engine call while filling a batch.
const VISIT_CHUNK: usize = 1024;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("position", DataType::UInt64, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("tags", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false),
        Field::new("data", DataType::Binary, false),
        Field::new("recorded_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ]))
}

struct Columns {
    position: UInt64Builder,
    event_type: StringBuilder,
    tags: ListBuilder<StringBuilder>,
    data: BinaryBuilder,
    recorded_at: TimestampMicrosecondBuilder,
    rows: usize,
    data_bytes: usize,
}

impl Columns {
    fn new() -> Self {
        Columns {
            position: UInt64Builder::new(),
            event_type: StringBuilder::new(),
            tags: ListBuilder::new(StringBuilder::new())
                .with_field(Arc::new(Field::new("item", DataType::Utf8, false))),
            data: BinaryBuilder::new(),
            recorded_at: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            rows: 0,
            data_bytes: 0,
        }
    }

    fn push<'a>(&mut self, position: u64, recorded_at: u64, event_type: &str, tags: impl Iterator<Item = &'a str>, data: &[u8]) {
        self.position.append_value(position);
        self.event_type.append_value(event_type);
        for tag in tags {
            self.tags.values().append_value(tag);
        }
        self.tags.append(true);
        self.data.append_value(data);
        self.recorded_at.append_value(recorded_at as i64);
        self.rows += 1;
        self.data_bytes += data.len();
    }

    fn full(&self, max_rows: usize) -> bool {
        self.rows >= max_rows || self.data_bytes >= MAX_BATCH_DATA_BYTES
    }

    fn finish(mut self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.position.finish()),
            Arc::new(self.event_type.finish()),
            Arc::new(self.tags.finish()),
            Arc::new(self.data.finish()),
            Arc::new(self.recorded_at.finish()),
        ];
        RecordBatch::try_new(schema, columns)
    }
}

/// Builds the next batch from the read's state: buffered events first, then the engine.
pub fn next_batch(state: &mut ReadState, max_rows: usize, schema: &SchemaRef) -> Result<Option<RecordBatch>, ArrowError> {
    let mut columns = Columns::new();
    while !columns.full(max_rows) {
        let Some(e) = state.buffer.pop_front() else { break };
        columns.push(e.position.get(), e.recorded_at, &e.event_type, e.tags.iter().map(String::as_str), &e.data);
    }
    while !columns.full(max_rows) {
        let want = VISIT_CHUNK.min(max_rows - columns.rows);
        let seen = state
            .inner
            .visit(want, |view| {
                columns.push(view.position.get(), view.recorded_at, view.event_type, view.tags(), view.data)
            })
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        if seen < want {
            break;
        }
    }
    if columns.rows == 0 {
        return Ok(None);
    }
    columns.finish(schema.clone()).map(Some)
}

struct Reader {
    state: Arc<Mutex<ReadState>>,
    schema: SchemaRef,
    max_rows: usize,
    done: bool,
}

impl Iterator for Reader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // Called by the consumer (pyarrow, polars) possibly while it holds the interpreter;
        // the lock's holders never wait for the interpreter while holding it.
        let mut state = crate::blocking::lock(&self.state);
        match next_batch(&mut state, self.max_rows, &self.schema) {
            Ok(Some(batch)) => Some(Ok(batch)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl RecordBatchReader for Reader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// An exporter of a read's remaining events, speaking the Arrow PyCapsule stream protocol.
#[pyclass(frozen, module = "lapilli")]
pub struct ArrowStream {
    state: Arc<Mutex<ReadState>>,
    max_rows: usize,
}

impl ArrowStream {
    pub fn new(state: Arc<Mutex<ReadState>>, max_rows: usize) -> Self {
        ArrowStream { state, max_rows }
    }
}

#[pymethods]
impl ArrowStream {
    /// Exports the stream; `requested_schema` is ignored (the schema is fixed), as the protocol
    /// allows.
    #[pyo3(signature = (requested_schema=None))]
    pub fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = requested_schema;
        let reader = Reader { state: self.state.clone(), schema: schema(), max_rows: self.max_rows, done: false };
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        Ok(PyCapsule::new_with_value(py, stream, c"arrow_array_stream")?.into_any())
    }
}
