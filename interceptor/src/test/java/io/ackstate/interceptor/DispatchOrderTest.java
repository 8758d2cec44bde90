package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.doAnswer;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.never;
import static org.mockito.Mockito.verify;
import static org.mockito.Mockito.when;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.EventLoop;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.PendingAcksMap;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.ManagedLedger;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;
import org.apache.pulsar.common.util.collections.ConcurrentLongHashMap;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The DISPATCH hook against the broker's pending acks: a message written after a redeliver-all
 * took it back, or after an ack removed the replay it carries, must leave ackstate where the
 * broker is (in the redelivery set, or acknowledged; not pending).
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
        EventLoop loop = mock(EventLoop.class);
        doAnswer(call -> queued.add(call.getArgument(0))).when(loop).execute(any());
        Channel channel = mock(Channel.class);
        when(channel.eventLoop()).thenReturn(loop);
        ChannelHandlerContext ctx = mock(ChannelHandlerContext.class);
        when(ctx.channel()).thenReturn(channel);
        when(cnx.ctx()).thenReturn(ctx);
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

    /** The same on a persistent topic (whose entries the plugin had all seen published), its
     *  subscription's mark-delete position at 3:7. */
    private Consumer persistentSharedConsumer(boolean holds) {
        return persistentSharedConsumer(holds, 7);
    }

    private Consumer persistentSharedConsumer(boolean holds, long markDeleteEntry) {
        PersistentTopic topic = mock(PersistentTopic.class);
        when(topic.getName()).thenReturn(TOPIC);
        ManagedLedger ledger = mock(ManagedLedger.class);
        when(ledger.getLastConfirmedEntry()).thenReturn(PositionFactory.create(3, 10));
        when(topic.getManagedLedger()).thenReturn(ledger);
        ManagedCursor cursor = mock(ManagedCursor.class);
        when(cursor.getMarkDeletedPosition()).thenReturn(PositionFactory.create(3, markDeleteEntry));
        PersistentSubscription sub = mock(PersistentSubscription.class);
        when(sub.getCursor()).thenReturn(cursor);
        Consumer consumer = consumer(topic, sub, holds);
        when(consumer.cnx()).thenReturn(cnx);
        return consumer;
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

    private static ByteBuf entry() {
        MessageMetadata meta = new MessageMetadata().setProducerName("p").setSequenceId(1).setPublishTime(1L);
        return Commands.serializeMetadataAndPayload(Commands.ChecksumType.Crc32c, meta,
                Unpooled.wrappedBuffer(new byte[] {1}));
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
        interceptor.messageDispatched(cnx, sharedConsumer(true), 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH"), lines().stream().map(DispatchOrderTest::type).toList());
    }

    /** The connection's consumers, where a command that names a consumer finds it. */
    private void connect(Consumer consumer) {
        ConcurrentLongHashMap<CompletableFuture<Consumer>> consumers = ConcurrentLongHashMap.<CompletableFuture<Consumer>>newBuilder().build();
        consumers.put(consumer.consumerId(), CompletableFuture.completedFuture(consumer));
        when(cnx.getConsumers()).thenReturn(consumers);
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
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
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
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
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
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        runQueued();
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "REDELIVER", "REDELIVER", "DISPATCH", "REDELIVER", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void withoutARecentRedeliverAllThePendingAcksAreNotLookedUp() throws IOException {
        Consumer consumer = sharedConsumer(false);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
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
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "CLOSE_CONSUMER"), lines().stream().map(DispatchOrderTest::type).toList());
    }

    /** The dispatcher hands entry 3:7 to the consumer, before its pending acks get it. */
    private void send(Consumer consumer) {
        Entry entry = mock(Entry.class);
        when(entry.getLedgerId()).thenReturn(3L);
        when(entry.getEntryId()).thenReturn(7L);
        interceptor.beforeSendMessage(consumer.getSubscription(), entry, null, new MessageMetadata(), consumer);
    }

    /** The consumer's ack of 3:7 (with an ack set: of one message of the batch) arrives, and the
     *  broker applies it. */
    private void ack(Consumer consumer, boolean withAckSet) {
        applied(consumer, arriving(consumer, withAckSet));
    }

    /** The ack's command reaches the connection, before the broker applies it. */
    private CommandAck arriving(Consumer consumer, boolean withAckSet) {
        BaseCommand command = new BaseCommand().setType(BaseCommand.Type.ACK);
        CommandAck ack = command.setAck().setConsumerId(consumer.consumerId()).setAckType(CommandAck.AckType.Individual);
        var id = ack.addMessageId().setLedgerId(3).setEntryId(7);
        if (withAckSet) {
            id.addAckSet(0b10L);
        }
        connect(consumer);
        interceptor.onPulsarCommand(command, cnx);
        return ack;
    }

    /** The broker applied the ack: its hook gets a copy (ServerCnx.handleAck). */
    private void applied(Consumer consumer, CommandAck ack) {
        interceptor.messageAcked(cnx, consumer, new CommandAck().copyFrom(ack));
    }

    /** Entry 3:7 sent and written once, then sent again (a replay), not yet written; its pending
     *  acks hold it when the ack arrives, and after the broker applied it, as told. */
    private Consumer replaying(boolean whenAckArrives, boolean afterAck) {
        Consumer consumer = persistentSharedConsumer(false);
        when(consumer.getPendingAcks().contains(3L, 7L)).thenReturn(whenAckArrives, afterAck);
        interceptor.consumerCreated(cnx, consumer, Map.of());
        send(consumer);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        send(consumer);
        return consumer;
    }

    private List<String> types() throws IOException {
        return lines().stream().map(DispatchOrderTest::type).toList();
    }

    @Test
    void aReplayPendingWhenTheAckArrivedIsDispatchedThenAcked() throws IOException {
        // the client held the ack of the copy it got before the redelivery; the broker applied it
        // after the pending acks got the replay but before the event loop wrote it
        Consumer consumer = replaying(true, false);
        ack(consumer, false);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        List<String> lines = lines();
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH", "ACK"),
                lines.stream().map(DispatchOrderTest::type).toList());
        String ack = lines.get(4);
        assertTrue(ack.contains("\"ack_type\":\"Individual\""), ack);
        assertTrue(ack.contains("\"message_ids\":[{\"ledger_id\":3,\"entry_id\":7}]"), ack);
        assertEquals(consumerId(lines.get(3)), consumerId(ack), "both name the same consumer");
    }

    @Test
    void aReplayAddedWhileTheAckWasAppliedAndGoneAfterItIsDispatchedThenAcked() throws IOException {
        Consumer consumer = replaying(false, false);
        ack(consumer, false);
        queued.remove(0).run(); // the arrival's marker: the write was queued after it
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH", "ACK"), types());
    }

    @Test
    void aReplayAddedWhileTheAckWasAppliedAndStillPendingIsADispatchAlone() throws IOException {
        Consumer consumer = replaying(false, true);
        ack(consumer, false);
        queued.remove(0).run();
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"), types());
    }

    /** Entry 3:7 sent and written once; its ack arrives, the dispatcher sends it again, the
     *  broker applies the ack; the replay is not yet written. */
    private Consumer replayedWhileTheAckIsApplied(long markDeleteEntry) {
        Consumer consumer = persistentSharedConsumer(false, markDeleteEntry);
        interceptor.consumerCreated(cnx, consumer, Map.of());
        send(consumer);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        CommandAck ack = arriving(consumer, false);
        send(consumer);
        applied(consumer, ack);
        return consumer;
    }

    @Test
    void aReplaySentAfterTheAckArrivedAndGoneAfterItIsDispatchedThenAcked() throws IOException {
        // the mark-delete position (3:5) is below it: the dispatcher's read cannot have dropped it
        Consumer consumer = replayedWhileTheAckIsApplied(5);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry()); // queued before the applied ack's marker
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH", "ACK"), types());
    }

    @Test
    void aReplaySentAfterTheAckArrivedAndWrittenAfterItIsADispatchAlone() throws IOException {
        Consumer consumer = replayedWhileTheAckIsApplied(5);
        runQueued();
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"), types());
    }

    @Test
    void aReplaySentAfterTheAckArrivedAtOrBelowTheMarkDeleteIsADispatchAlone() throws IOException {
        // the ack moved the mark-delete position to it and may have started the dispatcher's next
        // read, which drops it from the pending acks (PendingAcksMap.removeAllUpTo) without its
        // count: absent from the pending acks says nothing then. Taken as added after the ack,
        // which a real broker shows far more often
        Consumer consumer = replayedWhileTheAckIsApplied(7);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"), types());
    }

    @Test
    void aReplayAddedAfterTheAckIsADispatchAlone() throws IOException {
        // seen on a real broker: the ack was applied before the pending acks got the replay, so it
        // removed nothing and the broker counts the replay; by the write, the dispatcher's next
        // read may have dropped it from the pending acks (PendingAcksMap.removeAllUpTo, no count
        // taken back). The write was queued after both markers
        Consumer consumer = replaying(false, false);
        ack(consumer, false);
        runQueued();
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"), types());
    }

    @Test
    void aReplayGoneBeforeTheAckArrivedIsADispatchAlone() throws IOException {
        // added and queued for writing before the ack arrived, yet not pending then: the
        // dispatcher's read had dropped it (the mark-delete position passed it); the ack removed nothing
        Consumer consumer = replaying(false, false);
        ack(consumer, false);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"), types());
    }

    @Test
    void anAckBeforeTheReplayWasSentIsNotLookedUp() throws IOException {
        Consumer consumer = persistentSharedConsumer(false);
        interceptor.consumerCreated(cnx, consumer, Map.of());
        send(consumer);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        ack(consumer, false);
        send(consumer);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void aBatchIndexAckLeavesTheReplayPending() throws IOException {
        Consumer consumer = replaying(false, false);
        ack(consumer, true);
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "DISPATCH", "ACK", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void aFirstDeliveryIsNotKeptInFlight() throws IOException {
        Consumer consumer = persistentSharedConsumer(false);
        interceptor.consumerCreated(cnx, consumer, Map.of());
        send(consumer);
        ack(consumer, false); // no client acks what it was not sent: nothing may mark it
        interceptor.messageDispatched(cnx, consumer, 3, 7, entry());
        verify(consumer.getPendingAcks(), never()).contains(3L, 7L);
        assertEquals(List.of("SUBSCRIBE", "ACK", "DISPATCH"),
                lines().stream().map(DispatchOrderTest::type).toList());
    }

    @Test
    void consumersWithoutPendingAcksAreNeverTakenBack() {
        Consumer failover = mock(Consumer.class);
        when(failover.getPendingAcks()).thenReturn(null);
        assertEquals(false, AckstateInterceptor.takenBack(failover, 3, 7));
    }
}
