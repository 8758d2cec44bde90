package io.ackstate.interceptor;

import java.lang.ref.WeakReference;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerImpl;
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
    /** Whether DELETE_TOPIC was emitted since the partition was last loaded. */
    private boolean deleted;

    PartitionLog(Topic topic) {
        this(topic.getName(), topic instanceof PersistentTopic);
    }

    /** The partition of a topic no hook has seen here: a deletion of a topic not loaded. */
    PartitionLog(String topic) {
        this(topic, TopicName.get(topic).isPersistent());
    }

    private PartitionLog(String topic, boolean persistent) {
        TopicName name = TopicName.get(topic);
        topicFields = EventJson.topicFields(name.getPartitionedTopicName(), name.getPartitionIndex());
        this.persistent = persistent;
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
        deleted = false;
        return true;
    }

    /**
     * Under this object's lock: the broker let go of the object the partition was loaded as
     * (it removed it from its topics: an unload, a close, or a deletion). True, once, if that
     * object's state was deleted with it ({@link #deletedWith}): the caller emits DELETE_TOPIC.
     * A hook still holding the object afterwards loads nothing ({@link #load}).
     */
    boolean unload() {
        Topic topic = loaded.get();
        if (topic == null) {
            return false;
        }
        retired.add(topic);
        loaded = new WeakReference<>(null);
        swept.clear();
        return deletedWith(topic) && deleted();
    }

    /**
     * Under this object's lock: true, once since the last load, when the broker deleted the
     * partition. The caller emits DELETE_TOPIC; the subscriptions' replays in flight go.
     */
    boolean deleted() {
        if (deleted) {
            return false;
        }
        deleted = true;
        replays.clear();
        return true;
    }

    /** Whether no object of the partition is loaded now (none yet, or the last was unloaded). */
    boolean unloaded() {
        return loaded.get() == null;
    }

    /**
     * Whether the broker deleted what {@code topic} held when it let go of it: the managed
     * ledger of a persistent topic ({@code ManagedLedgerImpl.asyncDelete} fences it for
     * deletion first, which nothing else does; a close leaves it closed), or anything of a
     * non-persistent topic, which holds its subscriptions in memory only.
     */
    static boolean deletedWith(Topic topic) {
        if (!(topic instanceof PersistentTopic p)) {
            return true;
        }
        return p.getManagedLedger() instanceof ManagedLedgerImpl ledger
                && ledger.getState() == ManagedLedgerImpl.State.FencedForDeletion;
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
