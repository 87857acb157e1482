#!/usr/bin/env bash
# Every test of every runtime, from a fresh clone: each runtime's script installs what it needs
# (a virtualenv, npm packages, Maven artifacts) and builds its binding before testing it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Rust: lapilli-core (unit, integration, conformance, doc tests)"
cargo test -p lapilli-core

echo "== Rust: crash and fault harness (20 kill cycles and every injected fault)"
cargo test -p lapilli-core --features fault-injection --test crash
