package dev.lapilli

import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit
import kotlin.test.assertEquals
import kotlin.test.assertIs
import kotlin.test.assertNull
import kotlin.test.assertFalse
import kotlin.test.assertTrue
import kotlin.time.Duration.Companion.seconds

/** Waiting without a thread: async appends, suspended subscribers and cold flows (issue 15). */
class WaitingTest {
    private fun threads(): Int =
        java.io.File("/proc/self/status").readLines().first { it.startsWith("Threads:") }.substringAfter(':').trim().toInt()

    @Test
    fun `a thousand live subscriptions each receive a commit with fewer than 50 threads`() = withStore { store, _ ->
        val query = Query.forTags("room:1")
        runBlocking {
            withTimeout(60.seconds) {
                // Each collector runs until its first suspension right here (UNDISPATCHED): by the
                // end of the loop every one of them is waiting for the commit.
                val got = (1..1000).map {
                    async(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) {
                        store.subscribeFlow(query).take(1).toList().single()
                    }
                }
                val waiting = threads()
                assertTrue(waiting < 50, "1,000 waiting subscriptions: $waiting threads")
                val committed = store.append(Event("Booked", listOf("room:1"), "x"))
                val events = got.awaitAll()
                assertTrue(events.all { it.position == committed.first && it.type == "Booked" })
                val after = threads()
                assertTrue(after < 50, "after delivering to 1,000 subscriptions: $after threads")
            }
        }
    }

    @Test
    fun `subscribeFlow is cold - every collection opens its own subscription`() = withStore { store, _ ->
        store.append((1..3).map { ev("E", "n:$it") })
        val flow = store.subscribeFlow(Query.all(), after = 1)
        runBlocking {
            withTimeout(30.seconds) {
                assertEquals(listOf(2L, 3L), flow.take(2).toList().map { it.position })
                assertEquals(listOf(2L, 3L), flow.take(2).toList().map { it.position }, "collected again")
                // A live event reaches a collector that is waiting for it.
                val live = async(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) { flow.take(3).toList() }
                store.append(ev("Live"))
                assertEquals(listOf(2L, 3L, 4L), live.await().map { it.position })
            }
        }
    }

    @Test
    fun `cancelling the collector closes its subscription and ends the wait`() = withStore { store, _ ->
        runBlocking {
            withTimeout(30.seconds) {
                val seen = mutableListOf<Long>()
                val collector = launch(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) {
                    store.subscribeFlow(Query.all()).collect { seen.add(it.position) }
                }
                store.append(ev("E"))
                while (seen.isEmpty()) kotlinx.coroutines.delay(5)
                collector.cancelAndJoin()
                assertTrue(collector.isCancelled)
                assertEquals(listOf(1L), seen)
            }
        }
    }

    @Test
    fun `the flow completes when the store closes`() = withTempDir { dir ->
        val store = Store.open(dir, BUFFERED)
        runBlocking {
            withTimeout(30.seconds) {
                val collected = async(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) {
                    store.subscribeFlow(Query.all()).toList()
                }
                store.append(ev("E"))
                store.close()
                assertTrue(collected.await().size <= 1)
            }
        }
    }

    @Test
    fun `async appends resume from the completion thread, never the writer`() = withStore { store, _ ->
        runBlocking {
            val caller = Thread.currentThread().name
            // Unconfined: the coroutine resumes on whatever thread completed it: the completion
            // thread, or the caller's own when the append was answered before the callback was
            // registered (seen once in a CI run); never the writer.
            val name = withContext(Dispatchers.Unconfined) {
                store.appendAsync(ev("E"))
                Thread.currentThread().name
            }
            // (In debug mode the coroutine's name is appended to the thread's.)
            assertTrue(name.startsWith("lapilli-completions") || name.startsWith(caller.substringBefore(" @")), name)
            assertFalse(name.startsWith("lapilli-writer"), name)
        }
        val result = store.appendFuture(ev("F")).thenApply { Thread.currentThread().name to it }.get(30, TimeUnit.SECONDS)
        assertTrue(result.first == "lapilli-completions" || result.first == Thread.currentThread().name, result.first)
        assertEquals(AppendResult(2, 2), result.second)
    }

    @Test
    fun `a refused async append fails with its typed error and changes nothing`() = withStore { store, _ ->
        val query = Query.forTags("course:c1")
        store.append(ev("Defined", "course:c1"))
        val refused = store.appendFuture(listOf(ev("Defined", "course:c1")), AppendCondition(query, after = 0))
        val cause = assertThrows<ExecutionException> { refused.get(30, TimeUnit.SECONDS) }.cause
        assertIs<LapilliException.Conflict>(cause)
        assertEquals(1L, cause.position)
        val exists = store.appendFuture(listOf(ev("Defined")), AppendCondition(Query.forTypes("Absent"), failIfExists = query))
        assertIs<LapilliException.AlreadyExists>(assertThrows<ExecutionException> { exists.get(30, TimeUnit.SECONDS) }.cause)
        val bad = store.appendFuture(emptyList())
        assertIs<LapilliException.InvalidArgument>(assertThrows<ExecutionException> { bad.get(30, TimeUnit.SECONDS) }.cause)
        runBlocking { assertThrows<LapilliException.Conflict> { store.appendAsync(ev("Defined", "course:c1"), AppendCondition(query, after = 0)) } }
        assertEquals(1, store.head())
    }

    @Test
    fun `appends after close fail with Closed, waiting subscribers end`() = withTempDir { dir ->
        val store = Store.open(dir, BUFFERED)
        val sub = store.subscribe(Query.all())
        val waiting = sub.nextBatchFuture(10)
        store.close()
        assertNull(waiting.get(30, TimeUnit.SECONDS), "the store's close ends the wait")
        val late = store.appendFuture(ev("E"))
        assertIs<LapilliException.Closed>(assertThrows<ExecutionException> { late.get(30, TimeUnit.SECONDS) }.cause)
        assertThrows<LapilliException.Closed> { runBlocking { store.appendAsync(ev("E")) } }
        sub.close()
    }

    @Test
    fun `closing a subscription ends its pending wait`() = withStore { store, _ ->
        val sub = store.subscribe(Query.all())
        val waiting = sub.nextBatchFuture(10)
        store.append(ev("E"))
        assertEquals(listOf(1L), waiting.get(30, TimeUnit.SECONDS)!!.map { it.position })
        val next = sub.nextBatchFuture(10)
        sub.close()
        assertNull(next.get(30, TimeUnit.SECONDS))
        assertNull(sub.nextBatchFuture().get(30, TimeUnit.SECONDS), "closed: answered at once")
    }

    @Test
    fun `64 coroutines share group commits`() = withStore(Options()) { store, _ ->
        val before = store.groupCommits()
        val results = runBlocking {
            (1..64).map { i -> async(Dispatchers.Default) { (1..10).map { store.appendAsync(ev("E", "n:$i")) } } }.awaitAll().flatten()
        }
        assertEquals((1L..640L).toList(), results.map { it.first }.sorted())
        assertTrue(store.groupCommits() - before < 640, "${store.groupCommits() - before} commits for 640 appends")
    }
}
