package io.ackstate.interceptor;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.MessageIdData;

/**
 * A persistent Shared or Key_Shared subscription's replays between the dispatcher and their
 * write, and which of them an ack took out of the pending acks in that gap.
 *
 * <p>The dispatcher adds an entry to a consumer's pending acks on its own thread
 * ({@code Consumer.sendMessages}) and then queues the write on the connection's event loop; the
 * DISPATCH is emitted by the write ({@code messageDispatched}). A client cannot ack a first
 * delivery before it is written to it, but it can ack a replay: it still holds, for up to its ack
 * group time, the ack of the copy it received before a redelivery. The broker counts the replay
 * unacked unless the ack found it in the pending acks ({@code Consumer.individualAckNormal}
 * removes it with its count), which depends on whether the add or the ack came first. The ACK is
 * emitted after the ack was applied; when the write comes later still, ackstate sees ACK then
 * DISPATCH and counts the replay. If the ack did remove it, the write emits a one-entry ACK after
 * the DISPATCH.
 *
 * <p>No hook runs at the add or inside the ack, so the order is read around them. When the ack
 * arrives ({@code onPulsarCommand}, before the broker applies it) and after it was applied
 * ({@code messageAcked}), each replay in flight that it names is looked up in its consumer's
 * pending acks, and a marker task is queued on the writing connection's event loop. The write
 * runs after the markers queued before it was queued, and the dispatcher queues it right after
 * the add, so the markers that ran before the write say when the add happened:
 * <ul>
 *   <li>pending when the ack arrived: added before; the ack removed it;</li>
 *   <li>written before the arrival's marker: added before the ack arrived, and already gone
 *       then (the dispatcher's read drops what the mark-delete position passed, {@code
 *       PendingAcksMap.removeAllUpTo}, keeping its unacked count): the ack removed nothing;</li>
 *   <li>written after the marker of the applied ack: added after the ack; it removed nothing;</li>
 *   <li>written between the two markers: added while the ack was being applied; the ack
 *       removed it if it was gone once the ack was applied.</li>
 * </ul>
 * A replay the dispatcher picked only after the ack arrived is judged by the applied ack alone,
 * and only while the mark-delete position is below it: once the position has passed it, the
 * ack itself has often started the dispatcher's next read, which dropped the replay again, and
 * it is taken as added after the ack. That is the gap left: such a replay that the pending acks
 * got before the ack reached its id is counted by ackstate and not by the broker. {@code tests/pulsar/stress.py} plays {@code acks_racing_replays}, which makes
 * these races by the hundred, on a real broker and counts the subscriptions that still differ;
 * it drove the choice of these points (the arrival alone, or the applied ack alone, was wrong
 * for whole batches of entries).
 *
 * <p>An entry counts as a replay when it is at or below the last entry this broker run saw the
 * subscription send ({@code beforeSendMessage}, on the dispatcher's thread, before the add).
 * Only replays are kept, so a subscription that redelivers nothing pays one comparison per entry
 * sent and none per ack. Hooks of several threads meet here: every change is under this object's
 * lock, and {@link #any} lets the ack and write hooks skip the lock while nothing is in flight.
 */
final class ReplaysInFlight {
    /** A bound for entries that are never written (a Key_Shared consumer's pending acks can refuse
     *  an entry after {@code beforeSendMessage}; a closed connection drops its writes). */
    static final int MAX_IN_FLIGHT = 10_000;

    private record Entry(long ledger, long entry) {}

    /** A replay sent to {@code consumer} and not yet written, and what an ack of it saw. */
    private static final class InFlight {
        final Consumer consumer;
        boolean acked;
        boolean pendingWhenAckArrived;
        boolean arrivalMarkerRan;
        boolean pendingAfterAck;
        boolean ackMarkerRan;

        InFlight(Consumer consumer) {
            this.consumer = consumer;
        }

        /** Under the lock, as it is written: did the ack take it out of the pending acks? */
        boolean removedByAck() {
            if (!acked) {
                return false;
            }
            if (pendingWhenAckArrived) {
                return true;
            }
            if (!arrivalMarkerRan || ackMarkerRan) {
                return false; // added before the ack arrived (and gone then), or after it was applied
            }
            return !pendingAfterAck;
        }
    }

    private long lastLedger = -1;
    private long lastEntry = -1;
    private final Map<Entry, InFlight> inFlight = new HashMap<>();
    private volatile boolean any;

