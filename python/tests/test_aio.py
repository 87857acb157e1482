import asyncio
import time
import warnings

import pytest

from lapilli import (
    AlreadyExistsError,
    AppendCondition,
    ConflictError,
    Event,
    InvalidArgumentError,
    Query,
    ReadOnlyError,
    StoreClosedError,
    StoreLockedError,
)
from lapilli import aio


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


class Ticker:
    """A timer task that records how late each tick is: a blocked loop shows as a long gap."""

    def __init__(self, interval=0.005):
        self.interval = interval
        self.worst = 0.0
        self.ticks = 0

    async def run(self):
        while True:
            start = time.monotonic()
            await asyncio.sleep(self.interval)
            self.worst = max(self.worst, time.monotonic() - start - self.interval)
            self.ticks += 1


def test_open_append_read_with_async_with(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s") as store:
            r = await store.append([Event("A", ["k"]), Event("B")])
            assert (r.first, r.last) == (1, 2)
            assert store.head() == 2
            got = [e.position async for e in store.read(Query.all())]
            assert got == [1, 2]
            result = await store.read(Query.for_tags("k"))
            assert result.head == 2
            assert [e.type for e in await result.to_list()] == ["A"]
        with pytest.raises(StoreClosedError):
            store.head()

    run(main())


def test_concurrent_appends_group_commit_and_the_loop_keeps_ticking(tmp_path):
    async def main():
        store = await aio.Store.open(tmp_path / "s")  # fsync durability
        ticker = Ticker()
        tick_task = asyncio.create_task(ticker.run())
        results = await asyncio.gather(
            *(store.append([Event("E", [f"n:{i}"])]) for i in range(500))
        )
        tick_task.cancel()
        positions = sorted(r.first for r in results)
        assert positions == list(range(1, 501))
        # A group commit stamps one recorded_at on all its appends: far fewer stamps than
        # appends shows the appends shared commits (and fsyncs).
        events = await store.read(Query.all()).to_list()
        groups = len({e.recorded_at_us for e in events})
        assert groups < 250, f"{groups} commits for 500 concurrent appends"
        assert ticker.ticks > 0
        assert ticker.worst < 0.5, f"the loop was blocked for {ticker.worst:.3f}s"
        await store.close()

    run(main())


def test_async_append_errors(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s", durability="buffered") as store:
            await store.append([Event("A")])
            with pytest.raises(ConflictError) as info:
                await store.append([Event("B")], AppendCondition(Query.all(), after=0))
            assert info.value.position == 1
            with pytest.raises(InvalidArgumentError):
                await store.append([])
            with pytest.raises(TypeError, match="^events"):
                await store.append("A")
            assert store.head() == 1

    run(main())


def test_async_subscription_catch_up_and_live_with_a_ticking_timer(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s", durability="buffered") as store:
            await store.append([Event("E", ["k"]) for _ in range(3)])
            ticker = Ticker()
            tick_task = asyncio.create_task(ticker.run())
            got = []

            async def consume():
                async with store.subscribe(Query.for_tags("k")) as sub:
                    async for event in sub:
                        got.append(event.position)
                        if len(got) == 6:
                            break
                    assert sub.position == 8

            consumer = asyncio.create_task(consume())
            await asyncio.sleep(0.2)  # the consumer is now waiting for live events
            ticks_while_waiting = ticker.ticks
            for _ in range(3):
                await store.append([Event("E", ["k"]), Event("Noise")])
            await consumer
            tick_task.cancel()
            assert got == [1, 2, 3, 4, 6, 8]
            assert ticks_while_waiting > 5
            assert ticker.worst < 0.5

    run(main())


def test_async_next_timeout_and_close_ends(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            start = time.monotonic()
            assert await sub.next(timeout=0.1) is None
            assert time.monotonic() - start >= 0.09
            assert await sub.next_batch(10, timeout=0) == []
            assert sub.caught_up
            await store.append([Event("E")])
            assert (await sub.next(timeout=5)).position == 1

            waiter = asyncio.create_task(sub.next())
            await asyncio.sleep(0.1)
            sub.close()
            assert await asyncio.wait_for(waiter, 5) is None
            assert await sub.next_batch(1, timeout=1) is None

    run(main())


def test_cancelled_wait_loses_no_event(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            waiter = asyncio.create_task(sub.next())
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await store.append([Event("E")])
            event = await sub.next(timeout=5)
            assert event is not None and event.position == 1
            sub.close()

    run(main())


def test_async_read_pins_head_at_the_call_and_raises_bad_input_there(tmp_path):
    async def main():
        async with await aio.Store.open(tmp_path / "s", durability="buffered") as store:
            await store.append([Event("A")])
            result = store.read(Query.all())
            await store.append([Event("B")])
            assert result.head == 1
            assert [e.type async for e in result] == ["A"]
            with pytest.raises(InvalidArgumentError, match="5"):
                store.read(Query.all(), after=5)
            with pytest.raises(TypeError, match="^query must be Query"):
                store.read("all")  # type: ignore[arg-type]
            assert (await store.read(Query.all())).head == 2
            assert store.read(Query.all()).sync.to_arrow().num_rows == 2

    run(main())


def test_open_is_awaitable_and_an_async_context_manager(tmp_path):
    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            assert isinstance(store, aio.Store)
            await store.append([Event("A")])
        with pytest.raises(StoreClosedError):
            store.head()
        store = await aio.Store.open(tmp_path / "s")
        assert store.head() == 1
        await store.aclose()
        await store.aclose()  # twice is fine
        # The older spelling still reads naturally: entering an open store closes it on exit.
        async with await aio.Store.open(tmp_path / "s") as store:
            assert store.head() == 1
        with pytest.raises(StoreClosedError):
            store.head()

    run(main())


def test_open_read_only_follows_a_writer(tmp_path):
    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as writer:
            await writer.append([Event("A"), Event("B")])
            async with aio.Store.open_read_only(tmp_path / "s") as reader:
                assert [e.type async for e in reader.read(Query.all())] == ["A", "B"]
                with pytest.raises(ReadOnlyError):
                    await reader.append([Event("C")])
            follower = await aio.Store.open_read_only(tmp_path / "s")
            await follower.aclose()
            assert writer.head() == 2

    run(main())


def test_a_bad_open_raises_where_it_is_awaited(tmp_path):
    async def main():
        with pytest.raises(InvalidArgumentError, match="nope"):
            await aio.Store.open(tmp_path / "s", durability="nope")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="nope"):
            async with aio.Store.open(tmp_path / "s", durability="nope"):  # type: ignore[arg-type]
                pass
        async with aio.Store.open(tmp_path / "s"):
            with pytest.raises(StoreLockedError):
                await aio.Store.open(tmp_path / "s")

    run(main())


def test_a_cancelled_append_still_commits_and_the_existence_clause_makes_the_retry_safe(tmp_path):
    """The documented rule: cancelling `await store.append(...)` cancels the wait; the events
    were handed to the writer when the coroutine started and commit regardless. A retry guarded
    by `fail_if_exists` on the append's own key tells "it committed" from "do it again"."""

    async def main():
        async with aio.Store.open(tmp_path / "s") as store:  # fsync: the commit takes a while
            key = Query.for_tags("payment:p1")
            guarded = AppendCondition(Query.for_tags("order:o1"), after=0, fail_if_exists=key)
            paid = [Event("PaymentTaken", ["order:o1", "payment:p1"])]

            task = asyncio.create_task(store.append(paid, guarded))
            await asyncio.sleep(0)  # the coroutine starts: the append is submitted
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Appends commit in submission order: once a later one is answered, the cancelled
            # one has been answered too.
            await store.append([Event("Later")])
            assert [e.type for e in await store.read(Query.all()).to_list()] == ["PaymentTaken", "Later"]

            # The retry decides again (a fresh `after`); the existence clause finds the payment.
            decided = await store.read(Query.for_tags("order:o1"))
            retry = AppendCondition(Query.for_tags("order:o1"), after=decided.head, fail_if_exists=key)
            with pytest.raises(AlreadyExistsError) as retried:
                await store.append(paid, retry)
            assert retried.value.position == 1
            assert store.head() == 2

            # Cancelled before the coroutine ever ran: nothing was submitted.
            never_started = asyncio.create_task(store.append([Event("Never")]))
            never_started.cancel()
            with pytest.raises(asyncio.CancelledError):
                await never_started
            await store.append([Event("Check")])
            assert store.head() == 3

    run(main())


def test_a_cancelled_open_leaves_no_store_open(tmp_path):
    async def main():
        opening = asyncio.create_task(_open(tmp_path / "s"))
        await asyncio.sleep(0)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        # The abandoned store is closed once it has opened: the lock comes free.
        deadline = time.monotonic() + 30
        while True:
            try:
                store = await aio.Store.open(tmp_path / "s")
                break
            except StoreLockedError:
                assert time.monotonic() < deadline, "the abandoned store kept its lock"
                await asyncio.sleep(0.01)
        await store.aclose()

    async def _open(path):
        return await aio.Store.open(path)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # closed explicitly, not by the GC
        run(main())


def test_async_subscription_aclose(tmp_path):
    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            await sub.aclose()
            assert sub.closed
            assert await sub.next(timeout=1) is None

    run(main())
