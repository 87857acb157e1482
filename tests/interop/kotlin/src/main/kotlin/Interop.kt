import com.fasterxml.jackson.databind.ObjectMapper
import dev.lapilli.Event
import dev.lapilli.Options
import dev.lapilli.Query
import dev.lapilli.Store
import java.io.File

/**
 * The Kotlin side of the cross-runtime interop check (`tests/interop/run.py`):
 * `write DIR EVENTS_JSON` appends the batches of the events file to a new store;
 * `read DIR` prints every event as one JSON line (position, type, sorted tags, data as hex).
 */
fun main(args: Array<String>) {
    val json = ObjectMapper()
    when (args.getOrNull(0)) {
        "write" -> {
            val spec = json.readTree(File(args[2]))
            Store.open(args[1], Options(segmentSize = spec["segment_size"].asLong())).use { store ->
                for (batch in spec["batches"]) {
                    store.append(batch.map { e ->
                        Event(e["type"].asText(), e["tags"].map { it.asText() }, unhex(e["data_hex"].asText()))
                    })
                }
            }
        }
        "read" -> Store.openReadOnly(args[1]).use { store ->
            for (event in store.read(Query.all())) {
                val line = linkedMapOf(
                    "position" to event.position,
                    "type" to event.type,
                    "tags" to event.tags,
                    "data_hex" to event.data.joinToString("") { "%02x".format(it) },
                )
                println(json.writeValueAsString(line))
            }
        }
        else -> error("usage: Interop write DIR EVENTS_JSON | Interop read DIR")
    }
}

private fun unhex(text: String) = ByteArray(text.length / 2) { text.substring(2 * it, 2 * it + 2).toInt(16).toByte() }
