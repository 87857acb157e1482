package dev.lapilli

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.nio.file.Files
import java.time.Instant
import kotlin.test.assertContentEquals
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertNotEquals
import kotlin.test.assertNull
import kotlin.test.assertTrue

class StoreTest {
    @Test
    fun `open creates the directory and an empty store has head 0`() = withTempDir { dir ->
        val path = dir.resolve("nested/store")
        Store.open(path, BUFFERED).use { store ->
            assertTrue(Files.isDirectory(path))
            assertEquals(0, store.head())
            assertEquals(emptyList(), store.read(Query.all()).toList())
        }
    }

    @Test
    fun `append assigns consecutive positions and reads return what was written`() = withStore { store, _ ->
        val before = Instant.now().minusSeconds(1)
        assertEquals(AppendResult(1, 2), store.append(listOf(ev("A", "x"), ev("B", "z", "y", data = "{\"n\":1}"))))
        assertEquals(AppendResult(3, 3), store.append(Event("C", emptyList(), byteArrayOf(0, -1, 127))))
        assertEquals(3, store.head())
        val events = store.read(Query.all()).toList()
        assertEquals(listOf(1L, 2L, 3L), events.map { it.position })
        assertEquals(listOf("A", "B", "C"), events.map { it.type })
        assertEquals(listOf("y", "z"), events[1].tags, "tags come back sorted")
        assertEquals("{\"n\":1}", events[1].dataAsString())
        assertContentEquals(byteArrayOf(0, -1, 127), events[2].data)
        events.forEach { assertTrue(it.recordedAt.isAfter(before) && it.recordedAt.isBefore(Instant.now().plusSeconds(1))) }
        events.zipWithNext { a, b -> assertTrue(a.recordedAt <= b.recordedAt) }
        assertEquals(events[1].recordedAt, events[0].recordedAt, "one append is one batch with one commit time")
    }

    @Test
    fun `data classes compare ByteArray by content`() {
        assertEquals(Event("T", listOf("a"), byteArrayOf(1, 2)), Event("T", listOf("a"), byteArrayOf(1, 2)))
        assertEquals(Event("T", listOf("a"), byteArrayOf(1, 2)).hashCode(), Event("T", listOf("a"), byteArrayOf(1, 2)).hashCode())
        assertNotEquals(Event("T", listOf("a"), byteArrayOf(1, 2)), Event("T", listOf("a"), byteArrayOf(1, 3)))
        assertEquals(Event("T", listOf("a"), "{}"), Event("T", listOf("a"), byteArrayOf('{'.code.toByte(), '}'.code.toByte())))
        val t = Instant.ofEpochSecond(5, 1000)
        assertEquals(SequencedEvent(1, t, "T", listOf(), byteArrayOf(9)), SequencedEvent(1, t, "T", listOf(), byteArrayOf(9)))
        assertNotEquals(SequencedEvent(1, t, "T", listOf(), byteArrayOf(9)), SequencedEvent(2, t, "T", listOf(), byteArrayOf(9)))
        assertEquals(Event("T", listOf(), byteArrayOf(9)), SequencedEvent(1, t, "T", listOf(), byteArrayOf(9)).toEvent())
        assertEquals(Query.forTags("a", "b"), Query.of(QueryItem(tags = listOf("a", "b"))))
        assertEquals(Query.all(), Query.all())
        assertNotEquals(Query.forTypes("a"), Query.forTags("a"))
    }

    @Test
    fun `a written store reads back identically, events compare equal to what was appended`() = withStore { store, _ ->
        val written = (1..20).map { Event("T${it % 3}", listOf("n:$it", "all"), ByteArray(it) { b -> b.toByte() }) }
        store.append(written)
        val read = store.read(Query.all()).toList()
        assertEquals(written.map { it.copy(tags = it.tags.sorted()) }, read.map { it.toEvent() })
    }

