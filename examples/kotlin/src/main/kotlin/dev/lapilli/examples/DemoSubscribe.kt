package dev.lapilli.examples

import dev.lapilli.Query
import dev.lapilli.SequencedEvent
import dev.lapilli.Store
import kotlin.time.Duration.Companion.seconds

/**
 * The JVM part of the repository's demo: opens the store another runtime wrote (course `c1`,
 * students `s1`..`s3`), subscribes to `course:c1` from position 0 and tells the catch-up in
 * sentences until it is caught up, then closes. Argument: the store directory.
 *
 * `mvn -q -f examples/kotlin/pom.xml exec:java -Dexec.mainClass=dev.lapilli.examples.DemoSubscribeKt -Dexec.args=STORE_DIR`
 */
fun main(args: Array<String>) {
    val dir = args.singleOrNull() ?: error("usage: DemoSubscribeKt STORE_DIR")
    Store.open(dir).use { store ->
        println("Kotlin: subscribing to course:c1 in $dir (head ${store.head()})")
        store.subscribe(Query.forTags("course:c1"), after = 0).use { subscription ->
            var told = 0
            while (!subscription.caughtUp) {
                val batch = subscription.nextBatch(100, 1.seconds) ?: break
                for (event in batch) {
                    println("  " + sentence(event))
                    told++
                }
            }
            println("Kotlin: caught up at position ${subscription.position} after $told events about course c1.")
        }
    }
}

private fun SequencedEvent.id(prefix: String): String? =
    tags.firstOrNull { it.startsWith("$prefix:") }?.removePrefix("$prefix:")

internal fun sentence(event: SequencedEvent): String {
    val course = event.id("course")
    val student = event.id("student")
    val data = event.dataAsString()
    val what = when (event.type) {
        "CourseDefined" -> "course $course was defined" + (jsonInt(data, "capacity")?.let { " with room for $it students" } ?: "")
        "StudentRegistered" -> "student $student registered"
        "StudentSubscribedToCourse" -> "student $student subscribed to course $course"
        else -> "a ${event.type} event was recorded with tags ${event.tags}" + (if (data.isNotEmpty()) " and data $data" else "")
    }
    return "#${event.position} (${event.recordedAt}): ${what.replaceFirstChar { it.uppercase() }}."
}
