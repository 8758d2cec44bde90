package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;

class EventQueueTest {
    /** A sink that blocks until released, so the queue fills up behind it. */
    static final class StuckSink implements EventSink {
        final CountDownLatch release = new CountDownLatch(1);
        final List<String> lines = new ArrayList<>();

        @Override
        public void write(List<String> batch) throws java.io.IOException {
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            synchronized (lines) {
                lines.addAll(batch);
            }
        }

        @Override
        public void tick(long nowMillis) {
        }

        @Override
        public void close() {
        }
    }

    @Test
    void aFullQueueDropsAndCountsInsteadOfBlocking() throws Exception {
        StuckSink sink = new StuckSink();
        EventQueue<String> queue = new EventQueue<>(2, line -> line, sink);
        assertTrue(queue.offer("a"));
        Thread.sleep(200); // the writer takes "a" and blocks in the sink
        assertTrue(queue.offer("b"));
        assertTrue(queue.offer("c"));
        assertFalse(queue.offer("d")); // returns while the writer is stuck: a blocking offer would hang here
        assertEquals(1, queue.dropped());
        sink.release.countDown();
        queue.close();
        assertEquals(List.of("a", "b", "c"), sink.lines);
        assertEquals(3, queue.written());
    }
}
