//! The listener: follows commits of every process to the context and publishes the head to
//! this handle's subscribers. A committing writer notifies the context's channel in its
//! transaction (delivered at commit, so never before the events are visible); the listener
//! then reads the head row. Without a notification it reads the row every `poll` anyway: a
//! pooler in transaction mode drops `LISTEN`, and a notification can be missed while the
//! connection is being re-made. Either way it only ever publishes a committed head, and the
//! subscription scans from its cursor up to it, so what it delivers has no gap or duplicate
//! whichever path woke it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use super::{PgShared, sql};

/// How long one wait for a notification lasts: the bound on how long `close` waits for this
/// thread.
const WAIT_SLICE: Duration = Duration::from_millis(20);

pub fn run(shared: Arc<PgShared>, stop: Arc<AtomicBool>) {
    let mut client: Option<Client> = None;
    let mut last_poll = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let connection = match client.as_mut() {
            Some(connection) if !connection.is_closed() => connection,
            _ => match connect(&shared) {
                Some(connection) => {
                    // Commits while we were away are picked up by the poll right after.
                    last_poll = Instant::now() - shared.poll;
                    client.insert(connection)
                }
                None => {
                    std::thread::sleep(shared.poll.min(Duration::from_millis(200)));
                    continue;
                }
            },
        };
        let waited = connection.notifications().timeout_iter(WAIT_SLICE).next().map(|n| n.is_some());
        let Ok(notified) = waited else {
            client = None;
            continue;
        };
        if notified || last_poll.elapsed() >= shared.poll {
            // Drain what else arrived: one head read answers them all.
            let _ = connection.notifications().iter().count();
            last_poll = Instant::now();
            match sql::head(connection, &shared.context, &shared.redacted) {
                Ok(head) => shared.published.publish_head_at_least(head),
                Err(_) => client = None,
            }
        }
    }
}

fn connect(shared: &PgShared) -> Option<Client> {
    let mut client = shared.connector.connect(&shared.redacted).ok()?;
    client.batch_execute(&format!("LISTEN {}", shared.channel)).ok()?;
    Some(client)
}
