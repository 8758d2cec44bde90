package io.ackstate.interceptor;

import java.time.Instant;
import java.util.function.LongSupplier;

/**
 * A hybrid clock: {@code max(previous + 1, now in microseconds)}.
 *
 * <p>ackstate needs {@code seq} strictly increasing per topic partition, in the order the broker
 * applied the events, and still increasing after a broker restart or when the topic moves to
 * another broker. A counter would start again at 0 on the new broker; wall-clock microseconds
 * alone could repeat or step back. This clock does neither as long as the brokers' clocks agree
 * to within the time a topic takes to move, and it runs ahead of the wall clock only while a
 * partition sees more than one event per microsecond.
 */
final class SeqClock {
    private final LongSupplier micros;
    private long last;

    SeqClock() {
        this(SeqClock::wallMicros);
    }

    SeqClock(LongSupplier micros) {
        this.micros = micros;
    }

    static long wallMicros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    /** The next value; callers that need a total order with other work hold their own lock. */
    synchronized long next() {
        last = Math.max(last + 1, micros.getAsLong());
        return last;
    }
}
