//! The JVM face of Lapilli: a thin UniFFI facade over `lapilli-core`.
//!
//! Everything here is plumbing: types that UniFFI can carry, and one error type that carries
//! the core's `ErrorKind` code, message and position. The Kotlin layer in `src/main/kotlin`
//! (package `dev.lapilli`) is what users import; it maps the error to the sealed
//! `LapilliException` hierarchy in one place (`Errors.kt`) and builds `Sequence`, `Flow`,
//! `use {}` and suspend functions on the pull API below. No engine logic lives here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapilli_core as core;

uniffi::setup_scaffolding!();

/// Every failure, as the core reports it: `code` is `ErrorKind::code()` (`"CONFLICT"`, ...),
/// `position` the first conflicting event where the core knows it.
#[derive(Debug, uniffi::Error)]
pub enum FfiError {
    Failure { code: String, detail: String, position: Option<u64> },
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let FfiError::Failure { code, detail, .. } = self;
        write!(f, "{code}: {detail}")
    }
}

impl std::error::Error for FfiError {}

impl From<core::Error> for FfiError {
    fn from(err: core::Error) -> Self {
        FfiError::Failure {
            code: err.kind().code().to_string(),
            detail: err.message().to_string(),
            position: err.position().map(core::Position::get),
        }
    }
}

fn invalid(detail: String) -> FfiError {
    core::Error::new(core::ErrorKind::InvalidArgument, detail).into()
}

type FfiResult<T> = Result<T, FfiError>;

#[derive(uniffi::Record)]
pub struct FfiOptions {
    /// `"fsync"` or `"buffered"`; checked by the core.
    pub durability: String,
    pub segment_size: u64,
    pub max_event_bytes: u64,
}

#[derive(uniffi::Record)]
pub struct FfiEvent {
    pub event_type: String,
    pub tags: Vec<String>,
    pub data: Vec<u8>,
}

#[derive(uniffi::Record)]
pub struct FfiSequencedEvent {
    pub position: u64,
    pub recorded_at: u64,
    pub event_type: String,
    pub tags: Vec<String>,
    pub data: Vec<u8>,
}

#[derive(uniffi::Record)]
pub struct FfiQueryItem {
    pub types: Vec<String>,
    pub tags: Vec<String>,
}

#[derive(uniffi::Enum)]
pub enum FfiQuery {
    All,
    Items { items: Vec<FfiQueryItem> },
}

#[derive(uniffi::Record)]
pub struct FfiCondition {
    pub fail_if_events_match: FfiQuery,
    pub after: Option<u64>,
    pub fail_if_exists: Option<FfiQuery>,
}

#[derive(uniffi::Record)]
pub struct FfiAppendResult {
    pub first: u64,
    pub last: u64,
}

#[derive(uniffi::Record)]
pub struct FfiReadOptions {
    pub after: u64,
    pub until: Option<u64>,
    pub limit: Option<u64>,
    pub backwards: bool,
}

impl From<FfiQuery> for core::Query {
    fn from(query: FfiQuery) -> Self {
        match query {
            FfiQuery::All => core::Query::All,
            FfiQuery::Items { items } => core::Query::Items(
                items.into_iter().map(|i| core::QueryItem { types: i.types, tags: i.tags }).collect(),
            ),
        }
    }
}

fn events_in(events: Vec<FfiEvent>) -> Vec<core::Event> {
    events
        .into_iter()
        .map(|e| core::Event { event_type: e.event_type, tags: e.tags, data: e.data })
        .collect()
}

fn condition_in(condition: Option<FfiCondition>) -> Option<core::AppendCondition> {
    condition.map(|c| core::AppendCondition {
        fail_if_events_match: c.fail_if_events_match.into(),
        after: c.after.map(core::Position),
        fail_if_exists: c.fail_if_exists.map(Into::into),
    })
}

fn appended(result: core::AppendResult) -> FfiAppendResult {
    FfiAppendResult { first: result.first.get(), last: result.last.get() }
}

fn sequenced(event: core::SequencedEvent) -> FfiSequencedEvent {
    FfiSequencedEvent {
        position: event.position.get(),
        recorded_at: event.recorded_at,
        event_type: event.event_type,
        tags: event.tags,
        data: event.data,
    }
}

/// An open store. `close` is renamed `closeStore` for Kotlin (`uniffi.toml`), because UniFFI's
/// own `close()` (from `AutoCloseable`) releases the handle.
#[derive(uniffi::Object)]
pub struct FfiStore {
    inner: core::Store,
}

