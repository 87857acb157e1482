//! Statistics a handle keeps about itself, always on: one relaxed add per request by its caller,
//! and per group plain stores by the writer thread (the only thread that writes them) into
//! counters and a fixed-size histogram of fsync latencies. [`crate::Store::stats`] reads them
//! into a [`Stats`].
//!
//! Why so careful: appends are a few microseconds of CPU when durability is buffered, and a
//! contended read-modify-write on a cache line another core also writes costs a cross-core
//! transfer each time. The first version (two RMWs per caller, a CAS loop and three RMWs per
//! group, beside `head`) cost 9 to 15 % of the CPU-bound write cells
//! (`bench/results/stats-cost-2026-12-01.md`).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a handle reports about itself (see [`crate::Store::stats`]). Counters count what this
/// handle did since it was opened: a follower appends nothing, so its write counters are 0, and
/// another process's writes show only in `head` and the follower lag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// The last committed position this handle sees.
    pub head: u64,
    /// Events this handle appended since it was opened.
    pub events_appended: u64,
    /// Log bytes (records and commit markers) this handle wrote since it was opened.
    pub bytes_appended: u64,
    /// Group commits: one write (and with `fsync` durability one fsync) each.
    pub group_commits: u64,
    /// `events_appended / group_commits` (0 before the first commit).
    pub events_per_commit_mean: f64,
    /// Most events one group commit wrote.
    pub events_per_commit_max: u64,
    /// fsyncs of group commits measured by the latency histogram.
    pub fsyncs: u64,
    /// fsync latency percentiles in microseconds: the upper bound of the histogram bucket
    /// holding the percentile (buckets are at most 12.5 % wide), 0 before the first fsync.
    pub fsync_p50_micros: u64,
    pub fsync_p99_micros: u64,
    /// The slowest fsync, exact.
    pub fsync_max_micros: u64,
    /// Appends handed to the writer and not yet taken into a group, now and at most so far (the
    /// maximum is sampled each time the writer takes a group, and is never below the depth now).
    pub queue_depth: u64,
    pub queue_depth_max: u64,
    /// Segment files of the log this handle sees.
    pub segments: u64,
    /// Bytes of the index files in the store directory (sealed segments and parts).
    pub index_bytes: u64,
    /// Subscriptions of this handle that are not closed.
    pub subscriptions: u64,
    /// For a read-only handle: events committed in the segment it follows that it has not
    /// published yet, and how long ago the oldest of them was committed (ms). None for a
    /// writable handle.
    pub follower_lag_positions: Option<u64>,
    pub follower_lag_millis: Option<u64>,
}

/// Exact below this many microseconds, one bucket each.
const LINEAR_MICROS: u64 = 16;
/// Sub-buckets per power of two above that: each bucket is at most 1/8 of its lower bound wide.
const SUB_BUCKETS: u64 = 8;
/// Buckets for latencies up to 2^44 µs (about 200 days); anything longer lands in the last.
const BUCKETS: usize = (LINEAR_MICROS + (44 - 4) * SUB_BUCKETS) as usize;

/// A fixed-size latency histogram (log-linear buckets of microseconds) that one thread records
/// into and any thread reads, without locks. Recording is three relaxed loads and stores: only
/// the one recording thread (a handle's writer) ever writes it.
pub(crate) struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

fn bucket_of(micros: u64) -> usize {
    if micros < LINEAR_MICROS {
        return micros as usize;
    }
    let exponent = 63 - micros.leading_zeros() as u64; // >= 4
    let sub = (micros >> (exponent - 3)) & (SUB_BUCKETS - 1);
    ((LINEAR_MICROS + (exponent - 4) * SUB_BUCKETS + sub) as usize).min(BUCKETS - 1)
}

/// The largest value bucket `i` holds.
fn bucket_upper(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR_MICROS {
        return i;
    }
    let exponent = (i - LINEAR_MICROS) / SUB_BUCKETS + 4;
    let sub = (i - LINEAR_MICROS) % SUB_BUCKETS;
    let width = 1u64 << (exponent - 3);
    (1u64 << exponent) + (sub + 1) * width - 1
}

