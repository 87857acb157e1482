// AbortSignal on read, readAll, subscribe and nextBatch: an abort rejects with an AbortError
// (a DOMException named 'AbortError' whose cause is the signal's reason, as Node's own APIs
// do) and lets the native side go; and errors carry the error they wrap as `cause`.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { getEventListeners } from 'node:events'
import { Store, Query, ConflictError, StoreClosedError } from '../lapilli.js'

async function withStore(body) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-abort-'))
  const store = await Store.open(path.join(dir, 'store'), { durability: 'buffered' })
  try {
    return await body(store)
  } finally {
    await store.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** Asserts `err` is the AbortError of a signal aborted with `reason`. */
function isAbortError(err, reason) {
  assert.ok(err instanceof DOMException, `not a DOMException: ${err}`)
  assert.equal(err.name, 'AbortError')
  assert.equal(err.code, 20) // DOMException.ABORT_ERR
  if (reason !== undefined) assert.equal(err.cause, reason)
  return true
}

/** Waits (polling, up to 5 s) until `check()` is true: for native work that ends on its own. */
async function eventually(check, what) {
  for (let i = 0; i < 500 && !check(); i++) await sleep(10)
  assert.ok(check(), what)
}

async function fill(store, n) {
  const data = Buffer.alloc(64, 7)
  for (let i = 0; i < n; i += 5000) {
    await store.append(Array.from({ length: Math.min(5000, n - i) }, () => ({ type: 'E', tags: ['t'], data })))
  }
}

test('aborting a read between batches rejects the next step with AbortError and releases the snapshot', async () => {
  await withStore(async (store) => {
    await fill(store, 20000)
    const controller = new AbortController()
    const read = store.read(Query.all(), { signal: controller.signal })
    const seen = []
    const reason = new Error('the request was cancelled')
    await assert.rejects(async () => {
      for await (const event of read) {
        seen.push(event.position)
        if (seen.length === 1000) controller.abort(reason)
      }
    }, (err) => isAbortError(err, reason))
    // Events of the batch already decoded may still be handed out; none after it.
    assert.ok(seen.length >= 1000 && seen.length < 20000, `${seen.length} events before the abort took effect`)
    assert.deepEqual(seen.slice(0, 3), [1, 2, 3])
    await eventually(() => read.closed, 'the native read kept its snapshot after the abort')
  })
})

test('aborting while a read batch is in flight rejects at once; the batch is dropped when it ends', async () => {
  await withStore(async (store) => {
    await fill(store, 20000)
    const controller = new AbortController()
    const read = store.read(Query.all(), { signal: controller.signal })
    const batches = read.batches()
    const first = batches.next() // in flight on the native side
    controller.abort()
    await assert.rejects(first, (err) => isAbortError(err, controller.signal.reason))
    await assert.rejects(batches.next(), (err) => isAbortError(err))
    await eventually(() => read.closed, 'the native read kept its snapshot after the abort')
    // The store is unaffected.
    assert.equal((await store.readAll(Query.all(), { limit: 3 })).events.length, 3)
  })
})

test('readAll with a signal: aborted before or during, it rejects with AbortError', async () => {
  await withStore(async (store) => {
    await fill(store, 20000)
    const already = AbortSignal.abort('gone')
    assert.throws(() => store.read(Query.all(), { signal: already }), (err) => isAbortError(err, 'gone'))
    await assert.rejects(store.readAll(Query.all(), { signal: already }), (err) => isAbortError(err, 'gone'))
    const controller = new AbortController()
    const all = store.readAll(Query.all(), { signal: controller.signal })
    controller.abort()
    await assert.rejects(all, (err) => isAbortError(err))
    // A signal that never aborts changes nothing, and its listener is removed at the end.
    const quiet = new AbortController()
    const { events } = await store.readAll(Query.all(), { signal: quiet.signal })
    assert.equal(events.length, 20000)
    assert.equal(getEventListeners(quiet.signal, 'abort').length, 0)
    const sub = store.subscribe(Query.all(), { signal: quiet.signal })
    assert.equal(getEventListeners(quiet.signal, 'abort').length, 1)
    sub.close()
    assert.equal(getEventListeners(quiet.signal, 'abort').length, 0)
  })
})

test('a closed read ends its iteration and releases the snapshot', async () => {
  await withStore(async (store) => {
    await fill(store, 10)
    const read = store.read(Query.all())
    assert.equal(read.closed, false)
    read.close()
    assert.equal(read.closed, true)
    const seen = []
    for await (const e of read) seen.push(e)
    assert.deepEqual(seen, [])
    const toTheEnd = store.read(Query.all())
    let n = 0
    for await (const _ of toTheEnd) n++
    assert.equal(n, 10)
    assert.equal(toTheEnd.closed, true, 'a read iterated to its end keeps its snapshot')
  })
})

test('aborting a subscription wakes a waiting for await with AbortError and closes the native side', async () => {
  await withStore(async (store) => {
    await store.append([{ type: 'A' }])
    const controller = new AbortController()
    const sub = store.subscribe(Query.all(), { signal: controller.signal })
    const seen = []
    const consuming = (async () => {
      for await (const e of sub) seen.push(e.type)
    })()
    await eventually(() => seen.length === 1, 'the history event did not arrive')
    const reason = new Error('shutting down')
    controller.abort(reason)
    await assert.rejects(consuming, (err) => isAbortError(err, reason))
    assert.equal(sub.closed, true)
    await assert.rejects(sub.nextBatch(10, 0), (err) => isAbortError(err, reason))
    assert.throws(() => store.subscribe(Query.all(), { signal: controller.signal }), (err) => isAbortError(err, reason))
  })
})

test('aborting one nextBatch rejects that call only; the subscription goes on and loses nothing', async () => {
  await withStore(async (store) => {
    const sub = store.subscribe(Query.all())
    const controller = new AbortController()
    const waiting = sub.nextBatch(10, undefined, { signal: controller.signal })
    await sleep(20)
    controller.abort()
    await assert.rejects(waiting, (err) => isAbortError(err))
    assert.equal(sub.closed, false)
    await store.append([{ type: 'A' }, { type: 'B' }])
    const events = await sub.nextBatch(10, 5000)
    assert.deepEqual(events.map((e) => e.type), ['A', 'B'])
    assert.equal(sub.position, 2)
    await assert.rejects(sub.nextBatch(10, 0, { signal: AbortSignal.abort() }), (err) => isAbortError(err))
    assert.deepEqual(await sub.nextBatch(10, 0), [])
    sub.close()
    assert.equal(await sub.nextBatch(10, 0), null)
  })
})

test('a signal that is not an AbortSignal is a TypeError naming it', async () => {
  await withStore(async (store) => {
    assert.throws(() => store.read(Query.all(), { signal: 'stop' }), { name: 'TypeError', message: /opts\.signal must be an AbortSignal, got string "stop"/ })
    assert.throws(() => store.subscribe(Query.all(), { signal: {} }), { name: 'TypeError', message: /opts\.signal must be an AbortSignal/ })
    const sub = store.subscribe(Query.all())
    await assert.rejects(sub.nextBatch(1, 0, { signal: 1 }), { name: 'TypeError', message: /options\.signal must be an AbortSignal, got number 1/ })
    sub.close()
  })
})

test('errors carry the error they wrap as cause', async () => {
  await withStore(async (store) => {
    await store.append([{ type: 'A', tags: ['k'] }])
    const err = await store.append([{ type: 'B' }], { failIfEventsMatch: Query.forTags('k') }).catch((e) => e)
    assert.ok(err instanceof ConflictError)
    assert.equal(err.position, 1)
    assert.ok(err.cause instanceof Error, 'no cause')
    assert.match(err.cause.message, /^\[CONFLICT@1\] /)
    assert.ok(err.cause.message.endsWith(err.message))
    await store.close()
    const closed = (() => {
      try {
        store.head()
      } catch (e) {
        return e
      }
    })()
    assert.ok(closed instanceof StoreClosedError)
    assert.ok(closed.cause instanceof Error && /^\[CLOSED\] /.test(closed.cause.message), String(closed.cause))
    const refused = await store.append([{ type: 'C' }]).catch((e) => e)
    assert.ok(refused instanceof StoreClosedError, String(refused))
    assert.ok(refused.cause instanceof Error)
  })
})