#[uniffi::export]
impl FfiStore {
    #[uniffi::constructor]
    pub fn open(path: String, options: FfiOptions) -> FfiResult<Arc<Self>> {
        let durability = options.durability.parse::<core::Durability>()?;
        let max_event_bytes = usize::try_from(options.max_event_bytes)
            .map_err(|_| invalid(format!("max_event_bytes is {}; too large", options.max_event_bytes)))?;
        let options =
            core::Options { durability, segment_size: options.segment_size, max_event_bytes, ..core::Options::default() };
        Ok(Arc::new(FfiStore { inner: core::Store::open(path, options)? }))
    }

    #[uniffi::constructor]
    pub fn open_read_only(path: String) -> FfiResult<Arc<Self>> {
        Ok(Arc::new(FfiStore { inner: core::Store::open_read_only(path)? }))
    }

    pub fn head(&self) -> FfiResult<u64> {
        Ok(self.inner.head()?.get())
    }

    /// Blocks until the batch is committed.
    pub fn append(&self, events: Vec<FfiEvent>, condition: Option<FfiCondition>) -> FfiResult<FfiAppendResult> {
        Ok(appended(self.inner.append(events_in(events), condition_in(condition))?))
    }

    /// Hands the append to the writer at once and completes when it is committed, so that many
    /// coroutines' appends share one group commit. Dropping the future (a cancelled coroutine)
    /// does not undo or corrupt anything: the submitted append is committed or refused whole.
    pub async fn append_async(
        &self,
        events: Vec<FfiEvent>,
        condition: Option<FfiCondition>,
    ) -> FfiResult<FfiAppendResult> {
        let pending = self.inner.submit(events_in(events), condition_in(condition));
        Ok(appended(pending.await?))
    }

    pub fn read(&self, query: FfiQuery, options: FfiReadOptions) -> FfiResult<Arc<FfiReadResult>> {
        let options = core::ReadOptions {
            after: core::Position(options.after),
            until: options.until.map(core::Position),
            limit: options.limit,
            backwards: options.backwards,
        };
        let result = self.inner.read(&query.into(), options)?;
        Ok(Arc::new(FfiReadResult { head: result.head().get(), inner: Mutex::new(result) }))
    }

    pub fn subscribe(&self, query: FfiQuery, after: u64) -> FfiResult<Arc<FfiSubscription>> {
        let inner = self.inner.subscribe(&query.into(), core::Position(after))?;
        Ok(Arc::new(FfiSubscription { inner }))
    }

    /// How many group commits (one write, and with fsync durability one fsync, each) this
    /// handle has made: for tests that show concurrent appends share commits.
    pub fn group_commits(&self) -> u64 {
        self.inner.group_commits()
    }

    /// Answers queued appends, ends subscriptions, releases the lock. Idempotent.
    pub fn close(&self) -> FfiResult<()> {
        Ok(self.inner.close()?)
    }
}

/// A read in progress over a pinned snapshot, taken in batches.
#[derive(uniffi::Object)]
pub struct FfiReadResult {
    head: u64,
    inner: Mutex<core::ReadResult>,
}

#[uniffi::export]
impl FfiReadResult {
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Up to `max` further events; an empty list means the read is exhausted.
    pub fn next_batch(&self, max: u32) -> FfiResult<Vec<FfiSequencedEvent>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity((max as usize).min(4096));
        inner.visit(max as usize, |view| out.push(sequenced(view.to_owned_event())))?;
        Ok(out)
    }
}

/// A live feed; `close` (renamed `closeSubscription` for Kotlin) may be called from any thread
/// and wakes a consumer blocked in `next_batch`.
#[derive(uniffi::Object)]
pub struct FfiSubscription {
    inner: core::Subscription,
}

#[uniffi::export]
impl FfiSubscription {
    /// `None`: ended. `Some(empty)`: the timeout passed. `timeout_ms = None` waits as long as
    /// it takes.
    pub fn next_batch(&self, max: u32, timeout_ms: Option<u64>) -> FfiResult<Option<Vec<FfiSequencedEvent>>> {
        if max == 0 {
            return Err(invalid("max is 0; a batch holds at least one event".to_string()));
        }
        // A timeout too long to add to the clock means "wait as long as it takes".
        let timeout = timeout_ms
            .map(Duration::from_millis)
            .filter(|t| std::time::Instant::now().checked_add(*t).is_some());
        let batch = self.inner.next_batch(max as usize, timeout)?;
        Ok(batch.map(|events| events.into_iter().map(sequenced).collect()))
    }

    pub fn caught_up(&self) -> bool {
        self.inner.caught_up()
    }

    pub fn position(&self) -> u64 {
        self.inner.position().get()
    }

    /// True once the subscription or its store was closed: `next_batch` then answers `None`.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    pub fn close(&self) {
        self.inner.close()
    }
}
