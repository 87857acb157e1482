//! The PostgreSQL backend (feature `postgres`): the same contract as the embedded store, kept by
//! a server that many processes on many machines share. `ARCHITECTURE.md`, "The PostgreSQL
//! backend", has the correctness argument; in short:
//!
//! - one table of events per context (`lapilli_events_<context>`) and one row per context in
//!   `lapilli_contexts` holding its head;
//! - one writer thread per handle group-commits its callers' appends: it locks the context's
//!   row (`SELECT ... FOR UPDATE`), checks each append's condition in order against the table
//!   and the earlier appends of the group, inserts the accepted ones at head + 1..., moves the
//!   head and commits. The row lock serialises writers of every process, so positions are
//!   gapless and in commit order, and the head row says which prefix is committed;
//! - readers read the head row, then events at or below it: only ever a committed prefix;
//! - subscriptions follow the head through `LISTEN/NOTIFY`, and a poll of the head row for
//!   connections (poolers) that drop `LISTEN`.

mod listen;
mod read;
mod sql;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::{Client, NoTls};

use crate::completion::Completions;
use crate::error::{Error, ErrorKind, Result};
use crate::options::{Durability, QUEUE_DEPTH};
use crate::read::Published;

pub(crate) use read::PgRead;
pub(crate) use writer::PgAppend;

/// The schema this build writes and reads. A context whose row says more was made by a newer
/// Lapilli and is refused; one that says less would be migrated here (there is none yet).
pub(crate) const SCHEMA_VERSION: i32 = 1;
/// The most connections a handle lends to reads at once, unless `?max_connections=` says
/// otherwise (as many are kept open when idle); its writer and its listener have one each
/// besides.
const DEFAULT_READ_CONNECTIONS: usize = 32;
/// How often the head row is polled when no notification arrives (the fallback for poolers
/// that drop `LISTEN`); `?poll_ms=` in the URL changes it.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// The URL parameters Lapilli reads itself; each may be given once.
const LAPILLI_KEYS: [&str; 7] = ["context", "poll_ms", "max_connections", "sslmode", "sslrootcert", "sslcert", "sslkey"];
/// How long a pooled connection that failed a read gets to show it is still alive.
const STALE_CHECK: Duration = Duration::from_secs(5);

/// How to reach the server: the driver's configuration and the TLS the URL asked for.
pub(crate) struct Connector {
    config: postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl Connector {
    pub fn connect(&self, redacted: &str) -> Result<Client> {
        let connected = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        let mut client = connected.map_err(|e| pg_error(&format!("cannot connect to {redacted}"), &e))?;
        // No JIT for reads either (a page's look of a common query on a context of millions
        // crosses jit_above_cost, and compiling costs more than running it). A session `SET`,
        // not the startup packet's `options`, which PgBouncer refuses; behind a transaction
        // pooler it reaches one server connection only, so the writer sets it again in each of
        // its transactions.
        client.batch_execute("SET jit = off").map_err(|e| pg_error(&format!("cannot set up the connection to {redacted}"), &e))?;
        Ok(client)
    }
}

/// Unless the URL sets them (`connect_timeout=`, `tcp_user_timeout=`, `keepalives_idle=`,
/// `keepalives_interval=`): how long a connection attempt may take; how long sent data, or a
/// keepalive probe, may go unacknowledged before the connection is dropped; how long a
/// connection may be idle before the first probe, and the time between probes. A silent server
/// is then an `Io` error within about a minute. The cost: a server that stops reading (a zero
/// window, as a backend stalled on I/O might) for longer than the user timeout has the
/// connection dropped too, its group answered as not committed.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(30);
const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);

