// The event loop is never blocked (timers tick through a large fsync'd append and a large
// read; a burst of appends three times the writer's queue leaves it free), and a process using lapilli exits by itself: nothing native keeps Node alive after
// close(), and open stores or subscriptions do not crash it at exit.

import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { Store, Query } from '../lapilli.js'

const packageDir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')

// Segments are preallocated: every directory made here is removed once the file's tests ran.
const made = []
function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-loop-'))
  made.push(dir)
  return dir
}
after(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true })
})

/** Runs `work` while a 2 ms interval ticks; returns how many ticks happened and the largest gap. */
async function ticksDuring(work) {
  let ticks = 0
  let last = performance.now()
  let maxGap = 0
  const timer = setInterval(() => {
    const now = performance.now()
    maxGap = Math.max(maxGap, now - last)
    last = now
    ticks++
  }, 2)
  const started = performance.now()
  try {
    await work()
  } finally {
    clearInterval(timer)
  }
  return { ticks, maxGap, ms: performance.now() - started }
}

test('setInterval keeps ticking during a large fsync append and a large read', async () => {
  const dir = tempDir()
  const store = await Store.open(path.join(dir, 'store'), { durability: 'fsync' })
  try {
    const data = Buffer.alloc(1024, 0xab)
    const events = Array.from({ length: 20000 }, (_, i) => ({ type: 'Big', tags: [`k:${i % 16}`], data }))
    // Converting, validating and encoding the events happens when append is called, on the JS
    // thread (proportional to the input); the commit and its fsync happen off it, so timers
    // tick while the Promises are pending.
    const pending = []
    for (let i = 0; i < 5; i++) pending.push(store.append(events))
    let appended
    const a = await ticksDuring(async () => {
      appended = await Promise.all(pending)
    })
    assert.equal(appended[4].last, 100000)
    assert.ok(a.ticks >= 3, `only ${a.ticks} ticks in a ${a.ms.toFixed(0)} ms append`)
    assert.ok(a.maxGap < Math.max(a.ms / 2, 20), `a ${a.maxGap.toFixed(0)} ms gap in a ${a.ms.toFixed(0)} ms append`)

    let count = 0
    const r = await ticksDuring(async () => {
      for await (const e of store.read(Query.all())) count += e.data.length > 0 ? 1 : 0
    })
    assert.equal(count, 100000)
    assert.ok(r.ticks >= 3, `only ${r.ticks} ticks in a ${r.ms.toFixed(0)} ms read`)
    // Reads leave the loop between batches: no gap close to the whole read.
    assert.ok(r.maxGap < Math.max(r.ms / 2, 20), `a ${r.maxGap.toFixed(0)} ms gap in a ${r.ms.toFixed(0)} ms read`)
  } finally {
    await store.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a burst of 50,000 appends, three times the writer queue, leaves the event loop free and commits in call order', async (t) => {
  const dir = tempDir()
  // 32 MiB segments: preallocating the default 256 MiB competes for the machine's two cores.
  const store = await Store.open(path.join(dir, 'store'), { durability: 'fsync', segmentSize: 32 << 20 })
  try {
    const data = Buffer.alloc(100, 1)
    // The same event arrays again and again: what the collector pauses for is the library's.
    const batches = Array.from({ length: 64 }, (_, k) => [{ type: 'Burst', tags: [`k:${k}`], data }])
    // Half the appends carry a condition, so the pre-check against the index is part of the
    // work that must stay off the event loop.
    const never = { failIfEventsMatch: Query.forTags('never'), after: 0 }
    // Each sample is the time between two 1 ms timer ticks: 1 ms plus however long the loop
    // was held up.
    const delay = monitorEventLoopDelay({ resolution: 1 })
    delay.enable()
    const pending = []
    let turn = []
    for (let i = 0; i < 50000; i++) {
      turn.push(store.append(batches[i % 64], i % 2 === 1 ? never : undefined))
      // The calls arrive as requests would, twenty per turn of the loop (one synchronous loop
      // of 50,000 calls is the caller's own JavaScript, which no library can interleave), and
      // each turn's Promises are joined as they come (Promise.all over 50,000 at once is one
      // synchronous pass of 50,000 .then calls). All 50,000 are pending at once all the same:
      // three times what the writer's queue holds (16,384).
      if (turn.length === 20) {
        pending.push(Promise.all(turn))
        turn = []
        await new Promise(setImmediate)
      }
    }
    const answers = (await Promise.all(pending)).flat()
    delay.disable()
    const outOfOrder = answers.findIndex((a, i) => a.first !== i + 1 || a.last !== i + 1)
    assert.equal(outOfOrder, -1, `append ${outOfOrder} committed at ${JSON.stringify(answers[outOfOrder])}`)
    assert.equal(store.head(), 50000)
    const p99 = delay.percentile(99) / 1e6
    t.diagnostic(`event loop delay p99 ${p99.toFixed(1)} ms, max ${(delay.max / 1e6).toFixed(1)} ms, ${delay.count} samples`)
    assert.ok(
      p99 < 20,
      `event loop delay p99 ${p99.toFixed(1)} ms (max ${(delay.max / 1e6).toFixed(1)} ms, ${delay.count} samples)`,
    )
  } finally {
    await store.close()
  }
})

/** Runs `source` as an ES module in a child `node`; resolves with its exit code, signal, output and time. */
function runChild(source, args = [], limitMs = 10000) {
  return new Promise((resolve, reject) => {
    const started = Date.now()
    const child = spawn(process.execPath, ['--input-type=module', '-e', source, '--', ...args], {
      cwd: packageDir,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    const killer = setTimeout(() => child.kill('SIGKILL'), limitMs)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, out, err, ms: Date.now() - started })
    })
  })
}

