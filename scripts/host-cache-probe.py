#!/usr/bin/env python3
"""Random 4 KiB reads/s from FILE, 16 threads, O_DIRECT (the guest's page cache bypassed).

On a VM whose disk is a file on its host, the host's own page cache serves what was read or
written lately, and a guest cannot drop it. Run on a file just written and on one the host has
not touched since boot (a large file of the base image) to see how far the two differ: on the
2-core VM of 2026-12-03, 44k to 58k reads/s against 14k to 24k. Let a file just written reach
the disk first (`sync`): a direct read waits for the writeback of dirty pages it overlaps. bench/README.md, "The full run of
2026-12-03", says what this did to a cold-read cell and what the harness does about it.

Usage: scripts/host-cache-probe.py FILE [READS]   (Linux; FILE of at least a few MiB)
"""
import mmap
import os
import random
import sys
import threading
import time


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    reads = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    pages = os.fstat(fd).st_size // 4096
    if pages < 256:
        sys.exit(f"{path}: {pages} pages; a file of at least 1 MiB is needed")
    offsets = [random.randrange(pages) * 4096 for _ in range(reads)]

    def work(share: list[int]) -> None:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
        for offset in share:
            os.preadv(fd, [buf], offset)

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(offsets[i::16],)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    print(f"{path}: {reads / elapsed:.0f} random 4 KiB reads/s (16 threads, O_DIRECT)")


if __name__ == "__main__":
    main()
