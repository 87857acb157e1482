"""Type stubs for the native module `lapilli._lapilli` (checked with `mypy.stubtest`).

Stubs are never executed, so the optional dataframe libraries are imported here plainly: a
type checker resolves `to_arrow()` to `pyarrow.Table` where pyarrow's types are available and
to `Any` where they are not; nothing is imported at run time.
"""

import asyncio
import datetime
import os
import pathlib
from collections.abc import Callable, Iterable
from typing import ClassVar, Literal, Optional, Union, final

import pandas  # type: ignore[import-untyped]
import polars
import pyarrow  # type: ignore[import-untyped]

from lapilli.stats import Stats

__all__ = [
    "Store",
    "Event",
    "SequencedEvent",
    "QueryItem",
    "Query",
    "AppendCondition",
    "AppendResult",
    "ReadResult",
    "ArrowStream",
    "Subscription",
    "PendingAppend",
    "LapilliError",
    "ConflictError",
    "AlreadyExistsError",
    "InvalidArgumentError",
    "StoreLockedError",
    "StoreClosedError",
    "ReadOnlyError",
    "CorruptionError",
    "LapilliIOError",
    "__version__",
]

__version__: str
"""The package version."""

_StrPath = Union[str, "os.PathLike[str]"]
_Bytes = Union[bytes, bytearray, memoryview]

def _set_arrow_batch_bytes(bytes: int) -> int:
    """Test knob, not API: sets the byte budget of one Arrow batch; returns the previous one."""

def _cli_main(argv: list[str]) -> int:
    """Runs the `lapilli` command line with `argv` (program name first); returns its exit
    status. Called by `python -m lapilli` and the `lapilli` script."""

def _panic_for_test(site: str) -> None:
    """Test knob, not API: panics inside the binding at `site` ("attached", "detached",
    "arrow"), to prove a panic reaches Python as a `LapilliError`."""

class LapilliError(Exception):
    """Base of every error the store raises. `.code` is the stable kind name ("CONFLICT", ...);
    `.position` the conflicting event where known. A bug inside lapilli (a Rust panic) is
    raised as a plain `LapilliError` whose message starts "internal error in lapilli"."""

    code: ClassVar[Optional[str]]
    """The stable kind name, the same in every runtime; None on the base class."""
    position: Optional[int]
    """The position of the conflicting event (ConflictError, AlreadyExistsError), else None."""

class ConflictError(LapilliError):
    """An event matching the condition's fail_if_events_match lies after its `after`.
    `.position` is the first such event."""

class AlreadyExistsError(LapilliError):
    """An event matching the condition's fail_if_exists lies somewhere in the store.
    `.position` is the first such event."""

class InvalidArgumentError(LapilliError, ValueError):
    """Bad input (a value out of its bounds, an empty list, `after` beyond the head, ...).
    Nothing was changed."""

class StoreLockedError(LapilliError):
    """Another handle, in this or another process, holds the store writable."""

class StoreClosedError(LapilliError):
    """The store (or subscription) is closed."""

class ReadOnlyError(LapilliError):
    """A write on a read-only handle, or read-only handles are not available."""

class CorruptionError(LapilliError):
    """Bytes on disk do not validate where they must."""

class LapilliIOError(LapilliError, OSError):
    """The operating system reported an I/O failure."""

@final
class Event:
    """An event to append: a type, tags (order given does not matter) and data bytes."""

    def __new__(
        cls,
        type: str,
        tags: Optional[Iterable[str]] = None,
        data: Optional[_Bytes] = None,
    ) -> Event: ...
    @property
    def type(self) -> str:
        """The event type (1 to 255 bytes of UTF-8)."""
    @property
    def tags(self) -> list[str]:
        """The tags, in the order given."""
    @property
    def data(self) -> bytes:
        """The payload."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class SequencedEvent:
    """An event as stored, as reads and subscriptions return it. Tags are sorted."""

    def __new__(
        cls,
        position: int,
        type: str,
        tags: Optional[Iterable[str]] = None,
        data: Optional[_Bytes] = None,
        recorded_at_us: int = 0,
    ) -> SequencedEvent: ...
    @property
    def position(self) -> int:
        """The event's place in the store's one global order (from 1)."""
    @property
    def type(self) -> str:
        """The event type."""
    @property
    def tags(self) -> list[str]:
        """The tags, sorted bytewise."""
    @property
    def data(self) -> bytes:
        """The payload."""
    @property
    def recorded_at(self) -> datetime.datetime:
        """The commit time of the event's batch, an aware `datetime` in UTC."""
    @property
    def recorded_at_us(self) -> int:
        """The commit time in microseconds since the Unix epoch."""
    def to_event(self) -> Event:
        """The plain `Event` (type, tags, data) without position and time."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class QueryItem:
    """One alternative of a query: the event's type is one of `types` (or `types` is empty)
    and every tag of `tags` is among the event's tags."""

    def __new__(
        cls, types: Optional[Iterable[str]] = None, tags: Optional[Iterable[str]] = None
    ) -> QueryItem: ...
    @property
    def types(self) -> list[str]:
        """The types, any of which matches; empty for any type."""
    @property
    def tags(self) -> list[str]:
        """The tags, all of which an event must carry."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Query:
    """What a read, subscription or condition selects: `Query.all()`, or any of some items.
    Checked when built: an empty item list, an item with neither types nor tags, or an empty
    or oversized string raises `InvalidArgumentError`."""

    @staticmethod
    def all() -> Query:
        """Matches every event."""
    @staticmethod
    def of(items: Iterable[QueryItem]) -> Query:
        """Matches an event when any of `items` does."""
    @staticmethod
    def for_tags(*tags: str) -> Query:
        """One item with these tags (all required) and any type."""
    @staticmethod
    def for_types(*types: str) -> Query:
        """One item with these types (any of them) and no tags."""
    @property
    def items(self) -> list[QueryItem]:
        """The items; empty for `Query.all()`."""
    @property
    def is_all(self) -> bool:
        """True for `Query.all()`."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class AppendCondition:
    """Guards an append: fail with `ConflictError` if an event matching
    `fail_if_events_match` lies after `after` (None: anywhere), and with `AlreadyExistsError`
    if an event matching `fail_if_exists` lies anywhere (the clause that makes a retried
    append idempotent)."""

    def __new__(
        cls,
        fail_if_events_match: Query,
        after: Optional[int] = None,
        fail_if_exists: Optional[Query] = None,
    ) -> AppendCondition: ...
    @property
    def fail_if_events_match(self) -> Query:
        """The query no event after `after` may match."""
    @property
    def after(self) -> Optional[int]:
        """The head the decision was made at (None: the whole store is checked)."""
    @property
    def fail_if_exists(self) -> Optional[Query]:
        """The query no event anywhere may match, or None."""
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

