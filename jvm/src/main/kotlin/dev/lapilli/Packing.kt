package dev.lapilli

import com.sun.jna.Memory
import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.time.Instant

/*
 * What crosses the native boundary in bulk, in the layouts `jvm/rust/lib.rs` documents:
 * an append request written into native memory (passed as an address and a length, so an
 * append is one JNA call with no RustBuffer to allocate and free), and batches of events
 * copied by the engine into native memory passed the same way (not one UniFFI record per event,
 * nor a RustBuffer per batch).
 */

/** Native memory an append request is written into; one per thread, reused. */
private class Scratch(size: Long) {
    val memory = Memory(size)
    val buffer: ByteBuffer = memory.getByteBuffer(0, size).order(ByteOrder.LITTLE_ENDIAN)
    val address: Long = Pointer.nativeValue(memory)
}

/** Requests up to this size reuse the thread's buffer; larger ones get one of their own. */
private const val SCRATCH_KEPT = 1L shl 20

private val scratch = ThreadLocal.withInitial { Scratch(64L shl 10) }

/** An append encoded for one native call: the events' strings as UTF-8, sizes known. */
internal class PackedAppend(events: List<Event>, condition: AppendCondition?) {
    val count = events.size
    private val types = arrayOfNulls<ByteArray>(events.size)
    private val tags = arrayOfNulls<Array<ByteArray>>(events.size)
    private val datas = arrayOfNulls<ByteArray>(events.size)
    private val condition = condition?.let { EncodedCondition(it) }
    private val size: Long

    init {
        var total = 1L + 4 + (this.condition?.size ?: 0)
        events.forEachIndexed { i, event ->
            val type = event.type.encodeToByteArray()
            val eventTags = Array(event.tags.size) { event.tags[it].encodeToByteArray() }
            types[i] = type
            tags[i] = eventTags
            datas[i] = event.data
            total += 4 + type.size + 4 + eventTags.sumOf { 4L + it.size } + 4 + event.data.size
        }
        if (total > Int.MAX_VALUE) invalid("the append encodes to $total bytes; the limit is ${Int.MAX_VALUE}")
        size = total
    }

    /** Writes the request into native memory and runs [call] with its address and length. */
    fun <T> withNative(call: (address: Long, len: Long) -> T): T {
        if (size <= SCRATCH_KEPT) {
            var s = scratch.get()
            if (s.buffer.capacity() < size) {
                s = Scratch(maxOf(size, s.buffer.capacity() * 2L).coerceAtMost(SCRATCH_KEPT))
                scratch.set(s)
            }
            write(s.buffer)
            return call(s.address, size)
        }
        val own = Scratch(size)
        try {
            write(own.buffer)
            return call(own.address, size)
        } finally {
            own.memory.close()
        }
    }

    private fun write(b: ByteBuffer) {
        b.clear()
        if (condition == null) b.put(0) else { b.put(1); condition.write(b) }
        b.putInt(count)
        for (i in 0 until count) {
            putBytes(b, types[i]!!)
            val eventTags = tags[i]!!
            b.putInt(eventTags.size)
            for (tag in eventTags) putBytes(b, tag)
            putBytes(b, datas[i]!!)
        }
        check(b.position().toLong() == size) { "packed ${b.position()} bytes of $size" }
    }
}

/** A read's query and options encoded for one native call (`store_read_packed`). */
internal class PackedRead(query: Query, private val options: ReadOptions) {
    private val query = EncodedQuery(query)
    private val size: Long = this.query.size + 8 + 1 + (if (options.until != null) 8 else 0) + 1 + (if (options.limit != null) 8 else 0) + 1

    init {
        positionArg("after", options.after)
        options.until?.let { positionArg("until", it) }
        options.limit?.let { if (it < 0) invalid("limit is $it; it must not be negative") }
        if (size > SCRATCH_KEPT) invalid("the read's query encodes to $size bytes; the limit is $SCRATCH_KEPT")
    }

    /** Writes the request into this thread's native buffer and runs [call] with its address and length. */
    fun <T> withNative(call: (address: Long, len: Long) -> T): T {
        var s = scratch.get()
        if (s.buffer.capacity() < size) {
            s = Scratch(maxOf(size, s.buffer.capacity() * 2L).coerceAtMost(SCRATCH_KEPT))
            scratch.set(s)
        }
        val b = s.buffer
        b.clear()
        query.write(b)
        b.putLong(options.after)
        options.until.let { if (it == null) b.put(0) else { b.put(1); b.putLong(it) } }
        options.limit.let { if (it == null) b.put(0) else { b.put(1); b.putLong(it) } }
        b.put(if (options.backwards) 1 else 0)
        check(b.position().toLong() == size) { "packed ${b.position()} bytes of $size" }
        return call(s.address, size)
    }
}

private fun putBytes(b: ByteBuffer, bytes: ByteArray) {
    b.putInt(bytes.size)
    b.put(bytes)
}

private class EncodedQuery(query: Query) {
    private val items: List<Pair<List<ByteArray>, List<ByteArray>>>? =
        query.items?.map { item -> item.types.map { it.encodeToByteArray() } to item.tags.map { it.encodeToByteArray() } }
    val size: Long = 1L + (items?.let { list -> 4L + list.sumOf { (types, tags) -> 8L + (types + tags).sumOf { 4L + it.size } } } ?: 0)

    fun write(b: ByteBuffer) {
        if (items == null) { b.put(0); return }
        b.put(1)
        b.putInt(items.size)
        for ((types, tags) in items) {
            b.putInt(types.size)
            types.forEach { putBytes(b, it) }
            b.putInt(tags.size)
            tags.forEach { putBytes(b, it) }
        }
    }
}

