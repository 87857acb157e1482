// `await using` / `using` on Store, Subscription, ReadResult and their iterators, written in
// TypeScript and compiled here by tsc with the `esnext.disposable` lib (test/dispose/), so the
// test also checks that lapilli.d.ts declares the disposers the code has.

import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'

const packageDir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const compiled = path.join(packageDir, 'build', 'dispose', 'dispose.js')
let disposal

before(() => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  fs.rmSync(path.dirname(compiled), { recursive: true, force: true })
  execFileSync(process.execPath, [tsc, '-p', path.join(packageDir, 'test', 'dispose')], { stdio: 'inherit' })
  disposal = createRequire(import.meta.url)(compiled)
})

function storeDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-dispose-'))
  return { path: path.join(dir, 'store'), [Symbol.dispose]: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

test('tsc downlevels `await using` to its helpers, which find the symbols Node defines', () => {
  const source = fs.readFileSync(compiled, 'utf8')
  assert.match(source, /__addDisposableResource/)
  assert.equal(Symbol.asyncDispose, Symbol.for('nodejs.asyncDispose'))
})

test('await using store = await Store.open(dir): closed at the end of the block', async () => {
  const dir = storeDir()
  try {
    assert.deepEqual(await disposal.storeBlock(dir.path), { inside: 2, closedAfter: true, reopenedHead: 2 })
  } finally {
    dir[Symbol.dispose]()
  }
})

test('a block that throws still disposes its subscription and store', async () => {
  const dir = storeDir()
  try {
    assert.deepEqual(await disposal.throwingBlock(dir.path), { thrown: 'decision failed', subClosed: true, storeClosed: true })
  } finally {
    dir[Symbol.dispose]()
  }
})

test('using / await using on reads, subscriptions and their iterators close them', async () => {
  const dir = storeDir()
  try {
    assert.deepEqual(await disposal.readsAndSubscriptions(dir.path), {
      firstPosition: 1,
      readClosed: true,
      halfReadClosed: true,
      iteratedClosed: true,
      subClosed: true,
      subIteratedClosed: true,
    })
  } finally {
    dir[Symbol.dispose]()
  }
})
