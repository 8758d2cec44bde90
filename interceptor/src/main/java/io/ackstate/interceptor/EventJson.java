package io.ackstate.interceptor;

/**
 * Builds one event's JSON object. Field names are those of ackstate's contract; a value that is
 * absent is left out rather than written as null.
 *
 * <p>The hooks run on the broker's I/O threads, so a line is built in one buffer and turned into
 * one string: the topic's fields come pre-quoted from {@link #topicFields}, and {@code event_id}
 * and {@code seq}, which the emitter assigns when it orders the event, are the last fields
 * ({@link #line}), so nothing is copied to put them first.
 */
final class EventJson {
    /** Each broker thread builds its lines in one buffer; only the finished line is a new object. */
    private static final ThreadLocal<StringBuilder> BUFFER = ThreadLocal.withInitial(() -> new StringBuilder(512));

    private final StringBuilder out;

    /** {@code topicFields} as made by {@link #topicFields}, once per topic partition. */
    EventJson(String type, String topicFields, long eventTime) {
        StringBuilder buffer = BUFFER.get();
        // not empty: this thread is inside another line (or a hook failed halfway through one)
        out = buffer.length() == 0 ? buffer : new StringBuilder(256);
        out.append("{\"type\":\"").append(type).append("\",").append(topicFields);
        num("event_time", eventTime);
    }

    /** The {@code topic} and {@code partition} fields of a topic partition, ready to append. */
    static String topicFields(String topic, int partition) {
        StringBuilder fields = new StringBuilder("\"topic\":");
        quote(fields, topic);
        return fields.append(",\"partition\":").append(partition).toString();
    }

    EventJson str(String key, String value) {
        if (value != null) {
            key(key);
            quote(out, value);
        }
        return this;
    }

    EventJson num(String key, long value) {
        key(key).append(value);
        return this;
    }

    /** Fields that are already JSON ({@code "k":v,...}, made once and reused). */
    EventJson fields(String json) {
        out.append(',').append(json);
        return this;
    }

    /** A value that is already JSON (an array of message ids). */
    EventJson raw(String key, String json) {
        key(key).append(json);
        return this;
    }

    private StringBuilder key(String key) {
        return out.append(",\"").append(key).append("\":");
    }

    /** The complete line: the fields so far, then {@code event_id} ({@code <run>-<n>}) and {@code seq}. */
    String line(String run, long n, long seq) {
        String line = out.append(",\"event_id\":\"").append(run).append('-').append(n).append("\",\"seq\":")
                .append(seq).append('}').toString();
        out.setLength(0);
        return line;
    }

    static void quote(StringBuilder out, String value) {
        out.append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
