"""The apply UDF's rows (``schemas.udf.APPLY_OUTPUT``) as table rows, and how each table is written.

The UDF returns one wide table whose ``kind`` names what a row is. ``PROJECTIONS`` declares, for
each kind, its table and its write (``jobs.platform.delta_writer``); the rows are the table's
own columns (``schemas.tables.TABLES``), each taken from the UDF column of the same name unless
``DERIVED`` (or the projection's own ``derived``) computes it. So a new table column that the
UDF emits under its name needs no edit here. The batch (``jobs.ingest.batch``) writes every
projection; the compaction's ledger trims (``jobs.compact.compaction``) write some of them the
same way.

``state_input`` goes the other way: the state tables' rows as the UDF's state input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobs.ingest.producers import late_answers, receipt_columns
from jobs.platform.columns import built_once
from schemas.tables import TABLES
from schemas.udf import (
    ACTIVE_CHANGE,
    BATCH,
    CONSUMER,
    CURSOR,
    LATE_RECEIPT,
    LEDGER,
    PARTITION,
    PENDING,
    PRODUCER,
    RANGE,
    RECEIPT,
    REDELIVERY,
    REJECT,
    STATE_INPUT,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.platform.delta_writer import TableMerge

STATE_FORMAT = 1  # engine.cursor encoding version written to cursors.state_format
LINEAGE_COLUMNS = ("query_id", "batch_id")
"""Who wrote a row: the writer's app id and its batch id (given by the writer, not the UDF)."""


def _position() -> Column:
    from pyspark.sql import functions as F

    return F.concat_ws(":", "ledger_id", "entry_id")


def _now() -> Column:
    from pyspark.sql import functions as F

    return F.current_timestamp()


DERIVED: Mapping[str, Callable[[], Column]] = {
    "position": _position,  # "ledger:entry", as Pulsar prints a position
    "updated_at": _now,
}
"""Table columns computed the same way in every table that has them."""


# ---- the writes ------------------------------------------------------------------------------
def upsert(merge: TableMerge) -> TableMerge:
    """Update the row with the key, or insert it."""
    return merge.when_matched_update().when_not_matched_insert()


def changes(merge: TableMerge) -> TableMerge:
    """A projection maintained as differences: ``op = delete`` removes the key, others upsert."""
    return merge.changes()


CURSOR_FIGURES = ["msg_backlog", "last_seq", "last_event_time", "query_id", "batch_id", "updated_at"]
"""What a batch updates on a cursor whose state it did not change (its backlog still moves)."""


def cursor_write(merge: TableMerge) -> TableMerge:
    """A changed cursor is written whole (inserted if new); an unchanged one gets its figures;
    the cursor of a subscription an UNSUBSCRIBE deleted (``op = delete``) is removed."""
    from jobs.platform.delta_writer import IS_DELETE

    return (
        merge.when_matched_delete(IS_DELETE)
        .when_matched_update("s.state_changed")
        .when_matched_update("NOT s.state_changed", CURSOR_FIGURES)
        .when_not_matched_insert("s.state_changed")
    )


def _cursor_columns() -> dict[str, Callable[[], Column]]:
    from pyspark.sql import functions as F

    return {
        "mark_delete": lambda: F.concat_ws(":", "mark_delete_ledger_id", "mark_delete_entry_id"),
        "state_format": lambda: F.lit(STATE_FORMAT),
    }


def _ack_range_columns() -> dict[str, Callable[[], Column]]:
    from pyspark.sql import functions as F

    def pulsar_range() -> Column:  # "(ledger:lower..ledger:upper]", as internalStats prints it
        return F.concat(
            F.lit("("),
            F.col("ledger_id"),
            F.lit(":"),
            F.col("lower_entry_id"),
            F.lit(".."),
            F.col("ledger_id"),
            F.lit(":"),
            F.col("upper_entry_id"),
            F.lit("]"),
        )

    return {"range": pulsar_range}


def _pending_columns() -> dict[str, Callable[[], Column]]:
    from pyspark.sql import functions as F

    return {"unacked_messages": lambda: F.col("unacked_messages").cast("int")}


@dataclass(frozen=True)
class Projection:
    """One kind of the UDF's rows: its table, how its rows are written, what they carry."""

    kind: str
    table: str
    write: Callable[[TableMerge], TableMerge] | None
    """The MERGE's clauses; None: the rows are appended (every row is new)."""
    carry: tuple[str, ...] = ()
    """UDF columns the write reads besides the table's (``op``, ``state_changed``)."""
    derived: Callable[[], Mapping[str, Callable[[], Column]]] = field(default=dict)
    """This table's computed columns, by name (over ``DERIVED``)."""

    def rows(self, out: DataFrame, lineage: Sequence[Column] = ()) -> DataFrame:
        """This kind's rows of ``out`` as the table's columns (then ``carry``); ``lineage`` gives
        ``query_id`` and ``batch_id`` (``LINEAGE_COLUMNS``) where the table has them."""
        given = dict(zip(LINEAGE_COLUMNS, lineage, strict=False))
        for name in TABLES[self.table].fieldNames():
            if name in LINEAGE_COLUMNS and name not in given:
                raise ValueError(f"{self.table}.{name}: the writer's lineage is needed")
        is_kind, columns = built_once(("projections.rows", self.kind, self.table), self._columns)
        return out.filter(is_kind).select(
            *[given[name].alias(name) if column is None else column for name, column in columns]
        )

    def _columns(self) -> tuple[Column, list[tuple[str, Column | None]]]:
        """The filter on this kind, and each output column (None: the batch's lineage column),
        built once per JVM (``jobs.platform.columns``)."""
        from pyspark.sql import functions as F

        derived = {**DERIVED, **self.derived()}
        columns: list[tuple[str, Column | None]] = []
        for name in TABLES[self.table].fieldNames():
            if name in LINEAGE_COLUMNS:
                columns.append((name, None))
            elif name in derived:
                columns.append((name, derived[name]().alias(name)))
            else:
                columns.append((name, F.col(name)))
        columns += [(name, F.col(name)) for name in self.carry]
        return F.col("kind") == self.kind, columns


