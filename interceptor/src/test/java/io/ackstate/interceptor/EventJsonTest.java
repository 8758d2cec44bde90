package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.junit.jupiter.api.Test;

class EventJsonTest {
    @Test
    void writesContractFieldsAndLeavesOutAbsentOnes() {
        String line = new EventJson().start("SUBSCRIBE", EventJson.topicFields("persistent://t/ns/x", 2), 77L)
                .str("subscription", "s").num("consumer_id", 5).str("consumer_name", null).line("r", 1, 9);
        assertEquals("{\"type\":\"SUBSCRIBE\",\"topic\":\"persistent://t/ns/x\",\"partition\":2,\"event_time\":77,"
                + "\"subscription\":\"s\",\"consumer_id\":5,\"event_id\":\"r-1\",\"seq\":9}", line);
    }

    @Test
    void reusedFieldsAreAppendedAsTheyAre() {
        String line = new EventJson().start("ACK", EventJson.topicFields("t", -1), 1L)
                .fields("\"subscription\":\"s\",\"consumer_id\":3").ids("message_ids", 0, i -> null).line("r", 2, 10);
        assertEquals("{\"type\":\"ACK\",\"topic\":\"t\",\"partition\":-1,\"event_time\":1,\"subscription\":\"s\","
                + "\"consumer_id\":3,\"message_ids\":[],\"event_id\":\"r-2\",\"seq\":10}", line);
    }

    @Test
    void escapesWhatJsonCannotHoldRaw() {
        StringBuilder out = new StringBuilder();
        EventJson.quote(out, "a\"b\\c\nd\u0001");
        assertEquals("\"a\\\"b\\\\c\\nd\\u0001\"", out.toString());
    }

    @Test
    void aReusedBufferStartsEachLineAfresh() {
        EventJson json = new EventJson();
        String first = json.start("PUBLISH", EventJson.topicFields("t", 0), 1L).num("entry_id", 5).line("r", 1, 1);
        String second = json.start("DISPATCH", EventJson.topicFields("t", 0), 1L).num("entry_id", 4).line("r", 2, 2);
        assertEquals("{\"type\":\"PUBLISH\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"entry_id\":5,"
                + "\"event_id\":\"r-1\",\"seq\":1}", first);
        assertEquals("{\"type\":\"DISPATCH\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"entry_id\":4,"
                + "\"event_id\":\"r-2\",\"seq\":2}", second);
    }

    @Test
    void messageIdsCarryOnlyTheFieldsTheyHave() {
        CommandAck ack = new CommandAck();
        ack.addMessageId().setLedgerId(3).setEntryId(4);
        MessageIdData batched = ack.addMessageId().setLedgerId(3).setEntryId(5).setBatchIndex(1).setBatchSize(4);
        batched.addAckSet(-2L);
        batched.addAckSet(7L);
        String line = new EventJson().start("ACK", EventJson.topicFields("t", 0), 1L)
                .ids("message_ids", ack.getMessageIdsCount(), ack::getMessageIdAt).line("r", 1, 1);
        assertEquals("{\"type\":\"ACK\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"message_ids\":["
                + "{\"ledger_id\":3,\"entry_id\":4},"
                + "{\"ledger_id\":3,\"entry_id\":5,\"batch_index\":1,\"batch_size\":4,\"ack_set\":[-2,7]}],"
                + "\"event_id\":\"r-1\",\"seq\":1}", line);
    }
}
