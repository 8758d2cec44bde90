package io.ackstate.interceptor;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One Kafka topic: each event line is one record, keyed by its topic partition.
 *
 * <p>The key is the Pulsar name of the event's topic partition ({@code <topic>-partition-<n>},
 * or the topic itself when it is not partitioned), so every event of a partition lands in one
 * Kafka partition, in the order the queue holds them, which is seq order. The producer is
 * idempotent with {@code acks=all}: a retried send neither duplicates nor reorders a record.
 *
 * <p>It runs on the queue's writer thread only, so the broker never waits for Kafka: while Kafka
 * is slow or away, {@code send} blocks the writer (at most {@code max.block.ms}) and the bounded
 * queue fills and drops, as with a slow disk. A record Kafka refuses is counted in
 * {@link #lost()} and logged (at most every 10 s), and it is lost to ackstate.
 */
final class KafkaSink implements EventSink {
    private static final Logger log = LoggerFactory.getLogger(KafkaSink.class);
    private static final long WARN_EVERY_MS = 10_000;
    private static final String TOPIC_FIELD = "\"topic\":\"";
    /** The topic value's closing quote and the next field: a quote inside the value is escaped. */
    private static final String PARTITION_FIELD = "\",\"partition\":";

    private final Producer<byte[], byte[]> producer;
    private final String topic;
    private final AtomicLong lost = new AtomicLong();
    private final AtomicLong lastWarn = new AtomicLong();
    private final Callback onSent = (metadata, error) -> {
        if (error != null) {
            lose(1, error);
        }
    };

    /** {@code settings} are Kafka producer settings; they override this sink's defaults. */
    KafkaSink(String topic, Properties settings) {
        this(topic, open(settings));
    }

    KafkaSink(String topic, Producer<byte[], byte[]> producer) {
        this.topic = topic;
        this.producer = producer;
    }

    private static Producer<byte[], byte[]> open(Properties settings) {
        Properties props = new Properties();
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "ackstate-interceptor");
        props.putAll(settings);
        // Kafka loads the classes its settings name through the thread's context class loader;
        // a broker thread's is the broker's, which does not see the kafka-clients of this NAR.
        Thread thread = Thread.currentThread();
        ClassLoader previous = thread.getContextClassLoader();
        thread.setContextClassLoader(KafkaSink.class.getClassLoader());
        try {
            return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        } finally {
            thread.setContextClassLoader(previous);
        }
    }

    /** The Kafka key of an event line: the Pulsar name of its topic partition, UTF-8. */
    static byte[] key(String line) {
        int start = line.indexOf(TOPIC_FIELD) + TOPIC_FIELD.length();
        int end = line.indexOf(PARTITION_FIELD, start);
        int digits = end + PARTITION_FIELD.length();
        int stop = line.indexOf(',', digits);
        String name = line.substring(start, end);
        if (line.charAt(digits) != '-') { // a partition index; -1: not partitioned
            name = name + "-partition-" + line.substring(digits, stop);
        }
        return name.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public void write(List<String> lines) {
        for (String line : lines) {
            try {
                producer.send(new ProducerRecord<>(topic, key(line), line.getBytes(StandardCharsets.UTF_8)), onSent);
            } catch (KafkaException e) { // not sent: metadata or buffer space not there in max.block.ms
                lose(1, e);
            }
        }
    }

    @Override
    public void tick(long nowMillis) {
        // the producer sends on its own after linger.ms
    }

    @Override
    public long lost() {
        return lost.get();
    }

    private void lose(int events, Exception error) {
        long total = lost.addAndGet(events);
        long now = System.currentTimeMillis();
        long previous = lastWarn.get();
        if (now - previous >= WARN_EVERY_MS && lastWarn.compareAndSet(previous, now)) {
            log.error("ackstate interceptor: Kafka refused event(s) for topic {}: {} lost so far;"
                    + " ackstate's state is incomplete from the first loss on", topic, total, error);
        }
    }

    /** Sends what is buffered (waiting up to 30 s for Kafka) and closes the producer. */
    @Override
    public void close() {
        producer.close(Duration.ofSeconds(30));
    }
}
