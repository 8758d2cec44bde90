package io.ackstate.interceptor;

import java.io.IOException;
import java.util.List;

/**
 * Where complete event lines go, called only from the one writer thread of {@link EventQueue}.
 * The file sink is the first; a Kafka sink fits beside it with the same queue and drop policy.
 */
interface EventSink extends AutoCloseable {
    /** Append lines (each one JSON object, no newline). */
    void write(List<String> lines) throws IOException;

    /** Called at least every few hundred ms, also when idle: make due output visible. */
    void tick(long nowMillis) throws IOException;

    /** Make everything written so far visible, and release resources. */
    @Override
    void close() throws IOException;
}
