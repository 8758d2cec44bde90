package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.doAnswer;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.ManagedLedger;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.BrokerService;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.apache.pulsar.compaction.Compactor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The mark-delete sweep: the broker moves a cursor forwards with no hook (message TTL's expiry
 * monitor), and the plugin emits a MARK_DELETE with the position it reads. The sweep is run by
 * hand here ({@code ackstateMarkDeleteSweepMillis=0} starts no thread). It also emits the
 * UNSUBSCRIBE of a subscription the broker deleted by itself (an inactive subscription's
 * expiry), once, whichever of it and a watched path sees the delete first.
 */
class SweepTest {
    private static final String TOPIC = "persistent://public/default/swept";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final PersistentTopic topic = mock(PersistentTopic.class);
    private final Map<String, PersistentSubscription> subscriptions = new LinkedHashMap<>();
    private final BrokerService brokers = mock(BrokerService.class);

    @BeforeEach
    void start() throws Exception {
        when(brokers.getTopicReference(TOPIC)).thenReturn(Optional.of(topic));
        when(topic.getSubscription(any())).thenAnswer(call -> subscriptions.get(call.<String>getArgument(0)));
        sweeping(topic);
        when(topic.getName()).thenReturn(TOPIC);
        when(topic.getSubscriptions()).thenReturn(subscriptions);
        ManagedLedger ledger = mock(ManagedLedger.class);
        when(ledger.getLastConfirmedEntry()).thenReturn(PositionFactory.create(3, 9));
        when(topic.getManagedLedger()).thenReturn(ledger);
        interceptor = FileInterceptors.sweptByHand(dir, brokers);
    }

    @AfterEach
    void stop() {
        interceptor.close();
    }

    /** A subscription of {@link #topic} whose cursor's mark-delete is read through {@code cursor}. */
    private ManagedCursor subscription(String name, boolean durable) {
        return subscription(topic, subscriptions, name, durable);
    }

    private static ManagedCursor subscription(PersistentTopic of, Map<String, PersistentSubscription> into,
                                              String name, boolean durable) {
        ManagedCursor cursor = mock(ManagedCursor.class);
        when(cursor.isDurable()).thenReturn(durable);
        PersistentSubscription sub = mock(PersistentSubscription.class);
        when(sub.getName()).thenReturn(name);
        when(sub.getTopicName()).thenReturn(TOPIC);
        when(sub.getTopic()).thenReturn(of);
        when(sub.getCursor()).thenReturn(cursor);
        into.put(name, sub);
        return cursor;
    }

    /** The topic objects each sweep finds, one per sweep; the last one stays. */
    private void sweeping(Topic... each) {
        List<Topic> left = new ArrayList<>(List.of(each));
        doAnswer(call -> {
            call.<Consumer<Topic>>getArgument(0).accept(left.size() > 1 ? left.remove(0) : left.get(0));
            return null;
        }).when(brokers).forEachTopic(any());
    }

    /** A new object of {@link #TOPIC}, as the broker makes when it loads the topic again. */
    private PersistentTopic reloaded(Map<String, PersistentSubscription> recovered) {
        PersistentTopic again = mock(PersistentTopic.class);
        when(again.getName()).thenReturn(TOPIC);
        ManagedLedger ledger = topic.getManagedLedger();
        when(again.getManagedLedger()).thenReturn(ledger);
        when(again.getSubscriptions()).thenReturn(recovered);
        return again;
    }

    /** The cursor's mark-delete moved to {@code ledger:entry}, and was persisted there. */
    private static void markDelete(ManagedCursor cursor, long ledger, long entry) {
        when(cursor.getMarkDeletedPosition()).thenReturn(PositionFactory.create(ledger, entry));
        when(cursor.getPersistentMarkDeletedPosition()).thenReturn(PositionFactory.create(ledger, entry));
    }

    /** Each line as {@code TYPE subscription ledger:entry}. */
    private List<String> written() throws IOException {
        return FileInterceptors.written(interceptor, dir).stream().map(line -> {
            String type = line.substring(9, line.indexOf('"', 9));
            String sub = field(line, "subscription");
            return type + " " + sub + (line.contains("\"ledger_id\"")
                    ? " " + number(line, "ledger_id") + ":" + number(line, "entry_id") : "");
        }).toList();
    }

    private static String field(String line, String name) {
        int at = line.indexOf("\"" + name + "\":\"") + name.length() + 4;
        return line.substring(at, line.indexOf('"', at));
    }

    private static String number(String line, String name) {
        int at = line.indexOf("\"" + name + "\":") + name.length() + 3;
        int end = at;
        while (end < line.length() && (Character.isDigit(line.charAt(end)) || line.charAt(end) == '-')) {
            end++;
        }
        return line.substring(at, end);
    }

