//! The native half of the Node.js package `lapilli`: a thin napi-rs facade over `lapilli-core`.
//!
//! Everything here is mechanical: convert arguments, call the engine, hand results back in
//! batches. The JavaScript layer (`lapilli.js`) checks argument types, turns the encoded errors
//! of [`to_js_error`] into `LapilliError` subclasses and decodes [`Batch`]es into event objects.
//!
//! Threads: `head`, `read` (a snapshot) and `subscribe` are cheap and answer on the JS thread;
//! `open`, `append` (waiting for the group commit), read batches, subscription catch-up and
//! `close` run on napi's tokio runtime (`spawn_blocking` where they may block), so the event
//! loop is never held up by an fsync or a page fault. A subscription waiting for live commits
//! holds no thread: it registers a threadsafe function with core's `Subscription::on_ready`,
//! called from the store's completion thread when the head moves or the store closes, and
//! takes the few fresh events on the JS thread (`try_next_batch`).
//!
//! `append` copies its events out of the JS values (they are only borrowed) and puts them on
//! the store's [`Submitter`]: an unbounded FIFO drained by one thread per store, which calls
//! `Store::submit` for each in turn. `submit` validates, encodes, checks the condition against
//! the index and blocks while the writer's bounded queue is full; on that thread none of it
//! holds up the event loop, a burst larger than the writer's queue waits as pending Promises
//! (asynchronous backpressure), and one thread draining one FIFO keeps appends committed in
//! call order. A thousand pending Promises are still a handful of group commits, not a
//! thousand threads.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;

use lapilli_core as core;
use napi::bindgen_prelude::*;
use napi::tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use napi_derive::napi;

/// Largest integer a JS number holds exactly (2^53 - 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// A batch stops growing once its data passes this many bytes (it always holds one event).
const BATCH_DATA_BYTES: usize = 4 << 20;

/// The one place engine errors become JS errors: the message carries the kind's code and the
/// position as `[CODE@position] message`, which `errors.js` turns into the matching
/// `LapilliError` subclass with `code` and `position`. (napi-rs rejects Promises only with
/// its own status codes, so the kind travels in the message.)
fn to_js_error(err: core::Error) -> Error {
    let code = err.kind().code();
    let reason = match err.position() {
        Some(position) => format!("[{code}@{position}] {}", err.message()),
        None => format!("[{code}] {}", err.message()),
    };
    Error::new(Status::GenericFailure, reason)
}

/// Bad input the binding itself notices (a number that cannot be a position).
fn invalid(message: String) -> Error {
    to_js_error(core::Error::new(core::ErrorKind::InvalidArgument, message))
}

/// A JS number that must be a position (the JS layer has checked it is a safe integer >= 0).
fn position_arg(name: &str, value: f64) -> Result<core::Position> {
    if !(value >= 0.0 && value <= MAX_SAFE_INTEGER as f64 && value.fract() == 0.0) {
        return Err(invalid(format!("{name} is {value}; it must be an integer from 0 to 2^53 - 1")));
    }
    Ok(core::Position(value as u64))
}

/// A position going out to JS, checked to stay exact.
fn position_out(position: core::Position) -> Result<f64> {
    let value = position.get();
    if value > MAX_SAFE_INTEGER {
        return Err(Error::new(
            Status::GenericFailure,
            format!("position {value} exceeds 2^53 - 1 and cannot be a JS number"),
        ));
    }
    Ok(value as f64)
}

#[napi(object)]
pub struct NativeQueryItem {
    pub types: Vec<String>,
    pub tags: Vec<String>,
}

/// `{ all: true, items: [] }` is `Query.all()`; otherwise the items.
#[napi(object)]
pub struct NativeQuery {
    pub all: bool,
    pub items: Vec<NativeQueryItem>,
}

impl From<NativeQuery> for core::Query {
    fn from(query: NativeQuery) -> Self {
        if query.all {
            return core::Query::all();
        }
        core::Query::of(query.items.into_iter().map(|item| core::QueryItem::new(item.types, item.tags)))
    }
}

/// The caller's event object as it is (`tags` and `data` may be missing). Data is borrowed
/// from the caller's Buffer/Uint8Array and copied once, on the JS thread.
#[napi(object)]
pub struct NativeEvent<'env> {
    pub r#type: String,
    pub tags: Option<Vec<String>>,
    pub data: Option<Uint8ArraySlice<'env>>,
}

