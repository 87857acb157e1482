package dev.lapilli

import com.fasterxml.jackson.databind.JsonNode
import com.fasterxml.jackson.databind.ObjectMapper
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.assertThrows
import java.io.File
import java.nio.file.Files
import java.util.concurrent.atomic.AtomicLong
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertTrue
import kotlin.time.Duration.Companion.milliseconds

/**
 * Runs every scenario file in `tests/conformance` (format: `tests/README.md`), one dynamic test
 * per file, named after the file; a failure names the file and the step index. With
 * `LAPILLI_TEST_POSTGRES_URL` set (scripts/postgres.sh start prints it; scripts/test.sh sets it)
 * every scenario runs again in a fresh context of that PostgreSQL database, except those marked
 * `embedded_only` (files, locks, recovery).
 */
class ConformanceTest {
    private val dir: File = File(System.getProperty("lapilli.conformance.dir") ?: "../tests/conformance")
    private val postgresUrl: String? = System.getenv("LAPILLI_TEST_POSTGRES_URL")?.takeIf { it.isNotEmpty() }

    @TestFactory
    fun scenarios(): List<DynamicTest> {
        val files = dir.listFiles { f -> f.name.endsWith(".json") }?.sortedBy { it.name }
            ?: error("no conformance directory at ${dir.absolutePath}")
        check(files.isNotEmpty()) { "no scenarios in ${dir.absolutePath}" }
        if (System.getenv("LAPILLI_REQUIRE_POSTGRES") != null) {
            checkNotNull(postgresUrl) { "LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not" }
        }
        val embedded = files.map { file -> DynamicTest.dynamicTest(file.nameWithoutExtension) { Scenario(file, null).run() } }
        val postgres = postgresUrl?.let { url ->
            files.filter { !ObjectMapper().readTree(it).path("embedded_only").asBoolean(false) }.map { file ->
                DynamicTest.dynamicTest("${file.nameWithoutExtension} (postgres)") { Scenario(file, freshContextUrl(url, file)).run() }
            }
        }.orEmpty()
        return embedded + postgres
    }

    private fun freshContextUrl(url: String, file: File): String =
        contextUrl(url, freshContext(file.nameWithoutExtension.filter { it in 'a'..'z' || it == '_' }.take(16)))

    // The errors of locations (API.md, "Where a store lives" and "Errors").

    /** The test database's URL; the test is skipped without one unless LAPILLI_REQUIRE_POSTGRES is set. */
    private fun requirePostgres(): String {
        if (System.getenv("LAPILLI_REQUIRE_POSTGRES") != null) {
            checkNotNull(postgresUrl) { "LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not" }
        }
        assumeTrue(postgresUrl != null, "no PostgreSQL server (LAPILLI_TEST_POSTGRES_URL)")
        return postgresUrl!!
    }

    /** A context name no earlier run used (a-z, 0-9 and _, at most 40 characters). */
    private fun freshContext(stem: String): String {
        val stamp = (System.currentTimeMillis() * 1000 + contexts.getAndIncrement()) % 1_000_000_000_000L
        val context = "kt${ProcessHandle.current().pid()}_${stamp}_$stem"
        check(context.length <= 40) { context }
        return context
    }

    private fun contextUrl(base: String, context: String): String = "$base${if ('?' in base) '&' else '?'}context=$context"

    @Test
    fun `an unknown URL scheme is InvalidArgument and makes no directory`() {
        // Needs no server: the scheme is refused before anything is opened. The JVM cannot change
        // its working directory: the one a relative path would land in must stay without mysql:.
        val wouldBe = File(System.getProperty("user.dir"), "mysql:")
        assertFalse(wouldBe.exists(), "$wouldBe exists before the test")
        val opens = listOf<(String) -> Store>({ Store.open(it) }, { Store.openReadOnly(it) })
        for (open in opens) {
            val e = assertThrows<LapilliException.InvalidArgument> { open("mysql://u@h/db").close() }
            assertEquals("INVALID_ARGUMENT", e.code)
            assertTrue("\"mysql\"" in e.message!!, e.message)
        }
        assertFalse(wouldBe.exists(), "opening mysql://u@h/db made $wouldBe")
    }

