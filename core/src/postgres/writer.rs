//! The writer of a Postgres handle: group commit under the context's row lock.
//!
//! A group is everything queued when the writer gets to it. In one transaction it locks the
//! context's row (`SELECT ... FOR UPDATE`: writers of every process queue here), decides each
//! append in order (its condition against the table, which holds every commit before the lock
//! was granted, and against the appends accepted earlier in the group), copies the accepted
//! events in at head + 1..., moves the head, notifies the context's channel and commits. A
//! verdict is answered only once the commit's outcome is known.

use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::error::{Severity, SqlState};
use postgres::types::Type;
use postgres::{Client, Transaction};

use super::sql::{Condition, MergeFailure, merge_failure};
use super::{PgShared, pg_error};
use crate::append::{AppendCondition, AppendResult};
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::log::format::FRAME_LEN;
use crate::options::Durability;
use crate::position::Position;
use crate::writer::condition::{StagedIndex, already_exists, conflict};
use crate::writer::reply::Reply;

/// Appends decided in one transaction at most: bounds the time the row lock is held.
const MAX_GROUP: usize = 1024;
/// Events past which a group takes no more appends (checked before each, so the last one taken
/// may carry it further, up to one append's size): the group's `COPY` holds the context's lock
/// for about 10 us an event on the server, so a group of 1024 appends of 512 events each held
/// every other writer of the context for seconds.
const MAX_GROUP_EVENTS: usize = 1 << 16;

/// A validated append, its events encoded as on the embedded log (frames of canonical
/// payloads), so that one validation and one encoding serve both backends.
pub(crate) struct PgAppend {
    pub encoded: Vec<u8>,
    pub frame_starts: Vec<usize>,
    pub condition: Option<AppendCondition>,
    pub reply: Reply,
}

impl PgAppend {
    fn events(&self) -> Result<Vec<EventView<'_>>> {
        (0..self.frame_starts.len())
            .map(|i| {
                let start = self.frame_starts[i] + FRAME_LEN;
                let end = self.frame_starts.get(i + 1).copied().unwrap_or(self.encoded.len());
                EventView::decode(Position(0), &self.encoded[start..end])
            })
            .collect()
    }
}

pub(crate) enum Command {
    Append(PgAppend),
    Shutdown,
}

enum Verdict {
    Accepted(AppendResult),
    /// Refused for an event committed before the group: final whatever the commit does.
    Refused(Error),
    /// Refused for an event accepted earlier in the group: true only if the group commits.
    RefusedInGroup(Error),
}

pub(crate) struct PgWriter {
    shared: Arc<PgShared>,
    durability: Durability,
    client: Option<Client>,
    /// The call that merges the tags index's pending list (`sql::merge_tags_call`), made in
    /// every group's transaction; None for a context made before there was one, or a user who
    /// may not call it (then the server merges once the list outgrows the index's limit).
    merge_tags: Option<String>,
    /// When to try the merge again after it kept failing for reasons that should pass.
    merge_pauses: MergePauses,
    /// The last group committed with the merge (not without it, nor with nothing to write).
    last_group_merged: bool,
}

/// Merges that failed in a row, each for a reason that should pass (`MergeFailure::Once`),
/// after which a handle pauses merging: each such failure costs its group a rollback and a
/// second decision, and one that keeps coming (a `statement_timeout` of the writer's role
/// shorter than every merge) would cost every group that for as long as the handle lives.
const MERGE_FAILURES_TO_PAUSE: u32 = 3;
/// The first pause; each one after it (with no merge in between) is twice as long, up to
/// `LONGEST_MERGE_PAUSE`: a handle open for weeks merges again once the cause is gone, and
/// meanwhile, once its pauses reach an hour, tries (and rolls back) three groups an hour.
const FIRST_MERGE_PAUSE: Duration = Duration::from_secs(60);
const LONGEST_MERGE_PAUSE: Duration = Duration::from_secs(3600);

/// Whether a handle tries the merge now, after merges that failed for reasons that should pass.
struct MergePauses {
    failures_in_a_row: u32,
    /// No merge is tried before this.
    paused_until: Option<Instant>,
    next_pause: Duration,
}

impl MergePauses {
    fn new() -> MergePauses {
        MergePauses { failures_in_a_row: 0, paused_until: None, next_pause: FIRST_MERGE_PAUSE }
    }

    fn may_merge(&self, now: Instant) -> bool {
        self.paused_until.is_none_or(|until| now >= until)
    }

    /// A group committed with the merge: failures so far no longer count.
    fn merged(&mut self) {
        *self = MergePauses::new();
    }

