package dev.lapilli.bench

import dev.lapilli.AppendCondition
import dev.lapilli.Event
import dev.lapilli.Query
import dev.lapilli.QueryItem
import dev.lapilli.Store
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.joinAll
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import java.io.File
import java.util.Locale
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicIntegerArray
import java.util.concurrent.atomic.AtomicLongArray

/**
 * The per-runtime shapes from Kotlin (bench/drivers/README.md):
 *
 *   java -cp ... dev.lapilli.bench.DriverKt read_store=DIR work=DIR batches=N concurrent=N scans=N selective=N catchups=N
 *
 * Prints one JSON object per shape: {"runtime","shape","events","seconds","events_per_s"}.
 */
private const val RT = "kotlin"
private const val EVENT_TYPE = "Measured"
private const val BATCH = 512
private const val WORKERS = 64
private const val ENTITIES = 1000L
// Untimed batches before append_batched is timed, and untimed passes before append_concurrent
// until WARM_SECONDS have gone by: the same in every driver (src/main.rs).
private const val WARM_BATCHES = 2L
private const val WARM_SECONDS = 2.0

/** Untimed passes of [pass] (given its offset) for WARM_SECONDS, at least one; answers the count. */
private fun warmPasses(total: Long, pass: (offset: Long) -> Unit): Long {
    var passes = 0L
    val warm = System.nanoTime()
    while (passes == 0L || seconds(warm) < WARM_SECONDS) pass(passes++ * total)
    return passes
}
private val DATA = ByteArray(256) { 7 }
private val NEVER = AppendCondition(Query.of(QueryItem(types = listOf("NeverAppended"), tags = listOf("never:0"))))

private fun event(i: Long) = Event(EVENT_TYPE, listOf("entity:${i % ENTITIES}"), DATA)

private fun report(shape: String, events: Long, seconds: Double) {
    val f = { x: Double, digits: Int -> String.format(Locale.ROOT, "%.${digits}f", x) }
    println("""{"runtime":"$RT","shape":"$shape","events":$events,"seconds":${f(seconds, 6)},"events_per_s":${f(events / seconds, 1)}}""")
}

private fun check(got: Long, want: Long, what: String) {
    if (got != want) error("$what: got $got, expected $want")
}

private fun seconds(since: Long) = (System.nanoTime() - since) / 1e9

fun main(args: Array<String>) {
    val p = args.associate { a -> a.split("=", limit = 2).let { require(it.size == 2) { "not key=value: $a" }; it[0] to it[1] } }
    fun num(k: String): Long = p[k]?.toLong() ?: error("missing $k=N")
    val work = File(p["work"] ?: error("missing work=DIR")).also { it.mkdirs() }

    fun fresh(name: String): Pair<File, Store> {
        val dir = File(work, name)
        dir.deleteRecursively()
        return dir to Store.open(dir.path)
    }

    // append_batched
    run {
        val batches = num("batches")
        val (dir, store) = fresh("kotlin-batched")
        for (b in 0 until WARM_BATCHES) store.append((b * BATCH until (b + 1) * BATCH).map(::event), NEVER)
        val started = System.nanoTime()
        for (b in WARM_BATCHES until WARM_BATCHES + batches) {
            store.append((b * BATCH until (b + 1) * BATCH).map(::event), NEVER)
        }
        val s = seconds(started)
        check(store.head(), (WARM_BATCHES + batches) * BATCH, "append_batched head")
        store.close()
        dir.deleteRecursively()
        report("append_batched", batches * BATCH, s)
    }

    // append_concurrent: 64 coroutines, each suspending in appendAsync
    run {
        val perWorker = num("concurrent")
        val (dir, store) = fresh("kotlin-concurrent")
        fun inFlight(per: Long, offset: Long) = runBlocking(Dispatchers.Default) {
            repeat(WORKERS) { w ->
                launch {
                    for (i in 0 until per) store.appendAsync(listOf(event(offset + w * per + i)), NEVER)
                }
            }
        }
        val total = WORKERS * perWorker
        val passes = warmPasses(total) { inFlight(perWorker, it) }
        val started = System.nanoTime()
        inFlight(perWorker, passes * total)
        val s = seconds(started)
        check(store.head(), (passes + 1) * total, "append_concurrent head")
        store.close()
        dir.deleteRecursively()
        report("append_concurrent", WORKERS * perWorker, s)
    }

    // The same with 64 platform threads in the blocking append: a second figure that tells
    // the binding's async path apart from its blocking one.
    run {
        val perWorker = num("concurrent")
        val (dir, store) = fresh("kotlin-concurrent-threads")
        fun inFlight(per: Long, offset: Long): Long {
            val gate = java.util.concurrent.CyclicBarrier(WORKERS + 1)
            val threads = (0 until WORKERS).map { w ->
                Thread {
                    gate.await()
                    for (i in 0 until per) store.append(listOf(event(offset + w * per + i)), NEVER)
                }.also { it.start() }
            }
            gate.await()
            val started = System.nanoTime()
            threads.forEach { it.join() }
            return started
        }
        val total = WORKERS * perWorker
        val passes = warmPasses(total) { inFlight(perWorker, it) }
        val started = inFlight(perWorker, passes * total)
        val s = seconds(started)
        check(store.head(), (passes + 1) * total, "append_concurrent_threads head")
        store.close()
        dir.deleteRecursively()
        report("append_concurrent_threads", WORKERS * perWorker, s)
    }

    Store.open(p["read_store"] ?: error("missing read_store=DIR")).use { store ->
        val head = store.head()

        // read_warm_scan: iterate the Sequence
        fun scan() {
            var n = 0L
            var bytes = 0L
            for (e in store.read(Query.all())) {
                n++
                bytes += e.data.size
            }
            check(n, head, "scan count")
            check(bytes, head * DATA.size, "scan bytes")
        }
        val scans = num("scans")
        scan() // warm, untimed
        var started = System.nanoTime()
        repeat(scans.toInt()) { scan() }
        report("read_warm_scan", scans * head, seconds(started))

        // read_selective
        val reads = num("selective")
        var total = 0L
        started = System.nanoTime()
        for (r in 0 until reads) {
            val k = (r * 7919) % ENTITIES
            var n = 0L
            for (e in store.read(Query.forTags("entity:$k"))) n++
            check(n, head / ENTITIES + if (k < head % ENTITIES) 1 else 0, "selective count")
            total += n
        }
        report("read_selective", total, seconds(started))

        // subscribe_catch_up: nextBatch until the head is delivered
        val passes = num("catchups")
        started = System.nanoTime()
        repeat(passes.toInt()) {
            store.subscribe(Query.all(), after = 0).use { sub ->
                var n = 0L
                while (n < head) {
                    val batch = sub.nextBatch(max = 1024) ?: error("subscription ended early")
                    n += batch.size
                }
                check(sub.position, head, "subscription position")
            }
        }
        report("subscribe_catch_up", passes * head, seconds(started))
    }

    liveSubscriptions(work)
}