/// What every thread of a Postgres handle shares.
pub(crate) struct PgShared {
    pub connector: Connector,
    /// The URL with its password replaced, for messages and `Store::path`.
    pub redacted: String,
    pub context: String,
    /// The context's events table, quoted.
    pub events: String,
    /// The `LISTEN/NOTIFY` channel of the context, quoted.
    pub channel: String,
    pub published: Arc<Published>,
    pool: Mutex<Pool>,
    /// Signalled when a lent connection comes back (a reader may be waiting at the cap).
    returned: Condvar,
    /// The most connections lent to reads at once (`?max_connections=`).
    max_lent: usize,
    pub poll: Duration,
    /// Statements reads have sent for events (`PgRead`'s looks), for tests of what a read or a
    /// subscription costs.
    pub looks: std::sync::atomic::AtomicU64,
}

/// The read connections of a handle: the idle ones, and how many are lent to reads now.
struct Pool {
    idle: Vec<Client>,
    lent: usize,
    /// The handle was closed: a connection coming back is closed, not kept (a read still
    /// running at close would otherwise leave one open for as long as the `Store` lives).
    closed: bool,
}

/// A connection lent to a read; it goes back to the pool (or, failed, is closed) and frees its
/// place under the cap when dropped, whatever way the read ends, a panic included.
struct Lent<'a> {
    shared: &'a PgShared,
    client: Option<Client>,
    /// It came from the idle pool (so it may have gone stale while waiting there).
    pooled: bool,
    /// Keep it for the next read: set after a read that succeeded on it.
    keep: bool,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let client = self.client.take().filter(|c| self.keep && !c.is_closed());
        let client = client.map(|mut c| {
            discard_notifications(&mut c);
            c
        });
        let mut pool = self.shared.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.lent -= 1;
        // Kept up to the cap's size (fewer would open and close connections under a load the
        // cap allows); a connection not kept is closed after the lock is released.
        let surplus = match client {
            Some(client) if !pool.closed && pool.idle.len() < self.shared.max_lent => {
                pool.idle.push(client);
                None
            }
            other => other,
        };
        drop(pool);
        self.shared.returned.notify_one();
        drop(surplus);
    }
}

impl PgShared {
    /// A connection for a read: an idle one, or a new one; when `max_lent` are lent already,
    /// waits for one to come back, so a burst of readers queues here rather than opening a
    /// server process each until the server refuses (`max_connections`, 100 by default).
    fn lend(&self) -> Result<Lent<'_>> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        while pool.lent >= self.max_lent {
            pool = self.returned.wait(pool).unwrap_or_else(|p| p.into_inner());
        }
        pool.lent += 1;
        let idle = pool.idle.pop();
        drop(pool);
        let mut lent = Lent { shared: self, client: None, pooled: false, keep: false };
        match idle {
            Some(client) if !client.is_closed() => {
                lent.client = Some(client);
                lent.pooled = true;
            }
            // On failure `lent` drops here and frees its place.
            _ => lent.client = Some(self.connector.connect(&self.redacted)?),
        }
        Ok(lent)
    }

    /// Runs `work` (a read: safe to run twice) on a lent connection; a connection that failed
    /// is dropped, not pooled.
    ///
    /// A pooled connection the server closed while it was idle (a restart, a failover, a
    /// pooler's idle timeout) only says so when used: then the pool is emptied, since its other
    /// connections went the same way, and `work` runs once more on a new connection. Before,
    /// each of up to `max_connections` reads after a restart failed with `Io` in turn.
    pub fn with_client<T>(&self, mut work: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        let mut lent = self.lend()?;
        let client = lent.client.as_mut().expect("a lent connection");
        let mut outcome = work(client);
        if outcome.is_err() && lent.pooled && client.is_valid(STALE_CHECK).is_err() {
            self.pool.lock().unwrap_or_else(|p| p.into_inner()).idle.clear();
            // The place under the cap stays this read's while it connects again.
            lent.client = Some(self.connector.connect(&self.redacted)?);
            outcome = work(lent.client.as_mut().expect("a new connection"));
        }
        lent.keep = outcome.is_ok();
        outcome
    }

    /// The committed head, read from the context's row; also published to this handle's
    /// subscribers if it moved.
    pub fn fetch_head(&self) -> Result<u64> {
        let head = self.with_client(|client| sql::head(client, &self.context, &self.redacted))?;
        self.published.publish_head_at_least(head);
        Ok(head)
    }
}

