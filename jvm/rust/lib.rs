//! The JVM face of Lapilli: a thin UniFFI facade over `lapilli-core`.
//!
//! Everything here is plumbing: types that UniFFI can carry, and one error type that carries
//! the core's `ErrorKind` code, message and position. The Kotlin layer in `src/main/kotlin`
//! (package `dev.lapilli`) is what users import; it maps the error to the sealed
//! `LapilliException` hierarchy in one place (`Errors.kt`) and builds `Sequence`, `Flow`,
//! `use {}` and suspend functions on the pull API below. No engine logic lives here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, RwLock, Weak};
use std::time::Duration;

use lapilli_core as core;

uniffi::setup_scaffolding!();

/// Every failure, one variant per `ErrorKind` (the Kotlin layer maps each to its
/// `LapilliException` subclass in `Errors.kt`). `position`: the first conflicting event, where
/// the core knows it.
#[derive(Debug, uniffi::Error)]
pub enum FfiError {
    Conflict { detail: String, position: Option<u64> },
    AlreadyExists { detail: String, position: Option<u64> },
    InvalidArgument { detail: String },
    StoreLocked { detail: String },
    Closed { detail: String },
    ReadOnly { detail: String },
    Corruption { detail: String },
    Io { detail: String },
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FfiError::Conflict { detail, .. }
            | FfiError::AlreadyExists { detail, .. }
            | FfiError::InvalidArgument { detail }
            | FfiError::StoreLocked { detail }
            | FfiError::Closed { detail }
            | FfiError::ReadOnly { detail }
            | FfiError::Corruption { detail }
            | FfiError::Io { detail } => f.write_str(detail),
        }
    }
}

impl std::error::Error for FfiError {}

impl From<core::Error> for FfiError {
    fn from(err: core::Error) -> Self {
        let detail = err.message().to_string();
        let position = err.position().map(core::Position::get);
        match err.kind() {
            core::ErrorKind::Conflict => FfiError::Conflict { detail, position },
            core::ErrorKind::AlreadyExists => FfiError::AlreadyExists { detail, position },
            core::ErrorKind::InvalidArgument => FfiError::InvalidArgument { detail },
            core::ErrorKind::StoreLocked => FfiError::StoreLocked { detail },
            core::ErrorKind::Closed => FfiError::Closed { detail },
            core::ErrorKind::ReadOnly => FfiError::ReadOnly { detail },
            core::ErrorKind::Corruption => FfiError::Corruption { detail },
            core::ErrorKind::Io => FfiError::Io { detail },
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

/// `Store.stats()` (the Kotlin layer maps it to `dev.lapilli.Stats`).
#[derive(uniffi::Record)]
pub struct FfiStats {
    pub head: u64,
    pub events_appended: u64,
    pub bytes_appended: u64,
    pub group_commits: u64,
    pub events_per_commit_mean: f64,
    pub events_per_commit_max: u64,
    pub fsyncs: u64,
    pub fsync_p50_micros: u64,
    pub fsync_p99_micros: u64,
    pub fsync_max_micros: u64,
    pub queue_depth: u64,
    pub queue_depth_max: u64,
    pub segments: u64,
    pub index_bytes: u64,
    pub subscriptions: u64,
    pub follower_lag_positions: Option<u64>,
    pub follower_lag_millis: Option<u64>,
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

// ---- Appends: one packed request, one native call -------------------------------------------
//
// UniFFI lowers a `Vec`/record argument into a RustBuffer it allocates with a native call of
// its own (and frees with another), so an append of records was four or five crossings. An
// append instead passes the address and length of a buffer the Kotlin layer wrote in native
// memory (`Packing.kt`), as two integers: one crossing. The layout (little-endian), which
// `Packing.kt` writes and `decode_append` reads:
//
//   u8 has_condition; [query fail_if_events_match; u8 has_after; [u64 after];
//                      u8 has_exists; [query fail_if_exists]]
//   u32 event_count; per event: str type; u32 tag_count, str tag...; u32 data_len, data
//   query: u8 kind (0 all, 1 items); [u32 item_count; per item: u32 n, str type...;
//          u32 n, str tag...]
//   str: u32 byte_len, UTF-8 bytes

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> FfiResult<&'a [u8]> {
        let end = self.at.checked_add(len).filter(|&end| end <= self.bytes.len()).ok_or_else(|| {
            invalid(format!("packed request is cut short at byte {} of {}", self.at, self.bytes.len()))
        })?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> FfiResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> FfiResult<usize> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize)
    }

    fn u64(&mut self) -> FfiResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn string(&mut self) -> FfiResult<String> {
        let len = self.u32()?;
        let at = self.at;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| invalid(format!("packed request: the string at byte {at} is not UTF-8")))
    }

    fn strings(&mut self) -> FfiResult<Vec<String>> {
        let count = self.u32()?;
        // A count can claim more than the buffer holds; never reserve more than is there.
        let mut out = Vec::with_capacity(count.min(self.bytes.len() - self.at));
        for _ in 0..count {
            out.push(self.string()?);
        }
        Ok(out)
    }

