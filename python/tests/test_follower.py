"""A read-only follower in this Python process, following a store that another process writes:
the core's `append_forever` example, a Rust writer appending batches until it is killed."""

import pathlib
import struct
import subprocess
import threading
import time

import pytest

from lapilli import Event, Query, ReadOnlyError, Store


def start_writer(binary: pathlib.Path, store: pathlib.Path) -> subprocess.Popen:
    writer = subprocess.Popen([str(binary), str(store)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    return writer


def eventually(what: str, check) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def check_whole_batches(events) -> None:
    """Every batch seen is whole and in order; positions are gapless."""
    i = 0
    while i < len(events):
        _, first_index, k = struct.unpack("<3I", events[i].data)
        assert first_index == 0, f"a batch starts with its first event at {events[i].position}"
        assert i + k <= len(events), f"the batch at {events[i].position} is cut short"
        for j in range(k):
            assert events[i + j].tags == events[i].tags
            assert struct.unpack("<3I", events[i + j].data)[1] == j
        i += k
    assert [e.position for e in events] == list(range(1, len(events) + 1))


def test_a_follower_follows_a_writer_process_through_kill_and_restart(tmp_path, append_forever):
    store = tmp_path / "live"
    writer = start_writer(append_forever, store)
    try:
        with Store.open_read_only(store) as follower:
            delivered = []
            subscription = follower.subscribe(Query.all())

            def consume():
                for event in subscription:
                    delivered.append(event.position)

            consumer = threading.Thread(target=consume)
            consumer.start()
            for _ in range(2):
                target = follower.head() + 200
                eventually("the writer to make progress", lambda: follower.head() >= target)
                result = follower.read(Query.all())
                assert result.head >= target
                check_whole_batches(result.to_list())
                with pytest.raises(ReadOnlyError):
                    follower.append([Event(type="X")])
                writer.kill()
                writer.wait()
                at_kill = follower.head()
                writer = start_writer(append_forever, store)
                eventually("the restarted writer to be followed", lambda: follower.head() > at_kill)
            eventually("the subscription to catch up", lambda: len(delivered) >= follower.head() - 50)
            subscription.close()
            consumer.join(timeout=10)
            assert not consumer.is_alive()
            assert delivered == list(range(1, len(delivered) + 1)), "in order, no gap, no duplicate"
            check_whole_batches(follower.read(Query.all()).to_list())
            # The notebook path works on a live store too.
            frame = follower.read(Query.all(), limit=100).to_pandas()
            assert list(frame["position"]) == list(range(1, 101))
    finally:
        writer.kill()
        writer.wait()
