package io.ackstate.interceptor;

import javax.servlet.ServletRequest;
import javax.servlet.ServletResponse;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.intercept.BrokerInterceptor;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.common.api.proto.BaseCommand;

/**
 * An interceptor that does nothing: the floor of {@code ackstate bench --interceptor}, and the
 * no-op hooks that {@link AckstateInterceptor} builds on (the interface leaves them abstract).
 *
 * <p>A broker with any interceptor loaded already works more per message than one without: it
 * copies every {@code CommandAck} for the interceptor, calls {@code onPulsarCommand} for each
 * command in and out, and switches the thread's context class loader around each hook. The
 * bench loads this class from a copy of the NAR (its descriptor rewritten) to tell that cost
 * apart from what {@link AckstateInterceptor} adds.
 */
public class EmptyInterceptor implements BrokerInterceptor {
    @Override
    public void onPulsarCommand(BaseCommand command, ServerCnx cnx) {
    }

    @Override
    public void onConnectionClosed(ServerCnx cnx) {
    }

    @Override
    public void onWebserviceRequest(ServletRequest request) {
    }

    @Override
    public void onWebserviceResponse(ServletRequest request, ServletResponse response) {
    }

    @Override
    public void initialize(PulsarService pulsarService) throws Exception {
    }

    @Override
    public void close() {
    }
}