#[napi(object)]
pub struct NativeCondition {
    pub fail_if_events_match: NativeQuery,
    pub after: Option<f64>,
    pub fail_if_exists: Option<NativeQuery>,
}

#[napi(object)]
pub struct NativeOptions {
    pub durability: Option<String>,
    pub segment_size: Option<f64>,
    pub max_event_bytes: Option<f64>,
}

/// Events packed for one crossing. `meta` holds, per event, `position, recordedAt, type index,
/// data length, tag count` and then the tag indices; indices point into `strings` (each type
/// and tag once per batch); data lie end to end in `data`.
#[napi(object)]
pub struct Batch {
    pub count: u32,
    pub meta: Float64Array,
    pub strings: Vec<String>,
    pub data: Buffer,
}

#[derive(Default)]
struct BatchBuilder {
    count: u32,
    meta: Vec<f64>,
    strings: Vec<String>,
    index: HashMap<String, u32>,
    data: Vec<u8>,
    too_large: Option<u64>,
}

impl BatchBuilder {
    fn intern(&mut self, text: &str) -> f64 {
        if let Some(&i) = self.index.get(text) {
            return i as f64;
        }
        let i = self.strings.len() as u32;
        self.strings.push(text.to_owned());
        self.index.insert(text.to_owned(), i);
        i as f64
    }

    fn push<'a>(
        &mut self,
        position: core::Position,
        recorded_at: u64,
        event_type: &str,
        tags: impl Iterator<Item = &'a str>,
        tag_count: usize,
        data: &[u8],
    ) {
        if position.get() > MAX_SAFE_INTEGER {
            self.too_large.get_or_insert(position.get());
        }
        self.count += 1;
        self.meta.push(position.get() as f64);
        self.meta.push(recorded_at as f64);
        let type_index = self.intern(event_type);
        self.meta.push(type_index);
        self.meta.push(data.len() as f64);
        self.meta.push(tag_count as f64);
        for tag in tags {
            let tag_index = self.intern(tag);
            self.meta.push(tag_index);
        }
        self.data.extend_from_slice(data);
    }

    fn push_view(&mut self, view: &core::EventView<'_>) {
        self.push(view.position, view.recorded_at, view.event_type, view.tags(), view.tag_count(), view.data);
    }

    fn finish(self) -> Result<Batch> {
        if let Some(position) = self.too_large {
            position_out(core::Position(position))?;
        }
        Ok(Batch {
            count: self.count,
            meta: Float64Array::new(self.meta),
            strings: self.strings,
            data: Buffer::from(self.data),
        })
    }
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    spawn_blocking(work)
        .await
        .map_err(|e| Error::new(Status::GenericFailure, format!("a lapilli task failed: {e}")))?
}

fn core_options(options: Option<NativeOptions>) -> Result<core::Options> {
    let mut out = core::Options::default();
    let Some(options) = options else { return Ok(out) };
    if let Some(durability) = options.durability {
        out.durability = durability.parse().map_err(to_js_error)?;
    }
    if let Some(size) = options.segment_size {
        out.segment_size = position_arg("segmentSize", size)?.get();
    }
    if let Some(size) = options.max_event_bytes {
        out.max_event_bytes = position_arg("maxEventBytes", size)?.get() as usize;
    }
    Ok(out)
}

/// Opens the store in `path` (creating it) off the JS thread.
#[napi]
pub fn open_store(env: &Env, path: String, options: Option<NativeOptions>) -> Result<PromiseRaw<'_, NativeStore>> {
    let options = core_options(options)?;
    env.spawn_future(blocking(move || {
        let store = core::Store::open(path, options).map_err(to_js_error)?;
        NativeStore::new(store)
    }))
}

/// A read-only handle (follower); the engine answers `ReadOnly` to appends on it, or to the
/// open itself where it has no followers yet.
#[napi]
pub fn open_store_read_only(env: &Env, path: String) -> Result<PromiseRaw<'_, NativeStore>> {
    env.spawn_future(blocking(move || {
        let store = core::Store::open_read_only(path).map_err(to_js_error)?;
        NativeStore::new(store)
    }))
}

/// An append copied out of its JS values, waiting for its turn at `Store::submit`.
struct QueuedAppend {
    events: Vec<core::Event>,
    condition: Option<core::AppendCondition>,
}

