"""Waiting without threads (issue 15): asyncio subscriptions and appends are woken by the store's
completion thread through `loop.call_soon_threadsafe`; no thread waits per subscription, and no
executor thread carries an append."""

import asyncio
import gc
import os
import statistics
import time
import weakref

import pytest

from lapilli import Event, Query
from lapilli import aio


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


def thread_count() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line in /proc/self/status")


def thread_names() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # ended meanwhile
            pass
    return sorted(names)


def loop_errors(loop) -> list[dict]:
    """Collects what the loop would log as unhandled errors (a callback that raised, a future
    set twice): the tests below expect none."""
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


SUBSCRIBERS = 1000
ROUNDS = 5


def test_a_thousand_waiting_subscriptions_use_no_thread_each_and_all_receive_each_commit(tmp_path):
    """1,000 live subscriptions, each receiving every one of ROUNDS commits; the process's thread
    count stays below 50 while they wait. Prints the delivery latency (append started to event
    delivered to the subscriber's task), p50 and p99 over every delivery."""

    async def main():
        errors = loop_errors(asyncio.get_running_loop())
        store = await aio.Store.open(tmp_path / "s", durability="buffered")
        delivered: list[list[float]] = [[] for _ in range(ROUNDS)]
        all_in: list[asyncio.Future] = [asyncio.get_running_loop().create_future() for _ in range(ROUNDS)]

        async def consume(sub):
            for r in range(ROUNDS):
                event = await sub.next()
                assert event is not None and event.position == r + 1
                delivered[r].append(time.perf_counter())
                if len(delivered[r]) == SUBSCRIBERS:
                    all_in[r].set_result(None)

        subs = [store.subscribe(Query.for_tags("ping")) for _ in range(SUBSCRIBERS)]
        tasks = [asyncio.create_task(consume(sub)) for sub in subs]
        await asyncio.sleep(0.5)  # every task is waiting now
        waiting_threads = thread_count()

        latencies = []
        for r in range(ROUNDS):
            started = time.perf_counter()
            await store.append([Event("Ping", ["ping"])])
            await all_in[r]
            latencies += [t - started for t in delivered[r]]
        await asyncio.gather(*tasks)
        p50 = statistics.median(latencies) * 1e3
        p99 = statistics.quantiles(latencies, n=100)[98] * 1e3
        print(
            f"\n{SUBSCRIBERS} asyncio subscriptions x {ROUNDS} commits: delivery latency "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms; threads while waiting: {waiting_threads}"
        )
        for sub in subs:
            sub.close()
        await store.aclose()
        assert waiting_threads < 50, f"{waiting_threads} threads: {thread_names()}"
        assert errors == []

    run(main())


def test_cancelling_a_waiting_subscription_task_unregisters_it_and_loses_nothing(tmp_path):
    async def main():
        errors = loop_errors(asyncio.get_running_loop())
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            waiting = asyncio.create_task(sub.next())
            await asyncio.sleep(0.05)
            assert not waiting.done()
            registered = sub._ready
            assert registered is not None, "the waiting task registered no wake-up"
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # Unregistered: the binding dropped the wake-up (test below: the store lets go of
            # it), and cancelled its future, so that a wake-up on its way is a no-op.
            assert sub._ready is None and registered.cancelled()
            await store.append([Event("A")])
            await asyncio.sleep(0.05)  # lets a stale wake-up, if any, reach the loop
            # Nothing lost: the next wait gets the event committed after the cancellation.
            event = await sub.next(timeout=10)
            assert event is not None and event.position == 1
            # And the subscription still waits and wakes.
            later = asyncio.create_task(sub.next(timeout=10))
            await asyncio.sleep(0.05)
            await store.append([Event("B")])
            event = await later
            assert event is not None and event.position == 2
            sub.close()
        assert errors == []

    run(main())


