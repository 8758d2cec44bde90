package io.ackstate.interceptor;

import org.apache.pulsar.broker.service.Consumer;

/**
 * What a SUBSCRIBE said of a consumer, so that later events name the same consumer, when the
 * consumer last asked for a redeliver-all, and whether it has closed.
 */
final class TrackedConsumer {
    /** How long a closed consumer is still recognised as closed by the per-message hooks: the
     *  writes queued on its connection before the close run within milliseconds. */
    static final long CLOSED_KEPT_MS = 60_000;

    private final Consumer consumer;
    private final long id;
    private final String fullTopic;
    private final PartitionLog partition;
    private final byte[] consumerFields;
    /** Its subscription's replays in flight, for a consumer with pending acks on a persistent topic; else null. */
    private final ReplaysInFlight replays;
    /** Redeliver-alls whose marker task has not yet run on the consumer's connection's event
     *  loop; only that thread changes it (the REDELIVER hook and the marker) and reads it (the
     *  writes' DISPATCH hook). */
    private int redeliverAllsAhead;
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
     * @param replays its subscription's replays in flight, or null
     */
    TrackedConsumer(Consumer consumer, long id, String fullTopic, PartitionLog partition, byte[] consumerFields,
                    ReplaysInFlight replays) {
        this.consumer = consumer;
        this.id = id;
        this.fullTopic = fullTopic;
        this.partition = partition;
        this.consumerFields = consumerFields;
        this.replays = replays;
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

    ReplaysInFlight replays() {
        return replays;
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

    /** On the event loop, as the broker is about to handle a redeliver-all; {@link
     *  #writesQueuedBeforeRedeliverAllDone} is queued behind the writes already queued. */
    void redeliverAllHandled() {
        redeliverAllsAhead++;
    }

    /** The marker task of {@link #redeliverAllHandled}: the writes queued before it have run. */
    void writesQueuedBeforeRedeliverAllDone() {
        redeliverAllsAhead--;
    }

    /**
     * True while the event loop runs writes that the dispatcher queued before a redeliver-all was
     * handled: only such a write can carry an entry that the redeliver-all took back. A write
     * queued later comes from a dispatch after it (a replay), whose entry the broker may have
     * dropped from the pending acks for another reason (an ack moved the mark-delete position
     * past it, {@code PendingAcksMap.removeAllUpTo}) without taking back its unacked count.
     */
    boolean mayHaveTakenBack() {
        return redeliverAllsAhead > 0;
    }
}
