#!/usr/bin/env bash
# The long crash run of the writer's newer paths, recorded in tests/CRASH.md (not part of the
# test command): the three crash tests of groups indexed during their sync, zeros written ahead
# of the commits, and groups written ahead of their staging, each for CYCLES kill or abort
# cycles (default 60; 8, 6 and 6 in the test command), release build, one test at a time.
# Usage: bash scripts/crash-long-writer.sh [CYCLES]
set -euo pipefail
cd "$(dirname "$0")/.."
LAPILLI_CRASH_WRITER_CYCLES="${1:-60}" \
  cargo test --release -p lapilli-core --features fault-injection --test crash -- \
  kills_while_large_groups_are_indexed_during_their_sync \
  crashes_while_zeros_are_written_ahead_of_the_commits \
  crashes_while_large_groups_are_written_ahead_of_their_staging \
  --nocapture --test-threads=1
