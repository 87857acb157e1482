// A typed use of every public entry point: `tsc --noEmit -p test/types` must accept it, so the
// hand-written lapilli.d.ts stays in step with how the package is meant to be used.
import {
  AlreadyExistsError,
  ConflictError,
  LapilliError,
  Query,
  ReadOnlyError,
  Store,
  type AppendResult,
  type ErrorCode,
  type EventInput,
  type LapilliIterator,
  type SequencedEvent,
  type Stats,
} from '../../lapilli.js'

export async function usage(dir: string): Promise<number> {
  const store: Store = await Store.open(dir, { durability: 'buffered', segmentSize: 1 << 20, maxEventBytes: 4096 })
  const course = Query.forTags('course:c1')
  const events: EventInput[] = [
    { type: 'CourseDefined', tags: ['course:c1'], data: Buffer.from('{"capacity":10}') },
    { type: 'Nothing' },
    { type: 'Bytes', data: new Uint8Array([0, 255]) },
  ]
  const read = store.read(course, { after: 0, until: store.head(), limit: 10, backwards: false })
  const decidedAt: number = read.head
  for await (const event of read) {
    const e: SequencedEvent = event
    const when: Date = new Date(e.recordedAt / 1000)
    void when
    void e.data.toString('utf8')
  }
  const appended: AppendResult = await store.append(events, { failIfEventsMatch: course, after: decidedAt })
  await store.append(events, null)
  await store.append([{ type: 'X', tags: ['k'] }], {
    failIfEventsMatch: Query.all(),
    failIfExists: Query.of({ types: ['X'], tags: ['k'] }, { tags: ['other'] }),
  })
  const all = await store.readAll(Query.forTypes('CourseDefined', 'Nothing'))
  const first: SequencedEvent | undefined = all.events[0]
  void first
  for await (const batch of store.read(Query.of([{ tags: ['k'] }])).batches()) {
    const n: number = batch.length
    void n
  }
  const controller = new AbortController()
  const cancellable = store.read(Query.all(), { signal: controller.signal })
  const iterator: LapilliIterator<SequencedEvent> = cancellable[Symbol.asyncIterator]()
  const step: IteratorResult<SequencedEvent, undefined> = await iterator.next()
  void step
  await iterator.return()
  const released: boolean = cancellable.closed
  void released
  const sub = store.subscribe(Query.all(), { after: 0, signal: controller.signal })
  const waited: SequencedEvent[] | null = await sub.nextBatch(10, 100, { signal: AbortSignal.timeout(50) })
  void waited
  const batch: SequencedEvent[] | null = await sub.nextBatch(10, 0)
  void batch
  for await (const event of sub) {
    if (event.position >= appended.last) break
  }
  const caught: boolean = sub.caughtUp
  const at: number = sub.position
  void caught
  sub.close()
  try {
    await store.append([{ type: 'X' }], { failIfEventsMatch: course })
  } catch (err) {
    if (err instanceof ConflictError) {
      const cause: unknown = err.cause
      void cause
      const code: 'CONFLICT' = err.code
      const position: number | undefined = err.position
      void code, position
    } else if (err instanceof AlreadyExistsError || err instanceof ReadOnlyError) {
      throw err
    } else if (err instanceof LapilliError) {
      const code: ErrorCode = err.code
      void code
    }
  }
  await Store.openReadOnly(dir).catch((err: unknown) => err instanceof ReadOnlyError)
  const stats: Stats = store.stats()
  const lag: number | null = stats.followerLagPositions
  const p99: number = stats.fsyncP99Micros
  void lag, p99
  await store.close()
  return at
}
