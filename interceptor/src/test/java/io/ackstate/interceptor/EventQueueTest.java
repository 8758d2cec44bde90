package io.ackstate.interceptor;

import static io.ackstate.interceptor.EventJson.eventIdPrefix;
import static io.ackstate.interceptor.EventJson.name;
import static io.ackstate.interceptor.EventJson.opening;
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
        public void write(LineBatch batch) throws java.io.IOException {
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            synchronized (lines) {
                lines.addAll(Lines.of(batch));
            }
        }

        @Override
        public void tick(long nowMillis) {
        }

        @Override
        public void close() {
        }
    }

    /** Each item's line: a SEND whose producer is the item. */
    private static void send(String producer, EventJson out) {
        if (producer.equals("unformattable")) {
            out.start(opening("SEND"), EventJson.topicFields("t", 0), 1).str(name("producer_name"), "half a line");
            throw new IllegalStateException("cannot format " + producer);
        }
        out.start(opening("SEND"), EventJson.topicFields("t", 0), 1).str(name("producer_name"), producer).line(eventIdPrefix("r"), 1, 1);
    }

    private static String sent(String producer) {
        EventJson json = new EventJson();
        send(producer, json);
        return Lines.line(json, 0);
    }

    @Test
    void aFullQueueDropsAndCountsInsteadOfBlocking() throws Exception {
        StuckSink sink = new StuckSink();
        EventQueue<String> queue = new EventQueue<>(2, EventQueueTest::send, sink);
        assertTrue(queue.offer("a"));
        Thread.sleep(200); // the writer takes "a" and blocks in the sink
        assertTrue(queue.offer("b"));
        assertTrue(queue.offer("c"));
        assertFalse(queue.offer("d")); // returns while the writer is stuck: a blocking offer would hang here
        assertEquals(1, queue.dropped());
        sink.release.countDown();
        queue.close();
        assertEquals(List.of(sent("a"), sent("b"), sent("c")), sink.lines);
        assertEquals(3, queue.written());
    }

    @Test
    void anItemThatCannotBeFormattedIsLostAloneAndWritesNothing() throws Exception {
        StuckSink sink = new StuckSink();
        sink.release.countDown();
        EventQueue<String> queue = new EventQueue<>(16, EventQueueTest::send, sink);
        queue.offer("a");
        queue.offer("unformattable");
        queue.offer("b");
        queue.close();
        assertEquals(List.of(sent("a"), sent("b")), sink.lines);
        assertEquals(2, queue.written());
        assertEquals(1, queue.dropped());
    }
}
