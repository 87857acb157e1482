package dev.lapilli.examples

import dev.lapilli.AppendCondition
import dev.lapilli.Event
import dev.lapilli.LapilliException
import dev.lapilli.Query
import dev.lapilli.ReadOptions
import dev.lapilli.Store
import java.nio.file.Files

/**
 * The quickstart of jvm/README.md, run as its own JVM against the installed jar: append, read,
 * decide, append guarded, and see a stale decision refused. Argument: a store directory
 * (default: a fresh temporary one).
 */
fun main(args: Array<String>) {
    val dir = args.firstOrNull() ?: Files.createTempDirectory("lapilli-quickstart").toString()
    Store.open(dir).use { store ->
        val course = Query.forTags("course:c1")

        // Decide on what you read...
        val seen = store.read(course)
        val decidedAt = seen.head
        check(seen.none()) { "a new store has no course events" }
        // ...and append only if nothing matching was appended since.
        val defined = store.append(
            listOf(Event("CourseDefined", listOf("course:c1"), """{"capacity":30}""")),
            AppendCondition(course, after = decidedAt),
        )
        println("CourseDefined at position ${defined.first}")

        // A decision made on the same, now stale, read is refused.
        try {
            store.append(Event("CourseDefined", listOf("course:c1"), """{"capacity":10}"""), AppendCondition(course, after = decidedAt))
            check(false) { "a stale decision must conflict" }
        } catch (e: LapilliException.Conflict) {
            println("stale decision refused: ${e.message} (conflicting position ${e.position})")
        }

        store.append(Event("StudentRegistered", listOf("student:s1"), """{"name":"Ada"}"""))
        for (event in store.read(Query.all(), ReadOptions(backwards = true))) {
            println("${event.position} ${event.type} ${event.tags} ${event.dataAsString()} at ${event.recordedAt}")
        }
        check(store.head() == 2L) { "head is ${store.head()}" }
    }
    println("quickstart ok ($dir)")
}