@final
class AppendResult:
    """The positions an append was given; `last` is the head right after it."""

    def __new__(cls, first: int, last: int) -> AppendResult: ...
    @property
    def first(self) -> int:
        """The position of the append's first event."""
    @property
    def last(self) -> int:
        """The position of the append's last event."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ArrowStream:
    """An exporter of a read's remaining events, speaking the Arrow PyCapsule stream
    protocol."""

    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object:
        """Exports the stream (a PyCapsule named "arrow_array_stream"); `requested_schema` is
        ignored (the schema is fixed), as the protocol allows."""

@final
class ReadResult:
    """The answer to `Store.read`. Iterate it (once), or take everything with `to_list()`,
    `to_arrow()`, `to_pandas()`, `to_polars()` or `to_arrow_batches()`; each continues where
    the previous consumer stopped. It is also an Arrow stream (`__arrow_c_stream__`), so
    `pyarrow.table(r)`, `polars.DataFrame(r)` and DuckDB (`duckdb.sql("select ... from r")`)
    read it directly, once.

    Arrow columns: position (uint64), type (dictionary<int32, string>), tags (list<string>),
    data (large_binary), recorded_at (timestamp[us, UTC])."""

    @property
    def head(self) -> int:
        """The store head pinned when the read began: the `after` for a decision built on
        it."""
    def __iter__(self) -> ReadResult: ...
    def __next__(self) -> SequencedEvent: ...
    def next_batch(self, max: int = 1024) -> list[SequencedEvent]:
        """Up to `max` events; an empty list when the read is exhausted."""
    def to_list(self) -> list[SequencedEvent]:
        """Every remaining event, as a list."""
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object:
        """The remaining events as an Arrow C stream (a PyCapsule)."""
    def to_arrow(self) -> pyarrow.Table:
        """The remaining events as a `pyarrow.Table` (needs `lapilli[arrow]`)."""
    def to_arrow_batches(self, batch_rows: int = 16384) -> pyarrow.RecordBatchReader:
        """The remaining events as a streaming `pyarrow.RecordBatchReader`: batches of at most
        `batch_rows` rows and about 64 MiB (an event larger than that comes alone), built as
        they are read, so a read larger than memory streams in bounded memory."""
    def to_pandas(self) -> pandas.DataFrame:
        """The remaining events as a `pandas.DataFrame` (needs `lapilli[pandas]`)."""
    def to_polars(self) -> polars.DataFrame:
        """The remaining events as a `polars.DataFrame` (needs `lapilli[polars]`; no
        pyarrow)."""

@final
class Subscription:
    """A live, ordered feed of the events matching a query: first the history after `after`,
    then new commits, with no gap and no duplicate. Iterate it (blocking), or call
    `next(timeout)` / `next_batch(max, timeout)`. `close()` works from any thread and ends a
    blocked wait."""

    def __iter__(self) -> Subscription: ...
    def __next__(self) -> SequencedEvent: ...
    def next(self, timeout: Optional[float] = None) -> Optional[SequencedEvent]:
        """The next event, or None if `timeout` seconds passed first or the subscription ended
        (`closed` tells which). `timeout=None` waits as long as it takes."""
    def next_batch(
        self, max: int = 1024, timeout: Optional[float] = None
    ) -> Optional[list[SequencedEvent]]:
        """Up to `max` events as soon as at least one is there: a non-empty list; an empty list
        if `timeout` seconds passed first (0 means do not wait); None once the subscription
        ended."""
    @property
    def caught_up(self) -> bool:
        """True when everything committed so far has been handed out."""
    @property
    def position(self) -> int:
        """The last position handed out: subscribe again with `after=position` to resume."""
    @property
    def closed(self) -> bool:
        """True once the subscription or its store was closed."""
    def call_soon_when_ready(
        self, event_loop: asyncio.AbstractEventLoop, callback: Callable[[], object]
    ) -> None:
        """Schedules `callback()` once on the asyncio `event_loop` (through
        `event_loop.call_soon_threadsafe`, from lapilli's completion thread) as soon as
        `next_batch(max, timeout=0)` may have something new to answer: new commits past what
        was scanned, the end (this subscription or its store closed), or a follower's failure;
        right away if that holds already. No thread waits meanwhile. A later registration
        replaces this one, whose callback is then scheduled too (its waiter checks again).
        What `lapilli.aio` waits with."""
    def cancel_call_soon(self) -> None:
        """Forgets the latest `call_soon_when_ready` registration that has not fired (its
        waiter was cancelled or timed out): its loop and callback are released now, and it will
        not be scheduled."""
    def close(self) -> None:
        """Ends the subscription; safe from any thread; a blocked wait wakes and ends."""
    def __enter__(self) -> Subscription: ...
    def __exit__(self, *_args: object) -> None: ...

@final
class PendingAppend:
    """An append submitted with `Store.submit`: it commits (or is refused) whether or not
    anyone waits."""

    def done(self) -> bool:
        """True once the append was committed or refused."""
    def add_done_callback(self, callback: Callable[[], object]) -> None:
        """Calls `callback()` (no arguments) once the append is answered: on lapilli's
        completion thread (keep it short), or at once if it already is."""
    def call_soon_when_done(
        self, event_loop: asyncio.AbstractEventLoop, callback: Callable[[], object]
    ) -> None:
        """Schedules `callback()` on the asyncio `event_loop` (`call_soon_threadsafe`) once
        the append is answered; what `lapilli.aio` awaits an append with. No Python runs on
        lapilli's threads but that call."""
    def result(self, timeout: Optional[float] = None) -> AppendResult:
        """The outcome: the `AppendResult`, or the append's error raised. Waits (interpreter
        released) up to `timeout` seconds, or as long as it takes with None or
        `float("inf")`; raises `TimeoutError` if it passes first."""

@final
class Store:
    """An open store: one directory, one global order of events. Use as a context manager,
    or call `close()`; a store garbage-collected unclosed emits a `ResourceWarning` (and is
    closed then, with the interpreter released)."""

    @staticmethod
    def open(
        path: _StrPath,
        *,
        durability: Literal["fsync", "buffered"] = "fsync",
        segment_size: Optional[int] = None,
        max_event_bytes: Optional[int] = None,
    ) -> Store:
        """Opens (creating if missing) the store in the directory `path`. `durability` is
        "fsync" (default: an append returns once its batch is on disk) or "buffered" (tests and
        throwaway data). Raises `StoreLockedError` if another handle holds it."""
    @staticmethod
    def open_read_only(path: _StrPath) -> Store:
        """A read-only handle (a follower) on a store another process may be writing: it never
        takes the lock or writes a byte, sees whole committed batches only and follows new
        commits within milliseconds. Appends on it raise ReadOnlyError. A missing directory, or
        a PostgreSQL URL whose context does not exist, raises LapilliIOError."""
    @property
    def path(self) -> pathlib.Path:
        """The store's directory."""
    def head(self) -> int:
        """The position of the last committed event (0 for an empty store)."""
    def stats(self) -> Stats:
        """How this handle is doing, as a dict (`lapilli.Stats`): head, what it appended since
        it was opened, group commits, events per commit, fsync latency, queue depth, segments,
        index bytes, open subscriptions, and for a follower its lag."""
    def append(
        self, events: Iterable[Event], condition: Optional[AppendCondition] = None
    ) -> AppendResult:
        """Appends `events` atomically at consecutive positions if `condition` holds, and
        returns once they are committed. Raises `ConflictError` / `AlreadyExistsError` when the
        condition fails (nothing is written)."""
    def submit(
        self, events: Iterable[Event], condition: Optional[AppendCondition] = None
    ) -> PendingAppend:
        """Hands an append to the writer without waiting for it (what `lapilli.aio` uses).
        Bad input is raised here; a failed condition by `PendingAppend.result()`."""
    def read(
        self,
        query: Query,
        *,
        after: int = 0,
        until: Optional[int] = None,
        limit: Optional[int] = None,
        backwards: bool = False,
    ) -> ReadResult:
        """The events matching `query` in the window `(after, until]` (until defaults to the
        head now), ascending, or descending with `backwards=True`, at most `limit` of them."""
    def subscribe(self, query: Query, *, after: int = 0) -> Subscription:
        """Every event matching `query` after `after`: history first, then new commits as they
        happen."""
    def close(self) -> None:
        """Answers every queued append, flushes, ends every subscription and releases the
        lock. Closing twice is fine."""
    def __enter__(self) -> Store: ...
    def __exit__(self, *_args: object) -> None: ...
