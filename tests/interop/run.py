"""Interop across runtimes: a store written by each runtime is read by every runtime, events
byte-identical to tests/interop/events.json, and the on-disk format versions checked; and, when
LAPILLI_TEST_POSTGRES_URL is set, a context written by each runtime on that PostgreSQL server,
read by every runtime.

Usage (from the repo root, after each runtime is built by its test script):
    python3 tests/interop/run.py rust python node kotlin
Prints one line per (writer, reader) pair and a closing `interop: N passed, M failed`."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "interop" / "events.json"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
LOG_FORMAT_VERSION = 1
# Index format 2: 4 KiB blocks each with a CRC-32 (issue 14); every runtime writes it.
INDEX_FORMAT_VERSION = 2


def kotlin_command() -> list:
    project = ROOT / "tests" / "interop" / "kotlin"
    classpath_file = project / "target" / "classpath.txt"
    maven = ["mvn", "-B", "-q", "-ntp", "-f", str(project / "pom.xml")]
    build = subprocess.run(
        maven + ["compile", "dependency:build-classpath", f"-Dmdep.outputFile={classpath_file}"],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        sys.exit(f"building the Kotlin interop program failed:\n{build.stdout}\n{build.stderr}")
    classes = project / "target" / "classes"
    return ["java", "-cp", f"{classes}:{classpath_file.read_text().strip()}", "InteropKt"]


def commands(runtimes: list) -> dict:
    known = {
        "rust": lambda: [str(TARGET / "release" / "examples" / "interop")],
        "python": lambda: [str(TARGET / "py-venv" / "bin" / "python"), str(ROOT / "tests" / "interop" / "interop.py")],
        "node": lambda: ["node", str(ROOT / "tests" / "interop" / "interop.mjs")],
        "kotlin": kotlin_command,
    }
    if "rust" in runtimes:
        subprocess.run(
            ["cargo", "build", "-q", "--release", "-p", "lapilli-core", "--features", "postgres", "--example", "interop"],
            cwd=ROOT,
            check=True,
        )
    return {name: known[name]() for name in runtimes}


def expected_events() -> list:
    spec = json.loads(EVENTS.read_text(encoding="utf-8"))
    events = [e for batch in spec["batches"] for e in batch]
    return [
        {"position": n + 1, "type": e["type"], "tags": sorted(e["tags"], key=lambda t: t.encode()), "data_hex": e["data_hex"]}
        for n, e in enumerate(events)
    ]


def check_format(store: Path) -> str:
    logs = sorted(store.glob("*.log"))
    indexes = sorted(store.glob("*.idx"))
    if len(logs) < 2 or not indexes:
        return f"expected roll-over and index files, found {len(logs)} segments and {len(indexes)} index files"
    for log in logs:
        header = log.read_bytes()[:12]
        if header[:8] != b"LAPILLI\0" or struct.unpack("<I", header[8:12])[0] != LOG_FORMAT_VERSION:
            return f"{log.name}: not a version {LOG_FORMAT_VERSION} segment"
    for index in indexes:
        header = index.read_bytes()[:12]
        if header[:8] != b"LAPIDX\0\0" or struct.unpack("<I", header[8:12])[0] != INDEX_FORMAT_VERSION:
            return f"{index.name}: not a version {INDEX_FORMAT_VERSION} index file"
    return ""


def read_back(run: dict, reader: str, store: str, expected: list, what: str) -> bool:
    """Reads `store` through `reader`, prints ok or FAIL with the first difference, and says which."""
    out = subprocess.run(run[reader] + ["read", store], check=True, capture_output=True, text=True).stdout
    got = [json.loads(line) for line in out.splitlines() if line.strip()]
    if got == expected:
        print(f"ok   {what}: {len(got)} events byte-identical")
        return True
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    print(f"FAIL {what}: {len(got)} events, first difference at index {first}")
    return False


def main() -> int:
    runtimes = sys.argv[1:] or ["rust", "python", "node", "kotlin"]
    run = commands(runtimes)
    expected = expected_events()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="lapilli-interop-") as tmp:
        for writer in runtimes:
            store = Path(tmp) / writer
            subprocess.run(run[writer] + ["write", str(store), str(EVENTS)], check=True)
            problem = check_format(store)
            if problem:
                print(f"FAIL format of the store {writer} wrote: {problem}")
                failed += 1
            for reader in runtimes:
                ok = read_back(run, reader, str(store), expected, f"{writer} wrote, {reader} read")
                passed, failed = passed + ok, failed + (not ok)
    # The same on the PostgreSQL backend when a server is given: each writer into a fresh
    # context, read by every runtime (no file format to check there).
    url = os.environ.get("LAPILLI_TEST_POSTGRES_URL")
    if url:
        separator = "&" if "?" in url else "?"
        for writer in runtimes:
            store = f"{url}{separator}context=interop_{os.getpid()}_{time.time_ns() // 1000 % 10**9}_{writer}"
            subprocess.run(run[writer] + ["write", store, str(EVENTS)], check=True)
            for reader in runtimes:
                ok = read_back(run, reader, store, expected, f"{writer} wrote, {reader} read, on Postgres")
                passed, failed = passed + ok, failed + (not ok)
    elif os.environ.get("LAPILLI_REQUIRE_POSTGRES"):
        print("FAIL LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not")
        failed += 1
    print(f"interop: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