private class EncodedCondition(condition: AppendCondition) {
    private val boundary = EncodedQuery(condition.failIfEventsMatch)
    private val after: Long? = condition.after?.also { if (it < 0) invalid("condition after is $it; a position is never negative") }
    private val exists = condition.failIfExists?.let { EncodedQuery(it) }
    val size: Long = boundary.size + 1 + (if (after != null) 8 else 0) + 1 + (exists?.size ?: 0)

    fun write(b: ByteBuffer) {
        boundary.write(b)
        if (after == null) b.put(0) else { b.put(1); b.putLong(after) }
        if (exists == null) b.put(0) else { b.put(1); exists.write(b) }
    }
}

/** Batches up to this size reuse the thread's buffers; larger ones get their own. */
private const val BATCH_KEPT = 4L shl 20

/** Native memory a batch is copied into by the engine, and the array it is decoded from. */
private class BatchBuffers(size: Long) {
    val memory = Memory(size)
    val address: Long = Pointer.nativeValue(memory)
    val heap = ByteArray(size.toInt())
}

private val batchBuffers = ThreadLocal.withInitial { BatchBuffers(64L shl 10) }

/**
 * A read's or subscription's copy of the engine's string table ("Events out" in
 * `jvm/rust/lib.rs`): the types and tags its batches have sent, by id, each decoded into a
 * `String` once. [epoch] and [size] are the token passed with every batch call, so the engine
 * packs against this table or, if it is not the engine's (a batch never decoded here), starts a
 * new one. The engine bounds it (a new table past 65,536 strings or 4 MiB of UTF-8) and says
 * so in the batch (base 0): this copy then drops what it holds.
 *
 * Fetching and decoding are one step under this table's lock (see [fetchBatch]): the batches
 * must be decoded in the order they were packed.
 */
internal class StringTable {
    var epoch = 0L
        private set
    var size = 0
        private set
    private var strings = arrayOfNulls<String>(64)

    /** The string of [id], which must be one this table holds. */
    operator fun get(id: Int): String {
        if (id < 0 || id >= size) throw LapilliException.Io("a batch names string $id; the read's table holds $size")
        return strings[id]!!
    }

    /** Applies a batch's table header: a new table (base 0), or more strings after ours. */
    fun begin(batchEpoch: Long, base: Int) {
        if (base == 0) {
            strings.fill(null, 0, size)
            size = 0
            epoch = batchEpoch
        } else if (batchEpoch != epoch || base != size) {
            throw LapilliException.Io("a batch continues string table $batchEpoch at $base; the read holds table $epoch up to $size")
        }
    }

    fun add(s: String) {
        if (size == strings.size) strings = strings.copyOf(size * 2)
        strings[size++] = s
    }
}

/**
 * Fetches and decodes one batch: [call] packs it against [table] (its epoch and size passed on)
 * into the memory at `address` (`capacity` bytes) and answers its length, or a length over
 * `capacity` (nothing copied: the engine keeps the batch for a call with that much), or -1 for
 * the end of a subscription (then `null`). Under [table]'s lock: one fetch at a time per table.
 */
internal fun fetchBatch(
    table: StringTable,
    call: (tableEpoch: Long, tableSize: Int, address: Long, capacity: Long) -> Long,
): List<SequencedEvent>? = synchronized(table) { fetchLocked(table, call) }

private inline fun fetchLocked(
    table: StringTable,
    call: (tableEpoch: Long, tableSize: Int, address: Long, capacity: Long) -> Long,
): List<SequencedEvent>? {
    val kept = batchBuffers.get()
    var buffers = kept
    try {
        while (true) {
            val capacity = buffers.heap.size.toLong()
            val len = call(table.epoch, table.size, buffers.address, capacity)
            if (len < 0) return null
            if (len <= capacity) {
                buffers.memory.read(0, buffers.heap, 0, len.toInt())
                return unpackBatch(buffers.heap, table)
            }
            if (len > Int.MAX_VALUE - 8) throw LapilliException.Io("a batch of $len bytes does not fit a JVM array; read with a smaller batch")
            if (buffers !== kept) buffers.memory.close()
            buffers = if (len > BATCH_KEPT) BatchBuffers(len) else BatchBuffers(maxOf(len, 2 * capacity).coerceAtMost(BATCH_KEPT)).also { batchBuffers.set(it) }
        }
    } finally {
        if (buffers !== batchBuffers.get()) buffers.memory.close()
    }
}

/**
 * Decodes one packed batch (`BatchBuilder` in `jvm/rust/lib.rs`) at the start of [bytes]: its
 * new strings into [table] first, then its events, whose types and tags are ids in [table].
 */
internal fun unpackBatch(bytes: ByteArray, table: StringTable): List<SequencedEvent> {
    val b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
    val count = b.getInt(0)
    val stringsAt = b.getInt(4)
    table.begin(b.getLong(8), b.getInt(16))
    b.position(stringsAt)
    repeat(b.getInt()) {
        val len = b.getInt()
        table.add(String(bytes, b.position(), len, Charsets.UTF_8))
        b.position(b.position() + len)
    }
    if (count == 0) return emptyList()
    b.position(20)
    val out = ArrayList<SequencedEvent>(count)
    repeat(count) {
        val position = b.getLong()
        val micros = b.getLong()
        val type = table[b.getInt()]
        val tagCount = b.getInt()
        val tags = when (tagCount) {
            0 -> emptyList()
            1 -> listOf(table[b.getInt()])
            else -> List(tagCount) { table[b.getInt()] }
        }
        val len = b.getInt()
        val at = b.position()
        val data = bytes.copyOfRange(at, at + len)
        b.position(at + len)
        out.add(SequencedEvent(position, Instant.ofEpochSecond(micros / 1_000_000, (micros % 1_000_000) * 1_000), type, tags, data))
    }
    return out
}
