package dev.lapilli

import dev.lapilli.ffi.FfiException
import dev.lapilli.ffi.FfiStore
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

/**
 * The store's completion thread on the JVM side: completes the futures of appends submitted
 * without waiting ([Store.appendFuture], [Store.appendAsync]) and of subscriptions waiting for
 * new events ([Subscription.nextBatchFuture], [Subscription.nextBatchAsync], `subscribeFlow`).
 *
 * The engine runs a callback for each of them on its own completion thread (never the writer);
 * the callback only queues a 32-byte record in the store's port (`jvm/rust/lib.rs`). This one
 * daemon thread takes everything queued with one native call and completes the futures, so a
 * group commit of 64 appends costs one crossing here, no JNA upcall (which attaches and detaches
 * a native thread to the JVM each time), and no thread per waiter: 1,000 waiting subscriptions
 * hold no thread at all. Started on first use; ends when the store closes, after failing
 * (appends) or waking (subscriptions, which then see their end) whatever is still waiting.
 */
internal class Completions(private val ffi: FfiStore, private val storeId: ULong, private val store: Released) {
    private val nextToken = AtomicLong()
    private val appends = ConcurrentHashMap<Long, CompletableFuture<AppendResult>>()
    private val waiters = ConcurrentHashMap<Long, CompletableFuture<Unit>>()
    @Volatile private var started = false
    @Volatile private var finished = false

    private fun ensureStarted() {
        if (started) return
        synchronized(this) {
            if (started) return
            Thread(::run, "lapilli-completions").apply { isDaemon = true }.start()
            started = true
        }
    }

    /** Submits [packed] (one direct JNA call) and answers the future its completion completes. */
    fun submit(packed: PackedAppend): CompletableFuture<AppendResult> {
        ensureStarted()
        val token = nextToken.incrementAndGet()
        val future = CompletableFuture<AppendResult>()
        appends[token] = future
        try {
            packed.withNative { address, len -> ffiCall("store", store) { DirectCalls.submitPacked(storeId, address, len, token) } }
        } catch (e: Throwable) {
            appends.remove(token)
            future.completeExceptionally(e)
            return future
        }
        settleIfFinished(token, appends) { it.completeExceptionally(LapilliException.Closed("the store is closed")) }
        return future
    }

    /**
     * A token and its future for one wait of a subscription: the future completes when a port
     * record with the token arrives (or the store closes). Register before arming natively.
     */
    fun newWait(): Pair<Long, CompletableFuture<Unit>> {
        ensureStarted()
        val token = nextToken.incrementAndGet()
        val future = CompletableFuture<Unit>()
        waiters[token] = future
        return token to future
    }

    /** The wait [token] was answered without arming (events, or the end): forget it. */
    fun cancelWait(token: Long) {
        waiters.remove(token)
    }

    /** The wait [token] was armed natively: if the thread has already finished, wake it here. */
    fun armed(token: Long) = settleIfFinished(token, waiters) { it.complete(Unit) }

    /**
     * After registering and crossing: if the thread finished meanwhile, nobody will take this
     * token's record; settle it here. The thread sets [finished] before its final sweep, so
     * every token is settled by exactly one of the two (the map's remove decides).
     */
    private inline fun <T> settleIfFinished(token: Long, map: ConcurrentHashMap<Long, CompletableFuture<T>>, settle: (CompletableFuture<T>) -> Unit) {
        if (finished) map.remove(token)?.let(settle)
    }

    private fun run() {
        try {
            while (true) {
                val records = ffi.takeCompletions() ?: break
                deliver(records)
            }
        } catch (e: Throwable) {
            // The handle was released under us (close() racing): the sweep below settles everyone.
        } finally {
            finished = true
            val closed = LapilliException.Closed("the store is closed")
            appends.keys.toList().forEach { appends.remove(it)?.completeExceptionally(closed) }
            waiters.keys.toList().forEach { waiters.remove(it)?.complete(Unit) }
        }
    }

    private fun deliver(records: ByteArray) {
        val b = ByteBuffer.wrap(records).order(ByteOrder.LITTLE_ENDIAN)
        while (b.remaining() >= 32) {
            val kind = b.getLong()
            val token = b.getLong()
            val first = b.getLong()
            val last = b.getLong()
            when (kind) {
                APPEND_DONE -> appends.remove(token)?.complete(AppendResult(first, last))
                APPEND_FAILED -> appends.remove(token)?.completeExceptionally(appendError(token))
                SUBSCRIPTION_READY -> waiters.remove(token)?.complete(Unit)
            }
        }
    }

    private fun appendError(token: Long): Throwable =
        try {
            ffi.appendError(token.toULong())
            LapilliException.Io("append $token failed without an error")
        } catch (e: FfiException) {
            lapilliException(e)
        }

    private companion object {
        const val APPEND_DONE = 0L
        const val APPEND_FAILED = 1L
        const val SUBSCRIPTION_READY = 2L
    }
}