def test_cancel_call_soon_releases_the_registered_callback_and_a_fired_one_is_released_too(tmp_path):
    class Callback:
        def __init__(self, calls):
            self.calls = calls

        def __call__(self):
            self.calls.append(1)

    async def main():
        loop = asyncio.get_running_loop()
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.sync.subscribe(Query.all())
            cancelled_calls: list[int] = []
            callback = Callback(cancelled_calls)
            cancelled = weakref.ref(callback)
            sub.call_soon_when_ready(loop, callback)
            del callback
            gc.collect()
            assert cancelled() is not None  # held by the registration
            sub.cancel_call_soon()
            gc.collect()
            assert cancelled() is None, "the cancelled registration still holds its callback"

            fired_calls: list[int] = []
            callback = Callback(fired_calls)
            fired = weakref.ref(callback)
            sub.call_soon_when_ready(loop, callback)
            del callback
            await store.append([Event("A")])
            for _ in range(1000):
                if fired_calls:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0)  # the loop drops its handle after the call
            gc.collect()
            assert fired_calls == [1] and cancelled_calls == []
            assert fired() is None, "a fired registration still holds its callback"
            sub.close()

    run(main())


def test_a_wait_that_times_out_unregisters_and_the_next_wait_still_wakes(tmp_path):
    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            assert await sub.next(timeout=0.05) is None
            assert sub._ready is None and not sub.closed
            later = asyncio.create_task(sub.next())
            await asyncio.sleep(0.05)
            await store.append([Event("A")])
            event = await asyncio.wait_for(later, 10)
            assert event is not None and event.position == 1
            sub.close()

    run(main())


def test_two_tasks_waiting_on_one_subscription_share_its_events(tmp_path):
    """Two consumers of one subscription wait on one registration (they do not take turns
    replacing each other's), and between them get each event once."""

    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            got: list[int] = []

            async def consume():
                while (event := await sub.next()) is not None:
                    got.append(event.position)

            consumers = [asyncio.create_task(consume()) for _ in range(2)]
            await asyncio.sleep(0.05)
            for _ in range(20):
                await store.append([Event("A")])
                await asyncio.sleep(0)
            deadline = time.monotonic() + 10
            while len(got) < 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            sub.close()
            await asyncio.wait_for(asyncio.gather(*consumers), 10)
            assert sorted(got) == list(range(1, 21))

    run(main())


def test_closing_the_store_wakes_and_ends_every_waiting_subscription(tmp_path):
    async def main():
        errors = loop_errors(asyncio.get_running_loop())
        store = await aio.Store.open(tmp_path / "s", durability="buffered")
        await store.append([Event("A")])
        subs = [store.subscribe(Query.all()) for _ in range(200)]
        seen = [0] * len(subs)

        async def consume(i):
            async for _ in subs[i]:
                seen[i] += 1
            return await subs[i].next()  # ended: None at once, no wait

        tasks = [asyncio.create_task(consume(i)) for i in range(len(subs))]
        await asyncio.sleep(0.2)
        assert seen == [1] * len(subs) and not any(t.done() for t in tasks)
        await store.aclose()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert results == [None] * len(subs)
        assert all(sub.closed for sub in subs)
        assert errors == []

    run(main())


def test_closing_a_subscription_wakes_its_waiting_task(tmp_path):
    async def main():
        async with aio.Store.open(tmp_path / "s", durability="buffered") as store:
            sub = store.subscribe(Query.all())
            waiting = asyncio.create_task(sub.next_batch(10))
            await asyncio.sleep(0.05)
            sub.close()
            assert await asyncio.wait_for(waiting, 10) is None
            assert await sub.next_batch(10) is None

    run(main())


def test_a_thousand_concurrent_awaited_appends_start_no_thread(tmp_path):
    async def main():
        errors = loop_errors(asyncio.get_running_loop())
        async with aio.Store.open(tmp_path / "s") as store:  # fsync: answers come late
            await store.append([Event("Warm")])
            before = thread_count()
            most = before
            stop = False

            async def sample():
                nonlocal most
                while not stop:
                    most = max(most, thread_count())
                    await asyncio.sleep(0.001)

            sampler = asyncio.create_task(sample())
            results = await asyncio.gather(*(store.append([Event("A", [f"n:{i}"])]) for i in range(1000)))
            stop = True
            await sampler
            assert sorted(r.first for r in results) == list(range(2, 1002))
            assert store.head() == 1001
            assert most == before, f"{before} threads before, {most} during: {thread_names()}"
        assert errors == []

    run(main())
