package dev.lapilli

import dev.lapilli.ffi.FfiSubscription
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.future.await
import java.util.concurrent.CompletableFuture
import kotlin.time.Duration

/**
 * A live, ordered feed of the events matching a query (API.md, "Subscribe"): history first
 * (catch-up), then new commits, as one loop. Pull it blocking with [nextBatch] / [next], or
 * without a thread with [nextBatchAsync] (suspending) / [nextBatchFuture]; or collect
 * [Store.subscribeFlow]. [close] may be called from any thread and wakes a waiting consumer;
 * closing the store ends the subscription too. A subscriber never holds up the writer.
 * One consumer at a time: concurrent calls are served one after another.
 */
class Subscription internal constructor(
    private val ffi: FfiSubscription,
    private val completions: Completions,
) : AutoCloseable {

    private val handle = Released()

    /**
     * The subscription's string table (see [StringTable]); dropped, and so freed, on [close].
     * Its lock makes concurrent consumers take batches one after another. Internal, not
     * private: a test puts a table that is not the engine's here.
     */
    @Volatile internal var strings: StringTable? = StringTable()

    /** How many strings this subscription's table holds here, null once it is closed (for tests). */
    internal val stringsHeld: Int? get() = strings?.size

    /** How many strings the engine's table for this subscription holds (for tests). */
    internal fun nativeStringsHeld(): Int = ffiCall("subscription", handle) { ffi.stringsHeld() }.toInt()

    /**
     * Up to [max] events, blocking the calling thread until there is at least one.
     * `null`: the subscription has ended (closed, or its store closed).
     */
    @JvmOverloads
    fun nextBatch(max: Int = DEFAULT_BATCH): List<SequencedEvent>? = nextBatchMillis(max, null)

    /**
     * Up to [max] events. `null`: the subscription has ended (closed, or its store closed).
     * An empty list: [timeout] passed with nothing new. `timeout = null` (or
     * `Duration.INFINITE`) waits as long as it takes (until an event arrives or someone calls
     * [close]).
     */
    fun nextBatch(max: Int, timeout: Duration?): List<SequencedEvent>? {
        val ms = timeout?.takeIf { it.isFinite() }?.let {
            if (it.isNegative()) invalid("timeout is $it; it must not be negative")
            it.inWholeMilliseconds
        }
        return nextBatchMillis(max, ms)
    }

    /** [nextBatch] with a `java.time.Duration` timeout, for Java callers. */
    fun nextBatch(max: Int, timeout: java.time.Duration): List<SequencedEvent>? {
        if (timeout.isNegative) invalid("timeout is $timeout; it must not be negative")
        return nextBatchMillis(max, runCatching { timeout.toMillis() }.getOrDefault(Long.MAX_VALUE))
    }

    private fun nextBatchMillis(max: Int, ms: Long?): List<SequencedEvent>? {
        checkMax(max)
        if (handle.released) return null
        val table = strings ?: return null
        return try {
            fetchBatch(table) { epoch, size, address, capacity ->
                ffiCall("subscription", handle) {
                    ffi.nextBatchInto(max.toUInt(), ms?.toULong(), epoch.toULong(), size.toUInt(), address.toULong(), capacity.toULong())
                }
            }
        } catch (e: LapilliException.Closed) {
            null // released by close() while we were calling
        }
    }

    /** The next event, or `null` if [timeout] passed first or the subscription ended ([isClosed] tells which). */
    fun next(timeout: Duration?): SequencedEvent? = nextBatch(1, timeout)?.firstOrNull()

    /** The next event, blocking until there is one; `null`: the subscription ended. */
    fun next(): SequencedEvent? = nextBatch(1)?.firstOrNull()

    /** [next] with a `java.time.Duration` timeout, for Java callers. */
    fun next(timeout: java.time.Duration): SequencedEvent? = nextBatch(1, timeout)?.firstOrNull()

    /**
     * Up to [max] events, suspending (no thread held) until there is at least one; `null`: the
     * subscription has ended. The coroutine is resumed from the store's completion thread when
     * the head moves or the subscription or store closes. Cancellable; cancelling loses nothing
     * (the next call carries on from the same cursor).
     */
    suspend fun nextBatchAsync(max: Int = DEFAULT_BATCH): List<SequencedEvent>? {
        checkMax(max)
        while (true) {
            val (token, ready) = completions.newWait()
            when (val answer = tryOrArm(max, token)) {
                Armed -> ready.await()
                else -> {
                    completions.cancelWait(token)
                    @Suppress("UNCHECKED_CAST")
                    return answer as List<SequencedEvent>?
                }
            }
        }
    }

    /**
     * [nextBatchAsync] for Java: a future completed (on the store's completion thread, or at
     * once) with up to [max] events, or `null` once the subscription has ended. Holds no thread
     * while it waits.
     */
    @JvmOverloads
    fun nextBatchFuture(max: Int = DEFAULT_BATCH): CompletableFuture<List<SequencedEvent>?> {
        try {
            checkMax(max)
            val (token, ready) = completions.newWait()
            return when (val answer = tryOrArm(max, token)) {
                Armed -> ready.thenCompose { nextBatchFuture(max) }
                else -> {
                    completions.cancelWait(token)
                    @Suppress("UNCHECKED_CAST")
                    CompletableFuture.completedFuture(answer as List<SequencedEvent>?)
                }
            }
        } catch (e: LapilliException) {
            return CompletableFuture.failedFuture(e)
        }
    }

    /** What is there now (a list, or `null`: ended), or [Armed]: a port record will say when to try again. */
    private fun tryOrArm(max: Int, token: Long): Any? {
        if (handle.released) return null
        val table = strings ?: return null
        val batch = try {
            fetchBatch(table) { epoch, size, address, capacity ->
                ffiCall("subscription", handle) {
                    ffi.tryNextBatchOrArmInto(max.toUInt(), token.toULong(), epoch.toULong(), size.toUInt(), address.toULong(), capacity.toULong())
                }
            }
        } catch (e: LapilliException.Closed) {
            return null
        } ?: return null
        if (batch.isNotEmpty()) return batch
        completions.armed(token)
        return Armed
    }

    private object Armed

    private fun checkMax(max: Int) {
        if (max <= 0) invalid("max is $max; a batch holds at least one event")
    }

    /** True whenever everything committed so far has been delivered. */
    val caughtUp: Boolean get() = guarded { ffi.caughtUp() } ?: false

    /** The resume cursor: the last delivered position; subscribe again with `after = position` to resume. */
    val position: Long
        get() {
            lastPosition = guarded { ffi.position().toLong() } ?: lastPosition
            return lastPosition
        }

    @Volatile private var lastPosition = 0L

    /** True once this subscription or its store was closed. */
    val isClosed: Boolean get() = guarded { ffi.isClosed() } ?: true

    private inline fun <T> guarded(block: () -> T): T? =
        try {
            ffiCall("subscription", handle, block)
        } catch (e: LapilliException.Closed) {
            null
        }

    /** Ends the subscription (a waiting consumer wakes with `null`) and releases the handle. Idempotent. */
    override fun close() {
        lastPosition = guarded { ffi.position().toLong() } ?: lastPosition
        strings = null
        if (!handle.release()) return
        try {
            ffiCall("subscription", null) { ffi.closeSubscription() }
        } finally {
            ffi.close()
        }
    }

    private companion object {
        const val DEFAULT_BATCH = 256
    }
}

/**
 * This subscription as a [Flow] of events, fetched in batches of [batchSize] without holding a
 * thread. It completes when the subscription ends, and closes the subscription when the
 * collector stops. It can be collected once (the subscription is consumed); for a cold flow
 * that opens a subscription per collector use [Store.subscribeFlow].
 */
fun Subscription.asFlow(batchSize: Int = 256): Flow<SequencedEvent> = flow {
    use {
        while (true) {
            val batch = nextBatchAsync(batchSize) ?: break
            for (event in batch) emit(event)
        }
    }
}
