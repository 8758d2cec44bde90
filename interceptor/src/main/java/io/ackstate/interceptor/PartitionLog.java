package io.ackstate.interceptor;

import java.util.HashMap;
import java.util.Map;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.naming.TopicName;

/**
 * A topic partition's seq clock, its pre-quoted topic fields, and the last entry a PUBLISH was
 * emitted for. Events of one partition take their seq and enter the queue under this object's
 * lock, so queue order is seq order within a partition.
 *
 * <p>{@code messageProduced} runs on the producer's I/O thread after the entry is persisted,
 * and the dispatcher can read the new entry and send it (DISPATCH) before that. A DISPATCH of an
 * entry with no PUBLISH yet emits the PUBLISH first, from the entry's own metadata; a later
 * {@code messageProduced} at or below the last emitted position is then skipped.
 */
final class PartitionLog {
    final SeqClock clock = new SeqClock();
    /** {@code "topic":"...","partition":n} as UTF-8, made once: the writer appends it to every line. */
    final byte[] topicFields;
    final boolean persistent;
    private long lastLedger = -1;
    private long lastEntry = -1;
    /** The last entry the ledger held when this broker run first saw the partition: a DISPATCH
     *  at or below it (a redelivery after a restart or a move) needs no PUBLISH. */
    private final long floorLedger;
    private final long floorEntry;
    /** Per subscription name, for the Shared and Key_Shared consumers of a persistent topic. */
    private final Map<String, ReplaysInFlight> replays = new HashMap<>();
    /** The durable subscriptions the plugin has read, under this object's lock. */
    final SweptSubscriptions swept = new SweptSubscriptions();

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

    /** The subscription's replays in flight, made when the first of its consumers is announced. */
    synchronized ReplaysInFlight replays(String subscription) {
        return replays.computeIfAbsent(subscription, name -> new ReplaysInFlight());
    }

    /** Under this object's lock: true if a DISPATCH of (ledger, entry) must emit its PUBLISH first. */
    boolean needsPublish(long ledger, long entry) {
        return persistent && (ledger > floorLedger || (ledger == floorLedger && entry > floorEntry))
                && above(ledger, entry);
    }

    /** Under this object's lock: true if (ledger, entry) is above the last PUBLISH, which it then becomes. */
    boolean advance(long ledger, long entry) {
        if (above(ledger, entry)) {
            lastLedger = ledger;
            lastEntry = entry;
            return true;
        }
        return false;
    }

    private boolean above(long ledger, long entry) {
        return ledger > lastLedger || (ledger == lastLedger && entry > lastEntry);
    }
}
