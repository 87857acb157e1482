#!/usr/bin/env bash
# The demo: one store in a temporary directory, written and read from every runtime in turn.
set -euo pipefail
cd "$(dirname "$0")/.."
store=$(mktemp -d -t lapilli-demo-XXXXXX)
trap 'rm -rf "$store"' EXIT

echo "== Rust: build the engine and run its quickstart"
cargo run -q -p lapilli-core --example quickstart -- "$store/rust"
