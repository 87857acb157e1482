#!/usr/bin/env bash
# The `lapilli` command line's tests: the binary on real stores (tests/cli/cli.rs, every command,
# outputs, exit statuses, bad arguments, verify and import faults, a live writer), then its
# Parquet and Arrow exports read back by pyarrow and DuckDB (check_exports.py) in the Python
# test environment (target/py-venv, created with the same pins by python/scripts/build.sh; only
# pyarrow and duckdb are needed here, so a missing venv gets just those).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="$ROOT/target/py-venv"
PY="$VENV/bin/python"
if ! "$PY" -c "import pyarrow, duckdb" 2>/dev/null; then
    [ -x "$PY" ] || python3.11 -m venv "$VENV"
    "$PY" -m pip install --quiet pyarrow==26.0.1 duckdb==2.0.1
fi
EXPORTS="$(mktemp -d)"
trap 'rm -rf "$EXPORTS"' EXIT
LAPILLI_CLI_EXPORTS="$EXPORTS" cargo test -p lapilli-cli
"$PY" tests/cli/check_exports.py "$EXPORTS"