/// An open Postgres store handle: its writer (none when read-only) and its listener.
pub(crate) struct PgStore {
    pub shared: Arc<PgShared>,
    queue: Option<SyncSender<writer::Command>>,
    threads: Mutex<Option<(Option<JoinHandle<()>>, JoinHandle<()>)>>,
    stop_listening: Arc<AtomicBool>,
}

impl PgStore {
    /// Connects, creates the schema and the context if missing (refusing a newer schema),
    /// reads the head, and starts the listener and (unless `read_only`) the writer.
    pub fn open(
        url: &str,
        durability: Durability,
        read_only: bool,
        published: Arc<Published>,
        completions: Arc<Completions>,
    ) -> Result<PgStore> {
        let parsed = parse_url(url)?;
        let mut client = parsed.connector.connect(&parsed.redacted)?;
        sql::check_encoding(&mut client, &parsed.redacted, read_only)?;
        sql::create_schema(&mut client, &parsed.context, &parsed.redacted, read_only)?;
        let head = sql::head(&mut client, &parsed.context, &parsed.redacted)?;
        published.publish_head(head);
        let events = sql::quote_ident(&format!("lapilli_events_{}", parsed.context));
        let channel = sql::quote_ident(&format!("lapilli_{}", parsed.context));
        let merge_tags = match read_only {
            true => None,
            false => sql::merge_tags_call(&mut client, &parsed.context, &parsed.redacted)?,
        };
        let shared = Arc::new(PgShared {
            connector: parsed.connector,
            redacted: parsed.redacted,
            context: parsed.context,
            events,
            channel,
            published,
            pool: Mutex::new(Pool { idle: vec![client], lent: 0, closed: false }),
            returned: Condvar::new(),
            max_lent: parsed.max_connections,
            poll: parsed.poll,
            looks: Default::default(),
        });
        let stop_listening = Arc::new(AtomicBool::new(false));
        let listener = {
            let shared = shared.clone();
            let stop = stop_listening.clone();
            std::thread::Builder::new()
                .name("lapilli-pg-listen".into())
                .spawn(move || listen::run(shared, stop))
                .map_err(|e| Error::io("cannot start the listener thread", &e))?
        };
        let (queue, writer) = if read_only {
            (None, None)
        } else {
            let (queue, incoming) = sync_channel(QUEUE_DEPTH);
            let writer = writer::PgWriter::new(shared.clone(), durability, merge_tags);
            let thread = std::thread::Builder::new()
                .name("lapilli-pg-writer".into())
                .spawn(move || {
                    // Answers go to the completion thread, one push per group.
                    let _deferred = completions.defer_here();
                    writer.run(incoming)
                })
                .map_err(|e| Error::io("cannot start the writer thread", &e))?;
            (Some(queue), Some(thread))
        };
        Ok(PgStore { shared, queue, threads: Mutex::new(Some((writer, listener))), stop_listening })
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.shared.redacted)
    }

    pub fn is_read_only(&self) -> bool {
        self.queue.is_none()
    }

    /// Hands a validated, encoded append to the writer.
    pub fn submit(&self, append: PgAppend) {
        // A send after the writer stopped drops the append, whose reply answers `Closed`.
        if let Some(queue) = &self.queue {
            self.shared.published.counters.enqueued();
            let _ = queue.send(writer::Command::Append(append));
        }
    }

    /// Answers every queued append, stops the writer and the listener.
    pub fn close(&self) {
        let Some((writer, listener)) = self.threads.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Some(queue) = &self.queue {
            let _ = queue.send(writer::Command::Shutdown);
        }
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        self.stop_listening.store(true, Ordering::Release);
        let _ = listener.join();
        let idle = {
            let mut pool = self.shared.pool.lock().unwrap_or_else(|p| p.into_inner());
            pool.closed = true;
            std::mem::take(&mut pool.idle)
        };
        self.shared.returned.notify_all();
        drop(idle);
    }
}