    fn query(&mut self) -> FfiResult<core::Query> {
        Ok(match self.u8()? {
            0 => core::Query::All,
            _ => {
                let count = self.u32()?;
                let mut items = Vec::with_capacity(count.min(self.bytes.len() - self.at));
                for _ in 0..count {
                    let types = self.strings()?;
                    let tags = self.strings()?;
                    items.push(core::QueryItem { types, tags });
                }
                core::Query::Items(items)
            }
        })
    }
}

fn decode_append(bytes: &[u8]) -> FfiResult<(Vec<core::Event>, Option<core::AppendCondition>)> {
    let mut r = Reader { bytes, at: 0 };
    let condition = match r.u8()? {
        0 => None,
        _ => {
            let fail_if_events_match = r.query()?;
            let after = match r.u8()? {
                0 => None,
                _ => Some(core::Position(r.u64()?)),
            };
            let fail_if_exists = match r.u8()? {
                0 => None,
                _ => Some(r.query()?),
            };
            Some(core::AppendCondition { fail_if_events_match, after, fail_if_exists })
        }
    };
    let count = r.u32()?;
    let mut events = Vec::with_capacity(count.min(bytes.len()));
    for _ in 0..count {
        let event_type = r.string()?;
        let tags = r.strings()?;
        let len = r.u32()?;
        let data = r.take(len)?.to_vec();
        events.push(core::Event { event_type, tags, data });
    }
    if r.at != bytes.len() {
        return Err(invalid(format!("packed append request has {} bytes after its last event", bytes.len() - r.at)));
    }
    Ok((events, condition))
}

/// The bytes at `address`, `len` long.
///
/// # Safety
/// `address` must point to `len` readable bytes that stay unchanged for the whole call: the
/// Kotlin layer passes its own native buffer and does not touch it until the call returns.
unsafe fn request_bytes<'a>(address: u64, len: u64) -> FfiResult<&'a [u8]> {
    if address == 0 || len == 0 {
        return Err(invalid(format!("packed append request at {address:#x} of {len} bytes")));
    }
    // SAFETY: as the caller promises.
    Ok(unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) })
}

// ---- Events out: one packed buffer per batch ------------------------------------------------
//
// A batch crosses as one byte buffer instead of one UniFFI record per event (after the Node
// face's `Batch`), copied by one `memcpy` into native memory the Kotlin layer passes (address and
// capacity, as for appends), not returned as a `Vec<u8>`: UniFFI lowers a `Vec<u8>` into its
// RustBuffer one byte at a time (a quarter of a warm scan's time outside the core in the
// profile), and the RustBuffer costs a JNA structure and a native call to free. A batch longer
// than the capacity stays here (`Outbox`) and its length is answered: the Kotlin layer calls
// again with memory that long and gets that batch (nothing further is read meanwhile). The
// builder's buffers are kept and reused from batch to batch.
//
// Types and tags cross as ids into a string table that lives as long as the read or
// subscription (`StringTable`, kept in its builder): a batch carries only the strings new to
// that table, and the Kotlin layer keeps the same table (id -> String), so each distinct type
// or tag is decoded into a String once per read, not once per batch. The two copies stay in
// step through a token the Kotlin layer passes with every call: the epoch and length of the
// table it holds. The engine packs against its own table only if that is the caller's one (same
// epoch, same length); otherwise (a batch the caller never decoded, a builder lost to an
// error, a table past its bound) it starts a new table under a new epoch, and the batch says so
// (base 0), so the caller drops what it holds. Epochs come from a process-wide counter, so an
// (epoch, length) names one table's contents.
//
// Layout (little-endian), decoded by `Packing.kt`:
//
//   u32 count; u32 strings_at (offset of the new strings); u64 epoch; u32 base
//   per event: u64 position, u64 recorded_at, u32 type, u32 tag_count, u32 tag..., u32 data_len,
//              data bytes
//   new strings at strings_at: u32 string_count; per string: u32 byte_len, UTF-8 bytes; their
//   ids are base, base + 1, ...; base 0 means a new table (the caller drops its old one)
//
// Types and tags are ids in the table (ids below base were sent by earlier batches).

/// A batch's way out: the builder kept for reuse, and a batch too long for the caller's memory.
#[derive(Default)]
struct Outbox {
    spare: Option<BatchBuilder>,
    pending: Option<BatchBuilder>,
}

impl Outbox {
    /// The pending batch, if there is one: copied into `dest` if it fits (then no longer
    /// pending); its length either way.
    ///
    /// # Safety
    /// As `copy_out`.
    unsafe fn take_pending(&mut self, dest: u64, capacity: u64) -> Option<u64> {
        let batch = self.pending.as_ref()?;
        let len = batch.body.len() as u64;
        if len <= capacity {
            // SAFETY: as the caller promises.
            unsafe { copy_out(&batch.body, dest) };
            self.spare = self.pending.take();
        }
        Some(len)
    }

