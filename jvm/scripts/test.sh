#!/usr/bin/env bash
# The JVM face's tests, run from the repository root by scripts/test.sh:
#   1. builds the crate and the bindings, compiles the Kotlin API, runs the JUnit tests
#      (contract, conformance scenarios, concurrency, a Rust-written store) and installs
#      dev.lapilli:lapilli into ~/.m2;
#   2. builds the example app in examples/kotlin against that installed artifact and runs
#      each example as its own JVM (no jna.library.path: the library comes out of the jar).
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "== jvm: mvn install (cargo build, uniffi bindgen, kotlinc, JUnit)"
mvn -B -q -ntp -Dstyle.color=never -f jvm/pom.xml install

echo "== jvm: examples/kotlin against the installed dev.lapilli:lapilli"
examples=(mvn -B -q -ntp -Dstyle.color=never -f examples/kotlin/pom.xml)
"${examples[@]}" compile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for main in Quickstart CourseSubscriptions IdempotentCommands Projection; do
    echo "-- $main"
    "${examples[@]}" exec:java -Dexec.mainClass="dev.lapilli.examples.${main}Kt" -Dexec.args="$work/$main"
done
# The demo's subscriber, on the store the course example left behind.
echo "-- DemoSubscribe"
out=$("${examples[@]}" exec:java -Dexec.mainClass=dev.lapilli.examples.DemoSubscribeKt -Dexec.args="$work/CourseSubscriptions")
echo "$out"
grep -q "Course c1 was defined with room for 2 students" <<<"$out"
grep -q "caught up at position" <<<"$out"
echo "== jvm: ok"
