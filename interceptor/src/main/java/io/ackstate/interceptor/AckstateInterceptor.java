package io.ackstate.interceptor;

import io.netty.buffer.ByteBuf;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.Producer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.TopicEventsListener;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;
import org.apache.pulsar.common.api.proto.CommandSubscribe;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.protocol.Commands;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes what the broker does to subscriptions as ackstate's contract events.
 *
 * <p>Hook to event: {@code consumerCreated} SUBSCRIBE; {@code consumerClosed} and topic unload or
 * delete CLOSE_CONSUMER; {@code onMessagePublish} SEND; {@code messageProduced} PUBLISH;
 * {@code messageDispatched} DISPATCH; {@code messageAcked} ACK (after the broker applied it); an
 * inbound {@code CommandRedeliverUnacknowledgedMessages} REDELIVER. A client-side negative ack
 * or ack timeout is not visible to a broker: its consequence, the client's redeliver request,
 * is what arrives. No hook may throw or block: each builds its line and offers it to the
 * bounded {@link EventQueue}.
 */
public class AckstateInterceptor extends EmptyInterceptor implements TopicEventsListener {
    private static final Logger log = LoggerFactory.getLogger(AckstateInterceptor.class);

    static final String SINK_DIRECTORY = "ackstateSinkDirectory";
    static final String FILE_MAX_EVENTS = "ackstateFileMaxEvents";
    static final String FILE_MAX_MILLIS = "ackstateFileMaxMillis";
    static final String QUEUE_CAPACITY = "ackstateQueueCapacity";
    static final String SINK = "ackstateSink";
    static final String KAFKA_TOPIC = "ackstateKafkaTopic";
    /** Prefix of Kafka producer settings: {@code ackstateKafka.bootstrap.servers=host:9092}. */
    static final String KAFKA_SETTINGS = "ackstateKafka.";

    private final String run = UUID.randomUUID().toString().substring(0, 8);
    private final AtomicLong eventNo = new AtomicLong();
    private final AtomicLong hookErrors = new AtomicLong();
    /** One clock per topic partition (full Pulsar name): seq order = queue order per partition. */
    private final Map<String, PartitionLog> partitions = new ConcurrentHashMap<>();
    /** Consumer ids unique across the broker and its restarts (Pulsar's are per connection). */
    private final SeqClock consumerIds = new SeqClock();
    private final Map<Consumer, Tracked> consumers = new IdentityHashMap<>();
    /** The initial position of each subscribe command until its consumer is created. */
    private final Map<Pending, String> initialPositions = new ConcurrentHashMap<>();
    private EventQueue queue;
    private DropMetrics metrics;

    private record Pending(ServerCnx cnx, long consumerId) {}

    /**
     * A topic partition's seq clock, its pre-quoted topic fields, and the last entry a PUBLISH
     * was emitted for. Events of one partition are ordered under this object's lock.
     *
     * <p>{@code messageProduced} runs on the producer's I/O thread after the entry is persisted,
     * and the dispatcher can read the new entry and send it (DISPATCH) before that. A DISPATCH of
     * an entry with no PUBLISH yet emits the PUBLISH first, from the entry's own metadata; a
     * later {@code messageProduced} at or below the last emitted position is then skipped.
     */
    private static final class PartitionLog {
        final SeqClock clock = new SeqClock();
        final String topicFields;
        final boolean persistent;
        long lastLedger = -1;
        long lastEntry = -1;
        /** The last entry the ledger held when this broker run first saw the partition: a DISPATCH
         *  at or below it (a redelivery after a restart or a move) needs no PUBLISH. */
        final long floorLedger;
        final long floorEntry;

        PartitionLog(Topic topic) {
            TopicName name = TopicName.get(topic.getName());
            topicFields = EventJson.topicFields(name.getPartitionedTopicName(), name.getPartitionIndex());
            persistent = topic instanceof PersistentTopic;
            if (topic instanceof PersistentTopic p) {
                Position lac = p.getManagedLedger().getLastConfirmedEntry();
                floorLedger = lac.getLedgerId();
                floorEntry = lac.getEntryId();
            } else {
                floorLedger = Long.MIN_VALUE;
                floorEntry = -1;
            }
        }

        boolean aboveFloor(long ledger, long entry) {
            return ledger > floorLedger || (ledger == floorLedger && entry > floorEntry);
        }

        /** True if (ledger, entry) is above the last PUBLISH, which it then becomes. */
        boolean advance(long ledger, long entry) {
            if (ledger > lastLedger || (ledger == lastLedger && entry > lastEntry)) {
                lastLedger = ledger;
                lastEntry = entry;
                return true;
            }
            return false;
        }
    }

