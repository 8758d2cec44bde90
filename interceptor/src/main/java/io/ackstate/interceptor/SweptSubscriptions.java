package io.ackstate.interceptor;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.service.Subscription;

/**
 * What the plugin last read of each durable subscription of one topic partition: the broker's
 * subscription object and its cursor's mark-delete position. Used under the partition's lock.
 *
 * <p>It answers two questions no hook does. Did a cursor move forwards by itself (message TTL)?
 * Then the sweep emits MARK_DELETE. Did a subscription the plugin saw leave its topic, or give
 * way to a new object of the same name (an inactive subscription's expiry, a delete by a path
 * the plugin does not watch)? Then its UNSUBSCRIBE is due, exactly once: after it the name
 * holds a tombstone until a new object of the name is read, so the UNSUBSCRIBE of a watched
 * path that comes later is not emitted twice.
 */
final class SweptSubscriptions {
    /** {@code subscription} null: the tombstone of one whose UNSUBSCRIBE was emitted. */
    private record Seen(Subscription subscription, Position markDelete) {}

    private final Map<String, Seen> seen = new HashMap<>();
    /** Subscriptions whose cursor reset has arrived and not been emitted: until when (ms). */
    private final Map<Subscription, Long> resetting = new IdentityHashMap<>();

    /**
     * A reset of {@code sub} has arrived (an admin reset-cursor, a consumer's seek): until
     * {@link #resetDone} or {@code until} (epoch ms), {@link #resetting} says so, and the sweep
     * passes the subscription over. A reset may move the cursor back to a position above the
     * one the sweep read last, when acks the sweep never read moved it forwards in between;
     * read then, that move would pass for a forward one, and its MARK_DELETE would come before
     * the reset's own RESET_CURSOR.
     */
    void resetArriving(Subscription sub, long until) {
        resetting.put(sub, until);
    }

    /** The reset of {@code sub} was emitted, refused or given up on. */
    void resetDone(Subscription sub) {
        resetting.remove(sub);
    }

    /** Whether a reset of {@code sub} arrived and is not done at {@code now} (epoch ms). */
    boolean resetting(Subscription sub, long now) {
        Long until = resetting.get(sub);
        if (until != null && until <= now) {
            resetting.remove(sub);
            return false;
        }
        return until != null;
    }

    /**
     * Records {@code markDelete} as read now, returning true when it is ahead of the position
     * read last of the same object. A first reading only records. A new object where an old one
     * is recorded changes nothing: its predecessor's UNSUBSCRIBE comes first ({@link #departed}).
     */
    boolean markDeleteAdvanced(Subscription sub, Position markDelete) {
        Seen last = seen.get(sub.getName());
        if (last != null && last.subscription() != null && last.subscription() != sub) {
            return false;
        }
        seen.put(sub.getName(), new Seen(sub, markDelete));
        return last != null && last.subscription() != null && markDelete.compareTo(last.markDelete()) > 0;
    }

    /** Records {@code sub} at {@code markDelete} unless it is recorded already (a SUBSCRIBE). */
    void firstSeen(Subscription sub, Position markDelete) {
        Seen last = seen.get(sub.getName());
        if (last == null || last.subscription() == null) {
            seen.put(sub.getName(), new Seen(sub, markDelete));
        }
    }

    /** The recorded object of {@code name}, if it is no longer {@code current} (null: gone). */
    Subscription departed(String name, Subscription current) {
        Seen last = seen.get(name);
        return last != null && last.subscription() != null && last.subscription() != current
                ? last.subscription() : null;
    }

    /** The names whose recorded object is not the one in {@code current} (by name) any more. */
    List<String> departed(Map<String, ? extends Subscription> current) {
        List<String> names = new ArrayList<>();
        seen.forEach((name, last) -> {
            if (last.subscription() != null && current.get(name) != last.subscription()) {
                names.add(name);
            }
        });
        return names;
    }

    /**
     * Whether the UNSUBSCRIBE of {@code name} is still to be emitted, now that no subscription
     * of the name other than {@code current} (null: none) is on the topic; true leaves the
     * tombstone. False when it was emitted already: the name holds a tombstone, or the object
     * now recorded is the current one (recorded after its predecessor's UNSUBSCRIBE).
     */
    boolean unsubscribe(String name, Subscription current) {
        Seen last = seen.get(name);
        if (last != null && (last.subscription() == null || last.subscription() == current)) {
            return false;
        }
        seen.put(name, new Seen(null, null));
        return true;
    }

    /** The topic left this broker (an unload or a delete): read afresh if it comes back. */
    void clear() {
        seen.clear();
        resetting.clear();
    }
}
