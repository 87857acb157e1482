#!/usr/bin/env bash
# Builds the `lapilli` wheel and installs it into target/py-venv (with the pinned tools the
# tests and examples use). Run from anywhere; paths are the repo's; a second run is quick.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="$ROOT/target/py-venv"
WHEELS="$ROOT/target/wheels"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
    python3.11 -m venv "$VENV"
fi

# Pinned tools; pip skips what is already installed at these versions, so a second run is quick.
REQS=(maturin==1.16.0 pytest==9.2.0 pyarrow==26.0.1 pandas==3.1.1 polars==2.1.0 mypy==2.4.1
      nbclient==0.11.0 nbformat==5.11.1 ipykernel==7.4.0 matplotlib==3.11.2 duckdb==2.0.1)
STAMP="$VENV/.lapilli-reqs"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "${REQS[*]}" ]; then
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet "${REQS[@]}"
    echo "${REQS[*]}" > "$STAMP"
fi

# Build the wheel into the workspace target dir; remove older lapilli wheels first so exactly
# one is installed.
mkdir -p "$WHEELS"
rm -f "$WHEELS"/lapilli-*.whl
"$VENV/bin/maturin" build --release --quiet -m python/Cargo.toml -i "$PY" -o "$WHEELS"
WHEEL="$(ls "$WHEELS"/lapilli-*.whl)"
"$PY" -m pip install --quiet --force-reinstall --no-deps "$WHEEL"

