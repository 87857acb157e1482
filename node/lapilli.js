'use strict'
// The package's front door: a thin layer over the generated native loader (`index.js`) that
// checks argument types (TypeError naming the argument), maps errors (errors.js), decodes
// batches into plain event objects and offers async iteration. No engine logic lives here.

const native = require('./index.js')
const errors = require('./errors.js')
const {
  translate,
  LapilliError,
  ConflictError,
  AlreadyExistsError,
  InvalidArgumentError,
  StoreLockedError,
  StoreClosedError,
  ReadOnlyError,
  CorruptionError,
  LapilliIOError,
} = errors

/** Read batches: a small first one answers quickly, later ones amortise the crossing. */
const FIRST_READ_BATCH = 512
const READ_BATCH = 4096
const SUBSCRIPTION_BATCH = 1024
/** Subscription waits are cut into slices so no native wait outlives a close for long. */
const WAIT_SLICE_MS = 250

function typeError(message) {
  return new TypeError(message)
}

/** Names what was passed, briefly, for a TypeError's message. */
function describe(value) {
  if (value === null) return 'null'
  if (value === undefined) return 'undefined'
  if (Array.isArray(value)) return 'an array'
  if (typeof value === 'object') return 'an object'
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'string') return `string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + '...' : value)}`
  return `${typeof value} ${String(value)}`
}

function checkStrings(name, value) {
  if (!Array.isArray(value)) throw typeError(`${name} must be an array of strings, got ${describe(value)}`)
  for (let i = 0; i < value.length; i++) {
    if (typeof value[i] !== 'string') {
      throw typeError(`${name}[${i}] must be a string, got ${describe(value[i])}`)
    }
  }
  return value
}

function checkNumber(name, value, optional) {
  if (value === undefined && optional) return undefined
  if (typeof value !== 'number') throw typeError(`${name} must be a number, got ${describe(value)}`)
  return value
}

function checkObject(name, value, optional) {
  if (value === undefined && optional) return undefined
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw typeError(`${name} must be an object, got ${describe(value)}`)
  }
  return value
}

/** Calls into the native half, turning its errors into LapilliErrors. */
function call(fn) {
  try {
    return fn()
  } catch (err) {
    throw translate(err)
  }
}

async function settle(promise) {
  try {
    return await promise
  } catch (err) {
    throw translate(err)
  }
}

// ---------------------------------------------------------------------------------------------
// Queries

const QUERY_KEY = Symbol('lapilli.query')

/** What a read, subscription or condition selects. Immutable; build with the static methods. */
class Query {
  constructor(key, all, items) {
    if (key !== QUERY_KEY) throw typeError('use Query.all(), Query.of(), Query.forTags() or Query.forTypes()')
    this.all = all
    this.items = Object.freeze(
      items.map((item) => Object.freeze({ types: Object.freeze([...item.types]), tags: Object.freeze([...item.tags]) })),
    )
    Object.freeze(this)
  }

  /** Matches every event. */
  static all() {
    return new Query(QUERY_KEY, true, [])
  }

  /** Matches an event when any item does. Items are `{ types?, tags? }`. */
  static of(...items) {
    if (items.length === 1 && Array.isArray(items[0])) items = items[0]
    return new Query(
      QUERY_KEY,
      false,
      items.map((item, i) => {
        checkObject(`items[${i}]`, item)
        const types = item.types === undefined ? [] : checkStrings(`items[${i}].types`, item.types)
        const tags = item.tags === undefined ? [] : checkStrings(`items[${i}].tags`, item.tags)
        return { types: [...types], tags: [...tags] }
      }),
    )
  }

  /** One item: events carrying every one of `tags`, whatever their type. */
  static forTags(...tags) {
    checkStrings('tags', tags)
    return new Query(QUERY_KEY, false, [{ types: [], tags }])
  }