struct ParsedUrl {
    connector: Connector,
    redacted: String,
    context: String,
    poll: Duration,
    max_connections: usize,
}

/// Splits off the parameters that are Lapilli's (`context`, `poll_ms`, `max_connections`), the TLS modes the
/// driver does not know (`verify-ca`, `verify-full`), the certificate authority to trust
/// (`sslrootcert`) and the client's certificate and key (`sslcert`, `sslkey`), and hands the
/// rest to the driver.
fn parse_url(url: &str) -> Result<ParsedUrl> {
    let redacted = redact(url);
    let bad = |why: String| Error::invalid(format!("location {redacted:?}: {why}"));
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut context = None;
    let mut poll = DEFAULT_POLL;
    let mut max_connections = DEFAULT_READ_CONNECTIONS;
    let mut tls = false;
    let mut root_cert: Option<String> = None;
    let mut client_cert: Option<String> = None;
    let mut client_key: Option<String> = None;
    let mut kept = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    // The driver's parameters whose defaults Lapilli replaces unless given (decoded names).
    let (mut given_keepalives_idle, mut given_keepalives_interval) = (false, false);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (raw_key, value) = pair.split_once('=').unwrap_or((pair, ""));
        // Keys are matched as the driver will read them, decoded: `ssl%6Dode=disable` must not
        // slip past the TLS rules below as an unknown key and then turn TLS off in the driver.
        let key = percent_decode(raw_key).map_err(|why| bad(format!("a parameter name: {why}")))?;
        let key = key.as_str();
        given_keepalives_idle |= key == "keepalives_idle";
        given_keepalives_interval |= key == "keepalives_interval";
        if LAPILLI_KEYS.contains(&key) {
            // Given twice, one would silently win: `sslmode=verify-full&...&sslmode=disable`
            // would turn off the TLS the first asked for, `sslrootcert=/ca.pem&sslrootcert=system`
            // widen what is trusted, a second `sslcert` change who the store connects as.
            if seen.contains(&key.to_string()) {
                return Err(bad(format!("{key} is given twice")));
            }
            seen.push(key.to_string());
        }
        match key {
            "context" => context = Some(value.to_string()),
            // As libpq: a PEM file of the authorities to trust instead of the default ones (a
            // private CA, a cloud provider's bundle), or `system` for the default. Unlike
            // libpq, the default is the web's roots built into Lapilli (webpki-roots), not the
            // operating system's store. Percent escapes are decoded, so a path with spaces or
            // `&` can be given.
            "sslrootcert" => root_cert = Some(percent_decode(value).map_err(|why| bad(format!("sslrootcert: {why}")))?),
            // As libpq: the client's certificate (a PEM chain, its own first) and its private
            // key (PEM: PKCS#8, PKCS#1 or SEC1, not encrypted), for servers that authenticate
            // clients by certificate (`cert` in pg_hba.conf). Unlike libpq, nothing is looked
            // for in ~/.postgresql: a certificate is used only when the URL names it.
            "sslcert" => client_cert = Some(percent_decode(value).map_err(|why| bad(format!("sslcert: {why}")))?),
            "sslkey" => client_key = Some(percent_decode(value).map_err(|why| bad(format!("sslkey: {why}")))?),
            "sslpassword" => {
                return Err(bad(
                    "sslpassword is not supported: the client key must be unencrypted (decrypt it with \
                     `openssl pkey -in KEY -out PLAIN_KEY`)"
                        .to_string(),
                ));
            }
            "max_connections" => {
                max_connections = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| bad(format!("max_connections is {value:?}; it must be 1 to 1000")))?;
            }
            "poll_ms" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|ms| (1..=60_000).contains(ms))
                    .ok_or_else(|| bad(format!("poll_ms is {value:?}; it must be 1 to 60000 milliseconds")))?;
                poll = Duration::from_millis(ms);
            }
            "sslmode" => match value {
                "disable" | "prefer" => kept.push(pair.to_string()),
                // Certificates are always verified against the web's root authorities: asking
                // for TLS at all is asking for the server to be who it says.
                "require" | "verify-ca" | "verify-full" => {
                    tls = true;
                    kept.push("sslmode=require".to_string());
                }
                other => {
                    return Err(bad(format!(
                        "sslmode is {other:?}; it must be disable, prefer, require, verify-ca or verify-full"
                    )));
                }
            },
            _ => kept.push(pair.to_string()),
        }
    }
    let context = context.unwrap_or_else(|| "default".to_string());
    let valid = !context.is_empty()
        && context.len() <= 40
        && context.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Err(bad(format!(
            "context is {context:?}; it must be 1 to 40 characters of a-z, 0-9 and _ (it names tables)"
        )));
    }
    let driver_url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: postgres::Config =
        driver_url.parse().map_err(|e: postgres::Error| bad(format!("not a PostgreSQL URL the driver accepts: {e}")))?;
    if config.get_application_name().is_none() {
        config.application_name("lapilli");
    }
    // The driver's own defaults are no connect timeout and a first keepalive after two hours:
    // a server gone silent (a partition, no reset) left a commit, a read or the listener's
    // poll waiting for as long as TCP retransmits, some fifteen minutes, and `writer::resolve`
    // twenty connection attempts of the SYN timeout each. The URL's own values stand.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
    }
    if !given_keepalives_idle {
        config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
    }
    if !given_keepalives_interval {
        config.keepalives_interval(DEFAULT_KEEPALIVES_INTERVAL);
    }
    // Nothing is added to the startup packet's `options` (JIT is turned off after connecting,
    // see `Connector::connect`, and per writer transaction): PgBouncer refuses a connection
    // whose `options` sets a parameter it does not track, at its default settings.
    let client = match (client_cert, client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) if tls => Some(client_certificate(&cert, &key).map_err(bad)?),
        (Some(cert), Some(_)) => {
            return Err(bad(format!(
                "sslcert is {cert:?} but sslmode does not ask for TLS; use sslmode=require or verify-full"
            )));
        }
        (Some(cert), None) => return Err(bad(format!("sslcert is {cert:?} but no sslkey names its private key"))),
        (None, Some(key)) => return Err(bad(format!("sslkey is {key:?} but no sslcert names its certificate"))),
    };
    let tls = match (tls, root_cert.as_deref()) {
        (false, None) => None,
        // libpq would use no certificate at `prefer` (or none at all at `disable`): a URL that
        // names an authority without asking for TLS is a mistake to say, not a silent
        // plaintext connection its author believes verified.
        (false, Some(path)) => {
            return Err(bad(format!(
                "sslrootcert is {path:?} but sslmode does not ask for TLS; use sslmode=require or verify-full"
            )));
        }
        (true, None | Some("system")) => {
            Some(tls_connector(rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() }, client))
        }
        (true, Some(path)) => Some(tls_connector(root_certificates(path).map_err(bad)?, client)),
    };
    Ok(ParsedUrl { connector: Connector { config, tls }, redacted, context, poll, max_connections })
}

