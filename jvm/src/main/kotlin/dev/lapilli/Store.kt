package dev.lapilli

import dev.lapilli.ffi.FfiOptions
import dev.lapilli.ffi.FfiReadOptions
import dev.lapilli.ffi.FfiStore
import java.nio.file.Path

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

    companion object {
        /** Opens (creating it if missing) the store in [path], recovering its log. */
        @JvmStatic
        @JvmOverloads
        fun open(path: String, options: Options = Options()): Store {
            if (options.segmentSize < 0) invalid("segmentSize is ${options.segmentSize}; it must not be negative")
            if (options.maxEventBytes < 0) invalid("maxEventBytes is ${options.maxEventBytes}; it must not be negative")
            val ffi = FfiOptions(options.durability.wire, options.segmentSize.toULong(), options.maxEventBytes.toULong())
            return Store(ffiCall("store") { FfiStore.open(path, ffi) })
        }

        @JvmStatic
        @JvmOverloads
        fun open(path: Path, options: Options = Options()): Store = open(path.toString(), options)

        /**
         * A read-only handle (a follower) on a store another process may be writing: it never
         * takes the lock or writes a byte, sees whole committed batches only and follows new
         * commits within milliseconds; its appends raise [LapilliException.ReadOnly]. A missing
         * directory raises [LapilliException.Io].
         */
        @JvmStatic
        fun openReadOnly(path: String): Store = Store(ffiCall("store") { FfiStore.openReadOnly(path) })

        @JvmStatic
        fun openReadOnly(path: Path): Store = openReadOnly(path.toString())

        /** Events per native call when reading: reads cross the FFI in batches. */
        internal const val READ_BATCH = 1024
    }

    /** The last committed position (0 for an empty store). */
    fun head(): Long = ffiCall("store") { ffi.head() }.toLong()

    /** Appends [events] atomically at consecutive positions if [condition] holds; blocks until committed. */
    @JvmOverloads
    fun append(events: List<Event>, condition: AppendCondition? = null): AppendResult {
        val (ffiEvents, ffiCondition) = encode(events, condition)
        val r = ffiCall("store") { ffi.append(ffiEvents, ffiCondition) }
        return AppendResult(r.first.toLong(), r.last.toLong())
    }

    /** One event. */
    @JvmOverloads
    fun append(event: Event, condition: AppendCondition? = null): AppendResult = append(listOf(event), condition)

    /**
     * Like [append] but suspends instead of blocking a thread. The append is handed to the
     * writer at once, so appends from many coroutines share group commits (one fsync each).
     * Cancelling the caller does not cancel a submitted append: it is committed or refused whole.
     */
    suspend fun appendAsync(events: List<Event>, condition: AppendCondition? = null): AppendResult {
        val (ffiEvents, ffiCondition) = encode(events, condition)
        val r = ffiCall("store") { ffi.appendAsync(ffiEvents, ffiCondition) }
        return AppendResult(r.first.toLong(), r.last.toLong())
    }

    suspend fun appendAsync(event: Event, condition: AppendCondition? = null): AppendResult =
        appendAsync(listOf(event), condition)

    private fun encode(events: List<Event>, condition: AppendCondition?) =
        Pair(events.map { it.toFfi() }, condition?.toFfi())

    /**
     * The events matching [query] in the window of [options], as a lazy [ReadResult] (a
     * `Sequence`, iterable once) over a consistent snapshot; its [ReadResult.head] is the head
     * pinned when the read began.
     */
    @JvmOverloads
    fun read(query: Query, options: ReadOptions = ReadOptions()): ReadResult {
        val ffiOptions = FfiReadOptions(
            positionArg("after", options.after),
            options.until?.let { positionArg("until", it) },
            options.limit?.let {
                if (it < 0) invalid("limit is $it; it must not be negative")
                it.toULong()
            },
            options.backwards,
        )
        val ffiQuery = query.toFfi()
        return ReadResult(ffiCall("store") { ffi.read(ffiQuery, ffiOptions) }, READ_BATCH)
    }

    /**
     * Every event matching [query] with position greater than [after], history first, then live
     * commits, with no gap and no duplicate. Close the [Subscription] (or use [asFlow]) when done.
     */
    @JvmOverloads
    fun subscribe(query: Query, after: Long = 0): Subscription {
        val ffiAfter = positionArg("after", after)
        val ffiQuery = query.toFfi()
        return Subscription(ffiCall("store") { ffi.subscribe(ffiQuery, ffiAfter) })
    }

    /** Group commits (one write and, with fsync, one fsync each) made by this handle; for tests. */
    internal fun groupCommits(): Long = ffiCall("store") { ffi.groupCommits() }.toLong()

    /**
     * Answers queued appends, ends every subscription, releases the lock and the native handle.
     * Idempotent; later calls raise [LapilliException.Closed].
     */
    override fun close() {
        if (ffi.uniffiIsDestroyed) return
        try {
            ffiCall("store") { ffi.closeStore() }
        } finally {
            ffi.close()
        }
    }
}
