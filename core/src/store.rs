//! The front door: opening (recovery, lock), appending, reading, subscribing, closing.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::completion::Completions;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, encode_payload, encoded_len, validate_event};
use crate::follow::Follower;
use crate::index::{Planner, seal};
use crate::location::Location;
use crate::log::format::{FRAME_LEN, HEADER_LEN, MARKER_RECORD_LEN};
use crate::log::prepare::SegmentPreparer;
use crate::log::zero_ahead::{GroupSizes, ZeroAhead};
use crate::writer::slice::WriterSlice;
use crate::append::{AppendCondition, AppendResult};
use crate::open::{RecoveryReport, create_store_dir, recover, take_lock};
use crate::options::{Durability, Options, QUEUE_DEPTH};
use crate::position::Position;
use crate::query::Query;
use crate::read::{Published, ReadOptions, ReadResult};
use crate::subscribe::{Source, Subscription};
use crate::inspect::SegmentInfo;
use crate::stats::Stats;
use crate::writer::reply::PendingAppend;
use crate::writer::condition::{PreChecked, pre_check};
use crate::writer::syncer::Syncer;
use crate::writer::{AppendRequest, Command, Writer};

/// An open store: one directory, one global order of events.
///
/// ```
/// use lapilli_core::{AppendCondition, Event, Options, Query, ReadOptions, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Options::default())?;
/// let query = Query::for_tags(["course:c1"]);
/// let read = store.read(&query, ReadOptions::default())?;
/// let decided_at = read.head();
/// let appended = store.append(
///     vec![Event::new("CourseDefined", ["course:c1"], b"{\"capacity\":10}".to_vec())],
///     Some(AppendCondition::new(query.clone()).after(decided_at)),
/// )?;
/// assert_eq!(appended.first.get(), 1);
/// let events = store.read(&query, ReadOptions::default())?.collect_all()?;
/// assert_eq!(events[0].event_type, "CourseDefined");
/// store.close()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Store {
    path: PathBuf,
    options: Options,
    published: Arc<Published>,
    /// The writer's queue; None for a read-only handle.
    queue: Option<SyncSender<Command>>,
    /// The threads this handle runs, until it is closed.
    threads: Mutex<Option<Threads>>,
    lock: Mutex<Option<File>>,
    recovery: RecoveryReport,
    /// Runs registered callbacks and wakers off the writer (`completion.rs`); stopped by close.
    completions: Arc<Completions>,
    /// A store in a PostgreSQL database (then `queue`, `threads` and `lock` are unused: its
    /// writer and listener are its own).
    #[cfg(feature = "postgres")]
    postgres: Option<crate::postgres::PgStore>,
}

enum Threads {
    /// The writer, and the sealer it feeds.
    Writer { writer: JoinHandle<Result<()>>, sealer: JoinHandle<()> },
    /// A read-only handle's poll thread.
    Follower(JoinHandle<()>),
}

impl Store {
    /// Opens (creating if missing) the store at `location` ([`Location::parse`]): a path or
    /// `file:` URL opens the embedded store in that directory, recovering its log, and takes
    /// the exclusive lock (a second open anywhere fails with `StoreLocked`); a
    /// `postgresql://...?context=NAME` URL opens that context of a PostgreSQL database (feature
    /// `postgres`), which any number of handles in any number of processes may write.
    pub fn open(location: impl AsRef<Path>, options: Options) -> Result<Store> {
        options.validate()?;
        match Location::parse(location)? {
            Location::Embedded(path) => Self::open_embedded(path, options),
            Location::Postgres(url) => Self::open_postgres(&url, options, false),
        }
    }

    #[cfg(feature = "postgres")]
    fn open_postgres(url: &str, options: Options, read_only: bool) -> Result<Store> {
        let published = Arc::new(Published::new());
        let completions = Completions::start()?;
        published.notifier.set_completions(completions.clone());
        let store = crate::postgres::PgStore::open(url, options.durability, read_only, published.clone(), completions.clone())?;
        let head = Position(published.head());
        Ok(Store {
            path: store.path(),
            options,
            published,
            queue: None,
            threads: Mutex::new(None),
            lock: Mutex::new(None),
            recovery: RecoveryReport { head, ..RecoveryReport::default() },
            completions,
            postgres: Some(store),
        })
    }

