// The per-runtime shapes from Node.js, through the package in node/ (see README.md).
//
//   node node_driver.mjs read_store=DIR work=DIR batches=N concurrent=N scans=N selective=N catchups=N
//
// Prints one JSON object per shape: {"runtime","shape","events","seconds","events_per_s"}.

import fs from 'node:fs'
import path from 'node:path'
import { Store, Query } from '../../node/lapilli.js'

const p = Object.fromEntries(process.argv.slice(2).map((a) => {
  const i = a.indexOf('=')
  if (i < 0) throw new Error(`not key=value: ${a}`)
  return [a.slice(0, i), a.slice(i + 1)]
}))
const num = (k) => {
  const v = Number(p[k])
  if (!Number.isInteger(v)) throw new Error(`missing ${k}=N`)
  return v
}

const RT = 'node'
const EVENT_TYPE = 'Measured'
const DATA = Buffer.alloc(256, 7)
const BATCH = 512
const WORKERS = 64
const ENTITIES = 1000
// Untimed batches before append_batched is timed, and untimed passes before append_concurrent
// until WARM_SECONDS have gone by: the same in every driver (src/main.rs).
const WARM_BATCHES = 2
const WARM_SECONDS = 2.0
const never = { failIfEventsMatch: Query.of({ types: ['NeverAppended'], tags: ['never:0'] }) }
const event = (i) => ({ type: EVENT_TYPE, tags: [`entity:${i % ENTITIES}`], data: DATA })

function report (shape, events, seconds) {
  console.log(JSON.stringify({ runtime: RT, shape, events, seconds: Number(seconds.toFixed(6)), events_per_s: Number((events / seconds).toFixed(1)) }))
}
function check (got, want, what) {
  if (got !== want) throw new Error(`${what}: got ${got}, expected ${want}`)
}
const now = () => performance.now() / 1000

const work = p.work
fs.mkdirSync(work, { recursive: true })
async function fresh (name) {
  const dir = path.join(work, name)
  fs.rmSync(dir, { recursive: true, force: true })
  return [dir, await Store.open(dir)]
}

// append_batched
{
  const batches = num('batches')
  const [dir, store] = await fresh('node-batched')
  const batch = (b) => {
    const events = []
    for (let i = b * BATCH; i < (b + 1) * BATCH; i++) events.push(event(i))
    return events
  }
  for (let b = 0; b < WARM_BATCHES; b++) await store.append(batch(b), never)
  const started = now()
  for (let b = WARM_BATCHES; b < WARM_BATCHES + batches; b++) await store.append(batch(b), never)
  const seconds = now() - started
  check(store.head(), (WARM_BATCHES + batches) * BATCH, 'append_batched head')
  await store.close()
  fs.rmSync(dir, { recursive: true, force: true })
  report('append_batched', batches * BATCH, seconds)
}

// append_concurrent: 64 Promises in flight, each an unbatched conditional append
{
  const perWorker = num('concurrent')
  const [dir, store] = await fresh('node-concurrent')
  const inFlight = (per, offset) => Promise.all(Array.from({ length: WORKERS }, async (_, w) => {
    for (let i = 0; i < per; i++) await store.append([event(offset + w * per + i)], never)
  }))
  const total = WORKERS * perWorker
  let passes = 0
  for (const warm = now(); passes === 0 || now() - warm < WARM_SECONDS; passes++) await inFlight(perWorker, passes * total)
  const started = now()
  await inFlight(perWorker, passes * total)
  const seconds = now() - started
  check(store.head(), (passes + 1) * total, 'append_concurrent head')
  await store.close()
  fs.rmSync(dir, { recursive: true, force: true })
  report('append_concurrent', WORKERS * perWorker, seconds)
}

const store = await Store.open(p.read_store)
const head = store.head()

// read_warm_scan: for await over the read
{
  const scan = async () => {
    let n = 0
    let bytes = 0
    for await (const e of store.read(Query.all())) {
      n++
      bytes += e.data.length
    }
    check(n, head, 'scan count')
    check(bytes, head * DATA.length, 'scan bytes')
  }
  const scans = num('scans')
  await scan() // warm, untimed
  const started = now()
  for (let s = 0; s < scans; s++) await scan()
  report('read_warm_scan', scans * head, now() - started)
}

// read_selective
{
  const reads = num('selective')
  let total = 0
  const started = now()
  for (let r = 0; r < reads; r++) {
    const k = (r * 7919) % ENTITIES
    let n = 0
    for await (const e of store.read(Query.forTags(`entity:${k}`))) if (e) n++
    check(n, Math.floor(head / ENTITIES) + (k < head % ENTITIES ? 1 : 0), 'selective count')
    total += n
  }
  report('read_selective', total, now() - started)
}

// subscribe_catch_up: for await over the subscription until the head is delivered
{
  const passes = num('catchups')
  const started = now()
  for (let s = 0; s < passes; s++) {
    let n = 0
    for await (const e of store.subscribe(Query.all(), { after: 0 })) {
      n++
      if (e.position === head) break
    }
    check(n, head, 'subscription count')
  }
  report('subscribe_catch_up', passes * head, now() - started)
}
await store.close()

// live_subscriptions: 1,000 subscriptions to one tag, each waiting in `nextBatch`, then one commit
// of an event with that tag per round: the delivery latency (append called to the event in the
// subscriber's hands) over every delivery, and the process's threads while they wait. The same
// in every driver (src/main.rs SUBSCRIBERS, LIVE_ROUNDS).
{
  const SUBSCRIBERS = 1000
  const LIVE_ROUNDS = 5
  const LIVE_SETTLE_MS = 50
  const threadCount = () => Number(/^Threads:\s+(\d+)$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1])
  const [dir, live] = await fresh('node-live')
  const subs = Array.from({ length: SUBSCRIBERS }, () => live.subscribe(Query.forTags('ping')))
  const latencies = []
  let threads = 0
  let timed = 0
  for (let r = 0; r <= LIVE_ROUNDS; r++) { // the first untimed
    let appendedAt = 0
    const waits = subs.map((sub) => sub.nextBatch(10).then((events) => {
      check(events.length, 1, 'events of one commit')
      if (r > 0) latencies.push(now() - appendedAt)
    }))
    await new Promise((resolve) => setTimeout(resolve, LIVE_SETTLE_MS)) // every subscription is waiting
    threads = Math.max(threads, threadCount())
    appendedAt = now()
    await live.append([{ type: 'Ping', tags: ['ping'], data: DATA }])
    await Promise.all(waits)
    if (r > 0) timed += now() - appendedAt
  }
  for (const sub of subs) sub.close()
  await live.close()
  fs.rmSync(dir, { recursive: true, force: true })
  latencies.sort((a, b) => a - b)
  check(latencies.length, SUBSCRIBERS * LIVE_ROUNDS, 'live deliveries')
  const at = (q) => Math.round(latencies[Math.floor(latencies.length * q / 100)] * 1e7) / 10
  console.log(JSON.stringify({
    runtime: 'node', shape: 'live_subscriptions', events: latencies.length, seconds: timed,
    events_per_s: latencies.length / timed, threads_waiting: threads, latency_p50_us: at(50), latency_p99_us: at(99),
  }))
}
