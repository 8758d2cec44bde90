"""The ingest's producer writes: ``producers`` and ``send_receipts`` from the apply UDF's rows.

Called once per micro-batch by ``jobs.ingest.batch.BatchWriter`` after ``topic_partitions`` (whose
``producers_state`` is the source of truth these two tables project), with the same idempotent
MERGE (``txnAppId``/``txnVersion``), so a batch re-run after a crash writes them once.

* ``producers``: one upsert per producer the batch changed, keyed by (topic, partition,
  producer_name).
* ``send_receipts``: one row per SEND, appended with the ``event_id`` the UDF looked up (a
  batch's SENDs are new rows: a partition applies each seq once). A receipt answered later
  (its PUBLISH or a SEND_FAILED in a later batch) comes back without ``event_id`` and with only
  the answer: a MERGE matches it by (topic, partition, seq) and updates the answer columns.
  The append and that MERGE are two idempotent writes with their own app ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.tables import TABLES
from schemas.udf import LATE_RECEIPT, PRODUCER, RECEIPT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

RECEIPT_KEYS = ("topic", "partition", "seq")
# A second write to send_receipts in one batch needs its own idempotency key (Delta skips a
# second commit of the same txnAppId and txnVersion to a table).
LATE_ANSWERS_SUFFIX = ":late-receipts"
# What a late answer sets on the receipt row written when its SEND was applied.
ANSWER_COLUMNS = [
    "receipt",
    "receipt_ledger_id",
    "receipt_entry_id",
    "error",
    "query_id",
    "batch_id",
    "updated_at",
]


def write_producer_tables(
    writer: Any,
    spark: SparkSession,
    out: DataFrame,
    kinds: dict[str, Any],
    batch_id: int,
    tag: str,
    lineage: list[Column],
) -> None:
    """MERGE this batch's ``producer`` and ``receipt`` rows (``writer`` is the ``BatchWriter``)."""
    from pyspark.sql import functions as F

    now = F.current_timestamp().alias("updated_at")
    if PRODUCER in kinds:
        rows = out.filter(F.col("kind") == PRODUCER).select(
            "topic",
            "partition",
            "producer_name",
            "highest_sequence_pushed",
            "highest_sequence_persisted",
            "msg_drop_count",
            "last_event_time",
            *lineage,
            now,
        )
        writer.merge(spark, "producers", rows, batch_id, tag)
    if RECEIPT in kinds:  # this batch's SENDs are new rows (a seq is applied once): appended
        persisted = F.col("ledger_id").isNotNull()
        rows = out.filter(F.col("kind") == RECEIPT).select(
            "topic",
            "partition",
            "event_id",
            "seq",
            "event_time",
            "producer_name",
            "sequence_id",
            "highest_sequence_id",
            "dedup_status",
            F.when(persisted, F.concat_ws(":", "ledger_id", "entry_id")).alias("receipt"),
            F.col("ledger_id").alias("receipt_ledger_id"),
            F.col("entry_id").alias("receipt_entry_id"),
            "error",
            "dropped",
            *lineage,
            now,
        )
        writer.append(rows, "send_receipts", batch_id, tag)
    if LATE_RECEIPT in kinds:  # answers to SENDs of earlier batches: their rows, by seq
        answered = F.col("ledger_id").isNotNull()
        late = out.filter(F.col("kind") == LATE_RECEIPT).select(
            "topic",
            "partition",
            "seq",
            F.when(answered, F.concat_ws(":", "ledger_id", "entry_id")).alias("receipt"),
            F.col("ledger_id").alias("receipt_ledger_id"),
            F.col("entry_id").alias("receipt_entry_id"),
            "error",
            *lineage,
            now,
        )
        # the MERGE's insert clause names every column (it never inserts): the rest are null
        rows = late.select(
            *[
                F.col(f.name) if f.name in late.columns else F.lit(None).cast(f.dataType).alias(f.name)
                for f in TABLES["send_receipts"].fields
            ]
        )
        writer.merge(
            spark,
            "send_receipts",
            rows,
            batch_id,
            tag,
            keys=RECEIPT_KEYS,
            matched=[(None, ANSWER_COLUMNS)],
            insert="false",
            app_id=f"{writer.options.app_id}{LATE_ANSWERS_SUFFIX}",
        )
