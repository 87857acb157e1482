#!/usr/bin/env node
// `npx lapilli ...`: the `lapilli` command line (the Rust `lapilli-cli`, linked into this
// package's native addon), run in this process. Ctrl-C ends it, as Node's default for SIGINT.
'use strict'
const { currentPlatform, loadNative } = require('../native.js')
const native = loadNative(currentPlatform())
process.exitCode = native.cliMain(['lapilli', ...process.argv.slice(2)])
