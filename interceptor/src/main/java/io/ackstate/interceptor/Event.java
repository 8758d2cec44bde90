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

    Type type();

    /** The event's own fields, between {@code event_time} and {@code event_id}. */
    void fields(EventJson out);

    /** The contract's event types, each with the opening of its lines encoded once. */
    enum Type {
        SUBSCRIBE, CLOSE_CONSUMER, SEND, PUBLISH, DISPATCH, ACK, REDELIVER, RESET_CURSOR, MARK_DELETE, UNSUBSCRIBE,
        LOAD_TOPIC, DELETE_TOPIC, CREATE_SUBSCRIPTION;

        /** {@code {"type":"<name>",} as UTF-8 ({@link EventJson#opening}). */
        final byte[] opening = EventJson.opening(name());
    }

    /** The contract's field names, each encoded once as {@code ,"name":} ({@link EventJson#name}). */
    final class Names {
        static final byte[] CONSUMER_NAME = EventJson.name("consumer_name");
        static final byte[] SUB_TYPE = EventJson.name("sub_type");
        static final byte[] PRIORITY_LEVEL = EventJson.name("priority_level");
        static final byte[] INITIAL_POSITION = EventJson.name("initial_position");
        static final byte[] PRODUCER_NAME = EventJson.name("producer_name");
        static final byte[] SEQUENCE_ID = EventJson.name("sequence_id");
        static final byte[] HIGHEST_SEQUENCE_ID = EventJson.name("highest_sequence_id");
        static final byte[] NUM_MESSAGES = EventJson.name("num_messages");
        static final byte[] LEDGER_ID = EventJson.name("ledger_id");
        static final byte[] ENTRY_ID = EventJson.name("entry_id");
        static final byte[] BATCH_SIZE = EventJson.name("batch_size");
        static final byte[] KEY = EventJson.name("key");
        static final byte[] MESSAGE_IDS = EventJson.name("message_ids");
        /** {@code "ack_type":"..."} whole: an ACK has one of two values. */
        static final byte[] CUMULATIVE = EventJson.stringField("ack_type", "Cumulative");
        static final byte[] INDIVIDUAL = EventJson.stringField("ack_type", "Individual");

        private Names() {
        }
    }

    record Subscribe(PartitionLog partition, long time, long seq, TrackedConsumer consumer, String consumerName,
                     String subType, int priorityLevel, String initialPosition) implements Event {
        @Override
        public Type type() {
            return Type.SUBSCRIBE;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields()).str(Names.CONSUMER_NAME, consumerName).str(Names.SUB_TYPE, subType)
                    .num(Names.PRIORITY_LEVEL, priorityLevel).str(Names.INITIAL_POSITION, initialPosition);
        }
    }

    record CloseConsumer(PartitionLog partition, long time, long seq, TrackedConsumer consumer) implements Event {
        @Override
        public Type type() {
            return Type.CLOSE_CONSUMER;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields());
        }
    }

    record Send(PartitionLog partition, long time, long seq, String producerName, long sequenceId,
                long highestSequenceId, long numMessages) implements Event {
        @Override
        public Type type() {
            return Type.SEND;
        }

        @Override
        public void fields(EventJson out) {
            out.str(Names.PRODUCER_NAME, producerName).num(Names.SEQUENCE_ID, sequenceId)
                    .num(Names.HIGHEST_SEQUENCE_ID, highestSequenceId).num(Names.NUM_MESSAGES, numMessages);
        }
    }

    record Publish(PartitionLog partition, long time, long seq, long ledgerId, long entryId, long batchSize,
                   String producerName, long sequenceId, long highestSequenceId) implements Event {
        @Override
        public Type type() {
            return Type.PUBLISH;
        }

        @Override
        public void fields(EventJson out) {
            out.num(Names.LEDGER_ID, ledgerId).num(Names.ENTRY_ID, entryId).num(Names.BATCH_SIZE, batchSize)
                    .str(Names.PRODUCER_NAME, producerName).num(Names.SEQUENCE_ID, sequenceId)
                    .num(Names.HIGHEST_SEQUENCE_ID, highestSequenceId);
        }
    }

    /** {@code batchSize} below 0: the entry's metadata could not be read, so neither it nor the key is known. */
    record Dispatch(PartitionLog partition, long time, long seq, TrackedConsumer consumer, long ledgerId,
                    long entryId, int batchSize, String key) implements Event {
        @Override
        public Type type() {
            return Type.DISPATCH;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields()).num(Names.LEDGER_ID, ledgerId).num(Names.ENTRY_ID, entryId);
            if (batchSize >= 0) {
                out.num(Names.BATCH_SIZE, batchSize).str(Names.KEY, key);
            }
        }
    }

    /** {@code ack} is the broker's copy made for the interceptor (ServerCnx.handleAck): nobody changes it. */
    record Ack(PartitionLog partition, long time, long seq, TrackedConsumer consumer, CommandAck ack)
            implements Event {
        @Override
        public Type type() {
            return Type.ACK;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields())
                    .fields(ack.getAckType() == CommandAck.AckType.Cumulative ? Names.CUMULATIVE : Names.INDIVIDUAL)
                    .ids(Names.MESSAGE_IDS, ack);
        }
    }

    /** {@code command} is the hook's own copy: the broker reuses the one it decoded into. */
    record Redeliver(PartitionLog partition, long time, long seq, TrackedConsumer consumer,
                     CommandRedeliverUnacknowledgedMessages command) implements Event {
        @Override
        public Type type() {
            return Type.REDELIVER;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(consumer.consumerFields())
                    .ids(Names.MESSAGE_IDS, command);
        }
    }

    /**
     * RESET_CURSOR or MARK_DELETE: the broker moved a subscription's cursor itself, and this is
     * its mark-delete position once the operation was done. CREATE_SUBSCRIPTION: the admin API
     * made the subscription, with no consumer, and this is where its cursor was put.
     * {@code subscriptionField} is {@code "subscription":"..."}, encoded by the hook
     * ({@link EventJson#subscriptionField}).
     */
    record CursorMoved(PartitionLog partition, long time, long seq, Type type, byte[] subscriptionField,
                       long ledgerId, long entryId) implements Event {
        @Override
        public void fields(EventJson out) {
            out.fields(subscriptionField).num(Names.LEDGER_ID, ledgerId).num(Names.ENTRY_ID, entryId);
        }
    }

    /**
     * LOAD_TOPIC or DELETE_TOPIC: the broker made a new object of the topic partition (it
     * loaded it), or deleted the partition (its subscriptions, ledgers and producers). No field
     * beyond the common ones.
     */
    record WholeTopic(PartitionLog partition, long time, long seq, Type type) implements Event {
        @Override
        public void fields(EventJson out) {
        }
    }

    /** UNSUBSCRIBE: the broker deleted the subscription ({@code subscriptionField} as in {@link CursorMoved}). */
    record Unsubscribed(PartitionLog partition, long time, long seq, byte[] subscriptionField) implements Event {
        @Override
        public Type type() {
            return Type.UNSUBSCRIBE;
        }

        @Override
        public void fields(EventJson out) {
            out.fields(subscriptionField);
        }
    }
}
