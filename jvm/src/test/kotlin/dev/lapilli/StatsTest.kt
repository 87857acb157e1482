package dev.lapilli

import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import kotlin.test.assertEquals
import kotlin.test.assertNull
import kotlin.test.assertTrue

class StatsTest {
    @Test
    fun `stats count what the handle wrote, and a follower reports its lag`(): Unit =
        withStore(Options(durability = Durability.FSYNC)) { store, dir ->
            val fresh = store.stats()
            assertEquals(0, fresh.head)
            assertEquals(0, fresh.groupCommits)
            assertNull(fresh.followerLagPositions)
            for (n in listOf(1, 4, 2)) store.append((0 until n).map { ev("T", "k:$it", data = "x") })
            val stats = store.stats()
            assertEquals(7, stats.head)
            assertEquals(7, stats.eventsAppended)
            assertEquals(3, stats.groupCommits)
            assertEquals(3, stats.fsyncs)
            assertEquals(4, stats.eventsPerCommitMax)
            assertEquals(7.0 / 3.0, stats.eventsPerCommitMean, 1e-9)
            assertTrue(stats.fsyncMaxMicros > 0)
            assertTrue(stats.fsyncP50Micros <= stats.fsyncP99Micros && stats.fsyncP99Micros <= stats.fsyncMaxMicros)
            assertEquals(0, stats.queueDepth)
            assertTrue(stats.queueDepthMax >= 1)
            assertEquals(1, stats.segments)
            assertTrue(stats.bytesAppended > 7 * 8 + 3 * 21)
            val subscription = store.subscribe(Query.all())
            assertEquals(1, store.stats().subscriptions)
            subscription.close()
            assertEquals(0, store.stats().subscriptions)
            Store.openReadOnly(dir).use { follower ->
                val seen = follower.stats()
                assertEquals(7, seen.head)
                assertEquals(0, seen.eventsAppended)
                assertEquals(0L, seen.followerLagPositions)
                assertEquals(0L, seen.followerLagMillis)
            }
            store.close()
            assertThrows<LapilliException.Closed> { store.stats() }
        }
}
