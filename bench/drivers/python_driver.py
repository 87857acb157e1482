"""The per-runtime shapes from Python: Lapilli's wheel, or UmaDB's Python client against the
gRPC server its PyPI wheel carries.

    python python_driver.py lapilli read_store=DIR work=DIR batches=N concurrent=N scans=N selective=N catchups=N
    python python_driver.py umadb   read_store=DIR work=DIR ...   (run with the venv holding `umadb`)

Prints one JSON object per shape: {"runtime","shape","events","seconds","events_per_s"}.
The shapes are those of src/main.rs (the Rust reference); see README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

EVENT_TYPE = "Measured"
DATA = bytes([7]) * 256
BATCH = 512
WORKERS = 64
ENTITIES = 1000
# Untimed batches before append_batched is timed, and untimed passes before append_concurrent
# until WARM_SECONDS have gone by: the same in every driver (src/main.rs).
WARM_BATCHES = 2
WARM_SECONDS = 2.0
READ_STORE_EVENTS = 200_000


def report(runtime: str, shape: str, events: int, seconds: float) -> None:
    print(json.dumps({"runtime": runtime, "shape": shape, "events": events,
                      "seconds": round(seconds, 6), "events_per_s": round(events / seconds, 1)}),
          flush=True)


def check(got: int, want: int, what: str) -> None:
    if got != want:
        raise SystemExit(f"{what}: got {got}, expected {want}")


def selective_key(r: int) -> int:
    return (r * 7919) % ENTITIES


def expected_selective(head: int, k: int) -> int:
    return head // ENTITIES + (1 if k < head % ENTITIES else 0)


def run_batched(batches: int, append_batch) -> float:
    """WARM_BATCHES untimed, then `batches` timed batches of 512; returns the timed seconds."""
    for b in range(WARM_BATCHES):
        append_batch(range(b * BATCH, (b + 1) * BATCH))
    started = time.perf_counter()
    for b in range(WARM_BATCHES, WARM_BATCHES + batches):
        append_batch(range(b * BATCH, (b + 1) * BATCH))
    return time.perf_counter() - started


def run_concurrent(per_worker: int, append_one) -> tuple[float, int]:
    """Untimed passes of the same size for WARM_SECONDS (at least one), then the timed run: 64
    threads, each appending one event at a time; returns the timed seconds and the number of
    events appended in all."""
    total, passes, warm = WORKERS * per_worker, 0, time.perf_counter()
    while passes == 0 or time.perf_counter() - warm < WARM_SECONDS:
        threaded_appends(per_worker, passes * total, append_one)
        passes += 1
    return threaded_appends(per_worker, passes * total, append_one), (passes + 1) * total


def threaded_appends(per_worker: int, offset: int, append_one) -> float:
    errors: list[BaseException] = []
    start = threading.Barrier(WORKERS + 1)

    def worker(w: int) -> None:
        try:
            start.wait()
            for i in range(per_worker):
                append_one(offset + w * per_worker + i)
        except BaseException as e:  # reported after the join
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    start.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return seconds


# ---------------------------------------------------------------------------------- Lapilli

def lapilli_main(p: dict[str, str]) -> None:
    from lapilli import AppendCondition, Event, Query, QueryItem, Store

    rt = "python"
    work = Path(p["work"])
    work.mkdir(parents=True, exist_ok=True)
    never = AppendCondition(fail_if_events_match=Query.of([QueryItem(types=["NeverAppended"], tags=["never:0"])]))

    def event(i: int) -> Event:
        return Event(type=EVENT_TYPE, tags=[f"entity:{i % ENTITIES}"], data=DATA)

    def fresh(name: str):
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        return d, Store.open(str(d))

    # append_batched
    batches = int(p["batches"])
    d, store = fresh("python-batched")
    seconds = run_batched(batches, lambda r: store.append([event(i) for i in r], never))
    check(store.head(), (WARM_BATCHES + batches) * BATCH, "append_batched head")
    store.close()
    shutil.rmtree(d)
    report(rt, "append_batched", batches * BATCH, seconds)

    # append_concurrent
    per_worker = int(p["concurrent"])
    d, store = fresh("python-concurrent")
    seconds, appended = run_concurrent(per_worker, lambda i: store.append([event(i)], never))
    check(store.head(), appended, "append_concurrent head")
    store.close()
    shutil.rmtree(d)
    report(rt, "append_concurrent", WORKERS * per_worker, seconds)

    store = Store.open(p["read_store"])
    head = store.head()

    # read_warm_scan: iterate the ReadResult; then to_arrow()
    def scan() -> None:
        n = nbytes = 0
        for e in store.read(Query.all()):
            n += 1
            nbytes += len(e.data)
        check(n, head, "scan count")
        check(nbytes, head * len(DATA), "scan bytes")

    scans = int(p["scans"])
    scan()  # warm, untimed
    started = time.perf_counter()
    for _ in range(scans):
        scan()
    report(rt, "read_warm_scan", scans * head, time.perf_counter() - started)

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("python_driver: pyarrow missing, no to_arrow() figure", file=sys.stderr)
    else:
        store.read(Query.all()).to_arrow()  # warm, untimed
        started = time.perf_counter()
        for _ in range(scans):
            table = store.read(Query.all()).to_arrow()
            check(table.num_rows, head, "to_arrow rows")
        report(rt, "read_warm_scan_arrow", scans * head, time.perf_counter() - started)
        del table

    # read_selective
    reads = int(p["selective"])
    total = 0
    started = time.perf_counter()
    for r in range(reads):
        k = selective_key(r)
        n = 0
        for _ in store.read(Query.for_tags(f"entity:{k}")):
            n += 1
        check(n, expected_selective(head, k), "selective count")
        total += n
    report(rt, "read_selective", total, time.perf_counter() - started)

    # subscribe_catch_up
    passes = int(p["catchups"])
    started = time.perf_counter()
    for _ in range(passes):
        with store.subscribe(Query.all(), after=0) as sub:
            n = 0
            for e in sub:
                n += 1
                if e.position == head:
                    break
            check(n, head, "subscription count")
    report(rt, "subscribe_catch_up", passes * head, time.perf_counter() - started)
    store.close()

    live_subscriptions(work / "python-live")


# live_subscriptions: the same in every driver (src/main.rs SUBSCRIBERS, LIVE_ROUNDS).
SUBSCRIBERS = 1000
LIVE_ROUNDS = 5
LIVE_SETTLE_S = 0.05


def thread_count() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise SystemExit("no Threads: line in /proc/self/status")


def live_subscriptions(d: Path) -> None:
    """1,000 asyncio tasks awaiting `next()` on subscriptions to one tag, then one commit of an
    event with that tag per round: the delivery latency (append called to the event in the
    task's hands) over every delivery, and the process's threads while they wait."""
    import asyncio

    from lapilli import Event, Query
    from lapilli import aio

    shutil.rmtree(d, ignore_errors=True)
    rounds = LIVE_ROUNDS + 1  # the first untimed

    async def main() -> tuple[list[float], int, float]:
        loop = asyncio.get_running_loop()
        store = await aio.Store.open(d)
        subs = [store.subscribe(Query.for_tags("ping")) for _ in range(SUBSCRIBERS)]
        appended_at = [0.0] * rounds
        counts = [0] * rounds
        all_in = [loop.create_future() for _ in range(rounds)]
        latencies: list[float] = []

        async def consume(sub) -> None:
            for r in range(rounds):
                event = await sub.next()
                check(event.position, r + 1, "live event position")
                if r > 0:
                    latencies.append(time.perf_counter() - appended_at[r])
                counts[r] += 1
                if counts[r] == SUBSCRIBERS:
                    all_in[r].set_result(None)

        tasks = [asyncio.create_task(consume(sub)) for sub in subs]
        threads, timed = 0, 0.0
        for r in range(rounds):
            await asyncio.sleep(LIVE_SETTLE_S)  # every task is waiting again
            threads = max(threads, thread_count())
            appended_at[r] = time.perf_counter()
            await store.append([Event(type="Ping", tags=["ping"], data=DATA)])
            await all_in[r]
            if r > 0:
                timed += time.perf_counter() - appended_at[r]
        await asyncio.gather(*tasks)
        for sub in subs:
            sub.close()
        await store.aclose()
        return latencies, threads, timed

    latencies, threads, timed = asyncio.run(main())
    shutil.rmtree(d, ignore_errors=True)
    latencies.sort()
    check(len(latencies), SUBSCRIBERS * LIVE_ROUNDS, "live deliveries")
    at = lambda q: round(latencies[len(latencies) * q // 100] * 1e6, 1)  # noqa: E731
    print(json.dumps({"runtime": "python", "shape": "live_subscriptions", "events": len(latencies),
                      "seconds": round(timed, 6), "events_per_s": round(len(latencies) / timed, 1),
                      "threads_waiting": threads, "latency_p50_us": at(50), "latency_p99_us": at(99)}),
          flush=True)


# ---------------------------------------------------------------------------------- UmaDB

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UmaServer:
    """`umadb --listen 127.0.0.1:PORT --db-path DIR`, from the wheel's entry point; loopback only."""

    def __init__(self, db_dir: Path, log: Path):
        import umadb

        db_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        exe = Path(sys.executable).with_name("umadb")
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([str(exe), "--listen", f"127.0.0.1:{self.port}", "--db-path", str(db_dir)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:  # bounded: 30 s for the server to answer
            if self.proc.poll() is not None:
                raise SystemExit(f"umadb server exited with {self.proc.returncode}; see {log}")
            try:
                self.client = umadb.Client(self.url)
                self.client.head()
                break
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"umadb server did not answer on {self.url} within 30 s")
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def umadb_main(p: dict[str, str]) -> None:
    import umadb

    rt = "umadb-python"
    work = Path(p["work"])
    work.mkdir(parents=True, exist_ok=True)
    log = work / "umadb-server.log"
    never = umadb.AppendCondition(umadb.Query([umadb.QueryItem(types=["NeverAppended"], tags=["never:0"])]))

    def event(i: int):
        return umadb.Event(EVENT_TYPE, DATA, [f"entity:{i % ENTITIES}"])

    # Appends, on a fresh database.
    d = work / "umadb-append"
    shutil.rmtree(d, ignore_errors=True)
    server = UmaServer(d, log)
    try:
        client = server.client
        batches = int(p["batches"])
        seconds = run_batched(batches, lambda r: client.append([event(i) for i in r], never))
        check(client.head() or 0, (WARM_BATCHES + batches) * BATCH, "append_batched head")
        report(rt, "append_batched", batches * BATCH, seconds)

        # 64 threads through one client (the gRPC channel multiplexes; the GIL is released
        # while a call is in flight).
        per_worker = int(p["concurrent"])
        base = client.head() or 0
        seconds, appended = run_concurrent(per_worker, lambda i: client.append([event(i)], never))
        check((client.head() or 0) - base, appended, "append_concurrent head")
        report(rt, "append_concurrent", WORKERS * per_worker, seconds)
    finally:
        server.stop()
        shutil.rmtree(d, ignore_errors=True)

    # Reads, on a 200k-event database kept across rounds (the same events as Lapilli's).
    server = UmaServer(Path(p["read_store"]), log)
    try:
        client = server.client
        head = client.head() or 0
        if head == 0:
            for b in range(0, READ_STORE_EVENTS, BATCH):
                client.append([event(i) for i in range(b, min(b + BATCH, READ_STORE_EVENTS))])
            head = client.head() or 0
        check(head, READ_STORE_EVENTS, "umadb read store head")

        def scan() -> None:
            n = nbytes = 0
            for e in client.read():
                n += 1
                nbytes += len(e.event.data)
            check(n, head, "scan count")
            check(nbytes, head * len(DATA), "scan bytes")

        scans = int(p["scans"])
        scan()  # warm, untimed
        started = time.perf_counter()
        for _ in range(scans):
            scan()
        report(rt, "read_warm_scan", scans * head, time.perf_counter() - started)

        reads = int(p["selective"])
        total = 0
        started = time.perf_counter()
        for r in range(reads):
            k = selective_key(r)
            n = 0
            for _ in client.read(umadb.Query([umadb.QueryItem(tags=[f"entity:{k}"])])):
                n += 1
            check(n, expected_selective(head, k), "selective count")
            total += n
        report(rt, "read_selective", total, time.perf_counter() - started)

        passes = int(p["catchups"])
        started = time.perf_counter()
        for _ in range(passes):
            sub = client.subscribe(None, 0)
            n = 0
            for e in sub:
                n += 1
                if e.position == head:
                    break
            sub.cancel()
            check(n, head, "subscription count")
        report(rt, "subscribe_catch_up", passes * head, time.perf_counter() - started)
    finally:
        server.stop()


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("lapilli", "umadb"):
        raise SystemExit(__doc__)
    params = dict(a.split("=", 1) for a in sys.argv[2:])
    (lapilli_main if sys.argv[1] == "lapilli" else umadb_main)(params)


if __name__ == "__main__":
    main()
