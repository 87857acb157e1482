#!/usr/bin/env bash
# The demo: one store in a temporary directory, written and read from every runtime in turn.
# Python decides and appends (one append refused as a conflict), Node reads a student's
# history with a bounded query, Kotlin subscribes and prints the catch-up. Builds what it needs
# first (a virtualenv with the wheel, the Node addon, the JVM jar).
set -euo pipefail
cd "$(dirname "$0")/.."
store=$(mktemp -d -t lapilli-demo-XXXXXX)
trap 'rm -rf "$store"' EXIT

# Maven 3.8 prints stray ANSI resets even in batch mode; drop them.
mvnq() { mvn -B -q -ntp "$@" 2>&1 | sed -u 's/\x1b\[0m//g'; }

echo "== Building the Python wheel, the Node.js addon and the JVM jar (first run: several minutes)"
{
  bash python/scripts/build.sh
  bash node/scripts/build.sh
  mvnq -f jvm/pom.xml install -DskipTests
  mvnq -f examples/kotlin/pom.xml compile
} > "$store/build.log" 2>&1 || { cat "$store/build.log"; exit 1; }

echo
echo "== Python: decisions about course c1, each guarded by the query it read"
target/py-venv/bin/python examples/demo/1_python_appends.py "$store/courses"

echo
echo "== Node.js: student s1's history, read with a bounded query"
node examples/demo/2_node_reads.mjs "$store/courses"

echo
echo "== Kotlin: a subscription on course c1, printing the catch-up"
mvnq -f examples/kotlin/pom.xml exec:java -Dexec.mainClass=dev.lapilli.examples.DemoSubscribeKt -Dexec.args="$store/courses"
