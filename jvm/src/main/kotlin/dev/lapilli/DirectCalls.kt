package dev.lapilli

import com.sun.jna.Native
import dev.lapilli.ffi.takeDirectError

/**
 * The two native calls on every append's path, mapped by JNA directly with primitive
 * arguments (`lapilli_jvm_append_packed`, `lapilli_jvm_submit_packed` in `jvm/rust/lib.rs`),
 * beside the generated UniFFI bindings for everything else.
 *
 * Why not UniFFI here: each UniFFI call allocates a call-status structure (a JNA `Memory`
 * registered with JNA's cleaner and freed by its thread). With 64 appends in flight that
 * bookkeeping took more than half of the JVM's own CPU samples. These calls answer a plain
 * number: `>= 0` is the result, a negative one is the id of an error the engine keeps until
 * [check] takes it through UniFFI, so failures still come out as the same `FfiException` and are
 * mapped in one place (`ffiCall`).
 */
internal object DirectCalls {
    init {
        NativeLibrary.select()
        // The same name UniFFI's loader resolves, so JNA hands back the library already loaded.
        Native.register(DirectCalls::class.java, System.getProperty(NativeLibrary.OVERRIDE_PROPERTY) ?: "lapilli_jvm")
    }

    external fun lapilli_jvm_append_packed(store: Long, address: Long, len: Long): Long

    external fun lapilli_jvm_submit_packed(store: Long, address: Long, len: Long, token: Long): Long

    /** The first position of the appended batch; throws the call's `FfiException`. */
    fun appendPacked(store: ULong, address: Long, len: Long): Long =
        check(lapilli_jvm_append_packed(store.toLong(), address, len))

    /** Hands the packed append to the writer; throws the call's `FfiException`. */
    fun submitPacked(store: ULong, address: Long, len: Long, token: Long) {
        check(lapilli_jvm_submit_packed(store.toLong(), address, len, token))
    }

    private fun check(answer: Long): Long {
        if (answer >= 0) return answer
        takeDirectError((-answer).toULong())
        throw IllegalStateException("direct call error ${-answer} was not raised")
    }
}
