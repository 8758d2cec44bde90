"""What a micro-batch changed and refused, counted from the apply UDF's rows.

The batch needs these counts before it writes: which tables it changes (the kinds of rows the
UDF returned), whether it writes ``rejected_events``, the subscriptions an UNSUBSCRIBE deleted,
and its ``ingest_batches`` figures. They come from one of two places, with the same result:

* ``counts_of_frame``: a Spark job over the rows (a large batch's output is spread over the
  executors);
* ``counts_of_rows``: the rows already in the driver as an Arrow table (a batch that runs in one
  partition collects its output there anyway, ``jobs.ingest.batch.SINGLE_PARTITION``), with no
  Spark job: a job's fixed cost was 0.13-0.25 s of a 1,000-event batch (README, "Benchmarks").

Rejections by validation are counted with the batch's topic partitions, in the job that finds
those anyway (``input_summary``, or ``classified_summary`` before duplicates are marked) or from
the marked rows in the driver (``input_summary_of_rows``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.udf import REJECT, UNSUBSCRIBED

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, Row

PartitionKey = tuple[str, int]
Unsubscribed = tuple[str, int, str]


@dataclass(frozen=True)
class KindCounts:
    """The UDF rows of one kind: how many, and the sums of ``applied``, ``stale`` and of
    ``state_changed`` (a partition row's events applied and replays dropped; cursors rewritten)."""

    rows: int
    applied: int
    stale: int
    changed: int


@dataclass(frozen=True)
class OutputCounts:
    """The apply UDF's rows of a batch, counted: by kind, the engine's refusals by reason, and
    the subscriptions deleted (topic, partition, subscription)."""

    kinds: dict[str, KindCounts]
    refusals: dict[str, int]
    unsubscribed: list[Unsubscribed]


def input_summary(marked: DataFrame) -> tuple[list[PartitionKey], dict[str, int]]:
    """The topic partitions of a batch's valid records and its rejected records per reason, in
    one Spark job over ``marked`` (``jobs.ingest.validate.mark_duplicates``'s rows)."""
    return _touched_and_reasons(marked.groupBy(*_summary_keys()).count().collect())


def _summary_keys() -> list[Column]:
    """What a summary groups by: a valid row's topic partition (null on a rejected row), and
    the reason (null on a valid row)."""
    from pyspark.sql import functions as F

    from jobs.ingest.validate import REASON_COLUMN

    valid = F.col(REASON_COLUMN).isNull()
    return [
        F.when(valid, F.col("topic")).alias("topic"),
        F.when(valid, F.col("partition")).alias("partition"),
        F.col(REASON_COLUMN).alias("reason"),
    ]


def _touched_and_reasons(rows: list[Row]) -> tuple[list[PartitionKey], dict[str, int]]:
    """The summary's ``(topic, partition, reason, count)`` rows as the touched topic partitions
    and the rejected records per reason."""
    touched = [(r["topic"], r["partition"]) for r in rows if r["reason"] is None]
    reasons = {r["reason"]: int(r["count"]) for r in rows if r["reason"] is not None}
    return touched, reasons


@dataclass(frozen=True)
class ClassifiedSummary:
    """``input_summary`` of classified rows whose duplicates are not marked yet, and how many
    event-id hashes (``jobs.ingest.validate.event_id_hash``) more than one valid row carries."""

    touched: list[PartitionKey]
    rejections: dict[str, int]
    repeated_hashes: int
    """Hashes carried by more than one valid row: 0 means no duplicate, so the summary is the
    marked rows' own. Otherwise a duplicate (or, rarely, a collision) may move valid rows to
    ``duplicate_event_id`` and empty a topic partition: the caller marks them and summarises
    again (``input_summary``)."""
    longest_record: int
    """The octets of the longest valid record (0: none), which bound the apply's Arrow batches
    (``jobs.ingest.arrow_batches``)."""


def classified_summary(classified: DataFrame) -> ClassifiedSummary:
    """``ClassifiedSummary`` of ``jobs.ingest.validate.classify``'s rows in one Spark job.

    Two grouping sets over one read of the rows: the topic partitions and reasons, and the
    valid rows' event-id hashes (only those counted more than once come back); the first also
    takes the longest valid record. It replaces the
    duplicate-id aggregate and the summary job of a batch without duplicates: 1.2 s instead of
    1.8 s for 1M records (median of five alternated pairs, README "Benchmarks"); a count per
    long needs neither the sort that ``duplicate_keys``'s minimum of a struct does nor the
    strings in the shuffle."""
    from pyspark.sql import functions as F

    from jobs.ingest.validate import RAW_COLUMN, REASON_COLUMN, event_id_hash

    valid = F.col(REASON_COLUMN).isNull()
    keyed = classified.select(
        F.when(valid, event_id_hash()).alias("hash"),
        *_summary_keys(),
        F.when(valid, F.octet_length(RAW_COLUMN)).alias("octets"),
    )
    keys = ["topic", "partition", "reason"]
    rows = (
        keyed.groupingSets([["hash"], keys], "hash", *keys)
        .agg(F.count(F.lit(1)).alias("count"), F.max("octets").alias("octets"), F.grouping_id().alias("set"))
        .where(
            ((F.col("set") == _BY_HASH) & F.col("hash").isNotNull() & (F.col("count") > 1))
            | (F.col("set") == _BY_PARTITION)
        )
        .collect()
    )
    summary = [r for r in rows if r["set"] == _BY_PARTITION]
    touched, reasons = _touched_and_reasons(summary)
    longest = max((r["octets"] for r in summary if r["octets"] is not None), default=0)
    repeated = len(rows) - len(summary)
    return ClassifiedSummary(touched, reasons, repeated_hashes=repeated, longest_record=longest)


# ``grouping_id`` of classified_summary's two sets over (hash, topic, partition, reason), the
# first column's bit highest and a bit set for each column a set leaves out
_BY_HASH = 0b0111
_BY_PARTITION = 0b1000


def input_summary_of_rows(marked: pa.Table) -> tuple[list[PartitionKey], dict[str, int]]:
    """``input_summary`` of marked rows already in the driver (a batch that runs in one
    partition collects them there), with no Spark job."""
    import pyarrow.compute as pc

    reason = marked.column("reason")
    valid = marked.filter(pc.is_null(reason)).select(["topic", "partition"])
    touched = valid.group_by(["topic", "partition"]).aggregate([])
    rejected = marked.filter(pc.is_valid(reason)).group_by("reason").aggregate([("reason", "count")])
    topics, partitions = touched.column("topic").to_pylist(), touched.column("partition").to_pylist()
    reasons, counts = rejected.column("reason").to_pylist(), rejected.column("reason_count").to_pylist()
    return list(zip(topics, partitions, strict=True)), dict(zip(reasons, counts, strict=True))


def counts_of_frame(out: DataFrame) -> OutputCounts:
    """``OutputCounts`` of the UDF's rows as a frame: one Spark job (and one more to list the
    deleted subscriptions, only when there are some)."""
    from pyspark.sql import functions as F

    from jobs.ingest.projections import refusals

    per_kind = out.groupBy("kind").agg(
        F.lit(None).cast("string").alias("reason"),
        F.count(F.lit(1)).alias("n"),
        F.sum("applied").alias("applied"),
        F.sum("stale").alias("stale"),
        F.sum(F.when(F.col("state_changed"), 1).otherwise(0)).alias("changed"),
    )
    per_reason = (
        refusals(out)
        .groupBy("reason")
        .agg(F.count(F.lit(1)).alias("n"))
        .select(
            F.lit(None).cast("string").alias("kind"),
            "reason",
            "n",
            *[F.lit(None).cast("long").alias(c) for c in ("applied", "stale", "changed")],
        )
    )
    kinds: dict[str, KindCounts] = {}
    refused: dict[str, int] = {}
    for r in per_kind.unionByName(per_reason).collect():
        if r["kind"] is not None:
            kinds[r["kind"]] = KindCounts(
                int(r["n"]), int(r["applied"] or 0), int(r["stale"] or 0), int(r["changed"] or 0)
            )
        else:
            refused[r["reason"]] = int(r["n"])
    unsubscribed: list[Unsubscribed] = []
    if UNSUBSCRIBED in kinds:
        gone = out.filter(F.col("kind") == UNSUBSCRIBED).select("topic", "partition", "subscription")
        unsubscribed = [(r["topic"], r["partition"], r["subscription"]) for r in gone.collect()]
    return OutputCounts(kinds, refused, unsubscribed)


def counts_of_rows(rows: pa.Table) -> OutputCounts:
    """``OutputCounts`` of the UDF's rows held in the driver (``schemas.udf.APPLY_OUTPUT`` as
    Arrow), with no Spark job."""
    import pyarrow as pa
    import pyarrow.compute as pc

    changed = pc.cast(pc.fill_null(rows.column("state_changed"), False), pa.int64())
    per_kind = (
        pa.table(
            {
                "kind": rows.column("kind"),
                "applied": rows.column("applied"),
                "stale": rows.column("stale"),
                "changed": changed,
            }
        )
        .group_by("kind")
        .aggregate([([], "count_all"), ("applied", "sum"), ("stale", "sum"), ("changed", "sum")])
        .to_pylist()
    )
    kinds = {
        r["kind"]: KindCounts(
            int(r["count_all"]),
            int(r["applied_sum"] or 0),
            int(r["stale_sum"] or 0),
            int(r["changed_sum"] or 0),
        )
        for r in per_kind
    }
    kind = rows.column("kind")
    refused = Counter(rows.filter(pc.equal(kind, REJECT)).column("reason").to_pylist())
    gone = rows.filter(pc.equal(kind, UNSUBSCRIBED)).select(["topic", "partition", "subscription"])
    unsubscribed = [(r["topic"], r["partition"], r["subscription"]) for r in gone.to_pylist()]
    return OutputCounts(kinds, dict(refused), unsubscribed)
