"""asyncio face of the store: the same `Store`, awaited.

    from lapilli import Event, Query
    from lapilli.aio import Store

    async with Store.open(path) as store:          # or: store = await Store.open(path)
        await store.append([Event(type="Registered", tags=["student:s1"])])
        async for event in store.read(Query.for_tags("student:s1")):
            ...
        async for event in store.subscribe(Query.all()):
            ...

Nothing blocks the event loop, and nothing waits on a thread: appends are handed to the store's
writer without waiting (`Store.submit`) and their answers come back to the loop through
`call_soon_threadsafe` from the store's completion thread, so many concurrent appends share one
group commit and one fsync; a subscription with nothing new registers a one-shot wake-up with the
store, delivered the same way (no thread and no polling per subscription). Opening, closing and
reads run on worker threads.

Cancelling an append cancels the wait, not the append. Once the `append` coroutine has started
(at once, for `await store.append(...)`), its events are with the store's writer: they commit,
or are refused, whether anyone still waits or not. A cancelled or timed-out append may therefore
have committed. Retry it safely by making it idempotent with the condition's existence clause:
tag the events with a key unique to the intended append and append with
`AppendCondition(..., fail_if_exists=Query.for_tags(key))`; on the retry, `AlreadyExistsError`
means the first attempt committed (its `.position` says where).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import Any, Literal, Optional, Union

from lapilli._lapilli import AppendCondition, AppendResult, Event, PendingAppend, Query
from lapilli._lapilli import ReadResult as _ReadResult
from lapilli._lapilli import SequencedEvent
from lapilli._lapilli import Store as _Store
from lapilli._lapilli import Subscription as _Subscription

__all__ = ["AsyncReadResult", "AsyncSubscription", "Opening", "Store"]

#: Events fetched per worker-thread hop when iterating reads and subscriptions.
BATCH = 1024


def _settle(future: asyncio.Future[AppendResult], pending: PendingAppend) -> None:
    if future.done():  # cancelled by the awaiting task; the append still happened (or not)
        return
    try:
        future.set_result(pending.result())
    except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
        future.set_exception(error)


class Store:
    """An open store for asyncio code. Create with `await Store.open(...)`; use `async with`."""

    def __init__(self, store: _Store) -> None:
        self._store = store

    @classmethod
    def open(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        durability: Literal["fsync", "buffered"] = "fsync",
        segment_size: Optional[int] = None,
        max_event_bytes: Optional[int] = None,
    ) -> Opening:
        """Opens (creating if missing) the store in `path`, like `lapilli.Store.open`; recovery
        runs off the event loop. Await the result for the store (`store = await
        Store.open(path)`), or enter it (`async with Store.open(path) as store:`, which closes
        the store on the way out)."""
        return Opening(
            lambda: _Store.open(
                path,
                durability=durability,
                segment_size=segment_size,
                max_event_bytes=max_event_bytes,
            )
        )

    @classmethod
    def open_read_only(cls, path: Union[str, os.PathLike[str]]) -> Opening:
        """A read-only handle (a follower) on a store another process may be writing, like
        `lapilli.Store.open_read_only`: await it, or `async with` it."""
        return Opening(lambda: _Store.open_read_only(path))

    @property
    def sync(self) -> _Store:
        """The underlying blocking `lapilli.Store` (shared, not a copy)."""
        return self._store

    def head(self) -> int:
        """The last committed position (cheap: no I/O)."""
        return self._store.head()

    async def append(
        self, events: Iterable[Event], condition: Optional[AppendCondition] = None
    ) -> AppendResult:
        """Appends like `lapilli.Store.append`, without blocking the loop while it commits.

        Bad input raises at once. Cancelling the awaiting task cancels the wait, not the
        append: the events were handed to the writer when this coroutine started, and commit
        (or are refused) regardless. See the module's docstring for idempotent retries with
        `fail_if_exists`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendResult] = loop.create_future()
        pending = self._store.submit(events, condition)
        # Answered on lapilli's completion thread, which only schedules `_settle` on this loop.
        pending.call_soon_when_done(loop, functools.partial(_settle, future, pending))
        return await future

    def read(
        self,
        query: Query,
        *,
        after: int = 0,
        until: Optional[int] = None,
        limit: Optional[int] = None,
        backwards: bool = False,
    ) -> AsyncReadResult:
        """The events matching `query`, like `lapilli.Store.read`: `async for` them, or
        `await result.to_list()`. The read starts (and pins `head`) here: taking a snapshot
        costs microseconds, so it is done on the loop; events are fetched on worker threads."""
        return AsyncReadResult(
            self._store.read(query, after=after, until=until, limit=limit, backwards=backwards)
        )

    def subscribe(self, query: Query, *, after: int = 0) -> AsyncSubscription:
        """Every event matching `query` after `after`, history then live: `async for` it."""
        return AsyncSubscription(self._store.subscribe(query, after=after))

    async def aclose(self) -> None:
        """Closes the store (answers queued appends, flushes, ends subscriptions, releases the
        lock) off the event loop. Closing twice is fine."""
        await asyncio.get_running_loop().run_in_executor(None, self._store.close)

    async def close(self) -> None:
        """The same as `aclose()`."""
        await self.aclose()

    async def __aenter__(self) -> Store:
        """`async with await Store.open(path) as store:` also works: entering an open store
        returns it, leaving closes it."""
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"aio.{self._store!r}"