    /// The length of the string table of the builder kept (0 if none is).
    fn strings_held(&self) -> u32 {
        self.pending.as_ref().or(self.spare.as_ref()).map_or(0, |b| b.table.len())
    }

    /// A builder for the next batch, packing against the caller's string table (`epoch`,
    /// `len`: the token the Kotlin layer passed).
    fn builder(&mut self, epoch: u64, len: u32) -> BatchBuilder {
        let mut batch = self.spare.take().unwrap_or_default();
        batch.reset(epoch, len);
        batch
    }

    /// Finishes `batch` and copies it into `dest` if it fits, else keeps it pending; answers its
    /// length.
    ///
    /// # Safety
    /// As `copy_out`.
    unsafe fn deliver(&mut self, mut batch: BatchBuilder, dest: u64, capacity: u64) -> u64 {
        batch.finish();
        let len = batch.body.len() as u64;
        if len <= capacity {
            // SAFETY: as the caller promises.
            unsafe { copy_out(&batch.body, dest) };
            self.spare = Some(batch);
        } else {
            self.pending = Some(batch);
        }
        len
    }
}

/// Copies `bytes` to `dest`.
///
/// # Safety
/// `dest` must point to at least `bytes.len()` writable bytes that nothing else touches during
/// the call: the Kotlin layer passes its own native buffer and reads it only after the call.
unsafe fn copy_out(bytes: &[u8], dest: u64) {
    if bytes.is_empty() {
        return;
    }
    assert!(dest != 0, "a batch of {} bytes for a null buffer", bytes.len());
    // SAFETY: as the caller promises; our own Vec never overlaps the caller's memory.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dest as *mut u8, bytes.len()) };
}

/// The strings a read or subscription has sent across, by id: what the Kotlin layer's table
/// (`StringTable` in `Packing.kt`) holds too, when the two are in step.
struct StringTable {
    ids: std::collections::HashMap<String, u32, std::hash::BuildHasherDefault<FxHasher>>,
    /// UTF-8 bytes of the strings held.
    bytes: usize,
    /// Unique in the process (`NEXT_TABLE_EPOCH`), never 0 (the Kotlin layer's empty table).
    epoch: u64,
}

static NEXT_TABLE_EPOCH: AtomicU64 = AtomicU64::new(1);

