package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.apache.pulsar.common.naming.TopicName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The lines built as bytes are byte for byte those of the String path they replaced
 * ({@link OldEventJson}, then {@code String.getBytes(UTF_8)}): events of every type with random
 * fields, names full of what JSON escapes and what UTF-8 encodes in two, three and four bytes
 * (and surrogates without their other half), and numbers from {@code Long.MIN_VALUE} to
 * {@code Long.MAX_VALUE}; through the file and the Kafka sink too.
 */
class EventBytesTest {
    private static final String[] PIECES = {"", "a", "orders", "persistent://public/default/t", "\"", "\\", "\n",
        "\r\t", "\u0000\u0001\u001f", "\b\f\u000b", "\u007f", "gr\u00fc\u00dfe", "\u00ff", "\u0100\u07ff", "\u0800",
        "\u6d88\u8d39", "\ufffd\uffff", "\ud83d\ude00", "\ud83d", "\ude00", "\ude00\ud83d", "a\"b\\c\nd\u0001",
        "\",\"partition\":9", "\u2028", "-partition-3", "{}[],:"};
    private static final long[] NUMBERS = {0, 1, -1, 9, 10, -10, 99, 100, 999, 1000, 1_000_000_007L,
        Integer.MIN_VALUE, Integer.MAX_VALUE, Long.MIN_VALUE, Long.MIN_VALUE + 1, Long.MAX_VALUE, Long.MAX_VALUE - 1,
        -999_999_999_999_999_999L, 1_000_000_000_000_000_000L};

    private final Random random = new Random(20240611);
    /** What each consumer and partition was made from, for the old path. */
    private final Map<TrackedConsumer, String> subscriptions = new IdentityHashMap<>();
    private final Map<PartitionLog, String> topics = new IdentityHashMap<>();

    private String text() {
        StringBuilder text = new StringBuilder();
        for (int n = random.nextInt(5); n > 0; n--) {
            if (random.nextInt(4) == 0) {
                text.append((char) random.nextInt(0x10000)); // any char, surrogates included
            } else {
                text.append(PIECES[random.nextInt(PIECES.length)]);
            }
        }
        return text.toString();
    }

    private String textOrNull() {
        return random.nextInt(5) == 0 ? null : text();
    }

    private long number() {
        return random.nextBoolean() ? NUMBERS[random.nextInt(NUMBERS.length)] : random.nextLong() >> random.nextInt(64);
    }

    private int smallInt() {
        return (int) (random.nextBoolean() ? number() : random.nextInt(2000) - 10);
    }

    private PartitionLog partition() {
        // a local name is not blank and has no slash (else TopicName reads a namespace into it)
        String base = "persistent://t/ns/x" + text().replace('/', '_');
        String name = random.nextBoolean() ? base : TopicName.get(base).getPartition(random.nextInt(20)).toString();
        Topic topic = mock(Topic.class);
        when(topic.getName()).thenReturn(name);
        PartitionLog partition = new PartitionLog(topic);
        topics.put(partition, name);
        return partition;
    }

    private TrackedConsumer consumer(PartitionLog partition) {
        String subscription = text();
        long id = number();
        TrackedConsumer consumer = new TrackedConsumer(null, id, topics.get(partition), partition,
                EventJson.consumerFields(subscription, id), null);
        subscriptions.put(consumer, subscription);
        return consumer;
    }

    private void messageIds(int count, java.util.function.Supplier<MessageIdData> add) {
        for (int i = 0; i < count; i++) {
            MessageIdData id = add.get().setLedgerId(number()).setEntryId(number());
            if (random.nextBoolean()) {
                id.setBatchIndex(smallInt());
            }
            if (random.nextBoolean()) {
                id.setBatchSize(smallInt());
            }
            for (int w = random.nextInt(4); w > 0; w--) {
                id.addAckSet(number());
            }
        }
    }

