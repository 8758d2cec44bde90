package io.ackstate.interceptor;

import java.util.Arrays;
import java.util.List;
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
 *   <li>PUT {@code /admin/v2/persistent/T/N/TOPIC/subscription/S}: CREATE_SUBSCRIPTION
 *       ({@code PersistentTopicsBase.internalCreateSubscription}: {@code createSubscription} at the
 *       latest entry, then {@code resetCursor} to the message id asked for; the broker refuses it
 *       on a non-persistent topic);</li>
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
 * URL-encoded as the admin client sends them ({@code Codec.encode}). The v1 paths
 * ({@code admin/v1}: {@code /admin/persistent/P/C/N/TOPIC/...}, {@code /admin/namespaces/P/C/N/...},
 * a namespace named by property, cluster and namespace) are the same operations.
 */
record AdminCursorOperation(Event.Type type, String topic, String namespace, String bundle, String subscription,
                            boolean expiry) {
    /**
     * A REST root that names topics or namespaces: its prefix, the domain of its topics' names
     * (null: namespaces), and how many path segments a namespace takes (v2: tenant and
     * namespace; v1: property, cluster and namespace).
     */
    private record Root(String prefix, String domain, int namespaceSegments) {
        /** The path's segments after the prefix, or null for a path of another root. */
        String[] segments(String path) {
            return path.startsWith(prefix) ? path.substring(prefix.length()).split("/") : null;
        }

        String namespace(String[] s) {
            return String.join("/", Arrays.copyOfRange(s, 0, namespaceSegments));
        }

        String topic(String[] s) {
            return domain + namespace(s) + "/" + Codec.decode(s[namespaceSegments]);
        }
    }

    /** Persistent topics' roots: their cursors move. */
    private static final List<Root> PERSISTENT = List.of(
            new Root("/admin/v2/persistent/", "persistent://", 2),
            new Root("/admin/persistent/", "persistent://", 3));
    /** Both domains' roots: a subscription of either is deleted. */
    private static final List<Root> TOPICS = List.of(PERSISTENT.get(0), PERSISTENT.get(1),
            new Root("/admin/v2/non-persistent/", "non-persistent://", 2),
            new Root("/admin/non-persistent/", "non-persistent://", 3));
    private static final List<Root> NAMESPACES = List.of(
            new Root("/admin/v2/namespaces/", null, 2),
            new Root("/admin/namespaces/", null, 3));

    /** The operation a request ({@code method}, {@code path}: the URI without the query) asks for, or null. */
    static AdminCursorOperation parse(String method, String path) {
        if ("DELETE".equals(method)) {
            for (Root root : TOPICS) {
                AdminCursorOperation operation = subscriptionItself(Event.Type.UNSUBSCRIBE, path, root);
                if (operation != null) {
                    return operation;
                }
            }
            return null;
        }
        if ("PUT".equals(method)) {
            for (Root root : PERSISTENT) {
                AdminCursorOperation operation = subscriptionItself(Event.Type.CREATE_SUBSCRIPTION, path, root);
                if (operation != null) {
                    return operation;
                }
            }
            return null;
        }
        if (!"POST".equals(method)) {
            return null;
        }
        for (Root root : PERSISTENT) {
            String[] s = root.segments(path);
            if (s != null) {
                return topicOperation(root, s);
            }
        }
        for (Root root : NAMESPACES) {
            String[] s = root.segments(path);
            if (s != null) {
                return bundleOperation(root, s);
            }
        }
        return null;
    }

    /** POST on a persistent topic: NS..., TOPIC, then "subscription", S, operation, ... or
     *  "all_subscription", "expireMessages", SECONDS. */
    private static AdminCursorOperation topicOperation(Root root, String[] s) {
        int at = root.namespaceSegments() + 1;
        if (s.length < at + 2) {
            return null;
        }
        String topic = root.topic(s);
        if (s[at].equals("all_subscription")) {
            return s[at + 1].equals("expireMessages")
                    ? new AdminCursorOperation(Event.Type.MARK_DELETE, topic, null, null, null, true) : null;
        }
        if (s.length < at + 3 || !s[at].equals("subscription")) {
            return null;
        }
        String operation = s[at + 2];
        Event.Type type = switch (operation) {
            case "resetcursor" -> Event.Type.RESET_CURSOR;
            case "skip", "skip_all", "expireMessages" -> Event.Type.MARK_DELETE;
            default -> null;
        };
        if (type == null) {
            return null;
        }
        return new AdminCursorOperation(type, topic, null, null, Codec.decode(s[at + 1]),
                operation.equals("expireMessages"));
    }

    /** POST NS..., BUNDLE, "clearBacklog", [S]: a bundle's clear-backlog. */
    private static AdminCursorOperation bundleOperation(Root root, String[] s) {
        int at = root.namespaceSegments() + 1;
        if (s.length < at + 1 || s.length > at + 2 || !s[at].equals("clearBacklog")) {
            return null;
        }
        String subscription = s.length == at + 2 ? Codec.decode(s[at + 1]) : null;
        return new AdminCursorOperation(Event.Type.MARK_DELETE, null, root.namespace(s), s[at - 1], subscription,
                false);
    }

    /** NS..., TOPIC, "subscription", S: the subscription's deletion (DELETE) or creation (PUT), or null. */
    private static AdminCursorOperation subscriptionItself(Event.Type type, String path, Root root) {
        String[] s = root.segments(path);
        int at = root.namespaceSegments() + 1;
        if (s == null || s.length != at + 2 || !s[at].equals("subscription")) {
            return null;
        }
        return new AdminCursorOperation(type, root.topic(s), null, null, Codec.decode(s[at + 1]), false);
    }
}
