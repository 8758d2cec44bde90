package io.ackstate.interceptor;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BiConsumer;
import org.jctools.queues.MessagePassingQueue;
import org.jctools.queues.MpscArrayQueue;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The bounded queue between the broker's threads and the one writer thread.
 *
 * <p>A hook only offers an item and returns: it never blocks an I/O thread. The writer turns
 * each item into its line ({@code format}, as UTF-8 straight into one reused {@link EventJson})
 * and hands the batch's lines to the sink, so the text of an event costs the writer thread, not
 * the broker's, and leaves no garbage behind. When the queue is full the item is dropped and
 * counted ({@link #dropped()}), and a WARN with the running count is logged at most every 10 s.
 * A dropped event is lost to ackstate, so the log line says so.
 *
 * <p>The writer is never woken by an offer: it drains the queue every {@value #DRAIN_EVERY_MS} ms.
 * A writer blocked in {@code poll} would be unparked by nearly every offer (a futex wake and a
 * context switch per event on the broker's I/O thread); draining on a timer writes hundreds of
 * lines per wake-up, at the price of a few ms before a line reaches the sink. The queue is
 * JCTools' lock-free multi-producer array queue (on the broker's class path), so a hook never
 * waits for the writer's drain either; its capacity is rounded up to a power of two.
 */
final class EventQueue<T> implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(EventQueue.class);
    private static final long WARN_EVERY_MS = 10_000;
    static final long DRAIN_EVERY_MS = 5;
    /** At most 15 characters, so that Linux shows it whole (ps, top, /proc/<pid>/task). */
    static final String WRITER_THREAD = "ackstate-writer";
    private static final long DRAIN_EVERY_NANOS = TimeUnit.MILLISECONDS.toNanos(DRAIN_EVERY_MS);

    private final MpscArrayQueue<T> queue;
    private final BiConsumer<? super T, EventJson> format;
    private final EventSink sink;
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong written = new AtomicLong();
    private final AtomicLong lastWarn = new AtomicLong();
    private final Thread writer;
    private volatile boolean closing;
    private long formatErrors; // the writer thread's only

    /** {@code format} appends an item's line to the batch it is given. */
    EventQueue(int capacity, BiConsumer<? super T, EventJson> format, EventSink sink) {
        this.queue = new MpscArrayQueue<>(capacity);
        this.format = format;
        this.sink = sink;
        this.writer = new Thread(this::drainLoop, WRITER_THREAD);
        this.writer.setDaemon(true);
        this.writer.start();
    }

    /** True if queued; false (and counted) if the queue was full or closed. */
    boolean offer(T item) {
        if (!closing && queue.offer(item)) {
            return true;
        }
        long total = dropped.incrementAndGet();
        long now = System.currentTimeMillis();
        long previous = lastWarn.get();
        if (now - previous >= WARN_EVERY_MS && lastWarn.compareAndSet(previous, now)) {
            log.warn("ackstate interceptor: queue full, {} event(s) dropped so far (ackstateQueueCapacity={});"
                    + " ackstate's state is incomplete from the first drop on", total, queue.capacity());
        }
        return false;
    }

    /** Dropped here (queue full, write failed) or lost by the sink after it accepted them. */
    long dropped() {
        return dropped.get() + sink.lost();
    }

    long written() {
        return written.get();
    }

    private void drainLoop() {
        EventJson batch = new EventJson();
        MessagePassingQueue.Consumer<T> intoBatch = item -> formatInto(batch, item);
        while (true) {
            try {
                boolean last = closing; // read before draining: what was offered before close() is drained
                while (queue.drain(intoBatch, 8192) > 0) {
                    sink.write(batch);
                    written.addAndGet(batch.count());
                    batch.clear();
                }
                sink.tick(System.currentTimeMillis());
                if (last || Thread.currentThread().isInterrupted()) {
                    return;
                }
                LockSupport.parkNanos(DRAIN_EVERY_NANOS);
            } catch (Exception e) {
                log.error("ackstate interceptor: writing {} event(s) failed; they are lost", batch.count(), e);
                dropped.addAndGet(batch.count());
                batch.clear();
            }
        }
    }

    /** An item that cannot be formatted is lost alone: counted, and logged the first few times;
     *  what it wrote of its line is dropped. */
    private void formatInto(EventJson batch, T item) {
        try {
            format.accept(item, batch);
        } catch (RuntimeException e) {
            batch.dropUnfinished();
            long total = dropped.incrementAndGet();
            if (++formatErrors <= 10) {
                log.error("ackstate interceptor: formatting an event failed; it is lost ({} dropped so far)", total, e);
            }
        }
    }

    /** Stop accepting, write out what is queued, close the sink. */
    @Override
    public void close() throws Exception {
        closing = true;
        writer.join(30_000);
        sink.close();
        log.info("ackstate interceptor: closed; {} event(s) written, {} dropped", written.get(), dropped());
    }
}
