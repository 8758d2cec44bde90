package io.ackstate.interceptor;

import static io.ackstate.interceptor.EventJson.eventIdPrefix;
import static io.ackstate.interceptor.EventJson.name;
import static io.ackstate.interceptor.EventJson.opening;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

class KafkaSinkTest {
    /** A batch of one ACK line per topic partition. */
    private static EventJson lines(Object... topicsAndPartitions) {
        EventJson json = new EventJson();
        for (int i = 0; i < topicsAndPartitions.length; i += 2) {
            appendLine(json, (String) topicsAndPartitions[i], (Integer) topicsAndPartitions[i + 1]);
        }
        return json;
    }

    private static void appendLine(EventJson json, String topic, int partition) {
        json.start(opening("ACK"), EventJson.topicFields(topic, partition), 7).str(name("subscription"), "s").line(eventIdPrefix("run1"), 1, 1);
    }

    private static String keyOf(String topic, int partition) {
        EventJson line = lines(topic, partition);
        return new String(KafkaSink.key(line.bytes(), line.lineStart(0), line.lineEnd(0)), StandardCharsets.UTF_8);
    }

    private static String key(ProducerRecord<byte[], byte[]> record) {
        return new String(record.key(), StandardCharsets.UTF_8);
    }

    @Test
    void theKeyIsThePulsarNameOfTheTopicPartition() {
        String topic = "persistent://public/default/orders";
        assertEquals(topic + "-partition-3", keyOf(topic, 3));
        assertEquals(topic + "-partition-12", keyOf(topic, 12));
        assertEquals(topic, keyOf(topic, -1));
    }

    @Test
    void aQuoteInATopicNameDoesNotEndTheKey() {
        String topic = "persistent://t/ns/a\",\"partition\":9";
        String key = keyOf(topic, 2);
        assertEquals("persistent://t/ns/a\\\",\\\"partition\\\":9-partition-2", key);
    }

    @Test
    void eachLineIsOneRecordOnTheTopicInQueueOrder() throws Exception {
        MockProducer<byte[], byte[]> producer = new MockProducer<>(true, new ByteArraySerializer(),
                new ByteArraySerializer());
        KafkaSink sink = new KafkaSink("events", producer);
        EventJson batch = lines("persistent://p/n/a", 0, "persistent://p/n/b", -1, "persistent://p/n/a", 0);
        List<String> lines = Lines.of(batch);
        sink.write(batch);
        batch.clear(); // reused by the writer: each record has its own copy
        appendLine(batch, "persistent://p/n/overwritten", 5);
        List<ProducerRecord<byte[], byte[]>> sent = producer.history();
        assertEquals(3, sent.size());
        for (int i = 0; i < 3; i++) {
            assertEquals("events", sent.get(i).topic());
            assertEquals(lines.get(i), new String(sent.get(i).value(), StandardCharsets.UTF_8));
        }
        assertEquals(List.of("persistent://p/n/a-partition-0", "persistent://p/n/b", "persistent://p/n/a-partition-0"),
                sent.stream().map(KafkaSinkTest::key).toList());
        assertEquals(0, sink.lost());
        sink.close();
    }

    @Test
    void aRecordKafkaRefusesIsCountedAsLostAndTheQueueCountsItAsDropped() throws Exception {
        MockProducer<byte[], byte[]> producer = new MockProducer<>(false, new ByteArraySerializer(),
                new ByteArraySerializer());
        KafkaSink sink = new KafkaSink("events", producer);
        EventQueue<String> queue = new EventQueue<>(16, (topic, out) -> appendLine(out, topic, 0), sink);
        queue.offer("persistent://p/n/a");
        queue.offer("persistent://p/n/a");
        long deadline = System.currentTimeMillis() + 5_000;
        while (producer.history().size() < 2 && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        producer.completeNext();
        producer.errorNext(new org.apache.kafka.common.errors.TimeoutException("no leader"));
        assertEquals(1, sink.lost());
        assertEquals(1, queue.dropped());
        queue.close();
    }

    @Test
    void theBrokersKafkaSettingsArePassedWithoutTheirPrefix() {
        Properties conf = new Properties();
        conf.setProperty("ackstateKafka.bootstrap.servers", " 127.0.0.1:9092 ");
        conf.setProperty("ackstateKafka.security.protocol", "SSL");
        conf.setProperty("ackstateKafkaTopic", "events");
        conf.setProperty("brokerServicePort", "6650");
        Properties settings = AckstateInterceptor.kafkaSettings(conf);
        assertEquals(2, settings.size());
        assertEquals("127.0.0.1:9092", settings.getProperty("bootstrap.servers"));
        assertEquals("SSL", settings.getProperty("security.protocol"));
    }

    @Test
    void aSinkWithoutServersIsRefusedByKafkaItself() {
        assertThrows(org.apache.kafka.common.KafkaException.class, () -> new KafkaSink("events", new Properties()));
    }
}