    private Event event(List<PartitionLog> partitions, List<TrackedConsumer> consumers) {
        int which = random.nextInt(consumers.size());
        TrackedConsumer consumer = consumers.get(which);
        PartitionLog partition = random.nextBoolean() ? consumer.partition() : partitions.get(which);
        long time = number();
        long seq = number();
        return switch (random.nextInt(7)) {
            case 0 -> new Event.Subscribe(partition, time, seq, consumer, textOrNull(), text(), smallInt(), text());
            case 1 -> new Event.CloseConsumer(partition, time, seq, consumer);
            case 2 -> new Event.Send(partition, time, seq, textOrNull(), number(), number(), number());
            case 3 -> new Event.Publish(partition, time, seq, number(), number(), number(), textOrNull(), number(),
                    number());
            case 4 -> new Event.Dispatch(partition, time, seq, consumer, number(), number(),
                    random.nextBoolean() ? -1 : smallInt(), textOrNull());
            case 5 -> {
                CommandAck ack = new CommandAck().setConsumerId(1)
                        .setAckType(random.nextBoolean() ? CommandAck.AckType.Cumulative : CommandAck.AckType.Individual);
                messageIds(random.nextInt(4), ack::addMessageId);
                yield new Event.Ack(partition, time, seq, consumer, ack);
            }
            default -> {
                CommandRedeliverUnacknowledgedMessages command = new CommandRedeliverUnacknowledgedMessages()
                        .setConsumerId(1);
                messageIds(random.nextInt(4), command::addMessageId);
                yield new Event.Redeliver(partition, time, seq, consumer, command);
            }
        };
    }

