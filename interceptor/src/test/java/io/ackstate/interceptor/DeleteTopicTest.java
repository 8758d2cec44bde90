package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.doAnswer;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerImpl;
import org.apache.pulsar.broker.service.BrokerService;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.TopicEventsListener.EventStage;
import org.apache.pulsar.broker.service.TopicEventsListener.TopicEvent;
import org.apache.pulsar.broker.service.nonpersistent.NonPersistentTopic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * DELETE_TOPIC: the broker deleted a topic partition. Every deletion ends with the topic removed
 * from the broker's topics ({@code BrokerService.removeTopicFromCache}: UNLOAD), after its
 * managed ledger was deleted ({@code ManagedLedgerImpl.asyncDelete} fenced it for deletion);
 * the admin API's deletion of a topic not loaded passes DELETE alone. The plugin emits one
 * DELETE_TOPIC whichever it sees; a plain unload emits none, but a non-persistent topic's
 * state goes with its object. Topics are seen through the sweep, run by hand.
 */
class DeleteTopicTest {
    private static final String TOPIC = "persistent://public/default/deleted";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final BrokerService brokers = mock(BrokerService.class);
    private final ManagedLedgerImpl ledger = mock(ManagedLedgerImpl.class);

    @BeforeEach
    void start() throws Exception {
        when(ledger.getLastConfirmedEntry()).thenReturn(PositionFactory.create(3, 9));
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.LedgerOpened);
        interceptor = FileInterceptors.sweptByHand(dir, brokers);
    }

    @AfterEach
    void stop() {
        interceptor.close();
    }

    /** A persistent topic object of {@link #TOPIC} with one durable subscription, seen by a sweep. */
    private PersistentTopic seen() {
        PersistentTopic topic = mock(PersistentTopic.class);
        when(topic.getName()).thenReturn(TOPIC);
        when(topic.getManagedLedger()).thenReturn(ledger);
        Map<String, PersistentSubscription> subscriptions = new LinkedHashMap<>();
        ManagedCursor cursor = mock(ManagedCursor.class);
        when(cursor.isDurable()).thenReturn(true);
        when(cursor.getMarkDeletedPosition()).thenReturn(PositionFactory.create(3, 4));
        when(cursor.getPersistentMarkDeletedPosition()).thenReturn(PositionFactory.create(3, 4));
        PersistentSubscription sub = mock(PersistentSubscription.class);
        when(sub.getName()).thenReturn("s");
        when(sub.getTopic()).thenReturn(topic);
        when(sub.getCursor()).thenReturn(cursor);
        subscriptions.put("s", sub);
        when(topic.getSubscriptions()).thenReturn(subscriptions);
        sweepFinds(topic);
        interceptor.sweep();
        return topic;
    }

    private void sweepFinds(Topic topic) {
        doAnswer(call -> {
            call.<Consumer<Topic>>getArgument(0).accept(topic);
            return null;
        }).when(brokers).forEachTopic(any());
    }

    private void brokerSays(String topic, TopicEvent event) {
        interceptor.handleEvent(topic, event, EventStage.BEFORE, null);
        interceptor.handleEvent(topic, event, EventStage.SUCCESS, null);
    }

    private List<String> types() throws IOException {
        return FileInterceptors.writtenAll(interceptor, dir).stream()
                .map(line -> line.substring(9, line.indexOf('"', 9))).toList();
    }

    @Test
    void aTopicWhoseManagedLedgerWasDeletedIsDeletedOnce() throws IOException {
        seen();
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.FencedForDeletion);
        brokerSays(TOPIC, TopicEvent.UNLOAD); // PersistentTopic.delete: removeTopicFromCache
        brokerSays(TOPIC, TopicEvent.DELETE); // then the admin API's deletion completes
        assertEquals(List.of("LOAD_TOPIC", "DELETE_TOPIC"), types());
    }

    @Test
    void theDeletionMaySucceedBeforeTheUnload() throws IOException {
        seen();
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.FencedForDeletion);
        brokerSays(TOPIC, TopicEvent.DELETE); // the object is still loaded: the unload tells
        brokerSays(TOPIC, TopicEvent.UNLOAD);
        assertEquals(List.of("LOAD_TOPIC", "DELETE_TOPIC"), types());
    }

    @Test
    void anUnloadKeepsTheTopicAndADeletionWhileUnloadedDeletesIt() throws IOException {
        seen();
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.Closed);
        brokerSays(TOPIC, TopicEvent.UNLOAD); // a plain unload: the managed ledger was closed
        brokerSays(TOPIC, TopicEvent.DELETE); // then deleted from the metadata store alone
        assertEquals(List.of("LOAD_TOPIC", "DELETE_TOPIC"), types());
    }

    @Test
    void aTopicNeverSeenHereIsDeletedAndItsNextObjectLoads() throws IOException {
        brokerSays(TOPIC, TopicEvent.DELETE);
        seen(); // made again: a new managed ledger
        assertEquals(List.of("DELETE_TOPIC", "LOAD_TOPIC"), types());
    }

    @Test
    void aTopicMadeAgainIsDeletedAgain() throws IOException {
        seen();
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.FencedForDeletion);
        brokerSays(TOPIC, TopicEvent.UNLOAD);
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.LedgerOpened);
        seen();
        when(ledger.getState()).thenReturn(ManagedLedgerImpl.State.FencedForDeletion);
        brokerSays(TOPIC, TopicEvent.UNLOAD);
        assertEquals(List.of("LOAD_TOPIC", "DELETE_TOPIC", "LOAD_TOPIC", "DELETE_TOPIC"), types());
    }

    @Test
    void aNonPersistentTopicsStateGoesWithItsObject() throws IOException {
        String name = "non-persistent://public/default/gone";
        NonPersistentTopic topic = mock(NonPersistentTopic.class);
        when(topic.getName()).thenReturn(name);
        Subscription sub = mock(Subscription.class);
        when(sub.getName()).thenReturn("s");
        when(sub.getTopicName()).thenReturn(name);
        when(sub.getTopic()).thenReturn(topic);
        org.apache.pulsar.broker.service.Consumer consumer = mock(org.apache.pulsar.broker.service.Consumer.class);
        when(consumer.getSubscription()).thenReturn(sub);
        when(consumer.consumerName()).thenReturn("c");
        when(consumer.subType()).thenReturn(SubType.Shared);
        interceptor.consumerCreated(mock(ServerCnx.class), consumer, null);
        brokerSays(name, TopicEvent.UNLOAD); // its subscriptions were in the object alone
        brokerSays(name, TopicEvent.DELETE); // no second one
        assertEquals(List.of("LOAD_TOPIC", "SUBSCRIBE", "CLOSE_CONSUMER", "DELETE_TOPIC"), types());
    }
}