    /// A group's merge failed for a reason that should pass; the pause this begins, if it
    /// is the last of `MERGE_FAILURES_TO_PAUSE` in a row.
    fn failed(&mut self, now: Instant) -> Option<Duration> {
        self.failures_in_a_row += 1;
        if self.failures_in_a_row < MERGE_FAILURES_TO_PAUSE {
            return None;
        }
        let pause = self.next_pause;
        self.failures_in_a_row = 0;
        self.paused_until = Some(now + pause);
        self.next_pause = (pause * 2).min(LONGEST_MERGE_PAUSE);
        Some(pause)
    }
}

impl PgWriter {
    pub fn new(shared: Arc<PgShared>, durability: Durability, merge_tags: Option<String>) -> PgWriter {
        PgWriter { shared, durability, client: None, merge_tags, merge_pauses: MergePauses::new(), last_group_merged: false }
    }

    pub fn run(mut self, incoming: Receiver<Command>) {
        let mut group: Vec<PgAppend> = Vec::new();
        let mut shutdown = false;
        while !shutdown {
            match incoming.recv() {
                Ok(Command::Append(append)) => group.push(append),
                Ok(Command::Shutdown) | Err(_) => break,
            }
            let mut events = group[0].frame_starts.len();
            while group.len() < MAX_GROUP && events < MAX_GROUP_EVENTS {
                match incoming.try_recv() {
                    Ok(Command::Append(append)) => {
                        events += append.frame_starts.len();
                        group.push(append);
                    }
                    Ok(Command::Shutdown) => {
                        shutdown = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.commit(std::mem::take(&mut group));
        }
        // Appends still queued behind the shutdown are answered `Closed` as their replies drop.
    }

    fn commit(&mut self, group: Vec<PgAppend>) {
        self.shared.published.counters.dequeued(group.len() as u64);
        let mut outcome = self.decide_and_commit(&group);
        if let Err(Failed { stale_connection: true, .. }) = outcome {
            // The connection kept from the last group was closed by the server meanwhile (a
            // restart, a failover, a pooler's idle timeout); only BEGIN was sent on it, so the
            // group is decided again on a new one rather than answered `Io`.
            self.client = None;
            outcome = self.decide_and_commit(&group);
        }
        if let Err(Failed { merge_failed: Some((failure, reason)), .. }) = outcome {
            // The merge failed (`sql::merge_failure`): the statement failed before COMMIT was
            // sent, so the group was rolled back whole and is decided again without merging, as
            // on a context that never had a merge; after a lasting failure (the function dropped
            // or revoked, its index moved since the open), so is every later group of this
            // handle, and after a few that should pass but keep coming, every group of a pause.
            let (context, url) = (&self.shared.context, &self.shared.redacted);
            match failure {
                MergeFailure::Lasting => {
                    let call = self.merge_tags.take().unwrap_or_default();
                    crate::error::report(format_args!(
                        "lapilli: the writer of context {context:?} in {url} stops merging the tags index's pending list \
                         with {call} until it is opened again: {reason}"
                    ));
                }
                MergeFailure::Once => {
                    if let Some(pause) = self.merge_pauses.failed(Instant::now()) {
                        let call = self.merge_tags.as_deref().unwrap_or_default();
                        crate::error::report(format_args!(
                            "lapilli: the writer of context {context:?} in {url} pauses merging the tags index's pending list \
                             with {call} for {} s: it failed {MERGE_FAILURES_TO_PAUSE} groups in a row, the last with: {reason}",
                            pause.as_secs()
                        ));
                    }
                }
            }
            outcome = self.decide_and_commit_as(&group, false);
        } else if self.last_group_merged {
            self.merge_pauses.merged();
        }
        let answers = match outcome {
            Ok(verdicts) => verdicts
                .into_iter()
                .map(|verdict| match verdict {
                    Verdict::Accepted(result) => Ok(result),
                    Verdict::Refused(error) | Verdict::RefusedInGroup(error) => Err(error),
                })
                .collect::<Vec<_>>(),
            Err(Failed { error, verdicts, .. }) => {
                // Refusals for events committed before the group stand; everything else shares
                // the group's fate, which `error` describes.
                self.client = None;
                (0..group.len())
                    .map(|i| match verdicts.get(i) {
                        Some(Verdict::Refused(refusal)) => Err(refusal.clone()),
                        _ => Err(error.clone()),
                    })
                    .collect()
            }
        };
        for (append, answer) in group.into_iter().zip(answers) {
            append.reply.send(answer);
        }
        crate::completion::flush_deferred();
    }

    fn decide_and_commit(&mut self, group: &[PgAppend]) -> std::result::Result<Vec<Verdict>, Failed> {
        self.decide_and_commit_as(group, self.merge_pauses.may_merge(Instant::now()))
    }

    /// Decides and commits `group`, merging the tags index if `merge` and the handle can.
    fn decide_and_commit_as(&mut self, group: &[PgAppend], merge: bool) -> std::result::Result<Vec<Verdict>, Failed> {
        self.last_group_merged = false;
        let shared = self.shared.clone();
        let url = &shared.redacted;
        let not_committed = |what: &str, e: &postgres::Error| Failed {
            error: with_outcome(pg_error(&format!("{what} in {url}"), e), "it was not committed; it is safe to retry"),
            verdicts: Vec::new(),
            stale_connection: false,
            merge_failed: None,
        };
        let reused = self.client.as_ref().is_some_and(|client| !client.is_closed());
        if !reused {
            self.client = Some(shared.connector.connect(url).map_err(|error| Failed {
                error: with_outcome(error, "it was not committed; it is safe to retry"),
                verdicts: Vec::new(),
                stale_connection: false,
                merge_failed: None,
            })?);
        }
        let client = self.client.as_mut().expect("connected above");
        super::discard_notifications(client);
        let mut tx = client.transaction().map_err(|e| {
            let closed = connection_gone(&e);
            Failed { stale_connection: reused && closed, ..not_committed("cannot begin", &e) }
        })?;
        if self.durability == Durability::Buffered {
            tx.batch_execute("SET LOCAL synchronous_commit = off").map_err(|e| not_committed("cannot begin", &e))?;
        }
        let lock_sql = "SELECT head, last_recorded_at, txid_current(), \
             set_config('idle_in_transaction_session_timeout', '10s', true), set_config('jit', 'off', true), \
             set_config('tcp_keepalives_idle', '10', true), set_config('tcp_keepalives_interval', '5', true), \
             set_config('tcp_keepalives_count', '3', true), \
             CASE WHEN current_setting('server_version_num')::int >= 120000 \
                  THEN set_config('tcp_user_timeout', '30000', true) END \
             FROM lapilli_contexts WHERE name = $1 FOR UPDATE";
        // The lock is held until this transaction ends. If this process is cut off in the
        // middle of it (a partition, a machine that lost power), the server would only notice
        // through TCP keepalive, two hours later with the kernel's defaults, and every writer
        // of the context would wait all that time. So, for this transaction only (no extra
        // round trip; the server puts its defaults back at the end):
        // - between statements, the server ends it after 10 s idle. The writer's transaction
        //   is never idle for more than the time it takes to send its next statement, so it
        //   costs nothing else; a transaction ended so is not committed, and its appends are
        //   answered so;
        // - inside a statement that waits for this process (the `COPY` of a group, which the
        //   idle limit does not cover: the server is busy reading it), the server's socket
        //   probes a silent peer after 10 s, every 5 s, and gives up after 3 unanswered probes
        //   (about 25 s; on PostgreSQL 12 and later the user timeout below decides instead:
        //   about 30 s after the last byte received): the statement fails, and the transaction
        //   with it. A live peer answers probes from its kernel, so a slow writer is not cut;
        // - a server blocked sending to a peer that is gone (a partition in the middle of a
        //   reply) gives up after 30 s without an acknowledgement (`tcp_user_timeout`, which
        //   otherwise TCP retransmission ends in about 15 minutes; PostgreSQL 12 and later, the
        //   `CASE` keeps older servers from refusing a name they do not know). Operators'
        //   values of it are overridden for the transaction. Its cost: a writer process that is
        //   alive but frozen for 30 s (a paused VM, a stopped process) while a reply larger than
        //   the socket's buffers waits for it has its transaction ended (Linux counts a peer
        //   that keeps a zero window that long as gone), answered as not committed; and a
        //   server on a system without `TCP_USER_TIMEOUT` logs that it is not supported at every
        //   group.
        // Behind a pooler these protect the pooler's connection to the server, not the
        // writer's to the pooler: the pooler's own keepalive settings (PgBouncer's
        // `tcp_keepidle`, `tcp_keepintvl`, `tcp_keepcnt`, `tcp_user_timeout`) decide when it
        // notices a writer that is gone (ARCHITECTURE.md says so).
        // The second `set_config` turns JIT off for the rest of the transaction: a group's
        // condition check is one statement of many small subqueries whose summed cost crosses
        // jit_above_cost, and compiling it took over a second (128 appends of a group waited
        // 1.3 s) for a statement that runs in a millisecond. Here, not in the connection's
        // startup `options`, which PgBouncer refuses; transaction-local, so it holds under a
        // transaction-pooling PgBouncer too.
        let rows = tx
            .query_typed(lock_sql, &[(&shared.context, Type::TEXT)])
            .map_err(|e| not_committed("cannot lock the context", &e))?;
        let Some(row) = rows.into_iter().next() else {
            let error = Error::io_message(
                format!("context {:?} is no longer in {url}; it was not committed", shared.context),
                std::io::ErrorKind::NotFound,
            );
            return Err(Failed { error, verdicts: Vec::new(), stale_connection: false, merge_failed: None });
        };
        let committed_head = row.get::<_, i64>(0) as u64;
        let last_recorded_at = row.get::<_, i64>(1) as u64;
        let txid: i64 = row.get(2);

        // Every condition against the committed log first, in as few statements as possible
        // (the log does not change under the lock until the group's own insert).
        let conditions: Vec<Option<&AppendCondition>> = group.iter().map(|a| a.condition.as_ref()).collect();
        let committed_verdicts = match check_committed(&mut tx, &shared, &conditions, committed_head) {
            Ok(found) => found,
            Err(e) => return Err(not_committed("cannot check the conditions", &e)),
        };

        // Decide each append in order.
        let mut head = committed_head;
        let mut staged: Vec<(u64, EventView<'_>)> = Vec::new();
        // The staged events by type and by the tags the group's conditions name, as the embedded
        // writer keeps them: a condition asks it rather than walking every event staged before
        // it (appends times events, with the transaction idle on the server meanwhile).
        let mut staged_index = group.iter().any(|append| append.condition.is_some()).then(|| {
            StagedIndex::for_queries(group.iter().filter_map(|append| append.condition.as_ref()).flat_map(|condition| {
                std::iter::once(&condition.fail_if_events_match).chain(condition.fail_if_exists.as_ref())
            }))
        });
        let mut verdicts = Vec::with_capacity(group.len());
        for (append, committed_verdict) in group.iter().zip(committed_verdicts) {
            let events = match append.events() {
                Ok(events) => events,
                Err(error) => {
                    verdicts.push(Verdict::Refused(error));
                    continue;
                }
            };
            if let Some(condition) = &append.condition {
                let verdict = match committed_verdict {
                    // Both clauses fail: the boundary clause is reported, as the contract orders
                    // them, also when its match is an earlier append of this group.
                    Some(Verdict::Refused(exists)) if exists.kind() == ErrorKind::AlreadyExists => {
                        match check_staged(condition, staged_index.as_ref(), committed_head) {
                            Some(Verdict::RefusedInGroup(c)) if c.kind() == ErrorKind::Conflict => Some(Verdict::RefusedInGroup(c)),
                            _ => Some(Verdict::Refused(exists)),
                        }
                    }
                    Some(verdict) => Some(verdict),
                    None => check_staged(condition, staged_index.as_ref(), committed_head),
                };
                if let Some(verdict) = verdict {
                    verdicts.push(verdict);
                    continue;
                }
            }
            let first = head + 1;
            for event in events {
                head += 1;
                if let Some(index) = &mut staged_index {
                    index.add(&event);
                }
                staged.push((head, event));
            }
            verdicts.push(Verdict::Accepted(AppendResult { first: Position(first), last: Position(head) }));
        }
        if staged.is_empty() {
            // Nothing to write: every verdict is a refusal for a committed event.
            drop(tx);
            return Ok(verdicts);
        }

        let recorded_at = now_micros().max(last_recorded_at) as i64;
        let fail = |what: &str, e: &postgres::Error, verdicts: Vec<Verdict>| Failed {
            verdicts,
            ..not_committed(what, e)
        };
        if let Err(e) = copy_in(&mut tx, &shared.events, &staged, recorded_at) {
            return Err(fail("cannot insert the events", &e, verdicts));
        }
        let channel = format!("lapilli_{}", shared.context);
        // The tags index's pending list is merged before the commit, so no committed state
        // leaves one for tag looks to scan (`sql::merge_tags_name`).
        let merge_call = self.merge_tags.as_deref().filter(|_| merge);
        let merge = merge_call.map(|call| format!(", {call}")).unwrap_or_default();
        let moved = tx.query_typed(
            &format!(
                "WITH moved AS (UPDATE lapilli_contexts SET head = $2, last_recorded_at = $3 WHERE name = $1 RETURNING head) \
                 SELECT pg_notify($4, head::text){merge} FROM moved"
            ),
            &[(&shared.context, Type::TEXT), (&(head as i64), Type::INT8), (&recorded_at, Type::INT8), (&channel, Type::TEXT)],
        );
        if let Err(e) = moved {
            let merge_failed = merge_call.and_then(|_| merge_failure(&e)).map(|failure| (failure, super::error_detail(&e)));
            return Err(Failed { merge_failed, ..fail("cannot move the head", &e, verdicts) });
        }
        // The `fsync` figures of `Store::stats` are, here, the COMMIT's round trip: the server's
        // WAL flush (with `synchronous_commit` on) and the network.
        let committing = std::time::Instant::now();
        let committed = tx.commit();
        self.shared.published.counters.fsync_micros.record(committing.elapsed().as_micros() as u64);
        match committed {
            Ok(()) => {}
            // The server refused the commit and kept the session (an ERROR): rolled back.
            Err(e) if e.as_db_error().is_some_and(|db| db.parsed_severity() == Some(Severity::Error)) => {
                return Err(fail("cannot commit", &e, verdicts));
            }
            // The connection went away with the commit sent, or the server ended the session
            // (a FATAL, such as "terminating connection due to unexpected postmaster exit",
            // which a backend can send after its commit record is durable: it says nothing
            // about the commit): ask a new connection what became of it.
            Err(e) => match resolve(&shared, txid, staged.last().map(|(position, event)| (*position, recorded_at, event)).expect("a group with nothing to write returned before its commit")) {
                Some(true) => {}
                Some(false) => return Err(fail("cannot commit", &e, verdicts)),
                None => {
                    let lost = pg_error(&format!("lost the connection to {url} while committing"), &e);
                    let error = with_outcome(
                        lost.clone(),
                        "its outcome is unknown (it may be committed); retry it with an existence clause \
                         (fail_if_exists on a tag unique to this append) so that it is appended at most once",
                    );
                    // An append refused for an event of its own group was not written whatever
                    // became of the group: refused if it committed, never decided if not.
                    let not_written = with_outcome(
                        lost,
                        "it was not committed (it conflicted with an append of its group, whose outcome is \
                         unknown, and was refused whatever that outcome is); it is safe to retry",
                    );
                    let verdicts = verdicts
                        .into_iter()
                        .map(|verdict| match verdict {
                            Verdict::RefusedInGroup(_) => Verdict::Refused(not_written.clone()),
                            verdict => verdict,
                        })
                        .collect();
                    return Err(Failed { error, verdicts, stale_connection: false, merge_failed: None });
                }
            },
        }
        self.last_group_merged = merge_call.is_some();
        self.shared.published.publish_head_at_least(head);
        // Only this thread writes it: a plain store, not a locked add (see `stats::bump`).
        crate::stats::bump(&self.shared.published.commit_groups, 1);
        // `bytes_appended` on Postgres: the events' types, tags and data as sent (there is no
        // log of ours to measure).
        let bytes: usize =
            staged.iter().map(|(_, e)| e.event_type.len() + e.tags().map(str::len).sum::<usize>() + e.data.len()).sum();
        self.shared.published.counters.committed(staged.len() as u64, bytes as u64);
        Ok(verdicts)
    }
}

/// A group that did not commit: `error` for its appends, except refusals already final.
struct Failed {
    error: Error,
    verdicts: Vec<Verdict>,
    /// BEGIN failed on a connection kept from an earlier group because the server had closed
    /// it: nothing of this group reached the server.
    stale_connection: bool,
    /// The merge of the tags index (`PgWriter::merge_tags`) failed, and how
    /// (`sql::merge_failure`), and the server's words. The group was rolled back.
    merge_failed: Option<(MergeFailure, String)>,
}

/// Whether a failed BEGIN says the connection is gone: any failure that is not the server's
/// answer (a reset, an end of stream), or the server's goodbye, `57P01` (terminated by an
/// administrator), `57P02` (crash shutdown) or `57P03` (cannot connect now).
fn connection_gone(e: &postgres::Error) -> bool {
    e.as_db_error().is_none_or(|db| db.code().code().starts_with("57P"))
}

fn with_outcome(error: Error, outcome: &str) -> Error {
    Error::io_message(
        format!("{}; {outcome}", error.message()),
        error.io_kind().unwrap_or(std::io::ErrorKind::Other),
    )
}

/// How far below the head a boundary clause's `after` may lie to be checked against the
/// group's one fetch of recent events rather than by a subquery of its own.
const RECENT_WINDOW: u64 = 1024;

/// `query` against an event given by its type and tags (`Query::matches` for a row).
fn matches(query: &crate::query::Query, event_type: &str, tags: &[&str]) -> bool {
    match query {
        crate::query::Query::All => true,
        crate::query::Query::Items(items) => items.iter().any(|item| {
            (item.types.is_empty() || item.types.iter().any(|t| t == event_type))
                && item.tags.iter().all(|tag| tags.contains(&tag.as_str()))
        }),
    }
}

/// A parameter of the condition statement.
enum Param {
    After(i64),
    Strings(Vec<String>),
}

/// Appends whose conditions one statement checks at most: two result columns each, and
/// PostgreSQL allows 1664 columns in a select list.
const CHECKS_PER_STATEMENT: usize = 256;

/// Each condition against the committed events: for each append, the refusal the committed log
/// gives it (the first event matching the boundary clause after `after`, else the first
/// matching the existence clause anywhere), or None. Boundary clauses whose `after` is within
/// `RECENT_WINDOW` of the head are matched in memory against one fetch of the events after the
/// lowest such `after`; the rest is one statement of scalar subqueries for up to
/// `CHECKS_PER_STATEMENT` appends, each answered by the indexes on its own. A boundary clause
/// whose `after` is the head needs no look (nothing committed lies after it).
fn check_committed(
    tx: &mut Transaction<'_>,
    shared: &PgShared,
    conditions: &[Option<&AppendCondition>],
    committed_head: u64,
) -> Result<Vec<Option<Verdict>>, postgres::Error> {
    let mut verdicts: Vec<Option<Verdict>> = conditions.iter().map(|_| None).collect();
    let events = &shared.events;
    let after_of = |c: &AppendCondition| c.after.map_or(0, Position::get);
    let recent = |c: &AppendCondition| after_of(c) < committed_head && committed_head - after_of(c) <= RECENT_WINDOW;

    // Boundary clauses of decisions taken on a recent read: the events after the oldest such
    // read, fetched once (an index range scan of at most RECENT_WINDOW rows) and matched here.
    // Planning a subquery per append cost more than the whole check (64 appends: some 15 ms).
    if let Some(from) = conditions.iter().flatten().filter(|c| recent(c)).map(|c| after_of(c)).min() {
        let rows = tx.query_typed(
            &format!("SELECT position, type, tags FROM {events} WHERE position > $1 ORDER BY position"),
            &[(&(from as i64), Type::INT8)],
        )?;
        let tail: Vec<(u64, &str, Vec<&str>)> =
            rows.iter().map(|row| (row.get::<_, i64>(0) as u64, row.get(1), row.get(2))).collect();
        for (i, condition) in conditions.iter().enumerate() {
            let Some(condition) = condition.filter(|c| recent(c)) else { continue };
            let after = after_of(condition);
            let first = tail
                .iter()
                .find(|(position, ty, tags)| *position > after && matches(&condition.fail_if_events_match, ty, tags));
            if let Some((position, _, _)) = first {
                verdicts[i] = Some(Verdict::Refused(conflict(Position(*position), after)));
            }
        }
    }

    // Everything else by subqueries answered from the indexes: boundary clauses of older reads,
    // and existence clauses (unless the boundary clause refused the append already).
    let wanted: Vec<usize> = conditions
        .iter()
        .enumerate()
        .filter(|&(i, c)| {
            verdicts[i].is_none()
                && c.is_some_and(|c| (after_of(c) < committed_head && !recent(c)) || c.fail_if_exists.is_some())
        })
        .map(|(i, _)| i)
        .collect();
    for chunk in wanted.chunks(CHECKS_PER_STATEMENT) {
        let mut columns = Vec::new();
        // In `$n` order.
        let mut values: Vec<Param> = Vec::new();
        // (append, column of its boundary clause or None, column of its existence clause or None)
        let mut slots = Vec::new();
        let mut next_param = 1;
        for &i in chunk {
            let condition = conditions[i].expect("chosen above");
            let after = condition.after.map_or(0, Position::get);
            let boundary = (after < committed_head && !recent(condition)).then(|| {
                let c = Condition::of(&condition.fail_if_events_match, next_param + 1);
                let sql = first_match(events, &format!("${next_param}"), &c.sql);
                next_param += 1 + c.params.len();
                (sql, c)
            });
            let boundary_column = boundary.map(|(sql, c)| {
                columns.push(sql);
                values.push(Param::After(after as i64));
                values.extend(c.params.into_iter().map(Param::Strings));
                columns.len() - 1
            });
            let existence_column = condition.fail_if_exists.as_ref().map(|query| {
                let c = Condition::of(query, next_param);
                next_param += c.params.len();
                columns.push(first_match(events, "0", &c.sql));
                values.extend(c.params.into_iter().map(Param::Strings));
                columns.len() - 1
            });
            slots.push((i, after, boundary_column, existence_column));
        }
        let params: Vec<(&(dyn postgres::types::ToSql + Sync), Type)> = values
            .iter()
            .map(|value| match value {
                Param::After(after) => (after as &(dyn postgres::types::ToSql + Sync), Type::INT8),
                Param::Strings(strings) => (strings as &(dyn postgres::types::ToSql + Sync), Type::TEXT_ARRAY),
            })
            .collect();
        let row = tx.query_typed_one(&format!("SELECT {}", columns.join(", ")), &params)?;
        for (i, after, boundary_column, existence_column) in slots {
            let found = |column: Option<usize>| column.and_then(|c| row.get::<_, Option<i64>>(c)).map(|p| Position(p as u64));
            verdicts[i] = match (found(boundary_column), found(existence_column)) {
                (Some(position), _) => Some(Verdict::Refused(conflict(position, after))),
                (None, Some(position)) => Some(Verdict::Refused(already_exists(position))),
                (None, None) => None,
            };
        }
    }
    Ok(verdicts)
}

/// Rows after `after` that the first look walks in position order (about two pages).
const NEAR_ROWS: u32 = 256;

/// The first event after `after` matching `condition`, as a scalar subquery.
///
/// Not `WHERE position > after AND <condition> ORDER BY position LIMIT 1` alone: for it the
/// planner walks the primary key from `after` and filters, betting that matches are as common
/// as the product of its estimates for each tag and type. Tags that are each common but never
/// together (`tenant:big` and `course:1`) make that bet lose by the whole table: on a context
/// of a million events the walk read every row, 1.2 s under the context's lock, for the
/// condition of an append that was then accepted. So: first the `NEAR_ROWS` events right after
/// `after`, walked in order (a recent `after`, or a common match, is answered there); only if
/// none of them matches, the matches found through the indexes (GIN over tags, `(type,
/// position)`), the first taken by sorting them (`position + 0` keeps the planner from walking
/// the key again): the cost of the matches, not of the table (8 ms for that condition).
/// `COALESCE` runs the second only when the first found nothing; both answer the first match
/// after `after`, since the positions are gapless.
fn first_match(events: &str, after: &str, condition: &str) -> String {
    format!(
        "COALESCE(\
         (SELECT position FROM (SELECT position, type, tags FROM {events} WHERE position > {after} \
         ORDER BY position LIMIT {NEAR_ROWS}) recent WHERE {condition} ORDER BY position LIMIT 1), \
         (SELECT position FROM {events} WHERE position > {after} AND {condition} ORDER BY position + 0 LIMIT 1))"
    )
}

/// The condition against the appends accepted earlier in the group (`staged`, whose first
/// event is at `committed_head + 1`; None only in a group without conditions).
///
/// Every staged event lies after `after`: `Store::append` refuses an `after` beyond the head
/// it knows of, which was committed, so at most `committed_head`. (Were it not so, a staged
/// match at or below `after` would be a false conflict, never a missed one.)
fn check_staged(condition: &AppendCondition, staged: Option<&StagedIndex>, committed_head: u64) -> Option<Verdict> {
    let staged = staged?;
    let after = condition.after.map_or(0, Position::get);
    let first = committed_head + 1;
    if let Some(position) = staged.first_match(&condition.fail_if_events_match, first) {
        return Some(Verdict::RefusedInGroup(conflict(position, after)));
    }
    let exists = condition.fail_if_exists.as_ref()?;
    staged.first_match(exists, first).map(|position| Verdict::RefusedInGroup(already_exists(position)))
}

fn copy_in(tx: &mut Transaction<'_>, events: &str, staged: &[(u64, EventView<'_>)], recorded_at: i64) -> Result<(), postgres::Error> {
    let sink = tx.copy_in(&format!("COPY {events} (position, type, tags, data, recorded_at) FROM STDIN BINARY"))?;
    let mut writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::TEXT, Type::TEXT_ARRAY, Type::BYTEA, Type::INT8]);
    for (position, event) in staged {
        let tags: Vec<&str> = event.tags().collect();
        writer.write(&[&(*position as i64), &event.event_type, &tags, &event.data, &recorded_at])?;
    }
    writer.finish()?;
    Ok(())
}

