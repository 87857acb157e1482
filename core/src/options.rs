//! The options a store is opened with, and their limits. A value type that every layer below the
//! front door reads (the writer, the opener), so it lives apart from `store.rs`.

use crate::error::{Error, Result};

/// Whether an append returns only once its batch is on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// One fsync per group commit before any of its appends returns. The default.
    #[default]
    Fsync,
    /// Written to the OS, not forced: for tests and throwaway data.
    Buffered,
}

impl std::str::FromStr for Durability {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fsync" => Ok(Durability::Fsync),
            "buffered" => Ok(Durability::Buffered),
            other => Err(Error::invalid(format!(
                "durability is {other:?}; it must be \"fsync\" or \"buffered\""
            ))),
        }
    }
}

pub const DEFAULT_SEGMENT_SIZE: u64 = 256 << 20;
/// See [`Options::part_bytes`]: 4 MiB of events is some 10 to 50 thousand events indexed in
/// memory, and some 10 ms of scanning for an open after a crash.
pub const DEFAULT_PART_BYTES: u64 = 4 << 20;
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 << 20;
/// Largest `max_event_bytes` accepted: an event's record length (its data plus the largest
/// possible type and tags) must fit the frame's 32-bit length field.
pub const MAX_EVENT_BYTES_LIMIT: usize = u32::MAX as usize - crate::event::MAX_EVENT_OVERHEAD;
/// Smallest segment accepted: room for a header and a few small batches.
pub const MIN_SEGMENT_SIZE: u64 = 4096;
/// Largest segment accepted: relative positions and tag occurrences inside one segment are
/// 32-bit, and a 64 GiB segment holds fewer than 2^32 of the smallest events.
pub const MAX_SEGMENT_SIZE: u64 = 64 << 30;
/// Permission bits of the files a store creates unless told otherwise: the owner's alone, as
/// PostgreSQL keeps its data directory, since the events are whatever the application wrote.
pub const DEFAULT_FILE_MODE: u32 = 0o600;

/// The smallest record an event can be: its frame, the fixed fields and a one-byte type.
const MIN_EVENT_RECORD: u64 = (crate::log::format::FRAME_LEN + crate::event::EVENT_FIXED_BYTES + 1) as u64;
// Positions inside a segment, and each tag's count of events in the tail index, are 32-bit:
// the largest segment must not hold 2^32 events.
const _: () = assert!(MAX_SEGMENT_SIZE / MIN_EVENT_RECORD < u32::MAX as u64);
/// Appends queued beyond this make callers wait (backpressure).
pub(crate) const QUEUE_DEPTH: usize = 16 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub durability: Durability,
    /// Size of each segment file, preallocated. Applies to segments created from now on.
    pub segment_size: u64,
    pub max_event_bytes: usize,
    /// Permission bits of every file the writer creates (segments, index files, `LOCK`), set
    /// exactly, whatever the umask. The store's directory, when the open creates it, gets rwx
    /// for the owner and, for each read bit here, that read bit and its execute bit. Default
    /// `0o600`; `0o640` shares the store with a follower running as another user of the
    /// directory's group. Only permission bits, and the owner must read and write.
    pub file_mode: u32,
    /// How much of the active segment's log is indexed in memory only: past this many bytes the
    /// writer starts a new part and the sealer writes the finished part's index file. It bounds
    /// the writer's memory and what an open scans after a crash. Small values are for tests.
    #[doc(hidden)]
    pub part_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Fsync,
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            file_mode: DEFAULT_FILE_MODE,
            part_bytes: DEFAULT_PART_BYTES,
        }
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.segment_size < MIN_SEGMENT_SIZE || self.segment_size > MAX_SEGMENT_SIZE {
            return Err(Error::invalid(format!(
                "segment_size is {}; it must be between {MIN_SEGMENT_SIZE} and {MAX_SEGMENT_SIZE}",
                self.segment_size
            )));
        }
        if self.part_bytes == 0 {
            return Err(Error::invalid("part_bytes is 0; it must be at least 1"));
        }
        if self.max_event_bytes > MAX_EVENT_BYTES_LIMIT {
            return Err(Error::invalid(format!(
                "max_event_bytes is {}; the limit is {MAX_EVENT_BYTES_LIMIT}",
                self.max_event_bytes
            )));
        }
        if self.file_mode & !0o777 != 0 || self.file_mode & 0o600 != 0o600 {
            return Err(Error::invalid(format!(
                "file_mode is {:#o}; it must be permission bits only (within 0o777) that let the \
                 owner read and write (0o600)",
                self.file_mode
            )));
        }
        Ok(())
    }

    /// The mode of a store directory the open creates: the owner's rwx, and whoever may read
    /// the files may also list and enter the directory (a read bit without its execute bit
    /// would let them see names but open nothing). Write bits beyond the owner's are never
    /// given: only the writer creates files there.
    pub(crate) fn dir_mode(&self) -> u32 {
        let read = self.file_mode & 0o044;
        0o700 | read | (read >> 2)
    }
}
