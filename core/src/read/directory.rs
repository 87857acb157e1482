//! Where each committed event lives: position -> (segment number, byte offset).
//!
//! Append-only and lock-free for readers. Slots are grouped in fixed-size chunks; the writer
//! fills slots and then publishes the head with `Release`, readers load the head with `Acquire`
//! and only look at slots at or below it, so a slot is never read before it is written. A new
//! chunk is published by swapping in a new list of chunk pointers (one small copy per 16k
//! events), never by moving slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

const CHUNK_BITS: u32 = 14;
const CHUNK_SLOTS: usize = 1 << CHUNK_BITS;
const OFFSET_BITS: u32 = 40;

/// Segment offsets are stored in 40 bits: segments are at most 1 TiB.
pub const MAX_SEGMENT_BYTES: u64 = 1 << OFFSET_BITS;

type Chunk = Box<[AtomicU64]>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locator {
    pub segment: usize,
    pub offset: usize,
}

pub struct Directory {
    chunks: ArcSwap<Vec<Arc<Chunk>>>,
}

impl Directory {
    pub fn new() -> Self {
        Directory { chunks: ArcSwap::from_pointee(Vec::new()) }
    }

    /// Records where `position` lives. Writer only; positions arrive in order.
    pub fn set(&self, position: u64, locator: Locator) {
        let slot = (position - 1) as usize;
        let chunk_index = slot >> CHUNK_BITS;
        let mut chunks = self.chunks.load();
        if chunk_index >= chunks.len() {
            let mut grown: Vec<Arc<Chunk>> = chunks.iter().cloned().collect();
            while grown.len() <= chunk_index {
                grown.push(Arc::new((0..CHUNK_SLOTS).map(|_| AtomicU64::new(0)).collect()));
            }
            self.chunks.store(Arc::new(grown));
            chunks = self.chunks.load();
        }
        let packed = ((locator.segment as u64) << OFFSET_BITS) | locator.offset as u64;
        chunks[chunk_index][slot & (CHUNK_SLOTS - 1)].store(packed, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> DirectorySnapshot {
        DirectorySnapshot { chunks: self.chunks.load_full() }
    }
}

/// The chunk list as of one moment; valid for every position at or below the head loaded
/// before it was taken.
#[derive(Clone)]
pub struct DirectorySnapshot {
    chunks: Arc<Vec<Arc<Chunk>>>,
}

impl DirectorySnapshot {
    pub fn get(&self, position: u64) -> Locator {
        let slot = (position - 1) as usize;
        let packed = self.chunks[slot >> CHUNK_BITS][slot & (CHUNK_SLOTS - 1)].load(Ordering::Relaxed);
        Locator {
            segment: (packed >> OFFSET_BITS) as usize,
            offset: (packed & ((1 << OFFSET_BITS) - 1)) as usize,
        }
    }
}
