// The Node.js runner of the cross-language conformance scenarios (tests/README.md): every
// tests/conformance/*.json file is one test, run against a fresh temporary directory (and a fresh
// Postgres context when LAPILLI_TEST_POSTGRES_URL is set); a failing
// step is named by its index and op.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { execFileSync } from 'node:child_process'
import lapilli from '../lapilli.js'

const { Store, Query, LapilliError } = lapilli
const here = path.dirname(fileURLToPath(import.meta.url))
const scenarioDir = process.env.LAPILLI_CONFORMANCE_DIR ?? path.join(here, '..', '..', 'tests', 'conformance')

const files = fs.readdirSync(scenarioDir).filter((f) => f.endsWith('.json')).sort()

test('the conformance directory holds scenarios', () => {
  assert.ok(files.length > 0, `no scenario (*.json) in ${scenarioDir}`)
})

function text(value) {
  if (typeof value === 'string') return value
  if (value && typeof value === 'object' && 'repeat' in value) return value.repeat.repeat(value.times)
  throw new Error(`not a string value: ${JSON.stringify(value)}`)
}

function bytes(value) {
  if (value === undefined) return Buffer.alloc(0)
  if (typeof value === 'string') return Buffer.from(value, 'utf8')
  if ('hex' in value) return Buffer.from(value.hex, 'hex')
  if ('fill' in value) return Buffer.alloc(value.len, value.fill)
  throw new Error(`not a data value: ${JSON.stringify(value)}`)
}

function event(value) {
  return { type: text(value.type), tags: (value.tags ?? []).map(text), data: bytes(value.data) }
}

function query(value) {
  if (value === 'all') return Query.all()
  return Query.of(value.items.map((item) => ({ types: (item.types ?? []).map(text), tags: (item.tags ?? []).map(text) })))
}

function condition(value) {
  if (value === undefined) return undefined
  return {
    failIfEventsMatch: query(value.fail_if_events_match),
    after: value.after,
    failIfExists: value.fail_if_exists === undefined ? undefined : query(value.fail_if_exists),
  }
}

function options(value) {
  if (value === undefined) return undefined
  return { durability: value.durability, segmentSize: value.segment_size, maxEventBytes: value.max_event_bytes }
}

function describe(err) {
  return err instanceof LapilliError ? `${err.code}${err.position === undefined ? '' : '@' + err.position}: ${err.message}` : String(err)
}

/** Runs `fn`; checks its failure against `expectError` (then returns undefined) or returns its value. */
async function outcome(expectError, fn) {
  let value
  try {
    value = await fn()
  } catch (err) {
    if (expectError === undefined) throw new Error(`unexpected error ${describe(err)}`)
    if (!(err instanceof LapilliError) || err.code !== expectError.kind) {
      throw new Error(`expected error ${expectError.kind}, got ${describe(err)}`)
    }
    if (expectError.position !== undefined && err.position !== expectError.position) {
      throw new Error(`expected error ${expectError.kind} at position ${expectError.position}, got ${describe(err)}`)
    }
    if (expectError.message_contains !== undefined && !err.message.includes(expectError.message_contains)) {
      throw new Error(`expected a message containing ${JSON.stringify(expectError.message_contains)}, got ${describe(err)}`)
    }
    return undefined
  }
  if (expectError !== undefined) throw new Error(`expected error ${expectError.kind}, but the step succeeded`)
  return value
}

function checkStoredShape(events) {
  for (const e of events) {
    for (let i = 1; i < e.tags.length; i++) {
      assert.ok(Buffer.compare(Buffer.from(e.tags[i - 1]), Buffer.from(e.tags[i])) < 0, `event ${e.position} has tags out of order`)
    }
    assert.ok(e.data instanceof Uint8Array, 'data is a Uint8Array')
    assert.equal(typeof e.recordedAt, 'number')
  }
  const stamps = [...events].sort((a, b) => a.position - b.position)
  for (let i = 1; i < stamps.length; i++) {
    assert.ok(stamps[i].recordedAt >= stamps[i - 1].recordedAt, `recordedAt goes backwards at ${stamps[i].position}`)
  }
}

