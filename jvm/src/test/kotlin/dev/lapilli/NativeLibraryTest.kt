package dev.lapilli

import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertNull

/** Which of the jar's native builds a JVM gets: musl ones only on a musl process. */
class NativeLibraryTest {
    private val glibcMaps = """
        55d0c0a00000-55d0c0a01000 r-xp 00000000 08:01 1234 /usr/lib/jvm/java-17/bin/java
        7f1c2a000000-7f1c2a022000 r--p 00000000 08:01 2345 /usr/lib/x86_64-linux-gnu/libc.so.6
        7f1c2a400000-7f1c2a42a000 r--p 00000000 08:01 3456 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
    """.trimIndent()

    private val muslMaps = """
        55d0c0a00000-55d0c0a01000 r-xp 00000000 08:01 1234 /usr/lib/jvm/java-17-openjdk/bin/java
        7f1c2a400000-7f1c2a414000 r--p 00000000 08:01 3456 /lib/ld-musl-aarch64.so.1
    """.trimIndent()

    @Test
    fun `a glibc process keeps JNA's own lookup`() {
        assertNull(NativeLibrary.muslResource("linux-x86-64", glibcMaps))
    }

    @Test
    fun `a musl process gets the musl build under JNA's prefix plus -musl`() {
        assertEquals("/linux-aarch64-musl/liblapilli_jvm.so", NativeLibrary.muslResource("linux-aarch64", muslMaps))
        assertEquals("/linux-x86-64-musl/liblapilli_jvm.so",
            NativeLibrary.muslResource("linux-x86-64", "7f00-7f01 r--p 0 0:0 1 /usr/lib/libc.musl-x86_64.so.1"))
    }

    @Test
    fun `a store opened on this glibc JVM loads through JNA's lookup, not an extracted musl build`() = withTempDir { dir ->
        Store.open(dir.resolve("s"), BUFFERED).use { assertEquals(0L, it.head()) }
        assertNull(System.getProperty(NativeLibrary.OVERRIDE_PROPERTY))
    }
}
