#!/usr/bin/env bash
# The long crash run recorded in tests/CRASH.md (not part of the test command): 1000 kill
# cycles by default, release build, a fresh store every 100 cycles, segment sizes changing
# between opens. Usage: bash scripts/crash-long.sh [CYCLES] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
LAPILLI_CRASH_CYCLES="${1:-1000}" LAPILLI_CRASH_SEED="${2:-7}" \
  cargo test --release -p lapilli-core --features fault-injection --test crash kill_loop -- --nocapture
