package io.ackstate.interceptor;

import io.netty.buffer.ByteBuf;
import io.netty.util.concurrent.FastThreadLocal;
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
    /** Entries without a key, by batch size, made as sizes are met and then returned as they are,
     *  so that the usual entry allocates nothing (a race makes an equal one, which does no harm). */
    private static final EntryFields[] UNKEYED = new EntryFields[1025];
    /** One cursor per thread: the connections' event loops, where {@code messageDispatched} runs. */
    private static final FastThreadLocal<Cursor> CURSORS = new FastThreadLocal<>() {
        @Override
        protected Cursor initialValue() {
            return new Cursor();
        }
    };

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
            return CURSORS.get().over(entry, at + 4, size).fields();
        } catch (IndexOutOfBoundsException e) {
            return null;
        }
    }

    private static EntryFields unkeyed(int batchSize) {
        if (batchSize < 0 || batchSize >= UNKEYED.length) {
            return new EntryFields(batchSize, null);
        }
        EntryFields fields = UNKEYED[batchSize];
        if (fields == null) {
            fields = new EntryFields(batchSize, null);
            UNKEYED[batchSize] = fields;
        }
        return fields;
    }

    /**
     * A protobuf reader over a message's metadata, {@code bytes[0, end)}; reading past its end
     * throws. The metadata is copied into the thread's array: one bounds-checked copy of a few
     * dozen bytes, then plain array reads (a ByteBuf checks its bounds and reference count on
     * every getByte), and no array per entry.
     */
    private static final class Cursor {
        /** Larger metadata than this (unusual: many properties) gets an array of its own. */
        private static final int KEPT_BYTES = 1 << 16;
        private byte[] kept = new byte[256];
        private byte[] bytes;
        private int at;
        private int end;

        Cursor over(ByteBuf entry, int index, int size) {
            if (size > kept.length && size <= KEPT_BYTES) {
                kept = new byte[size];
            }
            bytes = size <= kept.length ? kept : new byte[size];
            entry.getBytes(index, bytes, 0, size);
            at = 0;
            end = size;
            return this;
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
                return unkeyed(batchSize);
            }
            return new EntryFields(batchSize, new String(bytes, keyAt, keyLength, StandardCharsets.UTF_8));
        }

        private long varint() {
            long value = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (at >= end) {
                    throw new IndexOutOfBoundsException("varint past the metadata's end");
                }
                byte b = bytes[at++];
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
    }
}
