package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.apache.pulsar.common.util.collections.ConcurrentLongHashMap;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A consumer's unsubscribe deletes its subscription without a hook
 * ({@code PersistentSubscription.doUnsubscribe}). The plugin watches on the connection's event
 * loop for the subscription to leave its topic and then emits CLOSE_CONSUMER and UNSUBSCRIBE; a
 * consumer of a new subscription of the same name that comes first gets them emitted before its
 * SUBSCRIBE. Here the event loop only collects the watch's looks, which the tests run by hand.
 */
class UnsubscribeTest {
    private static final String TOPIC = "persistent://public/default/unsubscribe";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final ServerCnx cnx = mock(ServerCnx.class);
    private final Topic topic = mock(Topic.class);
    private ConcurrentLongHashMap<CompletableFuture<Consumer>> connected;
    /** The looks the plugin queued on the connection's event loop, not run until a test does. */
    private final List<Runnable> looks = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        interceptor = FileInterceptors.started(dir);
        when(topic.getName()).thenReturn(TOPIC);
        Connections.queuingOn(cnx, looks);
        connected = Connections.connected(cnx);
    }

    @AfterEach
    void stop() {
        interceptor.close();
    }

    /** A subscription named {@code s} of {@link #topic} (each one a new object). */
    private Subscription subscription(List<Consumer> held) {
        Subscription sub = mock(Subscription.class);
        when(sub.getName()).thenReturn("s");
        when(sub.getTopicName()).thenReturn(TOPIC);
        when(sub.getTopic()).thenReturn(topic);
        when(sub.getConsumers()).thenReturn(held);
        return sub;
    }

    /** A connected Shared consumer of {@code sub} with Pulsar's id {@code id}, announced. */
    private Consumer subscribed(Subscription sub, List<Consumer> held, long id) {
        Consumer consumer = mock(Consumer.class);
        when(consumer.getSubscription()).thenReturn(sub);
        when(consumer.consumerName()).thenReturn("c" + id);
        when(consumer.subType()).thenReturn(SubType.Shared);
        when(consumer.consumerId()).thenReturn(id);
        held.add(consumer);
        connected.put(id, CompletableFuture.completedFuture(consumer));
        interceptor.consumerCreated(cnx, consumer, null);
        return consumer;
    }

    private void unsubscribe(long consumerId) {
        BaseCommand command = new BaseCommand().setType(BaseCommand.Type.UNSUBSCRIBE);
        command.setUnsubscribe().setConsumerId(consumerId).setRequestId(1);
        interceptor.onPulsarCommand(command, cnx);
    }

    private List<String> types() throws IOException {
        return FileInterceptors.written(interceptor, dir).stream()
                .map(line -> line.substring(9, line.indexOf('"', 9))).toList();
    }

    @Test
    void theWatchEmitsTheUnsubscribeOnceTheSubscriptionLeftItsTopic() throws IOException {
        List<Consumer> held = new ArrayList<>();
        Subscription sub = subscription(held);
        when(topic.getSubscription("s")).thenReturn(sub);
        subscribed(sub, held, 0);
        unsubscribe(0);
        looks.get(0).run(); // not deleted yet: the look is queued again (on the mock loop: dropped)
        held.clear(); // the broker closes the consumer and deletes the subscription
        when(topic.getSubscription("s")).thenReturn(null);
        looks.get(0).run();
        assertEquals(List.of("SUBSCRIBE", "CLOSE_CONSUMER", "UNSUBSCRIBE"), types());
    }

    @Test
    void aNewSubscriptionOfTheNameWaitsForTheOldOnesUnsubscribe() throws IOException {
        List<Consumer> oldHeld = new ArrayList<>();
        Subscription old = subscription(oldHeld);
        when(topic.getSubscription("s")).thenReturn(old);
        subscribed(old, oldHeld, 0);
        unsubscribe(0);
        oldHeld.clear();
        List<Consumer> newHeld = new ArrayList<>();
        Subscription again = subscription(newHeld);
        when(topic.getSubscription("s")).thenReturn(again); // made again before the watch looked
        subscribed(again, newHeld, 1);
        looks.get(0).run(); // finds the unsubscribe already emitted
        assertEquals(List.of("SUBSCRIBE", "CLOSE_CONSUMER", "UNSUBSCRIBE", "SUBSCRIBE"), types());
    }

    @Test
    void anUnsubscribeTheBrokerRefusedEmitsNothing() throws IOException {
        List<Consumer> held = new ArrayList<>();
        Subscription sub = subscription(held);
        when(topic.getSubscription("s")).thenReturn(sub);
        subscribed(sub, held, 0);
        subscribed(sub, held, 1);
        unsubscribe(0); // refused: another consumer is connected, the subscription stays
        looks.get(0).run();
        assertEquals(List.of("SUBSCRIBE", "SUBSCRIBE"), types());
    }
}
