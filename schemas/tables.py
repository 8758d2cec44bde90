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


# Internal per-partition state: the replay guard (`last_seq`), the ledger list and the producers.
TOPIC_PARTITIONS: Final = T.StructType(
    [
        *_partition_key(),
        _col("last_seq", _LONG),
        _col("last_event_time", _LONG),
        _col("ledgers", _BINARY),
        *_lineage(),
        # added with producer dedup: pushed/persisted sequence ids, sends waiting for their
        # PUBLISH and non-persistent sends in flight, encoded by the engine (engine.dedup)
        _col("producers_state", _BINARY),
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
        # added with the consumer model: consumers, pending acks, redelivery tracker and replay
        # schedule of the subscription, encoded by the engine (engine.subscription)
        _col("subscription_state", _BINARY),
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

# Ledger-trim requests (``ackstate compact --trim-ledgers-before``), append-only: the first
# ledger a topic partition keeps. The compact job applies them, and so does every ingest batch
# to the partitions it writes (jobs.compact.compaction, "Next to a running ingest"), so the two writers
# never undo each other's trim.
LEDGER_TRIMS: Final = T.StructType(
    [
        *_partition_key(),
        _col("first_retained_ledger", _LONG, False),
        _col("requested_by", _STRING),  # the compact run (COMPACT_QUERY_ID:run id)
        _col("requested_at", _TIMESTAMP),
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
# The columns jobs.ingest.validate produces; the ingest job adds the batch lineage.
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

# ---- subscriptions (consumers, pending acks, redelivery, active consumer) -------------------
# A consumer keeps its row after it leaves (``connected`` false, ``closed_at`` set): stats list
# only connected ones, history queries see all.
CONSUMERS: Final = T.StructType(
    [
        *_subscription_key(),
        _col("consumer_id", _LONG, False),
        _col("consumer_name", _STRING),
        _col("sub_type", _STRING),
        _col("priority_level", _INT),
        _col("connected", T.BooleanType()),
        _col("is_active", T.BooleanType()),  # Exclusive/Failover active consumer
        _col("unacked_messages", _LONG),  # Shared/Key_Shared, in messages
        _col("blocked", T.BooleanType()),  # blockedConsumerOnUnackedMsgs
        _col("subscribed_at", _LONG),  # event time, epoch ms
        _col("closed_at", _LONG),
        _col("ack_timeout_ms", _LONG),
        _col("negative_ack_delay_ms", _LONG),
        _col("max_redeliver_count", _INT),
        *_lineage(),
        # added with implicit consumers: true for a consumer that a command attached (ingest
        # --implicit-consumers) rather than a SUBSCRIBE; its name is its id, the rest defaults
        _col("attached_implicitly", T.BooleanType()),
    ]
)

# One row per entry a consumer holds unacked (PendingAcksMap), Shared and Key_Shared only.
PENDING_ACKS: Final = T.StructType(
    [
        *_subscription_key(),
        _col("consumer_id", _LONG, False),
        _col("ledger_id", _LONG, False),
        _col("entry_id", _LONG, False),
        _col("position", _STRING),  # "L:E"
        _col("batch_size", _INT),
        _col("unacked_messages", _INT),  # batch size minus indexes already acked
        _col("dispatched_at", _LONG),  # event time of the DISPATCH, epoch ms
        _col("redelivery_count", _INT),  # the count the entry was dispatched with
        _col("sticky_key_hash", _INT),  # Key_Shared; 0 (STICKY_KEY_HASH_NOT_SET) for Shared
        _col("ack_timeout_at", _LONG),  # dispatched_at + ack_timeout_ms, null when off
    ]
)

# Positions due (or scheduled) for redelivery. A row stays after the entry is dispatched again,
# with ``delivered_at`` set (history; trimmed by compaction); an acked position leaves the table.
REDELIVERIES: Final = T.StructType(
    [
        *_subscription_key(),
        _col("ledger_id", _LONG, False),
        _col("entry_id", _LONG, False),
        _col("position", _STRING),
        _col("consumer_id", _LONG),  # who held it (or nacked it)
        _col("reason", _STRING),  # NACK, ACK_TIMEOUT, REDELIVER, CONSUMER_CLOSED
        _col("requested_at", _LONG),  # event time of the cause
        _col("due_at", _LONG),  # when the redelivery happens (client delay for NACK/ACK_TIMEOUT)
        _col("redelivery_count", _INT),  # the count its next dispatch carries
        _col("dead_letter", T.BooleanType()),  # next delivery reaches max_redeliver_count
        _col("delivered_at", _LONG),  # event time of the next DISPATCH, null while due
        *_lineage(),
    ]
)

# Append-only history of the Exclusive/Failover active consumer.
ACTIVE_CONSUMER_CHANGES: Final = T.StructType(
    [
        *_subscription_key(),
        _col("seq", _LONG, False),
        _col("event_time", _LONG),
        _col("sub_type", _STRING),
        _col("previous_consumer_id", _LONG),
        _col("previous_consumer_name", _STRING),
        _col("new_consumer_id", _LONG),
        _col("new_consumer_name", _STRING),
        _col("effective_at", _LONG),  # event_time + failover delay (rewind and notification)
        *_lineage(),
    ]
)

# ---- producers (dedup, non-persistent send limits) -----------------------------------------
PRODUCERS: Final = T.StructType(
    [
        *_partition_key(),
        _col("producer_name", _STRING, False),
        _col("highest_sequence_pushed", _LONG),
        _col("highest_sequence_persisted", _LONG),
        _col("msg_drop_count", _LONG),  # non-persistent sends dropped over the in-flight limit
        _col("last_event_time", _LONG),
        *_lineage(),
    ]
)

SEND_RECEIPTS: Final = T.StructType(
    [
        *_partition_key(),
        _col("event_id", _STRING, False),
        _col("seq", _LONG),
        _col("event_time", _LONG),
        _col("producer_name", _STRING),
        _col("sequence_id", _LONG),
        _col("highest_sequence_id", _LONG),
        _col("dedup_status", _STRING),  # NotDup, Dup, Unknown
        _col("receipt", _STRING),  # "L:E" once persisted; "-1:-1" for Dup and dropped sends
        _col("receipt_ledger_id", _LONG),
        _col("receipt_entry_id", _LONG),
        _col("error", _STRING),  # PersistenceError for Unknown
        _col("dropped", T.BooleanType()),  # non-persistent overload drop
        *_lineage(),
    ]
)

TABLES: Final[dict[str, T.StructType]] = {
    "topic_partitions": TOPIC_PARTITIONS,
    "cursors": CURSORS,
    "ack_ranges": ACK_RANGES,
    "batch_acks": BATCH_ACKS,
    "ledgers": LEDGERS,
    "rejected_events": REJECTED_EVENTS,
    "ingest_batches": INGEST_BATCHES,
    "consumers": CONSUMERS,
    "pending_acks": PENDING_ACKS,
    "redeliveries": REDELIVERIES,
    "active_consumer_changes": ACTIVE_CONSUMER_CHANGES,
    "producers": PRODUCERS,
    "send_receipts": SEND_RECEIPTS,
    "ledger_trims": LEDGER_TRIMS,
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
    "consumers": ("topic", "partition", "subscription", "consumer_id"),
    "pending_acks": ("topic", "partition", "subscription", "consumer_id", "ledger_id", "entry_id"),
    "redeliveries": ("topic", "partition", "subscription", "ledger_id", "entry_id"),
    "active_consumer_changes": ("topic", "partition", "subscription", "seq"),
    "producers": ("topic", "partition", "producer_name"),
    "send_receipts": ("topic", "partition", "event_id"),
    "ledger_trims": (),
}
APPEND_ONLY: Final[frozenset[str]] = frozenset({"rejected_events", "ingest_batches", "ledger_trims"})

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
    "consumers": ("topic", "partition"),
    "pending_acks": ("topic", "partition"),
    "redeliveries": ("topic", "partition"),
    "active_consumer_changes": ("topic", "partition"),
    "producers": ("topic", "partition"),
    "send_receipts": ("topic", "partition"),
    "ledger_trims": ("topic", "partition"),
}
