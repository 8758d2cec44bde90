package io.ackstate.interceptor;

/**
 * A hybrid clock: {@code max(previous + 1, now in ms × 1000)}.
 *
 * <p>ackstate needs {@code seq} strictly increasing per topic partition, in the order the broker
 * applied the events, and still increasing after a broker restart or when the topic moves to
 * another broker. A counter would start again at 0 on the new broker; the wall clock alone could
 * repeat or step back. This clock does neither as long as the brokers' clocks agree to within
 * the time a topic takes to move, and it runs ahead of the wall clock only while a partition
 * sees more than 1,000 events in a millisecond.
 *
 * <p>The caller passes the time it read for the event's {@code event_time}: one clock read per
 * event, and {@code System.currentTimeMillis} is far cheaper on a broker's I/O thread than a
 * sub-millisecond wall clock ({@code Instant.now} was a quarter of the hooks' cost). Not
 * thread-safe: each clock is used under its owner's lock (the partition's, or the consumers').
 */
final class SeqClock {
    private long last;

    /** The next value at wall-clock time {@code nowMillis}. */
    long next(long nowMillis) {
        last = Math.max(last + 1, nowMillis * 1000);
        return last;
    }
}
