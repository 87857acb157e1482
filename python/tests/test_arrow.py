import datetime
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import lapilli
from lapilli import Event, LapilliError, Query, Store

SCHEMA = pa.schema(
    [
        pa.field("position", pa.uint64(), nullable=False),
        pa.field("type", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
        pa.field("data", pa.large_binary(), nullable=False),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "store", durability="buffered")
    for i in range(50):
        s.append(
            [
                Event(f"T{i % 3}", [f"n:{i}", "all", "ünïcødé"], bytes([i, 0xFF, 0xFE, 0x00]) * (i % 4)),
                Event("Empty"),
            ]
        )
    yield s
    s.close()


def rows(events):
    return [
        {
            "position": e.position,
            "type": e.type,
            "tags": e.tags,
            "data": e.data,
            "recorded_at": e.recorded_at,
        }
        for e in events
    ]


def test_to_arrow_equals_the_iterated_events(store):
    expected = rows(store.read(Query.all()))
    table = store.read(Query.all()).to_arrow()
    assert table.schema == SCHEMA
    assert table.num_rows == 100
    assert table.to_pylist() == expected


def test_to_arrow_of_an_empty_result_has_the_schema(store):
    table = store.read(Query.for_tags("nothing")).to_arrow()
    assert table.num_rows == 0 and table.schema == SCHEMA
    assert store.read(Query.all(), limit=0).to_pandas().empty
    assert store.read(Query.all(), limit=0).to_polars().height == 0


def test_filtered_backwards_windows_match(store):
    kwargs = dict(after=10, until=80, backwards=True, limit=17)
    q = Query.for_types("T1", "Empty")
    assert store.read(q, **kwargs).to_arrow().to_pylist() == rows(store.read(q, **kwargs))


def test_streaming_batches(store):
    reader = store.read(Query.all()).to_arrow_batches(batch_rows=7)
    sizes = [batch.num_rows for batch in reader]
    assert sizes == [7] * 14 + [2]


def test_arrow_continues_after_partial_iteration(store):
    result = store.read(Query.all())
    head = [next(result) for _ in range(3)]
    table = result.to_arrow()
    assert [e.position for e in head] == [1, 2, 3]
    assert table.column("position").to_pylist() == list(range(4, 101))


def test_capsule_protocol_works_with_pyarrow_directly(store):
    table = pa.table(store.read(Query.all()))
    assert table.num_rows == 100


def test_to_pandas(store):
    df = store.read(Query.all()).to_pandas()
    expected = rows(store.read(Query.all()))
    assert list(df.columns) == ["position", "type", "tags", "data", "recorded_at"]
    assert df["position"].tolist() == [r["position"] for r in expected]
    assert df["data"].tolist() == [r["data"] for r in expected]
    assert [list(t) for t in df["tags"]] == [r["tags"] for r in expected]
    assert [ts.to_pydatetime() for ts in df["recorded_at"]] == [r["recorded_at"] for r in expected]
    assert str(df["recorded_at"].dt.tz) == "UTC"


def test_to_polars(store):
    import polars as pl

    df = store.read(Query.all()).to_polars()
    expected = rows(store.read(Query.all()))
    assert df.schema["position"] == pl.UInt64
    assert df.schema["recorded_at"] == pl.Datetime("us", "UTC")
    assert df.to_dicts() == expected


def test_missing_extra_names_it(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["pyarrow"] = None
        sys.modules["polars"] = None
        from lapilli import Store, Query, Event
        with Store.open({str(tmp_path / 's')!r}, durability="buffered") as store:
            for method, extra in (("to_arrow", "arrow"), ("to_pandas", "pandas"), ("to_polars", "polars")):
                try:
                    getattr(store.read(Query.all()), method)()
                except ImportError as e:
                    assert f"lapilli[{{extra}}]" in str(e), str(e)
                else:
                    raise SystemExit(method + " did not fail")
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_type_is_dictionary_encoded_per_batch(store):
    reader = store.read(Query.all()).to_arrow_batches(batch_rows=40)
    for batch in reader:
        types = batch.column("type")
        assert pa.types.is_dictionary(types.type)
        # The dictionary holds each type once: T0, T1, T2 and Empty.
        assert sorted(types.dictionary.to_pylist()) == ["Empty", "T0", "T1", "T2"]


MIB = 1 << 20


@pytest.fixture
def batch_budget_4mib():
    previous = lapilli._lapilli._set_arrow_batch_bytes(4 * MIB)
    yield 4 * MIB
    lapilli._lapilli._set_arrow_batch_bytes(previous)


def test_a_batch_never_passes_its_byte_budget(tmp_path, batch_budget_4mib):
    """The issue's abort (three 700 MiB events in one batch passed 2 GiB of binary offsets),
    scaled down: events of a few MiB against a budget of 4 MiB. The budget is checked per
    event, so a batch ends before the event that would pass it; an event larger than the
    budget comes alone."""
    with Store.open(tmp_path / "s", durability="buffered") as store:
        sizes = [3 * MIB, 2 * MIB, 1 * MIB, 5 * MIB, 100, 100, 3 * MIB, 2 * MIB]
        store.append([Event("Big", [f"n:{i}"], bytes([i]) * size) for i, size in enumerate(sizes)])
        batches = list(store.read(Query.all()).to_arrow_batches())
        shapes = [[len(d) for d in b.column("data").to_pylist()] for b in batches]
        assert shapes == [[3 * MIB], [2 * MIB, 1 * MIB], [5 * MIB], [100, 100, 3 * MIB], [2 * MIB]]
        for batch in batches:
            assert batch.num_rows == 1 or batch.column("data").nbytes <= batch_budget_4mib + 8 * 16
        table = store.read(Query.all()).to_arrow()
        assert table.column("data").to_pylist() == [bytes([i]) * s for i, s in enumerate(sizes)]
        assert table.column("position").to_pylist() == list(range(1, 9))
        # An event held back at a batch boundary is not lost by a consumer switching over.
        result = store.read(Query.all())
        first = next(iter(result.to_arrow_batches()))
        assert first.num_rows == 1
        assert [e.position for e in result] == list(range(2, 9))


def test_the_byte_budget_knob_checks_its_value():
    with pytest.raises(lapilli.InvalidArgumentError, match="0"):
        lapilli._lapilli._set_arrow_batch_bytes(0)


def test_a_panic_inside_the_arrow_stream_is_an_exception_not_an_abort(tmp_path):
    """The stream's callbacks are `extern "C"`: a panic unwinding out of one aborts the
    process. Run in a child so an abort fails this test instead of killing the suite."""
    script = textwrap.dedent(
        f"""
        import pyarrow
        import lapilli
        from lapilli import Store, Query, Event
        with Store.open({str(tmp_path / 's')!r}, durability="buffered") as store:
            store.append([Event("A")])
            lapilli._lapilli._panic_for_test("arrow")
            try:
                store.read(Query.all()).to_arrow()
            except Exception as e:
                assert "internal error in lapilli" in str(e), repr(e)
            else:
                raise SystemExit("no exception")
            assert store.read(Query.all()).to_arrow().num_rows == 1
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_duckdb_queries_a_read_result_through_the_stream_capsule(store):
    duckdb = pytest.importorskip("duckdb")
    r = store.read(Query.all())
    got = duckdb.sql("select type, count(*) as n from r group by 1 order by 1").fetchall()
    assert got == [("Empty", 50), ("T0", 17), ("T1", 17), ("T2", 16)]
    r = store.read(Query.for_tags("all"), after=90)
    expected = sum(len(e.data) for e in store.read(Query.for_tags("all"), after=90))
    assert duckdb.sql("select max(position), sum(octet_length(data)) from r").fetchall() == [(99, expected)]


STREAM_SCRIPT = """
import sys
import pyarrow.compute as pc
from lapilli import Query, Store

def anon_rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no RssAnon")

with Store.open_read_only(sys.argv[1]) as store:
    how = sys.argv[2]
    start = peak = anon_rss()
    rows = nbytes = 0
    if how == "batches":
        for batch in store.read(Query.all()).to_arrow_batches(batch_rows=2):
            rows += batch.num_rows
            nbytes += pc.sum(pc.binary_length(batch.column("data"))).as_py()
            peak = max(peak, anon_rss())
            del batch
    else:
        table = store.read(Query.all()).to_arrow()
        rows, nbytes = table.num_rows, pc.sum(pc.binary_length(table.column("data"))).as_py()
        peak = anon_rss()
    print(rows, nbytes, peak - start)
"""


def test_to_arrow_batches_streams_in_bounded_memory(tmp_path):
    """A store many times one batch, streamed: the process's anonymous memory (the segments
    are file mappings, not counted) grows by a few batches, not by the store; `to_arrow()`
    of the same store, the control, grows by all of it."""
    path = tmp_path / "s"
    events, size = 40, 4 * MIB
    with Store.open(path, durability="buffered") as store:
        for i in range(events):
            store.append([Event("Blob", [f"n:{i}"], bytes([i]) * size)])
    runs = {}
    for how in ("batches", "table"):
        out = subprocess.run(
            [sys.executable, "-c", STREAM_SCRIPT, str(path), how], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        rows, nbytes, growth = map(int, out.stdout.split())
        assert (rows, nbytes) == (events, events * size)
        runs[how] = growth
    store_bytes = events * size
    assert runs["table"] > store_bytes * 0.9, runs
    assert runs["batches"] < store_bytes / 4, runs


def test_a_large_data_column_in_huge_page_memory_is_exact_across_growth_and_release(tmp_path):
    """Batches whose data column is reserved at 2 MiB or more are built in a huge-page mapping
    of their own (python/rust/huge.rs). Here the first 256 events (200 B each) size the mapping
    at ~3 MiB, the rest (400 B) outgrow it, so the column moves to a larger mapping mid-batch;
    every byte must come out as appended, and the mappings must be released with the table."""
    with Store.open(tmp_path / "s", durability="buffered") as s:
        expected = [bytes([i % 251]) * (200 if i < 256 else 400) for i in range(20_000)]
        for start in range(0, len(expected), 1000):
            s.append([Event("Big", [], data) for data in expected[start : start + 1000]])
        for _ in range(3):  # built and released again: a wrong unmap would crash here
            table = s.read(Query.all()).to_arrow()
            assert table.num_rows == len(expected)
            assert table.column("data").to_pylist() == expected
            del table
        batches = list(s.read(Query.all()).to_arrow_batches())
        assert [b.num_rows for b in batches] == [16384, 20_000 - 16384]
        assert [d for b in batches for d in b.column("data").to_pylist()] == expected