    @Test
    fun `a URL scheme in capitals opens the same context`() {
        // Schemes are case-insensitive: PostgreSQL://... is the same store as postgresql://...
        val url = contextUrl(requirePostgres(), freshContext("scheme"))
        Store.open(url).use { it.append(Event("T", listOf("k:1"), "7")) }
        val (scheme, rest) = url.split("://", limit = 2)
        Store.open(scheme.uppercase() + "://" + rest).use { assertEquals(1L, it.head()) }
    }

    @Test
    fun `openReadOnly of a missing context is Io, as of a missing directory`() {
        val url = contextUrl(requirePostgres(), freshContext("ro_missing"))
        val e = assertThrows<LapilliException.Io> { Store.openReadOnly(url).close() }
        assertEquals("IO", e.code)
        assertTrue("does not exist" in e.message!!, e.message)
        // The embedded backend answers a missing store with the same kind.
        withTempDir { dir ->
            val missing = assertThrows<LapilliException> { Store.openReadOnly(dir.resolve("missing")).close() }
            assertEquals(e::class, missing::class, missing.toString())
        }
    }

    @Test
    fun `a context of a newer schema is Corruption`() {
        val base = requirePostgres()
        val context = freshContext("newer")
        val url = contextUrl(base, context)
        Store.open(url).close()
        // As if a newer Lapilli had made it (psql takes the URL without Lapilli's `context`).
        // -X: no ~/.psqlrc; -q -At: the returned name alone on stdout (no command tag; stderr apart).
        val psql = ProcessBuilder(
            "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", base, "-c",
            "UPDATE lapilli_contexts SET schema_version = 99 WHERE name = '$context' RETURNING name",
        ).redirectError(ProcessBuilder.Redirect.PIPE).start()
        val output = psql.inputStream.bufferedReader().readText()
        val errors = psql.errorStream.bufferedReader().readText()
        assertEquals(0, psql.waitFor(), output + errors)
        assertEquals(context, output.trim(), errors)
        val opens = listOf<(String) -> Store>({ Store.open(it) }, { Store.openReadOnly(it) })
        for (open in opens) {
            val e = assertThrows<LapilliException.Corruption> { open(url).close() }
            assertEquals("CORRUPTION", e.code)
            assertTrue("schema version 99" in e.message!!, e.message)
            assertTrue("newer Lapilli" in e.message!!, e.message)
        }
    }

    private companion object {
        val contexts = AtomicLong()
    }
}

private class StepFailure(message: String) : AssertionError(message)

private fun fail(message: String): Nothing = throw StepFailure(message)

/** [postgres]: the URL of the context to run in; null: a fresh temporary directory. */
private class Scenario(private val file: File, postgres: String?) {
    private val root: JsonNode = ObjectMapper().readTree(file)
    private val dir = Files.createTempDirectory("lapilli-conformance-").toFile()
    private val location: String = postgres ?: dir.path
    private var store: Store? = null
    private val subscriptions = HashMap<String, Subscription>()

    fun run() {
        val steps = root.get("steps") ?: fail("${file.name}: no steps")
        try {
            steps.forEachIndexed { index, step ->
                try {
                    step(step)
                } catch (e: StepFailure) {
                    throw AssertionError("${file.name} step $index (${step.get("op")?.asText()}): ${e.message}")
                } catch (e: LapilliException) {
                    throw AssertionError("${file.name} step $index (${step.get("op")?.asText()}): unexpected $e", e)
                }
            }
        } finally {
            subscriptions.values.forEach { it.close() }
            store?.close()
            dir.deleteRecursively()
        }
    }

    private fun store(): Store = store ?: fail("no store was opened before this step")

    /** Runs [action]; with `expect_error`, checks it failed with that kind instead. */
    private fun <T> outcome(step: JsonNode, action: () -> T): T? {
        val want = step.get("expect_error")
        if (want == null) return action()
        val got = try {
            action()
        } catch (e: LapilliException) {
            checkError(want, e)
            return null
        }
        fail("expected ${want.get("kind").asText()}, but the step succeeded with $got")
    }

    private fun checkError(want: JsonNode, e: LapilliException) {
        val kind = want.get("kind").asText()
        if (e.code != kind) fail("expected $kind, got $e")
        want.get("position")?.let { p ->
            val got = when (e) {
                is LapilliException.Conflict -> e.position
                is LapilliException.AlreadyExists -> e.position
                else -> null
            }
            if (got != p.asLong()) fail("expected error position ${p.asLong()}, got $got ($e)")
        }
        want.get("message_contains")?.let { m ->
            if (e.message?.contains(m.asText()) != true) fail("message \"${e.message}\" lacks \"${m.asText()}\"")
        }
    }

