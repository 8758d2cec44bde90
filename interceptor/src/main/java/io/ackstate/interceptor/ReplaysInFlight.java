package io.ackstate.interceptor;

import java.util.HashMap;
import java.util.Map;

/**
 * A persistent Shared or Key_Shared subscription's replays between the dispatcher and their
 * write, and which of them an ack took out of the pending acks in that gap.
 *
 * <p>The dispatcher adds an entry to a consumer's pending acks on its own thread
 * ({@code Consumer.sendMessages}) and then queues the write on the connection's event loop; the
 * DISPATCH is emitted by the write ({@code messageDispatched}). A client cannot ack a first
 * delivery before it is written to it, but it can ack a replay: it still holds, for up to its ack
 * group time, the ack of the copy it received before a redelivery. The broker counts the replay
 * unacked unless the ack found it in the pending acks ({@code Consumer.removePendingAcks} takes
 * it out, with its count), which depends on whether the add or the ack came first. The ACK is
 * emitted after the ack was applied; when the write comes later still, ackstate sees ACK then
 * DISPATCH and counts the replay. If the ack did take it out, the write emits a one-entry ACK
 * after the DISPATCH.
 *
 * <p>Whether it did is seen where it happens: {@link PendingAckRemovals} watches each consumer's
 * pending acks and calls {@link #removedByAck} when an ack command takes an entry out. An entry
 * counts as a replay when it is at or below the last entry this broker run saw the subscription
 * send ({@code beforeSendMessage}, on the dispatcher's thread, before the add). Only replays are
 * kept, so a subscription that redelivers nothing pays one comparison per entry sent and one
 * volatile read per entry acked. Hooks of several threads meet here: every change is under this
 * object's lock, and {@link #any} lets the ack and write hooks skip the lock while nothing is in
 * flight. {@code python -m tests.pulsar.stress acks_racing_replays} makes these races by the
 * hundred on a real broker and counts the subscriptions that still differ.
 */
final class ReplaysInFlight {
    /** A bound for entries that are never written (a Key_Shared consumer's pending acks can refuse
     *  an entry after {@code beforeSendMessage}; a closed connection drops its writes). */
    static final int MAX_IN_FLIGHT = 10_000;

    private record Entry(long ledger, long entry) {}

    private long lastLedger = -1;
    private long lastEntry = -1;
    /** Each replay sent and not yet written: whether an ack took it out of the pending acks. */
    private final Map<Entry, Boolean> inFlight = new HashMap<>();
    private volatile boolean any;

    /** On the dispatcher's thread: it is about to add (ledger, entry) to a consumer's pending acks. */
    synchronized void sending(long ledger, long entry) {
        if (ledger > lastLedger || (ledger == lastLedger && entry > lastEntry)) {
            lastLedger = ledger;
            lastEntry = entry;
            return; // a first delivery
        }
        if (inFlight.size() >= MAX_IN_FLIGHT) {
            inFlight.clear();
        }
        inFlight.put(new Entry(ledger, entry), Boolean.FALSE);
        any = true;
    }

    /** On the acking connection's thread, under the pending acks' lock: an ack command took
     *  (ledger, entry) out of one of the subscription's consumers' pending acks. */
    void removedByAck(long ledger, long entry) {
        if (!any) {
            return;
        }
        synchronized (this) {
            inFlight.replace(new Entry(ledger, entry), Boolean.TRUE);
        }
    }

    /** On the event loop, as (ledger, entry) is written: true if an ack took it out of the pending
     *  acks before the write (emit an ACK of it after its DISPATCH). */
    boolean written(long ledger, long entry) {
        if (!any) {
            return false;
        }
        synchronized (this) {
            Boolean removedByAck = inFlight.remove(new Entry(ledger, entry));
            any = !inFlight.isEmpty();
            return Boolean.TRUE.equals(removedByAck);
        }
    }
}
