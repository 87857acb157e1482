//! Bounded reads from a Postgres context: keyset pages below a pinned head.
//!
//! The head is read from the context's row when the read begins. The row moves in the same
//! transaction that inserts the events below it, so every position at or below a head read
//! there is committed (no gap can be filled later): a read that stays below it sees a prefix,
//! page after page, without holding a transaction open.

use std::sync::Arc;

use postgres::Row;

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

pub(crate) struct PgRead {
    shared: Arc<PgShared>,
    condition: Condition,
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

impl PgRead {
    pub fn new(shared: Arc<PgShared>, query: &Query, low: u64, high: u64, backwards: bool, head: u64, wanted: u64) -> PgRead {
        let condition = Condition::of(query, 3);
        PgRead {
            shared,
            condition,
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

    fn fetch(&mut self) -> Result<()> {
        let limit = self.page_size.min(self.wanted).max(1);
        self.page_size = (self.page_size * 2).min(MAX_PAGE);
        let order = if self.backwards { "DESC" } else { "ASC" };
        let statement = format!(
            "SELECT position, type, tags, data, recorded_at FROM {} WHERE position BETWEEN $1 AND $2 AND {} \
             ORDER BY position {order} LIMIT {limit}",
            self.shared.events, self.condition.sql
        );
        let low = self.low as i64;
        let high = self.high as i64;
        let shared = self.shared.clone();
        let condition = &self.condition;
        let rows = shared.with_client(|client| {
            client
                .query_typed(&statement, &typed_params(&[&low, &high], condition))
                .map_err(|e| pg_error(&format!("cannot read from {}", shared.redacted), &e))
        })?;
        if (rows.len() as u64) < limit {
            // Nothing more in the window after this page.
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
