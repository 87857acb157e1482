package dev.lapilli.examples

import dev.lapilli.AppendCondition
import dev.lapilli.Event
import dev.lapilli.LapilliException
import dev.lapilli.Query
import dev.lapilli.QueryItem
import dev.lapilli.Store
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import java.nio.file.Files

/**
 * A DCB decision model: "a course has at most `capacity` students" and "a student takes at
 * most 2 courses", enforced by one conditional append whose boundary is exactly the events the
 * decision read (the course's and the student's), with a bounded retry when another decision
 * got there first. Argument: a store directory (default: a fresh temporary one).
 */
fun main(args: Array<String>) {
    val dir = args.firstOrNull() ?: Files.createTempDirectory("lapilli-courses").toString()
    Store.open(dir).use { store ->
        store.append(listOf(
            Event("CourseDefined", listOf("course:c1"), """{"course":"c1","capacity":2}"""),
            Event("CourseDefined", listOf("course:c2"), """{"course":"c2","capacity":10}"""),
            Event("CourseDefined", listOf("course:c3"), """{"course":"c3","capacity":10}"""),
        ))
        for (s in 1..3) store.append(Event("StudentRegistered", listOf("student:s$s"), """{"student":"s$s","name":"Student $s"}"""))

        // Three students race for the two seats of c1, from coroutines at the same moment.
        val outcomes = runBlocking(Dispatchers.Default) {
            (1..3).map { s -> async { "s$s: " + subscribe(store, "s$s", "c1") } }.awaitAll()
        }
        outcomes.forEach { println(it) }
        val taken = store.read(Query.of(QueryItem(listOf("StudentSubscribedToCourse"), listOf("course:c1")))).count()
        check(taken == 2) { "course c1 has $taken students; its capacity is 2" }
        check(outcomes.count { it.contains(": subscribed") } == 2) { "two of three must get a seat: $outcomes" }

        // A student takes at most two courses.
        store.append(Event("StudentRegistered", listOf("student:s4"), """{"student":"s4","name":"Student 4"}"""))
        val s4 = runBlocking { listOf("c2", "c3", "c1").map { subscribe(store, "s4", it) } }
        println("s4 -> c2, c3, c1: $s4")
        check(s4[0] == "subscribed" && s4[1] == "subscribed") { "s4 gets two courses: $s4" }
        check(s4[2].startsWith("rejected")) { "a third course is refused: $s4" }
        val s4Courses = store.read(Query.of(QueryItem(listOf("StudentSubscribedToCourse"), listOf("student:s4")))).count()
        check(s4Courses == 2) { "s4 takes $s4Courses courses" }
    }
    println("course subscriptions ok ($dir)")
}

private const val MAX_COURSES_PER_STUDENT = 2
private const val MAX_ATTEMPTS = 5

/** Command handler: read, decide, append guarded by the same query; retry a few times on Conflict. */
suspend fun subscribe(store: Store, student: String, course: String): String {
    val boundary = Query.of(
        QueryItem(listOf("CourseDefined", "StudentSubscribedToCourse"), listOf("course:$course")),
        QueryItem(listOf("StudentRegistered", "StudentSubscribedToCourse"), listOf("student:$student")),
    )
    repeat(MAX_ATTEMPTS) { attempt ->
        val read = store.read(boundary)
        val head = read.head
        var capacity: Int? = null
        var seatsTaken = 0
        var registered = false
        var studentCourses = 0
        var already = false
        for (e in read) {
            when (e.type) {
                "CourseDefined" -> capacity = jsonInt(e.dataAsString(), "capacity")
                "StudentRegistered" -> registered = true
                "StudentSubscribedToCourse" -> {
                    if ("course:$course" in e.tags) seatsTaken++
                    if ("student:$student" in e.tags) studentCourses++
                    if ("course:$course" in e.tags && "student:$student" in e.tags) already = true
                }
            }
        }
        val refusal = when {
            capacity == null -> "rejected: no course $course"
            !registered -> "rejected: no student $student"
            already -> "rejected: already subscribed"
            seatsTaken >= capacity -> "rejected: course $course is full"
            studentCourses >= MAX_COURSES_PER_STUDENT -> "rejected: $student already takes $studentCourses courses"
            else -> null
        }
        if (refusal != null) return refusal
        try {
            store.appendAsync(
                Event("StudentSubscribedToCourse", listOf("course:$course", "student:$student"),
                    """{"student":"$student","course":"$course"}"""),
                AppendCondition(boundary, after = head),
            )
            return if (attempt == 0) "subscribed" else "subscribed (after $attempt retries)"
        } catch (e: LapilliException.Conflict) {
            // Someone changed what we decided on (event ${e.position}): decide again on fresh facts.
        }
    }
    return "gave up after $MAX_ATTEMPTS conflicts"
}
