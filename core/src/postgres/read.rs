//! Bounded reads from a Postgres context: keyset pages below a pinned head.
//!
//! The head is read from the context's row when the read begins. The row moves in the same
//! transaction that inserts the events below it, so every position at or below a head read
//! there is committed (no gap can be filled later): a read that stays below it sees a prefix,
//! page after page, without holding a transaction open.

use std::sync::Arc;

use postgres::Row;
use postgres::fallible_iterator::FallibleIterator;

use super::sql::{Condition, typed_params};
use super::{PgShared, pg_error};
use crate::error::Result;
use crate::event::{EventView, RECORD_KIND_EVENT};
use crate::position::Position;
use crate::query::Query;

/// The first page of a read; later pages double up to `MAX_PAGE`, so a decision's small read
/// costs one small round trip and a long read few.
const FIRST_PAGE: u64 = 256;
const MAX_PAGE: u64 = 8192;
/// The event bytes a page holds at most (plus the one event that crosses it): a page of 8192
/// events of a few hundred KiB each held some 800 MB. A page stops taking rows once it holds
/// this much, and the next page asks for as many rows as fit in it at the last page's average.
const PAGE_BYTES: usize = 4 << 20;
/// Rows of the window a page first looks at in order (the probe; about two heap pages).
const NEAR_ROWS: u64 = 256;
/// How many times the rows the probe's density predicts a bounded walk may read.
const WALK_MARGIN: u64 = 4;

pub(crate) struct PgRead {
    shared: Arc<PgShared>,
    condition: Condition,
    /// Whether the query is `Query::all()`: every row matches, and the key's order is the plan.
    everything: bool,
    /// The window still to read, inclusive; empty when `low > high`.
    low: u64,
    high: u64,
    backwards: bool,
    /// The head pinned when the read began.
    pub head: u64,
    /// At most this many more events are wanted (the read's limit).
    wanted: u64,
    page: Vec<Row>,
    next_row: usize,
    page_size: u64,
    /// Where a row is re-encoded as the canonical event payload, so that readers see the same
    /// `EventView` as from the embedded log.
    scratch: Vec<u8>,
}

/// What one look at a range of the window found.
struct Look {
    rows: Vec<Row>,
    bytes: usize,
    /// It stopped taking rows at the page's byte budget: the range is not done.
    cut: bool,
}

/// How a look orders its range.
#[derive(Clone, Copy)]
enum Plan {
    /// `ORDER BY position`: the planner may walk the primary key and filter, which costs the
    /// rows of the range it reads: bounded when the range is.
    Key,
    /// `ORDER BY position + 0`: the key's order is not offered, so the planner finds the matches
    /// through the indexes (GIN over tags, `(type, position)`) and sorts them: the cost of the
    /// matches in the range, not of the range.
    Matches,
}

/// The rows the next page asks for: double the last, unless the last page's events were large,
/// then as many as `PAGE_BYTES` holds at their average size.
fn next_page_size(page_size: u64, rows: usize, bytes: usize) -> u64 {
    if rows > 0 && bytes >= PAGE_BYTES / 2 {
        let average = (bytes / rows).max(1);
        ((PAGE_BYTES / average) as u64).clamp(1, MAX_PAGE)
    } else {
        (page_size * 2).min(MAX_PAGE)
    }
}

/// The bytes a row holds (its data, and a bound for its type, tags and fixed fields).
fn row_bytes(row: &Row) -> usize {
    let data: &[u8] = row.get(3);
    data.len() + 64
}

impl PgRead {
    pub fn new(shared: Arc<PgShared>, query: &Query, low: u64, high: u64, backwards: bool, head: u64, wanted: u64) -> PgRead {
        let condition = Condition::of(query, 3);
        PgRead {
            shared,
            condition,
            everything: matches!(query, Query::All),
            low: low.max(1),
            high: high.min(head),
            backwards,
            head,
            wanted,
            page: Vec::new(),
            next_row: 0,
            page_size: FIRST_PAGE,
            scratch: Vec::new(),
        }
    }