    @Test
    fun `query semantics - types OR, tags AND, items OR`() = withStore { store, _ ->
        store.append(listOf(
            ev("CourseDefined", "course:c1"),
            ev("StudentRegistered", "student:s1"),
            ev("Subscribed", "course:c1", "student:s1"),
            ev("Subscribed", "course:c2", "student:s1"),
        ))
        fun positions(q: Query) = store.read(q).map { it.position }.toList()
        assertEquals(listOf(1L, 3L), positions(Query.forTags("course:c1")))
        assertEquals(listOf(3L), positions(Query.forTags("course:c1", "student:s1")))
        assertEquals(listOf(1L, 2L), positions(Query.forTypes("CourseDefined", "StudentRegistered")))
        assertEquals(listOf(2L, 4L), positions(Query.of(QueryItem(tags = listOf("course:c2")), QueryItem(types = listOf("StudentRegistered")))))
        assertEquals(listOf(3L), positions(Query.of(QueryItem(listOf("Subscribed"), listOf("course:c1")))))
        assertEquals(listOf(1L, 2L, 3L, 4L), positions(Query.all()))
    }

    @Test
    fun `boundary clause fails with Conflict carrying the conflicting position`() = withStore { store, _ ->
        val course = Query.forTags("course:c1")
        store.append(ev("CourseDefined", "course:c1"))
        val seen = store.read(course)
        val decidedAt = seen.head
        seen.close()
        store.append(ev("Other", "course:c2"))
        store.append(ev("CapacityChanged", "course:c1"))
        val e = assertThrows<LapilliException.Conflict> {
            store.append(ev("Subscribed", "course:c1"), AppendCondition(course, after = decidedAt))
        }
        assertEquals(3L, e.position)
        assertEquals("CONFLICT", e.code)
        assertEquals(3, store.head(), "a failed append writes nothing")
        // after = null means any match at all
        assertThrows<LapilliException.Conflict> { store.append(ev("X"), AppendCondition(course)) }
        // a non-matching boundary passes
        assertEquals(AppendResult(4, 4), store.append(ev("Y", "course:c1"), AppendCondition(course, after = 3)))
    }

    @Test
    fun `existence clause fails with AlreadyExists whatever after is`() = withStore { store, _ ->
        val key = Query.forTags("idempotency:k1")
        val cond = AppendCondition(Query.forTags("nothing:matches"), after = null, failIfExists = key)
        assertEquals(AppendResult(1, 1), store.append(ev("Done", "idempotency:k1"), cond))
        store.append(ev("Filler"))
        val e = assertThrows<LapilliException.AlreadyExists> {
            store.append(ev("Done", "idempotency:k1"), cond.copy(after = store.head()))
        }
        assertEquals(1L, e.position)
        assertEquals(2, store.head())
    }

    @Test
    fun `read window, limit, direction and pinned head`() = withStore { store, _ ->
        store.append((1..10).map { ev("E", "n:$it", if (it % 2 == 0) "even" else "odd") })
        fun positions(o: ReadOptions, q: Query = Query.all()) = store.read(q, o).map { it.position }.toList()
        assertEquals((4L..10L).toList(), positions(ReadOptions(after = 3)))
        assertEquals((4L..6L).toList(), positions(ReadOptions(after = 3, until = 6)))
        assertEquals((1L..10L).toList(), positions(ReadOptions(until = 99)), "until is clamped to the head")
        assertEquals(listOf(1L, 2L), positions(ReadOptions(limit = 2)))
        assertEquals(emptyList(), positions(ReadOptions(limit = 0)))
        assertEquals(listOf(10L, 9L, 8L), positions(ReadOptions(backwards = true, limit = 3)))
        assertEquals(listOf(6L, 4L), positions(ReadOptions(after = 2, until = 7, backwards = true), Query.forTags("even")))
        assertEquals(10, store.read(Query.all(), ReadOptions(after = 10)).head)
        assertEquals(emptyList(), positions(ReadOptions(after = 10)))
    }