    #[cfg(not(feature = "postgres"))]
    fn open_postgres(url: &str, _options: Options, _read_only: bool) -> Result<Store> {
        let scheme = url.split("://").next().unwrap_or(url);
        Err(Error::invalid(format!(
            "location is a {scheme}:// URL, but this build of Lapilli has no PostgreSQL backend (cargo feature `postgres`)"
        )))
    }

    #[cfg(feature = "postgres")]
    fn postgres(&self) -> Option<&crate::postgres::PgStore> {
        self.postgres.as_ref()
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres(&self) -> Option<&std::convert::Infallible> {
        None
    }

    fn open_embedded(path: PathBuf, options: Options) -> Result<Store> {
        create_store_dir(&path, options.dir_mode())?;
        let lock = take_lock(&path, options.file_mode)?;
        let published = Arc::new(Published::new());
        let recovered = recover(&path, &options, &published)?;
        let completions = Completions::start()?;
        published.notifier.set_completions(completions.clone());
        let recovery = recovered.report;
        let found_parts = recovered.parts;
        let head = recovery.head.get();
        published.publish_head(head);
        // Started before the sealer: a failure here leaves no thread behind.
        let syncer = match options.durability {
            Durability::Fsync => Some(Syncer::start().map_err(|e| Error::io("cannot start the sync thread", &e))?),
            Durability::Buffered => None,
        };
        let (to_sealer, sealer_queue) = std::sync::mpsc::channel();
        let sealer_published = published.clone();
        let file_mode = options.file_mode;
        let part_bytes = options.part_bytes;
        let sealer = std::thread::Builder::new()
            .name("lapilli-sealer".into())
            .spawn(move || seal::run(sealer_queue, sealer_published, file_mode, part_bytes, found_parts))
            .map_err(|e| Error::io("cannot start the sealer thread", &e))?;
        let active = recovered.active;
        let zero_ahead = ZeroAhead::for_reopened(&active.file, &active.path, active.end, active.capacity, options.durability);
        let writer = Writer {
            published: published.clone(),
            active,
            active_entry: recovered.entry,
            active_index: recovered.tail,
            sealer: to_sealer,
            part_start: recovered.part_start,
            part_bytes: options.part_bytes,
            next_segment: SegmentPreparer::start(&path, options.segment_size, options.file_mode, options.durability)?,
            zero_ahead,
            group_sizes: GroupSizes::default(),
            slice: WriterSlice::new(options.durability == Durability::Fsync),
            durability: options.durability,
            head,
            last_recorded_at: recovered.last_recorded_at,
            poisoned: None,
            poisoned_by_sync: false,
            spare: Default::default(),
            syncer,
        };
        let (queue, incoming) = sync_channel(QUEUE_DEPTH);
        let writer_completions = completions.clone();
        let thread = std::thread::Builder::new()
            .name("lapilli-writer".into())
            .spawn(move || {
                // Answers and wake-ups the writer produces go to the completion thread, one push
                // per group; the guard flushes the last ones after `run` has returned.
                let _deferred = writer_completions.defer_here();
                writer.run(incoming)
            })
            .map_err(|e| Error::io("cannot start the writer thread", &e))?;
        Ok(Store {
            path,
            options,
            published,
            queue: Some(queue),
            threads: Mutex::new(Some(Threads::Writer { writer: thread, sealer })),
            lock: Mutex::new(Some(lock)),
            recovery,
            completions,
            #[cfg(feature = "postgres")]
            postgres: None,
        })
    }

    /// A read-only handle (a follower) on the store in `path`, which another process may be
    /// writing, or nobody. It never takes the lock, never writes a byte and never blocks the
    /// writer; it sees whole committed batches only, and follows new commits (reads, `head()`
    /// and subscriptions see them within a few milliseconds). `append` fails with `ReadOnly`.
    /// If the batches it accepted are later cut back or rewritten under it, every operation
    /// fails with `Corruption` from then on (blocked subscribers wake with it), and if it cannot
    /// read a segment it must follow, with that `Io` error: reopen it.
    ///
    /// On a `postgresql://` URL: a handle on an existing context that refuses appends
    /// (`ReadOnly`); it follows the commits of every writer as any Postgres handle does.
    pub fn open_read_only(location: impl AsRef<Path>) -> Result<Store> {
        let path = match Location::parse(location)? {
            Location::Embedded(path) => path,
            Location::Postgres(url) => return Self::open_postgres(&url, Options::default(), true),
        };
        let published = Arc::new(Published::new());
        let (follower, recovery) = Follower::open(&path, published.clone())?;
        let completions = Completions::start()?;
        published.notifier.set_completions(completions.clone());
        let thread = std::thread::Builder::new()
            .name("lapilli-follower".into())
            .spawn(move || follower.run())
            .map_err(|e| Error::io("cannot start the follower thread", &e))?;
        Ok(Store {
            path,
            options: Options::default(),
            published,
            queue: None,
            threads: Mutex::new(Some(Threads::Follower(thread))),
            lock: Mutex::new(None),
            recovery,
            completions,
            #[cfg(feature = "postgres")]
            postgres: None,
        })
    }

    /// Whether this handle was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.is_read_only();
        }
        self.queue.is_none()
    }

    /// Whether this handle is on a PostgreSQL database rather than a directory.
    pub fn is_postgres(&self) -> bool {
        self.postgres().is_some()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Forces the planner's choice, for differential tests.
    #[doc(hidden)]
    pub fn set_planner(&self, planner: Planner) {
        self.published.set_planner(planner);
    }

    /// How many group commits this handle has written: one write, and with `fsync` durability
    /// one fsync, each (a group that rolls over to a new segment counts twice). For tests that
    /// show concurrent appends share fsyncs.
    #[doc(hidden)]
    pub fn group_commits(&self) -> u64 {
        self.published.commit_groups.load(Ordering::Relaxed)
    }

    /// How many staged events the writer indexed for the conditions of later requests in their
    /// group, for tests that show groups without a condition pay nothing for it.
    #[doc(hidden)]
    pub fn staged_events_indexed(&self) -> u64 {
        self.published.staged_events_indexed.load(Ordering::Relaxed)
    }

    /// How many groups the writer indexed while the sync thread synced them (groups of
    /// 256 events or more, with `fsync` durability), for tests that show
    /// that path is taken.
    #[doc(hidden)]
    pub fn overlapped_syncs(&self) -> u64 {
        self.published.overlapped_syncs.load(Ordering::Relaxed)
    }

    /// Statements sent for events by reads and subscriptions of a Postgres handle (0 for an
    /// embedded store), for tests of what they cost.
    #[doc(hidden)]
    pub fn postgres_looks(&self) -> u64 {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.shared.looks.load(Ordering::Relaxed);
        }
        0
    }

    /// Tag-dictionary lookups made so far in sealed segments' index files, for tests of what a
    /// condition check touches.
    #[doc(hidden)]
    pub fn tag_lookups(&self) -> u64 {
        self.published.snapshot().tag_lookups()
    }

    /// Prefetch requests (each up to two `mincore` calls and its `madvise` calls) the calling thread
    /// has made, for tests that a warm read asks a bounded number of times, not once per event.
    #[doc(hidden)]
    pub fn prefetch_requests_on_this_thread() -> u64 {
        crate::log::segment::prefetch_requests_on_this_thread()
    }

    /// Log bytes the calling thread's reads and subscriptions asked for ahead of their walks
    /// (whether or not they were in memory already), for tests of how far a walk reads ahead.
    #[doc(hidden)]
    pub fn read_ahead_bytes_on_this_thread() -> u64 {
        crate::read::read_ahead_bytes_on_this_thread()
    }

    /// Times the calling thread's subscription passes found the read-ahead of the pass before
    /// evicted and asked for it again, for tests that count asks.
    #[doc(hidden)]
    pub fn read_ahead_renewals_on_this_thread() -> u64 {
        crate::read::read_ahead_renewals_on_this_thread()
    }

    /// Log bytes this process has asked for ahead of cold segments' few matching records, for
    /// a test (alone in its binary) that each record is asked for whole.
    #[doc(hidden)]
    pub fn record_prefetch_bytes() -> u64 {
        crate::read::record_prefetch_bytes()
    }

    /// `mincore` calls the calling thread has made (residency hints, prefetch asks), for tests
    /// that a warm read pays them per segment it opens, not per event.
    #[doc(hidden)]
    pub fn residency_checks_on_this_thread() -> u64 {
        crate::log::segment::residency_checks_on_this_thread()
    }

    /// Sealed segments the calling thread's reads had looked up side by side on other threads
    /// (cold tag reads across segments), for tests of when a read does that.
    #[doc(hidden)]
    pub fn warmed_segments_on_this_thread() -> u64 {
        crate::read::warmed_segments_on_this_thread()
    }

    /// Bytes of sealed segments' index files whose checksums have been verified so far (header,
    /// block table and the blocks reads have touched), for tests of what a read costs.
    #[doc(hidden)]
    pub fn verified_index_bytes(&self) -> u64 {
        self.published.snapshot().verified_index_bytes()
    }

    /// How many segment entries the lists of segments this handle published held, summed over
    /// every list: for tests that show open builds the list once (2,000 segments: 2,000 entries,
    /// not two million).
    #[doc(hidden)]
    pub fn listed_segments(&self) -> u64 {
        self.published.listed_segments.load(Ordering::Relaxed)
    }

    /// Blocks until every sealed segment's index file is built and published, for tests.
    #[doc(hidden)]
    pub fn wait_for_sealing(&self) {
        while self.published.sealing.load(Ordering::Acquire) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// How many segments this handle answers from an in-memory tail index rather than a mapped
    /// index file, for tests (the active segment, and sealed ones whose file is not in use yet).
    #[doc(hidden)]
    pub fn tail_indexed_segments(&self) -> usize {
        let segments = self.published.segments.load();
        segments.iter().filter(|segment| matches!(**segment.index.load(), crate::index::SegmentIndex::Tail(_))).count()
    }

    /// How this handle is doing: head, what it appended, group commits, fsync latency, queue
    /// depth, segments, index bytes, open subscriptions, and for a follower its lag (see
    /// [`Stats`]). Cheap: a few atomic loads, a histogram of fixed size and one listing of the
    /// directory; a follower also runs the recovery rule over what was committed after the
    /// point it last accepted.
    pub fn stats(&self) -> Result<Stats> {
        self.ensure_open()?;
        if self.is_postgres() {
            // No segments nor index files of ours (0 both); the fsync figures are the COMMIT's
            // round trip; no follower lag (a read-only handle reads the server directly).
            self.head()?;
            return crate::inspect::stats(&self.published, &self.path, false);
        }
        crate::inspect::stats(&self.published, &self.path, self.is_read_only())
    }

    /// The index vocabulary and segment listing are the embedded store's files; a PostgreSQL
    /// store answers `InvalidArgument` for them (not yet built for that backend).
    fn ensure_embedded(&self, what: &str) -> Result<()> {
        if self.is_postgres() {
            return Err(Error::invalid(format!("{what} is not available on a PostgreSQL store ({}); it lists an embedded store's files", self.path.display())));
        }
        Ok(())
    }

    /// The segment files of the log, in position order, as this handle sees them.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        self.ensure_open()?;
        self.ensure_embedded("segments()")?;
        crate::inspect::segments(&self.published)
    }

    /// Every event type with how many events have it, sorted by name: from the indexes (their
    /// type columns), never from the log.
    pub fn types(&self) -> Result<Vec<(String, u64)>> {
        self.ensure_open()?;
        self.ensure_embedded("types()")?;
        crate::inspect::types(&self.published)
    }

    /// Every tag that starts with `prefix` (`""` for all) with how many events carry it,
    /// sorted by name: from the indexes' tag dictionaries and postings, never from the log.
    pub fn tags(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.ensure_open()?;
        self.ensure_embedded("tags()")?;
        crate::inspect::tags(&self.published, prefix)
    }

    /// What recovery found when this handle opened the store.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn ensure_open(&self) -> Result<()> {
        if self.published.closed.load(Ordering::Acquire) {
            return Err(Error::closed());
        }
        self.published.check()
    }

    /// The last committed position (0 for an empty store).
    pub fn head(&self) -> Result<Position> {
        self.ensure_open()?;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return Ok(Position(pg.shared.fetch_head()?));
        }
        Ok(Position(self.published.head()))
    }

    /// Appends `events` atomically at consecutive positions if `condition` holds; blocks until
    /// the batch is committed (durably, with `fsync` durability).
    pub fn append(&self, events: Vec<Event>, condition: Option<AppendCondition>) -> Result<AppendResult> {
        self.submit(events, condition).wait()
    }

    /// Hands an append to the writer and returns at once (unless the queue is full): wait on
    /// the result or `.await` it. Bad input is answered without reaching the writer.
    pub fn submit(&self, events: Vec<Event>, condition: Option<AppendCondition>) -> PendingAppend {
        let events: Vec<&Event> = events.iter().collect();
        self.submit_borrowed(&events, condition)
    }

    /// [`Store::submit`] for events the caller keeps: they are only read (validated and encoded
    /// into the request), never copied whole, so a binding whose events live in its runtime's
    /// objects hands them over as they are.
    pub fn submit_borrowed(&self, events: &[&Event], condition: Option<AppendCondition>) -> PendingAppend {
        let parts = match self.prepare(events, condition) {
            Ok(parts) => parts,
            Err(err) => return PendingAppend::ready(&self.completions, Err(err)),
        };
        let (pending, reply) = PendingAppend::new(&self.completions);
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            pg.submit(crate::postgres::PgAppend {
                encoded: parts.encoded,
                frame_starts: parts.frame_starts,
                condition: parts.condition,
                reply,
            });
            return pending;
        }
        let request = AppendRequest {
            encoded: parts.encoded,
            frame_starts: parts.frame_starts,
            condition: parts.condition,
            checked: parts.checked,
            reply,
        };
        // A send after the writer stopped drops the request, whose reply answers `Closed`.
        if let Some(queue) = &self.queue {
            self.published.counters.enqueued();
            let _ = queue.send(Command::Append(request));
        }
        pending
    }

    /// Validates and encodes on the caller's thread, off the writer's path.
    fn prepare(
        &self,
        events: &[&Event],
        condition: Option<AppendCondition>,
    ) -> Result<AppendRequestParts> {
        let fail = Err;
        self.ensure_open()?;
        if self.is_read_only() {
            return fail(Error::new(
                ErrorKind::ReadOnly,
                format!(
                    "store {} is open read-only; append through the handle that holds it writable",
                    self.path.display()
                ),
            ));
        }
        if events.is_empty() {
            return fail(Error::invalid("events is empty; an append needs at least one event"));
        }
        if let Some(condition) = &condition {
            if let Err(e) = condition.fail_if_events_match.validate("fail_if_events_match") {
                return fail(e);
            }
            if let Some(Err(e)) = condition.fail_if_exists.as_ref().map(|q| q.validate("fail_if_exists")) {
                return fail(e);
            }
            let mut head = self.published.head();
            if let Some(after) = condition.after {
                if after.get() > head && self.is_postgres() {
                    // Another process may have committed past what this handle has heard of.
                    head = self.head()?.get();
                }
                if after.get() > head {
                    return fail(Error::invalid(format!(
                        "condition after is {after}; the head is {head}, so nobody can have seen it"
                    )));
                }
            }
        }
        let mut orders = Vec::with_capacity(events.len());
        let mut total = MARKER_RECORD_LEN;
        for (i, event) in events.iter().enumerate() {
            match validate_event(i, event, self.options.max_event_bytes) {
                Ok(order) => orders.push(order),
                Err(e) => return fail(e),
            }
            // Refused here, not by the server: a statement error fails the writer's whole group.
            #[cfg(feature = "postgres")]
            if self.is_postgres() {
                if let Err(e) = crate::postgres::check_storable(i, event) {
                    return fail(e);
                }
            }
            total += FRAME_LEN + encoded_len(event);
        }
        let capacity = self.options.segment_size as usize - HEADER_LEN;
        // A Postgres store has no segments; its rows hold events of any allowed size.
        if total > capacity && !self.is_postgres() {
            return fail(Error::invalid(format!(
                "the append encodes to {total} bytes; one segment holds {capacity} (segment_size {})",
                self.options.segment_size
            )));
        }
        // Checked here, on the caller's thread, against the log as it is now: the writer then
        // checks only what is committed after this (see `writer/condition.rs`).
        // (A Postgres store checks the whole condition in its writer's transaction.)
        let checked = match &condition {
            Some(condition) if !self.is_postgres() => pre_check(&self.published.snapshot(), condition)?,
            _ => PreChecked::default(),
        };
        let mut encoded = Vec::with_capacity(total - MARKER_RECORD_LEN);
        let mut frame_starts = Vec::with_capacity(events.len());
        for (event, order) in events.iter().zip(&orders) {
            frame_starts.push(encoded.len());
            encoded.extend_from_slice(&[0u8; FRAME_LEN]);
            encode_payload(event, order, &mut encoded);
        }
        Ok(AppendRequestParts { encoded, frame_starts, condition, checked })
    }

    /// Reads the events matching `query` in the window of `options` (`API.md`, "Read").
    pub fn read(&self, query: &Query, options: ReadOptions) -> Result<ReadResult> {
        self.ensure_open()?;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            query.validate("query")?;
            let head = pg.shared.fetch_head()?;
            return ReadResult::postgres(pg.shared.clone(), query.clone(), options, head);
        }
        ReadResult::new(self.published.snapshot(), query.clone(), options)
    }

    /// Every event matching `query` after `after`: history first, then live commits.
    pub fn subscribe(&self, query: &Query, after: Position) -> Result<Subscription> {
        self.ensure_open()?;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            query.validate("query")?;
            if after.get() > self.published.head() {
                pg.shared.fetch_head()?;
            }
            return Subscription::new(self.published.clone(), query.clone(), after, Source::Postgres(pg.shared.clone()));
        }
        Subscription::new(self.published.clone(), query.clone(), after, Source::Embedded)
    }

    /// Answers every queued append, stops the writer, fsyncs, ends every subscription and
    /// releases the lock. Idempotent; also done on drop.
    ///
    /// A failure of the final fsync is returned (`Io`): with `buffered` durability that fsync is
    /// the only one, so an error there means appends answered `Ok` may not be on disk.
    pub fn close(&self) -> Result<()> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            // Every queued append is answered before the subscriptions end; then the
            // completions they produced run, and the thread stops.
            pg.close();
            if !self.published.closed.swap(true, Ordering::AcqRel) {
                self.published.notifier.notify();
            }
            self.completions.stop();
            return Ok(());
        }
        // Held until the writer is stopped and the lock released: a second `close` racing this
        // one returns only then, never before the final fsync. Not held while the completion
        // thread is joined: a callback on that thread that closes the store too would wait for
        // it, while this close waited for the callback.
        let mut running = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        let Some(threads) = running.take() else {
            drop(running);
            // Closed, or being closed: wait for its completion thread as that close does.
            self.completions.stop();
            return Ok(());
        };
        self.published.closed.store(true, Ordering::Release);
        self.published.notifier.notify();
        let outcome = match threads {
            Threads::Writer { writer, sealer } => {
                if let Some(queue) = &self.queue {
                    let _ = queue.send(Command::Shutdown);
                }
                let written = writer
                    .join()
                    .unwrap_or_else(|_| Err(Error::io("the writer thread panicked", &std::io::Error::other("panic"))));
                // The writer dropped the sealer's queue: the sealer finishes what it has and stops.
                let _ = sealer.join();
                written
            }
            Threads::Follower(follower) => {
                follower.thread().unpark();
                let _ = follower.join();
                Ok(())
            }
        };
        if let Some(lock) = self.lock.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Unlock explicitly rather than only by closing the descriptor: a child that another
            // thread forks meanwhile shares the lock's open file description until it execs, and
            // would hold the lock past our close (a reopen right after would get StoreLocked).
            // SAFETY: plain syscall on a descriptor we own.
            unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&lock), libc::LOCK_UN) };
        }
        drop(running);
        // Every answer and wake-up of this handle was produced by now (the writer has answered
        // all it had, the close above woke every registered subscription): run them, then stop
        // (a racing close waits for this join too, unless it runs on the completion thread).
        self.completions.stop();
        outcome
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// An encoded request before it gets its reply slot.
struct AppendRequestParts {
    encoded: Vec<u8>,
    frame_starts: Vec<usize>,
    condition: Option<AppendCondition>,
    checked: PreChecked,
}

