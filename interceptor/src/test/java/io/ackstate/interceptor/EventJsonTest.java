package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class EventJsonTest {
    @Test
    void writesContractFieldsAndLeavesOutAbsentOnes() {
        String fields = new EventJson("SUBSCRIBE", "persistent://t/ns/x", 2, 77L)
                .str("subscription", "s").num("consumer_id", 5).str("consumer_name", null).fields();
        assertEquals("\"type\":\"SUBSCRIBE\",\"topic\":\"persistent://t/ns/x\",\"partition\":2,\"event_time\":77,"
                + "\"subscription\":\"s\",\"consumer_id\":5", fields);
    }

    @Test
    void escapesWhatJsonCannotHoldRaw() {
        StringBuilder out = new StringBuilder();
        EventJson.quote(out, "a\"b\\c\nd\u0001");
        assertEquals("\"a\\\"b\\\\c\\nd\\u0001\"", out.toString());
    }
}
