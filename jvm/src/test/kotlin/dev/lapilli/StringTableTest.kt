package dev.lapilli

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Test
import java.util.Collections
import kotlin.concurrent.thread
import kotlin.test.assertContentEquals
import kotlin.test.assertEquals
import kotlin.test.assertNotNull
import kotlin.test.assertNull
import kotlin.test.assertSame
import kotlin.test.assertTrue

/**
 * Types and tags cross as ids into a string table kept for the whole read or subscription, on
 * both sides of the boundary (`StringTable` in `Packing.kt` and `jvm/rust/lib.rs`): a batch
 * carries only the strings new to it. These reads and subscriptions span many batches that
 * repeat strings and bring new ones; each must answer exactly what was appended, the two
 * tables must stay in step and within their bound (a new table past 65,536 strings or 4 MiB of
 * UTF-8), and closing drops the table.
 */
class StringTableTest {
    private val types = listOf("Registered", "Ereignis-äöü", "事件", "🚀Launched", "T".repeat(250) + "-long") // 255 bytes: the longest type

    /** Events whose batches repeat types and tags and bring new ones (`student:<i>`). */
    private fun event(i: Int): Event {
        val type = types[i % types.size]
        val tags = when (i % 4) {
            0 -> emptyList()
            1 -> listOf("course:${i % 7}", "student:$i")
            2 -> listOf("ort:Zürich-${i % 3}", "长:" + "长".repeat(339 + i % 2) /* 1021 or 1024 bytes: the longest tag */, "student:$i")
            else -> listOf("course:${i % 7}")
        }
        val data = if (i % 5 == 0) ByteArray(0) else "payload $i ü".encodeToByteArray()
        return Event(type, tags, data)
    }

    /** The distinct types and tags of events 0 until [n] of [event]. */
    private fun distinct(n: Int) = (0 until n).flatMap { event(it).let { e -> e.tags + e.type } }.toSet().size

    private fun assertEvents(want: List<Event>, firstPosition: Long, got: List<SequencedEvent>) {
        assertEquals(want.size, got.size)
        got.forEachIndexed { i, e ->
            assertEquals(firstPosition + i, e.position)
            assertEquals(want[i].type, e.type, "type of ${e.position}")
            assertEquals(want[i].tags.sorted(), e.tags.sorted(), "tags of ${e.position}")
            assertContentEquals(want[i].data, e.data, "data of ${e.position}")
        }
    }

    @Test
    fun `a read over many batches answers what was appended, each distinct string built once`() = withStore { store, _ ->
        val n = 5_000
        val events = (0 until n).map(::event)
        store.append(events)

        val read = store.read(Query.all())
        val got = ArrayList<SequencedEvent>()
        val it = read.iterator()
        while (got.size < n) {
            assertTrue(it.hasNext())
            got += it.next()
            // Both copies of the table in step after every batch.
            if (got.size % Store.READ_BATCH == 0) assertEquals(read.stringsHeld, read.nativeStringsHeld())
        }
        // Every distinct type and tag once in the table: nothing sent twice.
        assertEquals(distinct(n), read.stringsHeld)
        assertEquals(distinct(n), read.nativeStringsHeld())
        assertTrue(!it.hasNext())
        assertNull(read.stringsHeld, "the table is dropped when the read is exhausted")
        assertEvents(events, 1, got)
        // The same String for a type and a tag in the first batch and the fifth.
        assertSame(got[0].type, got[n - 5].type)
        assertSame(got[1].tags.first { it.startsWith("course:") }, got[4_411].tags.first { it.startsWith("course:") })
        // Events never share their tag lists.
        assertTrue(got[3].tags !== got[3 + 28].tags)

        assertEvents(events.reversed(), -n.toLong(), store.read(Query.all(), ReadOptions(backwards = true)).toList().map { it.copy(position = -it.position) })
        val course3 = (0 until n).filter { "course:3" in event(it).tags }
        assertEquals(course3.map { it + 1L }, store.read(Query.forTags("course:3")).map { it.position }.toList())
        store.read(Query.forTags("course:3")).toList().forEachIndexed { k, e -> assertEquals(event(course3[k]).type, e.type) }
    }

    @Test
    fun `a subscription over many batches, history then live, answers what was appended`() = withStore { store, _ ->
        val n = 4_000
        val events = (0 until n).map(::event)
        store.append(events.subList(0, n / 2))
        val got = ArrayList<SequencedEvent>()
        val sub = store.subscribe(Query.all())
        while (got.size < n / 2) {
            got += when (got.size % 3) {
                0 -> sub.nextBatch(100)!!
                1 -> runBlocking { sub.nextBatchAsync(37)!! }
                else -> sub.nextBatch(1)!!
            }
            assertEquals(sub.stringsHeld, sub.nativeStringsHeld())
        }
        // Live: appended in small groups, each bringing strings new to the table.
        for (from in n / 2 until n step 250) {
            store.append(events.subList(from, from + 250))
            val until = from + 250
            while (got.size < until) got += sub.nextBatchFuture(64).get()!!
            assertEquals(sub.stringsHeld, sub.nativeStringsHeld())
        }
        assertEquals(distinct(n), sub.stringsHeld)
        assertEvents(events, 1, got)
        sub.close()
        assertNull(sub.stringsHeld, "closing drops the table")
        assertNull(sub.nextBatch(10))
    }