/// `url` with its passwords replaced by `***`: the one in its user info, a `password=`
/// parameter (the driver takes either), and an `sslpassword=` (libpq's passphrase of an
/// encrypted client key, which is refused, but not repeated in the refusal).
fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let query = query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| {
                // The driver decodes keys: `pass%77ord=` is a password too.
                let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                if percent_decode(key).is_ok_and(|key| key == "password" || key == "sslpassword") {
                    format!("{key}=***")
                } else {
                    pair.to_string()
                }
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    let query = query.unwrap_or_default();
    let Some((scheme, rest)) = base.split_once("://") else { return format!("{base}{query}") };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}{query}"),
            None => format!("{base}{query}"),
        },
        None => format!("{base}{query}"),
    }
}

/// A driver error as the contract's kinds: every failure to reach or hear from the server is
/// `Io` (the message says which operation and what the server said).
pub(crate) fn pg_error(context: &str, err: &postgres::Error) -> Error {
    let kind = if err.is_closed() { std::io::ErrorKind::ConnectionAborted } else { std::io::ErrorKind::Other };
    Error::io_message(format!("{context}: {}", error_detail(err)), kind)
}

/// What went wrong, in the server's words and code, or the driver's and its causes'.
pub(crate) fn error_detail(err: &postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        // The driver's message says what step failed ("error performing TLS handshake"); its
        // sources say why ("invalid peer certificate: UnknownIssuer"), which is what a user
        // can act on.
        None => {
            let mut detail = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !detail.contains(&cause_text) {
                    detail.push_str(": ");
                    detail.push_str(&cause_text);
                }
                source = cause.source();
            }
            detail
        }
    }
}

