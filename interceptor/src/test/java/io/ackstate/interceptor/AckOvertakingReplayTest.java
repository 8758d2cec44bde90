package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.times;
import static org.mockito.Mockito.verify;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.lang.reflect.Constructor;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.ManagedLedger;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.PendingAcksMap.PendingAcksAddHandler;
import org.apache.pulsar.broker.service.PendingAcksMap.PendingAcksRemoveHandler;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * An ack that overtakes a replay's write, against the broker's own pending acks
 * ({@code PendingAcksMap}, real here): the plugin watches the entries an ack command takes out
 * of them ({@link PendingAckRemovals}), and a replay the ack took out before its write is
 * dispatched then acked, as the broker no longer counts it; any other replay is a DISPATCH alone.
 */
class AckOvertakingReplayTest {
    private static final String TOPIC = "persistent://public/default/orders";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final ServerCnx cnx = mock(ServerCnx.class);
    private final PendingAcksRemoveHandler brokerHandler = mock(PendingAcksRemoveHandler.class);
    private Consumer consumer;
    private PendingAcksMap pending;

    @BeforeEach
    void start() throws Exception {
        Connections.queuingOn(cnx, new ArrayList<>());
        interceptor = FileInterceptors.started(dir);
        consumer = sharedConsumer();
        interceptor.consumerCreated(cnx, consumer, Map.of());
        send();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry()); // the first delivery, written
    }

    @AfterEach
    void stop() {
        PendingAckRemovals.commandArriving(false);
        interceptor.close();
    }

    /** A Shared consumer of a persistent topic with real pending acks, whose dispatcher's remove
     *  handler is {@link #brokerHandler} (Key_Shared's has one). */
    private Consumer sharedConsumer() throws Exception {
        PersistentTopic topic = mock(PersistentTopic.class);
        when(topic.getName()).thenReturn(TOPIC);
        ManagedLedger ledger = mock(ManagedLedger.class);
        when(ledger.getLastConfirmedEntry()).thenReturn(PositionFactory.create(3, 10));
        when(topic.getManagedLedger()).thenReturn(ledger);
        ManagedCursor cursor = mock(ManagedCursor.class);
        when(cursor.getMarkDeletedPosition()).thenReturn(PositionFactory.create(3, 5));
        PersistentSubscription sub = mock(PersistentSubscription.class);
        when(sub.getCursor()).thenReturn(cursor);
        when(sub.getName()).thenReturn("sub");
        when(sub.getTopicName()).thenReturn(TOPIC);
        when(sub.getTopic()).thenReturn(topic);
        Consumer shared = mock(Consumer.class);
        when(shared.getSubscription()).thenReturn(sub);
        when(shared.consumerName()).thenReturn("c1");
        when(shared.subType()).thenReturn(SubType.Shared);
        when(shared.consumerId()).thenReturn(11L);
        when(shared.cnx()).thenReturn(cnx);
        Constructor<PendingAcksMap> make = PendingAcksMap.class.getDeclaredConstructor(Consumer.class,
                Supplier.class, Supplier.class);
        make.setAccessible(true);
        Supplier<PendingAcksAddHandler> noAddHandler = () -> null;
        Supplier<PendingAcksRemoveHandler> removeHandler = () -> brokerHandler;
        pending = make.newInstance(shared, noAddHandler, removeHandler);
        when(shared.getPendingAcks()).thenReturn(pending);
        Connections.connected(cnx, shared);
        return shared;
    }

    /** The dispatcher sends entry 3:7 to the consumer ({@code beforeSendMessage}), then adds it to
     *  the pending acks ({@code Consumer.sendMessages}); its write is queued after that. */
    private void send() {
        Entry entry = mock(Entry.class);
        when(entry.getLedgerId()).thenReturn(3L);
        when(entry.getEntryId()).thenReturn(7L);
        interceptor.beforeSendMessage(consumer.getSubscription(), entry, null, new MessageMetadata(), consumer);
        pending.addPendingAckIfAllowed(3, 7, 1, 0);
    }

    /** A redeliver request of 3:7 takes it out of the pending acks: the replay that follows. */
    private void redeliveredAndSentAgain() {
        command(BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES);
        pending.remove(3, 7);
        send();
    }

    /** A command of {@code type} reaches the connection (its hook runs before the broker handles it). */
    private BaseCommand command(BaseCommand.Type type) {
        BaseCommand command = new BaseCommand().setType(type);
        if (type == BaseCommand.Type.ACK) {
            command.setAck().setConsumerId(consumer.consumerId()).setAckType(CommandAck.AckType.Individual)
                    .addMessageId().setLedgerId(3).setEntryId(7);
        } else if (type == BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES) {
            command.setRedeliverUnacknowledgedMessages().setConsumerId(consumer.consumerId())
                    .addMessageId().setLedgerId(3).setEntryId(7);
        } else {
            command.setFlow().setConsumerId(consumer.consumerId()).setMessagePermits(1);
        }
        interceptor.onPulsarCommand(command, cnx);
        return command;
    }

    /** The client's held ack of 3:7 arrives and the broker applies it: {@code Consumer.removePendingAcks}
     *  takes 3:7 out of the pending acks if they hold it, then the hook gets a copy. */
    private void acked() {
        BaseCommand command = command(BaseCommand.Type.ACK);
        pending.remove(3, 7);
        interceptor.messageAcked(cnx, consumer, new CommandAck().copyFrom(command.getAck()));
    }

    private List<String> types() throws IOException {
        return FileInterceptors.written(interceptor, dir).stream().map(line -> {
            int at = line.indexOf("\"type\":\"") + 8;
            return line.substring(at, line.indexOf('"', at));
        }).toList();
    }

    @Test
    void aReplayTheAckTookOutBeforeItsWriteIsDispatchedThenAcked() throws IOException {
        redeliveredAndSentAgain();
        acked();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        List<String> lines = FileInterceptors.written(interceptor, dir);
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "REDELIVER", "ACK", "DISPATCH", "ACK"), types());
        String ack = lines.get(5);
        assertTrue(ack.contains("\"message_ids\":[{\"ledger_id\":3,\"entry_id\":7}]"), ack);
    }

    @Test
    void aReplayAddedAfterTheAckIsADispatchAlone() throws IOException {
        // the ack found nothing to take out: the broker counts the replay the dispatcher adds next
        command(BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES);
        pending.remove(3, 7);
        acked();
        send();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "REDELIVER", "ACK", "DISPATCH"), types());
    }

    @Test
    void aReplayTheDispatchersReadDroppedIsADispatchAlone() throws IOException {
        // the mark-delete position passed it: PendingAcksMap.removeAllUpTo drops it and the broker
        // keeps counting it, even while the connection's thread is still on an ack command
        redeliveredAndSentAgain();
        command(BaseCommand.Type.ACK);
        pending.removeAllUpTo(3, 7);
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "REDELIVER", "DISPATCH"), types());
    }

    @Test
    void aReplayARedeliverRequestTookOutIsNotAnAcks() throws IOException {
        redeliveredAndSentAgain();
        command(BaseCommand.Type.ACK);
        command(BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES); // the next command on the thread
        pending.remove(3, 7);
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "REDELIVER", "REDELIVER", "DISPATCH"), types());
    }

    @Test
    void aReplayWrittenBeforeTheAckIsADispatchThenTheAck() throws IOException {
        redeliveredAndSentAgain();
        interceptor.messageDispatched(cnx, consumer, 3, 7, Connections.entry());
        acked();
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "REDELIVER", "DISPATCH", "ACK"), types());
    }

    @Test
    void aFirstDeliveryTheAckTookOutIsNotKeptInFlight() throws IOException {
        // no client acks what it was not sent; an entry above the last sent is a first delivery
        Entry next = mock(Entry.class);
        when(next.getLedgerId()).thenReturn(3L);
        when(next.getEntryId()).thenReturn(8L);
        interceptor.beforeSendMessage(consumer.getSubscription(), next, null, new MessageMetadata(), consumer);
        pending.addPendingAckIfAllowed(3, 8, 1, 0);
        command(BaseCommand.Type.ACK);
        pending.remove(3, 8);
        interceptor.messageDispatched(cnx, consumer, 3, 8, Connections.entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "DISPATCH"), types());
    }

    @Test
    void theDispatchersOwnHandlerStillGetsEveryRemoval() {
        redeliveredAndSentAgain();
        pending.removeAllUpTo(3, 9);
        pending.forEachAndClose((ledger, entry, batchSize, hash) -> { });
        // the redeliver request's single removal, then the dispatcher's read's, in a batch
        verify(brokerHandler, times(2)).handleRemoving(consumer, 3, 7, 0, false);
        verify(brokerHandler, times(2)).startBatch(); // removeAllUpTo's and forEachAndClose's
        verify(brokerHandler, times(2)).endBatch();
    }
}
