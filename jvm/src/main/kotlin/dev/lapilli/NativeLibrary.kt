package dev.lapilli

import com.sun.jna.Native
import com.sun.jna.Platform
import java.io.File

/**
 * Picks the engine's native library for this machine before the generated bindings load it.
 *
 * JNA finds `liblapilli_jvm.so` in the jar under its platform prefix (`linux-x86-64/`,
 * `linux-aarch64/`) by itself, but its prefixes do not tell glibc from musl, and a glibc build
 * does not load on Alpine. A release jar also carries the musl builds, under the prefix plus
 * `-musl`; on a musl JVM this extracts that one and hands its path to the bindings through
 * UniFFI's library override. A path the user set in that property wins; a jar without a musl
 * build (a development build) leaves JNA's own lookup in place.
 */
internal object NativeLibrary {
    /** UniFFI's per-component override, read when the bindings first load the library. */
    const val OVERRIDE_PROPERTY = "uniffi.component.lapilli_jvm.libraryOverride"
    private const val FILE_NAME = "liblapilli_jvm.so"

    /** Called before the first native call (opening a store); selects once per class loader. */
    fun select() = selected

    private val selected: Unit by lazy {
        if (System.getProperty(OVERRIDE_PROPERTY) != null || !Platform.isLinux()) return@lazy
        val maps = runCatching { File("/proc/self/maps").readText() }.getOrNull() ?: return@lazy
        val resource = muslResource(Platform.RESOURCE_PREFIX, maps) ?: return@lazy
        if (NativeLibrary::class.java.getResource(resource) == null) return@lazy
        val file = Native.extractFromResourcePath(resource, NativeLibrary::class.java.classLoader)
        System.setProperty(OVERRIDE_PROPERTY, file.absolutePath)
    }

    /**
     * The jar's musl build for this JVM (`/linux-x86-64-musl/liblapilli_jvm.so`) when the
     * process runs on musl, told by musl's loader among its mapped files; null on glibc.
     */
    fun muslResource(jnaPrefix: String, procSelfMaps: String): String? {
        val onMusl = procSelfMaps.lineSequence().any { "/ld-musl-" in it || "/libc.musl-" in it }
        return if (onMusl) "/$jnaPrefix-musl/$FILE_NAME" else null
    }
}
