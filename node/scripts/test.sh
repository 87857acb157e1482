#!/usr/bin/env bash
# Builds the Node.js package `lapilli` and runs its tests: npm ci, the native addon (release),
# the TypeScript check of a typed usage file, then `node --test` over node/test/.
# Run from anywhere; idempotent; a second run reuses node_modules and cargo's cache.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d node_modules/@napi-rs/cli ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npx napi build --platform --release
npx tsc --noEmit -p test/types
node --test --test-concurrency=1 test/