  /** One item: events of any of `types`. */
  static forTypes(...types) {
    checkStrings('types', types)
    return new Query(QUERY_KEY, false, [{ types, tags: [] }])
  }
}

function checkQuery(name, value, optional) {
  if (value === undefined && optional) return undefined
  if (!(value instanceof Query)) {
    throw typeError(`${name} must be a Query (Query.all(), Query.of(), ...), got ${describe(value)}`)
  }
  return value
}

// ---------------------------------------------------------------------------------------------
// Events in and out

function toNativeEvents(events) {
  if (!Array.isArray(events)) throw typeError(`events must be an array, got ${describe(events)}`)
  const out = new Array(events.length)
  for (let i = 0; i < events.length; i++) {
    const event = checkObject(`events[${i}]`, events[i])
    if (typeof event.type !== 'string') {
      throw typeError(`events[${i}].type must be a string, got ${describe(event.type)}`)
    }
    const tags = event.tags === undefined ? [] : checkStrings(`events[${i}].tags`, event.tags)
    let data = event.data
    if (data === undefined) {
      data = EMPTY
    } else if (!(data instanceof Uint8Array)) {
      throw typeError(`events[${i}].data must be a Buffer or Uint8Array, got ${describe(data)}`)
    }
    out[i] = { type: event.type, tags, data }
  }
  return out
}

const EMPTY = new Uint8Array(0)

function toNativeCondition(condition) {
  if (condition === undefined || condition === null) return undefined
  checkObject('condition', condition)
  return {
    failIfEventsMatch: checkQuery('condition.failIfEventsMatch', condition.failIfEventsMatch),
    after: checkNumber('condition.after', condition.after, true),
    failIfExists: checkQuery('condition.failIfExists', condition.failIfExists, true),
  }
}

