package dev.lapilli

import dev.lapilli.ffi.FfiOptions
import dev.lapilli.ffi.FfiStore
import dev.lapilli.ffi.storeReadPacked
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.future.await
import java.nio.file.Path
import java.util.concurrent.CompletableFuture

/**
 * An open store: one directory holding one bounded context, one global order of events.
 * Only one handle, in any process, may hold a store writable ([LapilliException.StoreLocked]).
 * Thread-safe; close it with `use {}` or [close].
 *
 * ```
 * Store.open("/var/lib/app/events").use { store ->
 *     val query = Query.forTags("course:c1")
 *     val seen = store.read(query)
 *     val decidedAt = seen.head
 *     // ... decide from seen ...
 *     store.append(listOf(Event("CourseDefined", listOf("course:c1"), "{}")),
 *                  AppendCondition(query, after = decidedAt))
 * }
 * ```
 */
class Store private constructor(private val ffi: FfiStore) : AutoCloseable {

    private val handle = Released()

    /**
     * The store's key for the native free functions that appends call: one JNA call per
     * append, where a method of [ffi] is two (UniFFI clones the handle first).
     */
    private val id: ULong = ffi.id()

    /** Completes async appends and wakes waiting subscriptions: one thread, on first use. */
    private val completions = Completions(ffi, id, handle)

    companion object {
        /** Opens (creating it if missing) the store in [path], recovering its log. */
        @JvmStatic
        @JvmOverloads
        fun open(path: String, options: Options = Options()): Store {
            if (options.segmentSize < 0) invalid("segmentSize is ${options.segmentSize}; it must not be negative")
            if (options.maxEventBytes < 0) invalid("maxEventBytes is ${options.maxEventBytes}; it must not be negative")
            val ffi = FfiOptions(options.durability.wire, options.segmentSize.toULong(), options.maxEventBytes.toULong())
            NativeLibrary.select()
            DirectCalls.verify()
            return Store(ffiCall("store", null) { FfiStore.open(path, ffi) })
        }

        @JvmStatic
        @JvmOverloads
        fun open(path: Path, options: Options = Options()): Store = open(path.toString(), options)

        /**
         * A read-only handle (a follower) on a store another process may be writing: it never
         * takes the lock or writes a byte, sees whole committed batches only and follows new
         * commits within milliseconds; its appends raise [LapilliException.ReadOnly]. A missing
         * directory, or a PostgreSQL URL whose context does not exist, raises
         * [LapilliException.Io].
         */
        @JvmStatic
        fun openReadOnly(path: String): Store {
            NativeLibrary.select()
            DirectCalls.verify()
            return Store(ffiCall("store", null) { FfiStore.openReadOnly(path) })
        }

        @JvmStatic
        fun openReadOnly(path: Path): Store = openReadOnly(path.toString())

        /** Events per native call when reading: reads cross the FFI in batches. */
        internal const val READ_BATCH = 1024
    }

    /** The last committed position (0 for an empty store). */
    fun head(): Long = ffiCall("store", handle) { ffi.head() }.toLong()

    /**
     * How this handle is doing: head, what it appended since it was opened, group commits,
     * fsync latency, queue depth, segments, index bytes, open subscriptions, and for a follower
     * its lag (see [Stats]).
     */
    fun stats(): Stats = ffiCall("store", handle) { ffi.stats() }.let { s ->
        Stats(
            head = s.head.toLong(),
            eventsAppended = s.eventsAppended.toLong(),
            bytesAppended = s.bytesAppended.toLong(),
            groupCommits = s.groupCommits.toLong(),
            eventsPerCommitMean = s.eventsPerCommitMean,
            eventsPerCommitMax = s.eventsPerCommitMax.toLong(),
            fsyncs = s.fsyncs.toLong(),
            fsyncP50Micros = s.fsyncP50Micros.toLong(),
            fsyncP99Micros = s.fsyncP99Micros.toLong(),
            fsyncMaxMicros = s.fsyncMaxMicros.toLong(),
            queueDepth = s.queueDepth.toLong(),
            queueDepthMax = s.queueDepthMax.toLong(),
            segments = s.segments.toLong(),
            indexBytes = s.indexBytes.toLong(),
            subscriptions = s.subscriptions.toLong(),
            followerLagPositions = s.followerLagPositions?.toLong(),
            followerLagMillis = s.followerLagMillis?.toLong(),
        )
    }

