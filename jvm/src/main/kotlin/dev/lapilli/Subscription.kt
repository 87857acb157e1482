package dev.lapilli

import dev.lapilli.ffi.FfiSubscription
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.withContext
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds

/**
 * A live, ordered feed of the events matching a query (API.md, "Subscribe"): history first
 * (catch-up), then new commits, as one loop. Pull it with [nextBatch] / [next], or collect
 * [asFlow]. [close] may be called from any thread and wakes a blocked consumer; closing the
 * store ends the subscription too. A subscriber never holds up the writer.
 */
class Subscription internal constructor(private val ffi: FfiSubscription) : AutoCloseable {

    /**
     * Up to [max] events. `null`: the subscription has ended (closed, or its store closed).
     * An empty list: [timeout] passed with nothing new. `timeout = null` (or
     * `Duration.INFINITE`) waits as long as it takes (until an event arrives or someone calls
     * [close]).
     */
    @JvmOverloads
    fun nextBatch(max: Int = 256, timeout: Duration? = null): List<SequencedEvent>? {
        if (max <= 0) invalid("max is $max; a batch holds at least one event")
        val ms = timeout?.takeIf { it.isFinite() }?.let {
            if (it.isNegative()) invalid("timeout is $it; it must not be negative")
            it.inWholeMilliseconds.toULong()
        }
        if (ffi.uniffiIsDestroyed) return null
        val batch = try {
            ffiCall("subscription") { ffi.nextBatch(max.toUInt(), ms) }
        } catch (e: LapilliException.Closed) {
            return null // the handle was released by close() while we were calling
        }
        return batch?.map(SequencedEvent::of)
    }

    /** The next event, or `null` if [timeout] passed first or the subscription ended ([isClosed] tells which). */
    @JvmOverloads
    fun next(timeout: Duration? = null): SequencedEvent? = nextBatch(1, timeout)?.firstOrNull()

    /** True whenever everything committed so far has been delivered. */
    val caughtUp: Boolean get() = if (ffi.uniffiIsDestroyed) false else guarded { ffi.caughtUp() } ?: false

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
            ffiCall("subscription", block)
        } catch (e: LapilliException.Closed) {
            null
        }

    /** Ends the subscription (a blocked [nextBatch] wakes with `null`) and releases the handle. Idempotent. */
    override fun close() {
        if (ffi.uniffiIsDestroyed) return
        lastPosition = guarded { ffi.position().toLong() } ?: lastPosition
        guarded { ffi.closeSubscription() }
        ffi.close()
    }
}

/** How long one native wait lasts inside [asFlow], so that cancellation is seen promptly. */
private val FLOW_POLL = 100.milliseconds

/**
 * The subscription as a cold [Flow] of events, fetched in batches of [batchSize] on
 * [Dispatchers.IO]. The flow completes when the subscription ends (closed, or its store
 * closed). When the collector stops, by cancellation or an operator such as `take(n)`, the
 * subscription is closed. Collect it once.
 */
fun Subscription.asFlow(batchSize: Int = 256): Flow<SequencedEvent> = flow {
    try {
        while (true) {
            val batch = withContext(Dispatchers.IO) { nextBatch(batchSize, FLOW_POLL) } ?: break
            for (event in batch) emit(event)
        }
    } finally {
        close()
    }
}