    private fun step(step: JsonNode) {
        when (val op = step.get("op").asText()) {
            "open" -> outcome(step) { store = Store.open(location, options(step.get("options"))) }
            "open_again" -> {
                val second = outcome(step) { Store.open(location, options(step.get("options"))) }
                second?.close()
            }
            "close" -> store().close()
            "reopen" -> {
                store?.close()
                outcome(step) { store = Store.open(location, options(step.get("options"))) }
            }
            "head" -> outcome(step) { store().head() }?.let { expectLong(step.get("expect"), it, "head") }
            "append" -> {
                val result = outcome(step) { store().append(events(step.get("events")), condition(step.get("condition"))) }
                if (result != null) {
                    val want = step.get("expect") ?: return
                    val wanted = AppendResult(want.get("first").asLong(), want.get("last").asLong())
                    if (result != wanted) fail("expected $wanted, got $result")
                }
            }
            "append_concurrent" -> appendConcurrent(step)
            "read" -> read(step)
            "subscribe" -> outcome(step) {
                store().subscribe(query(step.get("query")), step.get("after")?.asLong() ?: 0)
            }?.let { subscriptions[step.get("id").asText()] = it }
            "next_batch" -> nextBatch(step)
            "close_subscription" -> subscription(step).close()
            else -> fail("unknown op $op")
        }
    }

    private fun expectLong(want: JsonNode?, got: Long, what: String) {
        if (want != null && want.asLong() != got) fail("$what: expected ${want.asLong()}, got $got")
    }

    /** All submitted before any is awaited, in list order: each coroutine starts undispatched,
     * so its append reaches the writer before the next coroutine is created. */
    private fun appendConcurrent(step: JsonNode) {
        val appends = step.get("appends").map { Pair(events(it.get("events")), condition(it.get("condition"))) }
        val s = store()
        val outcomes: List<String> = runBlocking {
            appends.map { (events, condition) ->
                async(start = CoroutineStart.UNDISPATCHED) {
                    try {
                        s.appendAsync(events, condition)
                        "ok"
                    } catch (e: LapilliException) {
                        e.code
                    }
                }
            }.awaitAll()
        }
        val want = step.get("expect") ?: return
        val ok = outcomes.count { it == "ok" }
        if (ok != want.get("ok").asInt()) fail("expected ${want.get("ok")} ok, got $outcomes")
        val wantErrors = want.get("errors")?.fields()?.asSequence()?.associate { it.key to it.value.asInt() } ?: emptyMap()
        val gotErrors = outcomes.filter { it != "ok" }.groupingBy { it }.eachCount()
        if (wantErrors.filterValues { it != 0 } != gotErrors) fail("expected errors $wantErrors, got $gotErrors")
    }

    private fun read(step: JsonNode) {
        val options = ReadOptions(
            after = step.get("after")?.asLong() ?: 0,
            until = step.get("until")?.asLong(),
            limit = step.get("limit")?.asLong(),
            backwards = step.get("backwards")?.asBoolean() ?: false,
        )
        val (head, got) = outcome(step) {
            store().read(query(step.get("query")), options).use { Pair(it.head, it.toList()) }
        } ?: return
        checkStoredShape(got)
        val want = step.get("expect") ?: fail("missing expect")
        val wantPositions = want.get("positions").map { it.asLong() }
        val gotPositions = got.map { it.position }
        if (gotPositions != wantPositions) fail("positions: expected $wantPositions, got $gotPositions")
        expectLong(want.get("head"), head, "read head")
        want.get("events")?.let { compareEvents(it, got) }
    }

    private fun nextBatch(step: JsonNode) {
        val sub = subscription(step)
        val got = outcome(step) {
            Box(sub.nextBatch(step.get("max").asInt(), step.get("timeout_ms").asLong().milliseconds))
        } ?: return
        val want = step.get("expect") ?: fail("missing expect")
        val batch = got.value
        if (want.get("ended")?.asBoolean() == true) {
            if (batch != null) fail("expected the end, got ${batch.map { it.position }}")
            return
        }
        if (batch == null) fail("expected a batch, got the end of the subscription")
        checkStoredShape(batch)
        val wantPositions = want.get("positions").map { it.asLong() }
        if (batch.map { it.position } != wantPositions) fail("positions: expected $wantPositions, got ${batch.map { it.position }}")
        want.get("caught_up")?.let { if (sub.caughtUp != it.asBoolean()) fail("caught_up: expected $it, got ${sub.caughtUp}") }
        expectLong(want.get("position"), sub.position, "subscription position")
    }

