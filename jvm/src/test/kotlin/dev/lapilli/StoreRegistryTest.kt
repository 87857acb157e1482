package dev.lapilli

import dev.lapilli.ffi.FfiException
import dev.lapilli.ffi.FfiOptions
import dev.lapilli.ffi.FfiStore
import dev.lapilli.ffi.directFailuresPending
import dev.lapilli.ffi.instanceMarker
import dev.lapilli.ffi.takeDirectError
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CountDownLatch
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread
import kotlin.test.assertEquals
import kotlin.test.assertTrue

/**
 * Appends reach the native store through its id in a registry (`jvm/rust/lib.rs`, one direct
 * JNA call per append, `DirectCalls`) rather than a UniFFI method call. These tests call the free functions directly, so
 * the Kotlin layer's own closed flag cannot answer for them.
 */
class StoreRegistryTest {
    private fun openFfi(dir: java.nio.file.Path): FfiStore {
        NativeLibrary.select()
        return FfiStore.open(dir.toString(), FfiOptions("buffered", 1uL shl 20, 1uL shl 20))
    }

    private fun appendRaw(id: ULong, vararg tags: String): Long =
        PackedAppend(listOf(ev("E", *tags)), null).withNative { address, len ->
            DirectCalls.appendPacked(id, address, len)
        }

    private fun submitRaw(id: ULong) =
        PackedAppend(listOf(ev("E")), null).withNative { address, len ->
            DirectCalls.submitPacked(id, address, len, 1L)
        }

    @Test
    fun `an append by the id of a closed or unknown store is the typed Closed error`() = withTempDir { dir ->
        val ffi = openFfi(dir)
        val id = ffi.id()
        assertEquals(1L, appendRaw(id))
        assertEquals(2L, appendRaw(id))
        ffi.closeStore()
        assertThrows<FfiException.Closed> { appendRaw(id) }
        assertThrows<FfiException.Closed> { submitRaw(id) }
        ffi.close()
        assertThrows<FfiException.Closed> { appendRaw(id) }
        assertThrows<FfiException.Closed> { appendRaw(ULong.MAX_VALUE) }
        assertThrows<FfiException.Closed> { appendRaw(0uL) }
        // ... and the Kotlin layer maps it like any other Closed.
        val mapped = runCatching { ffiCall("store", null) { appendRaw(id) } }.exceptionOrNull()
        assertTrue(mapped is LapilliException.Closed, "got $mapped")
        // The store's bytes are intact: reopened, the two appends are there.
        Store.open(dir, BUFFERED).use { assertEquals(2L, it.head()) }
    }

    @Test
    fun `a failed direct call raises its own typed error once, and leaves the store unchanged`() = withTempDir { dir ->
        val ffi = openFfi(dir)
        val id = ffi.id()
        assertEquals(1L, appendRaw(id))
        // A request cut short: the engine refuses it as InvalidArgument, through the error id.
        val packed = PackedAppend(listOf(ev("E", "t:1")), null)
        val e = assertThrows<FfiException.InvalidArgument> {
            packed.withNative { address, len -> DirectCalls.appendPacked(id, address, len - 1) }
        }
        assertTrue("cut short" in e.message.orEmpty(), "message: ${e.message}")
        // Errors are not mixed up between callers: the next failure is its own (Closed), not the one above.
        val other = runCatching { appendRaw(ULong.MAX_VALUE) }.exceptionOrNull()
        assertTrue(other is FfiException.Closed, "got $other")
        assertEquals(2L, appendRaw(id))
        ffi.closeStore()
        ffi.close()
        Store.open(dir, BUFFERED).use { assertEquals(2L, it.head()) }
    }

    @Test
    fun `a failure is taken once, by its own id`() = withTempDir { dir ->
        val ffi = openFfi(dir)
        val id = ffi.id()
        val packed = PackedAppend(listOf(ev("E", "t:1")), null)
        val answer = packed.withNative { address, len -> DirectCalls.lapilli_jvm_append_packed(id.toLong(), address, len - 1) }
        assertTrue(answer < 0, "a failed direct call answers minus a failure id: $answer")
        assertThrows<FfiException.InvalidArgument> { takeDirectError((-answer).toULong()) }
        val again = assertThrows<FfiException.Io> { takeDirectError((-answer).toULong()) }
        assertTrue("no error was recorded" in again.message.orEmpty(), "message: ${again.message}")
        assertEquals(0uL, directFailuresPending())
        ffi.closeStore()
        ffi.close()
    }

