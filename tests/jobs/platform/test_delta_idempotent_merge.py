"""Delta's idempotent writes, which ackstate's exactly-once design rests on (DESIGN.md).

A write tagged with (``txnAppId``, ``txnVersion``) is skipped when the table has already
committed that version or a later one for that app id, so a micro-batch replayed after a crash
changes nothing. These tests pin that behaviour for ackstate's MERGEs, which take the pair
from the session's configuration. (Its appends carry no pair: ``jobs.ingest.recovery``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@contextmanager
def delta_txn(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Tag the writes inside with (app_id, version), as ingest does per micro-batch."""
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def merge_increment(spark: SparkSession, path: str) -> None:
    """A MERGE that is visibly not idempotent on its own: it adds to every matched row."""
    spark.sql(
        f"""
        MERGE INTO delta.`{path}` AS t
        USING (SELECT * FROM VALUES ('a', 10L), ('c', 1L) AS s(key, amount)) AS s
        ON t.key = s.key
        WHEN MATCHED THEN UPDATE SET t.amount = t.amount + s.amount
        WHEN NOT MATCHED THEN INSERT (key, amount) VALUES (s.key, s.amount)
        """
    )


def contents(spark: SparkSession, path: str) -> dict[str, int]:
    return {r["key"]: r["amount"] for r in spark.read.format("delta").load(path).collect()}


def history_versions(spark: SparkSession, path: str) -> int:
    return DeltaTable.forPath(spark, path).history().count()


def test_merge_with_same_txn_version_is_applied_once(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "counts")
    spark.createDataFrame([("a", 1), ("b", 2)], "key string, amount long").write.format("delta").save(path)

    with delta_txn(spark, "ingest-query-1", 7):
        merge_increment(spark, path)
    after_first = contents(spark, path)
    versions_after_first = history_versions(spark, path)
    assert after_first == {"a": 11, "b": 2, "c": 1}
    assert versions_after_first == 2  # the initial write and the MERGE

    with delta_txn(spark, "ingest-query-1", 7):  # the replay of batch 7 after a crash
        merge_increment(spark, path)
    assert contents(spark, path) == after_first
    assert history_versions(spark, path) == versions_after_first

    with delta_txn(spark, "ingest-query-1", 8):  # the next batch is applied
        merge_increment(spark, path)
    assert contents(spark, path) == {"a": 21, "b": 2, "c": 2}
    assert history_versions(spark, path) == versions_after_first + 1

    # and the session is left untagged: an untagged MERGE is applied normally
    assert spark.conf.get(TXN_APP_ID, None) is None
    merge_increment(spark, path)
    assert contents(spark, path)["a"] == 31


def test_merge_with_older_txn_version_is_skipped(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "counts")
    spark.createDataFrame([("a", 0)], "key string, amount long").write.format("delta").save(path)
    with delta_txn(spark, "app", 5):
        merge_increment(spark, path)
    with delta_txn(spark, "app", 3):
        merge_increment(spark, path)
    with delta_txn(spark, "another-app", 3):  # versions are tracked per app id
        merge_increment(spark, path)
    assert contents(spark, path) == {"a": 20, "c": 2}
