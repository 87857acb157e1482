//! What an append is guarded by and what it answers: value types shared by the front door, the
//! writer and the reply slot.

use crate::position::Position;
use crate::query::Query;

/// Guards an append (`API.md`, "Append"): the boundary clause fails with `Conflict` when an event
/// matching `fail_if_events_match` lies after `after`; the existence clause fails with
/// `AlreadyExists` when an event matching `fail_if_exists` lies anywhere. The boundary clause is
/// checked first.
///
/// ```
/// use lapilli_core::{AppendCondition, ErrorKind, Event, Options, Query, ReadOptions, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Options::default())?;
/// let course = Query::for_tags(["course:c1"]);
/// // Decide on what a read showed, and append only if nothing relevant happened since.
/// let seen = store.read(&course, ReadOptions::default())?.head();
/// let guard = AppendCondition::new(course.clone()).after(seen);
/// store.append(vec![Event::new("CourseDefined", ["course:c1"], vec![])], Some(guard.clone()))?;
/// // A second decision taken on the same, now stale, read conflicts.
/// let err = store.append(vec![Event::new("CourseDefined", ["course:c1"], vec![])], Some(guard)).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Conflict);
/// assert_eq!(err.position().map(|p| p.get()), Some(1));
/// // The existence clause looks at the whole store, whatever `after` says: a uniqueness guard.
/// let unique = AppendCondition::new(course.clone())
///     .after(store.head()?)
///     .fail_if_exists(Query::for_tags(["course:c1"]));
/// let err = store.append(vec![Event::new("CourseDefined", ["course:c1"], vec![])], Some(unique)).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::AlreadyExists);
/// assert_eq!(store.head()?.get(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendCondition {
    pub fail_if_events_match: Query,
    pub after: Option<Position>,
    pub fail_if_exists: Option<Query>,
}

impl AppendCondition {
    pub fn new(fail_if_events_match: Query) -> Self {
        AppendCondition { fail_if_events_match, after: None, fail_if_exists: None }
    }

    pub fn after(mut self, after: Position) -> Self {
        self.after = Some(after);
        self
    }

    pub fn fail_if_exists(mut self, query: Query) -> Self {
        self.fail_if_exists = Some(query);
        self
    }
}

/// Positions given to an append's events; `last` is the head right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AppendResult {
    pub first: Position,
    pub last: Position,
}
