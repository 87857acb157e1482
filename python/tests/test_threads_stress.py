"""Many threads sharing one Store, its reads and subscriptions. On a free-threaded interpreter
(3.13t+) this runs truly in parallel, and the module must not have re-enabled the GIL."""

import sys
import sysconfig
import threading

import pytest

import lapilli
from lapilli import AppendCondition, ConflictError, Event, Query, Store

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(not FREE_THREADED, reason="the interpreter is not a free-threaded build")
def test_importing_lapilli_keeps_the_gil_disabled():
    assert lapilli is not None
    assert not sys._is_gil_enabled()


def test_shared_store_stress(tmp_path):
    writers, appends, readers = 4, 200, 3
    errors = []
    with Store.open(tmp_path / "s", durability="buffered") as store:
        stop = threading.Event()
        subscription = store.subscribe(Query.all())
        delivered = []

        def write(n):
            try:
                for i in range(appends):
                    key = Query.for_tags(f"counter:{n}")
                    while True:  # optimistic decision loop on a per-writer boundary
                        result = store.read(key, backwards=True, limit=1)
                        last = result.to_list()
                        expected = int(last[0].data) + 1 if last else 0
                        try:
                            store.append(
                                [Event("Counted", [f"counter:{n}"], str(expected).encode())],
                                AppendCondition(key, after=result.head),
                            )
                            break
                        except ConflictError:
                            continue
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        def read():
            try:
                while not stop.is_set():
                    table_rows = store.read(Query.all()).to_arrow().num_rows
                    listed = len(store.read(Query.all()).to_list())
                    assert table_rows >= 0 and listed >= 0
                    positions = [e.position for e in store.read(Query.all())]
                    assert positions == list(range(1, len(positions) + 1))
            except Exception as e:  # pragma: no cover
                errors.append(e)

        def follow():
            try:
                while len(delivered) < writers * appends:
                    batch = subscription.next_batch(100, timeout=10)
                    if not batch:
                        break
                    delivered.extend(e.position for e in batch)
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        threads += [threading.Thread(target=read) for _ in range(readers)]
        follower = threading.Thread(target=follow)
        for t in threads + [follower]:
            t.start()
        for t in threads[:writers]:
            t.join(timeout=120)
        stop.set()
        for t in threads[writers:] + [follower]:
            t.join(timeout=60)
        assert not errors, errors
        assert store.head() == writers * appends
        assert delivered == list(range(1, writers * appends + 1))
        for n in range(writers):
            values = [int(e.data) for e in store.read(Query.for_tags(f"counter:{n}"))]
            assert values == list(range(appends))
