#!/usr/bin/env python3
"""Random 4 KiB reads/s from FILE, 16 threads, O_DIRECT (the guest's page cache bypassed).

On a VM whose disk is a file on its host, the host's own page cache serves what was read or
written lately, and a guest cannot drop it. Run on a file just written and on one the host has
not touched since boot (a large file of the base image) to see how far the two differ: on the
2-core VM of 2026-12-03, 44k to 58k reads/s against 14k to 24k (an earlier version of this
script, with 3,000 to 4,000 reads). The base image may sit on another layer of the host than
the data disk's own files, so the second figure is an indication, not the rate of data that
aged out of the host's cache. 16 Python threads on 2 cores may cap the rate themselves: run it
on a file cached in the guest (without O_DIRECT the figure would be the guest's) to know the
ceiling. Let a file just written reach the disk first (`sync`): a direct read waits for the
writeback of the dirty pages it overlaps. bench/README.md, "The full run of 2026-12-03", says
what the host's cache did to a cold-read cell and what the harness does about it.

Usage: scripts/host-cache-probe.py FILE [READS]   (Linux; FILE of at least 1 MiB; READS 20000)
"""
import mmap
import os
import random
import sys
import threading
import time

THREADS = 16


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    reads = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    pages = os.fstat(fd).st_size // 4096
    if pages < 256:
        sys.exit(f"{path}: {pages} pages; a file of at least 1 MiB is needed")
    rng = random.Random(20261203)
    offsets = [rng.randrange(pages) * 4096 for _ in range(reads)]
    start = threading.Barrier(THREADS + 1)
    failures: list[str] = []

    def work(share: list[int]) -> None:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
        start.wait()
        try:
            for offset in share:
                if os.preadv(fd, [buf], offset) != 4096:
                    failures.append(f"short read at {offset}")
                    return
        except OSError as e:
            failures.append(f"read failed: {e}")

    threads = [threading.Thread(target=work, args=(offsets[i::THREADS],)) for i in range(THREADS)]
    for t in threads:
        t.start()
    start.wait()
    started = time.monotonic()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    if failures:
        sys.exit(f"{path}: {failures[0]} ({len(failures)} threads failed)")
    print(f"{path}: {reads / elapsed:.0f} random 4 KiB reads/s ({THREADS} threads, O_DIRECT)")


if __name__ == "__main__":
    main()
