"""Schemas at the UDF boundary: the state rows fed to the apply UDF and the rows it returns.

The apply UDF (``udfs.apply``) returns one wide row type for everything it produces, tagged by
``kind``, so that one cogrouped pass per micro-batch yields the new state, its projections and
the engine's rejections; the ingest job splits them by ``kind`` and writes each to its table.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import types as T

# kind values of APPLY_OUTPUT
PARTITION, CURSOR, RANGE, BATCH, LEDGER, REJECT = "partition", "cursor", "range", "batch", "ledger", "reject"
UPSERT, DELETE = "upsert", "delete"

# What the UDF reads of the current state: one row per topic partition (kind "partition",
# ``state`` = encoded ledgers) and one per cursor (kind "cursor", ``state`` = encoded cursor).
STATE_INPUT: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("subscription", T.StringType()),
        T.StructField("state", T.BinaryType()),
        T.StructField("last_seq", T.LongType()),
        T.StructField("last_event_time", T.LongType()),
    ]
)

# The event columns the UDF needs (a subset of schemas.events.EVENT_SCHEMA, plus the row id).
APPLY_EVENT_COLUMNS: Final = (
    "_row",
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
)

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
        # range / batch / ledger
        T.StructField("ledger_id", T.LongType()),
        T.StructField("entry_id", T.LongType()),
        T.StructField("lower_entry_id", T.LongType()),
        T.StructField("upper_entry_id", T.LongType()),
        T.StructField("entries", T.LongType()),
        T.StructField("batch_size", T.IntegerType()),
        T.StructField("ack_set", T.ArrayType(T.LongType())),
        T.StructField("acked_count", T.IntegerType()),
        # reject
        T.StructField("row", T.LongType()),
        T.StructField("reason", T.StringType()),
        T.StructField("detail", T.StringType()),
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
