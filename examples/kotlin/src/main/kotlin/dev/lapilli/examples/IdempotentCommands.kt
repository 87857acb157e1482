package dev.lapilli.examples

import dev.lapilli.AppendCondition
import dev.lapilli.Event
import dev.lapilli.LapilliException
import dev.lapilli.Query
import dev.lapilli.Store
import java.nio.file.Files

/**
 * An idempotent command handler: every command carries an id, and its events carry the tag
 * `command:<id>`. The append's existence clause (`failIfExists`) refuses a second handling of
 * the same id anywhere in the store's history, so a redelivered command is answered "already
 * done" instead of being applied twice. Argument: a store directory (default: a fresh one).
 */
fun main(args: Array<String>) {
    val dir = args.firstOrNull() ?: Files.createTempDirectory("lapilli-idempotent").toString()
    Store.open(dir).use { store ->
        store.append(Event("StudentRegistered", listOf("student:s1"), """{"student":"s1"}"""))
        val deliveries = listOf(
            RenameStudent("cmd-1", "s1", "Ada"),
            RenameStudent("cmd-2", "s1", "Ada L."),
            RenameStudent("cmd-1", "s1", "Ada"), // redelivered by an at-least-once queue
            RenameStudent("cmd-3", "s2", "Bob"), // no such student
            RenameStudent("cmd-2", "s1", "Ada L."), // redelivered again
        )
        val answers = deliveries.map { cmd -> "${cmd.id}: ${handle(store, cmd)}" }
        answers.forEach(::println)
        check(answers == listOf(
            "cmd-1: done at position 2",
            "cmd-2: done at position 3",
            "cmd-1: already done (position 2)",
            "cmd-3: rejected: no student s2",
            "cmd-2: already done (position 3)",
        )) { "unexpected answers $answers" }
        check(store.read(Query.forTypes("StudentRenamed")).count() == 2) { "each command applied once" }
    }
    println("idempotent commands ok ($dir)")
}

data class RenameStudent(val id: String, val student: String, val name: String)

fun handle(store: Store, cmd: RenameStudent): String {
    val boundary = Query.forTags("student:${cmd.student}")
    val read = store.read(boundary)
    val head = read.head
    if (read.none { it.type == "StudentRegistered" }) return "rejected: no student ${cmd.student}"
    return try {
        val r = store.append(
            Event("StudentRenamed", listOf("student:${cmd.student}", "command:${cmd.id}"), """{"name":"${cmd.name}"}"""),
            AppendCondition(boundary, after = head, failIfExists = Query.forTags("command:${cmd.id}")),
        )
        "done at position ${r.first}"
    } catch (e: LapilliException.AlreadyExists) {
        "already done (position ${e.position})"
    }
}
