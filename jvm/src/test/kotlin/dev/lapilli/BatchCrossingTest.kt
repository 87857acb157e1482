package dev.lapilli

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Test
import kotlin.test.assertContentEquals
import kotlin.test.assertEquals
import kotlin.test.assertNull

/**
 * Batches are copied by the engine into this thread's native memory (64 KiB at first, grown up
 * to 4 MiB, a buffer of its own beyond that); a batch longer than the memory offered is kept
 * natively and taken by the next call. Events of these sizes cross every one of those paths,
 * and every event must arrive once, in order, with its bytes.
 */
class BatchCrossingTest {
    private fun data(i: Int, size: Int) = ByteArray(size) { (it * 31 + i).toByte() }

    private val sizes = listOf(10, 100_000, 10, 3_000_000, 5_000_000, 700_000, 10, 9_000_000, 10)

    private fun check(events: List<SequencedEvent>) {
        assertEquals(sizes.indices.map { it + 1L }, events.map { it.position })
        events.forEachIndexed { i, e ->
            assertEquals("E$i", e.type)
            assertEquals(listOf("big:${sizes[i]}"), e.tags)
            assertContentEquals(data(i, sizes[i]), e.data)
        }
    }

    @Test
    fun `reads and subscriptions deliver batches larger than the thread's memory`() = withStore { store, _ ->
        sizes.forEachIndexed { i, size -> store.append(Event("E$i", listOf("big:$size"), data(i, size))) }
        check(store.read(Query.all()).toList())
        check(store.read(Query.all(), ReadOptions(backwards = true)).toList().reversed())
        store.subscribe(Query.all()).use { sub ->
            val got = mutableListOf<SequencedEvent>()
            while (got.size < sizes.size) got += sub.nextBatch(1024)!!
            check(got)
        }
        store.subscribe(Query.all()).use { sub ->
            val got = mutableListOf<SequencedEvent>()
            runBlocking { while (got.size < sizes.size) got += sub.nextBatchAsync(3)!! }
            check(got)
        }
        // One event per batch: each batch alone larger or smaller than what the last one grew to.
        store.subscribe(Query.all()).use { sub ->
            check((sizes.indices).map { sub.nextBatch(1)!!.single() })
            assertEquals(emptyList(), sub.nextBatch(1, java.time.Duration.ZERO))
        }
        val sub = store.subscribe(Query.all(), after = sizes.size.toLong())
        sub.close()
        assertNull(sub.nextBatch(1))
    }
}