    @Test
    void aMarkDeleteMovedForwardsWithoutAHookIsEmittedOnce() throws IOException {
        ManagedCursor cursor = subscription("s", true);
        markDelete(cursor, 3, 4);
        interceptor.sweep(); // the first reading only records
        markDelete(cursor, 3, 9); // the expiry monitor mark-deleted
        interceptor.sweep();
        interceptor.sweep(); // nothing moved since
        assertEquals(List.of("MARK_DELETE s 3:9"), written());
    }

    @Test
    void anExpiryAsTheTopicLoadedIsEmittedRightAfterItsLoadTopic() throws Exception {
        // the TTL policy's expiry ran as the topic loaded: one subscription's mark-delete is
        // persisted and its timestamp set; the other's is set in memory, the expiry's
        // asyncMarkDelete still making the cursor's ledger (no timestamp yet)
        ManagedCursor expired = subscription("expired", true);
        ManagedCursor persisting = subscription("persisting", true);
        ManagedCursor kept = subscription("kept", true);
        ManagedCursor earliest = subscription("earliest", true);
        markDelete(expired, 3, 7);
        AckstateInterceptor.MARK_DELETE_ADVANCED.setLong(subscriptions.get("expired"), 1_700_000_000_000L);
        markDelete(persisting, 3, 6);
        when(persisting.getPersistentMarkDeletedPosition()).thenReturn(PositionFactory.create(3, 1));
        markDelete(kept, 3, 2); // where the broker recovered it
        // a consumer is making this one at Earliest: behind the position it was persisted at
        markDelete(earliest, 3, -1);
        when(earliest.getPersistentMarkDeletedPosition()).thenReturn(PositionFactory.create(3, 9));
        interceptor.sweep(); // the first look at the loaded topic
        markDelete(kept, 3, 4); // moved after the load: the sweep's own MARK_DELETE
        interceptor.sweep();
        interceptor.sweep();
        assertEquals(List.of("LOAD_TOPIC", "MARK_DELETE", "MARK_DELETE", "MARK_DELETE"), allTypes());
        assertEquals(List.of("MARK_DELETE expired 3:7", "MARK_DELETE persisting 3:6", "MARK_DELETE kept 3:4"),
                written());
    }

    @Test
    void aMoveBackwardsIsLeftToTheResetsOwnEvent() throws IOException {
        ManagedCursor cursor = subscription("s", true);
        markDelete(cursor, 3, 6);
        interceptor.sweep();
        markDelete(cursor, 3, 2); // a seek: its watch emits RESET_CURSOR
        interceptor.sweep();
        markDelete(cursor, 3, 5); // forwards from the position read last
        interceptor.sweep();
        assertEquals(List.of("MARK_DELETE s 3:5"), written());
    }

    @Test
    void readersAndTheCompactionCursorAreNotSwept() throws IOException {
        ManagedCursor reader = subscription("reader", false);
        ManagedCursor compaction = subscription(Compactor.COMPACTION_SUBSCRIPTION, true);
        for (ManagedCursor cursor : List.of(reader, compaction)) {
            markDelete(cursor, 3, 1);
        }
        interceptor.sweep();
        for (ManagedCursor cursor : List.of(reader, compaction)) {
            markDelete(cursor, 3, 8);
        }
        interceptor.sweep();
        assertEquals(List.of(), written());
    }

    @Test
    void aSubscribeRecordsTheMarkDeleteItStartsFrom() throws IOException {
        ManagedCursor cursor = subscription("s", true);
        markDelete(cursor, 3, 4);
        consumerOf(subscriptions.get("s"), SubType.Exclusive);
        markDelete(cursor, 3, 7); // moved before the sweep's first look: still emitted
        interceptor.sweep();
        assertEquals(List.of("SUBSCRIBE s", "MARK_DELETE s 3:7"), written());
    }

    private void consumerOf(Subscription sub, SubType type) {
        org.apache.pulsar.broker.service.Consumer consumer = mock(org.apache.pulsar.broker.service.Consumer.class);
        when(consumer.getSubscription()).thenReturn(sub);
        when(consumer.consumerName()).thenReturn("c");
        when(consumer.subType()).thenReturn(type);
        interceptor.consumerCreated(mock(ServerCnx.class), consumer, null);
    }

    /** The type of every line written, LOAD_TOPIC included. */
    private List<String> allTypes() throws IOException {
        return FileInterceptors.writtenAll(interceptor, dir).stream()
                .map(line -> line.substring(9, line.indexOf('"', 9))).toList();
    }

    /** The admin API answered {@code DELETE .../subscription/s} with 204. */
    private void adminDeleted(String name) {
        HttpServletRequest request = mock(HttpServletRequest.class);
        when(request.getMethod()).thenReturn("DELETE");
        when(request.getRequestURI()).thenReturn("/admin/v2/persistent/public/default/swept/subscription/" + name);
        HttpServletResponse response = mock(HttpServletResponse.class);
        when(response.getStatus()).thenReturn(204);
        interceptor.onWebserviceResponse(request, response);
    }

