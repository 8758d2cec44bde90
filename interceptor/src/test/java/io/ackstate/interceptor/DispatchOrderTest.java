package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.never;
import static org.mockito.Mockito.verify;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The DISPATCH hook against the broker's pending acks: a message written after a redeliver-all
 * took it back must leave ackstate where the broker is (in the redelivery set, not pending).
 * An ack that overtakes a replay's write: {@link AckOvertakingReplayTest}.
 */
class DispatchOrderTest {
    private static final String TOPIC = "persistent://public/default/orders";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final ServerCnx cnx = mock(ServerCnx.class);
    /** The tasks queued on the connection's event loop, not yet run. */
    private final List<Runnable> queued = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        Connections.queuingOn(cnx, queued);
        interceptor = FileInterceptors.started(dir);
    }

    @AfterEach
    void stop() {
        interceptor.close();
    }

    /** A Shared consumer whose pending acks answer {@code holds} for every entry. */
    private static Consumer sharedConsumer(boolean holds) {
        Topic topic = mock(Topic.class);
        when(topic.getName()).thenReturn(TOPIC);
        return consumer(topic, holds);
    }

    private static Consumer consumer(Topic topic, boolean holds) {
        return consumer(topic, mock(Subscription.class), holds);
    }

    private static Consumer consumer(Topic topic, Subscription sub, boolean holds) {
        when(sub.getName()).thenReturn("sub");
        when(sub.getTopicName()).thenReturn(TOPIC);
        when(sub.getTopic()).thenReturn(topic);
        PendingAcksMap pending = mock(PendingAcksMap.class);
        when(pending.contains(3L, 7L)).thenReturn(holds);
        Consumer consumer = mock(Consumer.class);
        when(consumer.getSubscription()).thenReturn(sub);
        when(consumer.consumerName()).thenReturn("c1");
        when(consumer.subType()).thenReturn(SubType.Shared);
        when(consumer.consumerId()).thenReturn(11L);
        when(consumer.getPendingAcks()).thenReturn(pending);
        return consumer;
    }

    private List<String> lines() throws IOException {
        return FileInterceptors.written(interceptor, dir);
    }

    private static String type(String line) {
        int at = line.indexOf("\"type\":\"") + 8;
        return line.substring(at, line.indexOf('"', at));
    }

    private static String consumerId(String line) {
        int at = line.indexOf("\"consumer_id\":") + 14;
        return line.substring(at, line.indexOf(',', at));
    }

    @Test
    void aMessageStillPendingIsADispatchAlone() throws IOException {
        interceptor.messageDispatched(cnx, sharedConsumer(true), 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH"), lines().stream().map(DispatchOrderTest::type).toList());
    }

    /** The connection's consumers, where a command that names a consumer finds it. */
    private void connect(Consumer consumer) {
        Connections.connected(cnx, consumer);
    }

    /** The client's redeliver-all, as the broker's connection hands it to the interceptor. */
    private void redeliverAll(Consumer consumer) {
        connect(consumer);
        BaseCommand command = new BaseCommand().setType(BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES);
        command.setRedeliverUnacknowledgedMessages().setConsumerId(consumer.consumerId());
        interceptor.onPulsarCommand(command, cnx);
    }

    @Test
    void aMessageTheBrokerTookBackIsDispatchedThenRedelivered() throws IOException {
        Consumer consumer = sharedConsumer(false);
        redeliverAll(consumer);
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        List<String> lines = lines();
        assertEquals(List.of("SUBSCRIBE", "REDELIVER", "DISPATCH", "REDELIVER"),
                lines.stream().map(DispatchOrderTest::type).toList());
        assertTrue(lines.get(1).contains("\"message_ids\":[]"), lines.get(1));
        String redeliver = lines.get(3);
        assertTrue(redeliver.contains("\"message_ids\":[{\"ledger_id\":3,\"entry_id\":7}]"), redeliver);
        assertEquals(consumerId(lines.get(2)), consumerId(redeliver), "both name the same consumer");
    }

    /** The event loop runs the tasks queued so far: the writes queued before the redeliver-all. */
    private void runQueued() {
        List<Runnable> tasks = new ArrayList<>(queued);
        queued.clear();
        tasks.forEach(Runnable::run);
    }

    @Test
    void aReplayAfterTheRedeliverAllIsADispatchAlone() throws IOException {
        // the redeliver-all is handled, an ack moves the mark-delete position past entry 3:7, the
        // replay sends 3:7 again (added to the pending acks, counted as unacked), and the
        // dispatcher's next read drops it from the pending acks (PendingAcksMap.removeAllUpTo)
        // before the event loop writes it: the broker still counts it unacked
        Consumer consumer = sharedConsumer(false);
        redeliverAll(consumer);
        runQueued();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "REDELIVER", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void eachRedeliverAllMarksTheWritesQueuedBeforeIt() throws IOException {
        Consumer consumer = sharedConsumer(false);
        redeliverAll(consumer);
        redeliverAll(consumer);
        queued.remove(0).run(); // the first marker: writes queued before the second still follow
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        runQueued();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "REDELIVER", "REDELIVER", "DISPATCH", "REDELIVER", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void withoutARecentRedeliverAllThePendingAcksAreNotLookedUp() throws IOException {
        Consumer consumer = sharedConsumer(false);
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "DISPATCH"), lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void aWriteAfterItsConsumerClosedDoesNotReviveIt() throws IOException {
        // a dropped connection leaves its consumers in the connection's map
        // (ServerCnx.channelInactive), so a write queued before the close still calls the hook
        Consumer consumer = sharedConsumer(true);
        interceptor.consumerCreated(cnx, consumer, Map.of());
        interceptor.consumerClosed(cnx, consumer, Map.of());
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "CLOSE_CONSUMER"), lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void consumersWithoutPendingAcksAreNeverTakenBack() {
        Consumer failover = mock(Consumer.class);
        when(failover.getPendingAcks()).thenReturn(null);
        assertEquals(false, AckstateInterceptor.takenBack(failover, 3, 7));
    }
}
