// A read-only follower in this Node process, following a store that another process writes:
// the core's `append_forever` example, a Rust writer appending batches until it is killed.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Store, Query, ReadOnlyError } from '../lapilli.js'

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function writerBinary() {
  execFileSync('cargo', ['build', '-q', '--release', '-p', 'lapilli-core', '--example', 'append_forever'], { cwd: repo, stdio: 'inherit' })
  const targetDir = process.env.CARGO_TARGET_DIR ?? path.join(repo, 'target')
  return path.join(targetDir, 'release', 'examples', 'append_forever')
}

function startWriter(binary, dir) {
  const child = spawn(binary, [dir], { stdio: ['ignore', 'pipe', 'inherit'] })
  const ready = new Promise((resolve, reject) => {
    child.stdout.on('data', (chunk) => { if (String(chunk).includes('ready')) resolve() })
    child.on('exit', (code) => reject(new Error(`writer exited with ${code}`)))
  })
  return { child, ready }
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.on('exit', resolve))
  child.kill('SIGKILL')
  await exited
}

async function eventually(what, check) {
  const deadline = Date.now() + 10_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

// Every batch seen is whole, in order, and positions are gapless.
function checkWholeBatches(events) {
  let i = 0
  while (i < events.length) {
    const word = (e, n) => e.data.readUInt32LE(4 * n)
    const k = word(events[i], 2)
    assert.equal(word(events[i], 1), 0, `a batch starts with its first event at ${events[i].position}`)
    assert.ok(i + k <= events.length, `the batch at ${events[i].position} is cut short`)
    for (let j = 0; j < k; j++) {
      assert.deepEqual(events[i + j].tags, events[i].tags)
      assert.equal(word(events[i + j], 1), j)
    }
    i += k
  }
  events.forEach((e, n) => assert.equal(e.position, n + 1))
}

test('a follower reads, subscribes and survives the writer process being killed and restarted', async () => {
  const binary = writerBinary()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-follow-'))
  let writer = startWriter(binary, dir)
  try {
    await writer.ready
    const follower = await Store.openReadOnly(dir)
    const subscription = follower.subscribe(Query.all())
    let delivered = 0
    let lastDelivered = 0
    const consumer = (async () => {
      for await (const event of subscription) {
        assert.equal(event.position, lastDelivered + 1, 'the subscription delivers in order, without gaps')
        lastDelivered = event.position
        delivered++
      }
    })()
    for (let round = 0; round < 2; round++) {
      const target = follower.head() + 200
      await eventually('the writer to make progress', () => follower.head() >= target)
      const { events, head } = await follower.readAll(Query.all())
      assert.ok(head >= target)
      checkWholeBatches(events)
      const refused = await follower.append([{ type: 'X', tags: [], data: Buffer.alloc(0) }]).catch((e) => e)
      assert.ok(refused instanceof ReadOnlyError)
      await stop(writer.child)
      const atKill = follower.head()
      writer = startWriter(binary, dir)
      await writer.ready
      await eventually('the restarted writer to be followed', () => follower.head() > atKill)
    }
    await eventually('the subscription to catch up', () => delivered >= follower.head() - 50)
    subscription.close()
    await consumer
    checkWholeBatches((await follower.readAll(Query.all())).events)
    await follower.close()
  } finally {
    await stop(writer.child)
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