def _close_abandoned(opened: asyncio.Future[_Store]) -> None:
    """Closes a store whose opener was cancelled while it opened (off the loop)."""
    if opened.cancelled() or opened.exception() is not None:
        return
    asyncio.get_running_loop().run_in_executor(None, opened.result().close)


class Opening:
    """A store being opened: what `Store.open` and `Store.open_read_only` return. Await it for
    the `Store`, or use it in `async with`, which opens the store on entry and closes it on
    exit. Opening runs on a worker thread; if the awaiting task is cancelled meanwhile, the
    store is closed as soon as it has opened, so its lock is not left held."""

    def __init__(self, opener: Callable[[], _Store]) -> None:
        self._opener = opener
        self._store: Optional[Store] = None

    async def _open(self) -> Store:
        opened = asyncio.get_running_loop().run_in_executor(None, self._opener)
        try:
            return Store(await asyncio.shield(opened))
        except asyncio.CancelledError:
            opened.add_done_callback(_close_abandoned)
            raise

    def __await__(self) -> Generator[Any, None, Store]:
        return self._open().__await__()

    async def __aenter__(self) -> Store:
        if self._store is not None:
            raise RuntimeError("this Opening was entered already; call Store.open again")
        self._store = await self._open()
        return self._store

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._store is not None:
            await self._store.aclose()


class AsyncReadResult:
    """A read for asyncio: `async for` it, or `await result.to_list()`. `head` is the store head
    pinned when the read began. Awaiting the result itself returns it (so `await store.read(q)`
    reads naturally in decision code)."""

    def __init__(self, result: _ReadResult) -> None:
        self._result = result
        self._buffer: list[SequencedEvent] = []
        self._index = 0

    def __await__(self) -> Generator[Any, None, AsyncReadResult]:
        async def itself() -> AsyncReadResult:
            return self

        return itself().__await__()

    @property
    def head(self) -> int:
        """The store head pinned when the read began: the `after` for a decision built on it."""
        return self._result.head

    @property
    def sync(self) -> _ReadResult:
        """The underlying `lapilli.ReadResult` (for `to_arrow()` and friends)."""
        return self._result

    def __aiter__(self) -> AsyncReadResult:
        return self

    async def __anext__(self) -> SequencedEvent:
        if self._index >= len(self._buffer):
            loop = asyncio.get_running_loop()
            self._buffer = await loop.run_in_executor(None, self._result.next_batch, BATCH)
            self._index = 0
            if not self._buffer:
                raise StopAsyncIteration
        event = self._buffer[self._index]
        self._index += 1
        return event

    async def to_list(self) -> list[SequencedEvent]:
        """Every remaining event."""
        rest = self._buffer[self._index :]
        self._buffer, self._index = [], 0
        return rest + await asyncio.get_running_loop().run_in_executor(None, self._result.to_list)