impl Default for StringTable {
    fn default() -> Self {
        StringTable {
            ids: Default::default(),
            bytes: 0,
            epoch: NEXT_TABLE_EPOCH.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// A read's string table starts again (before a batch) once it holds more strings than this
/// (a read over millions of distinct tags keeps no more; the types and tags that recur are
/// sent again once, at the restart)...
const TABLE_MAX_STRINGS: usize = 1 << 16;
/// ...or more UTF-8 bytes than this (long tags).
const TABLE_MAX_BYTES: usize = 4 << 20;

impl StringTable {
    fn len(&self) -> u32 {
        self.ids.len() as u32
    }

    /// Empty, under a new epoch (the map's capacity kept).
    fn restart(&mut self) {
        self.ids.clear();
        self.bytes = 0;
        self.epoch = NEXT_TABLE_EPOCH.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct BatchBuilder {
    count: u32,
    body: Vec<u8>,
    /// This batch's new strings, in id order from `base`.
    strings: Vec<u8>,
    base: u32,
    /// The read's (or subscription's) string table: kept with the builder from batch to batch.
    /// A string new to it is allocated once (a `String` per distinct tag per batch was most of
    /// the builder's malloc time in the profile) and sent once.
    table: StringTable,
}

/// The multiply-rotate hash of rustc's `FxHasher`: the string table is looked up once per type
/// and tag of every event, where SipHash's cost showed; nothing here faces untrusted keys that
/// could flood it (the keys are the store's own types and tags).
#[derive(Default)]
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl BatchBuilder {
    /// Empty, keeping its buffers' capacity (the header's 20 bytes reserved), to pack against
    /// the caller's table (`epoch`, `len`): the builder's own table if that is the caller's and
    /// within its bound, else a new one.
    fn reset(&mut self, epoch: u64, len: u32) {
        self.count = 0;
        self.body.clear();
        self.body.extend_from_slice(&[0; 20]);
        self.strings.clear();
        let table = &mut self.table;
        if table.epoch != epoch
            || table.len() != len
            || table.ids.len() > TABLE_MAX_STRINGS
            || table.bytes > TABLE_MAX_BYTES
        {
            table.restart();
        }
        self.base = table.len();
    }

    fn intern(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.table.ids.get(text) {
            return id;
        }
        let id = self.table.len();
        self.table.ids.insert(text.to_owned(), id);
        self.table.bytes += text.len();
        self.strings.extend_from_slice(&(text.len() as u32).to_le_bytes());
        self.strings.extend_from_slice(text.as_bytes());
        id
    }

    fn push(&mut self, view: &core::EventView<'_>) {
        self.push_parts(view.position, view.recorded_at, view.event_type, view.tags(), view.tag_count(), view.data);
    }

    fn push_parts<'t>(
        &mut self,
        position: core::Position,
        recorded_at: u64,
        event_type: &str,
        tags: impl Iterator<Item = &'t str>,
        tag_count: usize,
        data: &[u8],
    ) {
        self.count += 1;
        let type_index = self.intern(event_type);
        self.body.extend_from_slice(&position.get().to_le_bytes());
        self.body.extend_from_slice(&recorded_at.to_le_bytes());
        self.body.extend_from_slice(&type_index.to_le_bytes());
        self.body.extend_from_slice(&(tag_count as u32).to_le_bytes());
        for tag in tags {
            let tag_index = self.intern(tag);
            self.body.extend_from_slice(&tag_index.to_le_bytes());
        }
        self.body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.body.extend_from_slice(data);
    }

    /// Writes the header and appends the new strings: `body` is then the whole batch.
    fn finish(&mut self) {
        let strings_at = self.body.len() as u32;
        self.body[0..4].copy_from_slice(&self.count.to_le_bytes());
        self.body[4..8].copy_from_slice(&strings_at.to_le_bytes());
        self.body[8..16].copy_from_slice(&self.table.epoch.to_le_bytes());
        self.body[16..20].copy_from_slice(&self.base.to_le_bytes());
        self.body.extend_from_slice(&(self.table.len() - self.base).to_le_bytes());
        self.body.extend_from_slice(&self.strings);
    }
}

// ---- Completions: the port the Kotlin completion thread drains -----------------------------
//
// Appends submitted without waiting, and subscriptions waiting for the head to move, register a
// callback with the core (`PendingAppend::on_complete`, `Subscription::on_ready`). The core runs
// it on its completion thread, never the writer; here it only appends a 32-byte record to this
// port. One JVM thread per store (`Completions.kt`) takes everything queued in one call and
// completes the futures and resumes the coroutines: no JNA upcall, no thread per waiter.
//
// Record: u64 kind (0 append done, 1 append failed, 2 subscription ready), u64 token,
//         u64 first, u64 last.

const APPEND_DONE: u64 = 0;
const APPEND_FAILED: u64 = 1;
const SUBSCRIPTION_READY: u64 = 2;

#[derive(Default)]
struct PortState {
    records: Vec<u8>,
    /// The errors of failed appends, fetched by token with `append_error` (so that they cross
    /// as `FfiError`, mapped in one place).
    errors: std::collections::HashMap<u64, core::Error>,
    closed: bool,
}

#[derive(Default)]
struct Port {
    state: Mutex<PortState>,
    filled: Condvar,
}

impl Port {
    fn push(&self, kind: u64, token: u64, first: u64, last: u64, error: Option<core::Error>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.closed && state.records.is_empty() {
            // Nobody will take it: the Kotlin side has failed or resumed every waiter it had
            // when the port closed, and checks for closing after registering new ones.
            return;
        }
        for value in [kind, token, first, last] {
            state.records.extend_from_slice(&value.to_le_bytes());
        }
        if let Some(error) = error {
            state.errors.insert(token, error);
        }
        drop(state);
        self.filled.notify_one();
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.filled.notify_all();
    }
}

// ---- The store registry: an append is one JNA call ------------------------------------------
//
// UniFFI calls a method of an object by first cloning the object's handle (a native call of its
// own) and then calling the method with the clone: two JNA crossings per append. Appends instead
// go through free functions taking the store's id (`store_append_packed`,
// `store_submit_packed`), one crossing each. The registry maps the id to a `Weak` of the store:
// a lookup upgrades it under the read lock, so the `Arc` it answers keeps the store alive for
// the whole call even if the Kotlin side releases its handle meanwhile (no use-after-free); a
// `Weak` so that a store the Kotlin side never closed is still dropped when its handle is freed.
// `close` removes the entry first (later lookups answer `Closed`, like the core's own closed
// store); `Drop` removes it too. Ids are never reused.

static STORES: LazyLock<RwLock<HashMap<u64, Weak<FfiStore>>>> = LazyLock::new(|| RwLock::new(HashMap::new()));
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

fn register(store: FfiStore) -> Arc<FfiStore> {
    let store = Arc::new(store);
    STORES.write().unwrap_or_else(|p| p.into_inner()).insert(store.id, Arc::downgrade(&store));
    store
}

fn unregister(id: u64) {
    STORES.write().unwrap_or_else(|p| p.into_inner()).remove(&id);
}

/// The open store `id`, kept alive by the answer; a closed (or unknown) id is `Closed`.
fn registered(id: u64) -> FfiResult<Arc<FfiStore>> {
    let found = STORES.read().unwrap_or_else(|p| p.into_inner()).get(&id).and_then(Weak::upgrade);
    found.ok_or_else(|| core::Error::new(core::ErrorKind::Closed, "the store is closed".to_string()).into())
}

/// `FfiStore::append_packed` of the store `id` (`FfiStore::id`), in one crossing.
///
/// # Safety (of the caller)
/// As `FfiStore::append_packed`. Reached from the JVM through `lapilli_jvm_append_packed`.
fn store_append_packed(store: u64, address: u64, len: u64) -> FfiResult<u64> {
    registered(store)?.append_packed(address, len)
}

/// `FfiStore::submit_packed` of the store `id`, in one crossing; a closed store is refused here
/// (nothing reaches the port). Reached from the JVM through `lapilli_jvm_submit_packed`.
fn store_submit_packed(store: u64, address: u64, len: u64, token: u64) -> FfiResult<()> {
    registered(store)?.submit_packed(address, len, token);
    Ok(())
}

/// The calls on every append's path, exported as plain C functions for the Kotlin layer's
/// `DirectCalls` (JNA direct mapping, primitive arguments only). A UniFFI call allocates a
/// call-status structure on the JVM side for every crossing (JNA `Memory`, registered with
/// JNA's cleaner and freed by its thread): with 64 appends in flight that bookkeeping was more
/// than half the JVM's own CPU time. These answer a plain number instead: `>= 0` is the
/// result, and a negative number is minus the id of a failure kept in `DIRECT_FAILURES` until
/// the caller takes it at once with `take_direct_error` (a UniFFI call: the failure path keeps
/// the one error mapping). Ids rather than a thread-local slot, because nothing ties a JVM
/// caller to one native thread between two calls. (Ids count from 1 and would need 2^63
/// failures to wrap.)
static DIRECT_FAILURES: LazyLock<Mutex<HashMap<u64, DirectFailure>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static NEXT_DIRECT_FAILURE: AtomicU64 = AtomicU64::new(1);

enum DirectFailure {
    Error(FfiError),
    /// A panic's message: raised again by `take_direct_error`, so that the JVM sees it as it sees
    /// a panic in any UniFFI call (`InternalException`), not as an error kind a caller might retry.
    Panic(String),
}

fn direct_call(call: impl FnOnce() -> FfiResult<u64> + std::panic::UnwindSafe) -> i64 {
    let failure = match std::panic::catch_unwind(call) {
        Ok(Ok(value)) => match i64::try_from(value) {
            Ok(answer) => return answer,
            Err(_) => DirectFailure::Error(FfiError::Io { detail: format!("the answer {value} does not fit a JVM long") }),
        },
        Ok(Err(error)) => DirectFailure::Error(error),
        // Nothing may unwind into the JVM.
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            DirectFailure::Panic(format!("the engine panicked: {}", what.unwrap_or_else(|| "(no message)".into())))
        }
    };
    let id = NEXT_DIRECT_FAILURE.fetch_add(1, Ordering::Relaxed);
    DIRECT_FAILURES.lock().unwrap_or_else(|p| p.into_inner()).insert(id, failure);
    -(id as i64)
}

/// `store_append_packed` as a direct call: the first position, or minus a failure id.
///
/// # Safety
/// As `FfiStore::append_packed`: `address` and `len` name bytes the caller owns for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lapilli_jvm_append_packed(store: u64, address: u64, len: u64) -> i64 {
    direct_call(|| store_append_packed(store, address, len))
}

/// `store_submit_packed` as a direct call: 0, or minus a failure id.
///
/// # Safety
/// As `FfiStore::append_packed`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lapilli_jvm_submit_packed(store: u64, address: u64, len: u64, token: u64) -> i64 {
    direct_call(|| store_submit_packed(store, address, len, token).map(|()| 0))
}

/// The failure of a direct call that answered `-id`, raised (taken: asked once).
#[uniffi::export]
pub fn take_direct_error(id: u64) -> FfiResult<()> {
    let failure = DIRECT_FAILURES.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    match failure {
        Some(DirectFailure::Error(error)) => Err(error),
        Some(DirectFailure::Panic(message)) => panic!("{message}"),
        None => Err(FfiError::Io { detail: format!("no error was recorded for direct call {id}") }),
    }
}

/// Failures of direct calls not taken yet (for tests: the Kotlin layer takes each at once).
#[uniffi::export]
pub fn direct_failures_pending() -> u64 {
    DIRECT_FAILURES.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
}

/// Which copy of this library answers: the same number through UniFFI and through the direct
/// calls, unless JNA bound the two to different copies (a second copy has its own, empty,
/// store registry, and every append would answer `Closed`). `DirectCalls` compares them once.
fn instance_marker_value() -> u64 {
    &NEXT_DIRECT_FAILURE as *const AtomicU64 as u64
}

#[uniffi::export]
pub fn instance_marker() -> u64 {
    instance_marker_value()
}

#[unsafe(no_mangle)]
pub extern "C" fn lapilli_jvm_instance_marker() -> u64 {
    instance_marker_value()
}

/// `FfiStore::read` of the store `id`, in one crossing: the query and options are packed at
/// `address` (`len` bytes; written by `Packing.kt`) as
///
///   query (as in an append condition); u64 after; u8 has_until, [u64 until];
///   u8 has_limit, [u64 limit]; u8 backwards
///
/// instead of two UniFFI records, each a RustBuffer that UniFFI allocates with a native call.
///
/// # Safety (of the caller)
/// As `FfiStore::append_packed`.
#[uniffi::export]
pub fn store_read_packed(store: u64, address: u64, len: u64) -> FfiResult<Arc<FfiReadResult>> {
    let store = registered(store)?;
    // SAFETY: the Kotlin layer's contract, above.
    let bytes = unsafe { request_bytes(address, len)? };
    let mut r = Reader { bytes, at: 0 };
    let query = r.query()?;
    let after = core::Position(r.u64()?);
    let until = if r.u8()? == 0 { None } else { Some(core::Position(r.u64()?)) };
    let limit = if r.u8()? == 0 { None } else { Some(r.u64()?) };
    let backwards = r.u8()? != 0;
    if r.at != bytes.len() {
        return Err(invalid(format!("packed read request has {} bytes after its options", bytes.len() - r.at)));
    }
    store.read_query(&query, core::ReadOptions { after, until, limit, backwards })
}

/// An open store. `close` is renamed `closeStore` for Kotlin (`uniffi.toml`), because UniFFI's
/// own `close()` (from `AutoCloseable`) releases the handle.
#[derive(uniffi::Object)]
pub struct FfiStore {
    inner: core::Store,
    port: Arc<Port>,
    /// Its key in the registry (`STORES`).
    id: u64,
}

impl Drop for FfiStore {
    fn drop(&mut self) {
        unregister(self.id);
    }
}

impl FfiStore {
    fn new(inner: core::Store) -> Arc<Self> {
        register(FfiStore { inner, port: Arc::default(), id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed) })
    }
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
        Ok(FfiStore::new(core::Store::open(path, options)?))
    }

    #[uniffi::constructor]
    pub fn open_read_only(path: String) -> FfiResult<Arc<Self>> {
        Ok(FfiStore::new(core::Store::open_read_only(path)?))
    }

    /// The key of this store for the free functions (`store_append_packed`, ...).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn head(&self) -> FfiResult<u64> {
        Ok(self.inner.head()?.get())
    }

    pub fn stats(&self) -> FfiResult<FfiStats> {
        let s = self.inner.stats()?;
        Ok(FfiStats {
            head: s.head,
            events_appended: s.events_appended,
            bytes_appended: s.bytes_appended,
            group_commits: s.group_commits,
            events_per_commit_mean: s.events_per_commit_mean,
            events_per_commit_max: s.events_per_commit_max,
            fsyncs: s.fsyncs,
            fsync_p50_micros: s.fsync_p50_micros,
            fsync_p99_micros: s.fsync_p99_micros,
            fsync_max_micros: s.fsync_max_micros,
            queue_depth: s.queue_depth,
            queue_depth_max: s.queue_depth_max,
            segments: s.segments,
            index_bytes: s.index_bytes,
            subscriptions: s.subscriptions,
            follower_lag_positions: s.follower_lag_positions,
            follower_lag_millis: s.follower_lag_millis,
        })
    }

}