    @Test
    fun `a read is a snapshot - events committed while it runs are not included`() = withStore { store, _ ->
        store.append((1..3000).map { ev("E", data = "x") })
        store.read(Query.all()).use { read ->
            val iterator = read.iterator()
            assertEquals(1L, iterator.next().position)
            store.append(ev("Late"))
            var count = 1
            while (iterator.hasNext()) { iterator.next(); count++ }
            assertEquals(3000, count, "reads cross batches and stop at the pinned head")
            assertEquals(3000, read.head)
        }
        assertEquals(3001, store.head())
    }

    @Test
    fun `a ReadResult is iterated once and closes with use`() = withStore { store, _ ->
        store.append(ev("E"))
        val read = store.read(Query.all())
        assertEquals(1, read.count())
        assertThrows<IllegalStateException> { read.toList() }
        val unused = store.read(Query.all())
        unused.use { }
        assertThrows<LapilliException.Closed> { unused.toList() }
    }

    @Test
    fun `every bad input is InvalidArgument and leaves the store unchanged`() = withTempDir { dir ->
        Store.open(dir, BUFFERED.copy(maxEventBytes = 100)).use { store ->
            store.append(listOf(ev("Seed", "a"), ev("Seed", "b")))
            val before = store.read(Query.all()).toList()
            val bad: Map<String, () -> Unit> = mapOf(
                "empty event list" to { store.append(emptyList()) },
                "empty type" to { store.append(ev("")) },
                "type of 256 bytes" to { store.append(ev("t".repeat(256))) },
                "type of 128 two-byte chars" to { store.append(ev("é".repeat(128))) },
                "empty tag" to { store.append(ev("T", "")) },
                "tag of 1025 bytes" to { store.append(ev("T", "t".repeat(1025))) },
                "duplicate tag" to { store.append(ev("T", "a", "b", "a")) },
                "256 tags" to { store.append(Event("T", (1..256).map { "t$it" })) },
                "data over maxEventBytes" to { store.append(Event("T", emptyList(), ByteArray(101))) },
                "one bad event among good ones" to { store.append(listOf(ev("ok"), ev("ok"), ev(""))) },
                "query with no items" to { store.read(Query.of()).toList() },
                "item with neither types nor tags" to { store.read(Query.of(QueryItem())).toList() },
                "empty tag in query" to { store.read(Query.forTags("")).toList() },
                "condition query with no items" to { store.append(ev("T"), AppendCondition(Query.of())) },
                "failIfExists with an empty item" to { store.append(ev("T"), AppendCondition(Query.all(), 2, Query.of(QueryItem()))) },
                "condition after beyond head" to { store.append(ev("T"), AppendCondition(Query.forTags("a"), after = 3)) },
                "negative condition after" to { store.append(ev("T"), AppendCondition(Query.forTags("a"), after = -1)) },
                "read after beyond head" to { store.read(Query.all(), ReadOptions(after = 3)).toList() },
                "negative read after" to { store.read(Query.all(), ReadOptions(after = -1)).toList() },
                "until below after" to { store.read(Query.all(), ReadOptions(after = 2, until = 1)).toList() },
                "negative limit" to { store.read(Query.all(), ReadOptions(limit = -1)).toList() },
                "subscribe after beyond head" to { store.subscribe(Query.all(), 3).close() },
                "subscribe negative after" to { store.subscribe(Query.all(), -5).close() },
                "nextBatch max 0" to { store.subscribe(Query.all()).use { it.nextBatch(0) } },
                "async empty list" to { runBlocking { store.appendAsync(emptyList()) } },
            )
            for ((what, call) in bad) {
                val e = assertThrows<LapilliException.InvalidArgument>(what) { call() }
                assertTrue(e.message!!.isNotBlank(), what)
                assertEquals(2, store.head(), "$what changed the head")
            }
            assertEquals(before, store.read(Query.all()).toList())
            val msg = assertThrows<LapilliException.InvalidArgument> { store.append(ev("T", "ok", "ok2", "ok3", "x".repeat(2000))) }.message!!
            assertTrue(msg.contains("tag 3 is 2000 bytes; the limit is 1024"), msg)
        }
        for (options in listOf(Options(segmentSize = 10), Options(segmentSize = -1), Options(maxEventBytes = -1))) {
            assertThrows<LapilliException.InvalidArgument>(options.toString()) { Store.open(dir, options) }
        }
        // Boundary values are accepted.
        Store.open(dir, BUFFERED).use { store ->
            store.append(Event("t".repeat(255), (1..255).map { "t$it" } + emptyList(), ByteArray(0)))
            store.append(ev("é".repeat(127) + "x", "t".repeat(1024)))
            assertEquals(4, store.head())
        }
    }

