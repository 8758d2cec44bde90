package io.ackstate.interceptor;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
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
    private static final byte[] TOPIC_FIELD = EventJson.ascii("\"topic\":\"");
    /** The topic value's closing quote and the next field: a quote inside the value is escaped. */
    private static final byte[] PARTITION_FIELD = EventJson.ascii("\",\"partition\":");
    private static final byte[] PARTITION_SUFFIX = EventJson.ascii("-partition-");

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

    /**
     * The Kafka key of the event line {@code line[from, to)}: the Pulsar name of its topic
     * partition, UTF-8; the topic's bytes are the line's, as escaped in it.
     */
    static byte[] key(byte[] line, int from, int to) {
        int start = indexOf(line, TOPIC_FIELD, from, to) + TOPIC_FIELD.length;
        int end = indexOf(line, PARTITION_FIELD, start, to);
        int digits = end + PARTITION_FIELD.length;
        if (line[digits] == '-') { // partition -1: not partitioned
            return Arrays.copyOfRange(line, start, end);
        }
        int stop = digits;
        while (line[stop] != ',') { // the field after it: the line goes on with event_time
            stop++;
        }
        byte[] key = new byte[end - start + PARTITION_SUFFIX.length + stop - digits];
        System.arraycopy(line, start, key, 0, end - start);
        System.arraycopy(PARTITION_SUFFIX, 0, key, end - start, PARTITION_SUFFIX.length);
        System.arraycopy(line, digits, key, end - start + PARTITION_SUFFIX.length, stop - digits);
        return key;
    }

    /** Where {@code what} first occurs in {@code bytes[from, to)}. */
    private static int indexOf(byte[] bytes, byte[] what, int from, int to) {
        for (int at = from; at <= to - what.length; at++) {
            if (Arrays.equals(bytes, at, at + what.length, what, 0, what.length)) {
                return at;
            }
        }
        throw new IllegalArgumentException("not an event line: no " + new String(what, StandardCharsets.US_ASCII));
    }

    /** Each line's record gets its own copy of the line's bytes: the producer keeps it until sent. */
    @Override
    public void write(LineBatch lines) {
        byte[] bytes = lines.bytes();
        for (int i = 0; i < lines.count(); i++) {
            int from = lines.lineStart(i);
            int to = lines.lineEnd(i);
            try {
                producer.send(new ProducerRecord<>(topic, key(bytes, from, to), Arrays.copyOfRange(bytes, from, to)),
                        onSent);
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