impl FfiStore {
    fn read_query(&self, query: &core::Query, options: core::ReadOptions) -> FfiResult<Arc<FfiReadResult>> {
        let result = self.inner.read(query, options)?;
        Ok(Arc::new(FfiReadResult { head: result.head().get(), inner: Mutex::new((result, Outbox::default())) }))
    }

    /// Appends the packed request at `address` (see the layout above) and blocks until it is
    /// committed; answers the first position (the last is first + count - 1). Called through
    /// `store_append_packed`.
    ///
    /// # Safety (of the caller)
    /// `address` points to `len` bytes that stay unchanged during the call.
    fn append_packed(&self, address: u64, len: u64) -> FfiResult<u64> {
        // SAFETY: the Kotlin layer's contract, above.
        let (events, condition) = decode_append(unsafe { request_bytes(address, len)? })?;
        Ok(self.inner.append(events, condition)?.first.get())
    }

    /// Hands the packed request to the writer and returns at once; its answer reaches the port
    /// as a record with `token`. The same safety contract as `append_packed`. Called through
    /// `store_submit_packed`.
    fn submit_packed(&self, address: u64, len: u64, token: u64) {
        // SAFETY: the Kotlin layer's contract, above.
        let decoded = unsafe { request_bytes(address, len) }.and_then(|bytes| decode_append(bytes));
        let port = self.port.clone();
        let complete = move |result: core::Result<core::AppendResult>| match result {
            Ok(r) => port.push(APPEND_DONE, token, r.first.get(), r.last.get(), None),
            Err(e) => port.push(APPEND_FAILED, token, 0, 0, Some(e)),
        };
        match decoded {
            Ok((events, condition)) => self.inner.submit(events, condition).on_complete(complete),
            // Malformed by our own Kotlin layer: answered like any refused append.
            Err(e) => complete(Err(core::Error::new(core::ErrorKind::InvalidArgument, e.to_string()))),
        }
    }
}

