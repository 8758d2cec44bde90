"""The ingest's producer writes: ``producers`` and ``send_receipts`` from the apply UDF's rows.

Called once per micro-batch by ``jobs.ingest.BatchWriter`` after ``topic_partitions`` (whose
``producers_state`` is the source of truth these two tables project), with the same idempotent
MERGE (``txnAppId``/``txnVersion``), so a batch re-run after a crash writes them once.

* ``producers``: one upsert per producer the batch changed, keyed by (topic, partition,
  producer_name).
* ``send_receipts``: one row per SEND. The UDF names a SEND by its ``row`` (the input order id)
  and ``seq``; ``event_id`` is joined back from the batch's valid events, as for the engine's
  rejections. A receipt answered later (its PUBLISH or a SEND_FAILED in a later batch) comes
  back with ``row`` -1 and only the answer: it is matched by (topic, partition, seq), which is
  unique because a partition applies each seq once, and updates only the answer columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.udf import PRODUCER, RECEIPT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

RECEIPT_KEYS = ("topic", "partition", "seq")
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
    valid: DataFrame,
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
        writer._merge(spark, "producers", rows, batch_id, tag)
    if RECEIPT in kinds:
        receipts = out.filter(F.col("kind") == RECEIPT)
        event_ids = valid.select(F.col("_row").alias("row"), "event_id")
        persisted = F.col("ledger_id").isNotNull()
        rows = receipts.join(event_ids, "row", "left").select(
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
        writer._merge(
            spark,
            "send_receipts",
            rows,
            batch_id,
            tag,
            keys=RECEIPT_KEYS,
            matched=[(None, ANSWER_COLUMNS)],
            insert="s.event_id IS NOT NULL",
        )
