package io.ackstate.interceptor;

import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.stream.Stream;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.broker.service.BrokerService;

/** The plugin as a broker starts it, writing its files into a test's directory, and what it wrote. */
final class FileInterceptors {
    private FileInterceptors() {
    }

    /** Initialised by a mocked broker whose configuration names {@code dir} as the file sink's. */
    static AckstateInterceptor started(Path dir) throws Exception {
        return started(dir, mock(BrokerService.class), new Properties());
    }

    /** As {@link #started(Path)}, with the broker service {@code brokers} and extra settings. */
    static AckstateInterceptor started(Path dir, BrokerService brokers, Properties settings) throws Exception {
        ServiceConfiguration conf = new ServiceConfiguration();
        conf.getProperties().setProperty(AckstateInterceptor.SINK_DIRECTORY, dir.toString());
        conf.getProperties().putAll(settings);
        PulsarService pulsar = mock(PulsarService.class);
        when(pulsar.getConfiguration()).thenReturn(conf);
        when(pulsar.getBrokerService()).thenReturn(brokers);
        AckstateInterceptor interceptor = new AckstateInterceptor();
        interceptor.initialize(pulsar);
        return interceptor;
    }

    /** As {@link #started(Path, BrokerService, Properties)} with no sweep thread: a test runs
     *  {@code sweep()} by hand ({@code ackstateMarkDeleteSweepMillis=0}). */
    static AckstateInterceptor sweptByHand(Path dir, BrokerService brokers) throws Exception {
        Properties settings = new Properties();
        settings.setProperty(AckstateInterceptor.SWEEP_MILLIS, "0");
        return started(dir, brokers, settings);
    }

    /** Every line it wrote but the LOAD_TOPIC each topic object starts with, in file order
     *  ({@link #writtenAll}); the tests of the other events look at those alone. */
    static List<String> written(AckstateInterceptor interceptor, Path dir) throws IOException {
        return writtenAll(interceptor, dir).stream().filter(line -> !line.startsWith(LOAD_TOPIC)).toList();
    }

    private static final String LOAD_TOPIC = "{\"type\":\"LOAD_TOPIC\"";

    /** Every line it wrote, in file order: closing it flushes the queue and renames the open file. */
    static List<String> writtenAll(AckstateInterceptor interceptor, Path dir) throws IOException {
        interceptor.close();
        List<String> lines = new ArrayList<>();
        try (Stream<Path> files = Files.list(dir)) {
            for (Path file : files.sorted().toList()) {
                lines.addAll(Files.readAllLines(file));
            }
        }
        return lines;
    }
}