    private class Box<T>(val value: T)

    private fun subscription(step: JsonNode): Subscription =
        subscriptions[step.get("id").asText()] ?: fail("no subscription ${step.get("id")}")

    /** What API.md promises of every returned event: tags sorted, `recordedAt` non-decreasing with position. */
    private fun checkStoredShape(events: List<SequencedEvent>) {
        for (e in events) if (e.tags != e.tags.sortedWith(::compareUtf8)) fail("tags not sorted: ${e.tags}")
        val byPosition = events.sortedBy { it.position }
        byPosition.zipWithNext { a, b ->
            if (b.recordedAt < a.recordedAt) fail("recordedAt goes backwards at position ${b.position}")
        }
    }

    private fun compareEvents(want: JsonNode, got: List<SequencedEvent>) {
        if (want.size() != got.size) fail("expected ${want.size()} events, got ${got.size}")
        want.forEachIndexed { i, w ->
            val g = got[i]
            w.get("position")?.let { if (it.asLong() != g.position) fail("event $i: position ${g.position}, expected $it") }
            w.get("type")?.let { if (string(it) != g.type) fail("event $i: type ${g.type}, expected ${string(it)}") }
            val tags = w.get("tags")?.map(::string) ?: emptyList()
            if (tags != g.tags) fail("event $i: tags ${g.tags}, expected $tags")
            val data = w.get("data")?.let(::data) ?: ByteArray(0)
            if (!data.contentEquals(g.data)) fail("event $i: data differs (${g.data.size} bytes, expected ${data.size})")
        }
    }

    private fun options(node: JsonNode?): Options {
        var options = Options()
        if (node == null) return options
        node.get("durability")?.let {
            options = options.copy(durability = when (it.asText()) {
                "fsync" -> Durability.FSYNC
                "buffered" -> Durability.BUFFERED
                else -> fail("unknown durability $it")
            })
        }
        node.get("segment_size")?.let { options = options.copy(segmentSize = it.asLong()) }
        node.get("max_event_bytes")?.let { options = options.copy(maxEventBytes = it.asLong()) }
        return options
    }

    private fun string(node: JsonNode): String =
        if (node.isTextual) node.asText() else node.get("repeat").asText().repeat(node.get("times").asInt())

    private fun data(node: JsonNode): ByteArray = when {
        node.isTextual -> node.asText().encodeToByteArray()
        node.has("hex") -> node.get("hex").asText().chunked(2).map { it.toInt(16).toByte() }.toByteArray()
        node.has("fill") -> ByteArray(node.get("len").asInt()) { node.get("fill").asInt().toByte() }
        else -> fail("bad data $node")
    }

    private fun events(node: JsonNode): List<Event> = node.map { e ->
        Event(
            string(e.get("type")),
            e.get("tags")?.map(::string) ?: emptyList(),
            e.get("data")?.let(::data) ?: ByteArray(0),
        )
    }

    private fun query(node: JsonNode): Query =
        if (node.isTextual && node.asText() == "all") {
            Query.all()
        } else {
            Query.of(node.get("items").map { item ->
                QueryItem(
                    types = item.get("types")?.map(::string) ?: emptyList(),
                    tags = item.get("tags")?.map(::string) ?: emptyList(),
                )
            })
        }

    private fun condition(node: JsonNode?): AppendCondition? = node?.let {
        AppendCondition(
            failIfEventsMatch = query(it.get("fail_if_events_match")),
            after = it.get("after")?.takeUnless(JsonNode::isNull)?.asLong(),
            failIfExists = it.get("fail_if_exists")?.takeUnless(JsonNode::isNull)?.let(::query),
        )
    }
}

/** Bytewise UTF-8 order, which is how the engine sorts tags. */
internal fun compareUtf8(a: String, b: String): Int {
    val x = a.encodeToByteArray()
    val y = b.encodeToByteArray()
    for (i in 0 until minOf(x.size, y.size)) {
        val c = (x[i].toInt() and 0xff) - (y[i].toInt() and 0xff)
        if (c != 0) return c
    }
    return x.size - y.size
}
