// Warm read throughput through the async iterator, 256-byte events (the bar of issue 5: at
// least 1M events/s). Not a test: numbers depend on the machine.
//
//   node bench/read_throughput.mjs [EVENTS]

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Store, Query } from '../lapilli.js'

const total = Number(process.argv[2] ?? 1_000_000)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-bench-'))
const store = await Store.open(dir, { durability: 'buffered' })
try {
  const data = Buffer.alloc(256, 7)
  const chunk = 10_000
  let started = performance.now()
  for (let i = 0; i < total; i += chunk) {
    const n = Math.min(chunk, total - i)
    await store.append(Array.from({ length: n }, (_, j) => ({ type: 'Measured', tags: [`stream:${(i + j) % 100}`], data })))
  }
  const rate = (n, ms) => `${Math.round(n / (ms / 1000)).toLocaleString('en')} events/s`
  console.log(`append (buffered, ${chunk} per call): ${rate(total, performance.now() - started)}`)
  for (let round = 1; round <= 3; round++) {
    started = performance.now()
    let count = 0
    let bytes = 0
    for await (const event of store.read(Query.all())) {
      count++
      bytes += event.data.length
    }
    if (count !== total || bytes !== total * 256) throw new Error(`read ${count} events, ${bytes} bytes`)
    const iterated = performance.now() - started
    started = performance.now()
    count = 0
    for await (const batch of store.read(Query.all()).batches()) count += batch.length
    console.log(`round ${round}: for await ${rate(total, iterated)}; batches() ${rate(count, performance.now() - started)}`)
  }
} finally {
  await store.close()
  fs.rmSync(dir, { recursive: true, force: true })
}
