package io.ackstate.interceptor;

import org.apache.pulsar.broker.service.Consumer;

/**
 * What a SUBSCRIBE said of a consumer, so that later events name the same consumer.
 *
 * @param consumer the broker's object, compared by identity ({@code Consumer.equals} compares
 *                 Pulsar's per-connection id and the client's address, which a later consumer
 *                 can share)
 * @param id the plugin's broker-wide consumer id
 * @param fullTopic the topic partition's full Pulsar name, to find its consumers on unload
 * @param consumerFields {@code "subscription":"...","consumer_id":n}, quoted once
 */
record TrackedConsumer(Consumer consumer, long id, String fullTopic, PartitionLog partition, String consumerFields) {
}
