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
use std::sync::{Arc, Mutex};
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
/// Idle connections kept for reads; more are opened when needed and closed after use (a new
/// connection costs a server process: milliseconds, so keep enough for many readers).
const POOLED_CONNECTIONS: usize = 32;
/// How often the head row is polled when no notification arrives (the fallback for poolers
/// that drop `LISTEN`); `?poll_ms=` in the URL changes it.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
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
    pool: Mutex<Vec<Client>>,
    pub poll: Duration,
}

impl PgShared {
    /// A connection for a read, and whether it waited in the pool; give it back with
    /// [`PgShared::give_back`].
    pub fn take(&self) -> Result<(Client, bool)> {
        let pooled = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match pooled {
            Some(client) if !client.is_closed() => Ok((client, true)),
            _ => Ok((self.connector.connect(&self.redacted)?, false)),
        }
    }

    pub fn give_back(&self, mut client: Client) {
        if client.is_closed() {
            return;
        }
        discard_notifications(&mut client);
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOLED_CONNECTIONS {
            pool.push(client);
        }
    }

    /// Runs `work` (a read: safe to run twice) on a pooled connection; a connection that failed
    /// is dropped, not pooled.
    ///
    /// A pooled connection the server closed while it was idle (a restart, a failover, a
    /// pooler's idle timeout) only says so when used: then the pool is emptied, since its other
    /// connections went the same way, and `work` runs once more on a new connection. Before,
    /// each of up to `POOLED_CONNECTIONS` reads after a restart failed with `Io` in turn.
    pub fn with_client<T>(&self, mut work: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        let (mut client, pooled) = self.take()?;
        let mut outcome = work(&mut client);
        if outcome.is_err() && pooled && client.is_valid(STALE_CHECK).is_err() {
            self.pool.lock().unwrap_or_else(|p| p.into_inner()).clear();
            client = self.connector.connect(&self.redacted)?;
            outcome = work(&mut client);
        }
        if outcome.is_ok() {
            self.give_back(client);
        }
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
        sql::create_schema(&mut client, &parsed.context, &parsed.redacted, read_only)?;
        let head = sql::head(&mut client, &parsed.context, &parsed.redacted)?;
        published.publish_head(head);
        let events = sql::quote_ident(&format!("lapilli_events_{}", parsed.context));
        let channel = sql::quote_ident(&format!("lapilli_{}", parsed.context));
        let shared = Arc::new(PgShared {
            connector: parsed.connector,
            redacted: parsed.redacted,
            context: parsed.context,
            events,
            channel,
            published,
            pool: Mutex::new(vec![client]),
            poll: parsed.poll,
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
            let writer = writer::PgWriter::new(shared.clone(), durability);
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
        self.shared.pool.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

struct ParsedUrl {
    connector: Connector,
    redacted: String,
    context: String,
    poll: Duration,
}

/// Splits off the parameters that are Lapilli's (`context`, `poll_ms`) and the TLS modes the
/// driver does not know (`verify-ca`, `verify-full`), and hands the rest to the driver.
fn parse_url(url: &str) -> Result<ParsedUrl> {
    let redacted = redact(url);
    let bad = |why: String| Error::invalid(format!("location {redacted:?}: {why}"));
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut context = None;
    let mut poll = DEFAULT_POLL;
    let mut tls = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "context" => context = Some(value.to_string()),
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
    // Nothing is added to the startup packet's `options` (JIT is turned off after connecting,
    // see `Connector::connect`, and per writer transaction): PgBouncer refuses a connection
    // whose `options` sets a parameter it does not track, at its default settings.
    let tls = tls.then(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_postgres_rustls::MakeRustlsConnect::new(config)
    });
    Ok(ParsedUrl { connector: Connector { config, tls }, redacted, context, poll })
}

/// `url` with its password replaced by `***`: the one in its user info, and a `password=`
/// parameter (the driver takes either).
fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let query = query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| if pair.starts_with("password=") { "password=***".to_string() } else { pair.to_string() })
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
    let detail = match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => err.to_string(),
    };
    Error::io_message(format!("{context}: {detail}"), kind)
}

/// What PostgreSQL cannot store that the embedded log can: `text` holds no U+0000, so an event
/// whose type or tag has one is refused (`InvalidArgument`) before it reaches the writer.
pub(crate) fn check_storable(index: usize, event: &crate::event::Event) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_redacted() {
        assert_eq!(redact("postgresql://u:secret@h:5/db?context=c"), "postgresql://u:***@h:5/db?context=c");
        assert_eq!(redact("postgresql://u@h/db"), "postgresql://u@h/db");
        assert_eq!(redact("postgresql://h/db?password=pw&context=c"), "postgresql://h/db?password=***&context=c");
        assert_eq!(redact("postgresql://u:a@h/db?x=1&password=b"), "postgresql://u:***@h/db?x=1&password=***");
        let parsed = parse_url("postgresql://u:pw@localhost:5432/db?context=courses&poll_ms=20").unwrap();
        assert_eq!(parsed.context, "courses");
        assert_eq!(parsed.poll, Duration::from_millis(20));
        assert!(parsed.connector.tls.is_none());
        assert!(parse_url("postgresql://u@h/db?sslmode=verify-full").unwrap().connector.tls.is_some());
        for (url, named) in [
            ("postgresql://u:pw@h/db?context=Bad-Name", "\"Bad-Name\""),
            ("postgresql://h/db?poll_ms=0", "poll_ms"),
            ("postgresql://h/db?sslmode=sometimes", "sometimes"),
            ("postgresql://h/db?nonsense=1", "nonsense"),
        ] {
            let Err(err) = parse_url(url) else { panic!("{url} was accepted") };
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}");
            assert!(err.message().contains(named), "{}", err.message());
            assert!(!err.message().contains("pw@"), "the password leaked: {}", err.message());
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
