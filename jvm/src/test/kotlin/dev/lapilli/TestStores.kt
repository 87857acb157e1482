package dev.lapilli

import java.nio.file.Files
import java.nio.file.Path

/** A fresh store directory per test, deleted afterwards. */
internal fun <T> withTempDir(block: (Path) -> T): T {
    val dir = Files.createTempDirectory("lapilli-kt-")
    try {
        return block(dir)
    } finally {
        dir.toFile().deleteRecursively()
    }
}

internal val BUFFERED = Options(durability = Durability.BUFFERED)

/** Opens a buffered store in a fresh directory and closes it afterwards. */
internal fun <T> withStore(options: Options = BUFFERED, block: (Store, Path) -> T): T =
    withTempDir { dir -> Store.open(dir, options).use { block(it, dir) } }

internal fun ev(type: String, vararg tags: String, data: String = "") = Event(type, tags.toList(), data)