class Run {
  constructor(dir) {
    this.dir = dir
    this.store = undefined
    this.subscriptions = new Map()
  }

  requireStore() {
    if (this.store === undefined) throw new Error('no store was opened before this step')
    return this.store
  }

  async step(step) {
    const expectError = step.expect_error
    switch (step.op) {
      case 'open': {
        const store = await outcome(expectError, () => Store.open(this.dir, options(step.options)))
        if (store !== undefined) this.store = store
        break
      }
      case 'open_again': {
        this.requireStore()
        const second = await outcome(expectError, () => Store.open(this.dir, options(step.options)))
        if (second !== undefined) await second.close() // a second handle that opens is closed at once
        break
      }
      case 'reopen': {
        if (this.store !== undefined) await this.store.close()
        const store = await outcome(expectError, () => Store.open(this.dir, options(step.options)))
        if (store !== undefined) this.store = store
        break
      }
      case 'close':
        await outcome(expectError, () => this.requireStore().close())
        break
      case 'head': {
        const head = await outcome(expectError, () => this.requireStore().head())
        if (head !== undefined) assert.equal(head, step.expect, 'head')
        break
      }
      case 'append': {
        const store = this.requireStore()
        const got = await outcome(expectError, () => store.append(step.events.map(event), condition(step.condition)))
        if (got !== undefined && step.expect !== undefined) assert.deepEqual(got, step.expect)
        break
      }
      case 'append_concurrent': {
        const store = this.requireStore()
        const requests = step.appends.map((a) => [a.events.map(event), condition(a.condition)])
        // Every append is called (and so queued) before any is awaited.
        const promises = requests.map(([events, cond]) => store.append(events, cond))
        const results = await Promise.allSettled(promises)
        let ok = 0
        const errors = {}
        const ranges = []
        for (const r of results) {
          if (r.status === 'fulfilled') {
            ok++
            ranges.push([r.value.first, r.value.last])
          } else {
            assert.ok(r.reason instanceof LapilliError, `not a LapilliError: ${r.reason}`)
            errors[r.reason.code] = (errors[r.reason.code] ?? 0) + 1
          }
        }
        ranges.sort((a, b) => a[0] - b[0])
        for (let i = 1; i < ranges.length; i++) {
          assert.ok(ranges[i][0] > ranges[i - 1][1], `two successful appends overlap: ${ranges[i - 1]} and ${ranges[i]}`)
        }
        const wantErrors = Object.fromEntries(Object.entries(step.expect.errors ?? {}).filter(([, n]) => n > 0))
        assert.deepEqual({ ok, errors }, { ok: step.expect.ok, errors: wantErrors })
        break
      }
      case 'read': {
        const store = this.requireStore()
        const got = await outcome(expectError, () =>
          store.readAll(query(step.query), {
            after: step.after,
            until: step.until,
            limit: step.limit,
            backwards: step.backwards,
          }),
        )
        if (got === undefined) break
        checkStoredShape(got.events)
        assert.deepEqual(got.events.map((e) => e.position), step.expect.positions, 'positions')
        if (step.expect.head !== undefined) assert.equal(got.head, step.expect.head, 'read head')
        if (step.expect.events !== undefined) {
          const want = step.expect.events.map((e) => ({
            position: e.position,
            type: text(e.type),
            tags: (e.tags ?? []).map(text),
            data: bytes(e.data),
          }))
          const have = got.events.map((e) => ({ position: e.position, type: e.type, tags: e.tags, data: Buffer.from(e.data) }))
          assert.deepEqual(have, want, 'events')
        }
        break
      }
      case 'subscribe': {
        if (this.subscriptions.has(step.id)) throw new Error(`subscription id ${step.id} is already in use`)
        const store = this.requireStore()
        const sub = await outcome(expectError, () => store.subscribe(query(step.query), { after: step.after }))
        if (sub !== undefined) this.subscriptions.set(step.id, sub)
        break
      }
      case 'next_batch': {
        const sub = this.subscriptions.get(step.id)
        if (sub === undefined) throw new Error(`no subscription ${step.id}`)
        const got = await outcome(expectError, () => sub.nextBatch(step.max, step.timeout_ms))
        if (expectError !== undefined) break
        if (got === null) {
          assert.ok(step.expect.ended === true, 'expected a batch, got the end of the subscription')
          break
        }
        assert.ok(step.expect.ended !== true, `expected the end of the subscription, got ${got.map((e) => e.position)}`)
        checkStoredShape(got)
        assert.ok(got.length <= step.max, `asked for at most ${step.max}, got ${got.length}`)
        assert.deepEqual(got.map((e) => e.position), step.expect.positions, 'positions')
        if (step.expect.caught_up !== undefined) assert.equal(sub.caughtUp, step.expect.caught_up, 'caught_up')
        if (step.expect.position !== undefined) assert.equal(sub.position, step.expect.position, 'position')
        break
      }
      case 'close_subscription': {
        const sub = this.subscriptions.get(step.id)
        if (sub === undefined) throw new Error(`no subscription ${step.id}`)
        sub.close()
        break
      }
      default:
        throw new Error(`unknown op ${step.op}`)
    }
  }

