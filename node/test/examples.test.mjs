// Runs every example in examples/node/ and the demo's Node step, so they cannot rot: each must
// exit 0, say what it should, and leave the store in the state it claims.

import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Store, Query } from '../lapilli.js'

const run = promisify(execFile)
const repo = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
// Segments are preallocated: every directory made here is removed once the file's tests ran.
const made = []
function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-examples-'))
  made.push(dir)
  return dir
}
after(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true })
})

async function example(script, ...args) {
  const { stdout } = await run(process.execPath, [path.join(repo, script), ...args], { cwd: repo, timeout: 30000 })
  return stdout.trim().split('\n')
}

async function readStore(dir, query = Query.all()) {
  const store = await Store.open(dir)
  try {
    return (await store.readAll(query)).events
  } finally {
    await store.close()
  }
}

test('examples/node/course_subscriptions.mjs: three of five racing students get the three seats', async () => {
  const dir = path.join(tempDir(), 'store')
  const lines = await example('examples/node/course_subscriptions.mjs', dir)
  assert.ok(lines.includes('c1 seats taken: 3 of 3'), lines.join('\n'))
  assert.equal(lines.filter((l) => / subscribed to c1 at position /.test(l)).length, 3)
  assert.equal(lines.filter((l) => /not subscribed to c1: course full/.test(l)).length, 2)
  // Which three students win the race is up to the scheduler: s1's limit of two courses is
  // reached at c3 if it won a seat in c1, else it takes c3 too.
  assert.ok(lines.includes('s1 subscribed to c2'), lines.join('\n'))
  const s1WonC1 = lines.some((l) => l.startsWith('s1 subscribed to c1 at position '))
  const c3 = s1WonC1 ? 's1 not subscribed to c3: student takes too many courses' : 's1 subscribed to c3'
  assert.ok(lines.includes(c3), lines.join('\n'))
  const subscriptions = await readStore(dir, Query.forTypes('StudentSubscribedToCourse'))
  const c1 = subscriptions.filter((e) => e.tags.includes('course:c1'))
  assert.equal(c1.length, 3)
  assert.equal(new Set(c1.map((e) => e.tags.find((t) => t.startsWith('student:')))).size, 3)
  assert.equal(subscriptions.filter((e) => e.tags.includes('student:s1')).length, 2)
})

test('examples/node/idempotent_command.mjs: every command is handled once', async () => {
  const dir = path.join(tempDir(), 'store')
  const lines = await example('examples/node/idempotent_command.mjs', dir)
  assert.deepEqual(lines, [
    'first delivery: handled at position 1',
    'redelivery: already handled (event 1)',
    'concurrent delivery: handled at position 2',
    'concurrent delivery: already handled (event 2)',
    'concurrent delivery: already handled (event 2)',
    'events for student s7: 1',
    'events for student s8: 1',
  ])
  assert.equal((await readStore(dir)).length, 2)
})

test('examples/node/projection.mjs: the projection follows live and resumes from its saved position', async () => {
  const dir = tempDir()
  const lines = await example('examples/node/projection.mjs', dir)
  assert.deepEqual(lines, [
    'first run: applied 4, position 5, seats {"c1":2,"c2":2}',
    'restart resumes after position 5',
    'second run: applied 1, position 6, seats {"c1":3,"c2":2}',
  ])
  assert.deepEqual(JSON.parse(fs.readFileSync(path.join(dir, 'seats-projection.json'), 'utf8')), {
    position: 6,
    seats: { c1: 3, c2: 2 },
  })
})

test("examples/demo/2_node_reads.mjs tells student s1's history from a bounded read", async () => {
  const dir = path.join(tempDir(), 'store')
  // The store as the Python demo step writes it.
  const store = await Store.open(dir)
  const json = (v) => Buffer.from(JSON.stringify(v))
  await store.append([{ type: 'CourseDefined', tags: ['course:c1'], data: json({ course_id: 'c1', capacity: 2 }) }])
  for (const s of ['s1', 's2', 's3']) await store.append([{ type: 'StudentRegistered', tags: [`student:${s}`], data: json({ student_id: s }) }])
  for (const s of ['s1', 's2']) {
    await store.append([{ type: 'StudentSubscribedToCourse', tags: ['course:c1', `student:${s}`], data: json({ course_id: 'c1', student_id: s }) }])
  }
  await store.close()
  const lines = await example('examples/demo/2_node_reads.mjs', dir)
  assert.match(lines[0], /head is at position 6/)
  assert.match(lines[1], /until = 6 .*limit = 10/)
  assert.match(lines[2], /^At position 2 .*the student registered.*student:s1/)
  assert.match(lines[3], /^At position 5 .*subscribed to a course.*"course_id":"c1"/)
  assert.equal(lines[4], "That is 2 events in student s1's history.")
  assert.equal(lines[5], 'The latest event about student s1 is a StudentSubscribedToCourse at position 5.')
  assert.equal(lines.at(-1), 'Node.js closed the store.')
})

test('the quickstart of node/README.md runs', async () => {
  const readme = fs.readFileSync(path.join(repo, 'node', 'README.md'), 'utf8')
  const code = /## Quickstart\n\n```js\n([\s\S]*?)```/.exec(readme)[1]
  const cwd = tempDir()
  const source = code.replace("from 'lapilli'", `from ${JSON.stringify(path.join(repo, 'node', 'lapilli.js'))}`)
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', source], { cwd, timeout: 30000 })
  assert.match(stdout, /^1 CourseDefined \[ 'course:c1' \] \{"capacity":30\}\nlive 1 CourseDefined\n$/)
  assert.ok(fs.existsSync(path.join(cwd, 'events')))
})
