"""The shape of `Store.stats()`: a plain dict, typed, so publishing it is a loop over items."""

from typing import Optional, TypedDict


class Stats(TypedDict):
    """What `Store.stats()` returns. Counters count what this handle did since it was opened
    (a follower appends nothing: its write counters are 0)."""

    head: int
    """The last committed position this handle sees."""
    events_appended: int
    bytes_appended: int
    """Log bytes (records and commit markers) this handle wrote."""
    group_commits: int
    """Group commits: one write, and with fsync durability one fsync, each."""
    events_per_commit_mean: float
    events_per_commit_max: int
    fsyncs: int
    """fsyncs of group commits measured by the latency histogram (0 with buffered durability)."""
    fsync_p50_micros: int
    """Upper bound of the histogram bucket holding the median (buckets at most 12.5 % wide)."""
    fsync_p99_micros: int
    fsync_max_micros: int
    """The slowest fsync, exact."""
    queue_depth: int
    """Appends handed to the writer and not yet taken into a group."""
    queue_depth_max: int
    segments: int
    index_bytes: int
    """Bytes of the index files in the store directory."""
    subscriptions: int
    """Subscriptions of this handle that are not closed."""
    follower_lag_positions: Optional[int]
    """For a read-only handle: events committed that it has not published yet; None otherwise."""
    follower_lag_millis: Optional[int]
    """For a read-only handle: how long ago the first of them was committed; None otherwise."""
