#!/usr/bin/env bash
# Every test of every runtime, from a fresh clone: each runtime's script installs what it needs
# (a virtualenv, npm packages, Maven artifacts) and builds its binding before testing it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Release: every package carries the workspace version (scripts/release.sh --versions)"
bash scripts/release/versions-test.sh

echo "== PostgreSQL: a throwaway server and a PgBouncer in front of it for the Postgres backend's tests (every runtime's)"
export LAPILLI_PG_STATE="${TMPDIR:-/tmp}/lapilli-pg.$$.state"
trap 'bash scripts/postgres.sh stop' EXIT
# Assigned first, then evaluated: `eval "$(...)"` takes the status of `eval`, so a server that
# failed to start went unnoticed until every runner, after its build, failed on a missing URL.
postgres_env=$(bash scripts/postgres.sh start)
eval "$postgres_env"
# From here a Postgres test that cannot find the server or the pooler
# (LAPILLI_TEST_PGBOUNCER_URL, core/tests/postgres_pooler.rs) fails instead of skipping, and
# the server-kill test may kill this server.
export LAPILLI_REQUIRE_POSTGRES=1 LAPILLI_TEST_POSTGRES_KILL=1

echo "== Rust: lapilli-core (unit, integration, conformance on both backends, doc tests)"
cargo test -p lapilli-core --features postgres

echo "== Rust: crash and fault harness (20 kill cycles and every injected fault)"
cargo test -p lapilli-core --features fault-injection --test crash

echo "== Rust: fuzz smoke (every on-disk decoder for a few seconds; cargo-fuzz on nightly)"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in recovery event index_file; do
  mkdir -p "core/fuzz/corpus/$target"
  if ! (cd core/fuzz && cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- -max_total_time=5) > "target/fuzz-$target.log" 2>&1; then
    tail -40 "target/fuzz-$target.log"
    echo "fuzz target $target failed"
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" "target/fuzz-$target.log" | sed "s/^/fuzz $target: /"
done

echo "== CLI: the lapilli command line on real stores; its exports read by pyarrow and DuckDB"
bash tests/cli/run.sh

echo "== Node.js: the lapilli npm package"
bash node/scripts/test.sh

echo "== Python: the lapilli wheel (stubtest, pytest incl. the notebook example)"
bash python/scripts/test.sh

echo "== JVM: the dev.lapilli:lapilli jar (JUnit through Maven) and the Kotlin examples"
bash jvm/scripts/test.sh

echo "== Interop: a store written by each runtime, read by every runtime"
python3 tests/interop/run.py rust python node kotlin