    /** What a SUBSCRIBE said of a consumer, so later events name the same consumer; its
     *  {@code subscription} and {@code consumer_id} fields are quoted once. */
    private record Tracked(long id, String fullTopic, PartitionLog partition, String consumerFields) {}

    @Override
    public void initialize(PulsarService pulsar) throws Exception {
        // getBrokerId() is not available yet here (it throws and aborts the broker's start)
        Properties props = pulsar.getConfiguration().getProperties();
        int capacity = Integer.parseInt(props.getProperty(QUEUE_CAPACITY, "100000"));
        String sink = props.getProperty(SINK, "file").strip();
        switch (sink) {
            case "file" -> {
                String dir = props.getProperty(SINK_DIRECTORY);
                if (dir == null || dir.isBlank()) {
                    throw new IllegalArgumentException(SINK_DIRECTORY + " must name the directory for ackstate's event files");
                }
                int maxEvents = Integer.parseInt(props.getProperty(FILE_MAX_EVENTS, "10000"));
                long maxMillis = Long.parseLong(props.getProperty(FILE_MAX_MILLIS, "1000"));
                queue = new EventQueue(capacity, new FileSink(Path.of(dir), run, System.currentTimeMillis(),
                        maxEvents, maxMillis));
                log.info("ackstate interceptor: run {} writing to {} (files of {} events or {} ms, queue {})", run,
                        dir, maxEvents, maxMillis, capacity);
            }
            case "kafka" -> {
                String topic = props.getProperty(KAFKA_TOPIC, "ackstate-events").strip();
                Properties settings = kafkaSettings(props);
                if (settings.getProperty("bootstrap.servers", "").isBlank()) {
                    throw new IllegalArgumentException(KAFKA_SETTINGS + "bootstrap.servers must name the Kafka"
                            + " servers for " + SINK + "=kafka");
                }
                queue = new EventQueue(capacity, new KafkaSink(topic, settings));
                log.info("ackstate interceptor: run {} writing to Kafka topic {} at {} (queue {})", run, topic,
                        settings.getProperty("bootstrap.servers"), capacity);
            }
            default -> throw new IllegalArgumentException(SINK + " must be file or kafka, not " + sink);
        }
        metrics = new DropMetrics(queue);
        metrics.registerDefault();
        pulsar.getBrokerService().addTopicEventListener(this);
    }

    /** The broker's {@code ackstateKafka.<name>} settings as Kafka producer settings {@code <name>}. */
    static Properties kafkaSettings(Properties brokerConf) {
        Properties settings = new Properties();
        for (String name : brokerConf.stringPropertyNames()) {
            if (name.startsWith(KAFKA_SETTINGS)) {
                settings.setProperty(name.substring(KAFKA_SETTINGS.length()), brokerConf.getProperty(name).strip());
            }
        }
        return settings;
    }

    // ---- emitting ------------------------------------------------------------------------
    /** The partition's log, made (with its floor) the first time any hook sees the topic. */
    private PartitionLog log(Topic topic) {
        PartitionLog partition = partitions.get(topic.getName());
        return partition != null ? partition : partitions.computeIfAbsent(topic.getName(), t -> new PartitionLog(topic));
    }

    private EventJson event(String type, PartitionLog partition) {
        return new EventJson(type, partition.topicFields, System.currentTimeMillis());
    }

    private void emit(PartitionLog partition, EventJson event) {
        synchronized (partition) {
            offer(partition, event);
        }
    }

    /** Under the partition's lock: the next seq, and the line on the queue in seq order. */
    private void offer(PartitionLog partition, EventJson event) {
        queue.offer(event.line(run, eventNo.incrementAndGet(), partition.clock.next()));
    }

    private void failed(String hook, Throwable t) {
        long n = hookErrors.incrementAndGet();
        if (n <= 10 || n % 10_000 == 0) {
            log.error("ackstate interceptor: {} failed ({} so far); the event is lost", hook, n, t);
        }
    }