impl LatencyHistogram {
    /// Only ever called from one thread at a time (the handle's writer).
    pub fn record(&self, micros: u64) {
        bump(&self.buckets[bucket_of(micros)], 1);
        bump(&self.count, 1);
        if micros > self.max.load(Ordering::Relaxed) {
            self.max.store(micros, Ordering::Relaxed);
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// For each `quantile` (0..=1), the upper bound of the bucket holding it among the values
    /// recorded, never above the exact maximum; 0 with nothing recorded. All from one snapshot
    /// of the buckets, so that they are in order even while the writer records (two snapshots
    /// could give a p50 above the p99).
    pub fn quantiles<const N: usize>(&self, quantiles: [f64; N]) -> [u64; N] {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let max = self.max();
        quantiles.map(|quantile| Self::quantile_of(&counts, max, quantile))
    }

    fn quantile_of(counts: &[u64], max: u64, quantile: f64) -> u64 {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((quantile * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_upper(i).min(max);
            }
        }
        max
    }
}

/// `counter += n` for a counter only one thread writes: a relaxed load and store, no locked
/// read-modify-write. Readers on other threads see the old or the new value, never a torn one.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// The counters behind [`Stats`]. Callers touch only `enqueued`; the writer thread is the only
/// writer of everything in [`WriterCounters`]. Each side has its own cache lines (128 bytes: a
/// pair of 64-byte lines, which adjacent-line prefetch moves together), apart from `head` and
/// from each other.
#[derive(Default)]
pub(crate) struct Counters {
    callers: CallerCounters,
    writer: WriterCounters,
    pub fsync_micros: LatencyHistogram,
}

#[derive(Default)]
#[repr(align(128))]
struct CallerCounters {
    /// Requests callers handed to the writer's queue since open.
    enqueued: AtomicU64,
    /// Subscriptions opened minus closed (rare; any thread).
    subscriptions: AtomicU64,
}

#[derive(Default)]
#[repr(align(128))]
struct WriterCounters {
    /// Requests the writer took off its queue since open.
    dequeued: AtomicU64,
    /// The most requests waiting when the writer took a group.
    queue_depth_max: AtomicU64,
    events_appended: AtomicU64,
    bytes_appended: AtomicU64,
    events_per_commit_max: AtomicU64,
}

impl Counters {
    /// A caller is handing a request to the writer's queue (called before the send, so the
    /// writer never takes a request it has not seen counted).
    pub fn enqueued(&self) {
        self.callers.enqueued.fetch_add(1, Ordering::Relaxed);
    }

    /// The writer took `n` requests off its queue. Between two takes the queue only grows, so
    /// its depth peaks just before a take: measured here, the maximum is exact up to requests
    /// that arrived while the group was being taken. Writer thread only.
    pub fn dequeued(&self, n: u64) {
        let taken_before = self.writer.dequeued.load(Ordering::Relaxed);
        let waiting = self.callers.enqueued.load(Ordering::Relaxed).saturating_sub(taken_before);
        if waiting > self.writer.queue_depth_max.load(Ordering::Relaxed) {
            self.writer.queue_depth_max.store(waiting, Ordering::Relaxed);
        }
        // Release: a reader that sees this take also sees the `enqueued` adds of the requests
        // taken (see `queue_depth`).
        let dequeued = &self.writer.dequeued;
        dequeued.store(dequeued.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// The writer committed a group of `events` events in `bytes` log bytes. Writer thread only.
    pub fn committed(&self, events: u64, bytes: u64) {
        bump(&self.writer.events_appended, events);
        bump(&self.writer.bytes_appended, bytes);
        if events > self.writer.events_per_commit_max.load(Ordering::Relaxed) {
            self.writer.events_per_commit_max.store(events, Ordering::Relaxed);
        }
    }

    pub fn subscription_opened(&self) {
        self.callers.subscriptions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn subscription_closed(&self) {
        self.callers.subscriptions.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn subscriptions(&self) -> u64 {
        self.callers.subscriptions.load(Ordering::Relaxed)
    }

    /// Requests handed to the writer and not yet taken. (A request whose send found the writer
    /// gone stays counted; `stats()` on a closed handle answers `Closed` anyway.)
    pub fn queue_depth(&self) -> u64 {
        // Dequeued first, with Acquire (paired with the writer's Release): every request it
        // counts was counted in `enqueued` before, so the difference is never below zero
        // (`saturating_sub` only as a guard).
        let taken = self.writer.dequeued.load(Ordering::Acquire);
        self.callers.enqueued.load(Ordering::Relaxed).saturating_sub(taken)
    }

    /// The most requests that waited at once. Sampled when the writer takes a group; while
    /// the writer is still busy with one (a long fsync, a lock wait on Postgres) the queue can
    /// already be deeper than any take saw, so the current depth counts too: the maximum is
    /// never below what `queue_depth` says.
    pub fn queue_depth_max(&self) -> u64 {
        self.writer.queue_depth_max.load(Ordering::Relaxed).max(self.queue_depth())
    }

    pub fn events_appended(&self) -> u64 {
        self.writer.events_appended.load(Ordering::Relaxed)
    }

    pub fn bytes_appended(&self) -> u64 {
        self.writer.bytes_appended.load(Ordering::Relaxed)
    }

    pub fn events_per_commit_max(&self) -> u64 {
        self.writer.events_per_commit_max.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_bounds_hold_it() {
        let mut previous_upper = None;
        for i in 0..BUCKETS {
            let upper = bucket_upper(i);
            if let Some(previous) = previous_upper {
                assert!(upper > previous, "bucket {i}");
                assert_eq!(bucket_of(previous + 1), i, "lower bound of bucket {i}");
            }
            assert_eq!(bucket_of(upper), i, "upper bound of bucket {i}");
            previous_upper = Some(upper);
        }
        for micros in [0, 1, 15, 16, 17, 100, 1000, 12_345, 1 << 30] {
            let upper = bucket_upper(bucket_of(micros));
            assert!(upper >= micros && upper - micros <= micros / 8 + 1, "{micros} -> {upper}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_come_from_the_recorded_values() {
        let histogram = LatencyHistogram::default();
        assert_eq!(histogram.quantiles([0.5]), [0]);
        for micros in 1..=100 {
            histogram.record(micros * 10);
        }
        let [p50, p99] = histogram.quantiles([0.5, 0.99]);
        assert!((500..=500 + 500 / 8).contains(&p50), "p50 {p50}");
        assert!((990..=1000).contains(&p99), "p99 {p99}");
        assert_eq!(histogram.max(), 1000);
        assert_eq!(histogram.count(), 100);
    }
}
