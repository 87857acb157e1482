#!/usr/bin/env node
// `npx lapilli ...`: the `lapilli` command line (the Rust `lapilli-cli`, linked into this
// package's native addon), run in this process. Ctrl-C ends it, as Node's default for SIGINT.
'use strict'
const native = require('../index.js')
process.exitCode = native.cliMain(['lapilli', ...process.argv.slice(2)])
