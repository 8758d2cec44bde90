"""The apply UDF's rows (``schemas.udf.APPLY_OUTPUT``) as the rows of each table they change.

The UDF returns one wide table whose ``kind`` names the table a row belongs to; each function
here selects one kind and shapes it as its table's columns (plus ``op`` where a row may be a
delete). The batch (``jobs.ingest.batch``) and the compaction's ledger trims
(``jobs.compact.compaction``) write what these return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.tables import TABLES
from schemas.udf import (
    ACTIVE_CHANGE,
    BATCH,
    CONSUMER,
    CURSOR,
    LEDGER,
    PARTITION,
    PENDING,
    RANGE,
    REDELIVERY,
    REJECT,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATE_FORMAT = 1  # engine.cursor encoding version written to cursors.state_format

CONSUMER_TABLES = {
    CONSUMER: "consumers",
    PENDING: "pending_acks",
    REDELIVERY: "redeliveries",
    ACTIVE_CHANGE: "active_consumer_changes",
}
"""The UDF row kinds of the consumer model and their tables."""

LINEAGE_COLUMNS = ("query_id", "batch_id", "updated_at")


def ack_range_rows(out: DataFrame) -> DataFrame:
    """The ``ack_ranges`` changes among the apply (or trim) UDF's rows, with their ``op``."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == RANGE).select(
        "topic",
        "partition",
        "subscription",
        "ledger_id",
        "lower_entry_id",
        "upper_entry_id",
        F.concat(
            F.lit("("),
            F.col("ledger_id"),
            F.lit(":"),
            F.col("lower_entry_id"),
            F.lit(".."),
            F.col("ledger_id"),
            F.lit(":"),
            F.col("upper_entry_id"),
            F.lit("]"),
        ).alias("range"),
        "entries",
        "op",
    )


def batch_ack_rows(out: DataFrame) -> DataFrame:
    """The ``batch_acks`` changes among the apply (or trim) UDF's rows, with their ``op``."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == BATCH).select(
        "topic",
        "partition",
        "subscription",
        "ledger_id",
        "entry_id",
        F.concat_ws(":", "ledger_id", "entry_id").alias("position"),
        "batch_size",
        "ack_set",
        "acked_count",
        "op",
    )


def state_input(partitions: DataFrame, cursors: DataFrame) -> DataFrame:
    """``schemas.udf.STATE_INPUT`` rows of the apply and trim UDFs: one per topic partition (its
    ``topic_partitions`` row, with the requested ``first_retained_ledger``) and one per cursor."""
    from pyspark.sql import functions as F

    return partitions.select(
        "topic",
        "partition",
        F.lit(PARTITION).alias("kind"),
        F.lit(None).cast("string").alias("subscription"),
        F.col("ledgers").alias("state"),
        "last_seq",
        "last_event_time",
        F.lit(None).cast("binary").alias("subscription_state"),
        "producers_state",
        "first_retained_ledger",
    ).unionByName(
        cursors.select(
            "topic",
            "partition",
            F.lit(CURSOR).alias("kind"),
            "subscription",
            "state",
            F.lit(None).cast("long").alias("last_seq"),
            F.lit(None).cast("long").alias("last_event_time"),
            "subscription_state",
            F.lit(None).cast("binary").alias("producers_state"),
            F.lit(None).cast("long").alias("first_retained_ledger"),
        )
    )


def refusals(out: DataFrame) -> DataFrame:
    """The engine's refusals among the apply UDF's rows: input row id, reason, detail."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == REJECT).select(F.col("row").alias("_row"), "reason", "detail")


def cursor_rows(out: DataFrame, lineage: list[Any]) -> DataFrame:
    """The ``cursors`` rows, with ``state_changed`` (the MERGE updates only the figures of a
    cursor whose state did not change)."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == CURSOR).select(
        "topic",
        "partition",
        "subscription",
        "sub_type",
        F.concat_ws(":", "mark_delete_ledger_id", "mark_delete_entry_id").alias("mark_delete"),
        "mark_delete_ledger_id",
        "mark_delete_entry_id",
        "state",
        F.lit(STATE_FORMAT).alias("state_format"),
        "msg_backlog",
        "non_contiguous_deleted_ranges",
        "partial_batch_entries",
        "last_seq",
        "last_event_time",
        *lineage,
        F.current_timestamp().alias("updated_at"),
        "subscription_state",
        "state_changed",
    )


def partition_rows(out: DataFrame, lineage: list[Any]) -> DataFrame:
    """The ``topic_partitions`` rows."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == PARTITION).select(
        "topic",
        "partition",
        "last_seq",
        "last_event_time",
        "ledgers",
        *lineage,
        F.current_timestamp().alias("updated_at"),
        "producers_state",
    )


def ledger_rows(out: DataFrame) -> DataFrame:
    """The ``ledgers`` changes, with their ``op``."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == LEDGER).select(
        "topic",
        "partition",
        "ledger_id",
        F.col("entry_id").alias("first_entry_id"),
        F.col("upper_entry_id").alias("last_entry_id"),
        "entries",
        "op",
    )


def consumer_table_rows(out: DataFrame, kind: str, lineage: list[Any]) -> DataFrame:
    """The rows of one of ``consumers``, ``pending_acks``, ``redeliveries`` and
    ``active_consumer_changes`` (``kind``); the pending acks and redeliveries with their ``op``."""
    from pyspark.sql import functions as F

    now = F.current_timestamp().alias("updated_at")
    position = F.concat_ws(":", "ledger_id", "entry_id").alias("position")
    rows = out.filter(F.col("kind") == kind)
    if kind in (CONSUMER, ACTIVE_CHANGE):
        table = CONSUMER_TABLES[kind]
        return rows.select(
            *[c for c in TABLES[table].fieldNames() if c not in LINEAGE_COLUMNS],
            *lineage,
            now,
        )
    if kind == PENDING:
        return rows.select(
            "topic",
            "partition",
            "subscription",
            "consumer_id",
            "ledger_id",
            "entry_id",
            position,
            "batch_size",
            F.col("unacked_messages").cast("int").alias("unacked_messages"),
            "dispatched_at",
            "redelivery_count",
            "sticky_key_hash",
            "ack_timeout_at",
            "op",
        )
    assert kind == REDELIVERY, kind
    return rows.select(
        "topic",
        "partition",
        "subscription",
        "ledger_id",
        "entry_id",
        position,
        "consumer_id",
        "reason",
        "requested_at",
        "due_at",
        "redelivery_count",
        "dead_letter",
        "delivered_at",
        *lineage,
        now,
        "op",
    )
