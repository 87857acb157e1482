package dev.lapilli.examples

import dev.lapilli.Event
import dev.lapilli.Query
import dev.lapilli.SequencedEvent
import dev.lapilli.Store
import dev.lapilli.asFlow
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.takeWhile
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import java.io.File
import java.nio.file.Files
import kotlin.time.Duration.Companion.seconds

/**
 * A read model (seats taken per course) kept current by a subscription, with its state and the
 * position it reflects persisted together after each event: a restarted projection resumes
 * with `subscribe(query, after = savedPosition)` and neither misses nor double-counts.
 * Argument: a directory for the store and the checkpoint (default: a fresh one).
 */
fun main(args: Array<String>) {
    val base = File(args.firstOrNull() ?: Files.createTempDirectory("lapilli-projection").toString())
    val storeDir = File(base, "store").path
    val checkpoint = File(base, "seats.checkpoint")
    Store.open(storeDir).use { store ->
        store.append((1..3).map { subscribed("s$it", "c1") } + subscribed("s1", "c2"))

        // First run: catch up, then follow live appends until position 6 is reflected.
        runBlocking {
            val projection = SeatsProjection.load(checkpoint)
            val job = launch(Dispatchers.Default) {
                store.subscribe(SEATS, after = projection.position).asFlow()
                    .takeWhile { projection.apply(it); projection.save(checkpoint); it.position < 6 }
                    .collect {}
            }
            delay(100)
            store.append(listOf(subscribed("s2", "c2"), subscribed("s4", "c1")))
            withTimeout(10.seconds) { job.join() }
        }
        val afterFirstRun = SeatsProjection.load(checkpoint)
        println("after the first run: ${afterFirstRun.seats} at position ${afterFirstRun.position}")
        check(afterFirstRun.position == 6L && afterFirstRun.seats == mapOf("c1" to 4, "c2" to 2)) { "first run: $afterFirstRun" }

        // Events appended while the projection is down.
        store.append(listOf(subscribed("s5", "c3"), Event("Unrelated", listOf("x:1")), subscribed("s3", "c2")))

        // Restart: resume from the checkpoint, catch up, stop when caught up.
        val resumed = SeatsProjection.load(checkpoint)
        store.subscribe(SEATS, after = resumed.position).use { sub ->
            var applied = 0
            while (!sub.caughtUp) {
                for (e in sub.nextBatch(100, 1.seconds) ?: break) { resumed.apply(e); applied++ }
            }
            resumed.save(checkpoint)
            println("restart applied $applied new events: ${resumed.seats} at position ${resumed.position}")
            check(applied == 2) { "the restart applies only what it missed, got $applied" }
        }

        // The persisted projection equals a rebuild from scratch.
        val rebuilt = SeatsProjection(0, mutableMapOf())
        store.read(SEATS).forEach(rebuilt::apply)
        check(SeatsProjection.load(checkpoint).seats == rebuilt.seats) { "resumed ${resumed.seats} != rebuilt ${rebuilt.seats}" }
        check(rebuilt.seats == mapOf("c1" to 4, "c2" to 3, "c3" to 1)) { "rebuilt ${rebuilt.seats}" }
    }
    println("projection ok ($base)")
}

private val SEATS = Query.forTypes("StudentSubscribedToCourse")

private fun subscribed(student: String, course: String) =
    Event("StudentSubscribedToCourse", listOf("course:$course", "student:$student"), """{"student":"$student","course":"$course"}""")

/** Seats per course, and the last position folded in. */
data class SeatsProjection(var position: Long, val seats: MutableMap<String, Int>) {
    fun apply(event: SequencedEvent) {
        val course = event.tags.first { it.startsWith("course:") }.removePrefix("course:")
        seats[course] = (seats[course] ?: 0) + 1
        position = event.position
    }

    /** State and position written together, atomically (write a temp file, then rename). */
    fun save(file: File) {
        val tmp = File(file.path + ".tmp")
        tmp.writeText("$position\n" + seats.entries.sortedBy { it.key }.joinToString("\n") { "${it.key}=${it.value}" })
        Files.move(tmp.toPath(), file.toPath(), java.nio.file.StandardCopyOption.ATOMIC_MOVE)
    }

    companion object {
        fun load(file: File): SeatsProjection {
            if (!file.exists()) return SeatsProjection(0, mutableMapOf())
            val lines = file.readLines()
            val seats = lines.drop(1).filter { it.isNotBlank() }.associate { line ->
                line.substringBefore('=') to line.substringAfter('=').toInt()
            }
            return SeatsProjection(lines.first().toLong(), seats.toMutableMap())
        }
    }
}
