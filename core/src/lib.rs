//! Lapilli: an embedded event store for the Dynamic Consistency Boundary (DCB) pattern.
//!
//! One directory holds one bounded context: a single global order of events, each with a type
//! and tags. A decision reads the events it depends on ([`Store::read`] with a [`Query`]) and
//! appends guarded by the same query ([`AppendCondition`]): "fail if anything matching this was
//! appended after the position I read at". See `API.md` for the contract all runtimes share
//! and `ARCHITECTURE.md` for how the engine keeps it.
//!
//! Layers: [`log`] (segments, framing, recovery), `writer` (group commit and conditions),
//! `read` (snapshots and bounded reads), `subscribe` (catch-up and live as one loop), and
//! [`Store`], the front door.

mod append;
mod completion;
mod error;
mod index;
mod location;
mod event;
#[doc(hidden)]
pub mod fault;
mod follow;
mod inspect;
#[doc(hidden)]
pub mod fuzzing;
mod open;
#[cfg(feature = "postgres")]
mod postgres;
mod options;
pub mod log;
mod position;
mod query;
mod read;
mod stats;
mod store;
mod subscribe;
mod writer;

pub use error::{Error, ErrorKind, Result};
pub use index::Planner;
pub use location::Location;
pub use event::{Event, EventView, MAX_TAG_BYTES, MAX_TAGS, MAX_TYPE_BYTES, SequencedEvent};
pub use position::Position;
pub use query::{Query, QueryItem};
pub use read::{ReadOptions, ReadResult};
pub use append::{AppendCondition, AppendResult};
pub use open::RecoveryReport;
pub use options::{
    DEFAULT_FILE_MODE, DEFAULT_MAX_EVENT_BYTES, DEFAULT_SEGMENT_SIZE, Durability, MAX_EVENT_BYTES_LIMIT, MAX_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE, Options,
};
pub use store::Store;
pub use stats::Stats;
pub use inspect::{Fault, INDEX_FILE_FORMAT_VERSION, IndexState, SEGMENT_FORMAT_VERSION, SegmentInfo, VerifyReport, verify};
pub use subscribe::{Next, Subscription};
pub use writer::reply::PendingAppend;

/// The maps of types and tags the writer and the sealer fill for every event (ARCHITECTURE.md,
/// "Hashing names").
pub(crate) type NameHasher = ahash::RandomState;

// The faces hand reads, subscriptions and stores between threads (and release their runtime's
// lock around blocking calls): whatever a backend keeps in them must stay `Send + Sync`.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Store>();
    shared::<ReadResult>();
    shared::<Subscription>();
    shared::<PendingAppend>();
};
