package dev.lapilli.examples

import dev.lapilli.Durability
import dev.lapilli.Event
import dev.lapilli.Options
import dev.lapilli.Query
import dev.lapilli.Store
import java.nio.file.Files

/**
 * Measures a warm forward read through the `Sequence` of 256-byte events (the bar of issue 6:
 * at least 500k events/s). Arguments: event count (default 1,000,000), rounds (default 5).
 * Not part of the test run; the benchmark issue owns the numbers.
 */
fun main(args: Array<String>) {
    val count = args.getOrNull(0)?.toInt() ?: 1_000_000
    val rounds = args.getOrNull(1)?.toInt() ?: 5
    val dir = Files.createTempDirectory("lapilli-read-bench")
    try {
        Store.open(dir, Options(durability = Durability.BUFFERED)).use { store ->
            val data = ByteArray(256) { it.toByte() }
            (0 until count).chunked(10_000).forEach { chunk ->
                store.append(chunk.map { Event("Bench", listOf("bench:${it % 16}"), data) })
            }
            repeat(rounds) { round ->
                val started = System.nanoTime()
                var n = 0
                var bytes = 0L
                for (event in store.read(Query.all())) {
                    n++
                    bytes += event.data.size
                }
                val seconds = (System.nanoTime() - started) / 1e9
                check(n == count && bytes == 256L * count) { "read $n events" }
                println("round $round: $n events of 256 bytes in %.3f s = %.0f events/s".format(seconds, n / seconds))
            }
        }
    } finally {
        dir.toFile().deleteRecursively()
    }
}
