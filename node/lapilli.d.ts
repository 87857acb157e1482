// Types of the package `lapilli` (hand-written for lapilli.js and errors.js; checked by
// test/types/usage.ts with `tsc --noEmit`, and by test/dispose/ compiled with `await using`).
// `AbortSignal`, `Disposable`, `AsyncDisposable` and `Symbol.asyncDispose` come from
// @types/node (20.4+) or TypeScript's `esnext.disposable` lib.

/** An event to append. `tags` and `data` may be omitted (none, empty). */
export interface EventInput {
  /** 1 to 255 bytes of UTF-8. */
  type: string
  /** Each 1 to 1024 bytes of UTF-8, at most 255, no duplicates; order does not matter. */
  tags?: readonly string[]
  /** Opaque bytes, at most `maxEventBytes`. */
  data?: Uint8Array
}

/** An event as stored, returned by reads and subscriptions. */
export interface SequencedEvent {
  /** 1-based, gapless, in commit order; always within 2^53 - 1. */
  position: number
  /** Commit time of the event's batch in microseconds since the Unix epoch (not a Date:
   * `new Date(e.recordedAt / 1000)` if you want one). Non-decreasing with position. */
  recordedAt: number
  type: string
  /** Sorted bytewise. */
  tags: string[]
  /** A view into the batch the event crossed in (keep a copy with `Buffer.from(data)` if you
   * keep one small event of a large read for long). */
  data: Buffer
}

export interface QueryItem {
  types?: readonly string[]
  tags?: readonly string[]
}

/** What a read, subscription or condition selects. Immutable. */
export declare class Query {
  private constructor()
  readonly all: boolean
  readonly items: ReadonlyArray<{ readonly types: readonly string[]; readonly tags: readonly string[] }>
  /** Matches every event. */
  static all(): Query
  /** Matches an event when any item does: its type is one of `types` (or `types` is empty)
   * and it carries every tag of `tags`. */
  static of(...items: QueryItem[]): Query
  static of(items: readonly QueryItem[]): Query
  /** One item: events carrying every one of `tags`. */
  static forTags(...tags: string[]): Query
  /** One item: events of any of `types`. */
  static forTypes(...types: string[]): Query
}

export interface AppendCondition {
  /** Fail with ConflictError if an event matching this lies after `after`. */
  failIfEventsMatch: Query
  /** The position the decision was made at (`read(...).head`); omitted means 0. */
  after?: number
  /** Fail with AlreadyExistsError if an event matching this lies anywhere. */
  failIfExists?: Query
}

export interface AppendResult {
  first: number
  last: number
}

/** What `Store.stats()` returns. Counters count what this handle did since it was opened (a
 * follower appends nothing: its write counters are 0). */
export interface Stats {
  /** The last committed position this handle sees. */
  head: number
  eventsAppended: number
  /** Log bytes (records and commit markers) this handle wrote. */
  bytesAppended: number
  /** Group commits: one write, and with fsync durability one fsync, each. */
  groupCommits: number
  eventsPerCommitMean: number
  eventsPerCommitMax: number
  /** fsyncs measured by the latency histogram (0 with buffered durability). */
  fsyncs: number
  /** Upper bound of the histogram bucket holding the median (buckets at most 12.5 % wide). */
  fsyncP50Micros: number
  fsyncP99Micros: number
  /** The slowest fsync, exact. */
  fsyncMaxMicros: number
  /** Appends handed to the writer and not yet taken into a group, now and at most. */
  queueDepth: number
  queueDepthMax: number
  segments: number
  /** Bytes of the index files in the store directory. */
  indexBytes: number
  /** Subscriptions of this handle that are not closed. */
  subscriptions: number
  /** For a read-only handle: events committed it has not published yet; null otherwise. */
  followerLagPositions: number | null
  /** For a read-only handle: how long ago the first of them was committed; null otherwise. */
  followerLagMillis: number | null
}

export interface OpenOptions {
  /** "fsync" (default): on disk before an append resolves. "buffered": tests, throwaway data. */
  durability?: 'fsync' | 'buffered'
  /** Bytes per segment file (default 256 MiB). */
  segmentSize?: number
  /** Largest event data in bytes (default 16 MiB). */
  maxEventBytes?: number
}

export interface ReadOptions {
  /** Lower bound, exclusive (default 0). */
  after?: number
  /** Upper bound, inclusive; defaults to and is clamped to the head when the read starts. */
  until?: number
  /** At most this many events (0 returns none). */
  limit?: number
  /** Descend from the upper end of the window. */
  backwards?: boolean
  /** Aborting rejects the read's next step with an AbortError (a DOMException named
   * 'AbortError' whose `cause` is the signal's reason) and lets the snapshot go. An already
   * aborted signal makes `read` throw it. */
  signal?: AbortSignal
}

export interface SubscribeOptions {
  /** Deliver events after this position (default 0: from the start). */
  after?: number
  /** Aborting ends the subscription: a waiting or later `nextBatch` / `for await` rejects with
   * an AbortError (`cause`: the signal's reason). An already aborted signal makes `subscribe`
   * throw it. */
  signal?: AbortSignal
}

export interface NextBatchOptions {
  /** Aborting rejects this call with an AbortError at once and ends its wait (a following
   * call is not held up by it); the subscription goes on, and events a catch-up batch already
   * in flight brings in are kept for the next call. */
  signal?: AbortSignal
}

/**
 * What `for await` drives, as the code builds it: `next`, `return` (which `break` calls, and
 * which closes the read or subscription), and `Symbol.asyncDispose` (the same). No `throw`:
 * this is not an async generator.
 */
