'use strict'
// The package's front door: a thin layer over the native addon (found by `native.js`) that
// checks argument types (TypeError naming the argument), maps errors (errors.js), decodes
// batches into plain event objects and offers async iteration, AbortSignals and disposal
// (`using` / `await using`). No engine logic lives here.

const { currentPlatform, loadNative } = require('./native.js')
const native = loadNative(currentPlatform())
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
/** Most events a subscription takes on the JS thread after a wake-up (the commit just made,
 * in the page cache); a larger backlog is produced off the thread, as catch-up is. */
const LIVE_BATCH = 256
/** setTimeout's longest delay; a longer timeout waits in several. */
const MAX_TIMER_MS = 0x7fffffff

// Node 18.18+ and 20.4+ define both symbols (as `Symbol.for('nodejs.dispose')` and
// `Symbol.for('nodejs.asyncDispose')`); on an older runtime the same registered symbols are what
// TypeScript's downlevel helpers and later runtimes look for. The global is not patched.
const disposeSymbol = Symbol.dispose ?? Symbol.for('nodejs.dispose')
const asyncDisposeSymbol = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

const DONE = Object.freeze({ value: undefined, done: true })

/** An async iterator of `next` and `return` (no `throw`), iterable itself and disposed by
 * `await using` through its `return`. */
function lapilliIterator(next, ret) {
  const iterator = {
    next,
    return: ret,
    [Symbol.asyncIterator]() {
      return iterator
    },
    [asyncDisposeSymbol]: async () => {
      await iterator.return()
    },
  }
  return iterator
}

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

function checkSignal(name, value) {
  if (value === undefined) return undefined
  if (value === null || typeof value !== 'object' || typeof value.aborted !== 'boolean' || typeof value.addEventListener !== 'function') {
    throw typeError(`${name} must be an AbortSignal, got ${describe(value)}`)
  }
  return value
}

/** What an aborted operation rejects with, as Node's own APIs do: a DOMException named
 * 'AbortError' whose `cause` is the signal's reason. */
function abortError(signal) {
  return new DOMException('The operation was aborted', { name: 'AbortError', cause: signal.reason })
}

/**
 * A Promise that rejects with an AbortError once `signal` aborts and never resolves, and the
 * function that stops listening. For racing a native wait: the wait itself keeps running, and
 * whoever started it takes care of its outcome.
 */
function whenAborted(signal, onAbort) {
  let stop
  const promise = new Promise((_, reject) => {
    const listener = () => {
      const err = abortError(signal)
      if (onAbort !== undefined) onAbort(err)
      reject(err)
    }
    signal.addEventListener('abort', listener, { once: true })
    stop = () => signal.removeEventListener('abort', listener)
  })
  promise.catch(() => {}) // observed by the races it joins; not unhandled when none is running
  return { promise, stop }
}

