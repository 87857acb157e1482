//! Arrow export: columns built in Rust straight from zero-copy event views and handed over
//! through the Arrow C stream interface (a PyCapsule named `arrow_array_stream`).
//!
//! The columns are plain vectors filled in one pass and wrapped as Arrow arrays without a copy
//! (no builders: their per-value null bookkeeping and growth cost more than the copy itself).
//! `type` is dictionary-encoded (a store has few event types); `data` is `large_binary`, since
//! one event alone may hold more than the 2 GiB that `binary`'s 32-bit offsets can address.
//!
//! A batch ends at `max_rows` rows or once adding the next event would pass the byte budget
//! (type, tag and data bytes together): that keeps `to_arrow_batches()` in bounded memory and
//! every 32-bit offset (tags, the type dictionary) far from overflow. The budget is checked per
//! event, before the event is added; an event that does not fit waits for the next batch.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, LargeBinaryArray, ListArray, RecordBatch, RecordBatchReader,
    StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use lapilli_core as core;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::huge::Bytes;
use crate::read::ReadState;

/// Rows per Arrow batch by default: large enough to amortise the crossing, small enough that a
/// batch being built stays in cache (measured: 16K rows of 256-byte events beat 64K by 2x).
pub const DEFAULT_BATCH_ROWS: usize = 16384;
/// The byte budget of one batch by default. 64 MiB holds a full default batch of events up to
/// 4 KiB, and keeps a streamed read of a store larger than memory at a few such batches.
const DEFAULT_BATCH_BYTES: usize = 64 << 20;
/// The largest budget the test knob accepts: with one event of at most ~300 KB of type and
/// tags past it, the 32-bit offsets of the tag and type columns stay below 2 GiB.
const MAX_BATCH_BYTES: usize = 1 << 30;

static BATCH_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_BATCH_BYTES);
/// Test knob: the next batch built panics (to prove a panic there is an exception, not an
/// abort of the interpreter).
static PANIC_IN_NEXT_BATCH: AtomicBool = AtomicBool::new(false);

/// Sets the per-batch byte budget (tests lower it to a few MiB); returns the previous one.
pub fn set_batch_bytes(bytes: usize) -> PyResult<usize> {
    if bytes == 0 || bytes > MAX_BATCH_BYTES {
        return Err(crate::errors::invalid(format!(
            "batch byte budget is {bytes}; it must be between 1 and {MAX_BATCH_BYTES}"
        )));
    }
    Ok(BATCH_BYTES.swap(bytes, Ordering::Relaxed))
}

pub fn panic_in_next_batch() {
    PANIC_IN_NEXT_BATCH.store(true, Ordering::Relaxed);
}

fn type_field_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

fn tag_field() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Utf8, false))
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("position", DataType::UInt64, false),
        Field::new("type", type_field_type(), false),
        Field::new("tags", DataType::List(tag_field()), false),
        Field::new("data", DataType::LargeBinary, false),
        Field::new("recorded_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ]))
}

/// One batch's columns as plain vectors.
struct Columns {
    position: Vec<u64>,
    recorded_at: Vec<i64>,
    type_keys: Vec<i32>,
    /// The dictionary: distinct types in first-seen order, and their keys.
    type_values: Vec<u8>,
    type_offsets: Vec<i32>,
    type_lookup: HashMap<Box<str>, i32>,
    /// The key of the last type seen: consecutive events mostly share a type, and a compare
    /// is cheaper than a hash.
    last_type: Option<(Box<str>, i32)>,
    tag_list_offsets: Vec<i32>,
    tag_offsets: Vec<i32>,
    tag_bytes: Vec<u8>,
    data_offsets: Vec<i64>,
    data: Bytes,
    max_rows: usize,
    /// Type, tag and data bytes so far, against `budget`.
    bytes: usize,
    budget: usize,
    reserved_data: bool,
}

/// Rows after which the data column is reserved for the rest of the batch, estimated from the
/// events seen so far (one allocation instead of a doubling series and its copies).
const ESTIMATE_AFTER_ROWS: usize = 256;

