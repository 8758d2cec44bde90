package io.ackstate.interceptor;

import org.apache.pulsar.common.util.Codec;

/**
 * An admin REST request that moves or deletes cursors, read from its method and path: which
 * topic or namespace bundle, which subscription (null: every one), and which event tells
 * ackstate what became of each cursor.
 *
 * <p>The admin API's v2 paths (Pulsar 4.0's {@code admin/v2/PersistentTopics},
 * {@code NonPersistentTopics} and {@code Namespaces}):
 * <ul>
 *   <li>DELETE {@code /admin/v2/persistent/T/N/TOPIC/subscription/S} (and
 *       {@code non-persistent}): UNSUBSCRIBE ({@code Subscription.delete});</li>
 * </ul>
 * and POST:
 * <ul>
 *   <li>{@code /admin/v2/persistent/T/N/TOPIC/subscription/S/resetcursor[/...]}: RESET_CURSOR
 *       ({@code PersistentSubscription.resetCursor});</li>
 *   <li>{@code .../subscription/S/skip/K} and {@code .../subscription/S/skip_all}: MARK_DELETE
 *       ({@code skipMessages}, {@code clearBacklog});</li>
 *   <li>{@code .../subscription/S/expireMessages[/SECONDS]} and
 *       {@code .../all_subscription/expireMessages/SECONDS}: MARK_DELETE once the subscription's
 *       expiry monitor is done ({@code expiry}: the monitor moves the cursor after the answer);</li>
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
record AdminCursorOperation(Event.Type type, String topic, String namespace, String bundle, String subscription,
                            boolean expiry) {
    private static final String TOPICS = "/admin/v2/persistent/";
    private static final String NON_PERSISTENT_TOPICS = "/admin/v2/non-persistent/";
    private static final String NAMESPACES = "/admin/v2/namespaces/";

    /** The operation a request ({@code method}, {@code path}: the URI without the query) asks for, or null. */
    static AdminCursorOperation parse(String method, String path) {
        if ("DELETE".equals(method)) {
            AdminCursorOperation persistent = unsubscribe(path, TOPICS, "persistent://");
            return persistent != null ? persistent : unsubscribe(path, NON_PERSISTENT_TOPICS, "non-persistent://");
        }
        if (!"POST".equals(method)) {
            return null;
        }
        if (path.startsWith(TOPICS)) {
            String[] s = path.substring(TOPICS.length()).split("/");
            if (s.length < 5) {
                return null;
            }
            String topic = "persistent://" + s[0] + "/" + s[1] + "/" + Codec.decode(s[2]);
            // T, N, TOPIC, "all_subscription", "expireMessages", SECONDS
            if (s[3].equals("all_subscription")) {
                return s[4].equals("expireMessages")
                        ? new AdminCursorOperation(Event.Type.MARK_DELETE, topic, null, null, null, true) : null;
            }
            // T, N, TOPIC, "subscription", S, operation, ...
            if (s.length < 6 || !s[3].equals("subscription")) {
                return null;
            }
            Event.Type type = switch (s[5]) {
                case "resetcursor" -> Event.Type.RESET_CURSOR;
                case "skip", "skip_all", "expireMessages" -> Event.Type.MARK_DELETE;
                default -> null;
            };
            if (type == null) {
                return null;
            }
            return new AdminCursorOperation(type, topic, null, null, Codec.decode(s[4]), s[5].equals("expireMessages"));
        }
        if (path.startsWith(NAMESPACES)) {
            String[] s = path.substring(NAMESPACES.length()).split("/");
            // T, N, BUNDLE, "clearBacklog", [S]
            if (s.length < 4 || s.length > 5 || !s[3].equals("clearBacklog")) {
                return null;
            }
            String subscription = s.length == 5 ? Codec.decode(s[4]) : null;
            return new AdminCursorOperation(Event.Type.MARK_DELETE, null, s[0] + "/" + s[1], s[2], subscription, false);
        }
        return null;
    }

    /** DELETE {@code <prefix>T/N/TOPIC/subscription/S}: the subscription's deletion, or null. */
    private static AdminCursorOperation unsubscribe(String path, String prefix, String domain) {
        if (!path.startsWith(prefix)) {
            return null;
        }
        String[] s = path.substring(prefix.length()).split("/");
        if (s.length != 5 || !s[3].equals("subscription")) {
            return null;
        }
        String topic = domain + s[0] + "/" + s[1] + "/" + Codec.decode(s[2]);
        return new AdminCursorOperation(Event.Type.UNSUBSCRIBE, topic, null, null, Codec.decode(s[4]), false);
    }
}