    /**
     * Appends [events] atomically at consecutive positions if [condition] holds; blocks until
     * committed. One native call (one JNA crossing): the request crosses as one buffer.
     */
    @JvmOverloads
    fun append(events: List<Event>, condition: AppendCondition? = null): AppendResult {
        val packed = PackedAppend(events, condition)
        val first = packed.withNative { address, len -> ffiCall("store", handle) { DirectCalls.appendPacked(id, address, len) } }
        return AppendResult(first, first + packed.count - 1)
    }

    /** One event. */
    @JvmOverloads
    fun append(event: Event, condition: AppendCondition? = null): AppendResult = append(listOf(event), condition)

    /**
     * Like [append] but returns at once with a future that the store's completion thread
     * completes when the batch is committed (or refused: completed exceptionally with the
     * [LapilliException]). Appends handed over this way from many threads share group commits.
     * Cancelling the future does not cancel the append: it is committed or refused whole.
     * Stages attached with the non-`Async` `CompletableFuture` methods run on that completion
     * thread: keep them short, or use the `...Async` variants.
     */
    @JvmOverloads
    fun appendFuture(events: List<Event>, condition: AppendCondition? = null): CompletableFuture<AppendResult> =
        try {
            completions.submit(PackedAppend(events, condition))
        } catch (e: LapilliException) {
            CompletableFuture.failedFuture(e)
        }

    /** One event. */
    @JvmOverloads
    fun appendFuture(event: Event, condition: AppendCondition? = null): CompletableFuture<AppendResult> =
        appendFuture(listOf(event), condition)

    /**
     * Like [append] but suspends instead of blocking a thread: the append is handed to the
     * writer at once, so appends from many coroutines share group commits (one fsync each), and
     * the coroutine is resumed from the store's completion thread (never the writer). Cancelling
     * the caller does not cancel a submitted append: it is committed or refused whole.
     */
    suspend fun appendAsync(events: List<Event>, condition: AppendCondition? = null): AppendResult =
        completions.submit(PackedAppend(events, condition)).await()

    suspend fun appendAsync(event: Event, condition: AppendCondition? = null): AppendResult =
        appendAsync(listOf(event), condition)

    /**
     * The events matching [query] in the window of [options], as a lazy [ReadResult] (a
     * `Sequence`, iterable once) over a consistent snapshot; its [ReadResult.head] is the head
     * pinned when the read began.
     */
    @JvmOverloads
    fun read(query: Query, options: ReadOptions = ReadOptions()): ReadResult {
        // One JNA call: the query and options cross packed, as an append's request does.
        val packed = PackedRead(query, options)
        return ReadResult(packed.withNative { address, len -> ffiCall("store", handle) { storeReadPacked(id, address.toULong(), len.toULong()) } }, READ_BATCH)
    }

    /**
     * Every event matching [query] with position greater than [after], history first, then live
     * commits, with no gap and no duplicate. Close the [Subscription] when done, or use
     * [subscribeFlow].
     */
    @JvmOverloads
    fun subscribe(query: Query, after: Long = 0): Subscription {
        val ffiAfter = positionArg("after", after)
        val ffiQuery = query.toFfi()
        return Subscription(ffiCall("store", handle) { ffi.subscribe(ffiQuery, ffiAfter) }, completions)
    }

    /**
     * The events matching [query] after [after] as a cold [Flow]: each collection opens its own
     * subscription (history first, then live commits) and closes it when the collector stops
     * (cancellation, an operator such as `take(n)`, or an exception). The flow completes when the
     * subscription ends (the store closed). Waiting for commits holds no thread: the collector
     * suspends and is resumed from the store's completion thread. Batches of [batchSize] events
     * are fetched at a time.
     */
    @JvmOverloads
    fun subscribeFlow(query: Query, after: Long = 0, batchSize: Int = 256): Flow<SequencedEvent> {
        if (batchSize <= 0) invalid("batchSize is $batchSize; a batch holds at least one event")
        positionArg("after", after)
        return flow {
            subscribe(query, after).use { sub ->
                while (true) {
                    val batch = sub.nextBatchAsync(batchSize) ?: break
                    for (event in batch) emit(event)
                }
            }
        }
    }

    /** Group commits (one write and, with fsync, one fsync each) made by this handle; for tests. */
    internal fun groupCommits(): Long = ffiCall("store", handle) { ffi.groupCommits() }.toLong()

    /**
     * Answers queued appends, ends every subscription, releases the lock and the native handle.
     * Idempotent; later calls raise [LapilliException.Closed].
     */
    override fun close() {
        if (!handle.release()) return
        try {
            ffiCall("store", null) { ffi.closeStore() }
        } finally {
            ffi.close()
        }
    }
}