#[uniffi::export]
impl FfiStore {

    /// The error of the append `token` that the port reported failed (taken: asked once).
    pub fn append_error(&self, token: u64) -> FfiResult<()> {
        let error = self.port.state.lock().unwrap_or_else(|p| p.into_inner()).errors.remove(&token);
        match error {
            Some(error) => Err(error.into()),
            None => Err(FfiError::Io { detail: format!("no error was recorded for append {token}") }),
        }
    }

    /// Blocks until the port holds records, and takes them all; `None` once the store is closed
    /// and every record was taken. Called by the one completion thread of the Kotlin store.
    pub fn take_completions(&self) -> Option<Vec<u8>> {
        let mut state = self.port.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if !state.records.is_empty() {
                return Some(std::mem::take(&mut state.records));
            }
            if state.closed {
                return None;
            }
            state = self.port.filled.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub fn subscribe(&self, query: FfiQuery, after: u64) -> FfiResult<Arc<FfiSubscription>> {
        let inner = self.inner.subscribe(&query.into(), core::Position(after))?;
        Ok(Arc::new(FfiSubscription { inner, port: self.port.clone(), outbox: Mutex::default() }))
    }

    /// How many group commits (one write, and with fsync durability one fsync, each) this
    /// handle has made: for tests that show concurrent appends share commits.
    pub fn group_commits(&self) -> u64 {
        self.inner.group_commits()
    }

    /// Answers queued appends, ends subscriptions, releases the lock, and closes the port once
    /// every answer and wake-up is in it. Idempotent.
    pub fn close(&self) -> FfiResult<()> {
        unregister(self.id);
        let closed = self.inner.close();
        self.port.close();
        Ok(closed?)
    }
}

/// A read in progress over a pinned snapshot, taken in packed batches.
#[derive(uniffi::Object)]
pub struct FfiReadResult {
    head: u64,
    inner: Mutex<(core::ReadResult, Outbox)>,
}

#[uniffi::export]
impl FfiReadResult {
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Up to `max` further events, packed into the `capacity` bytes at `dest` (see "Events
    /// out") against the caller's string table (`table_epoch`, `table_len`: what the batches it
    /// decoded left it holding; 0 and 0 at first); answers the batch's length, and a length over
    /// `capacity` means nothing was copied: call again with that much. A batch of 0 events
    /// means the read is exhausted.
    ///
    /// # Safety (of the caller)
    /// `dest` points to `capacity` writable bytes nothing else touches during the call.
    pub fn next_batch_into(&self, max: u32, table_epoch: u64, table_len: u32, dest: u64, capacity: u64) -> FfiResult<u64> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (result, outbox) = &mut *inner;
        // SAFETY (here and below): the Kotlin layer's contract, above.
        if let Some(len) = unsafe { outbox.take_pending(dest, capacity) } {
            return Ok(len);
        }
        let mut batch = outbox.builder(table_epoch, table_len);
        if let Err(e) = result.visit(max as usize, |view| batch.push(view)) {
            outbox.spare = Some(batch);
            return Err(e.into());
        }
        Ok(unsafe { outbox.deliver(batch, dest, capacity) })
    }