const prelude = `import { Store, Query } from ${JSON.stringify(path.join(packageDir, 'lapilli.js'))};
const dir = process.argv[process.argv.length - 1];`

test('a child that opens, appends, subscribes and closes exits on its own', async () => {
  const dir = path.join(tempDir(), 'store')
  const r = await runChild(
    `${prelude}
    const store = await Store.open(dir);
    await store.append([{ type: 'A', tags: ['x'] }]);
    const sub = store.subscribe(Query.all());
    setTimeout(() => store.append([{ type: 'B' }]), 50);
    const seen = [];
    for await (const e of sub) { seen.push(e.type); if (seen.length === 2) break; }
    const live = store.subscribe(Query.all(), { after: 2 });
    const waiting = live.nextBatch(10);          // a consumer waiting when the store closes
    await store.close();
    console.log(seen.join(','), await waiting);`,
    [dir],
  )
  assert.equal(r.signal, null, `killed after ${r.ms} ms: the process did not exit by itself; ${r.err}`)
  assert.equal(r.code, 0, r.err)
  assert.equal(r.out.trim(), 'A,B null')
  assert.ok(r.ms < 5000, `took ${r.ms} ms to exit`)
})

test('a child that leaves its store and a subscription open exits cleanly, its appends durable', async () => {
  const dir = path.join(tempDir(), 'store')
  const r = await runChild(
    `${prelude}
    const store = await Store.open(dir);
    await store.append([{ type: 'A' }, { type: 'B' }]);
    const sub = store.subscribe(Query.all());
    console.log((await sub.nextBatch(10, 0)).length);`,
    [dir],
  )
  assert.equal(r.signal, null, `killed after ${r.ms} ms; ${r.err}`)
  assert.equal(r.code, 0, r.err)
  assert.equal(r.out.trim(), '2')
  const store = await Store.open(dir)
  assert.equal(store.head(), 2)
  await store.close()
})

test('process.exit while a subscription waits and a store is open does not crash', async () => {
  const dir = path.join(tempDir(), 'store')
  const r = await runChild(
    `${prelude}
    const store = await Store.open(dir);
    await store.append([{ type: 'A' }]);
    setTimeout(() => process.exit(7), 100);
    for await (const e of store.subscribe(Query.all())) console.log(e.type);`,
    [dir],
  )
  assert.equal(r.signal, null, `killed after ${r.ms} ms; ${r.err}`)
  assert.equal(r.code, 7, r.err)
  assert.equal(r.out.trim(), 'A')
})

test('a subscription waiting in for await ends when another task closes it, and the child exits', async () => {
  const dir = path.join(tempDir(), 'store')
  const r = await runChild(
    `${prelude}
    const store = await Store.open(dir, { durability: 'buffered' });
    const sub = store.subscribe(Query.all());
    setTimeout(() => sub.close(), 100);
    let n = 0;
    for await (const e of sub) n++;
    console.log('ended', n);
    await store.close();`,
    [dir],
  )
  assert.equal(r.signal, null, `killed after ${r.ms} ms; ${r.err}`)
  assert.equal(r.code, 0, r.err)
  assert.equal(r.out.trim(), 'ended 0')
})

test('a consumer waiting in for await keeps the process alive, as a socket would', async () => {
  const dir = path.join(tempDir(), 'store')
  const r = await runChild(
    `${prelude}
    const store = await Store.open(dir, { durability: 'buffered' });
    console.log('waiting');
    for await (const e of store.subscribe(Query.all())) console.log(e.position);`,
    [dir],
    1500,
  )
  assert.equal(r.signal, 'SIGKILL', `exited by itself (code ${r.code}) while a subscriber waited; ${r.err}`)
  assert.equal(r.out.trim(), 'waiting')
})