    /// A forward read of `query` over what follows this one's window, up to `head`, starting
    /// at the page size this one reached (a subscription's passes, one after another).
    pub fn continued(&self, query: &Query, head: u64) -> PgRead {
        let mut next = PgRead::new(self.shared.clone(), query, self.head + 1, head, false, head, u64::MAX);
        next.page_size = self.page_size;
        next
    }

    /// The first `limit` matches of `low..=high` in the read's direction, stopping early at
    /// `budget` bytes.
    fn look(&self, low: u64, high: u64, plan: Plan, limit: u64, budget: usize) -> Result<Look> {
        let order = if self.backwards { "DESC" } else { "ASC" };
        let key = match plan {
            Plan::Key => "position",
            Plan::Matches => "position + 0",
        };
        let statement = format!(
            "SELECT position, type, tags, data, recorded_at FROM {} WHERE position BETWEEN $1 AND $2 AND {} \
             ORDER BY {key} {order} LIMIT {limit}",
            self.shared.events, self.condition.sql
        );
        let low = low as i64;
        let high = high as i64;
        let shared = &self.shared;
        shared.looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let condition = &self.condition;
        shared.with_client(|client| {
            let fail = |e: postgres::Error| pg_error(&format!("cannot read from {}", shared.redacted), &e);
            // Row by row, so that a page of large events stops at the budget rather than
            // holding every row the statement returns; the rows after are dropped unread.
            let mut stream = client.query_typed_raw(&statement, typed_params(&[&low, &high], condition)).map_err(fail)?;
            let mut look = Look { rows: Vec::new(), bytes: 0, cut: false };
            while let Some(row) = stream.next().map_err(fail)? {
                look.bytes += row_bytes(&row);
                look.rows.push(row);
                if look.bytes >= budget {
                    look.cut = true;
                    break;
                }
            }
            Ok(look)
        })
    }

    /// The next page: the first `limit` matches of the window, in as few looks as the query's
    /// density allows.
    ///
    /// One statement over the whole window, `ORDER BY position LIMIT n`, is what the planner
    /// turns into a walk of the primary key whenever its estimates say matches are common, and
    /// for a type and a tag that are each common but never together that walk read every row
    /// of a million-event context (1 s for a `limit 1` read that found nothing). So, for any
    /// query but `Query::all()`:
    /// 1. the probe: the `NEAR_ROWS` rows at the window's near end, by the key (bounded);
    /// 2. if it found some matches but not enough, a walk by the key over as many rows as their
    ///    density predicts for the rest, times `WALK_MARGIN` (bounded: a common query is
    ///    answered here, as fast as before);
    /// 3. if still not enough, the rest of the window through the indexes (`Plan::Matches`):
    ///    the cost of its matches (a rare query: milliseconds however large the context).
    ///
    /// The looks cover consecutive ranges in the read's direction, so their rows, concatenated,
    /// are the window's first matches in order; the positions are gapless, so a range of n
    /// positions holds n rows.
    fn fetch(&mut self) -> Result<()> {
        let limit = self.page_size.min(self.wanted).max(1);
        let mut rows: Vec<Row> = Vec::new();
        let mut bytes = 0;
        let mut cut = false;
        // The part of the window no look has covered yet.
        let (mut low, mut high) = (self.low, self.high);
        let mut stage = if self.everything { 3 } else { 1 };
        while (rows.len() as u64) < limit && !cut && low <= high {
            let rest = high - low + 1;
            let (span, plan) = match stage {
                1 => (rest.min(NEAR_ROWS), Plan::Key),
                2 if !rows.is_empty() => {
                    let missing = limit - rows.len() as u64;
                    let predicted = missing.saturating_mul(NEAR_ROWS) / rows.len() as u64;
                    (rest.min(predicted.saturating_mul(WALK_MARGIN).max(NEAR_ROWS)), Plan::Key)
                }
                2 => {
                    stage = 3;
                    continue;
                }
                // Query::all() is walked by the key: every row is a match.
                _ if self.everything => (rest, Plan::Key),
                _ => (rest, Plan::Matches),
            };
            stage += 1;
            let (range_low, range_high) = if self.backwards { (high - span + 1, high) } else { (low, low + span - 1) };
            let look = self.look(range_low, range_high, plan, limit - rows.len() as u64, PAGE_BYTES - bytes)?;
            let full = (rows.len() + look.rows.len()) as u64 == limit;
            bytes += look.bytes;
            cut = look.cut;
            rows.extend(look.rows);
            if !full && !cut {
                // The range is done: the next look starts past it.
                if self.backwards {
                    high = range_low - 1;
                } else {
                    low = range_high + 1;
                }
            }
        }
        if (rows.len() as u64) < limit && !cut {
            // Every range of the window was looked at: nothing more in it after this page.
            self.low = 1;
            self.high = 0;
        } else if let Some(last) = rows.last() {
            let last = last.get::<_, i64>(0) as u64;
            if self.backwards {
                self.high = last - 1;
            } else {
                self.low = last + 1;
            }
        }
        self.page_size = next_page_size(self.page_size, rows.len(), bytes);
        self.page = rows;
        self.next_row = 0;
        Ok(())
    }

