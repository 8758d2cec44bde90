package io.ackstate.interceptor;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.function.Consumer;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;
import org.apache.pulsar.common.api.proto.MessageIdData;

/**
 * Builds event lines as UTF-8 JSON straight into one byte array that the writer thread reuses
 * batch after batch, and holds the batch's complete lines for the sink ({@link LineBatch}); only
 * the writer thread uses an instance. Field names are those of ackstate's contract; a value that
 * is absent is left out rather than written as null.
 *
 * <p>Nothing here allocates per event: no String per line, no {@code getBytes} copy of it, no
 * String per number. At about four events per message, those copies were most of the garbage
 * the plugin made the broker's collector clear. The bytes are exactly those that building the
 * line in a {@code StringBuilder} and encoding it with {@code String.getBytes(UTF_8)} gave.
 *
 * <p>A line is {@link #start}, fields, then {@link #line}, which completes it. The topic's fields
 * come pre-quoted from {@link #topicFields}, and {@code event_id} and {@code seq} are the last
 * fields, so nothing is copied to put them first.
 */
final class EventJson implements LineBatch {
    private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);
    /** "00", "01", ... "99": the digits of every number below 100, two bytes each. */
    private static final byte[] PAIRS = new byte[200];

    static {
        for (int i = 0; i < 100; i++) {
            PAIRS[2 * i] = (byte) ('0' + i / 10);
            PAIRS[2 * i + 1] = (byte) ('0' + i % 10);
        }
    }

    private static final byte[] EVENT_TIME = name("event_time");
    private static final byte[] SEQ = ascii("\",\"seq\":");
    private static final byte[] ID_LEDGER_ID = ascii("{\"ledger_id\":");
    private static final byte[] ID_ENTRY_ID = ascii(",\"entry_id\":");
    private static final byte[] ID_BATCH_INDEX = ascii(",\"batch_index\":");
    private static final byte[] ID_BATCH_SIZE = ascii(",\"batch_size\":");
    private static final byte[] ID_ACK_SET = ascii(",\"ack_set\":");
    /** A few hundred lines; the array grows to what a batch needs and keeps that size. */
    private static final int INITIAL_BYTES = 1 << 16;
    /** A batch that needed more (huge ack lists, say) gives its array back once written. */
    private static final int KEPT_BYTES = 1 << 22;

    private byte[] bytes;
    /** Bytes used: the complete lines, then the line being built. */
    private int size;
    /** Where each complete line's {@code '\n'} is. */
    private int[] ends;
    private int count;
    /** A number's digits, written from the last one. */
    private final byte[] digits = new byte[20];

    EventJson() {
        this(INITIAL_BYTES, 1024);
    }

    private EventJson(int initialBytes, int initialLines) {
        bytes = new byte[initialBytes];
        ends = new int[initialLines];
    }

    // ---- the lines, for the sink -------------------------------------------------------------
    @Override
    public int count() {
        return count;
    }

    @Override
    public byte[] bytes() {
        return bytes;
    }

    @Override
    public int lineEnd(int i) {
        return ends[i];
    }

    /** Forgets all lines, for the next batch. */
    void clear() {
        size = 0;
        count = 0;
        if (bytes.length > KEPT_BYTES) {
            bytes = new byte[INITIAL_BYTES];
        }
    }

    /** Forgets the line begun and not completed (its event could not be formatted). */
    void dropUnfinished() {
        size = lineStart(count);
    }

    // ---- what is encoded once ------------------------------------------------------------------
    /** A field's name as it precedes its value, {@code ,"name":}, encoded once (a constant of the caller's). */
    static byte[] name(String field) {
        return encoded(json -> json.plain(",\"").plain(field).plain("\":"));
    }

    /** The opening of an event's line, {@code {"type":"TYPE",}, encoded once per event type. */
    static byte[] opening(String type) {
        return encoded(json -> json.plain("{\"type\":\"").plain(type).plain("\","));
    }

    /** What precedes a line's event number, {@code ,"event_id":"<run>-}, encoded once per broker run. */
    static byte[] eventIdPrefix(String run) {
        return encoded(json -> json.plain(",\"event_id\":\"").plain(run).put('-'));
    }

    /** A string field, {@code "name":"value"} without a comma, encoded once: for {@link #fields}. */
    static byte[] stringField(String field, String value) {
        return encoded(json -> json.plain("\"").plain(field).plain("\":").quote(value));
    }

    /** The {@code topic} and {@code partition} fields of a topic partition, ready to append. */
    static byte[] topicFields(String topic, int partition) {
        return encoded(json -> json.plain("\"topic\":").quote(topic).plain(",\"partition\":").decimal(partition));
    }

    /** The {@code subscription} and {@code consumer_id} fields of a consumer, ready to append. */
    static byte[] consumerFields(String subscription, long consumerId) {
        return encoded(json -> json.plain("\"subscription\":").quote(subscription).plain(",\"consumer_id\":")
                .decimal(consumerId));
    }

    /** {@code "subscription":"..."}, for the events of a subscription that no consumer issued. */
    static byte[] subscriptionField(String subscription) {
        return encoded(json -> json.plain("\"subscription\":").quote(subscription));
    }

    private static byte[] encoded(Consumer<EventJson> write) {
        EventJson json = new EventJson(64, 1);
        write.accept(json);
        return json.unfinished();
    }

    // ---- building a line -----------------------------------------------------------------------
    /**
     * Begins a line: {@code opening} from {@link #opening}, {@code topicFields} from
     * {@link #topicFields}, each made once. Field names and the other constant parts of a line are
     * copied as bytes made once, never encoded per line: encoding them a character at a time was
     * a third of the writer thread's time.
     */
    EventJson start(byte[] opening, byte[] topicFields, long eventTime) {
        return raw(opening).raw(topicFields).num(EVENT_TIME, eventTime);
    }

    /** {@code name} from {@link #name}; nothing is written for a null {@code value}. */
    EventJson str(byte[] name, String value) {
        if (value != null) {
            raw(name).quote(value);
        }
        return this;
    }

    EventJson num(byte[] name, long value) {
        return raw(name).decimal(value);
    }

    /** Fields that are already JSON ({@code "k":v,...}, made once and reused). */
    EventJson fields(byte[] json) {
        return put(',').raw(json);
    }

    /** The contract's {@code message_ids} array of an ack. One method per command type, since
     *  a lambda that reads the command's ids would be an object per event. */
    EventJson ids(byte[] name, CommandAck ack) {
        raw(name).put('[');
        for (int i = 0; i < ack.getMessageIdsCount(); i++) {
            id(i, ack.getMessageIdAt(i));
        }
        return put(']');
    }

    /** The contract's {@code message_ids} array of a redeliver request. */
    EventJson ids(byte[] name, CommandRedeliverUnacknowledgedMessages command) {
        raw(name).put('[');
        for (int i = 0; i < command.getMessageIdsCount(); i++) {
            id(i, command.getMessageIdAt(i));
        }
        return put(']');
    }

    private void id(int i, MessageIdData id) {
        if (i > 0) {
            put(',');
        }
        raw(ID_LEDGER_ID).decimal(id.getLedgerId()).raw(ID_ENTRY_ID).decimal(id.getEntryId());
        if (id.hasBatchIndex()) {
            raw(ID_BATCH_INDEX).decimal(id.getBatchIndex());
        }
        if (id.hasBatchSize()) {
            raw(ID_BATCH_SIZE).decimal(id.getBatchSize());
        }
        if (id.getAckSetsCount() > 0) {
            raw(ID_ACK_SET).put('[');
            for (int w = 0; w < id.getAckSetsCount(); w++) {
                if (w > 0) {
                    put(',');
                }
                decimal(id.getAckSetAt(w));
            }
            put(']');
        }
        put('}');
    }

    /**
     * Completes the line: the fields so far, then {@code event_id} ({@code <run>-<n>}, its
     * beginning from {@link #eventIdPrefix}) and {@code seq}.
     */
    void line(byte[] eventIdPrefix, long n, long seq) {
        raw(eventIdPrefix).decimal(n).raw(SEQ).decimal(seq).put('}');
        if (count == ends.length) {
            ends = Arrays.copyOf(ends, 2 * count);
        }
        ends[count++] = size;
        put('\n');
    }

    // ---- bytes -----------------------------------------------------------------------------
    /** The bytes after the last complete line (a copy): how the pre-made fields are made. */
    private byte[] unfinished() {
        return Arrays.copyOfRange(bytes, lineStart(count), size);
    }

    private void ensure(int more) {
        if (bytes.length - size < more) {
            bytes = Arrays.copyOf(bytes, Math.max(2 * bytes.length, size + more));
        }
    }

    private EventJson put(char ascii) {
        ensure(1);
        bytes[size++] = (byte) ascii;
        return this;
    }

    /** Constant text as bytes, for the parts of lines that are made once (here and in the sinks). */
    static byte[] ascii(String text) {
        return text.getBytes(StandardCharsets.US_ASCII);
    }

    private EventJson raw(byte[] json) {
        ensure(json.length);
        System.arraycopy(json, 0, bytes, size, json.length);
        size += json.length;
        return this;
    }

    /**
     * {@code value} in decimal, as {@code StringBuilder.append(long)} writes it, without a String.
     *
     * <p>A line carries some 50 digits (its event time, event number and seq, and the ids), and a
     * division per digit was most of the writer thread's time once the field names were made
     * once. So: two digits a step from {@link #PAIRS}, and a number beyond an int splits off its
     * last eight digits first, which then take int steps that do not wait on the long ones.
     */
    private EventJson decimal(long value) {
        // from the last digits, on the negative side: -Long.MIN_VALUE is not a long
        long rest = value < 0 ? value : -value;
        int at = digits.length;
        while (rest < Integer.MIN_VALUE) {
            long next = rest / 100_000_000;
            at = eightDigits(digits, at, (int) (next * 100_000_000 - rest));
            rest = next;
        }
        int small = (int) rest;
        while (small <= -100) {
            int next = small / 100;
            int pair = 2 * (next * 100 - small); // the last two digits, 0..99, times 2
            digits[--at] = PAIRS[pair + 1];
            digits[--at] = PAIRS[pair];
            small = next;
        }
        if (small <= -10) {
            digits[--at] = PAIRS[-2 * small + 1];
            digits[--at] = PAIRS[-2 * small];
        } else {
            digits[--at] = (byte) ('0' - small);
        }
        if (value < 0) {
            digits[--at] = '-';
        }
        int length = digits.length - at;
        ensure(length);
        System.arraycopy(digits, at, bytes, size, length);
        size += length;
        return this;
    }

    /** The eight digits of {@code value} (0 to 99,999,999, with leading zeros) before {@code at}. */
    private static int eightDigits(byte[] into, int at, int value) {
        for (int i = 0; i < 4; i++) {
            int next = value / 100;
            int pair = 2 * (value - next * 100);
            into[--at] = PAIRS[pair + 1];
            into[--at] = PAIRS[pair];
            value = next;
        }
        return at;
    }

    /** Text that is not a JSON string value (names, constants, the run id), as UTF-8, unescaped. */
    private EventJson plain(String text) {
        utf8(text, false);
        return this;
    }

    /** A JSON string: quoted, escaped as the contract's lines always were, as UTF-8. */
    private EventJson quote(String value) {
        put('"');
        utf8(value, true);
        return put('"');
    }

    /**
     * Appends {@code text} as UTF-8, as {@code String.getBytes(UTF_8)} encodes it: a surrogate
     * pair as the four bytes of its code point, a surrogate without its other half as {@code ?}.
     * With {@code escape}, {@code "}, {@code \} and the control characters are escaped as
     * {@code \"}, {@code \\}, {@code \n}, {@code \r}, {@code \t}, the others as a backslash, {@code u00} and two hex digits.
     */
    private void utf8(String text, boolean escape) {
        int length = text.length();
        ensure(6 * length); // the most a char takes: an escaped control character; room for all, so no check per byte
        byte[] b = bytes;
        int at = size;
        for (int i = 0; i < length; i++) {
            char c = text.charAt(i);
            if (c < 0x80) {
                if (escape && (c < 0x20 || c == '"' || c == '\\')) {
                    at = escaped(b, at, c);
                } else {
                    b[at++] = (byte) c;
                }
            } else if (c < 0x800) {
                b[at++] = (byte) (0xc0 | c >> 6);
                b[at++] = (byte) (0x80 | c & 0x3f);
            } else if (!Character.isSurrogate(c)) {
                b[at++] = (byte) (0xe0 | c >> 12);
                b[at++] = (byte) (0x80 | c >> 6 & 0x3f);
                b[at++] = (byte) (0x80 | c & 0x3f);
            } else if (Character.isHighSurrogate(c) && i + 1 < length && Character.isLowSurrogate(text.charAt(i + 1))) {
                int point = Character.toCodePoint(c, text.charAt(++i));
                b[at++] = (byte) (0xf0 | point >> 18);
                b[at++] = (byte) (0x80 | point >> 12 & 0x3f);
                b[at++] = (byte) (0x80 | point >> 6 & 0x3f);
                b[at++] = (byte) (0x80 | point & 0x3f);
            } else {
                b[at++] = '?';
            }
        }
        size = at;
    }

    private static int escaped(byte[] b, int at, char c) {
        b[at++] = '\\';
        switch (c) {
            case '"' -> b[at++] = '"';
            case '\\' -> b[at++] = '\\';
            case '\n' -> b[at++] = 'n';
            case '\r' -> b[at++] = 'r';
            case '\t' -> b[at++] = 't';
            default -> { // the other control characters, in lower-case hex
                b[at++] = 'u';
                b[at++] = '0';
                b[at++] = '0';
                b[at++] = HEX[c >> 4];
                b[at++] = HEX[c & 0xf];
            }
        }
        return at;
    }
}
