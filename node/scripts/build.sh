#!/usr/bin/env bash
# Builds the Node.js package `lapilli` in node/: installs the dev tools (npm ci, only when
# node_modules is missing or older than package-lock.json) and builds the native addon in
# release mode (`napi build --platform --release --no-js`: lapilli.<platform>.node beside
# native.js, which loads it before looking for a platform package; and index.d.ts).
# After it, `import { Store } from 'node/lapilli.js'` works. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d node_modules/@napi-rs/cli ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npx napi build --platform --release --no-js
