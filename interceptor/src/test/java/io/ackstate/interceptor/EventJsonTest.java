package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class EventJsonTest {
    @Test
    void writesContractFieldsAndLeavesOutAbsentOnes() {
        String line = new EventJson("SUBSCRIBE", EventJson.topicFields("persistent://t/ns/x", 2), 77L)
                .str("subscription", "s").num("consumer_id", 5).str("consumer_name", null).line("r", 1, 9);
        assertEquals("{\"type\":\"SUBSCRIBE\",\"topic\":\"persistent://t/ns/x\",\"partition\":2,\"event_time\":77,"
                + "\"subscription\":\"s\",\"consumer_id\":5,\"event_id\":\"r-1\",\"seq\":9}", line);
    }

    @Test
    void reusedFieldsAreAppendedAsTheyAre() {
        String line = new EventJson("ACK", EventJson.topicFields("t", -1), 1L)
                .fields("\"subscription\":\"s\",\"consumer_id\":3").raw("message_ids", "[]").line("r", 2, 10);
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
    void aLineBuiltInsideAnotherOnTheSameThreadLeavesBothWhole() {
        EventJson outer = new EventJson("DISPATCH", EventJson.topicFields("t", 0), 1L).num("entry_id", 4);
        String inner = new EventJson("PUBLISH", EventJson.topicFields("t", 0), 1L).num("entry_id", 5).line("r", 1, 1);
        String line = outer.num("batch_size", 1).line("r", 2, 2);
        assertEquals("{\"type\":\"PUBLISH\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"entry_id\":5,"
                + "\"event_id\":\"r-1\",\"seq\":1}", inner);
        assertEquals("{\"type\":\"DISPATCH\",\"topic\":\"t\",\"partition\":0,\"event_time\":1,\"entry_id\":4,"
                + "\"batch_size\":1,\"event_id\":\"r-2\",\"seq\":2}", line);
    }
}