/// One store's appends, from the JS call to the answer: an unbounded FIFO drained by one
/// thread into `Store::submit`, in order, and the answer slots it gets back, which JS collects
/// in the same order with [`NativeStore::next_answers`].
///
/// Rejected: calling `submit` on the JS thread (it blocks there whenever the writer's queue is
/// full, and its condition check is index work); `spawn_blocking` per append (tokio's pool
/// runs tasks in any order, so call order would not be commit order); a non-blocking
/// `try_submit` in core plus a wake-up when there is room (more core surface for what one
/// thread per store does with the existing API); a napi Promise per append (napi-rs makes a
/// threadsafe function, a libuv handle, per Promise, and resolves each in its own callback: a
/// group commit of 16,000 answers held the event loop for over 100 ms).
struct Submitter {
    /// None once closing began: later appends are refused.
    queue: Mutex<Option<mpsc::Sender<QueuedAppend>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    answers: Arc<napi::tokio::sync::Mutex<Answers>>,
}

/// Answer slots in call order: `waiting` holds those taken off the channel, not yet answered.
struct Answers {
    submitted: UnboundedReceiver<core::PendingAppend>,
    waiting: VecDeque<core::PendingAppend>,
}

impl Submitter {
    fn start(store: Arc<core::Store>) -> Result<Submitter> {
        let (queue, incoming) = mpsc::channel::<QueuedAppend>();
        let (submitted, answers) = unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("lapilli-node-submit".into())
            .spawn(move || {
                // Ends when every sender is gone (close, or the handle collected) and the FIFO
                // is drained, so what was queued before a close is submitted before it.
                for append in incoming {
                    let pending = store.submit(append.events, append.condition);
                    // Nobody collects answers once the handle is gone; the append is committed
                    // or refused all the same.
                    let _ = submitted.send(pending);
                }
            })
            .map_err(|e| Error::new(Status::GenericFailure, format!("cannot start the append thread: {e}")))?;
        Ok(Submitter {
            queue: Mutex::new(Some(queue)),
            thread: Mutex::new(Some(thread)),
            answers: Arc::new(napi::tokio::sync::Mutex::new(Answers { submitted: answers, waiting: VecDeque::new() })),
        })
    }

    /// Queues an append behind every earlier one; false once the store is closing.
    fn queue(&self, append: QueuedAppend) -> bool {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.as_ref().is_some_and(|queue| queue.send(append).is_ok())
    }

