package io.ackstate.interceptor;

/**
 * Builds one event's JSON fields (everything but {@code event_id} and {@code seq}, which the
 * emitter adds when it orders the event). Field names are those of ackstate's contract; a value
 * that is absent is left out rather than written as null.
 */
final class EventJson {
    private final StringBuilder out = new StringBuilder(192);

    EventJson(String type, String topic, int partition, long eventTime) {
        str("type", type);
        str("topic", topic);
        num("partition", partition);
        num("event_time", eventTime);
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

    /** A value that is already JSON (an array of message ids). */
    EventJson raw(String key, String json) {
        key(key).append(json);
        return this;
    }

    private StringBuilder key(String key) {
        if (out.length() > 0) {
            out.append(',');
        }
        return out.append('"').append(key).append("\":");
    }

    /** The fields, comma-separated, without braces. */
    String fields() {
        return out.toString();
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
