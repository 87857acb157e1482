//! One adapter per system: the same append, read and subscription shapes over Lapilli, Tephra
//! and UmaDB, each through its own public embedded API.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An event in the harness's own terms, turned into each system's type inside `append`.
pub struct Ev {
    pub ty: &'static str,
    pub tags: Vec<String>,
    pub data: Vec<u8>,
}

/// The guard of an append.
#[derive(Clone)]
pub enum Cond {
    None,
    /// Fail if an event of type `ty` tagged `tag` lies after `after` (`None`: anywhere).
    Guard {
        ty: &'static str,
        tag: String,
        after: Option<u64>,
    },
    /// The boundary clause `Guard` with `after`, plus an existence clause on `exists_tag`.
    Exists {
        ty: &'static str,
        tag: String,
        after: u64,
        exists_tag: String,
    },
}

/// What a read selects.
#[derive(Clone)]
pub enum Q {
    All,
    Tag(String),
}

/// Totals of one read.
#[derive(Default, Clone, Copy)]
pub struct ReadOut {
    pub events: u64,
    pub bytes: u64,
    pub last: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Lapilli,
    Tephra,
    Umadb,
    /// Lapilli on its PostgreSQL backend: a context per store of the database named by
    /// `LAPILLI_BENCH_POSTGRES_URL`. Not in `ALL`: chosen with `--systems ...,postgres`.
    Postgres,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Lapilli, Kind::Tephra, Kind::Umadb];
    /// Every system `--systems` accepts.
    pub const CHOOSABLE: [Kind; 4] = [Kind::Lapilli, Kind::Tephra, Kind::Umadb, Kind::Postgres];
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lapilli => "lapilli",
            Kind::Tephra => "tephra",
            Kind::Umadb => "umadb",
            Kind::Postgres => "postgres",
        }
    }
}

pub type Res<T> = Result<T, String>;

pub trait System: Send + Sync {
    /// `Ok(Some(last position))` when appended, `Ok(None)` when the condition rejected it.
    fn append(&self, events: Vec<Ev>, cond: &Cond) -> Res<Option<u64>>;
    fn head(&self) -> Res<u64>;
    /// Reads `(after, head]` forwards, or from the head backwards, visiting every payload.
    fn read(&self, q: &Q, after: u64, limit: Option<u64>, backwards: bool) -> Res<ReadOut>;
    /// Subscribes to `q` from position 0 and takes `expected` events.
    fn catch_up(&self, q: &Q, expected: u64) -> Res<ReadOut>;
    /// Subscribes to `tag`, then appends `n` events one at a time, each tagged `tag`, with its
    /// index in the first 8 bytes: the time from each append call to its delivery.
    fn live_latency(&self, tag: &str, n: usize, data_len: usize) -> Res<Vec<Duration>>;
    fn close(self: Box<Self>) -> Res<()>;
    /// Group commits written so far, where the system tells (Lapilli's `group_commits`).
    fn group_commits(&self) -> Option<u64> {
        None
    }
    /// After a corpus is loaded: what an operator's system does after a bulk import before it
    /// serves reads. Only Postgres does anything: `ANALYZE` of the context's table, which
    /// autovacuum runs by itself within a minute of a large load; without it, a cell measured
    /// seconds after the load ran on plans made with no statistics (R1 varied from 9k to 154k
    /// events/s between runs depending on whether autovacuum had got there).
    fn settle(&self) -> Res<()> {
        Ok(())
    }
}

/// Why a system cannot run a cell, when it cannot: said in the table, never papered over.
pub fn unsupported(kind: Kind, what: &str) -> Option<&'static str> {
    match (kind, what) {
        (Kind::Umadb, "exists") => Some(
            "n/a: umadb-core 0.7.8 has no existence clause (DcbAppendCondition is a boundary query and `after` only)",
        ),
        (Kind::Umadb, "subscribe") => Some(
            "n/a: umadb-core 0.7.8 has no embedded subscription API (its server implements them)",
        ),
        _ => None,
    }
}

pub struct Config {
    /// Segment size for Lapilli and Tephra (both preallocate).
    pub segment_size: u64,
}

