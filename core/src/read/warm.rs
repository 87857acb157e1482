//! Cold tag reads across many sealed segments: their lookups run side by side.
//!
//! A tag's lookup in a cold segment is a chain of dependent page reads (index header,
//! dictionary nodes from the root down, postings, offsets, the few records the walk will
//! return), and a walk meeting segments one after another pays every segment's chain in turn.
//! The chains of different segments do not depend on each other, and the device serves many
//! reads at once, so the walk runs the next segments' lookups on short-lived threads first and
//! then walks them warm. What a warm-up does is what the walk would do in that segment, through
//! the same code; its results and errors are dropped: it only changes what is in the page cache
//! and which index blocks are checked. Measurements, and what was rejected: ARCHITECTURE.md,
//! "Cold lookups of many segments run side by side".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{prefetch_few_records, SegmentEntry};
use crate::index::plan::{Purpose, SegmentAccess, SegmentWalk};
use crate::index::{Planner, SegmentIndex};
use crate::query::Query;

/// Segments of the first warm-up; each later one warms twice as many, up to `MOST_SEGMENTS`.
/// Growing, so a read that ends early (a limit met in its first segments) warms at most about
/// as many segments again as it walked.
pub const FIRST_SEGMENTS: usize = 4;
pub const MOST_SEGMENTS: usize = 32;
/// Threads of one warm-up: each takes a share of its segments, one after another.
const THREADS: usize = 16;
/// Warm-up threads running at once in the process, all stores and reads together: a service's
/// first requests after a restart may all start cold at once, and 16 threads each would be
/// thousands. Past it, a warm-up runs on what is left, or not at all (the walk then opens its
/// segments itself, one after another, as without warm-ups).
const MOST_THREADS: usize = 64;
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Up to `wanted` of the `MOST_THREADS` counted by `running` (the process's `RUNNING`; a test's
/// own), released when dropped.
struct Threads<'a> {
    running: &'a AtomicUsize,
    granted: usize,
}

impl<'a> Threads<'a> {
    fn reserve(running: &'a AtomicUsize, wanted: usize) -> Threads<'a> {
        let mut now = running.load(Ordering::Relaxed);
        loop {
            let granted = wanted.min(MOST_THREADS.saturating_sub(now));
            if granted == 0 {
                return Threads { running, granted: 0 };
            }
            match running.compare_exchange_weak(now, now + granted, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Threads { running, granted },
                Err(seen) => now = seen,
            }
        }
    }
}

impl Drop for Threads<'_> {
    fn drop(&mut self) {
        self.running.fetch_sub(self.granted, Ordering::Relaxed);
    }
}

/// One segment to warm: its entry, and the walk's window inside it (relative positions).
pub struct Part {
    pub entry: Arc<SegmentEntry>,
    pub lo: u32,
    pub hi: u32,
}

/// Whether a walk would look tags up in `entry` cold: a sealed segment whose index was not
/// loaded since the open (and no warm-up failed to load it), or whose dictionary root was
/// never read or is not in memory.
pub fn is_cold(entry: &SegmentEntry) -> bool {
    match &**entry.index.load() {
        SegmentIndex::Sealed(file) => file.lookup_is_cold(),
        SegmentIndex::Tail(_) => false,
    }
}

/// Whether `query` looks tags up at all (a query of types only, or of everything, scans).
pub fn looks_tags_up(query: &Query) -> bool {
    match query {
        Query::All => false,
        Query::Items(items) => items.iter().any(|item| !item.tags.is_empty()),
    }
}

/// Runs the walk's opening of each part (lookups, few-records prefetch) on up to `THREADS`
/// threads (fewer when the process runs `MOST_THREADS` already), and returns when all are
/// done. A thread that cannot be started leaves its share to the walk.
pub fn warm_up(parts: &[Part], query: &Query, backwards: bool, planner: Planner, wanted: u64) {
    let reserved = Threads::reserve(&RUNNING, THREADS.min(parts.len()));
    let threads = reserved.granted;
    if threads == 0 {
        return;
    }
    WARMED_SEGMENTS.with(|n| n.set(n.get() + parts.len() as u64));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|t| {
                std::thread::Builder::new()
                    .name("lapilli-warm".into())
                    .spawn_scoped(scope, move || {
                        for part in parts.iter().skip(t).step_by(threads) {
                            open_like_the_walk(part, query, backwards, planner, wanted);
                        }
                    })
                    .ok()
            })
            .collect();
        for handle in handles {
            // A panic here is a bug the walk will meet on its own thread, with its own message.
            let _ = handle.join();
        }
    });
}

fn open_like_the_walk(part: &Part, query: &Query, backwards: bool, planner: Planner, wanted: u64) {
    let index = part.entry.index.load_full();
    let Ok(view) = index.view() else {
        // Not loaded (damage whose rebuild failed too, or an I/O error): judged warm from now
        // on, left to the walk, which meets it itself if it gets there.
        if let SegmentIndex::Sealed(file) = &*index {
            file.warm_up_failed();
        }
        return;
    };
    let access = SegmentAccess { base: part.entry.base, log: &part.entry.log, index: view };
    let Ok(walk) = SegmentWalk::new(&access, query, part.lo, part.hi, backwards, planner, Purpose::Many) else { return };
    prefetch_few_records(&access, &walk, wanted);
    // Coldness is judged by the dictionary root's page (`is_cold`): a walk answered without a
    // lookup (an absent type, a tag the filter rules out) leaves it out of memory after an
    // eviction, and every later read would warm this segment again, on threads, for nothing.
    if let SegmentIndex::Sealed(file) = &*index {
        file.touch_dictionary_root();
    }
}

thread_local! {
    /// Segments this thread's walks handed to warm-ups, for tests.
    static WARMED_SEGMENTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// See `WARMED_SEGMENTS`.
pub fn warmed_segments_on_this_thread() -> u64 {
    WARMED_SEGMENTS.with(|n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound holds however many warm-ups ask at once, and what one releases the next gets.
    #[test]
    fn warm_ups_share_at_most_most_threads() {
        let running = AtomicUsize::new(0);
        let mut held: Vec<Threads> = (0..MOST_THREADS / THREADS).map(|_| Threads::reserve(&running, THREADS)).collect();
        assert!(held.iter().all(|t| t.granted == THREADS));
        assert_eq!(Threads::reserve(&running, THREADS).granted, 0, "none left");
        held.pop();
        let partial = Threads::reserve(&running, THREADS + 5);
        assert_eq!(partial.granted, THREADS, "what was released, not more");
        assert_eq!(Threads::reserve(&running, 1).granted, 0);
        drop(partial);
        drop(held);
        assert_eq!(running.load(Ordering::Relaxed), 0, "all released");
    }
}