    // ---- consumers -----------------------------------------------------------------------
    /** SUBSCRIBE once per consumer, from whichever hook sees it first. */
    private Tracked announce(ServerCnx cnx, Consumer consumer) {
        Tracked tracked;
        synchronized (consumers) {
            tracked = consumers.get(consumer);
            if (tracked != null) {
                return tracked;
            }
            Subscription sub = consumer.getSubscription();
            long id = consumerIds.next();
            StringBuilder fields = new StringBuilder("\"subscription\":");
            EventJson.quote(fields, sub.getName());
            fields.append(",\"consumer_id\":").append(id);
            // the partition's log (and floor) exists before any event of the consumer is emitted
            tracked = new Tracked(id, sub.getTopicName(), log(sub.getTopic()), fields.toString());
            consumers.put(consumer, tracked);
        }
        String initial = initialPositions.remove(new Pending(cnx, consumer.consumerId()));
        emit(tracked.partition, event("SUBSCRIBE", tracked.partition)
                .fields(tracked.consumerFields)
                .str("consumer_name", consumer.consumerName())
                .str("sub_type", consumer.subType().name())
                .num("priority_level", consumer.getPriorityLevel())
                .str("initial_position", initial == null ? "Latest" : initial));
        return tracked;
    }

    private void closed(Consumer consumer) {
        Tracked tracked;
        synchronized (consumers) {
            tracked = consumers.remove(consumer);
        }
        if (tracked != null) {
            emit(tracked.partition, event("CLOSE_CONSUMER", tracked.partition).fields(tracked.consumerFields));
        }
    }

    @Override
    public void consumerCreated(ServerCnx cnx, Consumer consumer, Map<String, String> metadata) {
        try {
            announce(cnx, consumer);
        } catch (Throwable t) {
            failed("consumerCreated", t);
        }
    }

    @Override
    public void consumerClosed(ServerCnx cnx, Consumer consumer, Map<String, String> metadata) {
        try {
            closed(consumer);
        } catch (Throwable t) {
            failed("consumerClosed", t);
        }
    }

    /** A broker-initiated disconnect passes no hook: a topic unloading or deleted closes them all. */
    @Override
    public void handleEvent(String topic, TopicEvent event, EventStage stage, Throwable t) {
        if ((event != TopicEvent.UNLOAD && event != TopicEvent.DELETE) || stage != EventStage.BEFORE) {
            return;
        }
        try {
            List<Consumer> gone = new ArrayList<>();
            synchronized (consumers) {
                consumers.forEach((consumer, tracked) -> {
                    if (tracked.fullTopic.equals(topic)) {
                        gone.add(consumer);
                    }
                });
            }
            gone.forEach(this::closed);
        } catch (Throwable e) {
            failed("topic " + event, e);
        }
    }

    // ---- commands seen before the broker handles them --------------------------------------
    @Override
    public void onPulsarCommand(BaseCommand command, ServerCnx cnx) {
        try {
            if (command.getType() == BaseCommand.Type.SUBSCRIBE) {
                CommandSubscribe subscribe = command.getSubscribe();
                if (subscribe.hasInitialPosition()) {
                    initialPositions.put(new Pending(cnx, subscribe.getConsumerId()),
                            subscribe.getInitialPosition().name());
                }
            } else if (command.getType() == BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES) {
                redeliver(cnx, command.getRedeliverUnacknowledgedMessages());
            }
        } catch (Throwable t) {
            failed("onPulsarCommand", t);
        }
    }

    private void redeliver(ServerCnx cnx, CommandRedeliverUnacknowledgedMessages redeliver) {
        CompletableFuture<Consumer> future = cnx.getConsumers().get(redeliver.getConsumerId());
        if (future == null || !future.isDone() || future.isCompletedExceptionally()) {
            return; // the broker ignores it too (ServerCnx.handleRedeliverUnacknowledged)
        }
        Consumer consumer = future.join();
        Tracked tracked = announce(cnx, consumer);
        emit(tracked.partition, event("REDELIVER", tracked.partition).fields(tracked.consumerFields)
                .raw("message_ids", messageIds(redeliver.getMessageIdsCount(), redeliver::getMessageIdAt)));
    }

    /** The contract's {@code message_ids} array of a command's ids. */
    private static String messageIds(int count, IntFunction<MessageIdData> at) {
        StringBuilder ids = new StringBuilder("[");
        for (int i = 0; i < count; i++) {
            appendId(ids, i, at.apply(i));
        }
        return ids.append(']').toString();
    }

    private static void appendId(StringBuilder out, int i, MessageIdData id) {
        if (i > 0) {
            out.append(',');
        }
        out.append("{\"ledger_id\":").append(id.getLedgerId()).append(",\"entry_id\":").append(id.getEntryId());
        if (id.hasBatchIndex()) {
            out.append(",\"batch_index\":").append(id.getBatchIndex());
        }
        if (id.hasBatchSize()) {
            out.append(",\"batch_size\":").append(id.getBatchSize());
        }
        if (id.getAckSetsCount() > 0) {
            out.append(",\"ack_set\":[");
            for (int w = 0; w < id.getAckSetsCount(); w++) {
                out.append(w > 0 ? "," : "").append(id.getAckSetAt(w));
            }
            out.append(']');
        }
        out.append('}');
    }

