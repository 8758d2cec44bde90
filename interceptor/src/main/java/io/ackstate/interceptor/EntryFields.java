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
            if (size < 0 || size > entry.writerIndex() - at - 4) {
                return null;
            }
            // one bounds-checked copy of a few dozen bytes, then plain array reads: a ByteBuf
            // checks its bounds and reference count on every getByte
            byte[] metadata = new byte[size];
            entry.getBytes(at + 4, metadata);
            return new Cursor(metadata).fields();
        } catch (IndexOutOfBoundsException e) {
            return null;
        }
    }

    /** A protobuf reader over a message's metadata; reading past its end throws. */
    private static final class Cursor {
        private final byte[] bytes;
        private int at;

        Cursor(byte[] bytes) {
            this.bytes = bytes;
        }

        EntryFields fields() {
            int batchSize = 1;
            int keyAt = -1;
            int keyLength = 0;
            while (at < bytes.length) {
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
            return new EntryFields(batchSize, new String(bytes, keyAt, keyLength, StandardCharsets.UTF_8));
        }

        private long varint() {
            long value = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                byte b = bytes[at++]; // past the end: ArrayIndexOutOfBoundsException, caught by read
                value |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return value;
                }
            }
            throw new IndexOutOfBoundsException("varint longer than 10 bytes");
        }

        private void skip(int length) {
            if (length < 0 || bytes.length - at < length) {
                throw new IndexOutOfBoundsException("field past the metadata's end");
            }
            at += length;
        }
    }
}