    /// Refuses further appends (called on the JS thread, so an append called after `close` is
    /// refused whatever the timing).
    fn stop_accepting(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Waits until everything queued has been submitted (blocks: call off the JS thread).
    fn drain(&self) {
        self.stop_accepting();
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

impl Answers {
    /// Waits for the oldest unanswered append, then takes the answers that follow it and are
    /// already in, up to `max` in all. Empty only when no append is left to answer.
    async fn next(&mut self, max: usize) -> Vec<core::Result<core::AppendResult>> {
        let mut out = Vec::new();
        while out.len() < max {
            while let Ok(pending) = self.submitted.try_recv() {
                self.waiting.push_back(pending);
            }
            let Some(oldest) = self.waiting.front_mut() else {
                if !out.is_empty() {
                    break;
                }
                match self.submitted.recv().await {
                    Some(pending) => {
                        self.waiting.push_back(pending);
                        continue;
                    }
                    None => break,
                }
            };
            let answer = if out.is_empty() {
                oldest.await
            } else {
                // Only what is answered already: the caller gets these now, the rest next time.
                match Pin::new(oldest).poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => break,
                }
            };
            self.waiting.pop_front();
            out.push(answer);
        }
        out
    }
}

/// Answers to appends, in call order: `positions` holds `first, last` per answer (0, 0 for a
/// failed one) and `failures` the failed ones with their encoded error (see [`to_js_error`]).
#[napi(object)]
pub struct AnswerBatch {
    pub count: u32,
    pub positions: Float64Array,
    pub failures: Vec<AppendFailure>,
}

#[napi(object)]
pub struct AppendFailure {
    pub index: u32,
    pub message: String,
}

/// `Store.stats()`: counters as JS numbers (exact below 2^53; byte and event counters of one
/// handle stay far below that).
#[napi(object)]
pub struct NativeStats {
    pub head: f64,
    pub events_appended: f64,
    pub bytes_appended: f64,
    pub group_commits: f64,
    pub events_per_commit_mean: f64,
    pub events_per_commit_max: f64,
    pub fsyncs: f64,
    pub fsync_p50_micros: f64,
    pub fsync_p99_micros: f64,
    pub fsync_max_micros: f64,
    pub queue_depth: f64,
    pub queue_depth_max: f64,
    pub segments: f64,
    pub index_bytes: f64,
    pub subscriptions: f64,
    pub follower_lag_positions: Option<f64>,
    pub follower_lag_millis: Option<f64>,
}

impl From<core::Stats> for NativeStats {
    fn from(s: core::Stats) -> Self {
        NativeStats {
            head: s.head as f64,
            events_appended: s.events_appended as f64,
            bytes_appended: s.bytes_appended as f64,
            group_commits: s.group_commits as f64,
            events_per_commit_mean: s.events_per_commit_mean,
            events_per_commit_max: s.events_per_commit_max as f64,
            fsyncs: s.fsyncs as f64,
            fsync_p50_micros: s.fsync_p50_micros as f64,
            fsync_p99_micros: s.fsync_p99_micros as f64,
            fsync_max_micros: s.fsync_max_micros as f64,
            queue_depth: s.queue_depth as f64,
            queue_depth_max: s.queue_depth_max as f64,
            segments: s.segments as f64,
            index_bytes: s.index_bytes as f64,
            subscriptions: s.subscriptions as f64,
            follower_lag_positions: s.follower_lag_positions.map(|n| n as f64),
            follower_lag_millis: s.follower_lag_millis.map(|n| n as f64),
        }
    }
}

/// Runs the `lapilli` command line with `argv` (the program name first) and returns its exit
/// status: what `npx lapilli` (bin/lapilli.js) calls. It blocks the calling thread, which in
/// that process has nothing else to do; it writes to the process's stdout and stderr directly.
#[napi]
pub fn cli_main(argv: Vec<String>) -> i32 {
    lapilli_cli::run(argv)
}

#[napi]
pub struct NativeStore {
    inner: Arc<core::Store>,
    submitter: Arc<Submitter>,
}

impl NativeStore {
    fn new(store: core::Store) -> Result<NativeStore> {
        let inner = Arc::new(store);
        let submitter = Arc::new(Submitter::start(inner.clone())?);
        Ok(NativeStore { inner, submitter })
    }
}

#[napi]
impl NativeStore {
    #[napi]
    pub fn head(&self) -> Result<f64> {
        position_out(self.inner.head().map_err(to_js_error)?)
    }

    /// Synchronous, like `head()`: a few atomic loads and one listing of the store directory
    /// (and for a follower, a scan of what was committed since its last poll, 5 ms at most).
    #[napi]
    pub fn stats(&self) -> Result<NativeStats> {
        self.inner.stats().map(NativeStats::from).map_err(to_js_error)
    }

    /// Queues the append behind every earlier call (so appends commit in call order) and
    /// returns at once; its answer comes, in call order, from `next_answers`. Validation, the
    /// condition check and waiting for room in the writer's queue happen on the submitter's
    /// thread. Throws `Closed` once `close` was called (then no answer will come for it).
    #[napi]
    pub fn append(&self, events: Vec<NativeEvent<'_>>, condition: Option<NativeCondition>) -> Result<()> {
        let events: Vec<core::Event> = events
            .into_iter()
            .map(|e| core::Event {
                event_type: e.r#type,
                tags: e.tags.unwrap_or_default(),
                data: e.data.map(|d| d.to_vec()).unwrap_or_default(),
            })
            .collect();
        let condition = match condition {
            None => None,
            Some(c) => Some(core::AppendCondition {
                fail_if_events_match: c.fail_if_events_match.into(),
                after: c.after.map(|a| position_arg("condition.after", a)).transpose()?,
                fail_if_exists: c.fail_if_exists.map(Into::into),
            }),
        };
        if !self.submitter.queue(QueuedAppend { events, condition }) {
            return Err(to_js_error(core::Error::new(core::ErrorKind::Closed, "the store is closed")));
        }
        Ok(())
    }

    /// The answers to the oldest unanswered appends, in call order: resolves once the oldest is
    /// answered, with it and those after it answered already (at most `max`), so one crossing
    /// settles a whole group commit. Resolves an empty batch when no append is left unanswered
    /// and the store is closed. One call at a time.
    #[napi]
    pub fn next_answers<'env>(&self, env: &'env Env, max: u32) -> Result<PromiseRaw<'env, AnswerBatch>> {
        let answers = self.submitter.answers.clone();
        let max = max.max(1) as usize;
        env.spawn_future(async move {
            let answers = answers.lock().await.next(max).await;
            let mut positions = Vec::with_capacity(answers.len() * 2);
            let mut failures = Vec::new();
            for (index, answer) in answers.iter().enumerate() {
                let outcome = answer
                    .as_ref()
                    .map_err(|e| to_js_error(e.clone()))
                    .and_then(|a| Ok((position_out(a.first)?, position_out(a.last)?)));
                match outcome {
                    Ok((first, last)) => positions.extend([first, last]),
                    Err(err) => {
                        positions.extend([0.0, 0.0]);
                        failures.push(AppendFailure { index: index as u32, message: err.reason.clone() });
                    }
                }
            }
            Ok(AnswerBatch { count: answers.len() as u32, positions: Float64Array::new(positions), failures })
        })
    }

