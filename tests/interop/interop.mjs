// The Node.js side of the cross-runtime interop check (tests/interop/run.sh):
// `interop.mjs write DIR EVENTS_JSON` appends the batches of the events file to a new store;
// `interop.mjs read DIR` prints every event as one JSON line (position, type, sorted tags, data
// as hex).

import fs from 'node:fs'
import { Store, Query } from '../../node/lapilli.js'

const [command, dir, eventsFile] = process.argv.slice(2)
if (command === 'write') {
  const spec = JSON.parse(fs.readFileSync(eventsFile, 'utf8'))
  const store = await Store.open(dir, { durability: 'fsync', segmentSize: spec.segment_size })
  for (const batch of spec.batches) {
    await store.append(batch.map((e) => ({ type: e.type, tags: e.tags, data: Buffer.from(e.data_hex, 'hex') })))
  }
  await store.close()
} else if (command === 'read') {
  const store = await Store.openReadOnly(dir)
  for await (const event of store.read(Query.all())) {
    const line = { position: event.position, type: event.type, tags: event.tags, data_hex: Buffer.from(event.data).toString('hex') }
    process.stdout.write(JSON.stringify(line) + '\n')
  }
  await store.close()
} else {
  console.error('usage: interop.mjs write DIR EVENTS_JSON | interop.mjs read DIR')
  process.exit(2)
}