pub fn open(kind: Kind, dir: &Path, config: &Config) -> Res<Box<dyn System>> {
    Ok(match kind {
        Kind::Lapilli => Box::new(Lap::open(dir, config)?),
        Kind::Tephra => Box::new(Teph::open(dir, config)?),
        Kind::Umadb => Box::new(Uma::open(dir)?),
        Kind::Postgres => Box::new(Lap::open_postgres(dir)?),
    })
}

fn pack(i: u64, data_len: usize) -> Vec<u8> {
    let mut data = vec![0x5a; data_len.max(8)];
    data[..8].copy_from_slice(&i.to_le_bytes());
    data
}

fn unpack(data: &[u8]) -> usize {
    u64::from_le_bytes(data[..8].try_into().unwrap()) as usize
}

/// Collects `(index → latency)` from a subscriber thread while the caller appends.
fn live_run(
    n: usize,
    data_len: usize,
    tag: &str,
    append: impl Fn(Ev) -> Res<()>,
    consume: impl FnOnce(&(dyn Fn(usize) -> bool + Sync)) -> Res<()> + Send,
) -> Res<Vec<Duration>> {
    let starts: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; n]);
    let lat: Mutex<Vec<Duration>> = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| -> Res<()> {
        let consumer = s.spawn(|| {
            // Returns true when all n have arrived.
            let got = |i: usize| {
                let now = Instant::now();
                let start = starts.lock().unwrap()[i].expect("delivered before it was appended");
                let mut lat = lat.lock().unwrap();
                lat.push(now - start);
                lat.len() >= n
            };
            consume(&got)
        });
        for i in 0..n {
            starts.lock().unwrap()[i] = Some(Instant::now());
            append(Ev {
                ty: "Live",
                tags: vec![tag.to_string()],
                data: pack(i as u64, data_len),
            })?;
        }
        consumer
            .join()
            .map_err(|_| "subscriber panicked".to_string())?
    })?;
    Ok(lat.into_inner().unwrap())
}

// ---------------------------------------------------------------- Lapilli

use lapilli_core as lap;

/// The run's tag in the names of the Postgres contexts it made; unset if it made none.
static POSTGRES_RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Drops the Postgres contexts (tables and merge functions) this run made: those whose name's
/// first `_`-separated part is `b<run>`. They used to be left in the database (54 of them after a
/// day's runs), each run's tables and pages in the next one's server.
pub fn drop_postgres_contexts() -> Res<()> {
    let Some(run) = POSTGRES_RUN.get() else { return Ok(()) };
    let url = std::env::var("LAPILLI_BENCH_POSTGRES_URL").map_err(|e| e.to_string())?;
    let mut client = postgres::Client::connect(&url, postgres::NoTls).map_err(|e| format!("postgres cleanup: {e}"))?;
    // `split_part`, not `LIKE 'b<run>\_%'`: with `standard_conforming_strings` off the
    // backslash is eaten and `_` matches any character, so another run's contexts matched.
    client
        .batch_execute(&format!(
            "DO $$ DECLARE c text; BEGIN \
                 FOR c IN SELECT name FROM lapilli_contexts WHERE split_part(name, '_', 1) = 'b{run}' LOOP \
                     EXECUTE format('DROP TABLE IF EXISTS %I', 'lapilli_events_' || c); \
                     EXECUTE format('DROP FUNCTION IF EXISTS %I()', 'lapilli_merge_' || c); \
                     DELETE FROM lapilli_contexts WHERE name = c; \
                 END LOOP; END $$"
        ))
        .map_err(|e| format!("postgres cleanup: {e}"))
}

pub struct Lap {
    store: lap::Store,
    /// For Lapilli on Postgres: the server's URL and the context's events table.
    postgres: Option<(String, String)>,
}

impl Lap {
    fn open(dir: &Path, config: &Config) -> Res<Lap> {
        let options = lap::Options {
            segment_size: config.segment_size,
            ..lap::Options::default()
        };
        let store = lap::Store::open(dir, options).map_err(|e| format!("lapilli open: {e}"))?;
        Ok(Lap { store, postgres: None })
    }