    /// The next matching event, shown to `visit`; None when the window is done.
    pub fn next<T>(&mut self, visit: impl FnOnce(&EventView<'_>) -> T) -> Result<Option<(Position, T)>> {
        if self.next_row == self.page.len() {
            if self.low > self.high || self.wanted == 0 {
                return Ok(None);
            }
            self.fetch()?;
            if self.page.is_empty() {
                return Ok(None);
            }
        }
        let row = &self.page[self.next_row];
        self.next_row += 1;
        self.wanted = self.wanted.saturating_sub(1);
        let position = Position(row.get::<_, i64>(0) as u64);
        encode_row(row, &mut self.scratch);
        if self.next_row == self.page.len() {
            // Delivered: a read kept between a subscription's passes holds no page it is done with.
            self.page = Vec::new();
            self.next_row = 0;
        }
        let view = EventView::decode(position, &self.scratch)?;
        Ok(Some((position, visit(&view))))
    }
}

/// A row as the payload of an event record (`ARCHITECTURE.md`, "Event payload"); its tags are
/// stored sorted.
fn encode_row(row: &Row, out: &mut Vec<u8>) {
    let event_type: &str = row.get(1);
    let tags: Vec<&str> = row.get(2);
    let data: &[u8] = row.get(3);
    let recorded_at = row.get::<_, i64>(4) as u64;
    out.clear();
    out.push(RECORD_KIND_EVENT);
    out.extend_from_slice(&recorded_at.to_le_bytes());
    out.push(event_type.len() as u8);
    out.push(tags.len() as u8);
    for tag in &tags {
        out.extend_from_slice(&(tag.len() as u16).to_le_bytes());
    }
    out.extend_from_slice(event_type.as_bytes());
    for tag in &tags {
        out.extend_from_slice(tag.as_bytes());
    }
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_small_events_double_and_pages_of_large_ones_shrink_to_the_byte_budget() {
        assert_eq!(next_page_size(256, 256, 256 * 300), 512);
        assert_eq!(next_page_size(8192, 8192, 8192 * 300), MAX_PAGE);
        // A page of 300 KiB events: the next asks for what 4 MiB holds.
        let large = (300 << 10) + 64;
        assert_eq!(next_page_size(256, 14, 14 * large), (PAGE_BYTES / large) as u64);
        // Events larger than the budget: one a page.
        assert_eq!(next_page_size(256, 1, 16 << 20), 1);
        // Small again: doubling resumes.
        assert_eq!(next_page_size(13, 13, 13 * 100), 26);
        // An empty page (nothing matched) doubles.
        assert_eq!(next_page_size(256, 0, 0), 512);
    }
}
