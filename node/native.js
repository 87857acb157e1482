'use strict'
// Finds the native addon for this machine. A release installs it as one of the per-platform
// packages the main package names in optionalDependencies (npm installs only the one whose
// os, cpu and libc fit); a development build (`napi build --platform`) leaves it beside this
// file as lapilli.<platform>.node. When neither is there, the error says which platform this
// is and what to install, instead of Node's "Cannot find module".

const { existsSync, readFileSync } = require('node:fs')
const { join } = require('node:path')

/** The platforms a release ships a package for: `lapilli-<platform>`. */
const PLATFORMS = ['linux-x64-gnu', 'linux-x64-musl', 'linux-arm64-gnu', 'linux-arm64-musl']

/** glibc or musl. Node's own report names the glibc it runs on, and nothing on musl. */
function linuxLibc() {
  try {
    // The shell's loader is a quick tell (Alpine's /usr/bin/ldd is musl's) without a report.
    if (readFileSync('/usr/bin/ldd', 'utf8').includes('musl')) return 'musl'
  } catch {}
  const header = process.report?.getReport?.()?.header
  return header?.glibcVersionRuntime ? 'gnu' : 'musl'
}

/** This machine's platform name, napi-rs style: `linux-x64-gnu`, `darwin-arm64`, ... */
function currentPlatform() {
  const base = `${process.platform}-${process.arch}`
  return process.platform === 'linux' ? `${base}-${linuxLibc()}` : base
}

/**
 * Loads the addon for `platform` from `dir` (a development build) or from the package
 * `lapilli-<platform>`; `load` is `require` (a parameter so tests can ask for any platform).
 */
function loadNative(platform, dir = __dirname, load = require) {
  const local = join(dir, `lapilli.${platform}.node`)
  if (existsSync(local)) return load(local)
  const pkg = `lapilli-${platform}`
  try {
    return load(pkg)
  } catch (err) {
    // Only "the package is not there" is ours to explain; a package that is there but fails to
    // load (a damaged file, a missing system library) keeps its own message.
    if (err?.code !== 'MODULE_NOT_FOUND' || !String(err.message).includes(`'${pkg}'`)) throw err
    const message = PLATFORMS.includes(platform)
      ? `lapilli: the native addon for this platform (${platform}) is not installed: the package ` +
        `${pkg} is missing. npm installs it as an optional dependency of lapilli; reinstall ` +
        `without --omit=optional / --no-optional, on this machine (node_modules copied from ` +
        `another OS, CPU or libc holds that one's package)`
      : `lapilli: no native addon for this platform (${platform}); lapilli ships one for ` +
        `${PLATFORMS.join(', ')}`
    const missing = new Error(message, { cause: err })
    missing.code = 'LAPILLI_PLATFORM_MISSING'
    missing.platform = platform
    throw missing
  }
}

module.exports = { PLATFORMS, currentPlatform, loadNative }