    // ---- producers -------------------------------------------------------------------------
    @Override
    public void onMessagePublish(Producer producer, ByteBuf headersAndPayload, Topic.PublishContext context) {
        try {
            PartitionLog partition = log(producer.getTopic());
            emit(partition, event("SEND", partition)
                    .str("producer_name", producer.getProducerName())
                    .num("sequence_id", context.getSequenceId())
                    .num("highest_sequence_id", Math.max(context.getHighestSequenceId(), context.getSequenceId()))
                    .num("num_messages", Math.max(1, context.getNumberOfMessages())));
        } catch (Throwable t) {
            failed("onMessagePublish", t);
        }
    }

    @Override
    public void messageProduced(ServerCnx cnx, Producer producer, long startTimeNs, long ledgerId, long entryId,
                                Topic.PublishContext context) {
        if (ledgerId < 0) {
            return; // a duplicate or a dropped send: its SEND already told ackstate
        }
        try {
            PartitionLog partition = log(producer.getTopic());
            synchronized (partition) {
                if (partition.advance(ledgerId, entryId)) { // else a DISPATCH already emitted it
                    offer(partition, event("PUBLISH", partition)
                            .num("ledger_id", ledgerId).num("entry_id", entryId)
                            .num("batch_size", Math.max(1, context.getNumberOfMessages()))
                            .str("producer_name", producer.getProducerName())
                            .num("sequence_id", context.getSequenceId())
                            .num("highest_sequence_id",
                                    Math.max(context.getHighestSequenceId(), context.getSequenceId())));
                }
            }
        } catch (Throwable t) {
            failed("messageProduced", t);
        }
    }

    // ---- dispatch and acks -------------------------------------------------------------------
    @Override
    public void messageDispatched(ServerCnx cnx, Consumer consumer, long ledgerId, long entryId, ByteBuf payload) {
        try {
            Tracked tracked = announce(cnx, consumer);
            PartitionLog partition = tracked.partition;
            // a thread-local instance, read on this thread only
            MessageMetadata meta = Commands.peekMessageMetadata(payload, null, consumer.consumerId());
            int batchSize = meta == null || !meta.hasNumMessagesInBatch() ? 1 : meta.getNumMessagesInBatch();
            synchronized (partition) {
                if (meta != null && partition.persistent && partition.aboveFloor(ledgerId, entryId)
                        && partition.advance(ledgerId, entryId)) {
                    long sequenceId = meta.getSequenceId();
                    offer(partition, event("PUBLISH", partition)
                            .num("ledger_id", ledgerId).num("entry_id", entryId).num("batch_size", batchSize)
                            .str("producer_name", meta.hasProducerName() ? meta.getProducerName() : null)
                            .num("sequence_id", sequenceId)
                            .num("highest_sequence_id", Math.max(sequenceId,
                                    meta.hasHighestSequenceId() ? meta.getHighestSequenceId() : sequenceId)));
                }
                EventJson e = event("DISPATCH", partition).fields(tracked.consumerFields)
                        .num("ledger_id", ledgerId).num("entry_id", entryId);
                if (meta != null) {
                    e.num("batch_size", batchSize);
                    if (meta.hasPartitionKey()) {
                        e.str("key", meta.getPartitionKey());
                    }
                }
                offer(partition, e);
            }
        } catch (Throwable t) {
            failed("messageDispatched", t);
        }
    }

    @Override
    public void messageAcked(ServerCnx cnx, Consumer consumer, CommandAck ack) {
        try {
            Tracked tracked = announce(cnx, consumer);
            emit(tracked.partition, event("ACK", tracked.partition).fields(tracked.consumerFields)
                    .str("ack_type", ack.getAckType() == CommandAck.AckType.Cumulative ? "Cumulative" : "Individual")
                    .raw("message_ids", messageIds(ack.getMessageIdsCount(), ack::getMessageIdAt)));
        } catch (Throwable t) {
            failed("messageAcked", t);
        }
    }

    // onConnectionClosed stays a no-op (EmptyInterceptor): ServerCnx.channelInactive calls
    // consumerClosed for each of the connection's consumers

    @Override
    public void close() {
        try {
            if (metrics != null) {
                metrics.unregisterDefault();
            }
            if (queue != null) {
                queue.close();
            }
        } catch (Exception e) {
            log.error("ackstate interceptor: closing the sink failed", e);
        }
    }

    long dropped() {
        return queue == null ? 0 : queue.dropped();
    }
}