    #[napi]
    pub fn read(
        &self,
        query: NativeQuery,
        after: f64,
        until: Option<f64>,
        limit: Option<f64>,
        backwards: bool,
    ) -> Result<NativeRead> {
        let options = core::ReadOptions {
            after: position_arg("after", after)?,
            until: until.map(|u| position_arg("until", u)).transpose()?,
            limit: limit.map(|l| position_arg("limit", l).map(|p| p.get())).transpose()?,
            backwards,
        };
        let read = self.inner.read(&query.into(), options).map_err(to_js_error)?;
        Ok(NativeRead {
            head: position_out(read.head())?,
            inner: Arc::new(Mutex::new(Some(read))),
            closing: Arc::new(AtomicBool::new(false)),
        })
    }

    #[napi]
    pub fn subscribe(&self, query: NativeQuery, after: f64) -> Result<NativeSubscription> {
        let after = position_arg("after", after)?;
        let subscription = self.inner.subscribe(&query.into(), after).map_err(to_js_error)?;
        Ok(NativeSubscription { inner: Arc::new(subscription), wait: Arc::default() })
    }

    /// Submits what `append` queued before it, answers it, stops the writer, ends
    /// subscriptions, releases the lock.
    #[napi]
    pub fn close<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let store = self.inner.clone();
        let submitter = self.submitter.clone();
        submitter.stop_accepting();
        env.spawn_future(blocking(move || {
            submitter.drain();
            store.close().map_err(to_js_error)
        }))
    }
}

#[napi]
pub struct NativeRead {
    /// None once released (closed, or read to the end): the snapshot it pinned is dropped.
    inner: Arc<Mutex<Option<core::ReadResult>>>,
    /// Set by `close`; a batch in flight then stops early and releases the read itself.
    closing: Arc<AtomicBool>,
    head: f64,
}

#[napi]
impl NativeRead {
    /// The store head pinned when the read began.
    #[napi(getter)]
    pub fn head(&self) -> f64 {
        self.head
    }

    /// Up to `max` further events (an empty batch: the read is done), produced off the JS
    /// thread straight from the mapped log.
    #[napi]
    pub fn next_batch<'env>(&self, env: &'env Env, max: u32) -> Result<PromiseRaw<'env, Batch>> {
        let shared = self.inner.clone();
        let closing = self.closing.clone();
        let max = max.max(1) as usize;
        env.spawn_future(blocking(move || {
            let mut slot = shared.lock().unwrap_or_else(|p| p.into_inner());
            let mut batch = BatchBuilder::default();
            let Some(read) = slot.as_mut() else { return batch.finish() };
            let mut done = false;
            while (batch.count as usize) < max && batch.data.len() < BATCH_DATA_BYTES {
                if closing.load(Ordering::Acquire) {
                    done = true;
                    break;
                }
                let step = (max - batch.count as usize).min(256);
                let visited = read.visit(step, |view| batch.push_view(view)).map_err(to_js_error)?;
                if visited < step {
                    done = true;
                    break;
                }
            }
            if done {
                // Read to the end or closed meanwhile: let the snapshot go now, not at GC.
                slot.take();
            }
            drop(slot);
            // A `close` that came after the last check above found the lock held and left the
            // release to this batch: look again now that the lock is free. With the fence here
            // and the one in `close`, either its `try_lock` saw the lock free or this sees its
            // flag (before, the snapshot then stayed until GC: a disposed read not `closed`).
            fence(Ordering::SeqCst);
            if closing.load(Ordering::Relaxed) {
                if let Ok(mut slot) = shared.try_lock() {
                    slot.take();
                }
            }
            batch.finish()
        }))
    }

    /// Releases the snapshot (at once, or when the batch in flight ends). Idempotent.
    #[napi]
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        fence(Ordering::SeqCst); // pairs with the one after a batch (see `next_batch`)
        match self.inner.try_lock() {
            Ok(mut slot) => drop(slot.take()),
            Err(TryLockError::Poisoned(p)) => drop(p.into_inner().take()),
            Err(TryLockError::WouldBlock) => {}
        }
    }

    /// True once the snapshot is dropped.
    #[napi(getter)]
    pub fn released(&self) -> bool {
        match self.inner.try_lock() {
            Ok(slot) => slot.is_none(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().is_none(),
            Err(TryLockError::WouldBlock) => false,
        }
    }
}

