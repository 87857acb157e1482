// Demo step 2: Node.js reads the store the Python step wrote (course c1, students s1..s3) and
// tells student s1's history, read with a bounded query, in plain sentences.
//
//   node examples/demo/2_node_reads.mjs STORE_DIR

import { Store, Query } from '../../node/lapilli.js'

const dir = process.argv[2]
if (dir === undefined) {
  console.error('usage: node examples/demo/2_node_reads.mjs STORE_DIR')
  process.exit(2)
}

function sentence(event) {
  let data
  try {
    data = JSON.parse(event.data.toString('utf8'))
  } catch {
    data = undefined
  }
  const when = new Date(event.recordedAt / 1000).toISOString()
  const details = data === undefined ? `${event.data.length} bytes of data` : `data ${JSON.stringify(data)}`
  const what =
    {
      CourseDefined: 'a course was defined',
      StudentRegistered: 'the student registered',
      StudentSubscribedToCourse: 'the student subscribed to a course',
    }[event.type] ?? `an event of type ${event.type} happened`
  return `At position ${event.position} (${when}), ${what}; its tags are ${event.tags.join(', ')}, ${details}.`
}

const store = await Store.open(dir)
try {
  const head = store.head()
  console.log(`Node.js opened the store in ${dir}; its head is at position ${head}.`)
  // The bound: everything up to the head as it is now, and at most 10 events.
  const until = head
  const limit = 10
  const read = store.read(Query.forTags('student:s1'), { until, limit })
  console.log(
    `Reading student s1's history with Query.forTags('student:s1'), bounded by until = ${until} ` +
      `(nothing after position ${until}) and limit = ${limit} (at most ${limit} events); the read pinned head ${read.head}.`,
  )
  let count = 0
  for await (const event of read) {
    count++
    console.log(sentence(event))
  }
  if (count === 0) console.log('Student s1 has no events up to that position.')
  else console.log(`That is ${count} event${count === 1 ? '' : 's'} in student s1's history${count === limit ? ' (the limit was reached)' : ''}.`)
  // The most recent event about s1 alone: a backwards read with limit 1.
  const { events } = await store.readAll(Query.forTags('student:s1'), { backwards: true, limit: 1 })
  if (events.length > 0) console.log(`The latest event about student s1 is a ${events[0].type} at position ${events[0].position}.`)
} finally {
  await store.close()
}
console.log('Node.js closed the store.')
