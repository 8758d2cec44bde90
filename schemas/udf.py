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
# a `producers` row; a `send_receipts` row; the late answer to a SEND of an earlier batch
PRODUCER, RECEIPT, LATE_RECEIPT = "producer", "receipt", "late_receipt"
UPSERT, DELETE = "upsert", "delete"

# What the UDF reads of the current state: one row per topic partition (kind "partition",
# ``state`` = encoded ledgers, ``producers_state`` = encoded engine.dedup.Producers) and one per
# cursor (kind "cursor", ``state`` = encoded cursor).
STATE_INPUT: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("subscription", T.StringType()),
        T.StructField("state", T.BinaryType()),
        T.StructField("last_seq", T.LongType()),
        T.StructField("last_event_time", T.LongType()),
        T.StructField("producers_state", T.BinaryType()),
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
        # partition: the producers' encoded state
        T.StructField("producers_state", T.BinaryType()),
        # producer (last_event_time above) / receipt and late_receipt (ledger_id, entry_id
        # above: the receipt position, null while the send waits for its PUBLISH; row above:
        # the SEND's row; a late_receipt has only seq and the answer)
        T.StructField("producer_name", T.StringType()),
        T.StructField("highest_sequence_pushed", T.LongType()),
        T.StructField("highest_sequence_persisted", T.LongType()),
        T.StructField("msg_drop_count", T.LongType()),
        T.StructField("seq", T.LongType()),
        T.StructField("event_time", T.LongType()),
        T.StructField("sequence_id", T.LongType()),
        T.StructField("highest_sequence_id", T.LongType()),
        T.StructField("dedup_status", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("dropped", T.BooleanType()),
        T.StructField("event_id", T.StringType()),  # receipt: the SEND's
    ]
)
