"""The producer side of the projections: ``producers`` and ``send_receipts``.

``producers`` holds one row per producer a batch changed, keyed by (topic, partition,
producer_name), upserted like the other tables (``jobs.ingest.projections``); the source of
truth is ``topic_partitions.producers_state``.

``send_receipts`` holds one row per SEND, appended with the ``event_id`` the UDF looked up (a
batch's SENDs are new rows: a partition applies each seq once). A receipt answered later (its
PUBLISH or a SEND_FAILED in a later batch) comes back without ``event_id`` and with only the
answer: a MERGE matches it by (topic, partition, seq) and updates the answer columns. That
MERGE's idempotent-write pair has an app id of its own (``LATE_ANSWERS_SUFFIX``): the append
carried the query's app id in warehouses written before appends were skipped by their tag, and
Delta skips a second commit of one (app id, version) to a table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

    from jobs.platform.delta_writer import TableMerge


RECEIPT_KEYS = ("topic", "partition", "seq")
LATE_ANSWERS_SUFFIX = ":late-receipts"
ANSWER_COLUMNS = [
    "receipt",
    "receipt_ledger_id",
    "receipt_entry_id",
    "error",
    "query_id",
    "batch_id",
    "updated_at",
]
"""What a late answer (a PUBLISH or SEND_FAILED in a later batch) sets on its SEND's receipt."""


def late_answers(merge: TableMerge) -> TableMerge:
    """Answers to SENDs of earlier batches: the receipt rows matched by (topic, partition, seq)
    get the answer; nothing is inserted. Its app id is its own (module docstring)."""
    return (
        merge.on_keys(RECEIPT_KEYS)
        .when_matched_update(columns=ANSWER_COLUMNS)
        .with_app_id(merge.writer.app_id + LATE_ANSWERS_SUFFIX)
    )


def receipt_columns() -> dict[str, Callable[[], Column]]:
    """The receipt columns of ``send_receipts``, from the UDF's ``ledger_id``/``entry_id`` (null
    until the SEND is persisted: a duplicate, or a failed send)."""
    from pyspark.sql import functions as F

    persisted = F.col("ledger_id").isNotNull()
    return {
        "receipt": lambda: F.when(persisted, F.concat_ws(":", "ledger_id", "entry_id")),
        "receipt_ledger_id": lambda: F.col("ledger_id"),
        "receipt_entry_id": lambda: F.col("entry_id"),
    }
