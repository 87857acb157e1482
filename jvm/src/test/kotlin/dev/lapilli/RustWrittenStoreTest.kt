package dev.lapilli

import org.junit.jupiter.api.Test
import java.io.File
import kotlin.test.assertContentEquals
import kotlin.test.assertEquals
import kotlin.test.assertTrue
import kotlin.time.Duration.Companion.milliseconds

/**
 * Reads a store that the Rust engine wrote directly (`jvm/rust/write_fixture.rs`, run by Maven
 * before the tests), on a copy so the test can be rerun.
 */
class RustWrittenStoreTest {
    @Test
    fun `a store written by Rust reads back event by event`() = withTempDir { tmp ->
        val source = File(System.getProperty("lapilli.rustStore.dir") ?: "target/rust-written-store")
        assertTrue(source.isDirectory, "the fixture store is missing at $source")
        val dir = tmp.resolve("copy").toFile()
        source.copyRecursively(dir)
        Store.open(dir.path, BUFFERED).use { store ->
            assertEquals(50, store.head())
            val events = store.read(Query.all()).toList()
            assertEquals((1L..50L).toList(), events.map { it.position })
            for (e in events) {
                val p = e.position
                assertEquals("Fixture${p % 3}", e.type)
                assertEquals(listOf("n:$p", "parity:${if (p % 2 == 0L) "even" else "odd"}").sorted(), e.tags)
                assertContentEquals(ByteArray((p % 7).toInt()) { p.toByte() }, e.data)
            }
            events.zipWithNext { a, b -> assertTrue(a.recordedAt <= b.recordedAt) }
            assertEquals(25, store.read(Query.forTags("parity:even")).count())
            assertEquals(listOf(3L, 6L, 9L), store.read(Query.forTypes("Fixture0"), ReadOptions(limit = 3)).map { it.position }.toList())
            store.subscribe(Query.forTags("n:50")).use { sub ->
                assertEquals(listOf(50L), sub.nextBatch(10, 0.milliseconds)!!.map { it.position })
                assertTrue(sub.caughtUp)
            }
            assertEquals(AppendResult(51, 51), store.append(ev("FromKotlin")))
        }
    }
}
