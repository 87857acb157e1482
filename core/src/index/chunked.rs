//! Append-only arrays that one writer fills and any number of readers read without locks.
//!
//! Slots live in fixed-size chunks that never move; a new chunk is published by swapping in a
//! new list of chunk pointers. The writer stores slots with `Relaxed` and later publishes the
//! store head with `Release`; readers load the head with `Acquire` and read only slots it covers,
//! so a slot is never read before it is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use arc_swap::ArcSwap;

const CHUNK_BITS: u32 = 12;
const CHUNK_SLOTS: usize = 1 << CHUNK_BITS;

macro_rules! chunked_array {
    ($name:ident, $atomic:ty, $value:ty) => {
        pub struct $name {
            chunks: ArcSwap<Vec<Arc<Box<[$atomic]>>>>,
        }

        impl $name {
            pub fn new() -> Self {
                $name { chunks: ArcSwap::from_pointee(Vec::new()) }
            }

            /// Writer only.
            pub fn set(&self, index: usize, value: $value) {
                let chunk = index >> CHUNK_BITS;
                let mut chunks = self.chunks.load();
                if chunk >= chunks.len() {
                    let mut grown: Vec<_> = chunks.iter().cloned().collect();
                    while grown.len() <= chunk {
                        grown.push(Arc::new((0..CHUNK_SLOTS).map(|_| <$atomic>::new(0)).collect()));
                    }
                    self.chunks.store(Arc::new(grown));
                    chunks = self.chunks.load();
                }
                chunks[chunk][index & (CHUNK_SLOTS - 1)].store(value, Ordering::Relaxed);
            }

            /// A slot that the caller knows is published (at or below a head it loaded).
            pub fn get(&self, index: usize) -> $value {
                self.chunks.load()[index >> CHUNK_BITS][index & (CHUNK_SLOTS - 1)].load(Ordering::Relaxed)
            }
        }
    };
}

chunked_array!(ChunkedU32, AtomicU32, u32);
chunked_array!(ChunkedU64, AtomicU64, u64);
