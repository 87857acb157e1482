"""The shipped stubs serve users: typical code type-checks under `mypy --strict`."""

import subprocess
import sys
import textwrap

USAGE = textwrap.dedent(
    """
    from lapilli import AppendCondition, ConflictError, Event, Query, QueryItem, Store
    from lapilli import aio

    def decide(path: str) -> int:
        with Store.open(path, durability="buffered") as store:
            query = Query.of([QueryItem(types=["A"], tags=["k"])])
            result = store.read(query, after=0, limit=10)
            seen = [e.position for e in result]
            try:
                store.append([Event("A", ["k"], b"x")], AppendCondition(query, after=result.head))
            except ConflictError as conflict:
                print(conflict.position)
            with store.subscribe(Query.all()) as sub:
                batch = sub.next_batch(10, timeout=0)
                if batch is not None:
                    seen += [e.position for e in batch]
            return len(seen) + store.head()

    async def decide_async(path: str) -> int:
        async with aio.Store.open(path, durability="buffered") as store:
            appended = await store.append([Event("A")])
            async for event in store.read(Query.for_types("A")):
                print(event.recorded_at.isoformat())
            return appended.last

    async def open_then_close(path: str) -> int:
        store = await aio.Store.open_read_only(path)
        try:
            return store.head()
        finally:
            await store.aclose()

    def frames(path: str) -> int:
        import polars
        with Store.open(path) as store:
            df: polars.DataFrame = store.read(Query.all()).to_polars()
            return df.height

    def waits(path: str) -> int:
        with Store.open(path) as store:
            return store.submit([Event("A")]).result(timeout=float("inf")).last
    """
)


def test_usage_type_checks_strictly(tmp_path):
    source = tmp_path / "usage.py"
    source.write_text(USAGE)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_misspelled_durability_fails_the_type_check(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text(
        "from lapilli import Store\nfrom lapilli import aio\n"
        "Store.open('x', durability='fsnc')\n"
        "async def f() -> None:\n    await aio.Store.open('x', durability='bufferd')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.count("Literal['fsync', 'buffered']") == 2, out.stdout
