"""Schemas at the UDF boundary: the state rows fed to the apply UDF and the rows it returns.

The apply UDF (``udfs.apply``) returns one wide row type for everything it produces, tagged by
``kind``, so that one cogrouped pass per micro-batch yields the new state, its projections and
the engine's rejections; the ingest job splits them by ``kind`` and writes each to its table.
"""

from __future__ import annotations

from collections.abc import Mapping
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

PACKED_EVENT_COLUMNS: Final = tuple(c for c in APPLY_EVENT_COLUMNS if c not in ("topic", "partition"))
"""The fields of ``PACKED_EVENTS``: the topic and partition travel once, as columns beside it
(the UDF splits a bucket of partitions by them, ``udfs.columns.by_partition``); in the struct
too, the topic's text went to the Python worker twice, some 40 MB of a 1M-event batch's 320."""

PACKED_EVENTS: Final = "events"
"""The one column that carries ``PACKED_EVENT_COLUMNS`` to the apply UDF, as a struct, beside the
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

# ---- APPLY_OUTPUT packed: what travels back from the apply UDF of the ingest -----------------
OUTPUT_KEY_COLUMNS: Final = ("kind", "op", "topic", "partition", "subscription")
"""The columns of ``APPLY_OUTPUT`` that every kind may fill; ``KIND_COLUMNS`` names the rest."""

KIND_COLUMNS: Final[Mapping[str, tuple[str, ...]]] = {
    PARTITION: ("last_seq", "last_event_time", "ledgers", "applied", "stale", "producers_state"),
    CURSOR: (
        "sub_type",
        "mark_delete_ledger_id",
        "mark_delete_entry_id",
        "state",
        "subscription_state",
        "msg_backlog",
        "non_contiguous_deleted_ranges",
        "partial_batch_entries",
        "state_changed",
        "last_seq",
        "last_event_time",
    ),
    RANGE: ("ledger_id", "lower_entry_id", "upper_entry_id", "entries"),
    BATCH: ("ledger_id", "entry_id", "batch_size", "ack_set", "acked_count"),
    LEDGER: ("ledger_id", "first_entry_id", "last_entry_id", "entries"),
    REJECT: ("row", "reason", "detail"),
    CONSUMER: (
        "sub_type",
        "consumer_id",
        "consumer_name",
        "priority_level",
        "connected",
        "is_active",
        "unacked_messages",
        "blocked",
        "subscribed_at",
        "closed_at",
        "ack_timeout_ms",
        "negative_ack_delay_ms",
        "max_redeliver_count",
        "attached_implicitly",
    ),
    PENDING: (
        "consumer_id",
        "ledger_id",
        "entry_id",
        "batch_size",
        "unacked_messages",
        "dispatched_at",
        "redelivery_count",
        "sticky_key_hash",
        "ack_timeout_at",
    ),
    REDELIVERY: (
        "ledger_id",
        "entry_id",
        "consumer_id",
        "reason",
        "requested_at",
        "due_at",
        "redelivery_count",
        "dead_letter",
        "delivered_at",
    ),
    ACTIVE_CHANGE: (
        "sub_type",
        "seq",
        "event_time",
        "previous_consumer_id",
        "previous_consumer_name",
        "new_consumer_id",
        "new_consumer_name",
        "effective_at",
    ),
    UNSUBSCRIBED: (),
    PRODUCER: (
        "producer_name",
        "highest_sequence_pushed",
        "highest_sequence_persisted",
        "msg_drop_count",
        "last_event_time",
    ),
    RECEIPT: (
        "row",
        "seq",
        "event_time",
        "producer_name",
        "sequence_id",
        "highest_sequence_id",
        "dedup_status",
        "ledger_id",
        "entry_id",
        "error",
        "dropped",
        "event_id",
    ),
    LATE_RECEIPT: ("seq", "ledger_id", "entry_id", "error"),
}
"""The columns of ``APPLY_OUTPUT`` each kind fills besides ``OUTPUT_KEY_COLUMNS`` (the others are
null in its rows). ``udfs.apply.OutputRows`` refuses any other, so that the packing below, which
lets columns that no kind fills together share a slot, never loses a value."""


def _slot_name(data_type: T.DataType) -> str:
    """The slot prefix of a column type: ``long``, ``integer``, ``boolean``, ``string``,
    ``binary``, ``array<bigint>`` become ``long_``, ``integer_``, ... ``array_long_``."""
    if isinstance(data_type, T.ArrayType):
        return f"array_{_slot_name(data_type.elementType)}"
    return data_type.typeName()


_Unpacking = tuple[tuple[str, str, tuple[str, ...]], ...]  # (column, slot, kinds that fill it there)


def _packing() -> tuple[T.StructType, dict[str, dict[str, str]], _Unpacking]:
    """Assign each column of ``APPLY_OUTPUT`` outside ``OUTPUT_KEY_COLUMNS`` a slot of its type,
    such that no kind fills two columns of one slot; greedy, in ``APPLY_OUTPUT``'s order
    (deterministic: the driver and every worker compute the same packing)."""
    fields = [f for f in APPLY_OUTPUT.fields if f.name not in OUTPUT_KEY_COLUMNS]
    kinds_of: dict[str, list[str]] = {f.name: [] for f in fields}
    for kind, columns in KIND_COLUMNS.items():
        for name in columns:
            kinds_of[name].append(kind)
    slot_of: dict[str, str] = {}
    slot_types: dict[str, T.DataType] = {}
    for f in fields:
        taken = {
            slot_of[other] for kind in kinds_of[f.name] for other in KIND_COLUMNS[kind] if other in slot_of
        }
        k = 0
        while (slot := f"{_slot_name(f.dataType)}_{k}") in taken:
            k += 1
        slot_of[f.name] = slot
        slot_types[slot] = f.dataType
    keys = [f for f in APPLY_OUTPUT.fields if f.name in OUTPUT_KEY_COLUMNS]
    packed = T.StructType([*keys, *(T.StructField(s, t) for s, t in slot_types.items())])
    slots = {kind: {name: slot_of[name] for name in columns} for kind, columns in KIND_COLUMNS.items()}
    sharing: dict[str, list[str]] = {}
    for name, slot in slot_of.items():
        sharing.setdefault(slot, []).append(name)
    unpacking = tuple(
        (f.name, slot_of[f.name], tuple(kinds_of[f.name]) if len(sharing[slot_of[f.name]]) > 1 else ())
        for f in fields
    )
    return packed, slots, unpacking


PACKED_OUTPUT, OUTPUT_SLOTS, OUTPUT_UNPACKING = _packing()
"""``APPLY_OUTPUT`` as the ingest's apply UDF returns it: ``OUTPUT_KEY_COLUMNS``, then a few
typed slots (``long_0``, ``string_1``, ...) that hold each kind's columns (``OUTPUT_SLOTS``:
kind -> column -> slot). ``OUTPUT_UNPACKING`` gives, in ``APPLY_OUTPUT``'s order, each column's
slot and the kinds whose rows hold it there (empty: the slot holds only that column), from which
the ingest takes the wide rows back in the JVM, right after the UDF.

Why: of ``APPLY_OUTPUT``'s 71 columns a row fills a dozen at most, and Arrow sends every null as
a value slot and a validity bit. A 1M-event batch returned 403,207 rows, 207 MB of Arrow, most of
it nulls: three rows in four are ``pending_acks``, which fill 13 columns. In a cogroup over that
batch's groups, returning the same rows in 20 columns took 7.0-9.4 s against 8.9-11.6 s
(2026-11-29)."""


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