def _wake(ready: asyncio.Future[None]) -> None:
    """Run on the loop when the store says a subscription may have something new."""
    if not ready.done():
        ready.set_result(None)


class AsyncSubscription:
    """A subscription for asyncio: `async for event in sub`, `await sub.next(timeout)`,
    `await sub.next_batch(max, timeout)`; `close()` (or leaving `async with`) ends it.

    Waiting costs no thread: with nothing new, the subscription registers a one-shot wake-up
    with the store (`call_soon_when_ready`), which the store's completion thread schedules on
    the loop when the head moves or the subscription or store closes; the events are then taken
    without blocking. Tasks waiting on one subscription share one registration. A cancelled or
    timed-out wait loses nothing, and when no task waits any more its registration is dropped.
    Use a subscription from one event loop."""

    def __init__(self, subscription: _Subscription) -> None:
        self._sub = subscription
        self._buffer: list[SequencedEvent] = []
        self._delivered = subscription.position
        self._ended = False
        #: The pending wake-up all waiting tasks share; None when no task waits.
        self._ready: Optional[asyncio.Future[None]] = None
        self._waiters = 0

    @property
    def sync(self) -> _Subscription:
        """The underlying blocking `lapilli.Subscription`."""
        return self._sub

    @property
    def caught_up(self) -> bool:
        """True when everything committed so far has been delivered to this consumer."""
        return not self._buffer and self._sub.caught_up

    @property
    def position(self) -> int:
        """The last position delivered to this consumer: subscribe with `after=` it to resume."""
        return self._delivered

    @property
    def closed(self) -> bool:
        """True once the subscription or its store was closed."""
        return self._sub.closed

    async def _fill(self, timeout: Optional[float]) -> bool:
        """Makes the buffer non-empty; False if the timeout passed or the subscription ended."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._buffer and not self._ended:
            batch = self._sub.next_batch(BATCH, 0)  # what is there now; never waits
            if batch is None:
                self._ended = True
            elif batch:
                self._buffer.extend(batch)
            else:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return False
                await self._wait_ready(loop, remaining)
        return bool(self._buffer)

    async def _wait_ready(self, loop: asyncio.AbstractEventLoop, timeout: Optional[float]) -> None:
        """Waits (at most `timeout` seconds) for the store to say there may be something new."""
        ready = self._ready
        if ready is None:
            ready = self._ready = loop.create_future()
            self._sub.call_soon_when_ready(loop, functools.partial(_wake, ready))
        self._waiters += 1
        try:
            # `asyncio.wait` neither cancels `ready` on a timeout nor when this task is
            # cancelled: other tasks may share it.
            await asyncio.wait((ready,), timeout=timeout)
        finally:
            self._waiters -= 1
            if self._ready is ready and (ready.done() or self._waiters == 0):
                self._ready = None
                if not ready.done():  # the last waiter left: nobody needs the wake-up
                    self._sub.cancel_call_soon()
                    ready.cancel()

    def _take(self, max: int) -> list[SequencedEvent]:
        batch, self._buffer = self._buffer[:max], self._buffer[max:]
        if batch:
            self._delivered = batch[-1].position
        return batch

    async def next_batch(
        self, max: int = BATCH, timeout: Optional[float] = None
    ) -> Optional[list[SequencedEvent]]:
        """Up to `max` events: non-empty, empty if `timeout` seconds passed, None once ended."""
        if max < 1:
            raise ValueError(f"max is {max}; a batch holds at least one event")
        if await self._fill(timeout):
            return self._take(max)
        return None if self._ended else []

    async def next(self, timeout: Optional[float] = None) -> Optional[SequencedEvent]:
        """The next event, or None if the timeout passed or the subscription ended."""
        batch = await self.next_batch(1, timeout)
        return batch[0] if batch else None

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> SequencedEvent:
        if await self._fill(None):
            return self._take(1)[0]
        raise StopAsyncIteration

    def close(self) -> None:
        """Ends the subscription; a pending wait wakes and ends. Safe to call twice."""
        self._sub.close()

    async def aclose(self) -> None:
        """The same as `close()`, as an awaitable (the async-iterator convention)."""
        self.close()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
