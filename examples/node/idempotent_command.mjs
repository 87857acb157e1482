// An idempotent command handler: each command carries an id, and its event is appended with
// `failIfExists` on that id's tag, so a retried or duplicated command changes nothing.
//
//   node examples/node/idempotent_command.mjs [STORE_DIR]

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Store, Query, AlreadyExistsError, ConflictError } from '../../node/lapilli.js'

/** Handles `{ commandId, studentId, name }` once, whatever the number of deliveries. */
export async function registerStudent(store, command) {
  const key = Query.forTags(`command:${command.commandId}`)
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      const { first } = await store.append(
        [
          {
            type: 'StudentRegistered',
            tags: [`student:${command.studentId}`, `command:${command.commandId}`],
            data: Buffer.from(JSON.stringify({ studentId: command.studentId, name: command.name })),
          },
        ],
        // The existence clause makes a redelivery fail with AlreadyExists. The boundary clause
        // (nothing with this key after the head we saw) turns a duplicate committed in the same
        // instant into a Conflict, which the retry then sees as AlreadyExists.
        { failIfEventsMatch: key, after: store.head(), failIfExists: key },
      )
      return `handled at position ${first}`
    } catch (err) {
      if (err instanceof AlreadyExistsError) return `already handled (event ${err.position})`
      if (!(err instanceof ConflictError)) throw err
    }
  }
  throw new Error(`command ${command.commandId} kept conflicting`)
}

async function main() {
  // Without a directory, a temporary one, removed at the end (segments are preallocated).
  const temporary = process.argv[2] === undefined
  const dir = process.argv[2] ?? fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-idempotent-'))
  const store = await Store.open(dir)
  try {
    const command = { commandId: 'cmd-42', studentId: 's7', name: 'Ada' }
    console.log(`first delivery: ${await registerStudent(store, command)}`)
    console.log(`redelivery: ${await registerStudent(store, command)}`)
    // A new command delivered three times at once: one is handled, the others are not.
    const again = { commandId: 'cmd-43', studentId: 's8', name: 'Grace' }
    const racing = await Promise.all([1, 2, 3].map(() => registerStudent(store, again)))
    for (const outcome of racing) console.log(`concurrent delivery: ${outcome}`)
    for (const student of ['s7', 's8']) {
      const { events } = await store.readAll(Query.forTags(`student:${student}`))
      console.log(`events for student ${student}: ${events.length}`)
    }
  } finally {
    await store.close()
    if (temporary) fs.rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