    /// A fresh context per store directory the harness names (and per run), in the database
    /// of `LAPILLI_BENCH_POSTGRES_URL`; the same directory opened again opens the same context.
    /// `drop_postgres_contexts` drops them when the run is done.
    fn open_postgres(dir: &Path) -> Res<Lap> {
        // Nine digits (a context name holds 40 characters): the second, over some four months,
        // and the process id's last two digits, so that two runs started in the same second
        // share a tag (and drop each other's contexts) only one time in a hundred.
        let run = POSTGRES_RUN.get_or_init(|| {
            let second = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
            (second % 10_000_000) * 100 + u64::from(std::process::id()) % 100
        });
        let url = std::env::var("LAPILLI_BENCH_POSTGRES_URL")
            .map_err(|_| "postgres: set LAPILLI_BENCH_POSTGRES_URL (scripts/postgres.sh start prints a server's URL)")?;
        let name: String = dir
            .to_string_lossy()
            .rsplit("run/")
            .next()
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect();
        let name: String = name.chars().rev().take(28).collect::<Vec<_>>().into_iter().rev().collect();
        let separator = if url.contains('?') { '&' } else { '?' };
        let context = format!("b{run}_{}", name.trim_matches('_'));
        let location = format!("{url}{separator}context={context}");
        let store = lap::Store::open(&location, lap::Options::default()).map_err(|e| format!("postgres open: {e}"))?;
        Ok(Lap { store, postgres: Some((url, format!("lapilli_events_{context}"))) })
    }

    fn query(q: &Q) -> lap::Query {
        match q {
            Q::All => lap::Query::all(),
            Q::Tag(t) => lap::Query::for_tags([t.as_str()]),
        }
    }
}

impl System for Lap {
    fn settle(&self) -> Res<()> {
        let Some((url, table)) = &self.postgres else { return Ok(()) };
        let mut client = postgres::Client::connect(url, postgres::NoTls).map_err(|e| format!("postgres settle: {e}"))?;
        client.batch_execute(&format!("ANALYZE {table}")).map_err(|e| format!("postgres ANALYZE {table}: {e}"))?;
        Ok(())
    }

    fn append(&self, events: Vec<Ev>, cond: &Cond) -> Res<Option<u64>> {
        let events = events
            .into_iter()
            .map(|e| lap::Event::new(e.ty, e.tags, e.data))
            .collect();
        let item = |ty: &str, tag: &str| lap::Query::of([lap::QueryItem::new([ty], [tag])]);
        let condition = match cond {
            Cond::None => None,
            Cond::Guard { ty, tag, after } => {
                let c = lap::AppendCondition::new(item(ty, tag));
                Some(match after {
                    Some(a) => c.after(lap::Position(*a)),
                    None => c,
                })
            }
            Cond::Exists {
                ty,
                tag,
                after,
                exists_tag,
            } => Some(
                lap::AppendCondition::new(item(ty, tag))
                    .after(lap::Position(*after))
                    .fail_if_exists(lap::Query::for_tags([exists_tag.as_str()])),
            ),
        };
        match self.store.append(events, condition) {
            Ok(r) => Ok(Some(r.last.get())),
            Err(e)
                if matches!(
                    e.kind(),
                    lap::ErrorKind::Conflict | lap::ErrorKind::AlreadyExists
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("lapilli append: {e}")),
        }
    }

    fn head(&self) -> Res<u64> {
        self.store
            .head()
            .map(|p| p.get())
            .map_err(|e| e.to_string())
    }

