#!/usr/bin/env bash
# Builds and installs the `lapilli` wheel (build.sh), then tests the installed wheel: stub check
# (mypy.stubtest, the whole package: the native module against its .pyi, aio.py against itself)
# and the pytest suite. Run from anywhere; paths are the repo's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/target/py-venv/bin/python"
bash "$ROOT/python/scripts/build.sh"

# Run from a directory where `import lapilli` can only mean the installed wheel.
cd "$ROOT/target"
echo "== stubtest"
"$PY" -m mypy.stubtest lapilli
echo "== pytest"
"$PY" -m pytest -q -p no:cacheprovider -o tmp_path_retention_policy=none "$ROOT/python/tests" "$@"