    /** An admin reset-cursor of subscription s, as the broker's web filters see it. */
    private static HttpServletRequest resetRequest() {
        HttpServletRequest request = mock(HttpServletRequest.class);
        when(request.getMethod()).thenReturn("POST");
        when(request.getRequestURI()).thenReturn("/admin/v2/persistent/public/default/swept/subscription/s/resetcursor");
        return request;
    }

    private void answered(HttpServletRequest request, int status) {
        HttpServletResponse response = mock(HttpServletResponse.class);
        when(response.getStatus()).thenReturn(status);
        interceptor.onWebserviceResponse(request, response);
    }

    @Test
    void aResetBelowAcksTheSweepNeverReadIsLeftToItsResetCursor() throws IOException {
        ManagedCursor cursor = subscription("s", true);
        markDelete(cursor, 3, 1);
        interceptor.sweep();
        markDelete(cursor, 3, 8); // the consumer's acks, between two sweeps
        HttpServletRequest request = resetRequest();
        interceptor.onWebserviceRequest(request);
        markDelete(cursor, 3, 4); // the broker reset the cursor back, above the sweep's 3:1
        interceptor.sweep(); // before the answer: a MARK_DELETE 3:4 here would read as a move forwards
        answered(request, 204);
        interceptor.sweep();
        assertEquals(List.of("RESET_CURSOR s 3:4"), written());
    }

    @Test
    void aRefusedResetLetsTheSweepGoOn() throws IOException {
        ManagedCursor cursor = subscription("s", true);
        markDelete(cursor, 3, 1);
        interceptor.sweep();
        HttpServletRequest request = resetRequest();
        interceptor.onWebserviceRequest(request);
        answered(request, 412); // refused: nothing moved
        markDelete(cursor, 3, 6); // the expiry monitor
        interceptor.sweep();
        assertEquals(List.of("MARK_DELETE s 3:6"), written());
    }

    @Test
    void aSubscriptionTheBrokerDeletedByItselfIsUnsubscribedOnce() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep();
        subscriptions.remove("s"); // checkInactiveSubscriptions: sub.delete()
        interceptor.sweep();
        interceptor.sweep();
        adminDeleted("s"); // a watched path that comes later finds it emitted
        assertEquals(List.of("UNSUBSCRIBE s"), written());
    }

    @Test
    void aWatchedPathsUnsubscribeIsNotEmittedAgainByTheSweep() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep();
        subscriptions.remove("s");
        adminDeleted("s");
        interceptor.sweep();
        assertEquals(List.of("UNSUBSCRIBE s"), written());
    }

    @Test
    void aNewSubscriptionOfTheNameComesAfterTheOldOnesUnsubscribe() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep();
        markDelete(subscription("s", true), 3, 9); // deleted and made again between two sweeps
        consumerOf(subscriptions.get("s"), SubType.Exclusive);
        interceptor.sweep(); // the new one's first reading was its SUBSCRIBE
        markDelete(subscriptions.get("s").getCursor(), 3, 10);
        interceptor.sweep();
        assertEquals(List.of("UNSUBSCRIBE s", "SUBSCRIBE s", "MARK_DELETE s 3:10"), written());
    }

    @Test
    void aSubscriptionMadeAgainWithoutAConsumerIsReadAfresh() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep();
        markDelete(subscription("s", true), 3, 2);
        interceptor.sweep(); // the old one's UNSUBSCRIBE
        interceptor.sweep(); // the new one's first reading
        markDelete(subscriptions.get("s").getCursor(), 3, 3);
        interceptor.sweep();
        assertEquals(List.of("UNSUBSCRIBE s", "MARK_DELETE s 3:3"), written());
    }

    @Test
    void eachTopicObjectStartsWithLoadTopicAndItsSubscriptionsAreReadAfresh() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep(); // the first object: LOAD_TOPIC, then the reading
        // the broker unloads the topic and loads it again: a new object, its cursors recovered
        Map<String, PersistentSubscription> recovered = new LinkedHashMap<>();
        PersistentTopic again = reloaded(recovered);
        ManagedCursor cursor = subscription(again, recovered, "s", true);
        markDelete(cursor, 3, 4);
        consumerOf(recovered.get("s"), SubType.Exclusive);
        markDelete(cursor, 3, 6);
        sweeping(again);
        interceptor.sweep(); // the old object's subscription was not deleted: no UNSUBSCRIBE
        assertEquals(List.of("LOAD_TOPIC", "LOAD_TOPIC", "SUBSCRIBE", "MARK_DELETE"), allTypes());
    }

    @Test
    void anUnloadedTopicObjectSeenAgainLoadsNothing() throws IOException {
        markDelete(subscription("s", true), 3, 4);
        interceptor.sweep(); // loaded as the first object
        sweeping(reloaded(new LinkedHashMap<>()), topic);
        interceptor.sweep(); // the new object: LOAD_TOPIC
        interceptor.sweep(); // the old object again (a watch that began before the unload): nothing
        assertEquals(List.of("LOAD_TOPIC", "LOAD_TOPIC"), allTypes());
    }
}
