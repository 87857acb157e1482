#!/usr/bin/env bash
# The JVM face's tests, run from the repository root by scripts/test.sh:
#   0. runs the facade crate's Rust unit tests (jvm/rust/lib.rs);
#   1. builds the crate and the bindings, compiles the Kotlin API, runs the JUnit tests
#      (contract, conformance scenarios, concurrency, a Rust-written store) and installs
#      dev.lapilli:lapilli into ~/.m2;
#   2. builds the example app in examples/kotlin against that installed artifact and runs
#      each example as its own JVM (no jna.library.path: the library comes out of the jar).
set -euo pipefail
cd "$(dirname "$0")/../.."

# Maven 3.8 prints stray ANSI resets even in batch mode; drop them so the log stays readable.
mvnq() { mvn -B -q -ntp "$@" 2>&1 | sed -u 's/\x1b\[0m//g'; }

echo "== jvm: the facade's own Rust tests (the direct calls' failure ids)"
cargo test -q -p lapilli-jvm --lib

echo "== jvm: mvn install (cargo build, uniffi bindgen, kotlinc, JUnit)"
mvnq -f jvm/pom.xml install

echo "== jvm: examples/kotlin against the installed dev.lapilli:lapilli"
examples=(mvnq -f examples/kotlin/pom.xml)
"${examples[@]}" compile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each example in a JVM of its own (`java -classpath <the app's declared classpath>`).
for main in Quickstart CourseSubscriptions IdempotentCommands Projection; do
    echo "-- $main"
    "${examples[@]}" exec:exec -Dexec.executable=java \
        -Dexec.args="-classpath %classpath dev.lapilli.examples.${main}Kt $work/$main"
done
# The demo's subscriber, on the store the course example left behind, run the way the demo
# command runs it (exec:java).
echo "-- DemoSubscribe"
out=$("${examples[@]}" exec:java -Dexec.mainClass=dev.lapilli.examples.DemoSubscribeKt -Dexec.args="$work/CourseSubscriptions")
echo "$out"
grep -q "Course c1 was defined with room for 2 students" <<<"$out"
grep -q "caught up at position" <<<"$out"
echo "== jvm: ok"
