package io.ackstate.interceptor;

import io.prometheus.client.Collector;
import io.prometheus.client.CollectorRegistry;
import io.prometheus.client.CounterMetricFamily;
import java.util.List;

/**
 * The plugin's counters on the broker's {@code /metrics} page, which includes Prometheus'
 * default registry: {@code ackstate_interceptor_dropped_events_total} (events lost because the
 * queue was full or a write failed) and {@code ackstate_interceptor_written_events_total}.
 */
final class DropMetrics extends Collector {
    private final EventQueue queue;

    DropMetrics(EventQueue queue) {
        this.queue = queue;
    }

    @Override
    public List<MetricFamilySamples> collect() {
        return List.of(
                new CounterMetricFamily("ackstate_interceptor_dropped_events",
                        "Events the ackstate interceptor dropped (queue full or write failed): lost to ackstate",
                        queue.dropped()),
                new CounterMetricFamily("ackstate_interceptor_written_events",
                        "Events the ackstate interceptor wrote to its sink", queue.written()));
    }

    void registerDefault() {
        CollectorRegistry.defaultRegistry.register(this);
    }

    void unregisterDefault() {
        CollectorRegistry.defaultRegistry.unregister(this);
    }
}
