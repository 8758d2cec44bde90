package io.ackstate.interceptor;

import org.apache.pulsar.broker.service.Consumer;

/**
 * What a SUBSCRIBE said of a consumer, so that later events name the same consumer, when the
 * consumer last asked for a redeliver-all, and whether it has closed.
 */
final class TrackedConsumer {
    /** How long after a redeliver-all a dispatched entry is checked against the pending acks:
     *  the writes the dispatcher queued on the event loop before it run within milliseconds. */
    static final long TAKE_BACK_WINDOW_MS = 10_000;
    /** How long a closed consumer is still recognised as closed by the per-message hooks: the
     *  writes queued on its connection before the close run within milliseconds. */
    static final long CLOSED_KEPT_MS = 60_000;

    private final Consumer consumer;
    private final long id;
    private final String fullTopic;
    private final PartitionLog partition;
    private final byte[] consumerFields;
    /** Written and read on the consumer's connection's event loop (its REDELIVER and its
     *  writes); volatile for a topic unload's thread, which only closes it. */
    private volatile long redeliverAllMillis = Long.MIN_VALUE / 2;
    /** When its CLOSE_CONSUMER was emitted; 0 while open. */
    private volatile long closedMillis;

    /**
     * @param consumer the broker's object, compared by identity ({@code Consumer.equals} compares
     *                 Pulsar's per-connection id and the client's address, which a later consumer
     *                 can share)
     * @param id the plugin's broker-wide consumer id
     * @param fullTopic the topic partition's full Pulsar name, to find its consumers on unload
     * @param consumerFields {@code "subscription":"...","consumer_id":n}, quoted and encoded once
     *                       ({@link EventJson#consumerFields})
     */
    TrackedConsumer(Consumer consumer, long id, String fullTopic, PartitionLog partition, byte[] consumerFields) {
        this.consumer = consumer;
        this.id = id;
        this.fullTopic = fullTopic;
        this.partition = partition;
        this.consumerFields = consumerFields;
    }

    Consumer consumer() {
        return consumer;
    }

    long id() {
        return id;
    }

    String fullTopic() {
        return fullTopic;
    }

    PartitionLog partition() {
        return partition;
    }

    byte[] consumerFields() {
        return consumerFields;
    }

    void close(long nowMillis) {
        closedMillis = Math.max(1, nowMillis);
    }

    boolean isClosed() {
        return closedMillis != 0;
    }

    boolean closedLongerThan(long nowMillis) {
        return nowMillis - closedMillis > CLOSED_KEPT_MS;
    }

    void redeliveredAll(long nowMillis) {
        redeliverAllMillis = nowMillis;
    }

    /** True while an entry written now may be one a recent redeliver-all took back. */
    boolean mayHaveTakenBack(long nowMillis) {
        return nowMillis - redeliverAllMillis < TAKE_BACK_WINDOW_MS;
    }
}
