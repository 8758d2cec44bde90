package io.ackstate.interceptor;

import java.lang.reflect.Field;
import java.util.function.Supplier;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.PendingAcksMap.PendingAcksRemoveHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Watches one consumer's pending acks for the entries an ack command takes out, for its
 * subscription's {@link ReplaysInFlight}.
 *
 * <p>{@code PendingAcksMap} asks its remove-handler supplier for a handler at each removal and
 * calls it under the map's write lock: once per entry for a single removal ({@code remove}: an
 * ack's {@code Consumer.removePendingAcks}, or a redeliver request's), and between
 * {@code startBatch} and {@code endBatch} for the dispatcher's {@code removeAllUpTo} and a
 * close's {@code forEachAndClose}. No hook runs there, so the plugin puts this handler in the
 * supplier's place (by reflection: the field is private) and hands every call on to the broker's
 * own handler, when the dispatcher has one (Key_Shared's). A single removal while the connection's
 * thread is handling an ack command ({@link #ACKING}, set in {@code onPulsarCommand} before the
 * broker applies the command) is the ack's: the one that decides whether the broker still counts
 * a replay. A removal of another consumer's entry by the ack (Shared acks find the entry's owner)
 * is the same subscription's, and so the same {@link ReplaysInFlight}.
 */
final class PendingAckRemovals implements PendingAcksRemoveHandler {
    private static final Logger log = LoggerFactory.getLogger(PendingAckRemovals.class);

    /** {@code PendingAcksMap.pendingAcksRemoveHandlerSupplier}. */
    private static final Field SUPPLIER = supplierField();

    /** Set while this thread handles an ack command: from its arrival until the next command. */
    private static final ThreadLocal<Boolean> ACKING = new ThreadLocal<>();

    private final Supplier<PendingAcksRemoveHandler> broker;
    private final ReplaysInFlight replays;
    /** The broker's handler of the batch in progress, or this one: guarded by the map's write lock. */
    private PendingAcksRemoveHandler batch;

    private PendingAckRemovals(Supplier<PendingAcksRemoveHandler> broker, ReplaysInFlight replays) {
        this.broker = broker;
        this.replays = replays;
    }

    /** Watches {@code consumer}'s pending acks for {@code replays}, unless they cannot be watched
     *  (logged: the field's absence once, at class load; a failure here, per consumer). */
    @SuppressWarnings("unchecked")
    static void watch(Consumer consumer, ReplaysInFlight replays) {
        PendingAcksMap pending = consumer.getPendingAcks();
        if (SUPPLIER == null || pending == null) {
            return;
        }
        try {
            Supplier<PendingAcksRemoveHandler> broker = (Supplier<PendingAcksRemoveHandler>) SUPPLIER.get(pending);
            if (broker != null) {
                PendingAckRemovals watch = new PendingAckRemovals(broker, replays);
                Supplier<PendingAcksRemoveHandler> watched = () -> watch;
                SUPPLIER.set(pending, watched);
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("ackstate interceptor: the pending acks of {} cannot be watched; an ack that overtakes a "
                    + "replay's write will be counted twice", consumer, e);
        }
    }

    /** In {@code onPulsarCommand}, before the broker handles {@code command} on this thread. A
     *  cleared flag is set to null, not removed, so that the event loop's ack and flow commands do
     *  not take the thread's map entry out and put it back each time. */
    static void commandArriving(boolean ack) {
        if (ack) {
            ACKING.set(Boolean.TRUE);
        } else if (ACKING.get() != null) {
            ACKING.set(null);
        }
    }

    @Override
    public void handleRemoving(Consumer consumer, long ledgerId, long entryId, int stickyKeyHash, boolean closing) {
        PendingAcksRemoveHandler handler = batch != null ? batch : broker.get();
        if (handler != null && handler != this) {
            handler.handleRemoving(consumer, ledgerId, entryId, stickyKeyHash, closing);
        }
        if (batch == null && !closing && ACKING.get() != null) {
            replays.removedByAck(ledgerId, entryId);
        }
    }

    @Override
    public void startBatch() {
        PendingAcksRemoveHandler handler = broker.get();
        if (handler != null) {
            handler.startBatch();
        }
        batch = handler != null ? handler : this;
    }

    @Override
    public void endBatch() {
        PendingAcksRemoveHandler handler = batch;
        batch = null;
        if (handler != null && handler != this) {
            handler.endBatch();
        }
    }

    private static Field supplierField() {
        try {
            Field field = PendingAcksMap.class.getDeclaredField("pendingAcksRemoveHandlerSupplier");
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("ackstate interceptor: PendingAcksMap.pendingAcksRemoveHandlerSupplier is not there; an ack "
                    + "that overtakes a replay's write will be counted twice", e);
            return null;
        }
    }
}