/// The most data one event may hold on a Postgres store. A row goes to the server as one
/// protocol message, and the server refuses a message of 1 GiB or more ("invalid message
/// length") by dropping the connection, which fails the writer's whole group: measured, data of
/// 1,073,741,700 bytes was written and read back, of 1,073,741,800 refused. The margin below
/// 1 GiB covers the row's other fields (at most 255 tags of 1 KiB) and the smaller rows the
/// copy may send in the same message (up to 4 KiB).
pub(crate) const MAX_DATA_BYTES: usize = (1 << 30) - (1 << 20);

/// What PostgreSQL cannot store that the embedded log can, refused (`InvalidArgument`) before
/// it reaches the writer: `text` holds no U+0000, so an event whose type or tag has one, and
/// data over `MAX_DATA_BYTES` (the embedded log's `max_event_bytes` may be up to 4 GiB).
pub(crate) fn check_storable(index: usize, event: &crate::event::Event) -> Result<()> {
    if event.data.len() > MAX_DATA_BYTES {
        return Err(Error::invalid(format!(
            "event {index}: its data is {} bytes; a PostgreSQL store holds at most {MAX_DATA_BYTES} bytes of data \
             per event (the server takes no message of 1 GiB)",
            event.data.len()
        )));
    }
    let texts = std::iter::once(("type".to_string(), &event.event_type))
        .chain(event.tags.iter().enumerate().map(|(t, tag)| (format!("tag {t}"), tag)));
    for (what, text) in texts {
        if text.contains('\0') {
            return Err(Error::invalid(format!(
                "event {index}: {what} is {text:?}, which holds U+0000; a PostgreSQL store cannot hold it in text"
            )));
        }
    }
    Ok(())
}

pub(crate) fn newer_schema(redacted: &str, context: &str, found: i32) -> Error {
    Error::new(
        ErrorKind::Corruption,
        format!(
            "context {context:?} in {redacted} has schema version {found}; this Lapilli reads version {SCHEMA_VERSION} \
             and older: open it with a newer Lapilli"
        ),
    )
}

/// A client certificate chain and its key, as one signing identity (checked at open).
type ClientCertificate = Arc<rustls::sign::CertifiedKey>;

