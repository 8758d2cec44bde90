package io.ackstate.interceptor;

import java.util.function.IntFunction;
import org.apache.pulsar.common.api.proto.MessageIdData;

/**
 * The String path that {@link EventJson} replaced, kept as it was (only renamed) as the oracle
 * of {@link EventBytesTest}: the bytes of a line must be those of this class's line encoded
 * with {@code String.getBytes(UTF_8)}, as FileSink and KafkaSink did.
 *
 * <p>Builds one event's JSON object in a buffer that is reused line after line; only the writer
 * thread uses an instance. Field names are those of ackstate's contract; a value that is absent
 * is left out rather than written as null.
 *
 * <p>The topic's fields come pre-quoted from {@link #topicFields}, and {@code event_id} and
 * {@code seq} are the last fields ({@link #line}), so nothing is copied to put them first.
 */
final class OldEventJson {
    private final StringBuilder out = new StringBuilder(512);

    /** Starts a new line; {@code topicFields} as made by {@link #topicFields}, once per topic partition. */
    OldEventJson start(String type, String topicFields, long eventTime) {
        out.setLength(0);
        out.append("{\"type\":\"").append(type).append("\",").append(topicFields);
        return num("event_time", eventTime);
    }

    /** The {@code topic} and {@code partition} fields of a topic partition, ready to append. */
    static String topicFields(String topic, int partition) {
        StringBuilder fields = new StringBuilder("\"topic\":");
        quote(fields, topic);
        return fields.append(",\"partition\":").append(partition).toString();
    }

    OldEventJson str(String key, String value) {
        if (value != null) {
            key(key);
            quote(out, value);
        }
        return this;
    }

    OldEventJson num(String key, long value) {
        key(key).append(value);
        return this;
    }

    /** Fields that are already JSON ({@code "k":v,...}, made once and reused). */
    OldEventJson fields(String json) {
        out.append(',').append(json);
        return this;
    }

    /** The contract's {@code message_ids} array of a command's ids. */
    OldEventJson ids(String key, int count, IntFunction<MessageIdData> at) {
        key(key).append('[');
        for (int i = 0; i < count; i++) {
            MessageIdData id = at.apply(i);
            if (i > 0) {
                out.append(',');
            }
            out.append("{\"ledger_id\":").append(id.getLedgerId()).append(",\"entry_id\":").append(id.getEntryId());
            if (id.hasBatchIndex()) {
                out.append(",\"batch_index\":").append(id.getBatchIndex());
            }
            if (id.hasBatchSize()) {
                out.append(",\"batch_size\":").append(id.getBatchSize());
            }
            if (id.getAckSetsCount() > 0) {
                out.append(",\"ack_set\":[");
                for (int w = 0; w < id.getAckSetsCount(); w++) {
                    out.append(w > 0 ? "," : "").append(id.getAckSetAt(w));
                }
                out.append(']');
            }
            out.append('}');
        }
        out.append(']');
        return this;
    }

    private StringBuilder key(String key) {
        return out.append(",\"").append(key).append("\":");
    }

    /** The complete line: the fields so far, then {@code event_id} ({@code <run>-<n>}) and {@code seq}. */
    String line(String run, long n, long seq) {
        return out.append(",\"event_id\":\"").append(run).append('-').append(n).append("\",\"seq\":")
                .append(seq).append('}').toString();
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
