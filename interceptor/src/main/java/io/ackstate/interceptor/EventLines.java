package io.ackstate.interceptor;

import java.util.function.BiConsumer;

/**
 * Turns captured events into their JSON lines, on the writer thread only. {@code event_id} is
 * {@code <run>-<n>} with {@code n} counted here: unique per broker run without a counter that
 * every I/O thread would contend on.
 */
final class EventLines implements BiConsumer<Event, EventJson> {
    /** {@code ,"event_id":"<run>-}, encoded once. */
    private final byte[] eventIdPrefix;
    private long n;

    EventLines(String run) {
        this.eventIdPrefix = EventJson.eventIdPrefix(run);
    }

    /** Appends the event's line to {@code out}. */
    @Override
    public void accept(Event event, EventJson out) {
        out.start(event.type().opening, event.partition().topicFields, event.time());
        event.fields(out);
        out.line(eventIdPrefix, ++n, event.seq());
    }
}
