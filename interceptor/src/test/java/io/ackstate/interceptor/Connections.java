package io.ackstate.interceptor;

import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.doAnswer;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.EventLoop;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;
import org.apache.pulsar.common.util.collections.ConcurrentLongHashMap;

/** A mocked broker connection, as the hooks see one, and an entry it writes. */
final class Connections {
    private Connections() {
    }

    /** {@code cnx}'s event loop keeps the tasks queued on it in {@code queued}, for a test to run. */
    static void queuingOn(ServerCnx cnx, List<Runnable> queued) {
        EventLoop loop = mock(EventLoop.class);
        doAnswer(call -> queued.add(call.getArgument(0))).when(loop).execute(any());
        Channel channel = mock(Channel.class);
        when(channel.eventLoop()).thenReturn(loop);
        ChannelHandlerContext ctx = mock(ChannelHandlerContext.class);
        when(ctx.channel()).thenReturn(channel);
        when(cnx.ctx()).thenReturn(ctx);
    }

    /** The connection's consumers, where a command that names a consumer finds it. */
    static ConcurrentLongHashMap<CompletableFuture<Consumer>> connected(ServerCnx cnx, Consumer... consumers) {
        ConcurrentLongHashMap<CompletableFuture<Consumer>> map =
                ConcurrentLongHashMap.<CompletableFuture<Consumer>>newBuilder().build();
        for (Consumer consumer : consumers) {
            map.put(consumer.consumerId(), CompletableFuture.completedFuture(consumer));
        }
        when(cnx.getConsumers()).thenReturn(map);
        return map;
    }

    /** One message's entry as the dispatcher writes it: metadata, then a one-byte payload. */
    static ByteBuf entry() {
        MessageMetadata meta = new MessageMetadata().setProducerName("p").setSequenceId(1).setPublishTime(1L);
        return Commands.serializeMetadataAndPayload(Commands.ChecksumType.Crc32c, meta,
                Unpooled.wrappedBuffer(new byte[] {1}));
    }
}