    fn read(&self, q: &Q, after: u64, limit: Option<u64>, backwards: bool) -> Res<ReadOut> {
        let options = lap::ReadOptions {
            after: lap::Position(after),
            until: None,
            limit,
            backwards,
        };
        let mut read = self
            .store
            .read(&Self::query(q), options)
            .map_err(|e| e.to_string())?;
        let mut out = ReadOut::default();
        read.visit(usize::MAX, |v| {
            out.events += 1;
            out.bytes += v.data.len() as u64;
            out.last = v.position.get();
        })
        .map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn catch_up(&self, q: &Q, expected: u64) -> Res<ReadOut> {
        let sub = self
            .store
            .subscribe(&Self::query(q), lap::Position(0))
            .map_err(|e| e.to_string())?;
        let mut out = ReadOut::default();
        // The subscription's zero-copy batches (`try_visit`), as Tephra's driver reads its
        // batches' shared buffers: what a projection catching up would use.
        while out.events < expected {
            let seen = sub
                .try_visit(1024, |e| {
                    out.events += 1;
                    out.bytes += e.data.len() as u64;
                    out.last = e.position.get();
                })
                .map_err(|e| e.to_string())?
                .ok_or("lapilli subscription ended")?;
            if seen == 0 {
                return Err(format!("lapilli catch-up stalled at {} of {expected}", out.events));
            }
        }
        Ok(out)
    }

    fn live_latency(&self, tag: &str, n: usize, data_len: usize) -> Res<Vec<Duration>> {
        let head = self.head()?;
        let sub = self
            .store
            .subscribe(&lap::Query::for_tags([tag]), lap::Position(head))
            .map_err(|e| e.to_string())?;
        live_run(
            n,
            data_len,
            tag,
            |ev| self.append(vec![ev], &Cond::None).map(|_| ()),
            |got| loop {
                let batch = sub
                    .next_batch(64, Some(Duration::from_secs(10)))
                    .map_err(|e| e.to_string())?
                    .ok_or("lapilli subscription ended")?;
                if batch.is_empty() {
                    return Err("lapilli live delivery timed out".into());
                }
                for e in &batch {
                    if got(unpack(&e.data)) {
                        return Ok(());
                    }
                }
            },
        )
    }

    fn close(self: Box<Self>) -> Res<()> {
        self.store.close().map_err(|e| e.to_string())
    }

    fn group_commits(&self) -> Option<u64> {
        Some(self.store.group_commits())
    }
}

// ---------------------------------------------------------------- Tephra

use tephra as tp;

pub struct Teph {
    handle: tp::WriteHandle,
    coordinator: Mutex<Option<tp::WriteCoordinator>>,
}

impl Teph {
    fn open(dir: &Path, config: &Config) -> Res<Teph> {
        let set = tp::SegmentSet::open(dir, tp::SegmentConfig::new(config.segment_size as usize))
            .map_err(|e| format!("tephra open: {e}"))?;
        let (coordinator, handle) = tp::WriteCoordinator::start(set, tp::WriterConfig::default())
            .map_err(|e| format!("tephra start: {e}"))?;
        Ok(Teph {
            handle,
            coordinator: Mutex::new(Some(coordinator)),
        })
    }

    fn tags(tags: impl IntoIterator<Item = impl Into<Box<str>>>) -> Res<tp::Tags> {
        let tags = tags
            .into_iter()
            .map(tp::Tag::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        tp::Tags::new(tags).map_err(|e| e.to_string())
    }

    fn query(q: &Q) -> Res<tp::Query> {
        Ok(match q {
            Q::All => tp::Query::all(),
            Q::Tag(t) => tp::Query::item(tp::QueryItem::with_tags(Self::tags([t.as_str()])?)),
        })
    }

    fn item(ty: &str, tag: &str) -> Res<tp::Query> {
        let ty = tp::EventType::new(ty).map_err(|e| e.to_string())?;
        Ok(tp::Query::item(tp::QueryItem::new(
            vec![ty],
            Self::tags([tag])?,
        )))
    }

    fn event(e: Ev) -> Res<tp::Event> {
        let ty = tp::EventType::new(e.ty).map_err(|e| e.to_string())?;
        let tags = Self::tags(e.tags)?;
        tp::Event::new(&ty, &tags, &e.data).map_err(|e| e.to_string())
    }
}

impl System for Teph {
    fn append(&self, events: Vec<Ev>, cond: &Cond) -> Res<Option<u64>> {
        let events = events
            .into_iter()
            .map(Self::event)
            .collect::<Res<Vec<_>>>()?;
        let condition = match cond {
            Cond::None => None,
            Cond::Guard { ty, tag, after } => Some(
                tp::AppendCondition::new(Self::item(ty, tag)?)
                    .after(tp::Position::new(after.unwrap_or(0))),
            ),
            Cond::Exists {
                ty,
                tag,
                after,
                exists_tag,
            } => Some(
                tp::AppendCondition::new(Self::item(ty, tag)?)
                    .after(tp::Position::new(*after))
                    .fail_if_exists(Self::query(&Q::Tag(exists_tag.clone()))?),
            ),
        };
        match self.handle.append(events, condition) {
            Ok(r) => Ok(Some(r.last.get())),
            Err(tp::AppendError::Conflict { .. }) => Ok(None),
            Err(e) => Err(format!("tephra append: {e}")),
        }
    }

