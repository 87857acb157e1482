package dev.lapilli

import dev.lapilli.ffi.FfiQuery
import dev.lapilli.ffi.FfiQueryItem
import java.time.Instant

/** Whether an append returns only once its batch is on disk. */
enum class Durability(internal val wire: String) {
    /** One fsync per group commit before any of its appends returns. The default. */
    FSYNC("fsync"),

    /** Written to the OS, not forced: for tests and throwaway data. */
    BUFFERED("buffered"),
}

/** Options of [Store.open] (API.md, "Store"). */
data class Options @JvmOverloads constructor(
    val durability: Durability = Durability.FSYNC,
    /** Bytes per segment file, preallocated; applies to segments created from now on. */
    val segmentSize: Long = 256L shl 20,
    val maxEventBytes: Long = 16L shl 20,
)

/**
 * An event to append. [data] is compared by content, so two events with equal bytes are equal.
 * Tag order does not matter; reads return tags sorted.
 */
data class Event @JvmOverloads constructor(val type: String, val tags: List<String> = emptyList(), val data: ByteArray = EMPTY) {
    /** An event whose data is the UTF-8 bytes of [data] (JSON, say). */
    constructor(type: String, tags: List<String>, data: String) : this(type, tags, data.encodeToByteArray())

    override fun equals(other: Any?): Boolean =
        other is Event && type == other.type && tags == other.tags && data.contentEquals(other.data)

    override fun hashCode(): Int = (type.hashCode() * 31 + tags.hashCode()) * 31 + data.contentHashCode()

    override fun toString(): String = "Event(type=$type, tags=$tags, data=${data.size} bytes)"
}

/** An event as stored: what reads and subscriptions return. [tags] are sorted. */
data class SequencedEvent(
    val position: Long,
    /** Commit time of the event's batch (microsecond precision); non-decreasing with position. */
    val recordedAt: Instant,
    val type: String,
    val tags: List<String>,
    val data: ByteArray,
) {
    /** [data] decoded as UTF-8 (for JSON payloads). */
    fun dataAsString(): String = data.decodeToString()

    /** The event without its position and time, e.g. to append it elsewhere. */
    fun toEvent() = Event(type, tags, data)

    override fun equals(other: Any?): Boolean =
        other is SequencedEvent && position == other.position && recordedAt == other.recordedAt &&
            type == other.type && tags == other.tags && data.contentEquals(other.data)

    override fun hashCode(): Int =
        (((position.hashCode() * 31 + recordedAt.hashCode()) * 31 + type.hashCode()) * 31 + tags.hashCode()) * 31 +
            data.contentHashCode()

    override fun toString(): String =
        "SequencedEvent(position=$position, recordedAt=$recordedAt, type=$type, tags=$tags, data=${data.size} bytes)"
}

private val EMPTY = ByteArray(0)

/**
 * One alternative of a [Query]: the event's type is one of [types] (or [types] is empty) and
 * every tag of [tags] is among the event's tags.
 */
data class QueryItem @JvmOverloads constructor(val types: List<String> = emptyList(), val tags: List<String> = emptyList()) {
    internal fun toFfi() = FfiQueryItem(types, tags)
}

/**
 * What a read, subscription or append condition selects: [all] events, or those matching any
 * of [items]. A query with no items, or an item with neither types nor tags, is refused with
 * [LapilliException.InvalidArgument] when used, never guessed at.
 */
@ConsistentCopyVisibility
data class Query private constructor(
    /** Null for [all]. */
    val items: List<QueryItem>?,
) {
    val isAll: Boolean get() = items == null

    override fun toString() = if (items == null) "Query.all()" else "Query.of($items)"

    internal fun toFfi(): FfiQuery =
        if (items == null) FfiQuery.All else FfiQuery.Items(items.map { it.toFfi() })

    companion object {
        private val ALL = Query(null)

        @JvmStatic fun all(): Query = ALL

        @JvmStatic fun of(vararg items: QueryItem): Query = Query(items.toList())

        @JvmStatic fun of(items: List<QueryItem>): Query = Query(items.toList())

        /** One item with these tags and no types: events carrying every one of the tags. */
        @JvmStatic fun forTags(vararg tags: String): Query = Query(listOf(QueryItem(tags = tags.toList())))

        /** One item with these types and no tags: events of any of the types. */
        @JvmStatic fun forTypes(vararg types: String): Query = Query(listOf(QueryItem(types = types.toList())))
    }
}

/**
 * Guards an append (API.md, "Append"). Boundary clause: fail with
 * [LapilliException.Conflict] if an event matching [failIfEventsMatch] lies after [after]
 * (null: any match at all). Existence clause: fail with [LapilliException.AlreadyExists] if an
 * event matching [failIfExists] lies anywhere in the store.
 */
data class AppendCondition @JvmOverloads constructor(
    val failIfEventsMatch: Query,
    val after: Long? = null,
    val failIfExists: Query? = null,
)

/** Positions given to an append's events; [last] is the head right after it. */
data class AppendResult(val first: Long, val last: Long)

/**
 * What [Store.stats] returns. Counters count what this handle did since it was opened (a
 * follower appends nothing: its write counters are 0).
 *
 * @property fsyncP50Micros upper bound of the histogram bucket holding the median fsync
 *   latency (buckets are at most 12.5 % wide); [fsyncMaxMicros] is exact. 0 before the first
 *   fsync, and always with [Durability.BUFFERED].
 * @property queueDepth appends handed to the writer and not yet taken into a group.
 * @property indexBytes bytes of the index files in the store directory.
 * @property subscriptions subscriptions of this handle that are not closed.
 * @property followerLagPositions for a read-only handle, events committed that it has not
 *   published yet, and [followerLagMillis] how long ago the first of them was committed; null
 *   for a writable handle.
 */
data class Stats(
    val head: Long,
    val eventsAppended: Long,
    val bytesAppended: Long,
    val groupCommits: Long,
    val eventsPerCommitMean: Double,
    val eventsPerCommitMax: Long,
    val fsyncs: Long,
    val fsyncP50Micros: Long,
    val fsyncP99Micros: Long,
    val fsyncMaxMicros: Long,
    val queueDepth: Long,
    val queueDepthMax: Long,
    val segments: Long,
    val indexBytes: Long,
    val subscriptions: Long,
    val followerLagPositions: Long?,
    val followerLagMillis: Long?,
)

/**
 * The window `(after, until]` of a read ([until] null: the head when the read starts; clamped
 * to it), at most [limit] events (null: no cap), ascending or, with [backwards], descending.
 */
data class ReadOptions @JvmOverloads constructor(
    val after: Long = 0,
    val until: Long? = null,
    val limit: Long? = null,
    val backwards: Boolean = false,
)
