package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A consumer the broker disconnects itself (a seek: {@code PersistentSubscription.resetCursor})
 * passes no hook; the client then subscribes again with the same consumer id on the same
 * connection. The plugin closes the old consumer when the new one of its subscription arrives,
 * so that ackstate never sees two consumers on an Exclusive subscription.
 */
class LetGoConsumerTest {
    private static final String TOPIC = "persistent://public/default/seek";

    @TempDir
    Path dir;
    private AckstateInterceptor interceptor;
    private final ServerCnx cnx = mock(ServerCnx.class);
    private final Subscription sub = mock(Subscription.class);
    /** What the broker's subscription holds now. */
    private final List<Consumer> held = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        interceptor = FileInterceptors.started(dir);
        Topic topic = mock(Topic.class);
        when(topic.getName()).thenReturn(TOPIC);
        when(sub.getName()).thenReturn("s");
        when(sub.getTopicName()).thenReturn(TOPIC);
        when(sub.getTopic()).thenReturn(topic);
        when(sub.getConsumers()).thenReturn(held);
    }

    @AfterEach
    void stop() {
        interceptor.close();
    }

    /** An Exclusive consumer of {@link #sub}, with Pulsar's id 0 (each one a new object). */
    private Consumer exclusive(String name) {
        Consumer consumer = mock(Consumer.class);
        when(consumer.getSubscription()).thenReturn(sub);
        when(consumer.consumerName()).thenReturn(name);
        when(consumer.subType()).thenReturn(SubType.Exclusive);
        when(consumer.consumerId()).thenReturn(0L);
        return consumer;
    }

    private List<String> events() throws IOException {
        return FileInterceptors.written(interceptor, dir).stream().map(LetGoConsumerTest::typeAndId).toList();
    }

    private static String typeAndId(String line) {
        int type = line.indexOf("\"type\":\"") + 8;
        int id = line.indexOf("\"consumer_id\":") + 14;
        return line.substring(type, line.indexOf('"', type)) + " " + line.substring(id, line.indexOf(',', id));
    }

    @Test
    void aConsumerTheBrokerLetGoIsClosedBeforeItsSuccessorSubscribes() throws IOException {
        Consumer first = exclusive("c");
        held.add(first);
        interceptor.consumerCreated(cnx, first, null);
        held.remove(first); // the seek disconnected it: no hook
        Consumer again = exclusive("c");
        held.add(again);
        interceptor.consumerCreated(cnx, again, null);
        interceptor.consumerClosed(cnx, again, null);
        List<String> events = events();
        String firstId = events.get(0).split(" ")[1];
        String againId = events.get(2).split(" ")[1];
        assertEquals(List.of("SUBSCRIBE " + firstId, "CLOSE_CONSUMER " + firstId, "SUBSCRIBE " + againId,
                "CLOSE_CONSUMER " + againId), events);
    }

    @Test
    void aConsumerTheBrokerStillHoldsStaysWhenAnotherSubscribes() throws IOException {
        Consumer first = exclusive("c1");
        Consumer second = exclusive("c2");
        held.add(first);
        interceptor.consumerCreated(cnx, first, null);
        held.add(second);
        interceptor.consumerCreated(cnx, second, null);
        assertEquals(List.of("SUBSCRIBE", "SUBSCRIBE"), events().stream().map(e -> e.split(" ")[0]).toList());
    }
}