/// The JS function to call when a subscription may have something new, as a threadsafe
/// function: called from the store's completion thread, run on the JS thread.
type ReadyCallback = napi::threadsafe_function::ThreadsafeFunction<(), Unknown<'static>, (), Status, false>;

/// A subscription's wait in progress: at most one, its callback held here (not in core) so that
/// `cancel_wait` can let it go at once. `generation` tells a registration that was cancelled or
/// replaced (core still holds it until the next notification, or calls it when a newer one
/// registers) from the current one, so a stale registration never fires a newer wait.
#[derive(Default)]
struct Wait {
    generation: u64,
    callback: Option<ReadyCallback>,
}

#[napi]
pub struct NativeSubscription {
    inner: Arc<core::Subscription>,
    wait: Arc<Mutex<Wait>>,
}

impl NativeSubscription {
    /// Up to `max` events that are there now, packed; None once ended.
    fn take(subscription: &core::Subscription, max: usize) -> Result<Option<Batch>> {
        let mut batch = BatchBuilder::default();
        match subscription.try_visit(max, |view| batch.push_view(view)).map_err(to_js_error)? {
            None => Ok(None),
            Some(_) => batch.finish().map(Some),
        }
    }
}

#[napi]
impl NativeSubscription {
    /// Up to `max` events that are there now (an empty batch: nothing yet; `null`: ended),
    /// produced off the JS thread: for catching up, where the log's pages may be cold and the
    /// batch large. Never waits.
    #[napi]
    pub fn next_batch<'env>(&self, env: &'env Env, max: u32) -> Result<PromiseRaw<'env, Option<Batch>>> {
        let subscription = self.inner.clone();
        let max = max.max(1) as usize;
        env.spawn_future(blocking(move || NativeSubscription::take(&subscription, max)))
    }

    /// `next_batch` on the JS thread, for what a wake-up brings: a few events just committed,
    /// still in the page cache. The caller keeps `max` small.
    #[napi]
    pub fn try_next_batch(&self, max: u32) -> Result<Option<Batch>> {
        NativeSubscription::take(&self.inner, max.max(1) as usize)
    }

    /// Calls `callback` once, on the JS thread, as soon as `try_next_batch` may answer
    /// something new: a commit past what was scanned, the end of the subscription or the store,
    /// a follower's failure; at once if that holds already. Replaces a wait not yet called
    /// (which is then never called). No thread waits: core calls back from the store's
    /// completion thread. While registered, the callback keeps the process alive, as a pending
    /// read on a socket does.
    #[napi]
    pub fn on_ready(&self, callback: ReadyCallback) {
        let generation = {
            let mut wait = self.wait.lock().unwrap_or_else(|p| p.into_inner());
            wait.generation += 1;
            wait.callback = Some(callback);
            wait.generation
        };
        let wait = self.wait.clone();
        self.inner.on_ready(move || {
            let callback = {
                let mut wait = wait.lock().unwrap_or_else(|p| p.into_inner());
                if wait.generation != generation {
                    return;
                }
                wait.callback.take()
            };
            if let Some(callback) = callback {
                // Closing (the environment is being torn down at exit): nobody to tell.
                let _ = callback.call((), napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking);
            }
        });
    }

    /// Drops the wait in progress, if any, without calling it (a timeout or an abort): the
    /// callback is released now, so it no longer keeps the process alive.
    #[napi]
    pub fn cancel_wait(&self) {
        let callback = {
            let mut wait = self.wait.lock().unwrap_or_else(|p| p.into_inner());
            wait.generation += 1;
            wait.callback.take()
        };
        drop(callback);
    }

    #[napi(getter)]
    pub fn caught_up(&self) -> bool {
        self.inner.caught_up()
    }

    #[napi(getter)]
    pub fn position(&self) -> Result<f64> {
        position_out(self.inner.position())
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Ends the subscription; a wait in progress is called (and `try_next_batch` answers
    /// `null`).
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}