    private List<Event> events(int count) {
        List<PartitionLog> partitions = new ArrayList<>();
        List<TrackedConsumer> consumers = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            partitions.add(partition());
            consumers.add(consumer(partitions.get(i)));
        }
        List<Event> events = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            events.add(event(partitions, consumers));
        }
        return events;
    }

    // ---- the String path, as it was ------------------------------------------------------------
    private String oldConsumerFields(TrackedConsumer consumer) {
        StringBuilder fields = new StringBuilder("\"subscription\":");
        OldEventJson.quote(fields, subscriptions.get(consumer));
        return fields.append(",\"consumer_id\":").append(consumer.id()).toString();
    }

    /** Event.fields and EventLines.apply before the byte path. */
    private String oldLine(OldEventJson out, Event event, String run, long n) {
        TopicName name = TopicName.get(topics.get(event.partition()));
        out.start(event.type().name(), OldEventJson.topicFields(name.getPartitionedTopicName(), name.getPartitionIndex()),
                event.time());
        if (event instanceof Event.Subscribe e) {
            out.fields(oldConsumerFields(e.consumer())).str("consumer_name", e.consumerName())
                    .str("sub_type", e.subType()).num("priority_level", e.priorityLevel())
                    .str("initial_position", e.initialPosition());
        } else if (event instanceof Event.CloseConsumer e) {
            out.fields(oldConsumerFields(e.consumer()));
        } else if (event instanceof Event.Send e) {
            out.str("producer_name", e.producerName()).num("sequence_id", e.sequenceId())
                    .num("highest_sequence_id", e.highestSequenceId()).num("num_messages", e.numMessages());
        } else if (event instanceof Event.Publish e) {
            out.num("ledger_id", e.ledgerId()).num("entry_id", e.entryId()).num("batch_size", e.batchSize())
                    .str("producer_name", e.producerName()).num("sequence_id", e.sequenceId())
                    .num("highest_sequence_id", e.highestSequenceId());
        } else if (event instanceof Event.Dispatch e) {
            out.fields(oldConsumerFields(e.consumer())).num("ledger_id", e.ledgerId()).num("entry_id", e.entryId());
            if (e.batchSize() >= 0) {
                out.num("batch_size", e.batchSize()).str("key", e.key());
            }
        } else if (event instanceof Event.Ack e) {
            out.fields(oldConsumerFields(e.consumer()))
                    .str("ack_type", e.ack().getAckType() == CommandAck.AckType.Cumulative ? "Cumulative" : "Individual")
                    .ids("message_ids", e.ack().getMessageIdsCount(), e.ack()::getMessageIdAt);
        } else if (event instanceof Event.Redeliver e) {
            out.fields(oldConsumerFields(e.consumer()))
                    .ids("message_ids", e.command().getMessageIdsCount(), e.command()::getMessageIdAt);
        }
        return out.line(run, n, event.seq());
    }

    /** KafkaSink.key before the byte path. */
    private static byte[] oldKey(String line) {
        String topicField = "\"topic\":\"";
        String partitionField = "\",\"partition\":";
        int start = line.indexOf(topicField) + topicField.length();
        int end = line.indexOf(partitionField, start);
        int digits = end + partitionField.length();
        int stop = line.indexOf(',', digits);
        String name = line.substring(start, end);
        if (line.charAt(digits) != '-') {
            name = name + "-partition-" + line.substring(digits, stop);
        }
        return name.getBytes(StandardCharsets.UTF_8);
    }

    /** Bytes as a String of one char per byte, so that a failure shows where they differ. */
    private static String latin1(byte[] bytes, int from, int to) {
        return new String(bytes, from, to - from, StandardCharsets.ISO_8859_1);
    }

    private static String latin1(byte[] bytes) {
        return latin1(bytes, 0, bytes.length);
    }

    private List<String> oldLines(List<Event> events, String run) {
        OldEventJson old = new OldEventJson();
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < events.size(); i++) {
            lines.add(oldLine(old, events.get(i), run, i + 1));
        }
        return lines;
    }

    /** The bytes the old sinks wrote of a line. */
    private static byte[] utf8(String line) {
        return line.getBytes(StandardCharsets.UTF_8);
    }

    // ---- the comparisons -------------------------------------------------------------------------
    @Test
    void everyLineIsByteForByteTheOldOne() {
        List<Event> events = events(5_000);
        for (String run : new String[] {"3f2a9c01", "r\u00e9\ud83d\ude00\"-"}) {
            List<String> expected = oldLines(events, run);
            EventLines lines = new EventLines(run);
            EventJson batch = new EventJson(); // one batch of them all: it grows past its first size
            ByteArrayOutputStream all = new ByteArrayOutputStream();
            for (int i = 0; i < events.size(); i++) {
                lines.accept(events.get(i), batch);
                assertEquals(i + 1, batch.count());
                assertEquals(latin1(utf8(expected.get(i))), latin1(batch.bytes(), batch.lineStart(i), batch.lineEnd(i)),
                        "event " + i + ": " + events.get(i));
                all.writeBytes(utf8(expected.get(i)));
                all.write('\n');
            }
            assertEquals(latin1(all.toByteArray()), latin1(batch.bytes(), 0, batch.lineEnd(events.size() - 1) + 1));
        }
    }

    @Test
    void aReusedBatchWritesTheSameBytes() {
        List<Event> events = events(3_000);
        List<String> expected = oldLines(events, "run");
        EventLines lines = new EventLines("run");
        EventJson batch = new EventJson();
        for (int from = 0; from < events.size(); from += 700) { // as the writer drains: batch after batch
            batch.clear();
            for (int i = from; i < Math.min(events.size(), from + 700); i++) {
                lines.accept(events.get(i), batch);
                int line = i - from;
                assertEquals(latin1(utf8(expected.get(i))),
                        latin1(batch.bytes(), batch.lineStart(line), batch.lineEnd(line)));
            }
        }
    }

    @Test
    void theFileSinkWritesTheOldBytes(@TempDir Path dir) throws Exception {
        List<Event> events = events(2_000);
        List<String> expected = oldLines(events, "run");
        FileSink sink = new FileSink(dir, "run", 1L, 300, 60_000);
        EventLines lines = new EventLines("run");
        EventJson batch = new EventJson();
        for (int from = 0; from < events.size(); from += 450) { // batches that cross the files' ends
            batch.clear();
            for (int i = from; i < Math.min(events.size(), from + 450); i++) {
                lines.accept(events.get(i), batch);
            }
            sink.write(batch);
        }
        sink.close();
        ByteArrayOutputStream all = new ByteArrayOutputStream();
        for (String line : expected) {
            all.writeBytes(utf8(line));
            all.write('\n');
        }
        ByteArrayOutputStream written = new ByteArrayOutputStream();
        try (Stream<Path> files = Files.list(dir)) {
            List<Path> sorted = files.sorted().toList();
            assertEquals(7, sorted.size()); // 2,000 lines, 300 a file
            for (Path file : sorted) {
                written.writeBytes(Files.readAllBytes(file));
            }
        }
        assertEquals(latin1(all.toByteArray()), latin1(written.toByteArray()));
    }

    @Test
    void theKafkaSinkSendsTheOldValuesAndKeys() {
        List<Event> events = events(2_000);
        List<String> expected = oldLines(events, "run");
        MockProducer<byte[], byte[]> producer = new MockProducer<>(true, new ByteArraySerializer(),
                new ByteArraySerializer());
        KafkaSink sink = new KafkaSink("events", producer);
        EventLines lines = new EventLines("run");
        EventJson batch = new EventJson();
        for (Event event : events) {
            lines.accept(event, batch);
        }
        sink.write(batch);
        batch.clear(); // the records keep their own copies
        List<ProducerRecord<byte[], byte[]>> sent = producer.history();
        assertEquals(events.size(), sent.size());
        for (int i = 0; i < events.size(); i++) {
            String line = expected.get(i);
            assertEquals(latin1(utf8(line)), latin1(sent.get(i).value()));
            assertEquals(latin1(oldKey(line)), latin1(sent.get(i).key()), line);
        }
        sink.close();
    }
}
