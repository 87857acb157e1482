package dev.lapilli

import dev.lapilli.ffi.FfiReadResult

/**
 * The answer to [Store.read]: a lazy `Sequence` over a consistent snapshot (events committed
 * while it runs are not included), fetched from the engine in batches. It can be iterated once.
 * [head] is the store head pinned when the read began: the `after` for a decision built on it.
 *
 * The snapshot is released when iteration reaches the end, on [close] (`use {}`), or at
 * the latest when the result is garbage-collected.
 */
class ReadResult internal constructor(
    private val ffi: FfiReadResult,
    private val batchSize: Int,
) : Sequence<SequencedEvent>, AutoCloseable {

    private val handle = Released()

    val head: Long = ffiCall("read", handle) { ffi.head() }.toLong()

    @Volatile private var iterated = false

    override fun iterator(): Iterator<SequencedEvent> {
        synchronized(this) {
            check(!iterated) { "a ReadResult can be iterated only once; read again for another pass" }
            iterated = true
        }
        return Batches()
    }

    private inner class Batches : Iterator<SequencedEvent> {
        private var batch: List<SequencedEvent> = emptyList()
        private var index = 0
        private var done = false

        override fun hasNext(): Boolean {
            if (index < batch.size) return true
            if (done) return false
            // One packed buffer per batch, copied by the engine into this thread's native
            // memory and decoded here.
            batch = fetchBatch { address, capacity ->
                ffiCall("read", handle) { ffi.nextBatchInto(batchSize.toUInt(), address.toULong(), capacity.toULong()) }.toLong()
            }!!
            index = 0
            if (batch.isEmpty()) {
                done = true
                close()
                return false
            }
            return true
        }

        override fun next(): SequencedEvent {
            if (!hasNext()) throw NoSuchElementException()
            return batch[index++]
        }
    }

    /** This result as an `Iterable` (iterable once), for Java's for-each. */
    fun asIterable(): Iterable<SequencedEvent> = Iterable { iterator() }

    override fun close() {
        if (handle.release()) ffi.close()
    }
}
