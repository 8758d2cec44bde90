"""``ensure_tables``: every table made once, side by side; ``holds_no_rows``: a table known
empty at a version without a Spark job, and only then; ``release``: a checkpoint's blocks
freed, and nothing else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from jobs.platform.tables import ensure_tables, holds_no_rows, latest_version, release, table_path
from schemas.tables import TABLE_CLUSTERING, TABLES
from tests.jobs.warehouse import append_rows, cached_rdds, cached_rdds_when, commit_actions

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

ROW = {"topic": "t", "partition": 0, "first_retained_ledger": 5, "requested_by": "test", "requested_at": None}


def test_only_a_version_whose_checksum_counts_no_file_holds_no_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledger_trims"])
    assert latest_version(spark, warehouse, "ledger_trims") == 0
    assert holds_no_rows(spark, warehouse, "ledger_trims", 0)  # just created

    append_rows(spark, warehouse, "ledger_trims", [ROW])
    assert latest_version(spark, warehouse, "ledger_trims") == 1
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 1)  # a file
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 0)  # not the version last read: unknown

    spark.sql(f"DELETE FROM delta.`{table_path(warehouse, 'ledger_trims')}`")
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert holds_no_rows(spark, warehouse, "ledger_trims", 2)  # every file removed

    for checksum in (Path(table_path(warehouse, "ledger_trims")) / "_delta_log").glob("*.crc"):
        checksum.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[attr-defined]
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 2)  # no checksum: not known


def test_local_frame_holds_its_rows_in_the_plan_and_is_read_without_a_job(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from jobs.platform.tables import empty_frame, local_frame

    tracker = spark.sparkContext.statusTracker()
    frame = local_frame(spark, [("a", 1), ("b", 2)], "topic string, partition int")
    assert frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
    before = set(tracker.getJobIdsForGroup(None))  # ids: the tracker keeps only the last 1,000
    assert [tuple(r) for r in frame.collect()] == [("a", 1), ("b", 2)]
    assert set(tracker.getJobIdsForGroup(None)) <= before  # a Python RDD would run a job here
    assert frame.schema.simpleString() == "struct<topic:string,partition:int>"

    # broadcast into a join: scanned in the JVM (a Python RDD's scan starts Python workers)
    wanted = spark.range(6).select(F.lit("a").alias("topic"), F.col("id").cast("int").alias("partition"))
    joined = wanted.join(F.broadcast(frame), ["topic", "partition"], "left_semi")
    assert [r["partition"] for r in joined.collect()] == [1]
    assert "LocalTableScan" in joined._jdf.queryExecution().executedPlan().toString()

    empty = empty_frame(spark, "topic string, partition int")
    assert empty.collect() == [] and empty.columns == ["topic", "partition"]
    with pytest.raises(ValueError, match="rows of 1 values for 2 columns"):
        local_frame(spark, [("a",)], "topic string, partition int")


def test_local_copy_holds_a_frames_rows_with_their_size_known(spark: SparkSession) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from jobs.platform.tables import local_copy

    schema = StructType.fromDDL("topic string, partition int")
    built = (  # estimated as the million rows it filters, and a self-join multiplies that
        spark.range(1_000_000)
        .where("id < 3")
        .select(F.lit("t").alias("topic"), F.col("id").cast("int").alias("partition"))
    )
    joined = built.join(built.select("partition"), "partition").select("topic", "partition")
    copy = local_copy(spark, joined, schema)
    assert copy._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
    assert sorted(tuple(r) for r in copy.collect()) == [("t", 0), ("t", 1), ("t", 2)]
    assert copy._jdf.queryExecution().optimizedPlan().stats().sizeInBytes() < 1_000
    assert joined._jdf.queryExecution().optimizedPlan().stats().sizeInBytes() > 10**12


def test_tables_are_checkpointed_every_hundred_commits(spark: SparkSession, tmp_path: Path) -> None:
    """Not every 10th, Delta's default: a batch's commits would checkpoint its tables together."""
    from jobs.platform.tables import CHECKPOINT_INTERVAL

    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledger_trims"])
    log_dir = Path(table_path(warehouse, "ledger_trims")) / "_delta_log"
    created = commit_actions(warehouse, "ledger_trims")[0]
    metadata = next(a["metaData"] for a in created if "metaData" in a)
    assert metadata["configuration"]["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL) == "100"
    for _ in range(10):
        append_rows(spark, warehouse, "ledger_trims", [ROW])
    assert latest_version(spark, warehouse, "ledger_trims") == 10
    assert not list(log_dir.glob("*.checkpoint*.parquet"))  # Delta's default would write one here


def test_tables_made_side_by_side_are_each_made_once_with_their_schema_and_clustering(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Four at a time (``TABLE_THREADS``): each table's first commit holds its own schema and
    clustering, the names come back in ``TABLES`` order, and a warehouse that lacks some tables
    gets only those."""
    warehouse = str(tmp_path / "wh")
    assert ensure_tables(spark, warehouse) == list(TABLES)
    for name, schema in TABLES.items():
        actions = commit_actions(warehouse, name)
        assert len(actions) == 1, name  # one commit: created once
        metadata = next(a["metaData"] for a in actions[0] if "metaData" in a)
        assert [f["name"] for f in json.loads(metadata["schemaString"])["fields"]] == schema.names, name
        domains = [a["domainMetadata"] for a in actions[0] if "domainMetadata" in a]
        clustering = next(
            json.loads(d["configuration"]) for d in domains if d["domain"] == "delta.clustering"
        )
        assert [column[0] for column in clustering["clusteringColumns"]] == list(TABLE_CLUSTERING[name])
    gone = ["pending_acks", "cursors"]
    for name in gone:
        shutil.rmtree(table_path(warehouse, name))
    assert ensure_tables(spark, warehouse) == [name for name in TABLES if name in gone]
    assert ensure_tables(spark, warehouse) == []


def _checkpointed_rdd(frame: DataFrame) -> int:
    return frame._jdf.queryExecution().analyzed().rdd().id()  # type: ignore[attr-defined]


def test_release_frees_a_checkpoints_blocks_and_nothing_else(spark: SparkSession) -> None:
    freed = spark.range(1000).selectExpr("id * 2 AS y").localCheckpoint(eager=True)
    kept = spark.range(1000).localCheckpoint(eager=True)
    cached = spark.range(100).selectExpr("id + 1 AS z").persist()
    assert cached.count() == 100
    before = cached_rdds(spark)
    assert {_checkpointed_rdd(freed), _checkpointed_rdd(kept)} <= before

    for frame in (freed, cached, spark.range(3)):  # a cached frame and a plain one: no-ops
        release(frame)
    after = cached_rdds_when(spark, lambda cached: _checkpointed_rdd(freed) not in cached)
    assert after == before - {_checkpointed_rdd(freed)}
    assert kept.count() == 1000 and cached.count() == 100
    cached.unpersist()