    @Test
    fun `failures of calls racing on many threads each reach their own caller, and none is left behind`() = withTempDir { dir ->
        val ffi = openFfi(dir)
        val id = ffi.id()
        val wrong = ConcurrentLinkedQueue<String>()
        val threads = (0 until 8).map { t ->
            thread {
                repeat(1000) { i ->
                    val packed = PackedAppend(listOf(ev("E", "t:$t")), null)
                    if ((i + t) % 2 == 0) {
                        // The id of no open store.
                        val e = runCatching { packed.withNative { a, l -> DirectCalls.appendPacked(ULong.MAX_VALUE - t.toULong(), a, l) } }.exceptionOrNull()
                        if (e !is FfiException.Closed) wrong.add("thread $t call $i: expected Closed, got $e")
                    } else {
                        // A request cut short, on the open store.
                        val e = runCatching { packed.withNative { a, l -> DirectCalls.appendPacked(id, a, l - 1) } }.exceptionOrNull()
                        if (e !is FfiException.InvalidArgument) wrong.add("thread $t call $i: expected InvalidArgument, got $e")
                    }
                }
            }
        }
        threads.forEach { it.join() }
        assertTrue(wrong.isEmpty(), "${wrong.size} calls got another's failure: ${wrong.take(3)}")
        assertEquals(0uL, directFailuresPending(), "every failure was taken")
        // And nothing was appended by any of them.
        assertEquals(1L, appendRaw(id))
        ffi.closeStore()
        ffi.close()
    }

    @Test
    fun `the direct calls and the generated bindings reach the same copy of the library`() {
        NativeLibrary.select()
        DirectCalls.verify()
        assertEquals(instanceMarker().toLong(), DirectCalls.lapilli_jvm_instance_marker())
    }

    @Test
    fun `a failure id that names nothing is an Io error, never a crash`() {
        NativeLibrary.select()
        assertThrows<FfiException.Io> { DirectCalls.check(-(Long.MAX_VALUE)) }
        assertThrows<FfiException.Io> { DirectCalls.check(-123456789L) }
    }

    @Test
    fun `a store whose handle is freed without closing is unregistered too`() = withTempDir { dir ->
        val ffi = openFfi(dir)
        val id = ffi.id()
        assertEquals(1L, appendRaw(id))
        ffi.close() // UniFFI's free: drops the last Arc, so the store closes and leaves the registry
        assertThrows<FfiException.Closed> { appendRaw(id) }
        Store.open(dir, BUFFERED).use { assertEquals(1L, it.head()) } // its lock was released
    }

    @Test
    fun `appends racing close and free from many threads answer or fail Closed, never crash`() = withTempDir { root ->
        val unexpected = ConcurrentLinkedQueue<Throwable>()
        repeat(20) { round ->
            val dir = root.resolve("s$round")
            // The raw path: appends by id while another thread closes and frees the handle, so a
            // lookup that did not keep the store alive would touch freed memory.
            val ffi = openFfi(dir)
            val id = ffi.id()
            // And the public API on a store of its own: blocking and future appends racing close().
            val store = Store.open(dir.resolveSibling("p$round"), BUFFERED)
            val start = CountDownLatch(1)
            val workers = (0 until 6).map { w ->
                thread {
                    start.await()
                    repeat(200) { i ->
                        try {
                            when (w % 3) {
                                0 -> appendRaw(id, "w:$w")
                                1 -> store.append(ev("E", "w:$w", "i:$i"))
                                else -> store.appendFuture(ev("E", "w:$w")).get(10, TimeUnit.SECONDS)
                            }
                        } catch (e: FfiException.Closed) {
                        } catch (e: LapilliException.Closed) {
                        } catch (e: ExecutionException) {
                            if (e.cause !is LapilliException.Closed) unexpected.add(e)
                        } catch (e: Throwable) {
                            unexpected.add(e)
                        }
                    }
                }
            }
            start.countDown()
            Thread.sleep((round % 4).toLong())
            ffi.closeStore()
            ffi.close()
            store.close()
            workers.forEach { it.join() }
            assertThrows<FfiException.Closed> { appendRaw(id) }
            assertThrows<LapilliException.Closed> { store.append(ev("E")) }
        }
        assertTrue(unexpected.isEmpty(), "unexpected failures: ${unexpected.take(3)}")
        assertEquals(0uL, directFailuresPending(), "every failed append's failure was taken")
    }
}
