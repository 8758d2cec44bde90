"""Schemas at the UDF boundary: the state rows fed to the apply UDF and the rows it returns.

The apply UDF (``udfs.apply``) returns one wide row type for everything it produces, tagged by
``kind``, so that one cogrouped pass per micro-batch yields the new state, its projections and
the engine's rejections; the ingest job splits them by ``kind`` and writes each to its table.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import types as T

# kind values of APPLY_OUTPUT (and of STATE_INPUT: partitions and cursors): the name of the
# table a row goes to (jobs.ingest.projections), so one name serves the row and its table
PARTITION, CURSOR = "topic_partitions", "cursors"
RANGE, BATCH, LEDGER, REJECT = "ack_ranges", "batch_acks", "ledgers", "rejected_events"
CONSUMER, PENDING = "consumers", "pending_acks"
REDELIVERY, ACTIVE_CHANGE = "redeliveries", "active_consumer_changes"
PRODUCER, RECEIPT = "producers", "send_receipts"
LATE_RECEIPT = "send_receipt_answers"  # the answer to a SEND of an earlier batch: updates its receipt
# a subscription an UNSUBSCRIBE deleted: every row of it that the batch does not write is removed
UNSUBSCRIBED = "unsubscribed"
UPSERT, DELETE = "upsert", "delete"

# What the UDF reads of the current state: one row per topic partition (kind PARTITION,
# ``state`` = encoded ledgers, ``producers_state`` = encoded engine.dedup.Producers) and one per
# cursor (kind CURSOR, ``state`` = encoded cursor).
STATE_INPUT: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("subscription", T.StringType()),
        T.StructField("state", T.BinaryType()),
        T.StructField("last_seq", T.LongType()),
        T.StructField("last_event_time", T.LongType()),
        # kind CURSOR: the encoded consumers of the subscription (engine.subscription)
        T.StructField("subscription_state", T.BinaryType()),
        T.StructField("producers_state", T.BinaryType()),
        # kind PARTITION: the first ledger a requested ledger trim keeps (null: none asked);
        # applied before the batch's events (udfs.apply, udfs.trim)
        T.StructField("first_retained_ledger", T.LongType()),
    ]
)

# The event columns the UDF needs (a subset of schemas.events.EVENT_SCHEMA, plus the row id).
APPLY_EVENT_COLUMNS: Final = (
    "_row",
    "event_id",
    "topic",
    "partition",
    "seq",
    "event_time",
    "type",
    "subscription",
    "ack_type",
    "ledger_id",
    "entry_id",
    "batch_size",
    "sub_type",
    "initial_position",
    "message_ids",
    "consumer_id",
    "consumer_name",
    "priority_level",
    "ack_timeout_ms",
    "negative_ack_delay_ms",
    "max_redeliver_count",
    "key",
    "producer_name",
    "sequence_id",
    "highest_sequence_id",
    "num_messages",
    "connection_id",
    "completed_at",
    "chunk_id",
    "num_chunks_from_msg",
    "marker",
)

PACKED_EVENTS: Final = "events"
"""The one column that carries ``APPLY_EVENT_COLUMNS`` to the apply UDF, as a struct, beside the
key columns (``udfs.columns.unpacked_events`` flattens it). PySpark's worker builds each group's
table column by column, and for every column it lists all the batch's columns again: with the
event columns flat, that was 1.6 s of Python per 1,250-group batch of 1M events; with one
struct column, 0.15 s."""

APPLY_OUTPUT: Final = T.StructType(
    [
        T.StructField("kind", T.StringType(), False),
        T.StructField("op", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("subscription", T.StringType()),
        # cursor
        T.StructField("sub_type", T.StringType()),
        T.StructField("mark_delete_ledger_id", T.LongType()),
        T.StructField("mark_delete_entry_id", T.LongType()),
        T.StructField("state", T.BinaryType()),
        T.StructField("msg_backlog", T.LongType()),
        T.StructField("non_contiguous_deleted_ranges", T.LongType()),
        T.StructField("partial_batch_entries", T.LongType()),
        T.StructField("state_changed", T.BooleanType()),
        # partition
        T.StructField("last_seq", T.LongType()),
        T.StructField("last_event_time", T.LongType()),
        T.StructField("ledgers", T.BinaryType()),
        T.StructField("applied", T.LongType()),
        T.StructField("stale", T.LongType()),
        # range / batch / ledger (a ledger row: ``ledger_id``, its first and last entry, ``entries``)
        T.StructField("ledger_id", T.LongType()),
        T.StructField("entry_id", T.LongType()),
        T.StructField("lower_entry_id", T.LongType()),
        T.StructField("upper_entry_id", T.LongType()),
        T.StructField("first_entry_id", T.LongType()),
        T.StructField("last_entry_id", T.LongType()),
        T.StructField("entries", T.LongType()),
        T.StructField("batch_size", T.IntegerType()),
        T.StructField("ack_set", T.ArrayType(T.LongType())),
        T.StructField("acked_count", T.IntegerType()),
        # reject (``reason`` also for redelivery rows)
        T.StructField("row", T.LongType()),
        T.StructField("reason", T.StringType()),
        T.StructField("detail", T.StringType()),
        # cursor: the subscription's consumers, encoded
        T.StructField("subscription_state", T.BinaryType()),
        # consumer / pending / redelivery / active_change
        T.StructField("consumer_id", T.LongType()),
        T.StructField("consumer_name", T.StringType()),
        T.StructField("priority_level", T.IntegerType()),
        T.StructField("connected", T.BooleanType()),
        T.StructField("is_active", T.BooleanType()),
        T.StructField("unacked_messages", T.LongType()),
        T.StructField("blocked", T.BooleanType()),
        T.StructField("subscribed_at", T.LongType()),
        T.StructField("closed_at", T.LongType()),
        T.StructField("ack_timeout_ms", T.LongType()),
        T.StructField("negative_ack_delay_ms", T.LongType()),
        T.StructField("max_redeliver_count", T.IntegerType()),
        T.StructField("attached_implicitly", T.BooleanType()),
        T.StructField("dispatched_at", T.LongType()),
        T.StructField("redelivery_count", T.IntegerType()),
        T.StructField("sticky_key_hash", T.IntegerType()),
        T.StructField("ack_timeout_at", T.LongType()),
        T.StructField("requested_at", T.LongType()),
        T.StructField("due_at", T.LongType()),
        T.StructField("dead_letter", T.BooleanType()),
        T.StructField("delivered_at", T.LongType()),
        T.StructField("seq", T.LongType()),
        T.StructField("event_time", T.LongType()),
        T.StructField("previous_consumer_id", T.LongType()),
        T.StructField("previous_consumer_name", T.StringType()),
        T.StructField("new_consumer_id", T.LongType()),
        T.StructField("new_consumer_name", T.StringType()),
        T.StructField("effective_at", T.LongType()),
        # partition: the producers' encoded state
        T.StructField("producers_state", T.BinaryType()),
        # producer (last_event_time above) / receipt and late_receipt (ledger_id, entry_id
        # above: the receipt position, null while the send waits for its PUBLISH; row above:
        # the SEND's row; a late_receipt has only seq and the answer)
        T.StructField("producer_name", T.StringType()),
        T.StructField("highest_sequence_pushed", T.LongType()),
        T.StructField("highest_sequence_persisted", T.LongType()),
        T.StructField("msg_drop_count", T.LongType()),
        T.StructField("sequence_id", T.LongType()),
        T.StructField("highest_sequence_id", T.LongType()),
        T.StructField("dedup_status", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("dropped", T.BooleanType()),
        T.StructField("event_id", T.StringType()),  # receipt: the SEND's
    ]
)

# ---- Failover active consumer (udfs.failover) -----------------------------------------------
# The columns of the `consumers` table the active-consumer UDF reads, grouped by (topic, partition).
FAILOVER_INPUT_COLUMNS: Final = (
    "topic",
    "partition",
    "subscription",
    "consumer_id",
    "consumer_name",
    "sub_type",
    "priority_level",
    "connected",
    "subscribed_at",
)

# One row per input consumer row: ``is_active`` true for the active consumer of an Exclusive or
# Failover subscription, false for its other consumers (connected or not), null for the
# consumers of Shared and Key_Shared subscriptions, which have no active consumer.
FAILOVER_OUTPUT: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("subscription", T.StringType(), False),
        T.StructField("consumer_id", T.LongType(), False),
        T.StructField("is_active", T.BooleanType()),
    ]
)
