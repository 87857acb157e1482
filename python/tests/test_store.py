import os
import threading
import time
from pathlib import Path

import pytest

import lapilli
from lapilli import (
    AlreadyExistsError,
    AppendCondition,
    ConflictError,
    Event,
    InvalidArgumentError,
    LapilliError,
    Query,
    QueryItem,
    ReadOnlyError,
    Store,
    StoreClosedError,
    StoreLockedError,
)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "store", durability="buffered")
    yield s
    s.close()


def ev(t="E", tags=(), data=b""):
    return Event(type=t, tags=list(tags), data=data)


def snapshot(store):
    return [(e.position, e.type, e.tags, e.data) for e in store.read(Query.all())]


def test_open_creates_directory_and_context_manager_closes(tmp_path):
    path = tmp_path / "a" / "b"
    with Store.open(path) as store:
        assert path.is_dir()
        assert store.path == path
        assert store.head() == 0
        assert store.append([ev()]).last == 1
    with pytest.raises(StoreClosedError):
        store.head()
    with Store.open(str(path)) as again:  # str works as well as PathLike
        assert again.head() == 1


def test_open_options(tmp_path):
    with Store.open(tmp_path / "s", durability="buffered", segment_size=8192, max_event_bytes=10) as store:
        store.append([ev(data=b"x" * 10)])
        with pytest.raises(InvalidArgumentError, match="11"):
            store.append([ev(data=b"x" * 11)])
    with pytest.raises(InvalidArgumentError, match="durability"):
        Store.open(tmp_path / "t", durability="sometimes")
    with pytest.raises(TypeError, match="^durability must be str"):
        Store.open(tmp_path / "t", durability=1)
    with pytest.raises(TypeError, match="^path must be str or os.PathLike"):
        Store.open(42)
    with pytest.raises(InvalidArgumentError, match="segment_size"):
        Store.open(tmp_path / "u", segment_size=10)


def test_second_open_is_store_locked(tmp_path):
    with Store.open(tmp_path / "s", durability="buffered"):
        with pytest.raises(StoreLockedError, match=str(os.getpid())):
            Store.open(tmp_path / "s")


