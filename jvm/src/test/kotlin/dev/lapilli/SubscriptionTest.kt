package dev.lapilli

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Test
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertNull
import kotlin.test.assertTrue
import kotlin.time.Duration
import kotlin.time.Duration.Companion.days
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

class SubscriptionTest {
    @Test
    fun `catch-up then live, with caughtUp and position`() = withStore { store, _ ->
        store.append((1..5).map { ev("E", "n:$it") })
        store.subscribe(Query.all()).use { sub ->
            assertFalse(sub.caughtUp)
            assertEquals(listOf(1L, 2L, 3L), sub.nextBatch(3, 0.milliseconds)!!.map { it.position })
            assertEquals(3, sub.position)
            assertFalse(sub.caughtUp)
            assertEquals(listOf(4L, 5L), sub.nextBatch(100, 0.milliseconds)!!.map { it.position })
            assertTrue(sub.caughtUp)
            assertEquals(emptyList(), sub.nextBatch(100, 20.milliseconds), "a timeout gives an empty batch")
            store.append(ev("F"))
            assertEquals(6L, sub.next(1.seconds)!!.position)
            assertEquals(6, sub.position)
            assertNull(sub.next(0.milliseconds), "timed out")
            assertFalse(sub.isClosed)
        }
    }

    @Test
    fun `a filtered subscription from a middle position`() = withStore { store, _ ->
        store.append((1..10).map { ev("E", if (it % 2 == 0) "even" else "odd") })
        store.subscribe(Query.forTags("even"), after = 4).use { sub ->
            assertEquals(listOf(6L, 8L, 10L), sub.nextBatch(100, 0.milliseconds)!!.map { it.position })
        }
    }

    @Test
    fun `a blocked consumer waits for a live append`() = withStore { store, _ ->
        store.subscribe(Query.forTypes("Wanted")).use { sub ->
            val got = CompletableFuture<List<SequencedEvent>?>()
            val consumer = thread { got.complete(sub.nextBatch(10, null)) }
            Thread.sleep(100)
            store.append(listOf(ev("Unwanted"), ev("Wanted")))
            assertEquals(listOf(2L), got.get(5, TimeUnit.SECONDS)!!.map { it.position })
            consumer.join()
        }
    }

    @Test
    fun `very long and infinite timeouts wait for the next event`() = withStore { store, _ ->
        store.subscribe(Query.all()).use { sub ->
            for (timeout in listOf(Duration.INFINITE, Long.MAX_VALUE.milliseconds, (365 * 1000).days)) {
                val got = CompletableFuture<List<SequencedEvent>?>()
                val consumer = thread { got.complete(sub.nextBatch(10, timeout)) }
                Thread.sleep(50)
                val appended = store.append(ev("E"))
                assertEquals(listOf(appended.first), got.get(5, TimeUnit.SECONDS)!!.map { it.position }, "$timeout")
                consumer.join()
            }
        }
    }

    @Test
    fun `close from another thread wakes a blocked consumer with the end`() = withStore { store, _ ->
        val sub = store.subscribe(Query.all())
        val got = CompletableFuture<List<SequencedEvent>?>()
        val consumer = thread { got.complete(sub.nextBatch(10, null)) }
        Thread.sleep(100)
        sub.close()
        assertNull(got.get(5, TimeUnit.SECONDS))
        consumer.join()
        assertTrue(sub.isClosed)
        assertNull(sub.nextBatch(10, 0.milliseconds), "a closed subscription stays ended")
        sub.close()
    }

    @Test
    fun `closing the store ends its subscriptions`() = withTempDir { dir ->
        val store = Store.open(dir, BUFFERED)
        store.append(ev("E"))
        val sub = store.subscribe(Query.all())
        assertEquals(1, sub.nextBatch(10, 0.milliseconds)!!.size)
        val got = CompletableFuture<List<SequencedEvent>?>()
        thread { got.complete(sub.nextBatch(10, null)) }
        Thread.sleep(100)
        store.close()
        assertNull(got.get(5, TimeUnit.SECONDS))
        assertTrue(sub.isClosed)
        sub.close()
    }

    @Test
    fun `a Flow collected with take(n) closes its subscription`() = withStore { store, _ ->
        store.append((1..10).map { ev("E") })
        val sub = store.subscribe(Query.all())
        val got = runBlocking { withTimeout(10.seconds) { sub.asFlow().take(3).toList() } }
        assertEquals(listOf(1L, 2L, 3L), got.map { it.position })
        assertTrue(sub.isClosed)
        assertNull(sub.nextBatch(1, 0.milliseconds))
    }

    @Test
    fun `a Flow follows live appends and cancelling its collector closes the subscription`() = withStore { store, _ ->
        val sub = store.subscribe(Query.forTags("live"))
        runBlocking {
            val seen = java.util.concurrent.CopyOnWriteArrayList<Long>()
            val collector = launch(Dispatchers.Default) { sub.asFlow().collect { seen.add(it.position) } }
            delay(50)
            store.append(listOf(ev("E", "live"), ev("E"), ev("E", "live")))
            withTimeout(5.seconds) { while (seen.size < 2) delay(10) }
            assertEquals(listOf(1L, 3L), seen.toList())
            collector.cancelAndJoin()
        }
        assertTrue(sub.isClosed)
    }

    @Test
    fun `a Flow completes when the store closes`() = withTempDir { dir ->
        val store = Store.open(dir, BUFFERED)
        store.append(listOf(ev("E"), ev("E")))
        val sub = store.subscribe(Query.all())
        val got = runBlocking {
            val collected = async(Dispatchers.Default) { sub.asFlow().toList() }
            delay(200)
            store.close()
            withTimeout(5.seconds) { collected.await() }
        }
        assertEquals(listOf(1L, 2L), got.map { it.position })
    }
}