impl Columns {
    fn new(max_rows: usize, budget: usize) -> Self {
        // Fixed-width columns are reserved for the whole batch at once; pages never written are
        // never faulted in, so a short read pays little for it.
        let rows = max_rows.min(DEFAULT_BATCH_ROWS * 4);
        let mut type_offsets = Vec::with_capacity(16);
        type_offsets.push(0);
        let mut tag_list_offsets = Vec::with_capacity(rows + 1);
        tag_list_offsets.push(0);
        let mut tag_offsets = Vec::with_capacity(rows + 1);
        tag_offsets.push(0);
        let mut data_offsets = Vec::with_capacity(rows + 1);
        data_offsets.push(0);
        Columns {
            position: Vec::with_capacity(rows),
            recorded_at: Vec::with_capacity(rows),
            type_keys: Vec::with_capacity(rows),
            type_values: Vec::new(),
            type_offsets,
            type_lookup: HashMap::new(),
            last_type: None,
            tag_list_offsets,
            tag_offsets,
            tag_bytes: Vec::with_capacity(rows * 16),
            data_offsets,
            data: Bytes::Small(Vec::new()),
            max_rows,
            bytes: 0,
            budget,
            reserved_data: false,
        }
    }

    fn rows(&self) -> usize {
        self.position.len()
    }

    fn full(&self) -> bool {
        self.rows() >= self.max_rows || self.bytes >= self.budget
    }

    /// Whether an event of `bytes` may join this batch: always as a batch's first event (a
    /// batch holds at least one), else only within the budget.
    fn fits(&self, bytes: usize) -> bool {
        self.rows() == 0 || self.bytes.saturating_add(bytes) <= self.budget
    }

    fn type_key(&mut self, event_type: &str) -> i32 {
        if let Some((last, key)) = &self.last_type {
            if **last == *event_type {
                return *key;
            }
        }
        let key = match self.type_lookup.get(event_type) {
            Some(key) => *key,
            None => {
                let key = self.type_lookup.len() as i32;
                self.type_values.extend_from_slice(event_type.as_bytes());
                self.type_offsets.push(self.type_values.len() as i32);
                self.type_lookup.insert(event_type.into(), key);
                key
            }
        };
        self.last_type = Some((event_type.into(), key));
        key
    }

    fn push<'a>(
        &mut self,
        position: u64,
        recorded_at: u64,
        event_type: &str,
        tags: impl Iterator<Item = &'a str>,
        data: &[u8],
        bytes: usize,
    ) {
        self.position.push(position);
        self.recorded_at.push(recorded_at as i64);
        let key = self.type_key(event_type);
        self.type_keys.push(key);
        for tag in tags {
            self.tag_bytes.extend_from_slice(tag.as_bytes());
            self.tag_offsets.push(self.tag_bytes.len() as i32);
        }
        self.tag_list_offsets.push((self.tag_offsets.len() - 1) as i32);
        if !self.reserved_data && self.rows() == ESTIMATE_AFTER_ROWS {
            self.reserve_data();
        }
        self.data.extend_from_slice(data);
        self.data_offsets.push(self.data.len() as i64);
        self.bytes += bytes;
    }

    fn reserve_data(&mut self) {
        self.reserved_data = true;
        let rows = self.rows();
        let average = self.data.len() / rows;
        let rest = average.saturating_mul(self.max_rows - rows.min(self.max_rows));
        let room = self.budget.saturating_sub(self.bytes);
        self.data.reserve(rest.min(room));
    }

    fn push_view(&mut self, view: &core::EventView<'_>) {
        self.push(view.position.get(), view.recorded_at, view.event_type, view.tags(), view.data, view_bytes(view));
    }

    fn push_owned(&mut self, e: &core::SequencedEvent) {
        let bytes = owned_bytes(e);
        self.push(e.position.get(), e.recorded_at, &e.event_type, e.tags.iter().map(String::as_str), &e.data, bytes);
    }

    fn finish(self, schema: SchemaRef) -> Result<RecordBatch, ArrowError> {
        // The offsets are built ascending from zero and the strings are copied from `&str`s
        // whole, so the `try_new`s below only re-check what holds by construction; their cost
        // is one pass over the offsets.
        let type_values = StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.type_offsets)),
            Buffer::from_vec(self.type_values),
            None,
        )?;
        let types = DictionaryArray::<Int32Type>::try_new(Int32Array::from(self.type_keys), Arc::new(type_values))?;
        // SAFETY: every tag was appended whole from a `&str`, its end offset pushed after it, so
        // the bytes are valid UTF-8 and every offset falls on a character boundary.
        let tag_values = unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new(ScalarBuffer::from(self.tag_offsets)),
                Buffer::from_vec(self.tag_bytes),
                None,
            )
        };
        let tags = ListArray::try_new(
            tag_field(),
            OffsetBuffer::new(ScalarBuffer::from(self.tag_list_offsets)),
            Arc::new(tag_values),
            None,
        )?;
        let data = LargeBinaryArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.data_offsets)),
            self.data.into_buffer(),
            None,
        )?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(self.position)),
            Arc::new(types),
            Arc::new(tags),
            Arc::new(data),
            Arc::new(TimestampMicrosecondArray::from(self.recorded_at).with_timezone("UTC")),
        ];
        RecordBatch::try_new(schema, columns)
    }
}