fn tls_connector(roots: rustls::RootCertStore, client: Option<ClientCertificate>) -> tokio_postgres_rustls::MakeRustlsConnect {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots);
    let config = match client {
        Some(client) => builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(client))),
        None => builder.with_no_client_auth(),
    };
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// The client certificate chain at `cert_path` and the private key at `key_path`, read and
/// checked against each other at open (and only then: a certificate rotated on disk is used
/// from the next open), so a missing file, a file that is not PEM, an encrypted key, a key
/// ring cannot sign with, a certificate rustls cannot use or the key of another certificate is
/// refused naming the file and the reason, not met later as a failed handshake.
fn client_certificate(cert_path: &str, key_path: &str) -> std::result::Result<ClientCertificate, String> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let chain = pem_certificates("sslcert", cert_path)?;
    let pem = std::fs::read(key_path).map_err(|e| format!("sslkey {key_path:?} cannot be read: {e}"))?;
    // Both encrypted forms (PKCS#8's ENCRYPTED PRIVATE KEY, and the legacy Proc-Type header)
    // would otherwise be reported as "no items found" or a base64 error.
    if pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED") {
        return Err(format!(
            "sslkey {key_path:?} is encrypted; Lapilli reads unencrypted keys only (decrypt it with \
             `openssl pkey -in KEY -out PLAIN_KEY`)"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("sslkey {key_path:?} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider.key_provider.load_private_key(key).map_err(|e| {
        format!("sslkey {key_path:?} cannot be used: {e} (usable: RSA of 2048 to 8192 bits, ECDSA P-256 or P-384, Ed25519)")
    })?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // Unknown: the key cannot tell its public key (not the case with ring's keys).
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(Arc::new(certified)),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Err(format!(
            "sslkey {key_path:?} is not the key of the first certificate in sslcert {cert_path:?} (the client's \
             own certificate must come first, its intermediates after it)"
        )),
        Err(e) => Err(format!(
            "the first certificate in sslcert {cert_path:?} cannot be used: {e} (rustls takes X.509 v3 \
             certificates: issue it with an -extfile of v3 extensions)"
        )),
    }
}

/// The certificates of the PEM file at `path` as trust anchors; a file that cannot be read or
/// holds no usable certificate is refused at open, naming the file, rather than at the first
/// connection as an unexplained handshake failure.
fn root_certificates(path: &str) -> std::result::Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem_certificates("sslrootcert", path)? {
        roots.add(cert).map_err(|e| format!("sslrootcert {path:?} holds a certificate that cannot be used: {e}"))?;
    }
    Ok(roots)
}

/// The certificates of the PEM file at `path`, which the URL parameter `parameter` names (in
/// the messages): at least one, or why not.
fn pem_certificates(
    parameter: &str,
    path: &str,
) -> std::result::Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| format!("{parameter} {path:?} cannot be read: {e}"))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("{parameter} {path:?} is not a PEM file of certificates: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("{parameter} {path:?} holds no certificate"));
    }
    Ok(certificates)
}

