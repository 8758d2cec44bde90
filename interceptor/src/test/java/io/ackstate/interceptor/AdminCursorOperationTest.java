package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

/** The admin paths that move cursors, as the admin client sends them (segments URL-encoded). */
class AdminCursorOperationTest {
    @Test
    void resetCursorToAPublishTimeOrAMessageId() {
        assertEquals(new AdminCursorOperation(Event.Type.RESET_CURSOR, "persistent://t/ns/orders", null, null, "s", false),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/orders/subscription/s/resetcursor/1700000000000"));
        assertEquals(new AdminCursorOperation(Event.Type.RESET_CURSOR, "persistent://t/ns/orders-partition-2", null,
                        null, "my sub", false),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/orders-partition-2/subscription/my%20sub/resetcursor"));
    }

    @Test
    void skipAndClearBacklogMoveMarkDelete() {
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://t/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/subscription/s/skip/5"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://t/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/subscription/s/skip_all"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, null, "t/ns", "0x00000000_0x40000000", null, false),
                AdminCursorOperation.parse("POST", "/admin/v2/namespaces/t/ns/0x00000000_0x40000000/clearBacklog"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, null, "t/ns", "0x00000000_0x40000000", "s", false),
                AdminCursorOperation.parse("POST", "/admin/v2/namespaces/t/ns/0x00000000_0x40000000/clearBacklog/s"));
    }

    @Test
    void expiringMessagesWaitsForTheExpiryMonitor() {
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://t/ns/x", null, null, "s", true),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/subscription/s/expireMessages/10"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://t/ns/x", null, null, "s", true),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/subscription/s/expireMessages"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://t/ns/x", null, null, null, true),
                AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/all_subscription/expireMessages/10"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/all_subscription/other"));
    }

    @Test
    void otherPathsMoveNoCursor() {
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/stats"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/persistent/t/ns/x/subscription/s"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/namespaces/t/ns/backlogQuota"));
        // the broker sends a namespace's clear-backlog on to each bundle's owner
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/namespaces/t/ns/clearBacklog"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/namespaces/t/ns/clearBacklog/s"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/v2/non-persistent/t/ns/x/subscription/s/skip_all"));
    }

    @Test
    void deletingASubscriptionUnsubscribes() {
        assertEquals(new AdminCursorOperation(Event.Type.UNSUBSCRIBE, "persistent://t/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("DELETE", "/admin/v2/persistent/t/ns/x/subscription/s"));
        assertEquals(new AdminCursorOperation(Event.Type.UNSUBSCRIBE, "non-persistent://t/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("DELETE", "/admin/v2/non-persistent/t/ns/x/subscription/s"));
        assertNull(AdminCursorOperation.parse("DELETE", "/admin/v2/persistent/t/ns/x"));
        assertNull(AdminCursorOperation.parse("DELETE", "/admin/v2/persistent/t/ns/x/subscription/s/skip_all"));
        assertNull(AdminCursorOperation.parse("GET", "/admin/v2/persistent/t/ns/x/subscription/s"));
    }

    @Test
    void puttingASubscriptionCreatesIt() {
        assertEquals(new AdminCursorOperation(Event.Type.CREATE_SUBSCRIPTION, "persistent://t/ns/x", null, null, "s",
                        false),
                AdminCursorOperation.parse("PUT", "/admin/v2/persistent/t/ns/x/subscription/s"));
        assertEquals(new AdminCursorOperation(Event.Type.CREATE_SUBSCRIPTION, "persistent://t/ns/o-partition-1", null,
                        null, "my sub", false),
                AdminCursorOperation.parse("PUT", "/admin/v2/persistent/t/ns/o-partition-1/subscription/my%20sub"));
        assertEquals(new AdminCursorOperation(Event.Type.CREATE_SUBSCRIPTION, "persistent://p/c/ns/x", null, null, "s",
                        false),
                AdminCursorOperation.parse("PUT", "/admin/persistent/p/c/ns/x/subscription/s"));
        // the broker refuses it on a non-persistent topic; other PUTs make no subscription
        assertNull(AdminCursorOperation.parse("PUT", "/admin/v2/non-persistent/t/ns/x/subscription/s"));
        assertNull(AdminCursorOperation.parse("PUT", "/admin/v2/persistent/t/ns/x/subscription/s/properties"));
        assertNull(AdminCursorOperation.parse("PUT", "/admin/v2/persistent/t/ns/x/partitions"));
        assertNull(AdminCursorOperation.parse("PUT", "/admin/v2/persistent/t/ns/x"));
    }

    @Test
    void theV1PathsNameANamespaceByPropertyClusterAndNamespace() {
        assertEquals(new AdminCursorOperation(Event.Type.RESET_CURSOR, "persistent://p/c/ns/orders", null, null, "s", false),
                AdminCursorOperation.parse("POST", "/admin/persistent/p/c/ns/orders/subscription/s/resetcursor/1700000000000"));
        assertEquals(new AdminCursorOperation(Event.Type.RESET_CURSOR, "persistent://p/c/ns/o-partition-1", null, null,
                        "my sub", false),
                AdminCursorOperation.parse("POST", "/admin/persistent/p/c/ns/o-partition-1/subscription/my%20sub/resetcursor"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://p/c/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("POST", "/admin/persistent/p/c/ns/x/subscription/s/skip/5"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, "persistent://p/c/ns/x", null, null, null, true),
                AdminCursorOperation.parse("POST", "/admin/persistent/p/c/ns/x/all_subscription/expireMessages/10"));
        assertEquals(new AdminCursorOperation(Event.Type.MARK_DELETE, null, "p/c/ns", "0x00000000_0x40000000", "s", false),
                AdminCursorOperation.parse("POST", "/admin/namespaces/p/c/ns/0x00000000_0x40000000/clearBacklog/s"));
        assertEquals(new AdminCursorOperation(Event.Type.UNSUBSCRIBE, "non-persistent://p/c/ns/x", null, null, "s", false),
                AdminCursorOperation.parse("DELETE", "/admin/non-persistent/p/c/ns/x/subscription/s"));
        // a v1 namespace's clear-backlog goes on to each bundle's owner, and v2 paths are not v1's
        assertNull(AdminCursorOperation.parse("POST", "/admin/namespaces/p/c/ns/clearBacklog"));
        assertNull(AdminCursorOperation.parse("POST", "/admin/persistent/t/ns/x/subscription/s/skip_all"));
        assertNull(AdminCursorOperation.parse("DELETE", "/admin/persistent/p/c/ns/x"));
    }
}