def test_open_read_only_follows_the_writer_and_refuses_appends(tmp_path):
    """A read-only handle (a follower) sees what the writer commits and refuses writes with
    ReadOnlyError, leaving the store unchanged; a missing directory is an I/O error."""
    with Store.open(tmp_path / "s", durability="buffered") as writer:
        writer.append([ev("A")])
        with Store.open_read_only(tmp_path / "s") as reader:
            writer.append([ev("B")])
            deadline = time.monotonic() + 10
            while reader.head() < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [e.type for e in reader.read(Query.all())] == ["A", "B"]
            with pytest.raises(ReadOnlyError) as refused:
                reader.append([ev("C")])
            assert refused.value.code == "READ_ONLY" and str(tmp_path / "s") in str(refused.value)
            assert writer.head() == 2 and reader.head() == 2
    with pytest.raises(lapilli.LapilliIOError):
        Store.open_read_only(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_append_and_read_round_trip(store):
    r = store.append([ev("A", ["t2", "t1"], b"\x00\xff\xfe"), ev("B")])
    assert (r.first, r.last) == (1, 2)
    assert store.head() == 2
    events = store.read(Query.all()).to_list()
    assert [e.position for e in events] == [1, 2]
    assert events[0].tags == ["t1", "t2"]  # sorted
    assert events[0].data == b"\x00\xff\xfe"
    assert events[0].recorded_at.tzinfo is not None
    assert events[0].recorded_at_us <= events[1].recorded_at_us


def test_append_accepts_any_iterable_of_events(store):
    store.append(ev(str(i)) for i in range(3))
    store.append((ev("T"),))
    assert store.head() == 4


def test_read_window_limit_backwards_and_head(store):
    for i in range(10):
        store.append([ev("E", [f"n:{i % 2}"])])
    q = Query.for_tags("n:0")
    assert [e.position for e in store.read(q)] == [1, 3, 5, 7, 9]
    assert [e.position for e in store.read(q, after=3)] == [5, 7, 9]
    assert [e.position for e in store.read(q, after=3, until=7)] == [5, 7]
    assert [e.position for e in store.read(q, backwards=True, limit=2)] == [9, 7]
    assert [e.position for e in store.read(q, limit=0)] == []
    assert [e.position for e in store.read(q, until=1000)] == [1, 3, 5, 7, 9]
    result = store.read(q)
    store.append([ev("E", ["n:0"])])
    assert result.head == 10
    assert [e.position for e in result][-1] == 9  # a snapshot: the later append is not in it


def test_read_iterates_in_batches_and_consumers_continue(store):
    store.append([ev("E", [], bytes([i % 256])) for i in range(3000)])
    result = store.read(Query.all())
    first = next(result)
    assert first.position == 1
    batch = result.next_batch(5)
    assert [e.position for e in batch] == [2, 3, 4, 5, 6]
    rest = result.to_list()
    assert rest[0].position == 7 and rest[-1].position == 3000
    assert result.to_list() == [] and list(result) == []


def test_decision_with_boundary_condition(store):
    course = Query.for_tags("course:c1")
    store.append([ev("CourseDefined", ["course:c1"])])
    decision = store.read(course)
    assert decision.to_list()
    cond = AppendCondition(fail_if_events_match=course, after=decision.head)
    store.append([ev("Other", ["course:c1"])], cond)  # first decision wins
    with pytest.raises(ConflictError) as info:
        store.append([ev("Late", ["course:c1"])], cond)
    assert info.value.position == 2 and info.value.code == "CONFLICT"
    assert store.head() == 2


def test_existence_clause_raises_already_exists_with_position(store):
    key = Query.for_tags("idem:k1")
    store.append([ev("Placed", ["idem:k1"])])
    store.append([ev("Unrelated")])
    guard = AppendCondition(fail_if_events_match=Query.for_types("Nothing"), after=store.head(), fail_if_exists=key)
    with pytest.raises(AlreadyExistsError) as info:
        store.append([ev("Placed", ["idem:k1"])], guard)
    assert info.value.position == 1
    assert store.head() == 2


def test_events_are_atomic(store):
    store.append([ev("A", ["x"])])
    with pytest.raises(InvalidArgumentError):
        store.append([ev("B"), ev("C", ["dup", "dup"])])
    with pytest.raises(ConflictError):
        store.append([ev("B"), ev("C")], AppendCondition(Query.for_tags("x")))
    assert store.head() == 1


BAD_APPENDS = [
    ("empty list", lambda: ([], None), InvalidArgumentError, "empty"),
    ("empty type", lambda: ([Event(type="")], None), InvalidArgumentError, "type is empty"),
    ("oversize type", lambda: ([Event(type="x" * 256)], None), InvalidArgumentError, "256"),
    ("empty tag", lambda: ([Event("T", tags=[""])], None), InvalidArgumentError, "tag 0 is empty"),
    ("oversize tag", lambda: ([Event("T", tags=["t" * 1025])], None), InvalidArgumentError, "1025"),
    ("too many tags", lambda: ([Event("T", tags=[str(i) for i in range(256)])], None), InvalidArgumentError, "256 tags"),
    ("duplicate tags", lambda: ([Event("T", tags=["a", "b", "a"])], None), InvalidArgumentError, "duplicate"),
    ("oversize data", lambda: ([Event("T", data=b"x" * 101)], None), InvalidArgumentError, "101"),
    ("after beyond head", lambda: ([Event("T")], AppendCondition(Query.all(), after=99)), InvalidArgumentError, "99"),
    ("events not a list", lambda: (Event("T"), None), TypeError, "^events must be a list of Event"),
    ("events of dicts", lambda: ([{"type": "T"}], None), TypeError, r"^events\[0\] must be Event"),
    ("events an int", lambda: (5, None), TypeError, "^events must be a list of Event"),
    ("condition a query", lambda: ([Event("T")], Query.all()), TypeError, "^condition must be AppendCondition"),
]


@pytest.mark.parametrize("name, build, error, needle", BAD_APPENDS, ids=[b[0] for b in BAD_APPENDS])
def test_bad_appends_raise_and_leave_the_store_unchanged(tmp_path, name, build, error, needle):
    with Store.open(tmp_path / "s", durability="buffered", max_event_bytes=100) as store:
        store.append([Event("Seed", ["seed"], b"\x01")])
        before = snapshot(store)
        events, condition = build()
        with pytest.raises(error, match=needle):
            store.append(events, condition)
        with pytest.raises(error, match=needle):
            store.submit(events, condition)
        assert snapshot(store) == before and store.head() == 1


def test_non_utf8_text_given_as_bytes_is_a_type_error(store):
    with pytest.raises(TypeError, match="^type must be str, not bytes"):
        Event(type=b"\xff\xfe")
    with pytest.raises(TypeError, match=r"^tags\[0\] must be str, not bytes"):
        Event("T", tags=[b"\xff"])
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate is not UTF-8 either
        Event(type="\udcff")
    assert store.head() == 0


BAD_READS = [
    ("after beyond head", dict(after=5), InvalidArgumentError, "5"),
    ("negative after", dict(after=-1), InvalidArgumentError, "-1"),
    ("until below after", dict(after=1, until=0), InvalidArgumentError, "until"),
    ("after not int", dict(after="1"), TypeError, "^after must be int"),
    ("limit not int", dict(limit=1.5), TypeError, "^limit must be int"),
    ("backwards not bool", dict(backwards=1), TypeError, "^backwards must be bool"),
]


@pytest.mark.parametrize("name, kwargs, error, needle", BAD_READS, ids=[b[0] for b in BAD_READS])
def test_bad_reads(store, name, kwargs, error, needle):
    store.append([ev(), ev()])
    with pytest.raises(error, match=needle):
        store.read(Query.all(), **kwargs)


def test_read_and_subscribe_need_a_query(store):
    with pytest.raises(TypeError, match="^query must be Query, not str"):
        store.read("all")
    with pytest.raises(TypeError, match="^query must be Query"):
        store.subscribe(None)
    with pytest.raises(InvalidArgumentError, match="3"):
        store.subscribe(Query.all(), after=3)


def test_use_after_close_raises_store_closed(tmp_path):
    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([ev()])
    store.close()
    store.close()  # twice is fine
    for call in (
        lambda: store.head(),
        lambda: store.append([ev()]),
        lambda: store.submit([ev()]),
        lambda: store.read(Query.all()),
        lambda: store.subscribe(Query.all()),
    ):
        with pytest.raises(StoreClosedError) as info:
            call()
        assert info.value.code == "CLOSED" and isinstance(info.value, LapilliError)
    with Store.open(tmp_path / "s") as again:
        assert again.head() == 1


def test_submit_returns_pending_append(store):
    pending = store.submit([ev()])
    assert pending.result(timeout=10).first == 1
    assert pending.done()
    called = []
    pending.add_done_callback(lambda: called.append(True))  # already done: called at once
    assert called == [True]
    conflict = store.submit([ev()], AppendCondition(Query.all(), after=0))
    with pytest.raises(ConflictError):
        conflict.result(timeout=10)


def test_threads_appending_concurrently_get_dense_positions(tmp_path):
    threads, per_thread = 8, 50
    with Store.open(tmp_path / "s") as store:  # fsync: group commit matters here
        results = []
        lock = threading.Lock()

        def work(n):
            for i in range(per_thread):
                r = store.append([ev("E", [f"thread:{n}"], str(i).encode()), ev("F")])
                with lock:
                    results.append((r.first, r.last))

        ts = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        positions = sorted(p for first, last in results for p in range(first, last + 1))
        assert positions == list(range(1, threads * per_thread * 2 + 1))
        assert all(last == first + 1 for first, last in results)
        for n in range(threads):
            mine = [int(e.data) for e in store.read(Query.for_tags(f"thread:{n}"))]
            assert mine == list(range(per_thread))


def test_concurrent_conditional_appends_exactly_one_wins(tmp_path):
    with Store.open(tmp_path / "s") as store:
        q = Query.for_tags("seat:1")
        head = store.head()
        outcomes = []
        barrier = threading.Barrier(6)

        def decide():
            barrier.wait()
            try:
                store.append([ev("Booked", ["seat:1"])], AppendCondition(q, after=head))
                outcomes.append("ok")
            except ConflictError:
                outcomes.append("conflict")

        ts = [threading.Thread(target=decide) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(outcomes) == ["conflict"] * 5 + ["ok"]
        assert store.head() == 1


def test_garbage_collected_store_releases_its_lock(tmp_path):
    import gc

    store = Store.open(tmp_path / "s", durability="buffered")
    store.append([ev()])
    del store
    gc.collect()
    with Store.open(tmp_path / "s", durability="buffered") as again:
        assert again.head() == 1


def test_module_metadata():
    assert lapilli.__version__
    assert issubclass(lapilli.LapilliIOError, OSError)
    assert issubclass(lapilli.InvalidArgumentError, ValueError)
    for name in ("ConflictError", "AlreadyExistsError", "StoreLockedError", "StoreClosedError",
                 "ReadOnlyError", "CorruptionError"):
        assert issubclass(getattr(lapilli, name), lapilli.LapilliError)
    assert lapilli.ConflictError.__module__ == "lapilli"
