package io.ackstate.interceptor;

import java.lang.ref.WeakReference;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
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
    /** The last entry the ledger held when this broker last loaded the partition: a DISPATCH
     *  at or below it (a redelivery after a restart or a move) needs no PUBLISH. */
    private long floorLedger = Long.MIN_VALUE;
    private long floorEntry = -1;
    /** The topic object the broker holds for the partition now (not kept alive by this). */
    private volatile WeakReference<Topic> loaded = new WeakReference<>(null);
    /** The objects it was loaded as before (by identity: topics do not override equals). A hook
     *  still holding an unloaded object (a watch begun before the unload) loads nothing. */
    private final Set<Topic> retired = Collections.newSetFromMap(new WeakHashMap<>());
    /** Per subscription name, for the Shared and Key_Shared consumers of a persistent topic. */
    private final Map<String, ReplaysInFlight> replays = new HashMap<>();
    /** The durable subscriptions the plugin has read, under this object's lock. */
    final SweptSubscriptions swept = new SweptSubscriptions();

    PartitionLog(Topic topic) {
        TopicName name = TopicName.get(topic.getName());
        topicFields = EventJson.topicFields(name.getPartitionedTopicName(), name.getPartitionIndex());
        persistent = topic instanceof PersistentTopic;
    }

    /** Whether {@code topic} is the object this partition was last loaded as; no lock. */
    boolean isLoadedAs(Topic topic) {
        return loaded.get() == topic;
    }

    /**
     * Under this object's lock: true the first time a hook sees {@code topic}, a new object of
     * the partition (the broker loaded it: its start, or the topic coming back to it), which
     * then becomes the one it is loaded as. The floor becomes that topic's last entry, and what
     * the sweep read of the old object's subscriptions is forgotten.
     */
    boolean load(Topic topic) {
        if (isLoadedAs(topic) || retired.contains(topic)) {
            return false;
        }
        Topic before = loaded.get();
        if (before != null) {
            retired.add(before);
        }
        loaded = new WeakReference<>(topic);
        if (topic instanceof PersistentTopic p) {
            Position lac = p.getManagedLedger().getLastConfirmedEntry();
            floorLedger = lac.getLedgerId();
            floorEntry = lac.getEntryId();
        }
        swept.clear();
        return true;
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
