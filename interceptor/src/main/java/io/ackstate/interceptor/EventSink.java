package io.ackstate.interceptor;

import java.io.IOException;

/**
 * Where complete event lines go, called only from the one writer thread of {@link EventQueue}.
 * Two sinks share the queue and its drop policy: {@link FileSink} and {@link KafkaSink}.
 */
interface EventSink extends AutoCloseable {
    /** Append the batch's lines (each one JSON object, UTF-8); the batch's array is reused once
     *  this returns. */
    void write(LineBatch lines) throws IOException;

    /** Called at least every few hundred ms, also when idle: make due output visible. */
    void tick(long nowMillis) throws IOException;

    /** Events the sink accepted and then failed to deliver (a sink that delivers later, as
     *  Kafka's producer does, learns of a failure after {@link #write} returned). */
    default long lost() {
        return 0;
    }

    /** Make everything written so far visible, and release resources. */
    @Override
    void close() throws IOException;
}
