#!/usr/bin/env bash
# What the always-on stats counters (issue 20) cost on the write cells: builds this crate
# against this checkout's core ("with") and against the core of the commit before the counters
# ("without", extracted with `git archive`, nothing else touched), then runs both binaries in
# alternating rounds (with, without, without, with, ...) so a noisy minute on a shared machine
# hits both, and prints per cell the median of each and their ratio.
#   bash bench/stats-cost/run.sh [ROUNDS=5] [SECS=0.5] [BASE=<commit before the counters>]
# Data lives in target/bench-data/ (a real disk, as the main harness requires).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${1:-5}"
SECS="${2:-0.5}"
BASE="${3:-c6e763e^}"
WORK="$ROOT/target/stats-cost"
DATA="$ROOT/target/bench-data/stats-cost"
rm -rf "$WORK/without" "$DATA"
mkdir -p "$WORK/without/core" "$DATA"

# "without": the base commit's core, and a copy of this crate beside it (its path to the
# core, ../../core, then leads there).
git -C "$ROOT" archive "$BASE" core Cargo.toml Cargo.lock | tar -x -C "$WORK/without"
# The core inherits its package fields from the root workspace; only the core is extracted.
sed -i 's/^members = .*/members = ["core"]/' "$WORK/without/Cargo.toml"
mkdir -p "$WORK/without/bench/stats-cost"
cp -r "$ROOT/bench/stats-cost/src" "$WORK/without/bench/stats-cost/"
cp "$ROOT/bench/stats-cost/Cargo.toml" "$ROOT/bench/stats-cost/Cargo.lock" "$WORK/without/bench/stats-cost/"

echo "building with the counters (this checkout) and without ($BASE)" >&2
cargo build -q --release --manifest-path "$ROOT/bench/stats-cost/Cargo.toml" --target-dir "$WORK/target-with"
cargo build -q --release --manifest-path "$WORK/without/bench/stats-cost/Cargo.toml" --target-dir "$WORK/target-without"
WITH="$WORK/target-with/release/lapilli-stats-cost"
WITHOUT="$WORK/target-without/release/lapilli-stats-cost"

: > "$WORK/with.jsonl"
: > "$WORK/without.jsonl"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round of $ROUNDS" >&2
    if [ $((round % 2)) -eq 1 ]; then order="with without"; else order="without with"; fi
    for side in $order; do
        if [ "$side" = with ]; then bin="$WITH"; else bin="$WITHOUT"; fi
        "$bin" "$DATA" "$SECS" >> "$WORK/$side.jsonl"
    done
done
rm -rf "$DATA"

python3 - "$WORK/with.jsonl" "$WORK/without.jsonl" "$ROUNDS" "$SECS" "$BASE" <<'PY'
import json, random, statistics, sys
def load(path):
    cells = {}
    for line in open(path):
        row = json.loads(line)
        cells.setdefault(row["cell"], []).append(row)
    return cells
def paired(a, b):
    """The median of the per-round ratios (each round runs both sides back to back) and a 95 %
    bootstrap interval of that median."""
    ratios = [x / y for x, y in zip(a, b)]
    rng = random.Random(1)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), boots[50], boots[1949]
with_, without = load(sys.argv[1]), load(sys.argv[2])
print(f"stats counters on the write cells: {sys.argv[3]} rounds of {sys.argv[4]} s, base {sys.argv[5]}")
print("Throughput: with / without above 1 means faster with the counters. CPU: with / without")
print("below 1 means less CPU per event with the counters. Paired: the median of the rounds' ratios,")
print("with its 95 % bootstrap interval.")
print()
print("| cell | with (events/s) | without (events/s) | throughput with / without (paired, 95 % CI) | CPU/event with (µs) | without (µs) | CPU with / without (paired, 95 % CI) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for cell in with_:
    wr = [r["events_per_s"] for r in with_[cell]]
    nr = [r["events_per_s"] for r in without[cell]]
    wc = [r.get("cpu_ns_per_event") for r in with_[cell]]
    nc = [r.get("cpu_ns_per_event") for r in without[cell]]
    t, tl, th = paired(wr, nr)
    row = f"| {cell} | {statistics.median(wr):,.0f} | {statistics.median(nr):,.0f} | {t:.3f} ({tl:.3f}-{th:.3f})"
    if None in wc or None in nc:
        row += " | | | |"
    else:
        c, cl, ch = paired(wc, nc)
        row += f" | {statistics.median(wc) / 1000:.2f} | {statistics.median(nc) / 1000:.2f} | {c:.3f} ({cl:.3f}-{ch:.3f}) |"
    print(row)
PY
