// The native loader (native.js): which addon it picks, and what it says when this machine's
// platform package is missing. The platform is passed in, so every case runs on any machine.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { PLATFORMS, currentPlatform, loadNative } = require('../native.js')

test('this machine is one of the shipped platforms, and its addon loads', () => {
  const platform = currentPlatform()
  assert.ok(PLATFORMS.includes(platform), platform)
  assert.equal(typeof loadNative(platform).NativeStore, 'function')
})

test('a development build beside the loader wins over the platform package', () => {
  const dir = mkdtempSync(join(tmpdir(), 'lapilli-loader-'))
  try {
    writeFileSync(join(dir, 'lapilli.linux-arm64-musl.node'), '')
    const asked = []
    assert.equal(loadNative('linux-arm64-musl', dir, (id) => (asked.push(id), 'loaded')), 'loaded')
    assert.deepEqual(asked, [join(dir, 'lapilli.linux-arm64-musl.node')])
  } finally {
    rmSync(dir, { recursive: true })
  }
})

test('without a development build the platform package is required', () => {
  const dir = mkdtempSync(join(tmpdir(), 'lapilli-loader-'))
  try {
    const asked = []
    assert.equal(loadNative('linux-x64-musl', dir, (id) => (asked.push(id), 'pkg')), 'pkg')
    assert.deepEqual(asked, ['lapilli-linux-x64-musl'])
  } finally {
    rmSync(dir, { recursive: true })
  }
})

test('a shipped platform whose package is missing is named, with what to do', () => {
  const dir = mkdtempSync(join(tmpdir(), 'lapilli-loader-'))
  try {
    assert.throws(() => loadNative('linux-arm64-musl', dir), (err) => {
      assert.equal(err.code, 'LAPILLI_PLATFORM_MISSING')
      assert.equal(err.platform, 'linux-arm64-musl')
      assert.match(err.message, /\(linux-arm64-musl\) is not installed: the package lapilli-linux-arm64-musl is missing/)
      assert.match(err.message, /--omit=optional/)
      assert.equal(err.cause.code, 'MODULE_NOT_FOUND')
      return true
    })
  } finally {
    rmSync(dir, { recursive: true })
  }
})

test('a platform lapilli does not ship for is named, with the list of those it does', () => {
  assert.throws(() => loadNative('darwin-arm64', '/nonexistent'), (err) => {
    assert.equal(err.code, 'LAPILLI_PLATFORM_MISSING')
    assert.match(err.message, /no native addon for this platform \(darwin-arm64\); lapilli ships one for linux-x64-gnu, linux-x64-musl, linux-arm64-gnu, linux-arm64-musl/)
    return true
  })
})

test('a platform package that is there but fails to load keeps its own error', () => {
  const broken = Object.assign(new Error('libc.musl-x86_64.so.1: cannot open shared object file'), { code: 'ERR_DLOPEN_FAILED' })
  assert.throws(() => loadNative('linux-x64-musl', '/nonexistent', () => { throw broken }), (err) => err === broken)
})
