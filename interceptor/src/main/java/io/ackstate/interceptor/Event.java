package io.ackstate.interceptor;

import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandRedeliverUnacknowledgedMessages;

/**
 * One event as a hook captures it: primitives and references to objects that nobody changes
 * afterwards. The hooks run on the broker's I/O threads, so they build no text; the writer
 * thread turns each event into its JSON line ({@link EventLines}).
 *
 * <p>{@code time} is the event's wall-clock time in ms, {@code seq} the partition's clock value,
 * both taken by the hook under the partition's lock.
 */
sealed interface Event {
    PartitionLog partition();

    long time();

    long seq();

    String type();

    /** The event's own fields, between {@code event_time} and {@code event_id}. */
    void fields(EventJson out);

    record Subscribe(PartitionLog partition, long time, long seq, TrackedConsumer consumer, String consumerName,
                     String subType, int priorityLevel, String initialPosition) implements Event {
        @Override
        public String type() {
            return "SUBSCRIBE";
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields()).str("consumer_name", consumerName).str("sub_type", subType)
                    .num("priority_level", priorityLevel).str("initial_position", initialPosition);
        }
    }

    record CloseConsumer(PartitionLog partition, long time, long seq, TrackedConsumer consumer) implements Event {
        @Override
        public String type() {
            return "CLOSE_CONSUMER";
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields());
        }
    }

    record Send(PartitionLog partition, long time, long seq, String producerName, long sequenceId,
                long highestSequenceId, long numMessages) implements Event {
        @Override
        public String type() {
            return "SEND";
        }

        @Override
        public void fields(EventJson out) {
            out.str("producer_name", producerName).num("sequence_id", sequenceId)
                    .num("highest_sequence_id", highestSequenceId).num("num_messages", numMessages);
        }
    }

    record Publish(PartitionLog partition, long time, long seq, long ledgerId, long entryId, long batchSize,
                   String producerName, long sequenceId, long highestSequenceId) implements Event {
        @Override
        public String type() {
            return "PUBLISH";
        }

        @Override
        public void fields(EventJson out) {
            out.num("ledger_id", ledgerId).num("entry_id", entryId).num("batch_size", batchSize)
                    .str("producer_name", producerName).num("sequence_id", sequenceId)
                    .num("highest_sequence_id", highestSequenceId);
        }
    }

    /** {@code batchSize} below 0: the entry's metadata could not be read, so neither it nor the key is known. */
    record Dispatch(PartitionLog partition, long time, long seq, TrackedConsumer consumer, long ledgerId,
                    long entryId, int batchSize, String key) implements Event {
        @Override
        public String type() {
            return "DISPATCH";
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields()).num("ledger_id", ledgerId).num("entry_id", entryId);
            if (batchSize >= 0) {
                out.num("batch_size", batchSize).str("key", key);
            }
        }
    }

    /** {@code ack} is the broker's copy made for the interceptor (ServerCnx.handleAck): nobody changes it. */
    record Ack(PartitionLog partition, long time, long seq, TrackedConsumer consumer, CommandAck ack)
            implements Event {
        @Override
        public String type() {
            return "ACK";
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields())
                    .str("ack_type", ack.getAckType() == CommandAck.AckType.Cumulative ? "Cumulative" : "Individual")
                    .ids("message_ids", ack);
        }
    }

    /** {@code command} is the hook's own copy: the broker reuses the one it decoded into. */
    record Redeliver(PartitionLog partition, long time, long seq, TrackedConsumer consumer,
                     CommandRedeliverUnacknowledgedMessages command) implements Event {
        @Override
        public String type() {
            return "REDELIVER";
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields())
                    .ids("message_ids", command);
        }
    }
}
