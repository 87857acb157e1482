"""What a Python user may rely on at the edges: no panic surfaces as a `PanicException`, waits
accept `float("inf")`, and a store left unclosed warns and closes without stopping other
threads."""

import gc
import math
import sys
import threading
import time
import warnings

import pytest

import lapilli
from lapilli import Event, InvalidArgumentError, LapilliError, Query, Store


@pytest.mark.parametrize("site", ["attached", "detached"])
def test_a_panic_in_the_binding_is_a_lapilli_error(site):
    with pytest.raises(LapilliError, match="internal error in lapilli") as info:
        lapilli._lapilli._panic_for_test(site)
    # An Exception (caught by `except Exception`), not pyo3's BaseException PanicException.
    assert isinstance(info.value, Exception)
    assert type(info.value).__name__ == "LapilliError"


def test_the_panic_knob_names_a_bad_site():
    with pytest.raises(InvalidArgumentError, match='"nowhere"'):
        lapilli._lapilli._panic_for_test("nowhere")


def test_pending_append_result_waits_forever_with_inf(tmp_path):
    with Store.open(tmp_path / "s", durability="buffered") as store:
        pending = store.submit([Event("A")])
        assert pending.result(timeout=float("inf")).first == 1
        assert store.submit([Event("B")]).result(timeout=1e300).first == 2
        assert store.submit([Event("C")]).result(timeout=None).first == 3
        pending = store.submit([Event("D")])
        with pytest.raises(InvalidArgumentError, match="NaN"):
            pending.result(timeout=math.nan)
        # The append itself went ahead: only the wait was refused.
        assert pending.result().first == 4


def test_an_unclosed_store_warns_and_is_released(tmp_path):
    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([Event("A")])
    with pytest.warns(ResourceWarning, match="unclosed lapilli.Store"):
        del store
        gc.collect()
    # The lock went with it: the store opens again, with the event.
    with Store.open(tmp_path / "s") as again:
        assert again.head() == 1


def test_a_closed_store_does_not_warn(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        store = Store.open(tmp_path / "s", durability="buffered")
        store.close()
        del store
        with Store.open(tmp_path / "t", durability="buffered"):
            pass
        gc.collect()


def test_an_unclosed_store_closes_with_the_interpreter_released(tmp_path):
    """Closing joins the writer and fsyncs. With a switch interval far beyond the test, the
    counting thread runs only when the main thread releases the interpreter of its own accord:
    it counts during `del store` only if the implicit close released it."""
    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([Event("A", data=bytes(1 << 20)) for _ in range(16)])
    counted = [0]
    stop = threading.Event()
    started = threading.Event()

    def count():
        started.set()
        while not stop.is_set():
            counted[0] += 1
            time.sleep(0.0001)  # releases the interpreter, so the main thread gets it back

    previous = sys.getswitchinterval()
    thread = threading.Thread(target=count)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        sys.setswitchinterval(1000)
        try:
            thread.start()
            started.wait()
            before = counted[0]
            del store
            during = counted[0] - before
        finally:
            sys.setswitchinterval(previous)
            stop.set()
            thread.join()
    assert during > 0, "no other thread ran while the unclosed store was closed"


def test_read_result_keeps_working_after_its_store_is_gone(tmp_path):
    """A read holds its snapshot: dropping the (closed) store under it does not crash."""
    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([Event("A"), Event("B")])
    result = store.read(Query.all())
    store.close()
    del store
    assert [e.type for e in result] == ["A", "B"]
