"""Warehouse tables (CONTRACT.md section 2): schemas, keys and layout hints.

`cursors` is the source of truth of a subscription's ack state; `ack_ranges` and `batch_acks`
are exact projections of it. Keys are what MERGE matches on and what a batch rewrites; the
layout hint says how a table is clustered so that one topic partition's rows stay together
(the unit of work of every micro-batch, DESIGN.md "Scale-out").

Columns are only ever added, never renamed or dropped (CONTRACT.md).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import types as T

_STRING = T.StringType()
_LONG = T.LongType()
_INT = T.IntegerType()
_BINARY = T.BinaryType()
_TIMESTAMP = T.TimestampType()
_DOUBLE = T.DoubleType()


def _col(name: str, data_type: T.DataType, nullable: bool = True) -> T.StructField:
    return T.StructField(name, data_type, nullable=nullable)


def _partition_key() -> list[T.StructField]:
    return [_col("topic", _STRING, False), _col("partition", _INT, False)]


def _subscription_key() -> list[T.StructField]:
    return [*_partition_key(), _col("subscription", _STRING, False)]


def _lineage() -> list[T.StructField]:
    """Which streaming query and batch wrote the row, and when (idempotent writes, debugging)."""
    return [_col("query_id", _STRING), _col("batch_id", _LONG), _col("updated_at", _TIMESTAMP)]


# Internal per-partition state: the replay guard (`last_seq`) and the ledger list.
TOPIC_PARTITIONS: Final = T.StructType(
    [
        *_partition_key(),
        _col("last_seq", _LONG),
        _col("last_event_time", _LONG),
        _col("ledgers", _BINARY),
        *_lineage(),
    ]
)

CURSORS: Final = T.StructType(
    [
        *_subscription_key(),
        _col("sub_type", _STRING),
        _col("mark_delete", _STRING),  # "L:E"
        _col("mark_delete_ledger_id", _LONG),
        _col("mark_delete_entry_id", _LONG),
        _col("state", _BINARY),  # encoded, exact ack state (engine)
        _col("state_format", _INT),
        _col("msg_backlog", _LONG),
        _col("non_contiguous_deleted_ranges", _LONG),
        _col("partial_batch_entries", _LONG),
        _col("last_seq", _LONG),
        _col("last_event_time", _LONG),
        *_lineage(),
    ]
)

ACK_RANGES: Final = T.StructType(
    [
        *_subscription_key(),
        _col("ledger_id", _LONG),
        _col("lower_entry_id", _LONG),
        _col("upper_entry_id", _LONG),
        _col("range", _STRING),  # "(3:4..3:7]", open-closed as Pulsar prints it
        _col("entries", _LONG),
    ]
)

BATCH_ACKS: Final = T.StructType(
    [
        *_subscription_key(),
        _col("ledger_id", _LONG),
        _col("entry_id", _LONG),
        _col("position", _STRING),  # "L:E"
        _col("batch_size", _INT),
        _col("ack_set", T.ArrayType(_LONG)),  # Pulsar words, set = unacked
        _col("acked_count", _INT),
    ]
)

LEDGERS: Final = T.StructType(
    [
        *_partition_key(),
        _col("ledger_id", _LONG),
        _col("first_entry_id", _LONG),
        _col("last_entry_id", _LONG),
        _col("entries", _LONG),
    ]
)

REJECTED_EVENTS: Final = T.StructType(
    [
        _col("event_id", _STRING),
        _col("topic", _STRING),
        _col("partition", _INT),
        _col("seq", _LONG),
        _col("type", _STRING),
        _col("subscription", _STRING),
        _col("reason", _STRING, False),  # schemas.validation.REASONS
        _col("detail", _STRING),
        _col("raw", _STRING),  # the input record as received
        _col("query_id", _STRING),
        _col("batch_id", _LONG),
        _col("rejected_at", _TIMESTAMP),
    ]
)
# The columns jobs.validate produces; the ingest job adds the batch lineage.
REJECTED_LINEAGE_COLUMNS: Final[tuple[str, ...]] = ("query_id", "batch_id", "rejected_at")
REJECTED_EVENT_COLUMNS: Final[tuple[str, ...]] = tuple(
    f.name for f in REJECTED_EVENTS.fields if f.name not in REJECTED_LINEAGE_COLUMNS
)

INGEST_BATCHES: Final = T.StructType(
    [
        _col("query_id", _STRING),
        _col("batch_id", _LONG),
        _col("input_rows", _LONG),
        _col("applied_rows", _LONG),
        _col("rejected_rows", _LONG),
        _col("stale_rows", _LONG),
        _col("duplicate_rows", _LONG),
        _col("partitions_touched", _LONG),
        _col("cursors_touched", _LONG),
        _col("duration_ms", _LONG),
        _col("rows_per_second", _DOUBLE),
        _col("started_at", _TIMESTAMP),
        _col("finished_at", _TIMESTAMP),
    ]
)

# Not yet built (CONTRACT.md section 2 names them; their schemas come with their features):
# consumers, pending_acks, redeliveries, active_consumer_changes, producers, send_receipts.

TABLES: Final[dict[str, T.StructType]] = {
    "topic_partitions": TOPIC_PARTITIONS,
    "cursors": CURSORS,
    "ack_ranges": ACK_RANGES,
    "batch_acks": BATCH_ACKS,
    "ledgers": LEDGERS,
    "rejected_events": REJECTED_EVENTS,
    "ingest_batches": INGEST_BATCHES,
}

# MERGE keys: one row per key. Append-only tables without a natural key map to ().
TABLE_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "topic_partitions": ("topic", "partition"),
    "cursors": ("topic", "partition", "subscription"),
    "ack_ranges": ("topic", "partition", "subscription", "ledger_id", "lower_entry_id"),
    "batch_acks": ("topic", "partition", "subscription", "ledger_id", "entry_id"),
    "ledgers": ("topic", "partition", "ledger_id"),
    "rejected_events": (),
    "ingest_batches": ("query_id", "batch_id"),
}
APPEND_ONLY: Final[frozenset[str]] = frozenset({"rejected_events", "ingest_batches"})

# Layout hint: Delta liquid-clustering columns (or Z-order columns where clustering is not
# available). State is clustered by topic partition, the unit every batch rewrites.
TABLE_CLUSTERING: Final[dict[str, tuple[str, ...]]] = {
    "topic_partitions": ("topic", "partition"),
    "cursors": ("topic", "partition"),
    "ack_ranges": ("topic", "partition"),
    "batch_acks": ("topic", "partition"),
    "ledgers": ("topic", "partition"),
    "rejected_events": ("topic", "partition"),
    "ingest_batches": ("query_id",),
}