/// `%XX` escapes decoded (a URL's query value); anything else is kept as it is.
fn percent_decode(value: &str) -> std::result::Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
            let Some(hex) = hex else { return Err(format!("{value:?} has a bad % escape")) };
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{value:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_server_is_given_up_on_within_a_minute_unless_the_url_says_otherwise() {
        let config = parse_url("postgresql://u@h/db").unwrap().connector.config;
        assert_eq!(config.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(config.get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));
        assert_eq!(config.get_keepalives_idle(), DEFAULT_KEEPALIVES_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(DEFAULT_KEEPALIVES_INTERVAL));
        let config =
            parse_url("postgresql://u@h/db?connect_timeout=3&tcp_user_timeout=7&keepalives%5Fidle=7200&keepalives_interval=5")
                .unwrap()
                .connector
                .config;
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(7200));
        assert_eq!(config.get_keepalives_interval(), Some(Duration::from_secs(5)));
        // Another parameter's value that merely contains the name sets nothing.
        let config = parse_url("postgresql://u@h/db?application_name=keepalives_idle=1").unwrap().connector.config;
        assert_eq!(config.get_keepalives_idle(), DEFAULT_KEEPALIVES_IDLE);
    }

    #[test]
    fn urls_are_checked_and_redacted() {
        assert_eq!(redact("postgresql://u:secret@h:5/db?context=c"), "postgresql://u:***@h:5/db?context=c");
        assert_eq!(redact("postgresql://u@h/db"), "postgresql://u@h/db");
        assert_eq!(redact("postgresql://h/db?password=pw&context=c"), "postgresql://h/db?password=***&context=c");
        assert_eq!(redact("postgresql://u:a@h/db?x=1&password=b"), "postgresql://u:***@h/db?x=1&password=***");
        assert_eq!(redact("postgresql://h/db?sslkey=/k&sslpassword=s"), "postgresql://h/db?sslkey=/k&sslpassword=***");
        assert_eq!(redact("postgresql://h/db?ssl%70assword=s"), "postgresql://h/db?ssl%70assword=***");
        let parsed = parse_url("postgresql://u:pw@localhost:5432/db?context=courses&poll_ms=20").unwrap();
        assert_eq!(parsed.context, "courses");
        assert_eq!(parsed.poll, Duration::from_millis(20));
        assert!(parsed.connector.tls.is_none());
        assert!(parse_url("postgresql://u@h/db?sslmode=verify-full").unwrap().connector.tls.is_some());
        assert!(parse_url("postgresql://u@h/db?sslmode=verify-full&sslrootcert=system").unwrap().connector.tls.is_some());
        assert_eq!(percent_decode("/a%20b%26c.pem").unwrap(), "/a b&c.pem");
        for (url, named) in [
            ("postgresql://u:pw@h/db?context=Bad-Name", "\"Bad-Name\""),
            ("postgresql://h/db?poll_ms=0", "poll_ms"),
            ("postgresql://h/db?max_connections=0", "max_connections"),
            ("postgresql://h/db?max_connections=many", "many"),
            ("postgresql://h/db?sslmode=sometimes", "sometimes"),
            ("postgresql://h/db?nonsense=1", "nonsense"),
            ("postgresql://h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem", "sslrootcert \"/no/such/ca.pem\" cannot be read"),
            ("postgresql://h/db?sslrootcert=/etc/hostname", "sslmode"),
            ("postgresql://h/db?sslmode=require&sslrootcert=/etc/hostname", "holds no certificate"),
            ("postgresql://h/db?sslmode=require&sslrootcert=%zz", "bad % escape"),
            ("postgresql://h/db?sslmode=verify-full&sslcert=/no/such/client.pem", "no sslkey"),
            ("postgresql://h/db?sslmode=verify-full&sslkey=/no/such/client.key", "no sslcert"),
            ("postgresql://h/db?sslcert=/c.pem&sslkey=/c.key", "sslmode"),
            ("postgresql://h/db?sslmode=verify-full&sslcert=/no/such/client.pem&sslkey=/k", "sslcert \"/no/such/client.pem\" cannot be read"),
            ("postgresql://h/db?sslmode=verify-full&sslcert=/etc/hostname&sslkey=/k", "holds no certificate"),
            ("postgresql://h/db?sslmode=verify-full&sslcert=%zz&sslkey=/k", "bad % escape"),
            ("postgresql://h/db?sslmode=require&sslmode=disable", "sslmode is given twice"),
            ("postgresql://h/db?sslmode=require&sslrootcert=/a.pem&sslrootcert=system", "sslrootcert is given twice"),
            ("postgresql://h/db?sslmode=require&sslcert=/a&ssl%63ert=/b&sslkey=/k", "sslcert is given twice"),
            ("postgresql://h/db?sslmode=require&sslkey=/a&sslkey=/b", "sslkey is given twice"),
            ("postgresql://h/db?context=a&context=b", "context is given twice"),
            ("postgresql://h/db?sslmode=require&sslpassword=pw", "sslpassword is not supported"),
        ] {
            let Err(err) = parse_url(url) else { panic!("{url} was accepted") };
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}");
            assert!(err.message().contains(named), "{}", err.message());
            assert!(!err.message().contains("pw@") && !err.message().contains("=pw"), "the password leaked: {}", err.message());
        }
    }
}

/// Drops the notifications buffered on a connection that never listens (a read's, the
/// writer's). Through a pooler in transaction mode such a connection can be lent a server
/// connection that a listener's LISTEN left registered, and then receives its NOTIFYs; the
/// driver buffers them without limit and only a listener ever takes them, so a pooled handle's
/// memory grew with every commit of the context (seen in PgBouncer 1.18's log as notifications
/// arriving on other clients' transactions).
pub(crate) fn discard_notifications(client: &mut Client) {
    // The non-blocking iterator yields what is buffered or already readable, never waits.
    let _ = postgres::fallible_iterator::FallibleIterator::count(client.notifications().iter());
}