export interface LapilliIterator<T> extends AsyncIterator<T, undefined, undefined>, AsyncDisposable {
  next(): Promise<IteratorResult<T, undefined>>
  return(): Promise<IteratorReturnResult<undefined>>
  [Symbol.asyncIterator](): LapilliIterator<T>
  [Symbol.asyncDispose](): Promise<void>
}

/** A consistent snapshot read, iterated once. `using` / `await using` closes it. */
export declare class ReadResult implements AsyncIterable<SequencedEvent>, Disposable, AsyncDisposable {
  private constructor()
  /** The store head pinned when the read began: the `after` for a decision built on it. */
  readonly head: number
  /** True once the read has let its snapshot go: read to the end, closed or aborted. */
  readonly closed: boolean
  /** The events in arrays, as they cross from Rust (the fastest way through a large read).
   * Throws a TypeError if the read was iterated already. */
  batches(): LapilliIterator<SequencedEvent[]>
  [Symbol.asyncIterator](): LapilliIterator<SequencedEvent>
  /** Lets the snapshot go now; iteration after it ends. Idempotent. */
  close(): void
  [Symbol.dispose](): void
  [Symbol.asyncDispose](): Promise<void>
}

/** History, then live commits, in position order. `break` in `for await`, `using` and
 * `await using` close it. A consumer waiting for live commits holds no thread (the store tells
 * it when the head moves) and keeps the process alive, as a pending socket read does; closing
 * the subscription or the store ends the wait. */
export declare class Subscription implements AsyncIterable<SequencedEvent>, Disposable, AsyncDisposable {
  private constructor()
  /** True when everything committed so far has been handed out. */
  readonly caughtUp: boolean
  /** The last position handed out: subscribe again with `after` = this to resume. */
  readonly position: number
  readonly closed: boolean
  /** Up to `max` (default 1024) events, waiting at most `timeoutMs` (default: as long as it
   * takes; 0: only what is there now). `[]` on timeout, `null` once ended. */
  nextBatch(max?: number, timeoutMs?: number, options?: NextBatchOptions): Promise<SequencedEvent[] | null>
  /** Ends the subscription; a pending `nextBatch` or `for await` finishes. Idempotent. */
  close(): void
  [Symbol.asyncIterator](): LapilliIterator<SequencedEvent>
  [Symbol.dispose](): void
  [Symbol.asyncDispose](): Promise<void>
}

/** An open store: one directory, one global order of events. */
export declare class Store implements AsyncDisposable {
  private constructor()
  /** Opens (creating if missing) the store in `path`. Rejects with StoreLockedError if another
   * handle holds it. */
  static open(path: string, options?: OpenOptions): Promise<Store>
  /** A read-only handle (a follower) on a store another process may be writing: it never takes
   * the lock or writes a byte, sees whole committed batches only and follows new commits within
   * milliseconds; `append` on it rejects with ReadOnlyError. A missing directory, or a
   * PostgreSQL URL whose context does not exist, rejects with an IO error. */
  static openReadOnly(path: string): Promise<Store>
  /** The last committed position (0 for an empty store). */
  head(): number
  /** How this handle is doing: head, what it appended since it was opened, group commits,
   * fsync latency, queue depth, segments, index bytes, open subscriptions, follower lag. */
  stats(): Stats
  /** Appends atomically if `condition` holds; queued when called, resolves once committed. */
  append(events: readonly EventInput[], condition?: AppendCondition | null): Promise<AppendResult>
  /** A snapshot read of the matching events in `(after, until]`. */
  read(query: Query, options?: ReadOptions): ReadResult
  /** The whole read at once, with the head it pinned. */
  readAll(query: Query, options?: ReadOptions): Promise<{ events: SequencedEvent[]; head: number }>
  subscribe(query: Query, options?: SubscribeOptions): Subscription
  /** Commits what is queued, ends every subscription, releases the directory. Idempotent. */
  close(): Promise<void>
  /** `await using store = await Store.open(dir)`: `close()` at the end of the block. (No
   * `Symbol.dispose`: closing waits for the final fsync.) */
  [Symbol.asyncDispose](): Promise<void>
}

export type ErrorCode =
  | 'CONFLICT'
  | 'ALREADY_EXISTS'
  | 'INVALID_ARGUMENT'
  | 'STORE_LOCKED'
  | 'CLOSED'
  | 'READ_ONLY'
  | 'CORRUPTION'
  | 'IO'

/** The base of every error the engine reports. */
export declare class LapilliError extends Error {
  readonly code: ErrorCode
  /** The error this one reports: for an engine error, the Error the native addon raised (its
   * message still carries the encoded `[CODE@position]`). */
  readonly cause?: unknown
  /** The first conflicting event, for ConflictError and AlreadyExistsError. */
  readonly position?: number
}
export declare class ConflictError extends LapilliError {
  readonly code: 'CONFLICT'
}
export declare class AlreadyExistsError extends LapilliError {
  readonly code: 'ALREADY_EXISTS'
}
export declare class InvalidArgumentError extends LapilliError {
  readonly code: 'INVALID_ARGUMENT'
}
export declare class StoreLockedError extends LapilliError {
  readonly code: 'STORE_LOCKED'
}
export declare class StoreClosedError extends LapilliError {
  readonly code: 'CLOSED'
}
export declare class ReadOnlyError extends LapilliError {
  readonly code: 'READ_ONLY'
}
export declare class CorruptionError extends LapilliError {
  readonly code: 'CORRUPTION'
}
export declare class LapilliIOError extends LapilliError {
  readonly code: 'IO'
}
