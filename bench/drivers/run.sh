#!/usr/bin/env bash
# The per-runtime benchmark drivers (bench/drivers/README.md): builds the Rust reference, the
# Python wheel, UmaDB's wheel (its own venv), the Node.js addon and the JVM package, then runs
# every driver for every shape, 3 rounds interleaved, and writes
# bench/results/runtimes-<date>.json and .md.
#
#   bash bench/drivers/run.sh [--quick] [--no-build] [--rounds N] [--out DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
exec python3 bench/drivers/run.py "$@"
