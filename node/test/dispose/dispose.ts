// `await using` and `using` with the package, as TypeScript users write them: compiled by tsc
// (target ES2022, so the declarations are downlevelled to tsc's dispose helpers, which look up
// Symbol.dispose / Symbol.asyncDispose at run time) and run by test/dispose.test.mjs. Each
// function hands back what the test checks after the block has left.
import { Query, Store, StoreClosedError, type ReadResult, type Subscription } from '../../lapilli.js'

/** The store is closed at the end of the block: the directory is free to open again. */
export async function storeBlock(dir: string): Promise<{ inside: number; closedAfter: boolean; reopenedHead: number }> {
  let escaped: Store
  let inside: number
  {
    await using store = await Store.open(dir, { durability: 'buffered' })
    await store.append([{ type: 'A' }, { type: 'B' }])
    inside = store.head()
    escaped = store
  }
  let closedAfter = false
  try {
    escaped.head()
  } catch (err) {
    closedAfter = err instanceof StoreClosedError
  }
  await using again = await Store.open(dir, { durability: 'buffered' })
  return { inside, closedAfter, reopenedHead: again.head() }
}

/** Disposal runs when the block throws, in reverse order: the subscription, then the store. */
export async function throwingBlock(dir: string): Promise<{ thrown: string; subClosed: boolean; storeClosed: boolean }> {
  let sub: Subscription | undefined
  let store: Store | undefined
  let thrown = ''
  try {
    await using s = await Store.open(dir, { durability: 'buffered' })
    store = s
    await using live = s.subscribe(Query.all())
    sub = live
    await s.append([{ type: 'A' }])
    throw new Error('decision failed')
  } catch (err) {
    thrown = (err as Error).message
  }
  let storeClosed = false
  try {
    store!.head()
  } catch (err) {
    storeClosed = err instanceof StoreClosedError
  }
  return { thrown, subClosed: sub!.closed, storeClosed }
}

/** Reads and subscriptions close with `using` (synchronous) and `await using`; so do the
 * iterators `for await` uses, and a read left half-way lets its snapshot go. */
export async function readsAndSubscriptions(dir: string): Promise<Record<string, boolean | number>> {
  await using store = await Store.open(dir, { durability: 'buffered' })
  await store.append(Array.from({ length: 5000 }, () => ({ type: 'E', tags: ['t'] })))
  let read: ReadResult
  let firstPosition = 0
  {
    using r = store.read(Query.forTags('t'))
    read = r
    for await (const event of r) {
      firstPosition = event.position
      break
    }
  }
  let halfRead: ReadResult
  {
    await using r = store.read(Query.all())
    halfRead = r
    const first = await r.batches().next()
    if (first.done || first.value.length === 0) throw new Error('no first batch')
  }
  let iterated: ReadResult
  {
    iterated = store.read(Query.all())
    await using events = iterated[Symbol.asyncIterator]()
    await events.next()
  }
  let sub: Subscription
  {
    using s = store.subscribe(Query.all())
    sub = s
    await s.nextBatch(10, 0)
  }
  let subIterated: Subscription
  {
    subIterated = store.subscribe(Query.all())
    await using events = subIterated[Symbol.asyncIterator]()
    await events.next()
  }
  // A read disposed while it prefetches its next batch lets its snapshot go when that batch
  // comes back (the native side holds it until then), so give it that long.
  return {
    firstPosition,
    readClosed: await soon(() => read.closed),
    halfReadClosed: await soon(() => halfRead.closed),
    iteratedClosed: await soon(() => iterated.closed),
    subClosed: sub.closed,
    subIteratedClosed: subIterated.closed,
  }
}

/** Whether `check` holds within two seconds. */
async function soon(check: () => boolean): Promise<boolean> {
  const deadline = Date.now() + 2000
  while (!check()) {
    if (Date.now() >= deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  return true
}
