import asyncio
import time

import pytest

from lapilli import AppendCondition, ConflictError, Event, InvalidArgumentError, Query, StoreClosedError
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
