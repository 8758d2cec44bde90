package io.ackstate.interceptor;

import static io.ackstate.interceptor.EventJson.eventIdPrefix;
import static io.ackstate.interceptor.EventJson.name;
import static io.ackstate.interceptor.EventJson.opening;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.junit.jupiter.api.Test;

class EventJsonTest {
    /** The last complete line. */
    private static String last(EventJson json) {
        return Lines.line(json, json.count() - 1);
    }

    @Test
    void writesContractFieldsAndLeavesOutAbsentOnes() {
        EventJson json = new EventJson();
        json.start(opening("SUBSCRIBE"), EventJson.topicFields("persistent://t/ns/x", 2), 77L)
                .str(name("subscription"), "s").num(name("consumer_id"), 5)
                .str(name("consumer_name"), null).line(eventIdPrefix("r"), 1, 9);
        assertEquals("{\"type\":\"SUBSCRIBE\",\"topic\":\"persistent://t/ns/x\",\"partition\":2,\"event_time\":77,"
                + "\"subscription\":\"s\",\"consumer_id\":5,\"event_id\":\"r-1\",\"seq\":9}", last(json));
    }

    @Test
    void reusedFieldsAreAppendedAsTheyAre() {
        EventJson json = new EventJson();
        json.start(opening("ACK"), EventJson.topicFields("t", -1), 1L).fields(EventJson.consumerFields("s", 3))
                .ids(name("message_ids"), new CommandAck()).line(eventIdPrefix("r"), 2, 10);
        assertEquals("{\"type\":\"ACK\",\"topic\":\"t\",\"partition\":-1,\"event_time\":1,\"subscription\":\"s\","
                + "\"consumer_id\":3,\"message_ids\":[],\"event_id\":\"r-2\",\"seq\":10}", last(json));
    }

    @Test
    void escapesWhatJsonCannotHoldRaw() {
        assertEquals("\"topic\":\"a\\\"b\\\\c\\nd\\u0001\\r\\t\\u0008\\u001f\u007f\",\"partition\":0",
                new String(EventJson.topicFields("a\"b\\c\nd\u0001\r\t\b\u001f\u007f", 0), StandardCharsets.UTF_8));
    }

    @Test
    void encodesUtf8AsStringGetBytesDoes() {
        String name = "gr\u00fc\u00dfe \u6d88\u8d39 \ud83d\ude00 \ud83d x \ude00 \u07ff\u0800\uffff";
        byte[] expected = ("\"subscription\":\"" + name + "\",\"consumer_id\":-9223372036854775808")
                .getBytes(StandardCharsets.UTF_8);
        assertEquals(new String(expected, StandardCharsets.ISO_8859_1),
                new String(EventJson.consumerFields(name, Long.MIN_VALUE), StandardCharsets.ISO_8859_1));
    }

    @Test
    void linesFollowOneAnotherEachWithItsNewline() {
        EventJson json = new EventJson();
        json.start(opening("PUBLISH"), EventJson.topicFields("t", 0), 1L).num(name("entry_id"), 5).line(eventIdPrefix("r"), 1, 1);
        json.start(opening("DISPATCH"), EventJson.topicFields("t", 0), 1L).num(name("entry_id"), 4).line(eventIdPrefix("r"), 2, 2);
        assertEquals(List.of("{\"type\":\"PUBLISH\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"entry_id\":5,"
                + "\"event_id\":\"r-1\",\"seq\":1}", "{\"type\":\"DISPATCH\",\"topic\":\"t\",\"partition\":0,"
                + "\"event_time\":1,\"entry_id\":4,\"event_id\":\"r-2\",\"seq\":2}"), Lines.of(json));
        assertEquals('\n', json.bytes()[json.lineEnd(0)]);
        assertEquals(json.lineEnd(0) + 1, json.lineStart(1));
        assertEquals('\n', json.bytes()[json.lineEnd(1)]);
    }

    @Test
    void aClearedBatchStartsAfreshAndAnUnfinishedLineIsDropped() {
        EventJson json = new EventJson();
        json.start(opening("PUBLISH"), EventJson.topicFields("t", 0), 1L).line(eventIdPrefix("r"), 1, 1);
        json.clear();
        json.start(opening("SEND"), EventJson.topicFields("t", 0), 2L).line(eventIdPrefix("r"), 2, 2);
        json.start(opening("ACK"), EventJson.topicFields("t", 0), 3L).str(name("half"), "of a line");
        json.dropUnfinished();
        json.start(opening("ACK"), EventJson.topicFields("t", 0), 4L).line(eventIdPrefix("r"), 3, 3);
        assertEquals(List.of(
                "{\"type\":\"SEND\",\"topic\":\"t\",\"partition\":0,\"event_time\":2,\"event_id\":\"r-2\",\"seq\":2}",
                "{\"type\":\"ACK\",\"topic\":\"t\",\"partition\":0,\"event_time\":4,\"event_id\":\"r-3\",\"seq\":3}"),
                Lines.of(json));
        assertEquals(0, json.lineStart(0));
    }

