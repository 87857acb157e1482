"""The Python face's own runtime benchmark (issue 16): `to_arrow()` against iterating a read,
and batched appends against Rust, measured in the same run so the ratios mean something on a
shared machine.

    bash python/scripts/build.sh                                  # the wheel, into target/py-venv
    cargo build --release --manifest-path bench/drivers/Cargo.toml  # the Rust reference
    target/py-venv/bin/python python/bench/runtime.py [--rounds 3] [--events 200000] [--batches 200]

The shapes are bench/drivers' (README there): 256-byte events of type `Measured` tagged
`entity:<i mod 1000>`, batches of 512 guarded by a condition that never matches, fsync
durability on a fresh store; the read store is written by the Rust reference (`lapilli-drivers
prepare`) and read warm. Rust's figures come from `lapilli-drivers run` in the same round.
Besides bench/drivers' shapes it prints where a batched append's time goes in Python: building
the 512 `Event` objects, and the append itself with buffered durability (no fsync).

Targets (issue 16): to_arrow() >= 3x iterating; batched appends >= 0.8 of Rust.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lapilli import AppendCondition, Event, Query, QueryItem, Store

ROOT = Path(__file__).resolve().parents[2]
RUST_BIN = ROOT / "bench" / "drivers" / "target" / "release" / "lapilli-drivers"
WORK = ROOT / "target" / "bench-python"
EVENT_TYPE = "Measured"
DATA = bytes([7]) * 256
BATCH = 512
ENTITIES = 1000
WARM_BATCHES = 2


def never() -> AppendCondition:
    return AppendCondition(Query.of([QueryItem(types=["NeverAppended"], tags=["never:0"])]))


def batch_events(b: int) -> list[Event]:
    return [Event(EVENT_TYPE, [f"entity:{i % ENTITIES}"], DATA) for i in range(b * BATCH, (b + 1) * BATCH)]


def python_append_batched(batches: int, durability: str) -> float:
    d = WORK / f"python-batched-{durability}"
    shutil.rmtree(d, ignore_errors=True)
    condition = never()
    with Store.open(d, durability=durability) as store:  # type: ignore[arg-type]
        for b in range(WARM_BATCHES):
            store.append(batch_events(b), condition)
        started = time.perf_counter()
        for b in range(WARM_BATCHES, WARM_BATCHES + batches):
            store.append(batch_events(b), condition)
        seconds = time.perf_counter() - started
        assert store.head() == (WARM_BATCHES + batches) * BATCH
    shutil.rmtree(d)
    return batches * BATCH / seconds


def python_build_events(batches: int) -> float:
    started = time.perf_counter()
    for b in range(batches):
        batch_events(b)
    return batches * BATCH / (time.perf_counter() - started)


def python_reads(read_store: Path, scans: int) -> dict[str, float]:
    out = {}
    with Store.open_read_only(read_store) as store:
        head = store.head()

        def iterate() -> None:
            n = nbytes = 0
            for e in store.read(Query.all()):
                n += 1
                nbytes += len(e.data)
            assert (n, nbytes) == (head, head * len(DATA))

        def to_arrow() -> None:
            table = store.read(Query.all()).to_arrow()
            assert table.num_rows == head

        for name, scan in (("iterate", iterate), ("to_arrow", to_arrow)):
            scan()  # warm, untimed
            started = time.perf_counter()
            for _ in range(scans):
                scan()
            out[name] = scans * head / (time.perf_counter() - started)
    return out


def rust(read_store: Path, batches: int, scans: int) -> dict[str, float]:
    cmd = [str(RUST_BIN), "run", f"read_store={read_store}", f"work={WORK / 'rust'}", f"batches={batches}",
           "concurrent=1", f"scans={scans}", "selective=1", "catchups=1"]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    figures = {r["shape"]: r["events_per_s"] for r in map(json.loads, lines)}
    return {"append_batched": figures["append_batched"], "iterate": figures["read_warm_scan"],
            "visit": figures["read_warm_scan_visit"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=200_000, help="events in the read store")
    ap.add_argument("--batches", type=int, default=200, help="timed batches of 512 per append figure")
    ap.add_argument("--scans", type=int, default=5, help="timed scans of the read store per read figure")
    args = ap.parse_args()
    if not RUST_BIN.exists():
        raise SystemExit(f"{RUST_BIN} is missing: cargo build --release --manifest-path bench/drivers/Cargo.toml")
    WORK.mkdir(parents=True, exist_ok=True)
    read_store = WORK / "read-store"
    subprocess.run([str(RUST_BIN), "prepare", f"read_store={read_store}", f"events={args.events}"], check=True)

    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        figures = {f"rust_{k}": v for k, v in rust(read_store, args.batches, args.scans).items()}
        figures["python_append_batched"] = python_append_batched(args.batches, "fsync")
        figures["python_append_batched_buffered"] = python_append_batched(args.batches, "buffered")
        figures["python_build_events"] = python_build_events(args.batches)
        figures.update({f"python_{k}": v for k, v in python_reads(read_store, args.scans).items()})
        figures["to_arrow_over_iterate"] = figures["python_to_arrow"] / figures["python_iterate"]
        figures["append_batched_python_over_rust"] = figures["python_append_batched"] / figures["rust_append_batched"]
        rounds.append(figures)
        print(f"round {r + 1}: " + ", ".join(f"{k}={v:,.2f}" for k, v in figures.items()), file=sys.stderr, flush=True)

    median = {k: statistics.median(f[k] for f in rounds) for k in rounds[0]}
    rows = [
        ("Rust: iterate a warm read (owned events)", "rust_iterate", "events/s"),
        ("Rust: visit a warm read (zero-copy)", "rust_visit", "events/s"),
        ("Python: iterate a warm read, touching data", "python_iterate", "events/s"),
        ("Python: to_arrow() of the same read", "python_to_arrow", "events/s"),
        ("to_arrow() / iterate (target >= 3)", "to_arrow_over_iterate", "x"),
        ("Rust: batched appends (512, guarded, fsync)", "rust_append_batched", "events/s"),
        ("Python: batched appends (512, guarded, fsync)", "python_append_batched", "events/s"),
        ("Python / Rust batched appends (target >= 0.8)", "append_batched_python_over_rust", "x"),
        ("Python: batched appends, buffered (no fsync)", "python_append_batched_buffered", "events/s"),
        ("Python: building the Event objects alone", "python_build_events", "events/s"),
    ]
    print(f"lapilli Python runtime benchmark: {args.rounds} rounds, medians; read store of {args.events:,} events")
    print()
    print("| figure | median | unit |")
    print("|---|---:|---|")
    for label, key, unit in rows:
        value = f"{median[key]:.2f}" if unit == "x" else f"{median[key]:,.0f}"
        print(f"| {label} | {value} | {unit} |")
    print()
    print("every round: " + json.dumps(rounds))


if __name__ == "__main__":
    main()
