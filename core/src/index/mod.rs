//! The index: per segment, a tag dictionary with postings and a dense type column, so that
//! reads and condition checks touch only the events they are about.
//!
//! A segment's index is either the in-memory [`tail::TailIndex`] (the active segment, and a
//! sealed one until its file is published) or an [`file::IndexFile`]. The planner
//! ([`plan`]) answers "which relative positions of this segment match this query inside this
//! window" from either, lazily and in either direction.

pub(crate) mod chunked;
pub(crate) mod file;
pub(crate) mod filter;
pub(crate) mod plan;
pub(crate) mod postings;
pub(crate) mod seal;
pub(crate) mod tail;

use std::sync::Arc;

use crate::error::Result;
use file::{IndexFile, VerifiedIndex};
use postings::Postings;
use tail::TailIndex;

/// How the planner may answer; anything but `Auto` is for differential tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Planner {
    /// Postings or scan per query item, whichever is cheaper.
    #[default]
    Auto,
    /// Always postings and the type column.
    ForceIndex,
    /// Always decode and test every event of the window (the oracle).
    ForceScan,
}

pub(crate) enum SegmentIndex {
    Tail(Arc<TailIndex>),
    Sealed(IndexFile),
}

impl SegmentIndex {
    /// The index ready for lookups. A sealed segment's index file has its block table and
    /// dictionaries verified by the first call (open checks only its header; each other block
    /// is checked by the lookup that first reads it); damage is answered from an index rebuilt
    /// from the log, or is `Corruption` if the log cannot give it.
    pub fn view(&self) -> Result<IndexView<'_>> {
        Ok(match self {
            SegmentIndex::Tail(tail) => IndexView::Tail(tail),
            SegmentIndex::Sealed(file) => IndexView::Sealed(file.verified()?),
        })
    }
}

/// The lookups of a segment's index, whichever form it has.
#[derive(Clone, Copy)]
pub(crate) enum IndexView<'a> {
    Tail(&'a Arc<TailIndex>),
    Sealed(&'a VerifiedIndex),
}

impl IndexView<'_> {
    /// Fallible because a sealed index checks the block it reads on its first read (see
    /// `file::BlockChecks`).
    #[inline]
    pub fn offset(&self, rel: u32) -> Result<u64> {
        match self {
            IndexView::Tail(tail) => Ok(tail.offset(rel)),
            IndexView::Sealed(file) => file.offset(rel),
        }
    }

    pub fn type_id(&self, name: &str) -> Option<u32> {
        match self {
            IndexView::Tail(tail) => tail.type_id(name),
            IndexView::Sealed(file) => file.type_id(name),
        }
    }

    /// Whether the offsets entry of `rel` has not been read yet (see
    /// `VerifiedIndex::entry_is_cold`); a tail index is in memory.
    pub fn entry_is_cold(&self, rel: u32) -> bool {
        match self {
            IndexView::Tail(_) => false,
            IndexView::Sealed(file) => file.entry_is_cold(rel),
        }
    }

    /// See `VerifiedIndex::prefetch_entries`; a tail index is in memory: nothing to ask for.
    pub fn prefetch_entries(&self, rel: u32, entries: u32, backwards: bool) -> Option<u32> {
        match self {
            IndexView::Tail(_) => None,
            IndexView::Sealed(file) => file.prefetch_entries(rel, entries, backwards),
        }
    }

    #[inline]
    pub fn type_at(&self, rel: u32) -> Result<u32> {
        match self {
            IndexView::Tail(tail) => Ok(tail.type_at(rel)),
            IndexView::Sealed(file) => file.type_at(rel),
        }
    }

    /// `judge_residency`: see `VerifiedIndex::tag_count`.
    pub fn tag_count(&self, tag: &str, judge_residency: bool) -> Result<u32> {
        match self {
            IndexView::Tail(tail) => Ok(tail.tag_count(tag)),
            IndexView::Sealed(file) => file.tag_count(tag, judge_residency),
        }
    }

    /// Postings of `tag` (None: no event of the segment has it).
    pub fn postings(&self, tag: &str) -> Result<Option<Postings>> {
        match self {
            IndexView::Tail(tail) => Ok(tail.postings(tag).map(Postings::List)),
            IndexView::Sealed(file) => file.postings(tag),
        }
    }
}