    @Test
    fun `a second open fails with StoreLocked until the first is closed`() = withTempDir { dir ->
        val first = Store.open(dir, BUFFERED)
        val e = assertThrows<LapilliException.StoreLocked> { Store.open(dir, BUFFERED) }
        assertTrue(e.message!!.contains("locked"), e.message)
        first.close()
        Store.open(dir, BUFFERED).use { assertEquals(0, it.head()) }
    }

    @Test
    fun `openReadOnly follows a writer and refuses appends with ReadOnly`() = withTempDir { dir ->
        Store.open(dir, BUFFERED).use { writer ->
            writer.append(listOf(ev("E", "a"), ev("E", "b")))
            Store.openReadOnly(dir).use {
                assertEquals(listOf(1L, 2L), it.read(Query.all()).map { e -> e.position }.toList())
                val refused = assertThrows<LapilliException.ReadOnly> { it.append(ev("E")) }
                assertEquals("READ_ONLY", refused.code)
                assertThrows<LapilliException.ReadOnly> { runBlocking { it.appendAsync(ev("E")) } }
                assertEquals(2, it.head())
            }
            assertEquals(2, writer.head())
        }
        assertThrows<LapilliException.Io> { Store.openReadOnly(dir.resolve("missing")) }
    }

    @Test
    fun `use closes the store - later calls raise Closed, close is idempotent`() = withTempDir { dir ->
        val store = Store.open(dir, BUFFERED).use { s -> s.append(ev("E")); s }
        assertThrows<LapilliException.Closed> { store.head() }
        assertThrows<LapilliException.Closed> { store.append(ev("E")) }
        assertThrows<LapilliException.Closed> { runBlocking { store.appendAsync(ev("E")) } }
        assertThrows<LapilliException.Closed> { store.read(Query.all()) }
        assertThrows<LapilliException.Closed> { store.subscribe(Query.all()) }
        store.close()
        Store.open(dir, BUFFERED).use { assertEquals(1, it.head(), "the lock was released and the event kept") }
    }

    @Test
    fun `appendAsync appends and raises the same errors`() = withStore { store, _ ->
        runBlocking {
            assertEquals(AppendResult(1, 2), store.appendAsync(listOf(ev("A", "k"), ev("B"))))
            val e = assertThrows<LapilliException.Conflict> {
                runBlocking { store.appendAsync(ev("C"), AppendCondition(Query.forTags("k"), after = 0)) }
            }
            assertEquals(1L, e.position)
        }
        assertEquals(2, store.head())
    }

    @Test
    fun `reopen keeps every event`() = withTempDir { dir ->
        Store.open(dir).use { it.append((1..5).map { n -> ev("E", "n:$n") }) }
        Store.open(dir).use { store ->
            assertEquals(5, store.head())
            assertEquals(listOf("n:3"), store.read(Query.forTags("n:3")).single().tags)
            assertFalse(store.read(Query.forTypes("Nope")).any())
            assertNull(store.read(Query.all(), ReadOptions(limit = 0)).firstOrNull())
        }
    }
}
