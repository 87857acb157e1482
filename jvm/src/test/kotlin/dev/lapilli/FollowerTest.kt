package dev.lapilli

import org.junit.jupiter.api.Test
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.test.assertEquals
import kotlin.test.assertTrue
import kotlin.time.Duration.Companion.milliseconds

/**
 * A read-only follower in this JVM, following a store that another process writes: the core's
 * `append_forever` example, a Rust writer appending batches until it is killed.
 */
class FollowerTest {
    private val repo = File("..").canonicalFile

    private fun writerBinary(): File {
        val build = ProcessBuilder("cargo", "build", "-q", "--release", "-p", "lapilli-core", "--example", "append_forever")
            .directory(repo).inheritIO().start()
        assertEquals(0, build.waitFor(), "building the writer")
        val target = System.getenv("CARGO_TARGET_DIR")?.let(::File) ?: File(repo, "target")
        return File(target, "release/examples/append_forever")
    }

    private fun startWriter(binary: File, dir: File): Process {
        val process = ProcessBuilder(binary.path, dir.path).redirectError(ProcessBuilder.Redirect.INHERIT).start()
        assertEquals("ready", process.inputStream.bufferedReader().readLine())
        return process
    }

    private fun eventually(what: String, check: () -> Boolean) {
        val deadline = System.nanoTime() + 10_000_000_000
        while (!check()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for $what")
            Thread.sleep(5)
        }
    }

    /** Every batch seen is whole and in order; positions are gapless. */
    private fun checkWholeBatches(events: List<SequencedEvent>) {
        fun word(e: SequencedEvent, n: Int) = ByteBuffer.wrap(e.data).order(ByteOrder.LITTLE_ENDIAN).getInt(4 * n)
        var i = 0
        while (i < events.size) {
            val k = word(events[i], 2)
            assertEquals(0, word(events[i], 1), "a batch starts with its first event at ${events[i].position}")
            assertTrue(i + k <= events.size, "the batch at ${events[i].position} is cut short")
            for (j in 0 until k) {
                assertEquals(events[i].tags, events[i + j].tags)
                assertEquals(j, word(events[i + j], 1))
            }
            i += k
        }
        assertEquals((1L..events.size).toList(), events.map { it.position })
    }

    @Test
    fun `a follower follows a writer process through kill and restart`() = withTempDir { tmp ->
        val binary = writerBinary()
        val dir = tmp.resolve("live").toFile()
        var writer = startWriter(binary, dir)
        try {
            Store.openReadOnly(dir.path).use { follower ->
                follower.subscribe(Query.all()).use { subscription ->
                    val delivered = mutableListOf<Long>()
                    repeat(2) {
                        val target = follower.head() + 200
                        eventually("the writer to make progress") { follower.head() >= target }
                        val read = follower.read(Query.all())
                        assertTrue(read.head >= target)
                        checkWholeBatches(read.toList())
                        assertThrowsReadOnly { follower.append(Event("X")) }
                        writer.destroyForcibly().waitFor()
                        val atKill = follower.head()
                        writer = startWriter(binary, dir)
                        eventually("the restarted writer to be followed") { follower.head() > atKill }
                    }
                    // Stop the writer first: a writer that outpaces the drain would never leave
                    // the subscription a quiet 100 ms to stop on.
                    writer.destroyForcibly().waitFor()
                    while (true) {
                        val batch = subscription.nextBatch(1000, 100.milliseconds) ?: break
                        if (batch.isEmpty()) break
                        delivered += batch.map { it.position }
                    }
                    assertEquals((1L..delivered.size).toList(), delivered, "in order, no gap, no duplicate")
                    assertTrue(delivered.size >= 400)
                }
                checkWholeBatches(follower.read(Query.all()).toList())
            }
        } finally {
            writer.destroyForcibly().waitFor()
        }
    }

    private fun assertThrowsReadOnly(block: () -> Unit) {
        val error = runCatching(block).exceptionOrNull()
        assertTrue(error is LapilliException.ReadOnly, "expected ReadOnly, got $error")
    }
}
