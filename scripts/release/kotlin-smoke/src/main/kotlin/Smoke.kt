// The release smoke test (Kotlin): the same few steps as smoke.py and smoke.mjs. Built by
// scripts/release.sh in a fresh Maven project against the installed dev.lapilli:lapilli:
// open, a conditional append accepted and one refused with Conflict, a bounded read,
// a subscription that receives, close. Argument: the store directory.
import dev.lapilli.AppendCondition
import dev.lapilli.Event
import dev.lapilli.LapilliException
import dev.lapilli.Query
import dev.lapilli.ReadOptions
import dev.lapilli.Store
import kotlin.time.Duration.Companion.seconds

fun main(args: Array<String>) {
    Store.open(args[0]).use { store ->
        val course = Query.forTags("course:c1")
        val seen = store.read(course)
        check(seen.none()) { "a fresh store has no course events" }
        val condition = AppendCondition(course, after = seen.head)
        store.append(listOf(Event("CourseDefined", listOf("course:c1"), """{"capacity":2}""")), condition)
        try {
            store.append(listOf(Event("CourseDefined", listOf("course:c1"))), condition)
            error("the second append on a stale head was accepted")
        } catch (expected: LapilliException.Conflict) {
        }
        store.append(List(3) { Event("Noted", listOf("note")) })
        val bounded = store.read(Query.all(), ReadOptions(after = 1, limit = 2)).map { it.position }.toList()
        check(bounded == listOf(2L, 3L)) { "bounded read: $bounded" }
        store.subscribe(course).use { sub ->
            val batch = sub.nextBatch(10, 10.seconds)
            check(batch?.firstOrNull()?.type == "CourseDefined") { "subscription: $batch" }
        }
    }
    val jar = Store::class.java.protectionDomain.codeSource.location.path
    println("kotlin smoke ok: lapilli from $jar on ${System.getProperty("os.arch")}")
}
