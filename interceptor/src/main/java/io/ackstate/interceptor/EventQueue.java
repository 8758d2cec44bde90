package io.ackstate.interceptor;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The bounded queue between the broker's threads and the one writer thread.
 *
 * <p>A hook only offers a line and returns: it never blocks an I/O thread. When the queue is
 * full the line is dropped and counted ({@link #dropped()}), and a WARN with the running count
 * is logged at most every 10 s. A dropped event is lost to ackstate, so the log line says so.
 */
final class EventQueue implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(EventQueue.class);
    private static final long WARN_EVERY_MS = 10_000;
    private static final long TICK_MS = 100;

    private final BlockingQueue<String> queue;
    private final EventSink sink;
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong written = new AtomicLong();
    private final AtomicLong lastWarn = new AtomicLong();
    private final Thread writer;
    private volatile boolean closing;

    EventQueue(int capacity, EventSink sink) {
        this.queue = new ArrayBlockingQueue<>(capacity);
        this.sink = sink;
        this.writer = new Thread(this::drainLoop, "ackstate-interceptor-writer");
        this.writer.setDaemon(true);
        this.writer.start();
    }

    /** True if queued; false (and counted) if the queue was full or closed. */
    boolean offer(String line) {
        if (!closing && queue.offer(line)) {
            return true;
        }
        long total = dropped.incrementAndGet();
        long now = System.currentTimeMillis();
        long previous = lastWarn.get();
        if (now - previous >= WARN_EVERY_MS && lastWarn.compareAndSet(previous, now)) {
            log.warn("ackstate interceptor: queue full, {} event(s) dropped so far (ackstateQueueCapacity={});"
                    + " ackstate's state is incomplete from the first drop on", total, queue.remainingCapacity()
                    + queue.size());
        }
        return false;
    }

    long dropped() {
        return dropped.get();
    }

    long written() {
        return written.get();
    }

    private void drainLoop() {
        List<String> batch = new ArrayList<>(1024);
        while (true) {
            try {
                String first = queue.poll(TICK_MS, TimeUnit.MILLISECONDS);
                if (first != null) {
                    batch.add(first);
                    queue.drainTo(batch, 8191);
                    sink.write(batch);
                    written.addAndGet(batch.size());
                    batch.clear();
                }
                sink.tick(System.currentTimeMillis());
                if (closing && queue.isEmpty()) {
                    return;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            } catch (Exception e) {
                log.error("ackstate interceptor: writing {} event(s) failed; they are lost", batch.size(), e);
                dropped.addAndGet(batch.size());
                batch.clear();
            }
        }
    }

    /** Stop accepting, write out what is queued, close the sink. */
    @Override
    public void close() throws Exception {
        closing = true;
        writer.join(30_000);
        sink.close();
        log.info("ackstate interceptor: closed; {} event(s) written, {} dropped", written.get(), dropped.get());
    }
}
