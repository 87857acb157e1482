//! Queries: which events a read, subscription or condition is about (`API.md`, "Query").

use crate::error::{Error, Result};
use crate::event::{EventView, MAX_TAG_BYTES, MAX_TYPE_BYTES, check_text};

/// One alternative of a query: the event's type is one of `types` (or `types` is empty), and
/// every tag of `tags` is among the event's tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueryItem {
    pub types: Vec<String>,
    pub tags: Vec<String>,
}

impl QueryItem {
    pub fn new(
        types: impl IntoIterator<Item = impl Into<String>>,
        tags: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        QueryItem {
            types: types.into_iter().map(Into::into).collect(),
            tags: tags.into_iter().map(Into::into).collect(),
        }
    }

    pub fn matches(&self, event: &EventView<'_>) -> bool {
        (self.types.is_empty() || self.types.iter().any(|t| t == event.event_type))
            && self.tags.iter().all(|tag| event.has_tag(tag))
    }
}

/// What a read, subscription or append condition selects. `All` matches every event; `Items`
/// matches an event when any item does. Built with [`Query::all`], [`Query::of`],
/// [`Query::for_tags`] and [`Query::for_types`]; checked (never guessed at) when used.
///
/// ```
/// use lapilli_core::{Durability, Event, Options, Query, QueryItem, ReadOptions, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Options { durability: Durability::Buffered, ..Options::default() })?;
/// store.append(
///     vec![
///         Event::new("CourseDefined", ["course:c1"], vec![]),
///         Event::new("StudentSubscribed", ["course:c1", "student:s1"], vec![]),
///         Event::new("StudentSubscribed", ["course:c2", "student:s2"], vec![]),
///     ],
///     None,
/// )?;
/// // An event matches when any item does; within an item, the type is one of `types` and
/// // every tag is among the event's tags.
/// let query = Query::of([
///     QueryItem::new(["CourseDefined"], ["course:c1"]),
///     QueryItem::new(["StudentSubscribed"], ["student:s2"]),
/// ]);
/// let positions = store
///     .read(&query, ReadOptions::default())?
///     .map(|e| e.map(|e| e.position.get()))
///     .collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(positions, [1, 3]);
/// assert_eq!(store.read(&Query::for_tags(["course:c1", "student:s1"]), ReadOptions::default())?.count(), 1);
/// assert_eq!(store.read(&Query::for_types(["StudentSubscribed"]), ReadOptions::default())?.count(), 2);
/// // A query without items is refused, never read as "everything": say `Query::all()`.
/// assert!(store.read(&Query::of([]), ReadOptions::default()).is_err());
/// assert_eq!(store.read(&Query::all(), ReadOptions::default())?.count(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Query {
    All,
    Items(Vec<QueryItem>),
}

impl Query {
    pub fn all() -> Self {
        Query::All
    }

    pub fn of(items: impl IntoIterator<Item = QueryItem>) -> Self {
        Query::Items(items.into_iter().collect())
    }

    pub fn for_tags(tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Query::Items(vec![QueryItem::new(Vec::<String>::new(), tags)])
    }

    pub fn for_types(types: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Query::Items(vec![QueryItem::new(types, Vec::<String>::new())])
    }

    pub fn matches(&self, event: &EventView<'_>) -> bool {
        match self {
            Query::All => true,
            Query::Items(items) => items.iter().any(|item| item.matches(event)),
        }
    }

    /// The rules of `API.md`: at least one item, each with a type or a tag, each string within
    /// its bounds. `name` says which argument this query is, for the message.
    pub fn validate(&self, name: &str) -> Result<()> {
        let Query::Items(items) = self else { return Ok(()) };
        if items.is_empty() {
            return Err(Error::invalid(format!(
                "{name} has no items; use Query.all() to match every event"
            )));
        }
        for (i, item) in items.iter().enumerate() {
            if item.types.is_empty() && item.tags.is_empty() {
                return Err(Error::invalid(format!("{name} item {i} has neither types nor tags")));
            }
            for (t, ty) in item.types.iter().enumerate() {
                check_text(&format_args!("{name} item {i}: type {t}"), ty, MAX_TYPE_BYTES)?;
            }
            for (t, tag) in item.tags.iter().enumerate() {
                check_text(&format_args!("{name} item {i}: tag {t}"), tag, MAX_TAG_BYTES)?;
            }
        }
        Ok(())
    }
}
