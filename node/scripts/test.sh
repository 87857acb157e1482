#!/usr/bin/env bash
# Builds the Node.js package `lapilli` and runs its tests: npm ci and the native addon in
# release mode (scripts/build.sh), the TypeScript check of a typed usage file, then
# `node --test` over node/test/ (the conformance scenarios, the behaviour tests, the examples,
# the demo step, and test/dispose/ compiled by tsc with `await using`). Run from anywhere; idempotent; a second run reuses node_modules and
# cargo's cache.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
npx tsc --noEmit -p test/types
node --test --test-concurrency=1 test/