PROJECTIONS: tuple[Projection, ...] = (
    Projection(CURSOR, "cursors", cursor_write, ("state_changed", "op"), _cursor_columns),
    Projection(PARTITION, "topic_partitions", upsert),
    Projection(PRODUCER, "producers", changes, ("op",)),
    Projection(RECEIPT, "send_receipts", None, (), receipt_columns),
    Projection(LATE_RECEIPT, "send_receipts", late_answers, (), receipt_columns),
    Projection(RANGE, "ack_ranges", changes, ("op",), _ack_range_columns),
    Projection(BATCH, "batch_acks", changes, ("op",)),
    Projection(LEDGER, "ledgers", changes, ("op",)),
    Projection(CONSUMER, "consumers", upsert),
    Projection(PENDING, "pending_acks", changes, ("op",), _pending_columns),
    Projection(REDELIVERY, "redeliveries", changes, ("op",)),
    Projection(ACTIVE_CHANGE, "active_consumer_changes", None),
)
"""Every kind of the UDF's rows that a table holds, in the order a batch writes them (the
receipts of a batch are appended before the answers to earlier ones are merged)."""

PROJECTION = {p.kind: p for p in PROJECTIONS}

SUBSCRIPTION_TABLES = ("ack_ranges", "batch_acks", "consumers", "pending_acks", "redeliveries")
"""The projection tables keyed by subscription whose rows go with a deleted subscription
(``UNSUBSCRIBED``; its ``cursors`` row goes by its own delete). ``active_consumer_changes``
is history and keeps them."""


def unsubscribed_condition(keys: Sequence[tuple[str, int, str]]) -> str:
    """The SQL condition over a table's rows (``t``) of the deleted subscriptions ``keys``
    (topic, partition, subscription), for ``TableMerge.when_not_matched_by_source_delete``."""

    def quoted(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    rows = ", ".join(f"({quoted(t)}, {int(p)}, {quoted(s)})" for t, p, s in sorted(keys))
    return f"(t.topic, t.partition, t.subscription) IN ({rows})"


def refusals(out: DataFrame) -> DataFrame:
    """The engine's refusals among the apply UDF's rows: input row id, reason, detail (they
    become ``rejected_events`` rows joined with the refused event)."""
    from pyspark.sql import functions as F

    return out.filter(F.col("kind") == REJECT).select(F.col("row").alias("_row"), "reason", "detail")


def state_input(partitions: DataFrame, cursors: DataFrame) -> DataFrame:
    """``schemas.udf.STATE_INPUT`` rows of the apply and trim UDFs: one per topic partition (its
    ``topic_partitions`` row) and one per cursor, no ledger trim requested yet
    (``with_trim_requests``)."""
    partition_columns, cursor_columns = built_once("projections.state_input", _state_input_columns)
    return partitions.select(*partition_columns).unionByName(cursors.select(*cursor_columns))


STATE_SOURCES: Mapping[str, Mapping[str, str]] = {
    PARTITION: {
        "topic": "topic",
        "partition": "partition",
        "state": "ledgers",
        "last_seq": "last_seq",
        "last_event_time": "last_event_time",
        "producers_state": "producers_state",
    },
    CURSOR: {
        "topic": "topic",
        "partition": "partition",
        "subscription": "subscription",
        "state": "state",
        "subscription_state": "subscription_state",
    },
}
"""For each kind of ``STATE_INPUT`` row, the column of its table (``topic_partitions``,
``cursors``; the apply's rows name them the same) that fills each ``STATE_INPUT`` column; ``kind``
is the kind itself, every other column null. ``state_input`` reads it in Spark and
``jobs.ingest.warm.state_changes_table`` in the driver."""


def _state_input_columns() -> tuple[list[Column], list[Column]]:
    from pyspark.sql import functions as F

    def columns(kind: str) -> list[Column]:
        sources = STATE_SOURCES[kind]
        return [
            F.lit(kind).alias(f.name)
            if f.name == "kind"
            else F.col(sources[f.name]).alias(f.name)
            if f.name in sources
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in STATE_INPUT.fields
        ]

    return columns(PARTITION), columns(CURSOR)


def with_trim_requests(state: DataFrame, requests: DataFrame) -> DataFrame:
    """``STATE_INPUT`` rows with the ledger trims requested for their partitions (``requests``:
    topic, partition, first_retained_ledger, one row per partition) on the partition rows."""
    from pyspark.sql import functions as F

    asked = requests.select("topic", "partition", F.col("first_retained_ledger").alias("_asked"))
    return state.join(asked, ["topic", "partition"], "left").select(
        *[
            F.when(F.col("kind") == PARTITION, F.col("_asked")).alias(name)
            if name == "first_retained_ledger"
            else F.col(name)
            for name in STATE_INPUT.fieldNames()
        ]
    )