    @Test
    void numbersAreWrittenAsStringBuilderWritesThem() {
        long[] values = {0, 1, -1, 9, 10, -10, 99, 100, 1_000_000_007L, Integer.MIN_VALUE, Integer.MAX_VALUE,
            Long.MIN_VALUE, Long.MIN_VALUE + 1, Long.MAX_VALUE, Long.MAX_VALUE - 1, -999_999_999_999_999_999L};
        EventJson json = new EventJson();
        for (long value : values) {
            json.start(opening("T"), EventJson.topicFields("t", 0), value).line(eventIdPrefix("r"), value, value);
            assertEquals("{\"type\":\"T\",\"topic\":\"t\",\"partition\":0,\"event_time\":" + value + ",\"event_id\":\"r-" + value + "\",\"seq\":"
                    + value + "}", last(json));
        }
    }

    @Test
    void everyDigitCountAndItsNeighboursAreWrittenAsStringBuilderWritesThem() {
        EventJson json = new EventJson();
        byte[] name = name("n");
        for (long power = 1; power > 0 && power <= Long.MAX_VALUE / 10 * 10; power *= 10) {
            for (long value : new long[] {power - 1, power, power + 1, -power + 1, -power, -power - 1}) {
                json.start(opening("T"), EventJson.topicFields("t", 0), 0).num(name, value)
                        .line(eventIdPrefix("r"), 0, 0);
                assertEquals("{\"type\":\"T\",\"topic\":\"t\",\"partition\":0,\"event_time\":0,\"n\":" + value
                        + ",\"event_id\":\"r-0\",\"seq\":0}", last(json));
            }
            if (power > Long.MAX_VALUE / 10) {
                break;
            }
        }
        for (long value = -1000; value <= 1000; value++) {
            json.start(opening("T"), EventJson.topicFields("t", 0), value).line(eventIdPrefix("r"), 0, 0);
            assertEquals("{\"type\":\"T\",\"topic\":\"t\",\"partition\":0,\"event_time\":" + value
                    + ",\"event_id\":\"r-0\",\"seq\":0}", last(json));
        }
    }

    @Test
    void messageIdsCarryOnlyTheFieldsTheyHave() {
        CommandAck ack = new CommandAck();
        ack.addMessageId().setLedgerId(3).setEntryId(4);
        MessageIdData batched = ack.addMessageId().setLedgerId(3).setEntryId(5).setBatchIndex(1).setBatchSize(4);
        batched.addAckSet(-2L);
        batched.addAckSet(7L);
        EventJson json = new EventJson();
        json.start(opening("ACK"), EventJson.topicFields("t", 0), 1L).ids(name("message_ids"), ack).line(eventIdPrefix("r"), 1, 1);
        assertEquals("{\"type\":\"ACK\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"message_ids\":["
                + "{\"ledger_id\":3,\"entry_id\":4},"
                + "{\"ledger_id\":3,\"entry_id\":5,\"batch_index\":1,\"batch_size\":4,\"ack_set\":[-2,7]}],"
                + "\"event_id\":\"r-1\",\"seq\":1}", last(json));
        CommandRedeliverUnacknowledgedMessages redeliver = new CommandRedeliverUnacknowledgedMessages();
        redeliver.addMessageId().setLedgerId(8).setEntryId(-1);
        json.start(opening("REDELIVER"), EventJson.topicFields("t", 0), 1L).ids(name("message_ids"), redeliver).line(eventIdPrefix("r"), 2, 2);
        assertEquals("{\"type\":\"REDELIVER\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"message_ids\":["
                + "{\"ledger_id\":8,\"entry_id\":-1}],\"event_id\":\"r-2\",\"seq\":2}", last(json));
    }

    @Test
    void aLineLongerThanTheBufferGrowsIt() {
        String topic = "\u00e9\ud83d\ude00x".repeat(40_000);
        EventJson json = new EventJson();
        json.start(opening("SEND"), EventJson.topicFields(topic, 1), 1L).line(eventIdPrefix("r"), 1, 1);
        assertEquals("{\"type\":\"SEND\",\"topic\":\"" + topic + "\",\"partition\":1,\"event_time\":1,"
                + "\"event_id\":\"r-1\",\"seq\":1}", last(json));
    }
}
