package dev.lapilli

import dev.lapilli.ffi.FfiException

/**
 * Every failure of Lapilli, one subclass per error kind of the contract (API.md, "Errors").
 * [code] is the kind's stable name (`"CONFLICT"`, `"INVALID_ARGUMENT"`, ...), the same as
 * Node.js's `err.code` and the conformance scenarios'.
 *
 * Bad arguments are always [InvalidArgument] (never `IllegalArgumentException`), whether the
 * engine or this Kotlin layer finds them (a negative position, say), so one `catch` covers
 * every way a call can be refused. Bad input never changes the store.
 */
sealed class LapilliException(val code: String, message: String) : RuntimeException(message) {
    /** The boundary clause of an append condition matched an event after `after`. */
    class Conflict(message: String, val position: Long?) : LapilliException("CONFLICT", message)

    /** The existence clause of an append condition matched an event somewhere in the store. */
    class AlreadyExists(message: String, val position: Long?) : LapilliException("ALREADY_EXISTS", message)

    class InvalidArgument(message: String) : LapilliException("INVALID_ARGUMENT", message)

    /** Another handle, in this or another process, holds the store writable. */
    class StoreLocked(message: String) : LapilliException("STORE_LOCKED", message)

    /** The store (or the handle used) was closed. */
    class Closed(message: String) : LapilliException("CLOSED", message)

    /** A write on a read-only handle. */
    class ReadOnly(message: String) : LapilliException("READ_ONLY", message)

    class Corruption(message: String) : LapilliException("CORRUPTION", message)

    class Io(message: String) : LapilliException("IO", message)

    override fun toString(): String = "LapilliException.${this::class.simpleName}($code): $message"
}

/** The one place where the native error becomes a [LapilliException]: one variant per kind. */
internal fun lapilliException(e: FfiException): LapilliException =
    when (e) {
        is FfiException.Conflict -> LapilliException.Conflict(e.detail, e.position?.toLong())
        is FfiException.AlreadyExists -> LapilliException.AlreadyExists(e.detail, e.position?.toLong())
        is FfiException.InvalidArgument -> LapilliException.InvalidArgument(e.detail)
        is FfiException.StoreLocked -> LapilliException.StoreLocked(e.detail)
        is FfiException.Closed -> LapilliException.Closed(e.detail)
        is FfiException.ReadOnly -> LapilliException.ReadOnly(e.detail)
        is FfiException.Corruption -> LapilliException.Corruption(e.detail)
        is FfiException.Io -> LapilliException.Io(e.detail)
    }

/**
 * A handle this layer released with `close()`. Calls check [released] first; one racing the
 * release (UniFFI then refuses the released handle with `IllegalStateException`) is answered
 * [LapilliException.Closed] because the flag says we released it, never by reading the
 * exception's text.
 */
internal class Released {
    @Volatile var released = false
        private set

    /** True the first time only: the caller releases the native handle. */
    fun release(): Boolean = synchronized(this) { if (released) false else { released = true; true } }
}

/** Runs a native call on a handle of [owner], turning its error into a [LapilliException]. */
internal inline fun <T> ffiCall(what: String, owner: Released?, block: () -> T): T {
    if (owner?.released == true) throw LapilliException.Closed("the $what is closed")
    return try {
        block()
    } catch (e: FfiException) {
        throw lapilliException(e)
    } catch (e: IllegalStateException) {
        if (owner?.released == true) throw LapilliException.Closed("the $what is closed")
        throw e
    }
}

internal fun invalid(message: String): Nothing = throw LapilliException.InvalidArgument(message)

/** A position argument as the engine's unsigned value; negative is refused, never wrapped. */
internal fun positionArg(name: String, value: Long): ULong {
    if (value < 0) invalid("$name is $value; a position is never negative")
    return value.toULong()
}
