// A projection kept current by a subscription: seats taken per course, updated as events
// arrive, with the subscription's position saved to a file so a restart resumes where it
// stopped instead of replaying everything.
//
//   node examples/node/projection.mjs [STORE_DIR]

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Store, Query } from '../../node/lapilli.js'

/** Seats per course, with the position it reflects; saved atomically next to the store. */
export class SeatsProjection {
  constructor(file) {
    this.file = file
    const saved = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : { position: 0, seats: {} }
    this.position = saved.position
    this.seats = saved.seats
    this.applied = 0
  }

  apply(event) {
    const { courseId } = JSON.parse(event.data.toString('utf8'))
    this.seats[courseId] = (this.seats[courseId] ?? 0) + 1
    this.position = event.position
    this.applied++
  }

  save() {
    const tmp = `${this.file}.tmp`
    fs.writeFileSync(tmp, JSON.stringify({ position: this.position, seats: this.seats }))
    fs.renameSync(tmp, this.file)
  }

  /** Follows the store from the saved position until `until` is reached; saves after each batch. */
  async follow(store, until) {
    const subscription = store.subscribe(Query.forTypes('StudentSubscribedToCourse'), { after: this.position })
    try {
      while (this.position < until) {
        const batch = await subscription.nextBatch(100, 5000)
        if (batch === null || batch.length === 0) break
        for (const event of batch) this.apply(event)
        this.save()
      }
    } finally {
      subscription.close()
    }
  }
}

const subscribed = (courseId, studentId) => ({
  type: 'StudentSubscribedToCourse',
  tags: [`course:${courseId}`, `student:${studentId}`],
  data: Buffer.from(JSON.stringify({ courseId, studentId })),
})

async function main() {
  // Without a directory, a temporary one, removed at the end (segments are preallocated).
  const temporary = process.argv[2] === undefined
  const dir = process.argv[2] ?? fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-projection-'))
  const file = path.join(dir, 'seats-projection.json')
  const store = await Store.open(path.join(dir, 'store'))
  try {
    await store.append([subscribed('c1', 's1'), subscribed('c1', 's2'), subscribed('c2', 's1')])
    // The projection runs live: events appended while it waits reach it.
    const first = new SeatsProjection(file)
    const following = first.follow(store, 5)
    setTimeout(() => store.append([{ type: 'Unrelated' }, subscribed('c2', 's3')]), 100)
    await following
    console.log(`first run: applied ${first.applied}, position ${first.position}, seats ${JSON.stringify(first.seats)}`)

    await store.append([subscribed('c1', 's3')])
    // A restart resumes from the saved position: only the new event is applied.
    const second = new SeatsProjection(file)
    console.log(`restart resumes after position ${second.position}`)
    await second.follow(store, store.head())
    console.log(`second run: applied ${second.applied}, position ${second.position}, seats ${JSON.stringify(second.seats)}`)
  } finally {
    await store.close()
    if (temporary) fs.rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
