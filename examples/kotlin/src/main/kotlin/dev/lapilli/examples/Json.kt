package dev.lapilli.examples

/** The examples keep their JSON tiny and flat: enough to read one number back without a library. */
internal fun jsonInt(json: String, field: String): Int? =
    Regex("\"${Regex.escape(field)}\"\\s*:\\s*(-?\\d+)").find(json)?.groupValues?.get(1)?.toInt()

internal fun check(condition: Boolean, message: () -> String) {
    if (!condition) throw IllegalStateException("example failed: ${message()}")
}
