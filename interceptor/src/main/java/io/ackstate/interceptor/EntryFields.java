package io.ackstate.interceptor;

import io.netty.buffer.ByteBuf;
import java.nio.charset.StandardCharsets;
import org.apache.pulsar.common.protocol.Commands;

/**
 * The two metadata fields of an entry that a DISPATCH carries, read straight from its bytes.
 *
 * <p>{@code Commands.peekMessageMetadata} clears a thread-local {@code MessageMetadata} (some
 * thirty fields and lists) and parses every field into it; on the dispatch path, for every entry
 * sent, that was most of the hook's cost. This walks the protobuf fields once, keeps
 * {@code num_messages_in_batch} and {@code partition_key}, and skips the rest. The bytes are
 * laid out as Pulsar writes an entry: optional broker entry metadata, optional checksum, the
 * metadata's size, the metadata.
 *
 * @param batchSize {@code num_messages_in_batch}, 1 when absent (protobuf's default)
 * @param key {@code partition_key}, null when absent
 */
record EntryFields(int batchSize, String key) {
    /** Field numbers of PulsarApi.proto's MessageMetadata. */
    private static final int PARTITION_KEY = 6;
    private static final int NUM_MESSAGES_IN_BATCH = 11;
    /** The usual entry: one message, no key. Returned as is, so the usual case allocates nothing. */
    private static final EntryFields SINGLE = new EntryFields(1, null);

    /** The entry's fields, or null if its bytes are not a message's metadata. The reader index stays. */
    static EntryFields read(ByteBuf entry) {
        try {
            int at = entry.readerIndex();
            if (entry.getShort(at) == Commands.magicBrokerEntryMetadata) {
                at += 6 + entry.getInt(at + 2);
            }
            if (entry.getShort(at) == Commands.magicCrc32c) {
                at += 6; // magic and the CRC32C
            }
            int size = entry.getInt(at);
            Cursor cursor = new Cursor(entry, at + 4, at + 4 + size);
            if (size < 0 || cursor.end > entry.writerIndex()) {
                return null;
            }
            return cursor.fields();
        } catch (IndexOutOfBoundsException e) {
            return null;
        }
    }

    /** A protobuf reader over {@code [at, end)} of a buffer; reading past {@code end} throws. */
    private static final class Cursor {
        private final ByteBuf buf;
        private final int end;
        private int at;

        Cursor(ByteBuf buf, int at, int end) {
            this.buf = buf;
            this.at = at;
            this.end = end;
        }

        EntryFields fields() {
            int batchSize = 1;
            int keyAt = -1;
            int keyLength = 0;
            while (at < end) {
                long tag = varint();
                int field = (int) (tag >>> 3);
                switch ((int) tag & 7) {
                    case 0 -> {
                        long value = varint();
                        if (field == NUM_MESSAGES_IN_BATCH) {
                            batchSize = (int) value;
                        }
                    }
                    case 1 -> skip(8);
                    case 2 -> {
                        int length = (int) varint();
                        if (field == PARTITION_KEY) {
                            keyAt = at;
                            keyLength = length;
                        }
                        skip(length);
                    }
                    case 5 -> skip(4);
                    default -> throw new IndexOutOfBoundsException("wire type " + (tag & 7)); // groups: not Pulsar's
                }
            }
            if (keyAt < 0) {
                return batchSize == 1 ? SINGLE : new EntryFields(batchSize, null);
            }
            return new EntryFields(batchSize, buf.toString(keyAt, keyLength, StandardCharsets.UTF_8));
        }

        private long varint() {
            long value = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                byte b = byteAt(at++);
                value |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return value;
                }
            }
            throw new IndexOutOfBoundsException("varint longer than 10 bytes");
        }

        private void skip(int length) {
            if (length < 0 || end - at < length) {
                throw new IndexOutOfBoundsException("field past the metadata's end");
            }
            at += length;
        }

        private byte byteAt(int index) {
            if (index >= end) {
                throw new IndexOutOfBoundsException("field past the metadata's end");
            }
            return buf.getByte(index);
        }
    }
}