    /// How many strings the read's string table holds now (for tests of its bound).
    pub fn strings_held(&self) -> u32 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.strings_held()
    }
}

/// A live feed; `close` (renamed `closeSubscription` for Kotlin) may be called from any thread
/// and wakes a consumer blocked in `next_batch` or waiting through the port.
#[derive(uniffi::Object)]
pub struct FfiSubscription {
    inner: core::Subscription,
    port: Arc<Port>,
    /// Locked only to take a builder or hand a batch out, never while waiting.
    outbox: Mutex<Outbox>,
}

/// What `next_batch_into` and `try_next_batch_or_arm_into` answer for a subscription that ended.
const ENDED: i64 = -1;

impl FfiSubscription {
    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A batch too long for the caller's last buffer, if one is waiting.
    ///
    /// # Safety
    /// As `copy_out`.
    unsafe fn pending(&self, dest: u64, capacity: u64) -> Option<i64> {
        // SAFETY: as the caller promises.
        unsafe { self.outbox().take_pending(dest, capacity) }.map(|len| len as i64)
    }

    /// # Safety
    /// As `copy_out`.
    unsafe fn deliver(&self, batch: BatchBuilder, dest: u64, capacity: u64) -> i64 {
        // SAFETY: as the caller promises.
        unsafe { self.outbox().deliver(batch, dest, capacity) as i64 }
    }
}

