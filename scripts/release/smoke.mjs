// The release smoke test (Node.js): the same few steps as smoke.py and Smoke.kt.
// Run by scripts/release.sh in an empty npm project that installed the packed tarballs:
// open, a conditional append accepted and one refused with ConflictError, a bounded read,
// a subscription that receives, close. Usage: node smoke.mjs STORE_DIR
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { Store, Query, ConflictError } from 'lapilli'

const store = await Store.open(process.argv[2])
const course = Query.forTags('course:c1')
const { events, head } = await store.readAll(course)
assert.deepEqual(events, [])
const condition = { failIfEventsMatch: course, after: head }
await store.append([{ type: 'CourseDefined', tags: ['course:c1'], data: Buffer.from('{"capacity":2}') }], condition)
await assert.rejects(store.append([{ type: 'CourseDefined', tags: ['course:c1'] }], condition), ConflictError)
await store.append([1, 2, 3].map(() => ({ type: 'Noted', tags: ['note'] })))
const bounded = await store.readAll(Query.all(), { after: 1, limit: 2 })
assert.deepEqual(bounded.events.map((e) => e.position), [2, 3])
const sub = store.subscribe(course)
const batch = await sub.nextBatch(10, 10_000)
assert.equal(batch[0].type, 'CourseDefined')
sub.close()
await store.close()
console.log(`node smoke ok: lapilli from ${createRequire(import.meta.url).resolve('lapilli')}`)