    @Test
    fun `a read or subscription over more distinct tags than the bound holds at most the bound plus a batch`() = withStore { store, _ ->
        val n = 70_000
        val max = 65_536
        for (from in 0 until n step 10_000) store.append((from until from + 10_000).map { Event("Unique", listOf("u:$it"), "$it") })

        fun checkBounded(held: List<Int>) {
            // A new table starts before a batch once the table holds more than the bound, so it
            // never holds more than the bound plus one batch's strings (1024 tags and the type).
            assertTrue(held.max() <= max + 1 + 1025, "held at most ${held.max()}")
            assertTrue(held.max() > max, "the table grew to the bound")
            assertTrue(held.last() < max / 2, "and started again: ${held.last()} at the end")
        }

        val read = store.read(Query.all())
        val held = ArrayList<Int>()
        val it = read.iterator()
        for (i in 0 until n) {
            val e = it.next()
            assertEquals(i + 1L, e.position)
            assertEquals(listOf("u:$i"), e.tags)
            assertEquals("Unique", e.type)
            if ((i + 1) % Store.READ_BATCH == 0 || i == n - 1) {
                held += read.stringsHeld!!
                assertEquals(held.last(), read.nativeStringsHeld())
            }
        }
        checkBounded(held)
        read.close()

        store.subscribe(Query.all()).use { sub ->
            val subHeld = ArrayList<Int>()
            var seen = 0
            while (seen < n) {
                for (e in sub.nextBatch(1024)!!) {
                    assertEquals(listOf("u:$seen"), e.tags)
                    seen++
                }
                subHeld += sub.stringsHeld!!
                assertEquals(subHeld.last(), sub.nativeStringsHeld())
            }
            checkBounded(subHeld)
        }
    }

    @Test
    fun `long tags start a new table past 4 MiB of strings`() = withStore { store, _ ->
        val n = 3 * Store.READ_BATCH
        // Three unique tags of about 1 KB of UTF-8 per event: 3 MB per batch of 1024 events.
        fun tags(i: Int) = (0 until 3).map { k -> "ü".repeat(500) + ":$i:$k" }
        for (from in 0 until n step 512) store.append((from until from + 512).map { Event("Long", tags(it)) })
        val read = store.read(Query.all())
        val held = ArrayList<Int>()
        read.forEachIndexed { i, e ->
            assertEquals(tags(i).sorted(), e.tags)
            assertEquals(0, e.data.size)
            if ((i + 1) % Store.READ_BATCH == 0) held += read.stringsHeld!!
        }
        // 4 MiB is about 4,150 of these tags: past it after the second batch (6,144 tags), so
        // the table started again before the third.
        assertEquals(listOf(3073, 6145, 3073), held)
        assertNull(read.stringsHeld)
    }

    @Test
    fun `a table that is not the engine's is replaced, not trusted`() = withStore { store, _ ->
        val n = 3_000
        val events = (0 until n).map(::event)
        store.append(events)

        // A read whose table is dropped after its first batch (as if that batch was never decoded).
        val read = store.read(Query.all())
        val it = read.iterator()
        val got = ArrayList<SequencedEvent>()
        got += it.next()
        read.strings = StringTable()
        while (it.hasNext()) got += it.next()
        assertEvents(events, 1, got)

        // Two subscriptions whose tables are swapped after a batch: each holds the other's now.
        val a = store.subscribe(Query.all())
        val b = store.subscribe(Query.all())
        val gotA = ArrayList(a.nextBatch(500)!!)
        val gotB = ArrayList(b.nextBatch(700)!!)
        val tableA = assertNotNull(a.strings)
        a.strings = b.strings
        b.strings = tableA
        while (gotA.size < n) gotA += a.nextBatch(500)!!
        while (gotB.size < n) gotB += b.nextBatch(700)!!
        assertEvents(events, 1, gotA)
        assertEvents(events, 1, gotB)
        assertEquals(a.stringsHeld, a.nativeStringsHeld())
        a.close()
        b.close()
    }

    @Test
    fun `concurrent consumers of one subscription take batches one after another`() = withStore { store, _ ->
        val n = 6_000
        val events = (0 until n).map(::event)
        store.append(events)
        store.subscribe(Query.all()).use { sub ->
            val got = Collections.synchronizedList(ArrayList<SequencedEvent>())
            val threads = (0 until 3).map {
                thread {
                    while (true) {
                        val batch = sub.nextBatch(7, java.time.Duration.ZERO)!!
                        if (batch.isEmpty()) break
                        got += batch
                    }
                }
            }
            threads.forEach { it.join() }
            assertEvents(events, 1, got.sortedBy { it.position })
        }
    }
}