#[uniffi::export]
impl FfiSubscription {
    /// Packed events into the `capacity` bytes at `dest`, as `FfiReadResult::next_batch_into`
    /// (a length over `capacity`: call again with that much). `-1`: ended. A batch of 0 events:
    /// the timeout passed. `timeout_ms = None` waits as long as it takes (a thread blocked here;
    /// `try_next_batch_or_arm_into` is the way without one). `table_epoch`, `table_len`: the
    /// caller's string table, as for a read.
    ///
    /// # Safety (of the caller)
    /// `dest` points to `capacity` writable bytes nothing else touches during the call.
    pub fn next_batch_into(
        &self,
        max: u32,
        timeout_ms: Option<u64>,
        table_epoch: u64,
        table_len: u32,
        dest: u64,
        capacity: u64,
    ) -> FfiResult<i64> {
        if max == 0 {
            return Err(invalid("max is 0; a batch holds at least one event".to_string()));
        }
        // SAFETY (here and below): the Kotlin layer's contract, above.
        if let Some(len) = unsafe { self.pending(dest, capacity) } {
            return Ok(len);
        }
        // A timeout too long to add to the clock means "wait as long as it takes".
        let timeout = timeout_ms
            .map(Duration::from_millis)
            .filter(|t| std::time::Instant::now().checked_add(*t).is_some());
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        // Packed straight from the log (no owned copy of each event), waiting between passes on
        // the core's wake-up, the same one `try_next_batch_or_arm_into` uses.
        let mut batch = self.outbox().builder(table_epoch, table_len);
        loop {
            let Some(seen) = self.inner.try_visit(max as usize, |view| batch.push(view))? else { return Ok(ENDED) };
            let now = std::time::Instant::now();
            if seen > 0 || deadline.is_some_and(|d| now >= d) {
                break;
            }
            let (ready, woken) = std::sync::mpsc::sync_channel(1);
            self.inner.on_ready(move || {
                let _ = ready.try_send(());
            });
            let _ = match deadline {
                Some(deadline) => woken.recv_timeout(deadline - now).map_err(|_| ()),
                None => woken.recv().map_err(|_| ()),
            };
        }
        Ok(unsafe { self.deliver(batch, dest, capacity) })
    }

    /// What is there now, packed into `dest` as `next_batch_into`, without waiting. `-1`:
    /// ended. A batch of 0 events: nothing yet, and the subscription is armed: a record with
    /// `token` reaches the port (from the core's completion thread) as soon as there may be
    /// something, or it ends. The same safety contract as `next_batch_into`.
    pub fn try_next_batch_or_arm_into(
        &self,
        max: u32,
        token: u64,
        table_epoch: u64,
        table_len: u32,
        dest: u64,
        capacity: u64,
    ) -> FfiResult<i64> {
        // SAFETY (here and below): the Kotlin layer's contract.
        if let Some(len) = unsafe { self.pending(dest, capacity) } {
            return Ok(len);
        }
        let mut batch = self.outbox().builder(table_epoch, table_len);
        let Some(seen) = self.inner.try_visit(max as usize, |view| batch.push(view))? else { return Ok(ENDED) };
        if seen == 0 {
            let port = self.port.clone();
            self.inner.on_ready(move || port.push(SUBSCRIPTION_READY, token, 0, 0, None));
        }
        Ok(unsafe { self.deliver(batch, dest, capacity) })
    }

    /// How many strings the subscription's string table holds now (for tests of its bound).
    pub fn strings_held(&self) -> u32 {
        self.outbox().strings_held()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn take(answer: i64) -> std::thread::Result<FfiResult<()>> {
        assert!(answer < 0, "a failure answers a negative id, got {answer}");
        std::panic::catch_unwind(|| take_direct_error((-answer) as u64))
    }

    #[test]
    fn a_direct_call_answers_its_value_or_a_failure_taken_once() {
        assert_eq!(direct_call(|| Ok(41)), 41);
        let failed = direct_call(|| Err(FfiError::InvalidArgument { detail: "type is empty".into() }));
        assert!(matches!(take(failed), Ok(Err(FfiError::InvalidArgument { detail })) if detail == "type is empty"));
        // Taken once: asked again, there is nothing for that id.
        assert!(matches!(take(failed), Ok(Err(FfiError::Io { detail })) if detail.contains("no error was recorded")));
        // An answer a JVM long cannot carry is an error, not a clamped value.
        let too_big = direct_call(|| Ok(u64::MAX));
        assert!(matches!(take(too_big), Ok(Err(FfiError::Io { .. }))));
    }

    #[test]
    fn a_panic_in_a_direct_call_does_not_unwind_and_is_raised_again_as_a_panic_when_taken() {
        let answer = direct_call(|| panic!("on purpose"));
        let raised = take(answer).expect_err("taking a panic's failure panics, as UniFFI reports panics");
        let message = raised.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("the engine panicked: on purpose"), "{message}");
    }

    #[test]
    fn failures_are_kept_per_call_not_per_thread() {
        let first = direct_call(|| Err(FfiError::Closed { detail: "one".into() }));
        let second = direct_call(|| Err(FfiError::ReadOnly { detail: "two".into() }));
        // Taken in the other order, each is its own.
        assert!(matches!(take(second), Ok(Err(FfiError::ReadOnly { .. }))));
        assert!(matches!(take(first), Ok(Err(FfiError::Closed { .. }))));
    }

    #[test]
    fn both_ways_in_name_the_same_copy_of_the_library() {
        assert_eq!(instance_marker(), lapilli_jvm_instance_marker());
    }
}