/// How long `resolve` keeps asking (its pauses add up to about this when connections fail at
/// once; a connection attempt that hangs counts too, up to its own timeout).
const RESOLVE_FOR: Duration = Duration::from_millis(8500);

/// What became of transaction `txid` whose commit was sent on a connection that then failed:
/// Some(committed) once a new connection can tell, None if the server cannot be asked within
/// about `RESOLVE_FOR` (or still runs it). `last`: the group's last event (position,
/// `recorded_at`, the event), which a committed group has put in the table.
///
/// `txid_status` alone is not proof (found by the reviews of 2026-12-04):
/// - a server that crashed before our transaction's records reached its WAL can hand the same
///   id to another transaction after recovery (the id's assignment is not logged), and that one
///   may have committed by the time we ask: so "committed" is believed only when the group's
///   last event is in the table as we wrote it, and refuted when another event is there;
/// - servers before 15.2 (14.7, 13.10, 12.14, 11.19) report a transaction committed a moment
///   before it is visible (while it waits for a synchronous standby, say), and "aborted" for
///   one whose commit completes between their two checks: so with no event there yet it asks
///   again, and "aborted" is believed when said twice with our event absent both times;
/// - a standby (a URL of several hosts, a pooler over replicas) has not replayed everything
///   the primary committed: it is not asked;
/// - an id the server calls "in the future" (SQLSTATE 22023) was not handed out since its
///   recovery, so nothing committed under it.
fn resolve(shared: &PgShared, txid: i64, last: (u64, i64, &EventView<'_>)) -> Option<bool> {
    let (position, recorded_at, event) = last;
    let tags: Vec<&str> = event.tags().collect();
    let look = format!("SELECT recorded_at, type, tags, data FROM {} WHERE position = $1", shared.events);
    let start = Instant::now();
    let mut aborted_once = false;
    for attempt in 0..20u64 {
        if attempt > 0 {
            let pause = Duration::from_millis(100 * attempt.min(5));
            if start.elapsed() + pause > RESOLVE_FOR {
                break;
            }
            std::thread::sleep(pause);
        }
        let Ok(mut client) = shared.connector.connect(&shared.redacted) else { continue };
        // In a transaction of its own, so that its limits stay with it behind a pooler, and
        // stay on the one server it asks: the look must not wait on a lock on the table (a
        // `LOCK TABLE`, a `VACUUM FULL`) while every append of the handle waits behind this
        // thread, and no statement may run past the deadline by more than a second.
        let Ok(mut tx) = client.transaction() else { continue };
        let left = RESOLVE_FOR.saturating_sub(start.elapsed()).max(Duration::from_secs(1)).min(Duration::from_secs(5));
        let limits = format!("SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}", left.as_millis(), left.as_millis());
        if tx.batch_execute(&limits).is_err() {
            continue;
        }
        match tx.query_typed("SELECT pg_is_in_recovery()", &[]).map(|rows| rows.first().is_some_and(|row| row.get::<_, bool>(0))) {
            Ok(false) => {}
            Ok(true) | Err(_) => continue,
        }
        let status = match tx.query_typed("SELECT txid_status($1)", &[(&txid, Type::INT8)]) {
            Ok(rows) => rows.first().and_then(|row| row.get::<_, Option<String>>(0)),
            Err(e) if e.code() == Some(&SqlState::INVALID_PARAMETER_VALUE) => return Some(false),
            Err(_) => continue,
        };
        // Our last event as we wrote it (Some(true)), another event there (Some(false)), or none.
        let mut found = || -> Option<Option<bool>> {
            let rows = tx.query_typed(&look, &[(&(position as i64), Type::INT8)]).ok()?;
            Some(rows.first().map(|row| {
                row.get::<_, i64>(0) == recorded_at
                    && row.get::<_, &str>(1) == event.event_type
                    && row.get::<_, Vec<&str>>(2) == tags
                    && row.get::<_, &[u8]>(3) == event.data
            }))
        };
        match status.as_deref() {
            Some("committed") => match found() {
                Some(Some(ours)) => return Some(ours),
                // Not visible yet, or the look failed: ask again.
                Some(None) | None => continue,
            },
            Some("aborted") => match found() {
                Some(Some(true)) => return Some(true),
                Some(Some(false)) => return Some(false),
                Some(None) if aborted_once => return Some(false),
                Some(None) => aborted_once = true,
                None => continue,
            },
            // In progress: its backend has not noticed the connection is gone yet.
            _ => continue,
        }
    }
    None
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_pause_after_three_failures_in_a_row_for_pauses_that_double_and_a_merge_ends_them() {
        let start = Instant::now();
        let mut pauses = MergePauses::new();
        // Two failures, a merge, two more: never three in a row.
        assert_eq!((pauses.failed(start), pauses.failed(start)), (None, None));
        pauses.merged();
        assert_eq!((pauses.failed(start), pauses.failed(start)), (None, None));
        assert!(pauses.may_merge(start));
        // The third in a row pauses for a minute.
        assert_eq!(pauses.failed(start), Some(FIRST_MERGE_PAUSE));
        assert!(!pauses.may_merge(start + Duration::from_secs(59)));
        assert!(pauses.may_merge(start + FIRST_MERGE_PAUSE));
        // Three more failures after it: twice as long, and so on up to an hour.
        let later = start + FIRST_MERGE_PAUSE;
        assert_eq!((pauses.failed(later), pauses.failed(later)), (None, None));
        assert_eq!(pauses.failed(later), Some(FIRST_MERGE_PAUSE * 2));
        let mut longest = Duration::ZERO;
        for _ in 0..30 {
            for _ in 0..MERGE_FAILURES_TO_PAUSE {
                longest = pauses.failed(later).unwrap_or(longest);
            }
        }
        assert_eq!(longest, LONGEST_MERGE_PAUSE);
        // One merge, and the next pause is a minute again.
        pauses.merged();
        assert!(pauses.may_merge(later));
        for _ in 1..MERGE_FAILURES_TO_PAUSE {
            assert_eq!(pauses.failed(later), None);
        }
        assert_eq!(pauses.failed(later), Some(FIRST_MERGE_PAUSE));
    }
}
