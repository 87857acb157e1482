// The behaviours of the Node.js face: the contract of API.md as Node users meet it (Promises,
// async iterables, TypeErrors, error classes), bad input leaving the store unchanged, group
// commit of many concurrent Promises, and two stores at once.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import {
  Store,
  Query,
  LapilliError,
  ConflictError,
  AlreadyExistsError,
  InvalidArgumentError,
  StoreLockedError,
  StoreClosedError,
  ReadOnlyError,
} from '../lapilli.js'

function tempDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-node-'))
}

async function withStore(options, body) {
  const dir = tempDir()
  const store = await Store.open(path.join(dir, 'store'), options)
  try {
    return await body(store, path.join(dir, 'store'))
  } finally {
    await store.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const buffered = { durability: 'buffered' }
const ev = (type, tags = [], data = Buffer.alloc(0)) => ({ type, tags, data })

test('open creates the directory; head is 0; append returns first and last', async () => {
  await withStore(undefined, async (store, dir) => {
    assert.ok(fs.statSync(dir).isDirectory())
    assert.equal(store.head(), 0)
    const r = await store.append([ev('A', ['x']), ev('B')])
    assert.deepEqual(r, { first: 1, last: 2 })
    assert.deepEqual(await store.append([{ type: 'C' }]), { first: 3, last: 3 })
    assert.equal(store.head(), 3)
  })
})

test('events read back as plain objects with position, recordedAt (epoch µs) and sorted tags', async () => {
  await withStore(buffered, async (store) => {
    const before = Date.now() * 1000
    await store.append([ev('Registered', ['b', 'a:1', 'c'], Buffer.from([0xff, 0, 1])), { type: 'NoData' }])
    const after = Date.now() * 1000
    const { events, head } = await store.readAll(Query.all())
    assert.equal(head, 2)
    assert.equal(events.length, 2)
    const [e1, e2] = events
    assert.deepEqual(Object.keys(e1).sort(), ['data', 'position', 'recordedAt', 'tags', 'type'])
    assert.equal(e1.position, 1)
    assert.equal(e1.type, 'Registered')
    assert.deepEqual(e1.tags, ['a:1', 'b', 'c'])
    assert.ok(Buffer.isBuffer(e1.data))
    assert.deepEqual([...e1.data], [0xff, 0, 1])
    assert.equal(e2.data.length, 0)
    assert.deepEqual(e2.tags, [])
    assert.ok(Number.isSafeInteger(e1.recordedAt))
    assert.ok(e1.recordedAt >= before - 1000 && e1.recordedAt <= after + 1000, 'recordedAt is microseconds since the epoch')
    assert.equal(e1.recordedAt, e2.recordedAt, 'one batch, one commit time')
  })
})

test('Query.all/of/forTags/forTypes select as API.md says', async () => {
  await withStore(buffered, async (store) => {
    await store.append([
      ev('CourseDefined', ['course:c1']),
      ev('StudentRegistered', ['student:s1']),
      ev('StudentSubscribed', ['course:c1', 'student:s1']),
      ev('StudentSubscribed', ['course:c2', 'student:s1']),
    ])
    const positions = async (q) => (await store.readAll(q)).events.map((e) => e.position)
    assert.deepEqual(await positions(Query.all()), [1, 2, 3, 4])
    assert.deepEqual(await positions(Query.forTags('course:c1')), [1, 3])
    assert.deepEqual(await positions(Query.forTags('course:c1', 'student:s1')), [3])
    assert.deepEqual(await positions(Query.forTypes('CourseDefined', 'StudentRegistered')), [1, 2])
    assert.deepEqual(await positions(Query.of({ types: ['StudentSubscribed'], tags: ['course:c2'] }, { tags: ['course:c1'] })), [1, 3, 4])
    assert.deepEqual(await positions(Query.of([{ types: ['CourseDefined'] }])), [1])
    assert.ok(Object.isFrozen(Query.forTags('a')) && Object.isFrozen(Query.forTags('a').items[0].tags))
  })
})

test('read windows: after, until (clamped), limit, backwards, and the pinned head', async () => {
  await withStore(buffered, async (store) => {
    await store.append(Array.from({ length: 10 }, (_, i) => ev('E', [`n:${i + 1}`])))
    const positions = async (opts) => (await store.readAll(Query.all(), opts)).events.map((e) => e.position)
    assert.deepEqual(await positions({ after: 7 }), [8, 9, 10])
    assert.deepEqual(await positions({ after: 2, until: 4 }), [3, 4])
    assert.deepEqual(await positions({ until: 99, after: 8 }), [9, 10])
    assert.deepEqual(await positions({ limit: 3 }), [1, 2, 3])
    assert.deepEqual(await positions({ limit: 0 }), [])
    assert.deepEqual(await positions({ backwards: true, limit: 2 }), [10, 9])
    assert.deepEqual(await positions({ backwards: true, after: 5, until: 7 }), [7, 6])
    // A read is a snapshot: an append after it starts is not seen, and head stays pinned.
    const read = store.read(Query.all())
    assert.equal(read.head, 10)
    await store.append([ev('Late')])
    const seen = []
    for await (const e of read) seen.push(e.position)
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert.equal((await store.readAll(Query.all())).head, 11)
    // A read is consumed once.
    await assert.rejects(async () => {
      for await (const _ of read) void _
    }, TypeError)
  })
})

test('a large read crosses in batches and keeps order', async () => {
  await withStore(buffered, async (store) => {
    const data = Buffer.alloc(100, 1)
    for (let i = 0; i < 5; i++) await store.append(Array.from({ length: 4000 }, (_, j) => ev('E', [`k:${j % 7}`], data)))
    let expected = 0
    let batches = 0
    for await (const batch of store.read(Query.all()).batches()) {
      batches++
      for (const e of batch) assert.equal(e.position, ++expected)
    }
    assert.equal(expected, 20000)
    assert.ok(batches > 1 && batches < 20000, `crossed in ${batches} batches`)
    const k3 = await store.readAll(Query.forTags('k:3'), { backwards: true })
    assert.equal(k3.events.length, 5 * Math.ceil((4000 - 3) / 7))
    assert.ok(k3.events.every((e, i) => i === 0 || e.position < k3.events[i - 1].position))
  })
})

test('conditions: Conflict and AlreadyExists carry code and position; nothing is written', async () => {
  await withStore(buffered, async (store) => {
    const course = Query.forTags('course:c1')
    const read = store.read(course)
    await store.append([ev('CourseDefined', ['course:c1'])], { failIfEventsMatch: course, after: read.head })
    await store.append([ev('Other', ['x'])])
    // Decided at head 0, but position 1 matches: conflict at 1.
    const conflict = await store.append([ev('CourseRenamed', ['course:c1'])], { failIfEventsMatch: course, after: 0 }).catch((e) => e)
    assert.ok(conflict instanceof ConflictError)
    assert.ok(conflict instanceof LapilliError)
    assert.ok(conflict instanceof Error)
    assert.equal(conflict.code, 'CONFLICT')
    assert.equal(conflict.position, 1)
    assert.equal(conflict.name, 'ConflictError')
    // A boundary after the match passes.
    assert.deepEqual(await store.append([ev('CourseRenamed', ['course:c1'])], { failIfEventsMatch: course, after: 2 }), { first: 3, last: 3 })
    // Existence clause, whatever `after` is.
    const key = Query.forTags('idempotency:abc')
    assert.deepEqual(await store.append([ev('Done', ['idempotency:abc'])], { failIfEventsMatch: key, after: 3, failIfExists: key }), { first: 4, last: 4 })
    const exists = await store.append([ev('Done', ['idempotency:abc'])], { failIfEventsMatch: Query.forTags('nothing'), after: 4, failIfExists: key }).catch((e) => e)
    assert.ok(exists instanceof AlreadyExistsError)
    assert.equal(exists.code, 'ALREADY_EXISTS')
    assert.equal(exists.position, 4)
    assert.equal(store.head(), 4)
  })
})

test('open_again fails with StoreLockedError; a read-only handle reads and refuses appends with ReadOnlyError', async () => {
  await withStore(buffered, async (store, dir) => {
    await store.append([ev('E')])
    const locked = await Store.open(dir).catch((e) => e)
    assert.ok(locked instanceof StoreLockedError)
    assert.equal(locked.code, 'STORE_LOCKED')
    assert.match(locked.message, new RegExp(String(process.pid)))
    const readOnly = await Store.openReadOnly(dir)
    try {
      assert.deepEqual((await readOnly.readAll(Query.all())).events.map((e) => e.type), ['E'])
      const refused = await readOnly.append([ev('E')]).catch((e) => e)
      assert.ok(refused instanceof ReadOnlyError, String(refused))
      assert.equal(refused.code, 'READ_ONLY')
      assert.equal(readOnly.head(), 1)
    } finally {
      await readOnly.close()
    }
    const missing = await Store.openReadOnly(path.join(dir, 'not-there')).catch((e) => e)
    assert.equal(missing.code, 'IO', String(missing))
    assert.equal(store.head(), 1)
  })
})

test('after close: head throws, append/read/subscribe fail with CLOSED; close twice is fine; reopen keeps everything', async () => {
  const dir = path.join(tempDir(), 'store')
  const store = await Store.open(dir)
  await store.append([ev('E', ['t'], Buffer.from('x'))])
  const sub = store.subscribe(Query.all())
  await store.close()
  await store.close()
  assert.throws(() => store.head(), StoreClosedError)
  await assert.rejects(store.append([ev('E')]), (e) => e instanceof StoreClosedError && e.code === 'CLOSED')
  assert.throws(() => store.read(Query.all()), StoreClosedError)
  await assert.rejects(store.readAll(Query.all()), StoreClosedError)
  assert.throws(() => store.subscribe(Query.all()), StoreClosedError)
  assert.equal(await sub.nextBatch(10, 1000), null, 'closing the store ends its subscriptions')
  const again = await Store.open(dir)
  const { events } = await again.readAll(Query.all())
  assert.deepEqual(events.map((e) => [e.position, e.type, e.tags, e.data.toString()]), [[1, 'E', ['t'], 'x']])
  await again.close()
  fs.rmSync(path.dirname(dir), { recursive: true, force: true })
})

test('bad input: TypeError naming the argument, or InvalidArgumentError; the store is unchanged', async () => {
  await withStore(buffered, async (store, dir) => {
    await store.append([ev('Seed', ['s'], Buffer.from('seed'))])
    const snapshot = async () => JSON.stringify(await store.readAll(Query.all()))
    const before = await snapshot()
    const typeErrors = [
      [() => store.append('nope'), /events must be an array/],
      [() => store.append([null]), /events\[0\] must be an object/],
      [() => store.append([{ tags: [] }]), /events\[0\]\.type must be a string/],
      [() => store.append([ev('A'), { type: 'B', tags: 'x' }]), /events\[1\]\.tags must be an array/],
      [() => store.append([{ type: 'A', tags: ['ok', 3] }]), /events\[0\]\.tags\[1\] must be a string/],
      [() => store.append([{ type: 'A', data: 'text' }]), /events\[0\]\.data must be a Buffer or Uint8Array/],
      [() => store.append([ev('A')], 'cond'), /condition must be an object/],
      [() => store.append([ev('A')], { failIfEventsMatch: { tags: ['x'] } }), /condition\.failIfEventsMatch must be a Query/],
      [() => store.append([ev('A')], { failIfEventsMatch: Query.all(), after: '1' }), /condition\.after must be a number/],
      [() => store.append([ev('A')], { failIfEventsMatch: Query.all(), failIfExists: 'x' }), /condition\.failIfExists must be a Query/],
      [() => store.readAll('all'), /query must be a Query/],
      [() => store.readAll(Query.all(), { after: '2' }), /opts\.after must be a number/],
      [() => store.readAll(Query.all(), { backwards: 1 }), /opts\.backwards must be a boolean/],
      [() => Store.open(42), /path must be a string/],
      [() => Store.open(dir, { durability: 1 }), /options\.durability/],
      [() => Store.open(dir, { segmentSize: '1' }), /options\.segmentSize must be a number/],
    ]
    for (const [call, message] of typeErrors) {
      await assert.rejects(call, (e) => e instanceof TypeError && message.test(e.message), String(message))
    }
    assert.throws(() => store.read(Query.all(), { limit: null }), /opts\.limit must be a number/)
    assert.throws(() => store.subscribe(Query.all(), { after: 'x' }), /opts\.after must be a number/)
    assert.throws(() => Query.forTags('a', 1), /tags\[1\] must be a string/)
    assert.throws(() => Query.of({ types: 'A' }), /items\[0\]\.types must be an array/)
    assert.throws(() => Query.of(7), /items\[0\] must be an object/)

    const invalid = [
      () => store.append([]),
      () => store.append([ev('')]),
      () => store.append([ev('x'.repeat(256))]),
      () => store.append([ev('A', ['dup', 'dup'])]),
      () => store.append([ev('A', [''])]),
      () => store.append([ev('A', ['t'.repeat(1025)])]),
      () => store.append([ev('A', Array.from({ length: 256 }, (_, i) => `t${i}`))]),
      () => store.append([ev('A'), ev('')]),
      () => store.append([ev('A')], { failIfEventsMatch: Query.all(), after: 5 }),
      () => store.append([ev('A')], { failIfEventsMatch: Query.all(), after: -1 }),
      () => store.append([ev('A')], { failIfEventsMatch: Query.of() }),
      () => store.append([ev('A')], { failIfEventsMatch: Query.of({}) }),
      () => store.append([ev('A')], { failIfEventsMatch: Query.all(), failIfExists: Query.forTags('') }),
      () => store.readAll(Query.of()),
      () => store.readAll(Query.all(), { after: 2 }),
      () => store.readAll(Query.all(), { after: 1, until: 0 }),
      () => store.readAll(Query.all(), { after: 1.5 }),
      () => store.readAll(Query.all(), { after: 2 ** 53 }),
      () => store.readAll(Query.all(), { limit: -1 }),
      () => store.readAll(Query.forTypes('')),
      () => Store.open(dir + '-other', { durability: 'sometimes' }),
      () => Store.open(dir + '-other', { segmentSize: 10 }),
    ]
    for (const [i, call] of invalid.entries()) {
      await assert.rejects(
        async () => call(),
        (e) => e instanceof InvalidArgumentError && e.code === 'INVALID_ARGUMENT' && e.message.length > 0,
        `bad input ${i}`,
      )
    }
    assert.throws(() => store.subscribe(Query.all(), { after: 9 }), InvalidArgumentError)
    assert.throws(() => store.subscribe(Query.of()), InvalidArgumentError)
    await assert.rejects(store.subscribe(Query.all()).nextBatch(0), InvalidArgumentError)
    await assert.rejects(store.subscribe(Query.all()).nextBatch(10, -1), InvalidArgumentError)
    await assert.rejects(store.subscribe(Query.all()).nextBatch(10, NaN), InvalidArgumentError)
    await assert.rejects(store.subscribe(Query.all()).nextBatch('10'), /max must be a number/)
    await assert.rejects(() => store.append([{ type: () => 1 }]), /type must be a string, got a function$/)
    assert.match((await store.append([ev('A', ['t'.repeat(2000)])]).catch((e) => e)).message, /2000 bytes; the limit is 1024/)
    assert.equal(store.head(), 1)
    assert.equal(await snapshot(), before)
    assert.ok(!fs.existsSync(dir + '-other'), 'bad options create nothing')
  })
})

test('a thousand concurrent conditional appends: one group of Promises, dense positions, right conflicts', async () => {
  await withStore(undefined, async (store) => {
    // Appends i and i + 500 guard the same key: of each pair exactly one commits.
    const promises = []
    for (let i = 0; i < 1000; i++) {
      const key = `key:${i % 500}`
      promises.push(store.append([ev('Claimed', [key], Buffer.from(String(i)))], { failIfEventsMatch: Query.forTags(key), after: 0 }))
    }
    const results = await Promise.allSettled(promises)
    const ok = results.filter((r) => r.status === 'fulfilled').map((r) => r.value)
    const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason)
    assert.equal(ok.length, 500)
    assert.equal(failed.length, 500)
    assert.ok(failed.every((e) => e instanceof ConflictError))
    assert.deepEqual(ok.map((r) => r.first).sort((a, b) => a - b), Array.from({ length: 500 }, (_, i) => i + 1), 'dense positions')
    assert.ok(ok.every((r) => r.first === r.last))
    // Appends were queued in call order, so the first of each pair won.
    for (let i = 0; i < 500; i++) assert.equal(results[i].status, 'fulfilled', `append ${i}`)
    const { events } = await store.readAll(Query.all())
    assert.equal(events.length, 500)
    for (let i = 500; i < 1000; i++) {
      const conflict = results[i].reason
      const winner = events[conflict.position - 1]
      assert.deepEqual(winner.tags, [`key:${i % 500}`], 'the error names the conflicting event')
      assert.equal(winner.data.toString(), String(i - 500))
    }
    // One fsync per group commit: far fewer distinct commit times than appends.
    const commits = new Set(events.map((e) => e.recordedAt)).size
    assert.ok(commits < 250, `${commits} group commits for 1000 appends`)
  })
})

test('subscriptions: history then live, caughtUp and position, nextBatch timeouts, close', async () => {
  await withStore(buffered, async (store) => {
    await store.append([ev('A', ['s']), ev('B'), ev('A', ['s'])])
    const sub = store.subscribe(Query.forTags('s'), { after: 1 })
    assert.equal(sub.position, 1)
    assert.equal(sub.caughtUp, false)
    assert.deepEqual((await sub.nextBatch(10, 0)).map((e) => e.position), [3])
    assert.equal(sub.caughtUp, true)
    assert.equal(sub.position, 3)
    const t0 = Date.now()
    assert.deepEqual(await sub.nextBatch(10, 120), [])
    assert.ok(Date.now() - t0 >= 100, 'waited for the timeout')
    // Live: a waiting consumer wakes on commit.
    const waiting = sub.nextBatch(10)
    setTimeout(() => store.append([ev('C', ['s']), ev('D')]), 50)
    assert.deepEqual((await waiting).map((e) => e.position), [4])
    // Close wakes a waiting consumer with the end.
    const ended = sub.nextBatch(10)
    setTimeout(() => sub.close(), 50)
    assert.equal(await ended, null)
    assert.equal(sub.closed, true)
    assert.equal(await sub.nextBatch(10, 0), null)
  })
})

test('for await over a subscription: catch-up and live without gap or duplicate; break closes it', async () => {
  await withStore(buffered, async (store) => {
    for (let i = 0; i < 3; i++) await store.append(Array.from({ length: 1000 }, () => ev('E')))
    const sub = store.subscribe(Query.all())
    let writer = Promise.resolve()
    const seen = []
    for await (const e of sub) {
      seen.push(e.position)
      if (e.position === 1500) {
        writer = (async () => {
          for (let i = 0; i < 20; i++) await store.append([ev('Live'), ev('Live')])
        })()
      }
      if (e.position === 3030) break
    }
    await writer
    assert.deepEqual(seen, Array.from({ length: 3030 }, (_, i) => i + 1))
    assert.equal(sub.closed, true, 'break closed the subscription')
    assert.equal(sub.position, 3030)
    assert.equal(await sub.nextBatch(5, 0), null)
    // Resume from the position.
    const resumed = store.subscribe(Query.all(), { after: sub.position })
    assert.deepEqual((await resumed.nextBatch(100, 0)).map((e) => e.position), Array.from({ length: 10 }, (_, i) => 3031 + i))
    resumed.close()
  })
})

test('two stores open at once stay independent', async () => {
  await withStore(buffered, async (a) => {
    await withStore(buffered, async (b) => {
      await Promise.all([a.append([ev('InA')]), b.append([ev('InB1'), ev('InB2')])])
      const subA = a.subscribe(Query.all())
      await b.append([ev('InB3')])
      assert.equal(a.head(), 1)
      assert.equal(b.head(), 3)
      assert.deepEqual((await a.readAll(Query.all())).events.map((e) => e.type), ['InA'])
      assert.deepEqual((await b.readAll(Query.all())).events.map((e) => e.type), ['InB1', 'InB2', 'InB3'])
      assert.deepEqual((await subA.nextBatch(10, 0)).map((e) => e.type), ['InA'])
      assert.deepEqual(await subA.nextBatch(10, 0), [])
      subA.close()
    })
  })
})

test('segments: small segments roll over; an append larger than a segment is refused', async () => {
  await withStore({ durability: 'buffered', segmentSize: 8192 }, async (store, dir) => {
    for (let i = 0; i < 20; i++) await store.append([ev('E', [`i:${i}`], Buffer.alloc(1000, i))])
    assert.ok(fs.readdirSync(dir).length > 3)
    const { events } = await store.readAll(Query.all())
    assert.deepEqual(events.map((e) => e.data[0]), Array.from({ length: 20 }, (_, i) => i))
    await assert.rejects(store.append([ev('Big', [], Buffer.alloc(9000))]), InvalidArgumentError)
  })
})