/// What an event counts against the byte budget.
fn view_bytes(view: &core::EventView<'_>) -> usize {
    view.event_type.len() + view.tags().map(str::len).sum::<usize>() + view.data.len()
}

fn owned_bytes(e: &core::SequencedEvent) -> usize {
    e.event_type.len() + e.tags.iter().map(String::len).sum::<usize>() + e.data.len()
}

/// Builds the next batch from the read's state: buffered events first, then the engine. An
/// event that would pass the byte budget goes back to the front of the buffer for the next
/// batch (the only copy this path makes of an event, once per batch at most).
pub fn next_batch(state: &mut ReadState, max_rows: usize, schema: &SchemaRef) -> Result<Option<RecordBatch>, ArrowError> {
    if PANIC_IN_NEXT_BATCH.swap(false, Ordering::Relaxed) {
        panic!("test knob: a panic while building an Arrow batch");
    }
    let mut columns = Columns::new(max_rows, BATCH_BYTES.load(Ordering::Relaxed));
    while !columns.full() {
        let Some(e) = state.buffer.front() else { break };
        if !columns.fits(owned_bytes(e)) {
            break;
        }
        columns.push_owned(e);
        state.buffer.pop_front();
    }
    let mut left_over = None;
    while state.buffer.is_empty() && !columns.full() {
        // One event per call: the budget is checked against each event before it is added,
        // and a call costs a few nanoseconds against the copy of the event itself.
        let seen = state
            .inner
            .visit(1, |view| {
                if columns.fits(view_bytes(view)) {
                    columns.push_view(view);
                } else {
                    left_over = Some(view.to_owned_event());
                }
            })
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        if let Some(event) = left_over.take() {
            state.buffer.push_front(event);
            break;
        }
        if seen == 0 {
            break;
        }
    }
    if columns.rows() == 0 {
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

impl Reader {
    fn next_guarded(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        // Called by the consumer (pyarrow, polars, DuckDB) through an `extern "C"` callback: a
        // panic unwinding out of it would abort the interpreter, so it stops here and becomes
        // the stream's error, which the consumer raises as an exception.
        let state = &self.state;
        let (max_rows, schema) = (self.max_rows, &self.schema);
        catch_unwind(AssertUnwindSafe(|| {
            // Possibly called while the consumer holds the interpreter; the lock's holders
            // never wait for the interpreter while holding it.
            let mut state = crate::blocking::lock(state);
            next_batch(&mut state, max_rows, schema)
        }))
        .unwrap_or_else(|payload| {
            Err(ArrowError::ExternalError(crate::errors::panic_message(payload.as_ref()).into()))
        })
    }
}

impl Iterator for Reader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_guarded() {
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
