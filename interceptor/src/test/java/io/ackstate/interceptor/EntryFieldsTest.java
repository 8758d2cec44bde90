package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.nio.charset.StandardCharsets;
import org.apache.pulsar.common.api.proto.BrokerEntryMetadata;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;
import org.junit.jupiter.api.Test;

class EntryFieldsTest {
    private static MessageMetadata metadata() {
        MessageMetadata meta = new MessageMetadata().setProducerName("p").setSequenceId(7).setPublishTime(1L);
        meta.addProperty().setKey("k").setValue("v");
        return meta.setUncompressedSize(3).setEventTime(9L);
    }

    private static ByteBuf entry(Commands.ChecksumType checksum, MessageMetadata meta) {
        return Commands.serializeMetadataAndPayload(checksum, meta, Unpooled.wrappedBuffer(new byte[] {1, 2, 3}));
    }

    /** What the broker's own parse reads from the same bytes. */
    private static EntryFields broker(ByteBuf entry) {
        MessageMetadata meta = Commands.peekMessageMetadata(entry, null, 0);
        return new EntryFields(meta.hasNumMessagesInBatch() ? meta.getNumMessagesInBatch() : 1,
                meta.hasPartitionKey() ? meta.getPartitionKey() : null);
    }

    @Test
    void anEntryWithoutKeyOrBatchIsOneMessageWithoutKey() {
        ByteBuf entry = entry(Commands.ChecksumType.Crc32c, metadata());
        int reader = entry.readerIndex();
        assertEquals(new EntryFields(1, null), EntryFields.read(entry));
        assertEquals(reader, entry.readerIndex());
        assertEquals(broker(entry), EntryFields.read(entry));
    }

    @Test
    void readsTheBatchSizeAndKeyAsTheBrokerDoes() {
        for (Commands.ChecksumType checksum : Commands.ChecksumType.values()) {
            ByteBuf entry = entry(checksum, metadata().setPartitionKey("gr\u00fc\u00dfe").setNumMessagesInBatch(40)
                    .setHighestSequenceId(46).setOrderingKey(new byte[] {5}));
            assertEquals(new EntryFields(40, "gr\u00fc\u00dfe"), EntryFields.read(entry));
            assertEquals(broker(entry), EntryFields.read(entry));
        }
    }

    @Test
    void skipsBrokerEntryMetadata() {
        BrokerEntryMetadata broker = new BrokerEntryMetadata().setBrokerTimestamp(123L).setIndex(4L);
        ByteBuf entry = Unpooled.buffer();
        entry.writeShort(Commands.magicBrokerEntryMetadata);
        entry.writeInt(broker.getSerializedSize());
        broker.writeTo(entry);
        entry.writeBytes(entry(Commands.ChecksumType.Crc32c, metadata().setPartitionKey("k")));
        assertEquals(new EntryFields(1, "k"), EntryFields.read(entry));
        assertEquals(broker(entry), EntryFields.read(entry));
    }

    @Test
    void aThreadReadsEachEntryToItsOwnEndAfterALongerOne() {
        // the thread's cursor keeps its array: the long entry's bytes lie beyond the short one's end
        String key = "k".repeat(300);
        assertEquals(new EntryFields(40, key), EntryFields.read(entry(Commands.ChecksumType.None,
                metadata().setPartitionKey(key).setNumMessagesInBatch(40))));
        ByteBuf cut = entry(Commands.ChecksumType.None, metadata());
        cut.setInt(cut.readerIndex(), cut.getInt(cut.readerIndex()) - 1); // event_time's value is past the end
        assertNull(EntryFields.read(cut));
        assertEquals(new EntryFields(1, null), EntryFields.read(entry(Commands.ChecksumType.None, metadata())));
        String huge = "h".repeat(100_000); // larger than the cursor keeps: an array of its own
        assertEquals(new EntryFields(1, huge), EntryFields.read(entry(Commands.ChecksumType.Crc32c,
                metadata().setPartitionKey(huge))));
        assertEquals(new EntryFields(3, "k"), EntryFields.read(entry(Commands.ChecksumType.Crc32c,
                metadata().setPartitionKey("k").setNumMessagesInBatch(3))));
    }

    @Test
    void bytesThatAreNotMetadataReadAsUnknown() {
        assertNull(EntryFields.read(Unpooled.wrappedBuffer("not a message".getBytes(StandardCharsets.UTF_8))));
        ByteBuf cut = entry(Commands.ChecksumType.None, metadata().setPartitionKey("key"));
        assertNull(EntryFields.read(cut.slice(0, 12)));
    }
}
