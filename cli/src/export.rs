//! `export`: JSON lines, Parquet or an Arrow IPC file, with a progress bar by position.
//!
//! Columnar files get one column per field: `position` (uint64), `recorded_at` (timestamp in
//! microseconds, UTC), `type` (dictionary-encoded string), `tags` (list of strings), `data`
//! (binary). The type dictionary is the store's whole type vocabulary, the same in every batch:
//! an Arrow IPC file may not replace a dictionary between batches.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use lapilli_core::{Query, ReadOptions, SequencedEvent, Store};

use crate::args::{DataFormat, ExportFormat};
use crate::{Failure, Outcome};

/// Rows per record batch (and Parquet row group flush), unless the data reaches
/// `BATCH_DATA_BYTES` first.
const BATCH_ROWS: usize = 64 * 1024;
const BATCH_DATA_BYTES: usize = 64 << 20;

pub fn export(store: &Store, format: ExportFormat, out: &Path, query: &Query, options: ReadOptions) -> Outcome {
    let mut read = store.read(query, options)?;
    let head = read.head().get();
    let low = options.after.get();
    let high = options.until.map_or(head, |u| u.get().min(head));
    let bar = indicatif::ProgressBar::new(high.saturating_sub(low));
    bar.set_style(
        indicatif::ProgressStyle::with_template("exporting {bar:40} {pos}/{len} positions {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let cannot = |e: &dyn std::fmt::Display| Failure::Failed(format!("cannot write {}: {e}", out.display()));
    let file = File::create(out).map_err(|e| cannot(&e))?;
    let progress = |event: &SequencedEvent| {
        let done = if options.backwards { high - event.position.get() + 1 } else { event.position.get() - low };
        bar.set_position(done);
    };
    let mut sink: Box<dyn Sink> = match format {
        ExportFormat::Jsonl => Box::new(JsonLines(BufWriter::with_capacity(1 << 20, file))),
        // Taken after the read pinned its head: every type the read can meet is in it.
        ExportFormat::Parquet | ExportFormat::Arrow => {
            let types: Vec<String> = store.types()?.into_iter().map(|(name, _)| name).collect();
            Box::new(Columnar::new(file, format, types).map_err(|e| cannot(&e))?)
        }
    };
    let mut exported = 0u64;
    loop {
        let batch = read.next_batch(4096)?;
        if batch.is_empty() {
            break;
        }
        for event in &batch {
            sink.add(event).map_err(|e| cannot(&e))?;
        }
        exported += batch.len() as u64;
        progress(batch.last().expect("not empty"));
    }
    sink.finish().map_err(|e| cannot(&e))?;
    bar.finish_and_clear();
    eprintln!("exported {exported} events to {}", out.display());
    Ok(())
}

type SinkResult = Result<(), Box<dyn std::error::Error>>;

trait Sink {
    fn add(&mut self, event: &SequencedEvent) -> SinkResult;
    fn finish(self: Box<Self>) -> SinkResult;
}

struct JsonLines(BufWriter<File>);

impl Sink for JsonLines {
    fn add(&mut self, event: &SequencedEvent) -> SinkResult {
        serde_json::to_writer(&mut self.0, &crate::render::event_json(event, DataFormat::Auto))?;
        self.0.write_all(b"\n")?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> SinkResult {
        self.0.flush()?;
        self.0.get_ref().sync_all()?;
        Ok(())
    }
}

enum Writer {
    Parquet(parquet::arrow::ArrowWriter<File>),
    Arrow(arrow_ipc::writer::FileWriter<File>),
}

struct Columnar {
    writer: Writer,
    schema: Arc<Schema>,
    /// The dictionary of the `type` column: the store's types, by name.
    types: Arc<StringArray>,
    type_keys: std::collections::HashMap<String, i32>,
    positions: Vec<u64>,
    recorded_at: Vec<i64>,
    keys: Vec<i32>,
    tags: ListBuilder<StringBuilder>,
    data: BinaryBuilder,
    data_bytes: usize,
}

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("position", DataType::UInt64, false),
        Field::new("recorded_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new("type", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), false),
        Field::new("tags", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), false),
        Field::new("data", DataType::Binary, false),
    ])
}

impl Columnar {
    fn new(file: File, format: ExportFormat, types: Vec<String>) -> Result<Columnar, Box<dyn std::error::Error>> {
        let schema = Arc::new(schema());
        let writer = match format {
            ExportFormat::Parquet => Writer::Parquet(parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)?),
            _ => Writer::Arrow(arrow_ipc::writer::FileWriter::try_new(file, &schema)?),
        };
        let type_keys = types.iter().enumerate().map(|(i, name)| (name.clone(), i as i32)).collect();
        Ok(Columnar {
            writer,
            schema,
            types: Arc::new(StringArray::from(types)),
            type_keys,
            positions: Vec::new(),
            recorded_at: Vec::new(),
            keys: Vec::new(),
            tags: ListBuilder::new(StringBuilder::new()),
            data: BinaryBuilder::new(),
            data_bytes: 0,
        })
    }

    fn flush(&mut self) -> SinkResult {
        if self.positions.is_empty() {
            return Ok(());
        }
        let keys = Int32Array::from(std::mem::take(&mut self.keys));
        let types = DictionaryArray::<Int32Type>::try_new(keys, self.types.clone())?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(std::mem::take(&mut self.positions))),
            Arc::new(TimestampMicrosecondArray::from(std::mem::take(&mut self.recorded_at)).with_timezone("UTC")),
            Arc::new(types),
            Arc::new(self.tags.finish()),
            Arc::new(self.data.finish()),
        ];
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        match &mut self.writer {
            Writer::Parquet(writer) => writer.write(&batch)?,
            Writer::Arrow(writer) => writer.write(&batch)?,
        }
        self.data_bytes = 0;
        Ok(())
    }
}

impl Sink for Columnar {
    fn add(&mut self, event: &SequencedEvent) -> SinkResult {
        let key = *self
            .type_keys
            .get(&event.event_type)
            .ok_or_else(|| format!("type {:?} at position {} is missing from the index's types", event.event_type, event.position))?;
        self.positions.push(event.position.get());
        self.recorded_at.push(event.recorded_at as i64);
        self.keys.push(key);
        for tag in &event.tags {
            self.tags.values().append_value(tag);
        }
        self.tags.append(true);
        self.data.append_value(&event.data);
        self.data_bytes += event.data.len();
        if self.positions.len() >= BATCH_ROWS || self.data_bytes >= BATCH_DATA_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> SinkResult {
        self.flush()?;
        match self.writer {
            Writer::Parquet(writer) => {
                let file = writer.into_inner()?;
                file.sync_all()?;
            }
            Writer::Arrow(mut writer) => {
                writer.finish()?;
                writer.into_inner()?.sync_all()?;
            }
        }
        Ok(())
    }
}
