#!/usr/bin/env bash
# The demo: one store in a temporary directory, written and read from every runtime in turn.
# Python decides and appends (one append refused as a conflict), Node reads a student's
# history with a bounded query, Kotlin subscribes and prints the catch-up. Builds what it needs
# first (a virtualenv with the wheel, the Node addon, the JVM jar).
set -euo pipefail
cd "$(dirname "$0")/.."
store=$(mktemp -d -t lapilli-demo-XXXXXX)
trap 'rm -rf "$store"' EXIT

echo "== Building the Python wheel and the Node.js addon (first run: a few minutes)"
bash python/scripts/build.sh > "$store/build.log" 2>&1 || { cat "$store/build.log"; exit 1; }
bash node/scripts/build.sh >> "$store/build.log" 2>&1 || { cat "$store/build.log"; exit 1; }

echo
echo "== Python: decisions about course c1, each guarded by the query it read"
target/py-venv/bin/python examples/demo/1_python_appends.py "$store/courses"

echo
echo "== Node.js: student s1's history, read with a bounded query"
node examples/demo/2_node_reads.mjs "$store/courses"
