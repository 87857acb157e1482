// Reads a store written by the Rust engine (node/examples/write_fixture.rs) and compares every
// event byte for byte with the same recipe rebuilt here.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Store, Query } from '../lapilli.js'

const repo = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

function expectedEvents() {
  const events = [
    { type: 'Binary', tags: ['fixture', 'kind:binary'], data: Buffer.from([0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28]) },
    { type: 'Empty', tags: ['fixture'], data: Buffer.alloc(0) },
    {
      type: 'ManyTags',
      tags: Array.from({ length: 255 }, (_, i) => `t:${String(i).padStart(3, '0')}`),
      data: Buffer.from('many'),
    },
    { type: 'Unicode \u00fc', tags: ['fixture', '\u043a\u043b\u044e\u0447:\u20ac'], data: Buffer.from('\u00fcber \u20ac', 'utf8') },
  ]
  for (let i = 0; i < 1000; i++) {
    const data = Buffer.alloc(4 + (i % 300), i % 251)
    data.writeUInt32LE(i, 0)
    events.push({ type: 'Bulk', tags: [`bulk:${i % 10}`], data })
  }
  return events.map((e, i) => ({ position: i + 1, ...e }))
}

test('a store written by the Rust engine reads back byte for byte', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-fixture-'))
  try {
    execFileSync('cargo', ['run', '--quiet', '--release', '-p', 'lapilli-node', '--example', 'write_fixture', '--', path.join(dir, 'store')], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const store = await Store.open(path.join(dir, 'store'))
    try {
      assert.equal(store.head(), 1004)
      const { events, head } = await store.readAll(Query.all())
      assert.equal(head, 1004)
      const got = events.map((e) => ({ position: e.position, type: e.type, tags: e.tags, data: Buffer.from(e.data) }))
      assert.deepEqual(got, expectedEvents())
      const stamps = events.map((e) => e.recordedAt)
      assert.ok(stamps.every((t, i) => i === 0 || t >= stamps[i - 1]), 'recordedAt non-decreasing')
      assert.ok(Math.abs(stamps[0] / 1000 - Date.now()) < 10 * 60 * 1000, 'recordedAt is epoch microseconds')
      // Queries see the Rust-written tags and types.
      const many = await store.readAll(Query.forTags('t:000', 't:254'))
      assert.deepEqual(many.events.map((e) => e.position), [3])
      const unicode = await store.readAll(Query.forTypes('Unicode \u00fc'))
      assert.deepEqual(unicode.events.map((e) => e.position), [4])
      const bulk7 = await store.readAll(Query.of({ types: ['Bulk'], tags: ['bulk:7'] }), { backwards: true, limit: 3 })
      // Bulk event i is at position i + 5; bulk:7 holds i = 997, 987, 977 last.
      assert.deepEqual(bulk7.events.map((e) => e.position), [1002, 992, 982])
    } finally {
      await store.close()
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
