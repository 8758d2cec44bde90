"""``jobs.ingest.recovery``: what a crashed run committed of a batch, found by the batch's tag."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.ingest.recovery import NOTHING_WRITTEN, batch_of, read_tag, recover
from jobs.platform.delta_writer import DeltaWriter
from jobs.platform.tables import ensure_tables

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

READ = {"cursors": 4, "ledger_trims": 0, "topic_partitions": 7}


def test_a_batchs_appends_and_the_versions_it_read_are_found_by_its_tag(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "warehouse")
    ensure_tables(spark, warehouse, ["ledgers", "rejected_events"])
    writer = DeltaWriter(warehouse, "app")
    rows = spark.createDataFrame(
        [("t", 0, 1, 0, 9, 10, "upsert")],
        "topic string, partition int, ledger_id long, first_entry_id long, last_entry_id long, "
        "entries long, op string",
    )
    writer.append(spark, "ledgers", rows, tag=read_tag("app:3", READ))
    writer.merge("ledgers", rows).changes().execute(spark, version=4, tag=read_tag("app:4", READ))

    appended = recover(spark, warehouse, "app:3")
    assert appended.versions == READ
    assert appended.appended == frozenset({"ledgers"})
    merged = recover(spark, warehouse, "app:4")  # a MERGE is skipped by Delta, not by its tag
    assert (merged.versions, merged.appended) == (READ, frozenset())
    assert recover(spark, warehouse, "app:5") == NOTHING_WRITTEN
    assert recover(spark, warehouse, "other:3") == NOTHING_WRITTEN


def test_the_batch_of_a_commit_is_read_back_from_the_tag_the_batch_wrote() -> None:
    assert batch_of(read_tag("app:12", READ), "app") == 12
    assert batch_of("app:12", "app") == 12  # an older ackstate's bare tag
    assert batch_of(read_tag("app:12", READ), "other") is None
    assert batch_of(None, "app") is None  # compaction's commits carry none