/** Settles as `promise` does, or rejects with an AbortError as soon as `signal` aborts. */
async function abortable(promise, signal) {
  if (signal === undefined) return promise
  if (signal.aborted) throw abortError(signal)
  const aborted = whenAborted(signal)
  try {
    return await Promise.race([promise, aborted.promise])
  } finally {
    aborted.stop()
  }
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

/** Checks the events' types; they then cross as they are (no copy: fewer objects per append
 * means fewer pauses for the young-generation collector during a burst). */
function checkEvents(events) {
  if (!Array.isArray(events)) throw typeError(`events must be an array, got ${describe(events)}`)
  for (let i = 0; i < events.length; i++) {
    const event = checkObject(`events[${i}]`, events[i])
    if (typeof event.type !== 'string') {
      throw typeError(`events[${i}].type must be a string, got ${describe(event.type)}`)
    }
    if (event.tags !== undefined) checkStrings(`events[${i}].tags`, event.tags)
    if (event.data !== undefined && !(event.data instanceof Uint8Array)) {
      throw typeError(`events[${i}].data must be a Buffer or Uint8Array, got ${describe(event.data)}`)
    }
  }
  return events
}

/** Checks a condition's types; it then crosses as it is. */
function checkCondition(condition) {
  if (condition === undefined || condition === null) return undefined
  checkObject('condition', condition)
  checkQuery('condition.failIfEventsMatch', condition.failIfEventsMatch)
  checkNumber('condition.after', condition.after, true)
  checkQuery('condition.failIfExists', condition.failIfExists, true)
  return condition
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
 * `head` is the store head pinned when the read began. The snapshot is let go when the read
 * is read to the end, closed (`close()`, `break`, `using`) or aborted by its signal.
 */
class ReadResult {
  #native
  #started = false
  #closed = false
  /** The AbortError once the read's signal aborted. */
  #abortError = null
  /** Rejects with that AbortError; null without a signal. */
  #aborted = null
  #stopListening = null

  constructor(nativeRead, signal) {
    this.#native = nativeRead
    this.head = nativeRead.head
    if (signal !== undefined) {
      const aborted = whenAborted(signal, (err) => {
        this.#abortError = err
        this.#release()
      })
      this.#aborted = aborted.promise
      this.#stopListening = aborted.stop
    }
  }

  /** True once the read has let its snapshot go: read to the end, closed or aborted. */
  get closed() {
    return this.#native.released
  }

  /** Lets the snapshot go now; iteration after it ends. Idempotent. */
  close() {
    this.#closed = true
    this.#release()
  }

  #release() {
    if (this.#stopListening !== null) {
      this.#stopListening()
      this.#stopListening = null
    }
    this.#native.close()
  }

  /** The events in batches (arrays), as they cross from Rust. */
  batches() {
    if (this.#started) throw typeError('a ReadResult can be iterated once; call store.read() again')
    this.#started = true
    let size = FIRST_READ_BATCH
    let pending = null
    const fetch = () => {
      const batch = settle(call(() => this.#native.nextBatch(size)))
      batch.catch(() => {}) // observed when awaited; not unhandled if the consumer stops
      return batch
    }
    const step = async () => {
      if (this.#abortError !== null) throw this.#abortError
      if (this.#closed) return DONE
      if (pending === null) pending = fetch()
      const batch = await (this.#aborted === null ? pending : Promise.race([pending, this.#aborted]))
      if (this.#closed) return DONE
      if (batch.count === 0) {
        this.#release() // the native side let the snapshot go with the last batch
        this.#closed = true
        return DONE
      }
      // Ask for the next batch before decoding this one, so Rust and JS work at once.
      size = READ_BATCH
      pending = fetch()
      return { value: decodeBatch(batch, []), done: false }
    }
    // Calls to next() are served one after another, as an async generator would.
    let last = Promise.resolve()
    const next = () => {
      const result = last.then(step)
      last = result.catch(() => {})
      return result
    }
    return lapilliIterator(next, async () => {
      this.close()
      return DONE
    })
  }

  /** Events one by one. Hand-written rather than an async generator: one resolved Promise per
   * event is all it costs between batches. */
  [Symbol.asyncIterator]() {
    const batches = this.batches()
    let events = []
    let next = 0
    const step = () => {
      if (next < events.length) return Promise.resolve({ value: events[next++], done: false })
      return batches.next().then((step) => {
        if (step.done) return DONE
        events = step.value
        next = 1
        return { value: events[0], done: false }
      })
    }
    return lapilliIterator(step, () => {
      events = []
      return batches.return()
    })
  }

  /** `using read = store.read(...)`: closes the read at the end of the block. */
  [disposeSymbol]() {
    this.close()
  }

  /** `await using read = store.read(...)`. */
  async [asyncDisposeSymbol]() {
    this.close()
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
    signal: checkSignal(`${name}.signal`, o.signal),
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
  /** The catch-up batch being produced off the JS thread, if any: one at a time, whoever
   * started it (a call that was aborted leaves it running; what it brings is kept in
   * `#buffer` for the next call). It never waits for commits. */
  #inflight = null
  /** The wait for the native side to have something new, shared by concurrent consumers:
   * `{ promise, resolve, waiters }`, null when nobody waits. */
  #ready = null
  /** Set when a wait was answered: what it brings is taken on the JS thread. */
  #woken = false
  /** The AbortError once the subscription's own signal aborted. */
  #abortError = null
  /** Rejects with that AbortError; null without a signal. */
  #aborted = null
  #stopListening = null

  constructor(nativeSubscription, after, signal) {
    this.#native = nativeSubscription
    this.#position = after
    if (signal !== undefined) {
      const aborted = whenAborted(signal, (err) => {
        this.#abortError = err
        this.close()
      })
      this.#aborted = aborted.promise
      this.#stopListening = aborted.stop
    }
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
   * what is there now). Resolves `[]` on timeout and `null` once the subscription has ended;
   * rejects with an AbortError if `options.signal` (or the subscription's signal) aborts.
   */
  async nextBatch(max = SUBSCRIPTION_BATCH, timeoutMs, options) {
    checkNumber('max', max)
    checkNumber('timeoutMs', timeoutMs, true)
    checkObject('options', options, true)
    const signal = checkSignal('options.signal', options === undefined ? undefined : options.signal)
    if (!(Number.isInteger(max) && max >= 1 && max <= 0xffffffff)) {
      throw errors.lapilliError('INVALID_ARGUMENT', `max is ${max}; a batch holds at least one event`)
    }
    if (timeoutMs !== undefined && !(timeoutMs >= 0)) {
      throw errors.lapilliError('INVALID_ARGUMENT', `timeoutMs is ${timeoutMs}; it must be 0 or more (or omitted: wait as long as it takes)`)
    }
    // A loop because another consumer of this subscription may take what #fill found first.
    while (await this.#fill(max, timeoutMs, signal)) {
      const events = this.#buffer.slice(this.#next, this.#next + max)
      if (events.length === 0) continue
      this.#next += events.length
      this.#position = events[events.length - 1].position
      return events
    }
    return this.#ended ? null : []
  }

  /**
   * Waits until `#buffer` holds an event (true), `timeoutMs` passes or the subscription ends
   * (false); rejects with an AbortError when a signal aborts. History comes in batches made off
   * the JS thread; live commits by a wake-up from the native side (no thread waits, nothing
   * polls), after which the fresh events are taken here.
   */
  async #fill(max, timeoutMs, signal) {
    const deadline = timeoutMs === undefined ? Infinity : performance.now() + Math.max(0, timeoutMs)
    while (true) {
      if (this.#abortError !== null) throw this.#abortError
      if (signal !== undefined && signal.aborted) throw abortError(signal)
      if (this.#next < this.#buffer.length) return true
      // Closed natively too (the store closed): a caught-up subscription learns it here.
      if (this.#ended || this.#native.closed) {
        this.#ended = true
        return false
      }
      if (this.#woken && this.#inflight === null) {
        this.#woken = false
        this.#take(call(() => this.#native.tryNextBatch(Math.min(max, LIVE_BATCH))))
        continue
      }
      if (this.#inflight !== null || !this.#native.caughtUp) {
        const pulled = this.#pull(max)
        await abortable(this.#aborted === null ? pulled : Promise.race([pulled, this.#aborted]), signal)
        continue
      }
      const remaining = deadline - performance.now()
      if (remaining <= 0) return false
      await this.#wait(remaining, signal)
    }
  }

  /** Keeps what a native batch brought: its events in `#buffer`, or the end. */
  #take(batch) {
    if (batch === null || batch === undefined) {
      this.#ended = true
    } else if (batch.count > 0 && !this.#ended) {
      this.#buffer = decodeBatch(batch, this.#buffer.slice(this.#next))
      this.#next = 0
    }
  }

  /** Starts a catch-up batch off the JS thread unless one is running; it lands in `#buffer`. */
  #pull(max) {
    if (this.#inflight === null) {
      const pulled = settle(call(() => this.#native.nextBatch(max))).then(
        (batch) => {
          this.#inflight = null
          this.#take(batch)
        },
        (err) => {
          this.#inflight = null
          throw err
        },
      )
      pulled.catch(() => {}) // observed by whoever waits; not unhandled if that call was aborted
      this.#inflight = pulled
    }
    return this.#inflight
  }

  /**
   * Resolves when the native side may have something new (a commit, the end), after `ms`, or
   * rejects when a signal aborts. One native wait serves every consumer waiting at once; when
   * the last of them stops (timeout, abort) it is cancelled, so it holds nothing afterwards
   * (and a following call is not held up by it).
   */
  async #wait(ms, signal) {
    let ready = this.#ready
    if (ready === null) {
      let resolve
      const promise = new Promise((r) => (resolve = r))
      ready = this.#ready = { promise, resolve, waiters: 0 }
      const answered = () => {
        if (this.#ready === ready) {
          this.#ready = null
          this.#woken = true
        }
        resolve()
      }
      call(() => this.#native.onReady(answered))
    }
    ready.waiters++
    let timer
    const racers = [ready.promise]
    if (ms !== Infinity) racers.push(new Promise((r) => (timer = setTimeout(r, Math.min(ms, MAX_TIMER_MS)))))
    if (this.#aborted !== null) racers.push(this.#aborted)
    try {
      await abortable(racers.length === 1 ? ready.promise : Promise.race(racers), signal)
    } finally {
      clearTimeout(timer)
      ready.waiters--
      if (ready.waiters === 0 && this.#ready === ready) {
        this.#ready = null
        this.#native.cancelWait()
      }
    }
  }

  /** Ends the subscription; a pending `nextBatch` or `for await` finishes. Idempotent. */
  close() {
    this.#ended = true
    this.#buffer = []
    this.#next = 0
    if (this.#stopListening !== null) {
      this.#stopListening()
      this.#stopListening = null
    }
    this.#native.close()
    // Waiting consumers end now rather than when the native side's answer to the close comes.
    const ready = this.#ready
    if (ready !== null) {
      this.#ready = null
      this.#native.cancelWait()
      ready.resolve()
    }
  }

  /** `using sub = store.subscribe(...)`: closes the subscription at the end of the block. */
  [disposeSymbol]() {
    this.close()
  }

  /** `await using sub = store.subscribe(...)`. */
  async [asyncDisposeSymbol]() {
    this.close()
  }

  /** Events one by one; `break` (which calls `return()`) closes the subscription. */
  [Symbol.asyncIterator]() {
    const next = async () => {
      while (await this.#fill(SUBSCRIPTION_BATCH, undefined, undefined)) {
        if (this.#next >= this.#buffer.length) continue // another consumer took it
        const event = this.#buffer[this.#next++]
        this.#position = event.position
        return { value: event, done: false }
      }
      return DONE
    }
    return lapilliIterator(next, async () => {
      this.close()
      return DONE
    })
  }
}

// ---------------------------------------------------------------------------------------------
// Store

const STORE_KEY = Symbol('lapilli.store')

function checkPath(path) {
  if (typeof path !== 'string') throw typeError(`path must be a string, got ${describe(path)}`)
  return path
}

/** Answers collected per crossing: bounds the JS work of one callback (a group commit can
 * answer 16,000 appends at once), so the event loop turns between batches of resolutions. */
const ANSWER_BATCH = 1024

/** An open store: one directory, one global order of events. */
class Store {
  #native
  /** `resolve, reject` of each append not yet answered, flat, in call order (the order the
   * answers come in); `#unanswered[#firstUnanswered]` is the oldest's resolve. */
  #unanswered = []
  #firstUnanswered = 0
  #collecting = false

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

  /** How this handle is doing (see `Stats` in lapilli.d.ts); synchronous, like `head()`. */
  stats() {
    const s = call(() => this.#native.stats())
    // The native object leaves optional fields out; a Stats always has both lag fields.
    return { ...s, followerLagPositions: s.followerLagPositions ?? null, followerLagMillis: s.followerLagMillis ?? null }
  }

  /**
   * Appends `events` atomically at consecutive positions if `condition` holds. The append is
   * queued when called (so appends commit in call order) and resolves once committed; a burst
   * larger than the writer's queue waits as pending Promises, never on the event loop.
   */
  append(events, condition) {
    try {
      const checked = checkCondition(condition)
      this.#native.append(checkEvents(events), checked)
    } catch (err) {
      return Promise.reject(translate(err))
    }
    const answered = new Promise((resolve, reject) => this.#unanswered.push(resolve, reject))
    if (!this.#collecting) this.#collectAnswers()
    return answered
  }

  /** Settles queued appends as their answers come, a batch per crossing, while any is left. A
   * pending crossing keeps the process alive, as a pending write on a socket would. */
  async #collectAnswers() {
    this.#collecting = true
    try {
      while (this.#firstUnanswered < this.#unanswered.length) {
        let answers
        try {
          answers = await this.#native.nextAnswers(ANSWER_BATCH)
        } catch (err) {
          this.#failUnanswered(translate(err))
          return
        }
        if (answers.count === 0) {
          this.#failUnanswered(errors.lapilliError('CLOSED', 'the store was closed before the append was answered'))
          return
        }
        this.#settle(answers)
      }
    } finally {
      this.#collecting = false
    }
  }

  #settle({ count, positions, failures }) {
    let failure = 0
    for (let i = 0; i < count; i++) {
      const at = this.#firstUnanswered + 2 * i
      if (failure < failures.length && failures[failure].index === i) {
        this.#unanswered[at + 1](translate(new Error(failures[failure].message)))
        failure++
      } else {
        this.#unanswered[at]({ first: positions[2 * i], last: positions[2 * i + 1] })
      }
    }
    this.#firstUnanswered += 2 * count
    // Drop settled entries now and then rather than shifting the array once per answer.
    if (this.#firstUnanswered === this.#unanswered.length) {
      this.#unanswered = []
      this.#firstUnanswered = 0
    } else if (this.#firstUnanswered > 8192) {
      this.#unanswered = this.#unanswered.slice(this.#firstUnanswered)
      this.#firstUnanswered = 0
    }
  }

  #failUnanswered(err) {
    const unanswered = this.#unanswered
    const first = this.#firstUnanswered
    this.#unanswered = []
    this.#firstUnanswered = 0
    for (let at = first; at < unanswered.length; at += 2) unanswered[at + 1](err)
  }

  /** A snapshot read of the events matching `query` in `(after, until]`; iterate it once.
   * `opts.signal` aborts it: iteration rejects with an AbortError and the snapshot is let go
   * (an already aborted signal throws the AbortError here). */
  read(query, opts) {
    checkQuery('query', query)
    const o = readArgs('opts', opts)
    if (o.signal !== undefined && o.signal.aborted) throw abortError(o.signal)
    return new ReadResult(
      call(() => this.#native.read(query, o.after, o.until, o.limit, o.backwards)),
      o.signal,
    )
  }

  /** The whole of a read at once, with the head it pinned. */
  async readAll(query, opts) {
    const read = this.read(query, opts)
    const events = []
    try {
      for await (const batch of read.batches()) {
        for (let i = 0; i < batch.length; i++) events.push(batch[i])
      }
    } finally {
      read.close()
    }
    return { events, head: read.head }
  }

  /** Every matching event after `opts.after` (default 0): history, then live commits.
   * `opts.signal` ends it: a waiting consumer rejects with an AbortError (an already aborted
   * signal throws it here). */
  subscribe(query, opts) {
    checkQuery('query', query)
    checkObject('opts', opts, true)
    const after = opts === undefined || opts.after === undefined ? 0 : checkNumber('opts.after', opts.after)
    const signal = checkSignal('opts.signal', opts === undefined ? undefined : opts.signal)
    if (signal !== undefined && signal.aborted) throw abortError(signal)
    return new Subscription(call(() => this.#native.subscribe(query, after)), after, signal)
  }

  /** Commits what is queued, ends every subscription and releases the directory. Idempotent. */
  async close() {
    await settle(call(() => this.#native.close()))
  }

  /** `await using store = await Store.open(...)`: closes the store at the end of the block.
   * (No synchronous `Symbol.dispose`: closing waits for the last commit's fsync, which a
   * synchronous dispose would either block the event loop on or not wait for.) */
  [asyncDisposeSymbol]() {
    return this.close()
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
