"""Reads the command line's exports back with pyarrow and DuckDB (written by the Rust test
`columnar_exports_for_the_python_readers` into the directory given as the only argument) and
checks every row against the events the store holds (expected.json beside them)."""

import datetime
import json
import pathlib
import sys

import duckdb
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

out = pathlib.Path(sys.argv[1])
expected = json.loads((out / "expected.json").read_text())
assert len(expected) == 400, len(expected)
UTC = datetime.timezone.utc


def as_expected(position, recorded_at, type_, tags, data):
    micros = (recorded_at - datetime.datetime(1970, 1, 1, tzinfo=UTC)) // datetime.timedelta(microseconds=1)
    return {"position": position, "recorded_at": micros, "type": type_, "tags": list(tags), "data": bytes(data).hex()}


def check_arrow_table(table, what):
    schema = table.schema
    assert schema.field("position").type == pa.uint64(), (what, schema)
    assert schema.field("recorded_at").type == pa.timestamp("us", tz="UTC"), (what, schema)
    assert pa.types.is_dictionary(schema.field("type").type), (what, schema)
    assert schema.field("type").type.value_type == pa.string(), (what, schema)
    assert schema.field("tags").type == pa.list_(pa.string()), (what, schema)
    assert schema.field("data").type == pa.binary(), (what, schema)
    rows = [
        as_expected(r["position"], r["recorded_at"], r["type"], r["tags"], r["data"])
        for r in table.to_pylist()
    ]
    assert rows == expected, f"{what}: rows differ"


check_arrow_table(pq.read_table(out / "events.parquet"), "parquet via pyarrow")
with pa.memory_map(str(out / "events.arrow")) as source:
    check_arrow_table(pa.ipc.open_file(source).read_all(), "arrow IPC via pyarrow")

con = duckdb.connect()
described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{out / 'events.parquet'}')").fetchall()
columns = {row[0]: row[1] for row in described}
assert columns["position"] == "UBIGINT", columns
assert columns["recorded_at"] == "TIMESTAMP WITH TIME ZONE", columns
assert columns["type"] == "VARCHAR", columns
assert columns["tags"] == "VARCHAR[]", columns
assert columns["data"] == "BLOB", columns
con.execute("SET TimeZone = 'UTC'")
rows = con.execute(
    f"SELECT position, recorded_at, type, tags, data FROM read_parquet('{out / 'events.parquet'}') ORDER BY position"
).fetchall()
assert [as_expected(*row) for row in rows] == expected, "parquet via DuckDB: rows differ"
counts = dict(con.execute(f"SELECT type, count(*) FROM '{out / 'events.parquet'}' GROUP BY type").fetchall())
assert counts == {"Placed": 134, "Paid": 133, "Shipped": 133}, counts
tagged = con.execute(f"SELECT count(*) FROM '{out / 'events.parquet'}' WHERE list_contains(tags, 'order:7')").fetchone()
assert tagged == (20,), tagged
paid = con.execute(f"SELECT min(position), count(*), count(DISTINCT type) FROM '{out / 'paid.parquet'}'").fetchone()
assert paid == (101, 100, 1), paid
print("exports read back by pyarrow and DuckDB: 400 events, every field equal")