    fn head(&self) -> Res<u64> {
        Ok(self.handle.head().get())
    }

    fn read(&self, q: &Q, after: u64, limit: Option<u64>, backwards: bool) -> Res<ReadOut> {
        let q = Self::query(q)?;
        let mut reads = if backwards {
            self.handle.read_back(&q, tp::Position::MAX, limit)
        } else {
            self.handle.read(&q, tp::Position::new(after), limit)
        };
        let mut out = ReadOut::default();
        while let Some(item) = reads.next() {
            let seq = item.map_err(|e| e.to_string())?;
            out.events += 1;
            out.bytes += seq.event.data().len() as u64;
            out.last = seq.position.get();
        }
        Ok(out)
    }

    fn catch_up(&self, q: &Q, expected: u64) -> Res<ReadOut> {
        let mut sub = self
            .handle
            .subscribe(Self::query(q)?, tp::Position::ZERO)
            .with_max_batch_events(1024);
        let mut out = ReadOut::default();
        while out.events < expected {
            let batch = sub.poll_batch().map_err(|e| e.to_string())?;
            if batch.is_empty() {
                return Err(format!(
                    "tephra catch-up stalled at {} of {expected}",
                    out.events
                ));
            }
            for (p, e) in &batch {
                out.events += 1;
                out.bytes += e.data().len() as u64;
                out.last = p.get();
            }
        }
        Ok(out)
    }

    fn live_latency(&self, tag: &str, n: usize, data_len: usize) -> Res<Vec<Duration>> {
        let mut sub = self
            .handle
            .subscribe(Self::query(&Q::Tag(tag.into()))?, self.handle.head());
        live_run(
            n,
            data_len,
            tag,
            |ev| self.append(vec![ev], &Cond::None).map(|_| ()),
            move |got| loop {
                let batch = sub
                    .next_batch()
                    .ok_or("tephra subscription ended")?
                    .map_err(|e| e.to_string())?;
                for (_, e) in &batch {
                    if got(unpack(e.data())) {
                        return Ok(());
                    }
                }
            },
        )
    }

