// A DCB decision model: subscribing students to courses, with the rules "a course has at most
// `capacity` students" and "a student takes at most 2 courses" enforced by one conditional
// append, retried (a bounded number of times) when another decision got in first.
//
//   node examples/node/course_subscriptions.mjs [STORE_DIR]

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Store, Query, ConflictError } from '../../node/lapilli.js'

const MAX_COURSES_PER_STUDENT = 2
const MAX_ATTEMPTS = 5

const json = (value) => Buffer.from(JSON.stringify(value))
const parse = (event) => JSON.parse(event.data.toString('utf8'))

export async function defineCourse(store, courseId, capacity) {
  const query = Query.forTags(`course:${courseId}`)
  await store.append(
    [{ type: 'CourseDefined', tags: [`course:${courseId}`], data: json({ courseId, capacity }) }],
    { failIfEventsMatch: query, failIfExists: Query.of({ types: ['CourseDefined'], tags: [`course:${courseId}`] }) },
  )
}

export async function registerStudent(store, studentId) {
  await store.append([{ type: 'StudentRegistered', tags: [`student:${studentId}`], data: json({ studentId }) }], {
    failIfEventsMatch: Query.forTags(`student:${studentId}`),
  })
}

/** The events this decision depends on: the course's and the student's. */
function boundary(courseId, studentId) {
  return Query.of(
    { types: ['CourseDefined', 'StudentSubscribedToCourse'], tags: [`course:${courseId}`] },
    { types: ['StudentRegistered', 'StudentSubscribedToCourse'], tags: [`student:${studentId}`] },
  )
}

/** Decides on what it read and appends guarded by the same query; retries on conflict. */
export async function subscribe(store, courseId, studentId) {
  const query = boundary(courseId, studentId)
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const { events, head } = await store.readAll(query)
    let capacity
    let registered = false
    let courseCount = 0
    let studentCount = 0
    for (const event of events) {
      if (event.type === 'CourseDefined') capacity = parse(event).capacity
      if (event.type === 'StudentRegistered') registered = true
      if (event.type === 'StudentSubscribedToCourse') {
        const { courseId: c, studentId: s } = parse(event)
        if (s === studentId && c === courseId) return { ok: false, reason: 'already subscribed' }
        if (c === courseId) courseCount++
        if (s === studentId) studentCount++
      }
    }
    if (capacity === undefined) return { ok: false, reason: `no course ${courseId}` }
    if (!registered) return { ok: false, reason: `no student ${studentId}` }
    if (courseCount >= capacity) return { ok: false, reason: 'course full' }
    if (studentCount >= MAX_COURSES_PER_STUDENT) return { ok: false, reason: 'student takes too many courses' }
    try {
      const { first } = await store.append(
        [{ type: 'StudentSubscribedToCourse', tags: [`course:${courseId}`, `student:${studentId}`], data: json({ courseId, studentId }) }],
        { failIfEventsMatch: query, after: head },
      )
      return { ok: true, position: first, attempts: attempt }
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err
      // Someone changed what we decided on (event err.position): read again and decide again.
    }
  }
  return { ok: false, reason: `still conflicting after ${MAX_ATTEMPTS} attempts` }
}

async function main() {
  // Without a directory, a temporary one, removed at the end (segments are preallocated).
  const temporary = process.argv[2] === undefined
  const dir = process.argv[2] ?? fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-courses-'))
  const store = await Store.open(dir)
  try {
    await defineCourse(store, 'c1', 3)
    await defineCourse(store, 'c2', 10)
    await defineCourse(store, 'c3', 10)
    const students = ['s1', 's2', 's3', 's4', 's5']
    for (const s of students) await registerStudent(store, s)
    // Five students race for three seats, all at once.
    const outcomes = await Promise.all(students.map((s) => subscribe(store, 'c1', s)))
    students.forEach((s, i) => {
      const o = outcomes[i]
      console.log(o.ok ? `${s} subscribed to c1 at position ${o.position} (attempt ${o.attempts})` : `${s} not subscribed to c1: ${o.reason}`)
    })
    console.log(`c1 seats taken: ${outcomes.filter((o) => o.ok).length} of 3`)
    // A student's own limit, across courses.
    for (const course of ['c2', 'c3']) {
      const o = await subscribe(store, course, 's1')
      console.log(o.ok ? `s1 subscribed to ${course}` : `s1 not subscribed to ${course}: ${o.reason}`)
    }
  } finally {
    await store.close()
    if (temporary) fs.rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
