package io.ackstate.interceptor;

import io.netty.buffer.ByteBuf;
import java.lang.reflect.Field;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Queue;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.servlet.ServletRequest;
import javax.servlet.ServletResponse;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.service.BrokerService;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.Producer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.TopicEventsListener;
import org.apache.pulsar.broker.service.persistent.PersistentMessageExpiryMonitor;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;
import org.apache.pulsar.common.api.proto.CommandSubscribe;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.protocol.Commands;
import org.apache.pulsar.compaction.Compactor;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes what the broker does to subscriptions as ackstate's contract events.
 *
 * <p>Hook to event: {@code consumerCreated} SUBSCRIBE (after CLOSE_CONSUMER for the consumers of
 * its subscription the broker let go without a hook); {@code consumerClosed} and topic unload or
 * delete CLOSE_CONSUMER; {@code onMessagePublish} SEND; {@code messageProduced} PUBLISH;
 * {@code messageDispatched} DISPATCH; {@code messageAcked} ACK (after the broker applied it); an
 * inbound {@code CommandRedeliverUnacknowledgedMessages} REDELIVER; a consumer's {@code CommandSeek}
 * and the admin API's reset-cursor RESET_CURSOR, its skip and clear-backlog MARK_DELETE, a
 * consumer's {@code CommandUnsubscribe} and the admin API's subscription delete UNSUBSCRIBE, its
 * subscription create CREATE_SUBSCRIPTION, once
 * the broker has done them ({@link #cursorMoved}, {@link #unsubscribed}); the sweep's MARK_DELETE
 * and UNSUBSCRIBE for what the broker does on its own (message TTL, an inactive subscription's
 * expiry: {@link #sweep}). {@code beforeSendMessage} and the consumers' pending acks
 * ({@link PendingAckRemovals}) emit nothing: they note the replays whose write an ack can
 * overtake ({@link ReplaysInFlight}). A client-side negative ack or ack timeout is not visible
 * to a broker: its consequence, the client's redeliver request, is what arrives. No hook may
 * throw or block: each captures its {@link Event} (primitives and
 * references, no text) and offers it to the bounded {@link EventQueue}, whose writer thread
 * makes the JSON line.
 */
public class AckstateInterceptor extends EmptyInterceptor implements TopicEventsListener {
    private static final Logger log = LoggerFactory.getLogger(AckstateInterceptor.class);

    static final String SINK_DIRECTORY = "ackstateSinkDirectory";
    static final String FILE_MAX_EVENTS = "ackstateFileMaxEvents";
    static final String FILE_MAX_MILLIS = "ackstateFileMaxMillis";
    static final String QUEUE_CAPACITY = "ackstateQueueCapacity";
    static final String SINK = "ackstateSink";
    static final String KAFKA_TOPIC = "ackstateKafkaTopic";
    static final String SWEEP_MILLIS = "ackstateMarkDeleteSweepMillis";
    /** Prefix of Kafka producer settings: {@code ackstateKafka.bootstrap.servers=host:9092}. */
    static final String KAFKA_SETTINGS = "ackstateKafka.";

    private final String run = UUID.randomUUID().toString().substring(0, 8);
    private final AtomicLong hookErrors = new AtomicLong();
    /** One log per topic partition (full Pulsar name): seq order = queue order per partition. */
    private final Map<String, PartitionLog> partitions = new ConcurrentHashMap<>();
    /** Consumer ids unique across the broker and its restarts (Pulsar's are per connection). */
    private final SeqClock consumerIds = new SeqClock();
    /** Every consumer announced and not yet closed, by identity; changed under its own lock. */
    private final Map<Consumer, TrackedConsumer> consumers = new IdentityHashMap<>();
    /** The same consumers by subscription (both by identity), under the lock of {@link #consumers}. */
    private final Map<Subscription, List<Consumer>> bySubscription = new IdentityHashMap<>();
    /** Closed consumers in the order they closed, until they leave {@link #announced}. */
    private final Queue<TrackedConsumer> recentlyClosed = new ConcurrentLinkedQueue<>();
    /** The same consumers for the per-message hooks, read without a lock, and those closed in
     *  the last {@link TrackedConsumer#CLOSED_KEPT_MS} ms, so that a late hook finds them closed.
     *  {@code Consumer.equals}
     *  is not identity, so a hit counts only if it names the very consumer asked for. */
    private final Map<Consumer, TrackedConsumer> announced = new ConcurrentHashMap<>();
    /** Subscriptions a consumer's unsubscribe is watched for (by identity), under the lock of
     *  {@link #consumers}: a new subscription of the same name must not be announced before
     *  the old one's UNSUBSCRIBE. */
    private final Set<Subscription> unsubscribing = Collections.newSetFromMap(new IdentityHashMap<>());
    /** The initial position of each subscribe command until its consumer is created. */
    private final Map<Pending, String> initialPositions = new ConcurrentHashMap<>();
    private EventQueue<Event> queue;
    private DropMetrics metrics;
    private PulsarService pulsar;
    /** Runs {@link #sweep}; null when {@link #SWEEP_MILLIS} is 0. */
    private ScheduledExecutorService sweeper;

    /** How long a seek is watched for its reset to begin (a seek by publish time first searches),
     *  and an unsubscribe for the subscription to go (one the broker refuses never goes). */
    static final long WATCH_MS = 30_000;
    /** The longest pause between two looks of an unsubscribe's watch (a seek's looks every 1 ms:
     *  a reset that began and ended between two looks would be missed). */
    static final long WATCH_STEP_MAX_MS = 64;
    /** {@code PersistentSubscription.inProgressResetCursorFuture}: no hook runs when a reset completes. */
    private static final Field RESET_IN_PROGRESS =
            field(PersistentSubscription.class, "inProgressResetCursorFuture", "a consumer's seek");
    /** {@code PersistentMessageExpiryMonitor.expirationCheckInProgress}: no hook runs when an expiry completes. */
    private static final Field EXPIRY_IN_PROGRESS =
            field(PersistentMessageExpiryMonitor.class, "expirationCheckInProgress", "the admin API's expire-messages");
    /** {@code PersistentSubscription.lastMarkDeleteAdvancedTimestamp}: whether a mark-delete moved
     *  forwards before the plugin first saw the subscription's topic object. */
    static final Field MARK_DELETE_ADVANCED = field(PersistentSubscription.class,
            "lastMarkDeleteAdvancedTimestamp", "an expiry as a topic loads");

    private record Pending(ServerCnx cnx, long consumerId) {}

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
                queue = new EventQueue<>(capacity, new EventLines(run), new FileSink(Path.of(dir), run, System.currentTimeMillis(),
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
                queue = new EventQueue<>(capacity, new EventLines(run), new KafkaSink(topic, settings));
                log.info("ackstate interceptor: run {} writing to Kafka topic {} at {} (queue {})", run, topic,
                        settings.getProperty("bootstrap.servers"), capacity);
            }
            default -> throw new IllegalArgumentException(SINK + " must be file or kafka, not " + sink);
        }
        metrics = new DropMetrics(queue);
        metrics.registerDefault();
        this.pulsar = pulsar;
        pulsar.getBrokerService().addTopicEventListener(this);
        long sweepMillis = Long.parseLong(props.getProperty(SWEEP_MILLIS, "1000"));
        if (sweepMillis > 0) {
            sweeper = Executors.newSingleThreadScheduledExecutor(runnable -> {
                Thread thread = new Thread(runnable, "ackstate-sweep");
                thread.setDaemon(true);
                return thread;
            });
            sweeper.scheduleWithFixedDelay(this::sweep, sweepMillis, sweepMillis, TimeUnit.MILLISECONDS);
        }
    }

    /** A private field of the broker's, readable; null (and a warning naming {@code what} is not
     *  followed) when this broker has no such field. */
    private static Field field(Class<?> owner, String name, String what) {
        try {
            Field field = owner.getDeclaredField(name);
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("ackstate interceptor: {}.{} is not there; {} will not reach ackstate", owner.getSimpleName(),
                    name, what, e);
            return null;
        }
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
    /**
     * The partition's log, made the first time any hook sees the topic. The first time a hook
     * sees a topic object, the broker has loaded it (at its start, or the topic came back to
     * it): LOAD_TOPIC comes first, before any event of the new object. Every first event of a
     * loaded topic's object passes here: a SUBSCRIBE, a PUBLISH, a SEND, the sweep's reading.
     */
    private PartitionLog log(Topic topic) {
        PartitionLog partition = partitions.get(topic.getName());
        if (partition == null) {
            partition = partitions.computeIfAbsent(topic.getName(), t -> new PartitionLog(topic));
        }
        if (!partition.isLoadedAs(topic)) {
            synchronized (partition) {
                if (partition.load(topic)) {
                    offerWholeTopic(partition, Event.Type.LOAD_TOPIC);
                    expiredAtLoad(partition, topic);
                }
            }
        }
        return partition;
    }

    /**
     * Under the partition's lock, right after its LOAD_TOPIC: each durable subscription's
     * mark-delete position is recorded as the sweep's first reading, and a MARK_DELETE at it is
     * emitted for each one whose mark-delete the broker moved forwards since it loaded the topic.
     *
     * <p>A topic with a TTL policy expires what aged past it while the topic was not loaded as
     * the topic loads ({@code PersistentTopic.initialize}, {@code initTopicPolicy},
     * {@code onUpdate}, {@code checkMessageExpiry}), before any hook sees the new object, so
     * the position read first is already past the one the broker recovered. Moved forwards
     * means either of two things:
     * <ul>
     *   <li>the subscription object's {@code lastMarkDeleteAdvancedTimestamp} (read by reflection:
     *       no method returns it) is set. An expiry sets it once its {@code asyncMarkDelete}
     *       returns ({@code PersistentMessageExpiryMonitor.findEntryComplete}), and so does a
     *       consumer's ack, but no consumer has acked on the new object before this first look;</li>
     *   <li>the mark-delete is ahead of the persisted one. The expiry's {@code asyncMarkDelete}
     *       sets it in memory at once and may return only after it made the cursor's ledger (a
     *       recovered cursor has none), 20 ms later on a real broker, so the timestamp can still
     *       be unset. A cursor a consumer is making at this moment is never ahead of its
     *       persisted position: at {@code Earliest} it is behind it
     *       ({@code ManagedCursorImpl.initializeCursorPosition}).</li>
     * </ul>
     * So no MARK_DELETE names a subscription before its SUBSCRIBE. An expiry still running is
     * read again by the sweep, which finds its move against the position recorded here.
     */
    private void expiredAtLoad(PartitionLog partition, Topic topic) {
        if (!(topic instanceof PersistentTopic persistent)) {
            return;
        }
        persistent.getSubscriptions().forEach((name, sub) -> {
            try {
                if (swept(sub) == null) {
                    return;
                }
                Position markDelete = sub.getCursor().getMarkDeletedPosition();
                Position persisted = sub.getCursor().getPersistentMarkDeletedPosition();
                partition.swept.firstSeen(sub, markDelete);
                boolean advanced = MARK_DELETE_ADVANCED != null && MARK_DELETE_ADVANCED.getLong(sub) > 0;
                if (advanced || persisted != null && markDelete.compareTo(persisted) > 0) {
                    offerMoved(partition, Event.Type.MARK_DELETE, name, markDelete);
                }
            } catch (Throwable t) {
                failed("the look at the load of " + topic.getName(), t);
            }
        });
    }

    /** Under the partition's lock: LOAD_TOPIC or DELETE_TOPIC of the whole partition. */
    private void offerWholeTopic(PartitionLog partition, Event.Type type) {
        long now = System.currentTimeMillis(); // event_time, and seq from the same read
        offer(new Event.WholeTopic(partition, now, partition.clock.next(now), type));
    }

    /** Under the partition's lock, so that its events enter the queue in seq order. */
    private void offer(Event event) {
        queue.offer(event);
    }

    private void failed(String hook, Throwable t) {
        long n = hookErrors.incrementAndGet();
        if (n <= 10 || n % 10_000 == 0) {
            log.error("ackstate interceptor: {} failed ({} so far); the event is lost", hook, n, t);
        }
    }

    // ---- consumers -----------------------------------------------------------------------
    /**
     * SUBSCRIBE once per consumer, from whichever hook sees it first; no lock once announced.
     *
     * <p>Null for a consumer already closed: a client that drops its connection leaves its
     * consumers in the connection's map ({@code ServerCnx.channelInactive}), so a write the
     * dispatcher queued before the close still reaches {@code messageDispatched}. The broker has
     * already handed that consumer's pending acks back; a SUBSCRIBE again would revive it.
     */
    private TrackedConsumer announce(ServerCnx cnx, Consumer consumer) {
        TrackedConsumer tracked = announcedAs(consumer);
        if (tracked == null) {
            tracked = announceOnce(cnx, consumer);
        }
        return tracked.isClosed() ? null : tracked;
    }

    /** The very consumer's entry in {@link #announced}, or null: the map finds an equal one too. */
    private TrackedConsumer announcedAs(Consumer consumer) {
        TrackedConsumer tracked = announced.get(consumer);
        return tracked != null && tracked.consumer() == consumer ? tracked : null;
    }

    /** The SUBSCRIBE is queued before the consumer is in {@link #announced}, so every other event
     *  of the consumer has a later seq. */
    private TrackedConsumer announceOnce(ServerCnx cnx, Consumer consumer) {
        synchronized (consumers) {
            TrackedConsumer tracked = consumers.get(consumer);
            if (tracked == null) {
                for (TrackedConsumer old : recentlyClosed) { // one an equal, newer consumer displaced
                    if (old.consumer() == consumer) {
                        return old;
                    }
                }
                Subscription sub = consumer.getSubscription();
                // the partition's log exists, loaded as this topic object, before any event of
                // the consumer is emitted
                PartitionLog log = log(sub.getTopic());
                unsubscribedBefore(sub);
                sweptBefore(log, sub);
                closeLetGo(sub);
                long id = consumerIds.next(System.currentTimeMillis());
                ReplaysInFlight replays = log.persistent && consumer.getPendingAcks() != null
                        ? log.replays(sub.getName()) : null;
                if (replays != null) {
                    PendingAckRemovals.watch(consumer, replays);
                }
                tracked = new TrackedConsumer(consumer, id, sub.getTopicName(), log,
                        EventJson.consumerFields(sub.getName(), id), replays);
                consumers.put(consumer, tracked);
                bySubscription.computeIfAbsent(sub, k -> new ArrayList<>()).add(consumer);
                String initial = initialPositions.remove(new Pending(cnx, consumer.consumerId()));
                PartitionLog partition = tracked.partition();
                synchronized (partition) {
                    PersistentSubscription persistent = swept(sub);
                    if (persistent != null) {
                        partition.swept.firstSeen(sub, persistent.getCursor().getMarkDeletedPosition());
                    }
                    long now = System.currentTimeMillis(); // event_time, and seq from the same read
                    offer(new Event.Subscribe(partition, now, partition.clock.next(now), tracked,
                            consumer.consumerName(), consumer.subType().name(), consumer.getPriorityLevel(),
                            initial == null ? "Latest" : initial));
                }
            }
            announced.put(consumer, tracked);
            return tracked;
        }
    }

    /**
     * Emits CLOSE_CONSUMER for the announced consumers of {@code sub} that the broker no longer
     * holds, before a new consumer of it is announced. The broker lets a consumer go without a
     * hook when it disconnects it itself: a seek or cursor reset
     * ({@code PersistentSubscription.resetCursor} calls {@code disconnectActiveConsumers}), after
     * which the client subscribes again on the same connection with the same consumer id. Without
     * this, ackstate would still hold the old consumer, and on an Exclusive subscription refuse
     * the new one as a second consumer. Called under the lock of {@link #consumers}.
     */
    private void closeLetGo(Subscription sub) {
        List<Consumer> known = bySubscription.get(sub);
        if (known == null) {
            return;
        }
        // by identity: Consumer.equals matches the reconnected consumer to the one it replaces
        Set<Consumer> held = Collections.newSetFromMap(new IdentityHashMap<>());
        held.addAll(sub.getConsumers());
        List<Consumer> gone = new ArrayList<>();
        for (Consumer c : known) {
            if (!held.contains(c)) {
                gone.add(c);
            }
        }
        gone.forEach(this::closed);
    }

    private void closed(Consumer consumer) {
        TrackedConsumer tracked;
        long now = System.currentTimeMillis();
        synchronized (consumers) {
            tracked = consumers.remove(consumer);
            if (tracked != null) {
                List<Consumer> known = bySubscription.get(consumer.getSubscription());
                if (known != null) {
                    known.removeIf(c -> c == consumer);
                    if (known.isEmpty()) {
                        bySubscription.remove(consumer.getSubscription());
                    }
                }
                tracked.close(now); // stays in announced a while, closed
                recentlyClosed.add(tracked);
            }
            for (TrackedConsumer old = recentlyClosed.peek(); old != null && old.closedLongerThan(now);
                    old = recentlyClosed.peek()) {
                recentlyClosed.poll();
                announced.remove(old.consumer(), old);
            }
        }
        if (tracked != null) {
            PartitionLog partition = tracked.partition();
            synchronized (partition) {
                now = System.currentTimeMillis(); // event_time, and seq from the same read
                offer(new Event.CloseConsumer(partition, now, partition.clock.next(now), tracked));
            }
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

    /**
     * A broker-initiated disconnect passes no hook: a topic unloading or deleted closes them all
     * (before). A topic the broker let go of (after its unload) is DELETE_TOPIC if its managed
     * ledger was deleted with it; a deletion of a topic not loaded, after it succeeded.
     */
    @Override
    public void handleEvent(String topic, TopicEvent event, EventStage stage, Throwable t) {
        if (event != TopicEvent.UNLOAD && event != TopicEvent.DELETE) {
            return;
        }
        if (stage == EventStage.SUCCESS) {
            try {
                gone(topic, event);
            } catch (Throwable e) {
                failed("topic " + event, e);
            }
            return;
        }
        if (stage != EventStage.BEFORE) {
            return;
        }
        try {
            List<Consumer> gone = new ArrayList<>();
            synchronized (consumers) {
                consumers.forEach((consumer, tracked) -> {
                    if (tracked.fullTopic().equals(topic)) {
                        gone.add(consumer);
                    }
                });
            }
            gone.forEach(this::closed);
        } catch (Throwable e) {
            failed("topic " + event, e);
        }
    }

    /**
     * After the broker removed {@code topic} from its topics (UNLOAD, which every deletion ends
     * with: {@code BrokerService.removeTopicFromCache}), or after a deletion (DELETE). The
     * unloaded object's subscriptions are forgotten (kept, they would hold it in memory; a new
     * object is read afresh, {@link PartitionLog#load}). A deletion emits DELETE_TOPIC once,
     * whichever of the two sees it first: the unload of an object whose state was deleted, or a
     * deletion that found no object loaded (the admin API deletes such a topic from the
     * metadata store alone, {@code BrokerService.deleteTopic}).
     */
    private void gone(String topic, TopicEvent event) {
        PartitionLog partition = partitions.get(topic);
        if (event == TopicEvent.DELETE && partition == null && TopicName.get(topic).isPersistent()) {
            partition = partitions.computeIfAbsent(topic, PartitionLog::new);
        }
        if (partition == null) {
            return;
        }
        synchronized (partition) {
            boolean deleted = event == TopicEvent.UNLOAD
                    ? partition.unload()
                    : partition.unloaded() && partition.deleted();
            if (deleted) {
                offerWholeTopic(partition, Event.Type.DELETE_TOPIC);
            }
        }
    }

    // ---- commands seen before the broker handles them --------------------------------------
    @Override
    public void onPulsarCommand(BaseCommand command, ServerCnx cnx) {
        try {
            PendingAckRemovals.commandArriving(command.getType() == BaseCommand.Type.ACK);
            if (command.getType() == BaseCommand.Type.SUBSCRIBE) {
                CommandSubscribe subscribe = command.getSubscribe();
                if (subscribe.hasInitialPosition()) {
                    initialPositions.put(new Pending(cnx, subscribe.getConsumerId()),
                            subscribe.getInitialPosition().name());
                }
            } else if (command.getType() == BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES) {
                redeliver(cnx, command.getRedeliverUnacknowledgedMessages());
            } else if (command.getType() == BaseCommand.Type.SEEK) {
                seekArriving(cnx, command.getSeek().getConsumerId());
            } else if (command.getType() == BaseCommand.Type.UNSUBSCRIBE) {
                unsubscribeArriving(cnx, command.getUnsubscribe().getConsumerId());
            }
        } catch (Throwable t) {
            failed("onPulsarCommand", t);
        }
    }

    /** The connection's consumer a command names, or null while it is not (yet) created: the
     *  broker ignores such a command too (ServerCnx.handleAck, handleRedeliverUnacknowledged). */
    private static Consumer connectedConsumer(ServerCnx cnx, long consumerId) {
        CompletableFuture<Consumer> future = cnx.getConsumers().get(consumerId);
        return future == null || !future.isDone() || future.isCompletedExceptionally() ? null : future.join();
    }

    /** The replays in flight of an announced consumer's subscription; null for one not announced,
     *  or without pending acks on a persistent topic. No lock, and nothing is announced here. */
    private ReplaysInFlight replaysOf(Consumer consumer) {
        TrackedConsumer tracked = announcedAs(consumer);
        return tracked == null ? null : tracked.replays();
    }

    private void redeliver(ServerCnx cnx, CommandRedeliverUnacknowledgedMessages redeliver) {
        Consumer consumer = connectedConsumer(cnx, redeliver.getConsumerId());
        if (consumer == null) {
            return;
        }
        TrackedConsumer tracked = announce(cnx, consumer);
        if (tracked == null) {
            return;
        }
        // the broker decodes the next command into the same object: the writer reads a copy
        CommandRedeliverUnacknowledgedMessages copy = new CommandRedeliverUnacknowledgedMessages().copyFrom(redeliver);
        PartitionLog partition = tracked.partition();
        synchronized (partition) {
            long now = System.currentTimeMillis(); // event_time, and seq from the same read
            offer(new Event.Redeliver(partition, now, partition.clock.next(now), tracked, copy));
        }
        if (copy.getMessageIdsCount() == 0) {
            markWritesQueuedBefore(cnx, tracked);
        }
    }

    /**
     * Marks the writes already queued on the connection's event loop as queued before this
     * redeliver-all: a task queued now runs after them (the loop runs its tasks in order, and
     * {@code PulsarCommandSenderImpl.sendMessagesToConsumer} always queues a consumer's writes
     * as a task, right after {@code Consumer.sendMessages} added their entries to the pending acks).
     */
    private static void markWritesQueuedBefore(ServerCnx cnx, TrackedConsumer tracked) {
        tracked.redeliverAllHandled();
        try {
            cnx.ctx().channel().eventLoop().execute(tracked::writesQueuedBeforeRedeliverAllDone);
        } catch (RuntimeException e) { // the loop is shutting down: no write of this connection follows
            tracked.writesQueuedBeforeRedeliverAllDone();
        }
    }

    // ---- the broker's own cursor operations ---------------------------------------------------
    /**
     * Before the broker handles a consumer's seek: watches for the cursor reset it starts.
     *
     * <p>{@code ServerCnx.handleSeek} runs on this event loop right after this hook, and a seek
     * to a message id calls {@code PersistentSubscription.resetCursor}, which sets
     * {@code inProgressResetCursorFuture} before it returns; the watch's first look runs after
     * that and waits on the future. A seek to a publish time first searches the ledger, so the
     * watch looks again until the reset begins ({@link #watch}).
     */
    private void seekArriving(ServerCnx cnx, long consumerId) {
        Consumer consumer = connectedConsumer(cnx, consumerId);
        if (consumer == null || RESET_IN_PROGRESS == null
                || !(consumer.getSubscription() instanceof PersistentSubscription sub)) {
            return;
        }
        resetArriving(sub);
        watch(cnx, "the seek on " + sub.getTopicName() + " " + sub.getName(), 1, () -> {
            CompletableFuture<?> reset = (CompletableFuture<?>) RESET_IN_PROGRESS.get(sub);
            if (reset == null) {
                return false;
            }
            reset.whenComplete((done, error) -> {
                if (error == null) {
                    cursorMoved(sub, Event.Type.RESET_CURSOR);
                } else {
                    resetDone(sub);
                }
            });
            return true;
        }, () -> resetDone(sub));
    }

    /**
     * Before the broker handles a consumer's unsubscribe: watches for the subscription to leave
     * its topic ({@code PersistentSubscription.doUnsubscribe} closes the consumer and deletes the
     * cursor, asynchronously, without a hook). The broker refuses it while other consumers are
     * connected, and then the subscription stays and nothing is emitted.
     */
    private void unsubscribeArriving(ServerCnx cnx, long consumerId) {
        Consumer consumer = connectedConsumer(cnx, consumerId);
        if (consumer == null) {
            return;
        }
        Subscription sub = consumer.getSubscription();
        Topic topic = sub.getTopic();
        synchronized (consumers) {
            unsubscribing.add(sub);
        }
        watch(cnx, "the unsubscribe of " + sub.getTopicName() + " " + sub.getName(), WATCH_STEP_MAX_MS, () -> {
            synchronized (consumers) {
                if (!unsubscribing.contains(sub)) {
                    return true; // a new subscription of the name came first (unsubscribedBefore)
                }
                if (topic.getSubscription(sub.getName()) == sub) {
                    return false;
                }
                unsubscribing.remove(sub);
                unsubscribed(topic, sub.getName());
                return true;
            }
        }, () -> {
            synchronized (consumers) {
                unsubscribing.remove(sub);
            }
        });
    }

    /**
     * Before a consumer of {@code sub} is announced: the UNSUBSCRIBE of a subscription of the
     * same name that the broker deleted and the watch has not seen go yet (a client that
     * unsubscribes and subscribes again at once). Under the lock of {@link #consumers}.
     */
    private void unsubscribedBefore(Subscription sub) {
        if (unsubscribing.isEmpty()) {
            return;
        }
        List<Subscription> gone = new ArrayList<>();
        for (Subscription old : unsubscribing) {
            if (old != sub && old.getTopic() == sub.getTopic() && old.getName().equals(sub.getName())) {
                gone.add(old);
            }
        }
        for (Subscription old : gone) {
            unsubscribing.remove(old);
            unsubscribed(old.getTopic(), old.getName());
        }
    }

    /**
     * Before a consumer of {@code sub} is announced: the UNSUBSCRIBE of the subscription of the
     * same name the plugin read before, if the broker deleted it without a watched path (an
     * inactive subscription's expiry) and the sweep has not seen it go yet. Under the lock of
     * {@link #consumers}.
     */
    private void sweptBefore(PartitionLog partition, Subscription sub) {
        Subscription old;
        synchronized (partition) {
            old = partition.swept.departed(sub.getName(), sub);
        }
        if (old != null) {
            unsubscribed(sub.getTopic(), sub.getName());
        }
    }

    /** A condition to wait for on the broker's behalf, returning true when it has seen it through. */
    private interface Look {
        boolean done() throws Exception;
    }

    /**
     * Runs {@code look} on the connection's event loop after the command being intercepted (or
     * on {@code loop}), then again after 1, 2, 4 ... ms (at most {@code maxStepMs} apart) until it
     * is done or {@link #WATCH_MS} have passed; then {@code expired} runs.
     */
    private void watch(ServerCnx cnx, String what, long maxStepMs, Look look, Runnable expired) {
        watch(cnx.ctx().channel().eventLoop(), what, maxStepMs, look, expired);
    }

    private void watch(ScheduledExecutorService loop, String what, long maxStepMs, Look look, Runnable expired) {
        long deadline = System.currentTimeMillis() + WATCH_MS;
        loop.execute(() -> lookAgain(new Watch(loop, what, look, expired, deadline, maxStepMs), 1));
    }

    private record Watch(ScheduledExecutorService loop, String what, Look look, Runnable expired, long deadline,
                         long maxStepMs) {}

    private void lookAgain(Watch watch, long stepMs) {
        try {
            if (watch.look().done()) {
                return;
            }
            if (System.currentTimeMillis() < watch.deadline()) {
                long next = Math.min(2 * stepMs, watch.maxStepMs());
                watch.loop().schedule(() -> lookAgain(watch, next), stepMs, TimeUnit.MILLISECONDS);
            } else {
                watch.expired().run();
                log.info("ackstate interceptor: {} did not complete within {} ms; nothing emitted", watch.what(),
                        WATCH_MS);
            }
        } catch (Throwable t) {
            watch.expired().run();
            failed(watch.what(), t);
        }
    }

    /**
     * After an admin request has been answered: the cursors it reset or moved
     * ({@link AdminCursorOperation}). The admin API answers a reset-cursor, skip or clear-backlog
     * once the cursor has moved, so the mark-delete read now is the operation's. Each topic
     * partition's request reaches the broker that owns it; topics this broker does not hold are
     * passed over.
     */
    @Override
    public void onWebserviceResponse(ServletRequest request, ServletResponse response) {
        try {
            if (!(request instanceof HttpServletRequest http) || !(response instanceof HttpServletResponse answer)) {
                return;
            }
            AdminCursorOperation operation = AdminCursorOperation.parse(http.getMethod(), http.getRequestURI());
            if (operation == null) {
                return;
            }
            if (answer.getStatus() / 100 != 2) {
                if (operation.type() == Event.Type.RESET_CURSOR) {
                    resetSubscription(operation).ifPresent(this::resetDone); // refused: nothing moved
                }
                return;
            }
            if (operation.type() == Event.Type.UNSUBSCRIBE) {
                pulsar.getBrokerService().getTopicReference(operation.topic()).ifPresent(topic -> {
                    if (topic.getSubscription(operation.subscription()) == null) {
                        unsubscribed(topic, operation.subscription());
                    }
                });
                return;
            }
            if (operation.type() == Event.Type.CREATE_SUBSCRIPTION) {
                pulsar.getBrokerService().getTopicReference(operation.topic()).ifPresent(topic -> {
                    PersistentSubscription sub = swept(topic.getSubscription(operation.subscription()));
                    if (sub != null) {
                        cursorMoved(sub, Event.Type.CREATE_SUBSCRIPTION);
                    }
                });
                return;
            }
            List<Topic> topics = new ArrayList<>();
            if (operation.topic() != null) {
                pulsar.getBrokerService().getTopicReference(operation.topic()).ifPresent(topics::add);
            } else {
                pulsar.getBrokerService().forEachTopic(topic -> {
                    TopicName name = TopicName.get(topic.getName());
                    if (name.getNamespace().equals(operation.namespace()) && operation.bundle().equals(
                            pulsar.getNamespaceService().getBundle(name).getBundleRange())) {
                        topics.add(topic);
                    }
                });
            }
            for (Topic topic : topics) {
                topic.getSubscriptions().forEach((name, sub) -> {
                    if ((operation.subscription() == null || operation.subscription().equals(name))
                            && sub instanceof PersistentSubscription persistent) {
                        if (operation.expiry()) {
                            expiryDone(persistent);
                        } else {
                            cursorMoved(persistent, operation.type());
                        }
                    }
                });
            }
        } catch (Throwable t) {
            failed("onWebserviceResponse", t);
        }
    }

    /**
     * Before the broker handles an admin request: a reset-cursor's subscription is marked as
     * resetting until the answer ({@link SweptSubscriptions#resetArriving}).
     */
    @Override
    public void onWebserviceRequest(ServletRequest request) {
        try {
            if (request instanceof HttpServletRequest http) {
                AdminCursorOperation operation = AdminCursorOperation.parse(http.getMethod(), http.getRequestURI());
                if (operation != null && operation.type() == Event.Type.RESET_CURSOR) {
                    resetSubscription(operation).ifPresent(this::resetArriving);
                }
            }
        } catch (Throwable t) {
            failed("onWebserviceRequest", t);
        }
    }

    /** The swept subscription a reset-cursor request names, if this broker holds it. */
    private Optional<PersistentSubscription> resetSubscription(AdminCursorOperation operation) {
        if (operation.topic() == null || operation.subscription() == null) {
            return Optional.empty();
        }
        return pulsar.getBrokerService().getTopicReference(operation.topic())
                .map(topic -> swept(topic.getSubscription(operation.subscription())));
    }

    private void resetArriving(PersistentSubscription sub) {
        PartitionLog partition = log(sub.getTopic());
        synchronized (partition) {
            partition.swept.resetArriving(sub, System.currentTimeMillis() + WATCH_MS);
        }
    }

    private void resetDone(PersistentSubscription sub) {
        PartitionLog partition = log(sub.getTopic());
        synchronized (partition) {
            partition.swept.resetDone(sub);
        }
    }

    /**
     * MARK_DELETE once the subscription's expiry monitor is done. The admin API answers an
     * expire-messages by publish time when the monitor has started
     * ({@code PersistentMessageExpiryMonitor.expireMessages} sets {@code expirationCheckInProgress});
     * the monitor then searches the ledger and mark-deletes, and clears the flag when the
     * mark-delete is done. One by position mark-deletes before the answer. Looked for on the
     * broker's executor; a monitor that never finishes in {@link #WATCH_MS} emits nothing.
     */
    private void expiryDone(PersistentSubscription sub) {
        if (EXPIRY_IN_PROGRESS == null) {
            return;
        }
        PersistentMessageExpiryMonitor monitor = sub.getExpiryMonitor();
        watch(pulsar.getExecutor(), "the expiry of " + sub.getTopicName() + " " + sub.getName(), WATCH_STEP_MAX_MS,
                () -> {
                    if (EXPIRY_IN_PROGRESS.getInt(monitor) != 0) {
                        return false;
                    }
                    cursorMoved(sub, Event.Type.MARK_DELETE);
                    return true;
                }, () -> { });
    }

    /**
     * RESET_CURSOR, MARK_DELETE or CREATE_SUBSCRIPTION with the subscription's mark-delete
     * position as it is now, once the broker has done the operation. A reset disconnected the
     * subscription's consumers first ({@code dispatcher.disconnectActiveConsumers}, no hook):
     * their CLOSE_CONSUMER events come first ({@link #closeLetGo}). So does a creation, which
     * ends in a reset: a consumer can only have joined in between. A creation is also a new
     * subscription object, so the UNSUBSCRIBE of an older one of the name that the plugin has
     * not emitted yet comes before it, as before a SUBSCRIBE.
     */
    private void cursorMoved(PersistentSubscription sub, Event.Type type) {
        try {
            if (type != Event.Type.MARK_DELETE) {
                synchronized (consumers) {
                    if (type == Event.Type.CREATE_SUBSCRIPTION) {
                        unsubscribedBefore(sub);
                        sweptBefore(log(sub.getTopic()), sub);
                    }
                    closeLetGo(sub);
                }
            }
            PartitionLog partition = log(sub.getTopic());
            synchronized (partition) {
                Position markDelete = sub.getCursor().getMarkDeletedPosition();
                partition.swept.markDeleteAdvanced(sub, markDelete);
                partition.swept.resetDone(sub);
                offerMoved(partition, type, sub.getName(), markDelete);
            }
        } catch (Throwable t) {
            failed("cursor " + type, t);
        }
    }

    /** Under the partition's lock: RESET_CURSOR, MARK_DELETE or CREATE_SUBSCRIPTION of
     *  {@code subscription} at {@code markDelete}, read under the same lock. */
    private void offerMoved(PartitionLog partition, Event.Type type, String subscription, Position markDelete) {
        long now = System.currentTimeMillis(); // event_time, and seq from the same read
        offer(new Event.CursorMoved(partition, now, partition.clock.next(now), type,
                EventJson.subscriptionField(subscription), markDelete.getLedgerId(), markDelete.getEntryId()));
    }

    /**
     * UNSUBSCRIBE of a subscription the broker has deleted from {@code topic}, after
     * CLOSE_CONSUMER for each consumer of it still announced: the broker closed them without a
     * hook ({@code consumer.close()} in {@code doUnsubscribe}, or a forced delete's disconnect).
     * Each subscription object of that name the plugin still tracks is one the broker deleted.
     */
    private void unsubscribed(Topic topic, String name) {
        try {
            synchronized (consumers) {
                List<Subscription> gone = new ArrayList<>();
                for (Subscription sub : bySubscription.keySet()) {
                    if (sub.getTopic() == topic && sub.getName().equals(name) && topic.getSubscription(name) != sub) {
                        gone.add(sub);
                    }
                }
                gone.forEach(this::closeLetGo);
            }
            PartitionLog partition = log(topic);
            byte[] subscriptionField = EventJson.subscriptionField(name);
            synchronized (partition) {
                if (!partition.swept.unsubscribe(name, topic.getSubscription(name))) {
                    return; // emitted already, by the sweep or before a new subscription of the name
                }
                long now = System.currentTimeMillis(); // event_time, and seq from the same read
                offer(new Event.Unsubscribed(partition, now, partition.clock.next(now), subscriptionField));
            }
        } catch (Throwable t) {
            failed("unsubscribe", t);
        }
    }

    /**
     * Every {@link #SWEEP_MILLIS}: a MARK_DELETE for each durable subscription whose mark-delete
     * position moved forwards since the plugin last read it, and an UNSUBSCRIBE for each one the
     * plugin read before that has left its topic since, when no watched path emitted it.
     *
     * <p>The broker also moves cursors where no hook and no request shows it: message TTL (the
     * expiry monitor, run by the broker's timer every {@code messageExpiryCheckIntervalInMinutes}
     * and when a topic's policies change: {@code PersistentTopic.checkMessageExpiry}), and
     * whatever else mark-deletes on its own (the v1 admin paths, for one). It deletes
     * subscriptions the same way: an inactive subscription's expiry
     * ({@code PersistentTopic.checkInactiveSubscriptions}, every
     * {@code subscriptionExpiryCheckIntervalInMinutes}). The sweep reads each cursor's
     * mark-delete under its partition's lock, so the MARK_DELETE takes its seq where the
     * broker's state is. A move the consumers' acks made is read too: its MARK_DELETE names the
     * position the acks already reached, or one they reach right after (an ack takes effect
     * before its hook runs), and changes nothing either way, as {@code setAcknowledgedPosition}
     * accepts the current position and ignores the individual acks of positions at or below it.
     * A move backwards is only recorded: only a reset moves a cursor back, and the reset's own
     * RESET_CURSOR says what it forgot.
     */
    void sweep() {
        try {
            BrokerService brokers = pulsar.getBrokerService();
            if (brokers == null) {
                return; // the broker is stopping: its topics are being unloaded
            }
            brokers.forEachTopic(topic -> {
                if (topic instanceof PersistentTopic persistent) {
                    sweep(persistent);
                }
            });
        } catch (Throwable t) {
            failed("the sweep", t);
        }
    }

    private void sweep(PersistentTopic topic) {
        Map<String, PersistentSubscription> subscriptions = topic.getSubscriptions();
        if (subscriptions.isEmpty() && !partitions.containsKey(topic.getName())) {
            return;
        }
        PartitionLog partition = log(topic);
        List<String> departed;
        synchronized (partition) {
            long now = System.currentTimeMillis();
            for (PersistentSubscription sub : subscriptions.values()) {
                if (swept(sub) == null || partition.swept.resetting(sub, now)) {
                    continue; // a reset's move is the reset's to emit (SweptSubscriptions.resetArriving)
                }
                Position markDelete = sub.getCursor().getMarkDeletedPosition();
                if (partition.swept.markDeleteAdvanced(sub, markDelete)) {
                    offerMoved(partition, Event.Type.MARK_DELETE, sub.getName(), markDelete);
                }
            }
            departed = partition.swept.departed(subscriptions);
        }
        for (String name : departed) { // a new object of the name is read at the next sweep
            unsubscribed(topic, name);
        }
    }

    /** {@code sub} if the sweep follows it: a durable subscription of a persistent topic, not
     *  the compaction's cursor (a reader's cursor is not durable). */
    private static PersistentSubscription swept(Subscription sub) {
        return sub instanceof PersistentSubscription persistent && persistent.getCursor() != null
                && persistent.getCursor().isDurable() && !Compactor.COMPACTION_SUBSCRIPTION.equals(sub.getName())
                ? persistent : null;
    }

    // ---- producers -------------------------------------------------------------------------
    @Override
    public void onMessagePublish(Producer producer, ByteBuf headersAndPayload, Topic.PublishContext context) {
        try {
            PartitionLog partition = log(producer.getTopic());
            long sequenceId = context.getSequenceId();
            long highest = Math.max(context.getHighestSequenceId(), sequenceId);
            long messages = Math.max(1, context.getNumberOfMessages());
            synchronized (partition) {
                long now = System.currentTimeMillis(); // event_time, and seq from the same read
                offer(new Event.Send(partition, now, partition.clock.next(now),
                        producer.getProducerName(), sequenceId, highest, messages));
            }
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
            long sequenceId = context.getSequenceId();
            long highest = Math.max(context.getHighestSequenceId(), sequenceId);
            long batchSize = Math.max(1, context.getNumberOfMessages());
            synchronized (partition) {
                long now = System.currentTimeMillis(); // event_time, and seq from the same read
                if (partition.advance(ledgerId, entryId)) { // else a DISPATCH already emitted it
                    offer(new Event.Publish(partition, now, partition.clock.next(now), ledgerId,
                            entryId, batchSize, producer.getProducerName(), sequenceId, highest));
                }
            }
        } catch (Throwable t) {
            failed("messageProduced", t);
        }
    }

    // ---- dispatch and acks -------------------------------------------------------------------
    /** On the dispatcher's thread, before the pending acks get the entry: notes a replay. */
    @Override
    public void beforeSendMessage(Subscription subscription, org.apache.bookkeeper.mledger.Entry entry, long[] ackSet,
                                  MessageMetadata metadata, Consumer consumer) {
        try {
            if (consumer == null || consumer.getPendingAcks() == null) {
                return;
            }
            ReplaysInFlight replays = replaysOf(consumer);
            if (replays != null) {
                replays.sending(entry.getLedgerId(), entry.getEntryId());
            }
        } catch (Throwable t) {
            failed("beforeSendMessage", t);
        }
    }

    @Override
    public void messageDispatched(ServerCnx cnx, Consumer consumer, long ledgerId, long entryId, ByteBuf payload) {
        try {
            TrackedConsumer tracked = announce(cnx, consumer);
            if (tracked == null) {
                return; // written after its consumer closed: the broker took the entry back then
            }
            PartitionLog partition = tracked.partition();
            boolean ackedBeforeWrite = tracked.replays() != null && tracked.replays().written(ledgerId, entryId);
            EntryFields entry = EntryFields.read(payload);
            synchronized (partition) {
                long now = System.currentTimeMillis(); // event_time, and seq from the same read
                // (looked up only for the writes queued before a redeliver-all)
                boolean takenBack = tracked.mayHaveTakenBack() && takenBack(consumer, ledgerId, entryId);
                if (entry != null && partition.needsPublish(ledgerId, entryId)) {
                    publishFromEntry(partition, now, ledgerId, entryId, entry.batchSize(), payload, consumer);
                }
                offer(new Event.Dispatch(partition, now, partition.clock.next(now), tracked,
                        ledgerId, entryId, entry == null ? -1 : entry.batchSize(), entry == null ? null : entry.key()));
                if (ackedBeforeWrite) { // the broker's order: dispatch (the add), then the ack
                    offer(new Event.Ack(partition, now, partition.clock.next(now), tracked,
                            ackOf(consumer.consumerId(), ledgerId, entryId)));
                } else if (takenBack) {
                    offer(new Event.Redeliver(partition, now, partition.clock.next(now), tracked,
                            redeliveryOf(consumer.consumerId(), ledgerId, entryId)));
                }
            }
        } catch (Throwable t) {
            failed("messageDispatched", t);
        }
    }

    /**
     * True when the broker already took the entry back from the consumer it is being written to.
     *
     * <p>A Shared or Key_Shared consumer's pending acks get the entry on the dispatcher's thread
     * ({@code Consumer.sendMessages}); this hook runs later, when the connection's event loop
     * writes the message. A redeliver-all that the event loop handled in between (its REDELIVER
     * already has an earlier seq) moved the entry from the pending acks to the subscription's
     * redelivery set. The broker's order was dispatch, then redeliver, so a REDELIVER of this
     * entry alone follows the DISPATCH. Consumers of other types keep no pending acks.
     *
     * <p>The look-up (a read lock and a tree search on the I/O thread) is made only for the
     * writes queued before a redeliver-all ({@link TrackedConsumer#mayHaveTakenBack}): made on
     * every dispatch, it cost the broker as much as the writer's number formatting, and made for
     * a replay after the redeliver-all it took back an entry that an ack had removed instead.
     */
    static boolean takenBack(Consumer consumer, long ledgerId, long entryId) {
        PendingAcksMap pending = consumer.getPendingAcks();
        return pending != null && !pending.contains(ledgerId, entryId);
    }

    /** An individual ack of one whole entry, as the consumer's client would send it. */
    static CommandAck ackOf(long consumerId, long ledgerId, long entryId) {
        CommandAck command = new CommandAck().setConsumerId(consumerId).setAckType(CommandAck.AckType.Individual);
        command.addMessageId().setLedgerId(ledgerId).setEntryId(entryId);
        return command;
    }

    /** A redeliver request for one entry, as the consumer's client would send it. */
    static CommandRedeliverUnacknowledgedMessages redeliveryOf(long consumerId, long ledgerId, long entryId) {
        CommandRedeliverUnacknowledgedMessages command = new CommandRedeliverUnacknowledgedMessages()
                .setConsumerId(consumerId);
        command.addMessageId().setLedgerId(ledgerId).setEntryId(entryId);
        return command;
    }

    /** Under the partition's lock: the PUBLISH of an entry the dispatcher sends before
     *  {@code messageProduced} ran, from the entry's full metadata (rare, so the full parse). */
    private void publishFromEntry(PartitionLog partition, long now, long ledgerId, long entryId, int batchSize,
                                  ByteBuf payload, Consumer consumer) {
        // a thread-local instance, read on this thread only
        MessageMetadata meta = Commands.peekMessageMetadata(payload, null, consumer.consumerId());
        if (meta != null) {
            partition.advance(ledgerId, entryId);
            long sequenceId = meta.getSequenceId();
            offer(new Event.Publish(partition, now, partition.clock.next(now), ledgerId, entryId,
                    batchSize, meta.hasProducerName() ? meta.getProducerName() : null, sequenceId,
                    Math.max(sequenceId, meta.hasHighestSequenceId() ? meta.getHighestSequenceId() : sequenceId)));
        }
    }

    @Override
    public void messageAcked(ServerCnx cnx, Consumer consumer, CommandAck ack) {
        try {
            TrackedConsumer tracked = announce(cnx, consumer);
            if (tracked == null) {
                return;
            }
            PartitionLog partition = tracked.partition();
            synchronized (partition) {
                long now = System.currentTimeMillis(); // event_time, and seq from the same read
                offer(new Event.Ack(partition, now, partition.clock.next(now), tracked, ack));
            }
        } catch (Throwable t) {
            failed("messageAcked", t);
        }
    }

    // onConnectionClosed stays a no-op (EmptyInterceptor): ServerCnx.channelInactive calls
    // consumerClosed for each of the connection's consumers

    /** Idempotent: the metrics are unregistered once. */
    @Override
    public void close() {
        try {
            if (sweeper != null) {
                sweeper.shutdownNow();
                sweeper.awaitTermination(5, TimeUnit.SECONDS);
                sweeper = null;
            }
            if (metrics != null) {
                metrics.unregisterDefault();
                metrics = null;
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
