package io.ackstate.interceptor;

import java.util.function.Function;

/**
 * Turns captured events into their JSON lines, on the writer thread only. {@code event_id} is
 * {@code <run>-<n>} with {@code n} counted here: unique per broker run without a counter that
 * every I/O thread would contend on.
 */
final class EventLines implements Function<Event, String> {
    private final String run;
    private final EventJson json = new EventJson();
    private long n;

    EventLines(String run) {
        this.run = run;
    }

    @Override
    public String apply(Event event) {
        json.start(event.type(), event.partition().topicFields, event.time());
        event.fields(json);
        return json.line(run, ++n, event.seq());
    }
}
