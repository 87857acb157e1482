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

    /** A write on a read-only handle; also what `Store.openReadOnly` raises in this version. */
    class ReadOnly(message: String) : LapilliException("READ_ONLY", message)

    class Corruption(message: String) : LapilliException("CORRUPTION", message)

    class Io(message: String) : LapilliException("IO", message)

    override fun toString(): String = "LapilliException.${this::class.simpleName}($code): $message"
}

/** The one place where the native error becomes a [LapilliException]. */
internal fun lapilliException(code: String, message: String, position: Long?): LapilliException =
    when (code) {
        "CONFLICT" -> LapilliException.Conflict(message, position)
        "ALREADY_EXISTS" -> LapilliException.AlreadyExists(message, position)
        "INVALID_ARGUMENT" -> LapilliException.InvalidArgument(message)
        "STORE_LOCKED" -> LapilliException.StoreLocked(message)
        "CLOSED" -> LapilliException.Closed(message)
        "READ_ONLY" -> LapilliException.ReadOnly(message)
        "CORRUPTION" -> LapilliException.Corruption(message)
        "IO" -> LapilliException.Io(message)
        else -> LapilliException.Io("unknown error kind $code: $message")
    }

/**
 * Runs a native call, turning its error into a [LapilliException]. A handle already released
 * by `close()` answers [LapilliException.Closed] (UniFFI reports it as `IllegalStateException`).
 */
internal inline fun <T> ffiCall(what: String, block: () -> T): T =
    try {
        block()
    } catch (e: FfiException.Failure) {
        throw lapilliException(e.code, e.detail, e.position?.toLong())
    } catch (e: IllegalStateException) {
        if (e.message?.contains("already been destroyed") == true) {
            throw LapilliException.Closed("the $what is closed")
        }
        throw e
    }

internal fun invalid(message: String): Nothing = throw LapilliException.InvalidArgument(message)

/** A position argument as the engine's unsigned value; negative is refused, never wrapped. */
internal fun positionArg(name: String, value: Long): ULong {
    if (value < 0) invalid("$name is $value; a position is never negative")
    return value.toULong()
}
