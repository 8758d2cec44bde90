package io.ackstate.interceptor;

import org.apache.pulsar.common.util.Codec;

/**
 * An admin REST request that moves cursors, read from its path: which topic or namespace, which
 * subscription (null: every one), and which event tells ackstate what became of each cursor.
 *
 * <p>The admin API's v2 paths (Pulsar 4.0's {@code admin/v2/PersistentTopics} and
 * {@code Namespaces}), POST only:
 * <ul>
 *   <li>{@code /admin/v2/persistent/T/N/TOPIC/subscription/S/resetcursor[/...]}: RESET_CURSOR
 *       ({@code PersistentSubscription.resetCursor});</li>
 *   <li>{@code .../subscription/S/skip/K} and {@code .../subscription/S/skip_all}: MARK_DELETE
 *       ({@code skipMessages}, {@code clearBacklog});</li>
 *   <li>{@code /admin/v2/namespaces/T/N/BUNDLE/clearBacklog[/S]}: MARK_DELETE of every
 *       subscription (or S) of the bundle's topics.</li>
 * </ul>
 * A namespace's clear-backlog ({@code /admin/v2/namespaces/T/N/clearBacklog[/S]}) is passed
 * over: the broker sends it on as one request per bundle to the bundle's owner
 * ({@code NamespacesBase.internalClearNamespaceBacklog}), and those are acted on.
 * A request on a partitioned topic's base name reaches each partition's owner as a request of
 * its own, so only partitions (or non-partitioned topics) are acted on. Path segments are
 * URL-encoded as the admin client sends them ({@code Codec.encode}).
 */
record AdminCursorOperation(Event.Type type, String topic, String namespace, String bundle, String subscription) {
    private static final String TOPICS = "/admin/v2/persistent/";
    private static final String NAMESPACES = "/admin/v2/namespaces/";

    /** The operation a POST to {@code path} (the request URI, without the query) asks for, or null. */
    static AdminCursorOperation parse(String path) {
        if (path.startsWith(TOPICS)) {
            String[] s = path.substring(TOPICS.length()).split("/");
            // T, N, TOPIC, "subscription", S, operation, ...
            if (s.length < 6 || !s[3].equals("subscription")) {
                return null;
            }
            Event.Type type = switch (s[5]) {
                case "resetcursor" -> Event.Type.RESET_CURSOR;
                case "skip", "skip_all" -> Event.Type.MARK_DELETE;
                default -> null;
            };
            if (type == null) {
                return null;
            }
            String topic = "persistent://" + s[0] + "/" + s[1] + "/" + Codec.decode(s[2]);
            return new AdminCursorOperation(type, topic, null, null, Codec.decode(s[4]));
        }
        if (path.startsWith(NAMESPACES)) {
            String[] s = path.substring(NAMESPACES.length()).split("/");
            // T, N, BUNDLE, "clearBacklog", [S]
            if (s.length < 4 || s.length > 5 || !s[3].equals("clearBacklog")) {
                return null;
            }
            String subscription = s.length == 5 ? Codec.decode(s[4]) : null;
            return new AdminCursorOperation(Event.Type.MARK_DELETE, null, s[0] + "/" + s[1], s[2], subscription);
        }
        return null;
    }
}
