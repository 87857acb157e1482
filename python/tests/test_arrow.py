import datetime
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from lapilli import Event, Query, Store

SCHEMA = pa.schema(
    [
        pa.field("position", pa.uint64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
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
