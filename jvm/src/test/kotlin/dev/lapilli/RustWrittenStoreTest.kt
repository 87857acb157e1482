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

/**
 * Reads the checked-in store of format version 1 (`tests/fixtures/store-v1`, written by the Rust
 * tests, `core/tests/fixture_store.rs`) and compares every event, `recordedAt` included, with
 * `tests/fixtures/store-v1.expected.json`.
 */
class FixtureStoreTest {
    @Test
    fun `the checked-in version 1 store reads identically from Kotlin`() = withTempDir { tmp ->
        val fixtures = File(System.getProperty("lapilli.fixtures.dir") ?: "../tests/fixtures")
        val expected = com.fasterxml.jackson.databind.ObjectMapper().readTree(File(fixtures, "store-v1.expected.json"))
        val dir = tmp.resolve("store-v1").toFile()
        File(fixtures, "store-v1").copyRecursively(dir)
        Store.open(dir.path, Options(durability = Durability.BUFFERED, segmentSize = 4096)).use { store ->
            val all = store.read(Query.all()).toList()
            assertEquals(expected.size(), all.size)
            assertTrue(all.size > 100)
            expected.forEachIndexed { i, want ->
                val got = all[i]
                assertEquals(want.get("position").asLong(), got.position)
                val micros = want.get("recorded_at").asLong()
                assertEquals(micros, got.recordedAt.epochSecond * 1_000_000 + got.recordedAt.nano / 1_000, "recordedAt of ${got.position}")
                assertEquals(want.get("type").asText(), got.type)
                assertEquals(want.get("tags").map { it.asText() }, got.tags)
                assertEquals(want.get("data_hex").asText(), got.data.joinToString("") { "%02x".format(it) })
            }
            val entity3 = store.read(Query.forTags("entity:3")).toList()
            assertEquals(all.filter { "entity:3" in it.tags }, entity3)
            val moved = store.read(Query.of(QueryItem(listOf("Moved"), listOf("every-third"))), ReadOptions(backwards = true, limit = 3)).toList()
            assertEquals(all.reversed().filter { it.type == "Moved" && "every-third" in it.tags }.take(3), moved)
            val unicode = all.filter { "ünïcode:tag" in it.tags }
            assertTrue(unicode.isNotEmpty())
            assertEquals(unicode, store.read(Query.forTags("ünïcode:tag")).toList())
            assertEquals(all.size + 1L, store.append(ev("Opened", "entity:0")).first)
        }
    }
}
