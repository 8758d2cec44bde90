package io.ackstate.interceptor;

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
    private static String line(String topic, int partition) {
        return new EventJson().start("ACK", EventJson.topicFields(topic, partition), 7).str("subscription", "s")
                .line("run1", 1, 1);
    }

    private static String key(ProducerRecord<byte[], byte[]> record) {
        return new String(record.key(), StandardCharsets.UTF_8);
    }

    @Test
    void theKeyIsThePulsarNameOfTheTopicPartition() {
        String topic = "persistent://public/default/orders";
        assertEquals(topic + "-partition-3", new String(KafkaSink.key(line(topic, 3)), StandardCharsets.UTF_8));
        assertEquals(topic + "-partition-12", new String(KafkaSink.key(line(topic, 12)), StandardCharsets.UTF_8));
        assertEquals(topic, new String(KafkaSink.key(line(topic, -1)), StandardCharsets.UTF_8));
    }

    @Test
    void aQuoteInATopicNameDoesNotEndTheKey() {
        String topic = "persistent://t/ns/a\",\"partition\":9";
        String key = new String(KafkaSink.key(line(topic, 2)), StandardCharsets.UTF_8);
        assertEquals("persistent://t/ns/a\\\",\\\"partition\\\":9-partition-2", key);
    }

    @Test
    void eachLineIsOneRecordOnTheTopicInQueueOrder() throws Exception {
        MockProducer<byte[], byte[]> producer = new MockProducer<>(true, new ByteArraySerializer(),
                new ByteArraySerializer());
        KafkaSink sink = new KafkaSink("events", producer);
        List<String> lines = List.of(line("persistent://p/n/a", 0), line("persistent://p/n/b", -1),
                line("persistent://p/n/a", 0));
        sink.write(lines);
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
        EventQueue<String> queue = new EventQueue<>(16, line -> line, sink);
        queue.offer(line("persistent://p/n/a", 0));
        queue.offer(line("persistent://p/n/a", 0));
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
