import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lapilli import Event, InvalidArgumentError, Query, Store


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "store", durability="buffered")
    yield s
    s.close()


def ev(t="E", tags=()):
    return Event(type=t, tags=list(tags))


def test_catch_up_then_live_without_gap_or_duplicate(store):
    store.append([ev("E", ["k"]), ev("E"), ev("E", ["k"])])
    sub = store.subscribe(Query.for_tags("k"))
    assert [e.position for e in sub.next_batch(10, timeout=0)] == [1, 3]
    assert sub.caught_up and sub.position == 3
    assert sub.next_batch(10, timeout=0) == []
    store.append([ev("E", ["k"])])
    assert not sub.caught_up
    assert sub.next(timeout=5).position == 4
    assert sub.next(timeout=0.05) is None
    sub.close()
    assert sub.closed and sub.next_batch(1, timeout=0) is None


def test_iterator_blocks_for_live_events_and_ends_on_close(store):
    sub = store.subscribe(Query.all())
    got = []

    def consume():
        for event in sub:
            got.append(event.position)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(5):
        store.append([ev()])
        time.sleep(0.01)
    deadline = time.time() + 5
    while len(got) < 5 and time.time() < deadline:
        time.sleep(0.01)
    sub.close()  # from another thread: wakes the blocked iterator, which ends
    t.join(timeout=5)
    assert not t.is_alive()
    assert got == [1, 2, 3, 4, 5]


def test_close_from_another_thread_wakes_a_blocked_next(store):
    sub = store.subscribe(Query.all())
    result = {}

    def wait():
        start = time.monotonic()
        result["event"] = sub.next()  # no timeout
        result["waited"] = time.monotonic() - start

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    sub.close()
    t.join(timeout=5)
    assert not t.is_alive()
    assert result["event"] is None and result["waited"] >= 0.25


def test_store_close_ends_subscriptions(tmp_path):
    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([ev(), ev()])
    sub = store.subscribe(Query.all())
    assert sub.next(timeout=1).position == 1  # one more is buffered inside the binding
    store.close()
    assert list(sub) == []
    assert sub.closed


def test_position_is_the_resume_cursor_for_what_python_got(store):
    store.append([ev() for _ in range(10)])
    sub = store.subscribe(Query.all())
    first = next(sub)
    assert first.position == 1
    assert sub.position == 1  # the binding fetched more, but only one was handed out
    assert not sub.caught_up
    sub.close()
    resumed = store.subscribe(Query.all(), after=1)
    assert [e.position for e in resumed.next_batch(100, 0)] == list(range(2, 11))


def test_context_manager_closes(store):
    with store.subscribe(Query.all()) as sub:
        pass
    assert sub.closed


def test_bad_arguments(store):
    sub = store.subscribe(Query.all())
    with pytest.raises(InvalidArgumentError, match="max is 0"):
        sub.next_batch(0, 0)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        sub.next(timeout=-1)
    with pytest.raises(TypeError):
        sub.next(timeout="soon")


def test_ctrl_c_interrupts_a_blocked_wait(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        from lapilli import Store, Query
        store = Store.open({str(tmp_path / 's')!r}, durability="buffered")
        sub = store.subscribe(Query.all())
        print("waiting", flush=True)
        try:
            for event in sub:
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            store.close()
            sys.exit(0)
        sys.exit(3)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=10) == 0
        assert child.stdout.read().strip() == "interrupted"
    finally:
        if child.poll() is None:
            child.kill()


def test_ctrl_c_interrupts_next_with_a_long_timeout(tmp_path):
    script = textwrap.dedent(
        f"""
        from lapilli import Store, Query
        store = Store.open({str(tmp_path / 's')!r}, durability="buffered")
        sub = store.subscribe(Query.all())
        print("waiting", flush=True)
        try:
            sub.next(timeout=60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        start = time.monotonic()
        os.kill(child.pid, signal.SIGINT)
        assert child.wait(timeout=10) == 0
        assert time.monotonic() - start < 5
        assert child.stdout.read().strip() == "interrupted"
    finally:
        if child.poll() is None:
            child.kill()


def test_many_threads_subscribe_while_one_appends(store):
    n_subs, n_events = 4, 300
    subs = [store.subscribe(Query.for_tags("k")) for _ in range(n_subs)]
    seen = [[] for _ in range(n_subs)]

    def consume(i):
        while len(seen[i]) < n_events:
            batch = subs[i].next_batch(50, timeout=5)
            if not batch:
                break
            seen[i].extend(e.position for e in batch)

    ts = [threading.Thread(target=consume, args=(i,)) for i in range(n_subs)]
    for t in ts:
        t.start()
    for i in range(n_events):
        store.append([ev("E", ["k"]), ev("Noise")])
    for t in ts:
        t.join(timeout=30)
    for s in seen:
        assert s == list(range(1, 2 * n_events, 2))


def test_caught_up_is_readable_while_another_thread_waits(store):
    store.append([ev()])
    sub = store.subscribe(Query.all())
    assert sub.next(timeout=1).position == 1
    t = threading.Thread(target=lambda: sub.next(timeout=1.0))
    t.start()
    time.sleep(0.2)  # the other thread is blocked inside the subscription
    assert sub.caught_up
    t.join()
    sub.close()