  async finish() {
    for (const sub of this.subscriptions.values()) sub.close()
    if (this.store !== undefined) await this.store.close()
  }
}

// The scenarios run on the embedded store, and again on the PostgreSQL backend when a server
// is given (scripts/postgres.sh start prints the variable; scripts/test.sh sets it), each in a
// fresh context; scenarios marked embedded_only (files, locks, recovery) are skipped there.
const postgresUrl = process.env.LAPILLI_TEST_POSTGRES_URL || undefined
const backends = ['embedded', ...(postgresUrl ? ['postgres'] : [])]
let contexts = 0

test('a PostgreSQL server is given when required', () => {
  if (process.env.LAPILLI_REQUIRE_POSTGRES) {
    assert.ok(postgresUrl, 'LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not')
  }
})

function freshContextUrl(file) {
  const stem = file.replace(/\.json$/, '').replace(/[^a-z_]/g, '').slice(0, 16)
  return contextUrl(postgresUrl, freshContext(stem))
}

for (const backend of backends) for (const file of files) {
  test(backend === 'embedded' ? file : `${file} (postgres)`, async (t) => {
    const scenario = JSON.parse(fs.readFileSync(path.join(scenarioDir, file), 'utf8'))
    if (backend === 'postgres' && scenario.embedded_only) {
      t.skip('embedded only (files, locks or recovery)')
      return
    }
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-conformance-'))
    const run = new Run(backend === 'embedded' ? path.join(tmp, 'store') : freshContextUrl(file))
    try {
      for (const [index, step] of scenario.steps.entries()) {
        try {
          await run.step(step)
        } catch (err) {
          err.message = `${file}: step ${index} (${step.op}): ${err.message}`
          throw err
        }
      }
    } finally {
      await run.finish()
      fs.rmSync(tmp, { recursive: true, force: true })
    }
  })
}

// The errors of locations (API.md, "Where a store lives" and "Errors").

/** The test database's URL, or undefined after skipping `t`; fails instead when
 * LAPILLI_REQUIRE_POSTGRES is set. */
function requirePostgres(t) {
  if (!postgresUrl) {
    assert.ok(!process.env.LAPILLI_REQUIRE_POSTGRES, 'LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not')
    t.skip('no PostgreSQL server (LAPILLI_TEST_POSTGRES_URL)')
  }
  return postgresUrl
}