// live_subscriptions: the same in every driver (src/main.rs SUBSCRIBERS, LIVE_ROUNDS).
private const val SUBSCRIBERS = 1000
private const val LIVE_ROUNDS = 5
private const val LIVE_SETTLE_MS = 50L

private fun threads(): Int =
    File("/proc/self/status").readLines().first { it.startsWith("Threads:") }.substringAfter(':').trim().toInt()

/**
 * 1,000 coroutines collecting `subscribeFlow` of one tag, all waiting, then one commit of an
 * event with that tag per round: the delivery latency (append called to the event in the
 * collector's hands) over every delivery, and the process's threads while they wait.
 */
private fun liveSubscriptions(work: File) {
    val dir = File(work, "kotlin-live").also { it.deleteRecursively() }
    val rounds = LIVE_ROUNDS + 1 // the first untimed
    val appendedAt = AtomicLongArray(rounds)
    val counts = AtomicIntegerArray(rounds)
    val allIn = Array(rounds) { CompletableDeferred<Unit>() }
    val latencies = ConcurrentLinkedQueue<Long>()
    var threadsWaiting = 0
    var timed = 0.0
    Store.open(dir.path).use { store ->
        runBlocking(Dispatchers.Default) {
            val collectors = (1..SUBSCRIBERS).map {
                launch(start = CoroutineStart.UNDISPATCHED) {
                    store.subscribeFlow(Query.forTags("ping")).take(rounds).collect { e ->
                        val r = (e.position - 1).toInt()
                        if (r > 0) latencies.add(System.nanoTime() - appendedAt.get(r))
                        if (counts.incrementAndGet(r) == SUBSCRIBERS) allIn[r].complete(Unit)
                    }
                }
            }
            for (r in 0 until rounds) {
                delay(LIVE_SETTLE_MS) // every collector is waiting again
                threadsWaiting = maxOf(threadsWaiting, threads())
                appendedAt.set(r, System.nanoTime())
                store.appendAsync(Event("Ping", listOf("ping"), DATA))
                allIn[r].await()
                if (r > 0) timed += seconds(appendedAt.get(r))
            }
            collectors.joinAll()
        }
    }
    dir.deleteRecursively()
    val sorted = latencies.sorted()
    check(sorted.size.toLong(), (SUBSCRIBERS * LIVE_ROUNDS).toLong(), "live deliveries")
    val at = { q: Int -> sorted[sorted.size * q / 100] / 1e3 }
    val f = { x: Double -> String.format(Locale.ROOT, "%.1f", x) }
    println("""{"runtime":"$RT","shape":"live_subscriptions","events":${sorted.size},"seconds":${String.format(Locale.ROOT, "%.6f", timed)},"events_per_s":${f(sorted.size / timed)},"threads_waiting":$threadsWaiting,"latency_p50_us":${f(at(50))},"latency_p99_us":${f(at(99))}}""")
}