    fn close(self: Box<Self>) -> Res<()> {
        let Teph {
            handle,
            coordinator,
        } = *self;
        drop(handle);
        if let Some(c) = coordinator.into_inner().unwrap() {
            drop(c.shutdown());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- UmaDB

use std::sync::Arc;
use umadb_core::db::UmaDb;
use umadb_core::mvcc::{Mvcc, StorageOptions};
use umadb_core::writer_thread_request::WriterThreadRequest;
use umadb_dcb::{
    DcbAppendCondition, DcbError, DcbEvent, DcbEventStoreSync, DcbQuery, DcbQueryItem,
};

/// The batch limit UmaDB's own server passes to its writer thread (`APPEND_BATCH_MAX_EVENTS`).
pub const UMADB_APPEND_BATCH_MAX_EVENTS: usize = 2000;

pub struct Uma {
    db: UmaDb,
    requests: tokio::sync::mpsc::Sender<WriterThreadRequest>,
    writer: Mutex<Option<JoinHandle<()>>>,
    _path: PathBuf,
}

impl Uma {
    fn open(dir: &Path) -> Res<Uma> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        // `Mvcc::new` prints its settings to stdout: the harness's own output goes to stderr
        // and files, so these lines are harmless.
        let mvcc = Arc::new(
            Mvcc::new(false, StorageOptions::default().db_path(dir))
                .map_err(|e| format!("umadb open: {e}"))?,
        );
        let (requests, incoming) = tokio::sync::mpsc::channel(4096);
        let (head_tx, _head_rx) = tokio::sync::watch::channel(None);
        let writer_mvcc = mvcc.clone();
        let writer = std::thread::Builder::new()
            .name("umadb-writer".into())
            .spawn(move || {
                umadb_core::writer_thread_blocking::writer_thread_blocking(
                    writer_mvcc,
                    incoming,
                    head_tx,
                    UMADB_APPEND_BATCH_MAX_EVENTS,
                )
            })
            .map_err(|e| e.to_string())?;
        Ok(Uma {
            db: UmaDb::from_arc(mvcc),
            requests,
            writer: Mutex::new(Some(writer)),
            _path: dir.into(),
        })
    }

    fn query(q: &Q) -> Option<DcbQuery> {
        match q {
            Q::All => None,
            Q::Tag(t) => Some(DcbQuery {
                items: vec![DcbQueryItem {
                    types: vec![],
                    tags: vec![t.clone()],
                }],
            }),
        }
    }
}

impl System for Uma {
    fn append(&self, events: Vec<Ev>, cond: &Cond) -> Res<Option<u64>> {
        let events = events
            .into_iter()
            .map(|e| DcbEvent {
                event_type: e.ty.to_string(),
                tags: e.tags,
                data: e.data,
                uuid: None,
                metadata: vec![],
            })
            .collect();
        let condition = match cond {
            Cond::None => None,
            Cond::Guard { ty, tag, after } => Some(DcbAppendCondition {
                fail_if_events_match: DcbQuery {
                    items: vec![DcbQueryItem {
                        types: vec![ty.to_string()],
                        tags: vec![tag.clone()],
                    }],
                },
                after: *after,
            }),
            Cond::Exists { .. } => return Err(unsupported(Kind::Umadb, "exists").unwrap().into()),
        };
        let (reply, response) = tokio::sync::oneshot::channel();
        self.requests
            .blocking_send(WriterThreadRequest::Append {
                events,
                condition,
                tracking_info: None,
                response_tx: reply,
                cancel: None,
            })
            .map_err(|_| "umadb writer thread gone".to_string())?;
        match response
            .blocking_recv()
            .map_err(|_| "umadb writer dropped the reply".to_string())?
        {
            Ok(last) => Ok(Some(last)),
            Err(DcbError::IntegrityError(_)) => Ok(None),
            Err(e) => Err(format!("umadb append: {e}")),
        }
    }

    fn head(&self) -> Res<u64> {
        Ok(self.db.head().map_err(|e| e.to_string())?.unwrap_or(0))
    }

    fn read(&self, q: &Q, after: u64, limit: Option<u64>, backwards: bool) -> Res<ReadOut> {
        // UmaDB's `start` is inclusive.
        let start = if backwards || after == 0 {
            None
        } else {
            Some(after + 1)
        };
        let limit = limit.map(|l| l.min(u32::MAX as u64) as u32);
        let read = self
            .db
            .read(Self::query(q), start, backwards, limit)
            .map_err(|e| e.to_string())?;
        let mut out = ReadOut::default();
        for e in read {
            let e = e.map_err(|e| e.to_string())?;
            out.events += 1;
            out.bytes += e.event.data.len() as u64;
            out.last = e.position;
        }
        Ok(out)
    }

    fn catch_up(&self, _q: &Q, _expected: u64) -> Res<ReadOut> {
        Err(unsupported(Kind::Umadb, "subscribe").unwrap().into())
    }

    fn live_latency(&self, _tag: &str, _n: usize, _data_len: usize) -> Res<Vec<Duration>> {
        Err(unsupported(Kind::Umadb, "subscribe").unwrap().into())
    }

    fn close(self: Box<Self>) -> Res<()> {
        let Uma {
            db,
            requests,
            writer,
            ..
        } = *self;
        let _ = requests.blocking_send(WriterThreadRequest::Shutdown);
        drop(requests);
        if let Some(w) = writer.into_inner().unwrap() {
            w.join().map_err(|_| "umadb writer panicked".to_string())?;
        }
        drop(db);
        Ok(())
    }
}
