package dev.lapilli

import com.sun.jna.Native
import dev.lapilli.ffi.instanceMarker
import dev.lapilli.ffi.takeDirectError

/**
 * The two native calls on every append's path, mapped by JNA directly with primitive
 * arguments (`lapilli_jvm_append_packed`, `lapilli_jvm_submit_packed` in `jvm/rust/lib.rs`),
 * beside the generated UniFFI bindings for everything else.
 *
 * Why not UniFFI here: each UniFFI call allocates a call-status structure (a JNA `Memory`
 * registered with JNA's cleaner and freed by its thread). With 64 appends in flight that
 * bookkeeping took more than half of the JVM's own CPU samples. These calls answer a plain
 * number: `>= 0` is the result, a negative one is minus the id of a failure the engine keeps
 * until [check] takes it through UniFFI, so errors still come out as the same `FfiException`
 * (mapped in one place, `ffiCall`) and a panic as UniFFI's `InternalException`.
 */
internal object DirectCalls {
    /** Null when these calls reach the copy of the library the generated bindings loaded. */
    private val mismatch: String?

    init {
        NativeLibrary.select()
        // The name UniFFI's loader resolves (its override property, read now, as the bindings
        // read it when they load), so JNA hands back the library already loaded.
        val name = System.getProperty(NativeLibrary.OVERRIDE_PROPERTY) ?: "lapilli_jvm"
        Native.register(DirectCalls::class.java, name)
        val direct = lapilli_jvm_instance_marker()
        val generated = instanceMarker().toLong()
        mismatch = if (direct == generated) null else
            "the native library '$name' was loaded twice (two class loaders, or the property " +
                "${NativeLibrary.OVERRIDE_PROPERTY} changed after the first store was opened): appends would reach a copy that has no open stores"
    }

    external fun lapilli_jvm_append_packed(store: Long, address: Long, len: Long): Long

    external fun lapilli_jvm_submit_packed(store: Long, address: Long, len: Long, token: Long): Long

    external fun lapilli_jvm_instance_marker(): Long

    /** Called before a store opens: fails the open, not its first append, if JNA bound a second copy. */
    fun verify() {
        mismatch?.let { throw LapilliException.Io(it) }
    }

    /** The first position of the appended batch; throws the call's `FfiException`. */
    fun appendPacked(store: ULong, address: Long, len: Long): Long =
        check(lapilli_jvm_append_packed(store.toLong(), address, len))

    /** Hands the packed append to the writer; throws the call's `FfiException`. */
    fun submitPacked(store: ULong, address: Long, len: Long, token: Long) {
        check(lapilli_jvm_submit_packed(store.toLong(), address, len, token))
    }

    /** Raises the failure a negative [answer] names (taking it), or answers [answer]. */
    internal fun check(answer: Long): Long {
        if (answer >= 0) return answer
        takeDirectError((-answer).toULong())
        // take_direct_error always raises for a negative answer; reaching here is a bug of ours.
        throw AssertionError("direct call failure ${-answer} was not raised")
    }
}
