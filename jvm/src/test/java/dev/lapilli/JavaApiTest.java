package dev.lapilli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The public API from Java, without Kotlin: overloads, futures, Durations, typed errors. */
class JavaApiTest {
    private Path dir;

    @BeforeEach
    void createDir() throws Exception {
        dir = Files.createTempDirectory("lapilli-java-");
    }

    @AfterEach
    void deleteDir() throws Exception {
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Test
    void appendReadAndDecide() {
        try (Store store = Store.open(dir, new Options(Durability.BUFFERED))) {
            Query course = Query.forTags("course:c1");
            ReadResult seen = store.read(course);
            long decidedAt = seen.getHead();
            AppendResult appended = store.append(
                    new Event("CourseDefined", List.of("course:c1"), "{\"capacity\":10}"),
                    new AppendCondition(course, decidedAt));
            assertEquals(new AppendResult(1, 1), appended);
            store.append(List.of(new Event("Noted"), new Event("Noted", List.of("course:c1"))));

            List<String> types = new ArrayList<>();
            for (SequencedEvent e : store.read(course).asIterable()) {
                types.add(e.getType());
            }
            assertEquals(List.of("CourseDefined", "Noted"), types);
            List<Long> backwards = new ArrayList<>();
            for (SequencedEvent e : store.read(Query.all(), new ReadOptions(0, null, 2L, true)).asIterable()) {
                backwards.add(e.getPosition());
            }
            assertEquals(List.of(3L, 2L), backwards);

            // The same decision again is refused, typed, with the conflicting position.
            LapilliException.Conflict conflict = assertThrows(LapilliException.Conflict.class,
                    () -> store.append(new Event("CourseDefined", List.of("course:c1")), new AppendCondition(course, decidedAt)));
            assertEquals(1L, conflict.getPosition());
            assertEquals("CONFLICT", conflict.getCode());
            assertThrows(LapilliException.InvalidArgument.class, () -> store.append(List.of()));
            assertEquals(3, store.head());
        }
    }

    @Test
    void futuresAndDurations() throws Exception {
        try (Store store = Store.open(dir.toString(), new Options(Durability.BUFFERED))) {
            List<CompletableFuture<AppendResult>> futures = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                futures.add(store.appendFuture(new Event("Counted", List.of("n:" + i), new byte[] {(byte) i})));
            }
            CompletableFuture.allOf(futures.toArray(new CompletableFuture[0])).get(30, TimeUnit.SECONDS);
            assertEquals(50, store.head());

            CompletableFuture<AppendResult> refused =
                    store.appendFuture(new Event("Counted"), new AppendCondition(Query.forTypes("Counted"), 0L));
            ExecutionException failed = assertThrows(ExecutionException.class, () -> refused.get(30, TimeUnit.SECONDS));
            assertInstanceOf(LapilliException.Conflict.class, failed.getCause());

            try (Subscription sub = store.subscribe(Query.forTypes("Counted"), 48)) {
                List<SequencedEvent> batch = sub.nextBatch(10, Duration.ofSeconds(5));
                assertEquals(2, batch.size());
                assertEquals(49, batch.get(0).getPosition());
                assertEquals(1, batch.get(0).getData().length);
                assertTrue(sub.nextBatch(10, Duration.ofMillis(10)).isEmpty(), "timed out");
                assertNull(sub.next(Duration.ZERO));

                CompletableFuture<List<SequencedEvent>> next = sub.nextBatchFuture();
                store.append(new Event("Counted", List.of(), "late".getBytes(StandardCharsets.UTF_8)));
                List<SequencedEvent> live = next.get(30, TimeUnit.SECONDS);
                assertEquals("late", live.get(0).dataAsString());
                assertEquals(51, sub.getPosition());
                assertThrows(LapilliException.InvalidArgument.class, () -> sub.nextBatch(10, Duration.ofSeconds(-1)));
            }
        }
        assertThrows(LapilliException.StoreLocked.class, () -> {
            try (Store a = Store.open(dir); Store b = Store.open(dir)) {
                b.head();
            }
        });
    }

    @Test
    void closedHandlesAnswerClosed() throws Exception {
        Store store = Store.open(dir, new Options(Durability.BUFFERED, 1L << 20));
        Subscription sub = store.subscribe(Query.all());
        store.close();
        store.close();
        assertThrows(LapilliException.Closed.class, store::head);
        assertNull(sub.nextBatch(10, Duration.ofSeconds(5)), "the store's close ended it");
        ExecutionException late = assertThrows(ExecutionException.class, () -> store.appendFuture(new Event("E")).get(30, TimeUnit.SECONDS));
        assertInstanceOf(LapilliException.Closed.class, late.getCause());
        sub.close();
    }
}