/** A context name no earlier run used (a-z, 0-9 and _, at most 40 characters). */
function freshContext(stem) {
  const stamp = (BigInt(Date.now()) * 1000n + BigInt(contexts++)) % 1000000000000n
  const context = `js${process.pid}_${stamp}_${stem}`
  assert.ok(context.length <= 40, context)
  return context
}

function contextUrl(base, context) {
  return `${base}${base.includes('?') ? '&' : '?'}context=${context}`
}

test('an unknown URL scheme is INVALID_ARGUMENT and makes no directory', async () => {
  // Needs no server: the scheme is refused before anything is opened.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-scheme-'))
  const cwd = process.cwd()
  process.chdir(tmp)
  try {
    for (const open of [(l) => Store.open(l), (l) => Store.openReadOnly(l)]) {
      await assert.rejects(open('mysql://u@h/db'), (err) => {
        assert.ok(err instanceof lapilli.InvalidArgumentError, `${err}`)
        assert.equal(err.code, 'INVALID_ARGUMENT')
        assert.match(err.message, /"mysql"/)
        return true
      })
    }
    assert.ok(!fs.existsSync(path.join(tmp, 'mysql:')), 'a directory mysql: was made')
    assert.deepEqual(fs.readdirSync(tmp), [])
  } finally {
    process.chdir(cwd)
    fs.rmSync(tmp, { recursive: true, force: true })
  }
})

test('a URL scheme in capitals opens the same context', async (t) => {
  // Schemes are case-insensitive: PostgreSQL://... is the same store as postgresql://...
  const base = requirePostgres(t)
  if (!base) return
  const url = contextUrl(base, freshContext('scheme'))
  const store = await Store.open(url)
  await store.append([{ type: 'T', tags: ['k:1'], data: Buffer.from('7') }])
  await store.close()
  const [scheme, rest] = [url.slice(0, url.indexOf('://')), url.slice(url.indexOf('://'))]
  const again = await Store.open(scheme.toUpperCase() + rest)
  assert.equal(Number(await again.head()), 1)
  await again.close()
})

test('openReadOnly of a missing context is IO, as of a missing directory', async (t) => {
  const base = requirePostgres(t)
  if (!base) return
  const url = contextUrl(base, freshContext('ro_missing'))
  let code
  await assert.rejects(Store.openReadOnly(url), (err) => {
    assert.ok(err instanceof lapilli.LapilliIOError, `${err}`)
    assert.equal(err.code, 'IO')
    assert.match(err.message, /does not exist/)
    code = err.code
    return true
  })
  // The embedded backend answers a missing store with the same kind.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lapilli-missing-'))
  try {
    await assert.rejects(Store.openReadOnly(path.join(tmp, 'missing')), (err) => {
      assert.equal(err.code, code, `${err}`)
      return true
    })
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
})

test('a context of a newer schema is CORRUPTION', async (t) => {
  const base = requirePostgres(t)
  if (!base) return
  const context = freshContext('newer')
  const url = contextUrl(base, context)
  await (await Store.open(url)).close()
  // As if a newer Lapilli had made it (psql takes the URL without Lapilli's `context`).
  // -X: no ~/.psqlrc; -q -At: the returned name alone on stdout (no command tag).
  const updated = execFileSync('psql', ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', base, '-c',
    `UPDATE lapilli_contexts SET schema_version = 99 WHERE name = '${context}' RETURNING name`], { encoding: 'utf8' })
  assert.equal(updated.trim(), context)
  for (const open of [(l) => Store.open(l), (l) => Store.openReadOnly(l)]) {
    await assert.rejects(open(url), (err) => {
      assert.ok(err instanceof lapilli.CorruptionError, `${err}`)
      assert.equal(err.code, 'CORRUPTION')
      assert.match(err.message, /schema version 99/)
      assert.match(err.message, /newer Lapilli/)
      return true
    })
  }
})
