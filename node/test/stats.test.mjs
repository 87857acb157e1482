// `store.stats()`, and the `lapilli` command line run through `npx` from the packed npm tarball.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Store, Query, StoreClosedError } from '../lapilli.js'

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

function tempDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-stats-'))
}

test('stats count what the handle wrote, and a follower reports its lag', async () => {
  const dir = tempDir()
  try {
    const store = await Store.open(dir, { durability: 'fsync' })
    const fresh = store.stats()
    assert.equal(fresh.head, 0)
    assert.equal(fresh.groupCommits, 0)
    assert.equal(fresh.followerLagPositions, null)
    for (const n of [1, 4, 2]) {
      await store.append(Array.from({ length: n }, (_, i) => ({ type: 'T', tags: [`k:${i}`], data: Buffer.from('x') })))
    }
    const stats = store.stats()
    assert.deepEqual(Object.keys(stats).sort(), [
      'bytesAppended', 'eventsAppended', 'eventsPerCommitMax', 'eventsPerCommitMean', 'followerLagMillis',
      'followerLagPositions', 'fsyncMaxMicros', 'fsyncP50Micros', 'fsyncP99Micros', 'fsyncs', 'groupCommits', 'head',
      'indexBytes', 'queueDepth', 'queueDepthMax', 'segments', 'subscriptions',
    ])
    assert.equal(stats.head, 7)
    assert.equal(stats.eventsAppended, 7)
    assert.equal(stats.groupCommits, 3)
    assert.equal(stats.fsyncs, 3)
    assert.equal(stats.eventsPerCommitMax, 4)
    assert.ok(Math.abs(stats.eventsPerCommitMean - 7 / 3) < 1e-9)
    assert.ok(stats.fsyncMaxMicros > 0)
    assert.ok(stats.fsyncP50Micros <= stats.fsyncP99Micros && stats.fsyncP99Micros <= stats.fsyncMaxMicros)
    assert.equal(stats.queueDepth, 0)
    assert.ok(stats.queueDepthMax >= 1)
    assert.equal(stats.segments, 1)
    const subscription = store.subscribe(Query.all())
    assert.equal(store.stats().subscriptions, 1)
    subscription.close()
    assert.equal(store.stats().subscriptions, 0)
    const follower = await Store.openReadOnly(dir)
    const seen = follower.stats()
    assert.equal(seen.head, 7)
    assert.equal(seen.eventsAppended, 0)
    assert.equal(seen.followerLagPositions, 0)
    assert.equal(seen.followerLagMillis, 0)
    await follower.close()
    await store.close()
    assert.throws(() => store.stats(), StoreClosedError)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('npx lapilli runs the command line from the packed package', async () => {
  const work = tempDir()
  try {
    const packed = execFileSync('npm', ['pack', '--silent', '--pack-destination', work], { cwd: packageDir, encoding: 'utf8' }).trim()
    const project = path.join(work, 'project')
    fs.mkdirSync(project)
    fs.writeFileSync(path.join(project, 'package.json'), '{"name":"p","version":"1.0.0","private":true}')
    execFileSync('npm', ['install', '--silent', '--no-audit', '--no-fund', '--offline', path.join(work, packed.split('\n').pop())], { cwd: project })
    // The main package carries no addon (each platform's is its own package, built by
    // scripts/release.sh and not published here): the development build stands in for it,
    // placed where native.js looks first.
    const addon = fs.readdirSync(packageDir).find((name) => /^lapilli\..+\.node$/.test(name))
    fs.copyFileSync(path.join(packageDir, addon), path.join(project, 'node_modules', 'lapilli', addon))
    const dir = path.join(work, 'store')
    const store = await Store.open(dir, { durability: 'buffered' })
    await store.append([{ type: 'CourseDefined', tags: ['course:c1'], data: Buffer.from('{}') }])
    const npx = (...args) => spawnSync('npx', ['--no-install', 'lapilli', ...args], { cwd: project, encoding: 'utf8' })
    const info = npx('info', dir, '--json')
    assert.equal(info.status, 0, info.stderr)
    const parsed = JSON.parse(info.stdout)
    assert.equal(parsed.head, 1)
    assert.equal(parsed.writer_pid, process.pid)
    const types = npx('types', dir)
    assert.equal(types.stdout, '         1  CourseDefined\n')
    await store.close()
    const bad = npx('read', dir, '--limit', 'nope')
    assert.equal(bad.status, 2)
    assert.match(bad.stderr, /^lapilli: .*'nope'/)
  } finally {
    fs.rmSync(work, { recursive: true, force: true })
  }
})
