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

    /**
     * The read's string table (see [StringTable]); dropped, and so freed, when the read is closed.
     * Internal, not private: a test puts a table that is not the engine's here.
     */
    @Volatile internal var strings: StringTable? = StringTable()

    /** How many strings this read's table holds here, null once it is closed (for tests). */
    internal val stringsHeld: Int? get() = strings?.size

    /** How many strings the engine's table for this read holds (for tests). */
    internal fun nativeStringsHeld(): Int = ffiCall("read", handle) { ffi.stringsHeld() }.toInt()

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
            // memory and decoded here against the read's string table.
            val table = strings ?: throw LapilliException.Closed("the read is closed")
            batch = fetchBatch(table) { epoch, size, address, capacity ->
                ffiCall("read", handle) {
                    ffi.nextBatchInto(batchSize.toUInt(), epoch.toULong(), size.toUInt(), address.toULong(), capacity.toULong())
                }.toLong()
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
        strings = null
        if (handle.release()) ffi.close()
    }
}