    /** On the dispatcher's thread: it is about to add (ledger, entry) to {@code consumer}'s pending acks. */
    synchronized void sending(Consumer consumer, long ledger, long entry) {
        if (ledger > lastLedger || (ledger == lastLedger && entry > lastEntry)) {
            lastLedger = ledger;
            lastEntry = entry;
            return; // a first delivery
        }
        if (inFlight.size() >= MAX_IN_FLIGHT) {
            inFlight.clear();
        }
        inFlight.put(new Entry(ledger, entry), new InFlight(consumer));
        any = true;
    }

    /** On the acking connection's event loop, before the broker applies {@code ack}. */
    void ackArriving(CommandAck ack) {
        look(ack, true);
    }

    /** On the same thread, after the broker applied {@code ack}. */
    void acked(CommandAck ack) {
        look(ack, false);
    }

    /** Looks up the replays in flight that the ack names (whole entries: an id with an ack set
     *  leaves the entry pending) and queues a marker on each one's writing event loop. */
    private void look(CommandAck ack, boolean arriving) {
        if (!any || ack.getAckType() != CommandAck.AckType.Individual) {
            return;
        }
        Map<Consumer, List<InFlight>> named = null;
        synchronized (this) {
            for (int i = 0; i < ack.getMessageIdsCount(); i++) {
                MessageIdData id = ack.getMessageIdAt(i);
                InFlight replay = id.getAckSetsCount() > 0 ? null : inFlight.get(new Entry(id.getLedgerId(), id.getEntryId()));
                if (replay == null || (arriving ? replay.acked : replay.ackMarkerRan)) {
                    continue;
                }
                if (!arriving && !replay.acked) {
                    // sent after the ack arrived: its write is queued after the arrival's marker
                    // would have been. Judged only where the dispatcher's read cannot have
                    // dropped it (see the class comment)
                    if (!aboveMarkDelete(replay.consumer, id)) {
                        continue;
                    }
                    replay.acked = true;
                    replay.arrivalMarkerRan = true;
                }
                boolean pending = pending(replay.consumer, id);
                if (arriving) {
                    replay.acked = true;
                    replay.pendingWhenAckArrived = pending;
                } else {
                    replay.pendingAfterAck = pending;
                }
                if (named == null) {
                    named = new IdentityHashMap<>();
                }
                named.computeIfAbsent(replay.consumer, c -> new ArrayList<>()).add(replay);
            }
        }
        if (named != null) {
            named.forEach((consumer, replays) -> afterQueuedWrites(consumer, () -> {
                synchronized (this) {
                    for (InFlight replay : replays) {
                        if (arriving) {
                            replay.arrivalMarkerRan = true;
                        } else {
                            replay.ackMarkerRan = true;
                        }
                    }
                }
            }));
        }
    }

    /** True if the subscription's mark-delete position is below the id, so that {@code
     *  PendingAcksMap.removeAllUpTo} leaves it alone. */
    private static boolean aboveMarkDelete(Consumer consumer, MessageIdData id) {
        if (!(consumer.getSubscription() instanceof PersistentSubscription sub)) {
            return false;
        }
        Position markDelete = sub.getCursor().getMarkDeletedPosition();
        return markDelete != null && (id.getLedgerId() > markDelete.getLedgerId()
                || (id.getLedgerId() == markDelete.getLedgerId() && id.getEntryId() > markDelete.getEntryId()));
    }

    private static boolean pending(Consumer consumer, MessageIdData id) {
        PendingAcksMap pending = consumer.getPendingAcks();
        return pending != null && pending.contains(id.getLedgerId(), id.getEntryId());
    }

    /** Runs {@code marker} after the writes already queued on the consumer's event loop. */
    private static void afterQueuedWrites(Consumer consumer, Runnable marker) {
        try {
            if (consumer.cnx() instanceof ServerCnx cnx) {
                cnx.ctx().channel().eventLoop().execute(marker);
                return;
            }
        } catch (RuntimeException e) { // the loop is shutting down: none of its writes follows
        }
        marker.run();
    }

    /** On the event loop, as (ledger, entry) is written: true if an ack took it out of the pending
     *  acks before the write (emit an ACK of it after its DISPATCH). */
    boolean written(long ledger, long entry) {
        if (!any) {
            return false;
        }
        synchronized (this) {
            InFlight replay = inFlight.remove(new Entry(ledger, entry));
            any = !inFlight.isEmpty();
            return replay != null && replay.removedByAck();
        }
    }
}