/** Unpacks a native batch (see `Batch` in src/lib.rs) into event objects, appended to `out`. */
function decodeBatch(batch, out) {
  const { meta, strings, data } = batch
  const count = batch.count
  let m = 0
  let offset = 0
  for (let i = 0; i < count; i++) {
    const position = meta[m]
    const recordedAt = meta[m + 1]
    const type = strings[meta[m + 2]]
    const length = meta[m + 3]
    const tagCount = meta[m + 4]
    m += 5
    const tags = new Array(tagCount)
    for (let t = 0; t < tagCount; t++) tags[t] = strings[meta[m + t]]
    m += tagCount
    out.push({ position, recordedAt, type, tags, data: data.subarray(offset, offset + length) })
    offset += length
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Reads

/**
 * A bounded read: a consistent snapshot, consumed once, as an async iterable of events.
 * `head` is the store head pinned when the read began.
 */
class ReadResult {
  #native
  #started = false

  constructor(nativeRead) {
    this.#native = nativeRead
    this.head = nativeRead.head
  }

  /** The events in batches (arrays), as they cross from Rust. */
  async *batches() {
    if (this.#started) throw typeError('a ReadResult can be iterated once; call store.read() again')
    this.#started = true
    let size = FIRST_READ_BATCH
    let pending = settle(this.#native.nextBatch(size))
    while (true) {
      const batch = await pending
      if (batch.count === 0) return
      // Ask for the next batch before decoding this one, so Rust and JS work at once.
      size = READ_BATCH
      pending = settle(this.#native.nextBatch(size))
      pending.catch(() => {}) // observed when awaited; not unhandled if the consumer stops
      yield decodeBatch(batch, [])
    }
  }

  /** Events one by one. Hand-written rather than an async generator: one resolved Promise per
   * event is all it costs between batches. */
  [Symbol.asyncIterator]() {
    const batches = this.batches()
    let events = []
    let next = 0
    const iterator = {
      next: () => {
        if (next < events.length) return Promise.resolve({ value: events[next++], done: false })
        return batches.next().then((step) => {
          if (step.done) return { value: undefined, done: true }
          events = step.value
          next = 1
          return { value: events[0], done: false }
        })
      },
      return: () => {
        events = []
        return batches.return().then(() => ({ value: undefined, done: true }))
      },
      [Symbol.asyncIterator]() {
        return iterator
      },
    }
    return iterator
  }
}

function readArgs(name, opts) {
  checkObject(name, opts, true)
  const o = opts || {}
  if (o.backwards !== undefined && typeof o.backwards !== 'boolean') {
    throw typeError(`${name}.backwards must be a boolean, got ${describe(o.backwards)}`)
  }
  return {
    after: o.after === undefined ? 0 : checkNumber(`${name}.after`, o.after),
    until: checkNumber(`${name}.until`, o.until, true),
    limit: checkNumber(`${name}.limit`, o.limit, true),
    backwards: o.backwards === true,
  }
}

// ---------------------------------------------------------------------------------------------
// Subscriptions

/**
 * Every matching event after `after`: history, then live commits, in position order. An async
 * iterable (`break` closes it) that also offers `nextBatch`, `caughtUp`, `position`, `close()`.
 */
class Subscription {
  #native
  /** Fetched events not yet handed out: `#buffer[#next..]`. */
  #buffer = []
  #next = 0
  #position
  #ended = false

  constructor(nativeSubscription, after) {
    this.#native = nativeSubscription
    this.#position = after
  }

  /** True when everything committed so far has been handed out. */
  get caughtUp() {
    return this.#next >= this.#buffer.length && this.#native.caughtUp
  }

  /** The last position handed out (the `after` to resume from). */
  get position() {
    return this.#position
  }

  get closed() {
    return this.#ended || this.#native.closed
  }

  /**
   * Up to `max` events, waiting at most `timeoutMs` (undefined: as long as it takes; 0: only
   * what is there now). Resolves `[]` on timeout and `null` once the subscription has ended.
   */
  async nextBatch(max = SUBSCRIPTION_BATCH, timeoutMs) {
    checkNumber('max', max)
    checkNumber('timeoutMs', timeoutMs, true)
    if (!(Number.isInteger(max) && max >= 1 && max <= 0xffffffff)) {
      throw errors.lapilliError('INVALID_ARGUMENT', `max is ${max}; a batch holds at least one event`)
    }
    if (timeoutMs !== undefined && !(timeoutMs >= 0)) {
      throw errors.lapilliError('INVALID_ARGUMENT', `timeoutMs is ${timeoutMs}; it must be 0 or more (or omitted: wait as long as it takes)`)
    }
    let events
    if (this.#next < this.#buffer.length) {
      events = this.#buffer.slice(this.#next, this.#next + max)
      this.#next += events.length
    } else {
      events = await this.#fetch(max, timeoutMs)
    }
    if (events !== null && events.length > 0) this.#position = events[events.length - 1].position
    return events
  }

  /** Events from the native side, waiting in slices until `timeoutMs` passes; null: ended. */
  async #fetch(max, timeoutMs) {
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + Math.max(0, timeoutMs)
    while (true) {
      if (this.#ended) return null
      const slice = Math.min(WAIT_SLICE_MS, Math.max(0, deadline - Date.now()))
      const batch = await settle(this.#native.nextBatch(max, slice))
      if (batch === null || batch === undefined) {
        this.#ended = true
        return null
      }
      if (batch.count > 0) return decodeBatch(batch, [])
      if (Date.now() >= deadline) return []
    }
  }

  /** Ends the subscription; a pending `nextBatch` or `for await` finishes. Idempotent. */
  close() {
    this.#ended = true
    this.#buffer = []
    this.#next = 0
    this.#native.close()
  }

  /** Events one by one; `break` (which calls `return()`) closes the subscription. */
  [Symbol.asyncIterator]() {
    const iterator = {
      next: async () => {
        if (this.#next >= this.#buffer.length) {
          const events = await this.#fetch(SUBSCRIPTION_BATCH, undefined)
          if (events === null) return { value: undefined, done: true }
          this.#buffer = events
          this.#next = 0
        }
        const event = this.#buffer[this.#next++]
        this.#position = event.position
        return { value: event, done: false }
      },
      return: async () => {
        this.close()
        return { value: undefined, done: true }
      },
      [Symbol.asyncIterator]() {
        return iterator
      },
    }
    return iterator
  }
}

// ---------------------------------------------------------------------------------------------
// Store

const STORE_KEY = Symbol('lapilli.store')

function checkPath(path) {
  if (typeof path !== 'string') throw typeError(`path must be a string, got ${describe(path)}`)
  return path
}

/** An open store: one directory, one global order of events. */
class Store {
  #native

  constructor(key, nativeStore) {
    if (key !== STORE_KEY) throw typeError('use Store.open(path, options)')
    this.#native = nativeStore
  }

  /** Opens (creating if missing) the store in `path`; one process may hold it writable. */
  static async open(path, options) {
    checkPath(path)
    checkObject('options', options, true)
    const o = options || {}
    if (o.durability !== undefined && typeof o.durability !== 'string') {
      throw typeError(`options.durability must be "fsync" or "buffered", got ${describe(o.durability)}`)
    }
    const nativeOptions = {
      durability: o.durability,
      segmentSize: checkNumber('options.segmentSize', o.segmentSize, true),
      maxEventBytes: checkNumber('options.maxEventBytes', o.maxEventBytes, true),
    }
    const nativeStore = await settle(call(() => native.openStore(path, nativeOptions)))
    return new Store(STORE_KEY, nativeStore)
  }

  /** A read-only handle (a follower) on a store another process may be writing: it never
   * takes the lock or writes a byte, sees whole committed batches only, and follows new
   * commits within milliseconds. Appends on it reject with ReadOnlyError. */
  static async openReadOnly(path) {
    checkPath(path)
    const nativeStore = await settle(native.openStoreReadOnly(path))
    return new Store(STORE_KEY, nativeStore)
  }

  /** The last committed position (0 for an empty store). */
  head() {
    return call(() => this.#native.head())
  }

  /**
   * Appends `events` atomically at consecutive positions if `condition` holds. The append is
   * queued when called (so appends commit in call order) and resolves once committed.
   */
  async append(events, condition) {
    const nativeEvents = toNativeEvents(events)
    const nativeCondition = toNativeCondition(condition)
    return settle(call(() => this.#native.append(nativeEvents, nativeCondition)))
  }

  /** A snapshot read of the events matching `query` in `(after, until]`; iterate it once. */
  read(query, opts) {
    checkQuery('query', query)
    const o = readArgs('opts', opts)
    return new ReadResult(
      call(() => this.#native.read(query, o.after, o.until, o.limit, o.backwards)),
    )
  }

  /** The whole of a read at once, with the head it pinned. */
  async readAll(query, opts) {
    const read = this.read(query, opts)
    const events = []
    for await (const batch of read.batches()) {
      for (let i = 0; i < batch.length; i++) events.push(batch[i])
    }
    return { events, head: read.head }
  }

  /** Every matching event after `opts.after` (default 0): history, then live commits. */
  subscribe(query, opts) {
    checkQuery('query', query)
    checkObject('opts', opts, true)
    const after = opts === undefined || opts.after === undefined ? 0 : checkNumber('opts.after', opts.after)
    return new Subscription(call(() => this.#native.subscribe(query, after)), after)
  }

  /** Commits what is queued, ends every subscription and releases the directory. Idempotent. */
  async close() {
    await settle(this.#native.close())
  }
}

module.exports = {
  Store,
  Query,
  ReadResult,
  Subscription,
  LapilliError,
  ConflictError,
  AlreadyExistsError,
  InvalidArgumentError,
  StoreLockedError,
  StoreClosedError,
  ReadOnlyError,
  CorruptionError,
  LapilliIOError,
}
